"""``geneval compare shift=corruptions``: every model scored on fixed ImageNet-C corruptions of the SAME source
images its search started from, beside FMR_v (the paper's Table 2 contrast; the scores are
:mod:`genEval.scores.fixed_shift`).

:func:`score_corruptions` re-draws each repetition's sources (the repetition's seed, as the comparison's runs did:
:func:`genEval.campaigns.draws.data_for_seed`), corrupts every source once per corruption and severity
(:func:`genEval.data.corruptions.corrupt_image`, seeded by ``shift.seed`` and the source id, so a source gets the same
corrupted image in every repetition and for every model) and records whether each model is right on each, written
to ``<out_dir>/shift/corruptions.npz`` (atomically; a rerun with the same settings reads it back).
:func:`attach_fixed_shift` turns that into per-model accuracies with intervals and Kendall tau against FMR_v, all
from one bootstrap over the source images that resamples the search's outcomes and the corruption outcomes
together (:func:`genEval.scores.intervals.bootstrap`), so the two rankings of a resample are paired.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from genEval.campaigns.clean_scoring import check_classes, per_model, predict_correct
from genEval.campaigns.draws import data_for_seed
from genEval.comparisons.leaderboard import Comparison, write_comparison
from genEval.comparisons.loading import load_runs
from genEval.comparisons.settings import ComparisonSettings
from genEval.data.corruptions import FAMILIES, check_corruptions, corrupt_image, family_of, image_seed
from genEval.fileio import atomic_write_bytes
from genEval.interfaces import component_id
from genEval.scores.fixed_shift import FixedShift, Interval, ShiftRow
from genEval.scores.intervals import MIN_BOOTSTRAP_SOURCES, bootstrap, few_sources, percentile, rep_mean, source_sums
from genEval.scores.rankings import kendall_tau, rank
from genEval.search.execution import Execution

log = logging.getLogger(__name__)
SHIFTS = ("corruptions",)


@dataclass(frozen=True)
class CorruptionScores:
    """Per model, ``correct`` (N, C, S) bool: right on source ``ids[n]`` under corruption ``corruptions[c]`` at
    severity ``severities[s]``; N runs over every repetition's sources in turn (a source drawn twice appears twice)."""

    corruptions: list[str]
    severities: list[int]
    seed: int
    ids: np.ndarray
    correct: dict[str, np.ndarray]
    package: str


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"imagecorruptions-imaug {version('imagecorruptions-imaug')}"
    except PackageNotFoundError:  # pragma: no cover - the import itself would have failed first
        return "imagecorruptions"


def _meta(names: list[str], sev: list[int], seed: int, seeds: Sequence[int], data: Any) -> dict:
    return {
        "corruptions": names,
        "severities": sev,
        "seed": int(seed),
        "repetition_seeds": [int(s) for s in seeds],
        "data": component_id(data),
    }


def _read(path: Path, meta: dict, models: Sequence[str]) -> CorruptionScores | None:
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as z:
        saved = json.loads(str(z["meta"]))
        if {k: saved.get(k) for k in meta} != meta or not all(f"correct/{m}" in z for m in models):
            return None
        return CorruptionScores(
            meta["corruptions"],
            meta["severities"],
            meta["seed"],
            z["ids"].astype(str),
            {m: z[f"correct/{m}"] for m in models},
            saved.get("package", ""),
        )


def score_corruptions(
    classifiers: Mapping[str, Any],
    data: Any,
    repetition_seeds: Sequence[int],
    out_dir: str | Path,
    *,
    corruptions: Sequence[str] | None = None,
    severities: Sequence[int] | None = None,
    seed: int = 0,
    execution: Execution | None = None,
) -> CorruptionScores:
    """Every model on the corrupted sources of every repetition (see the module docstring)."""
    names, sev = check_corruptions(corruptions, severities)
    path = Path(out_dir) / "shift" / "corruptions.npz"
    meta = _meta(names, sev, seed, repetition_seeds, data)
    if (found := _read(path, meta, list(classifiers))) is not None:
        log.info("shift=corruptions: scores read back from %s", path)
        return found
    images, labels, ids = [], [], []
    for r_seed in repetition_seeds:
        drawn, _ = data_for_seed(data, int(r_seed))
        for i in range(len(drawn)):
            x, y, sid = drawn[i]
            stack = [corrupt_image(x, c, s, image_seed(seed, sid, c, s)) for c in names for s in sev]
            images.append(torch.stack(stack))  # (C*S, channels, H, W)
            labels.append(int(y))
            ids.append(str(sid))
    log.info("shift=corruptions: %d sources x %d corruptions x %d severities", len(ids), len(names), len(sev))
    batch = torch.stack(images)  # (N, C*S, channels, H, W)
    y = torch.tensor(labels)

    def score(name: str, clf: Any, device: Any) -> np.ndarray:
        check_classes(name, clf, list(data.class_names), f"data {component_id(data)}")
        out = np.zeros((len(ids), len(names) * len(sev)), bool)
        for j in range(out.shape[1]):
            for start in range(0, len(ids), 256):
                sl = slice(start, start + 256)
                out[sl, j] = predict_correct(clf, batch[sl, j], y[sl], device)
        return out.reshape(len(ids), len(names), len(sev))

    correct = per_model(classifiers, score, execution)
    package = _package_version()
    buf = io.BytesIO()
    np.savez_compressed(
        buf,
        meta=json.dumps({**meta, "package": package}),
        ids=np.asarray(ids),
        **{f"correct/{m}": v for m, v in correct.items()},
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, buf.getvalue())
    return CorruptionScores(names, sev, int(seed), np.asarray(ids), correct, package)


def _statistic(bounds: np.ndarray, n_models: int, n_corr: int, num_classes: int):
    fmr_v = rep_mean(("fmr_validated",), num_classes)

    def stat(outcome_sums: np.ndarray, corr_sums: np.ndarray) -> np.ndarray:
        f = np.concatenate([fmr_v(outcome_sums[:, bounds[m] : bounds[m + 1]]) for m in range(n_models)], axis=1)
        c = corr_sums[:, 0]
        with np.errstate(invalid="ignore", divide="ignore"):
            acc = 100.0 * c[:, :-1] / c[:, -1:]
        return np.concatenate([f, acc], axis=1)  # (B, M + M*C)

    return stat


def attach_fixed_shift(
    comp: Comparison, scores: CorruptionScores, settings: ComparisonSettings | None = None, write: bool = True
) -> Comparison:
    """The comparison with its fixed-shift column (``comp.fixed_shift``); with ``write`` and an ``out_dir`` its
    files are rewritten."""
    settings = ComparisonSettings.coerce(settings)
    models, names = comp.models, scores.corruptions
    runs = load_runs({m: [d for d in comp.runs[m] if (Path(d) / "results.json").is_file()] for m in models})
    flat = [r.outcomes for m in models for r in runs[m]]
    bounds = np.cumsum([0, *(len(runs[m]) for m in models)])
    outcome_sums = source_sums(flat)  # (R, G, K), sources = the sorted union of the outcomes' ids
    union = np.unique(np.concatenate([np.asarray(o.ids, dtype=str) for o in flat]))
    where = {s: g for g, s in enumerate(union)}
    missing = sorted(set(scores.ids.tolist()) - set(where))
    if missing:
        raise ValueError(
            f"shift=corruptions: sources {missing[:3]} were corrupted but appear in no run of the comparison; the "
            "corruptions must be of the same sources (score them with the comparison's repetition seeds and data)."
        )
    g_of = np.asarray([where[s] for s in scores.ids.tolist()])
    n_c, n_s = len(names), len(scores.severities)
    corr = np.zeros((1, len(union), len(models) * n_c + 1))
    for j, m in enumerate(models):
        np.add.at(corr[0, :, j * n_c : (j + 1) * n_c], g_of, scores.correct[m].sum(2))
    np.add.at(corr[0, :, -1], g_of, n_s)
    stat = _statistic(bounds, len(models), n_c, int(comp.settings.num_classes))
    point = stat(outcome_sums.sum(1)[None], corr.sum(1)[None])[0]
    n_src = len(set(scores.ids.tolist()))
    enough = n_src >= MIN_BOOTSTRAP_SOURCES
    draws = (
        bootstrap([outcome_sums, corr], stat, settings.n_boot, np.random.default_rng([settings.seed, 7]))
        if enough
        else np.full((0, len(point)), np.nan)
    )
    fams = {f: [c for c in cs if c in names] for f, cs in FAMILIES.items() if any(c in names for c in cs)}

    def split(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # (..., M + M*C) -> FMR_v (..., M), acc (..., M, C)
        return v[..., : len(models)], v[..., len(models) :].reshape(*v.shape[:-1], len(models), n_c)

    f_pt, a_pt = split(point)
    f_dr, a_dr = split(draws)

    def summary(acc: np.ndarray, cols: list[int]) -> np.ndarray:
        return acc[..., cols].mean(-1)

    def iv(pt: float, dr: np.ndarray) -> Interval:
        if not np.isfinite(pt):
            return Interval(None)
        lo, hi = percentile(dr, settings.level) if len(dr) else (None, None)
        return Interval(float(pt), lo, hi)

    all_cols = list(range(n_c))
    overall_pt, overall_dr = summary(a_pt, all_cols), summary(a_dr, all_cols)
    r_f, r_s = rank([None if not np.isfinite(v) else float(v) for v in f_pt]), rank(list(map(float, overall_pt)))
    rows = []
    for j, m in enumerate(models):
        per_sev = scores.correct[m].mean(axis=(0, 1)) * 100.0
        rows.append(
            ShiftRow(
                model=m,
                overall=iv(overall_pt[j], overall_dr[:, j]),
                families={
                    f: iv(
                        summary(a_pt, [names.index(c) for c in cs])[j],
                        summary(a_dr, [names.index(c) for c in cs])[:, j],
                    )
                    for f, cs in fams.items()
                },
                corruptions={c: float(a_pt[j, i]) for i, c in enumerate(names)},
                severities={str(s): float(per_sev[i]) for i, s in enumerate(scores.severities)},
                fmr_validated=iv(f_pt[j], f_dr[:, j]),
                rank_fmr_validated=r_f[j],
                rank_shift=r_s[j],
            )
        )
    ok = np.isfinite(f_pt)
    tau_pt = kendall_tau(f_pt[ok], overall_pt[ok]) if ok.sum() >= 2 else None
    taus = [
        t
        for fd, od in zip(f_dr, overall_dr)
        if (keep := np.isfinite(fd) & np.isfinite(od)).sum() >= 2 and (t := kendall_tau(fd[keep], od[keep])) is not None
    ]
    lo, hi = percentile(np.asarray(taus, dtype=float), settings.level) if taus and tau_pt is not None else (None, None)
    method = (
        f"bootstrap({settings.n_boot}) over {n_src} source images, search outcomes and corruptions resampled together"
        if enough
        else few_sources(n_src)
    )
    notes = [] if len(models) >= 3 else ["with fewer than 3 models Kendall tau is +-1 or undefined"]
    shift = FixedShift(
        kind="corruptions",
        corruptions=list(names),
        severities=list(scores.severities),
        families=fams,
        package=scores.package,
        seed=scores.seed,
        n_sources=n_src,
        rows=rows,
        tau=Interval(tau_pt, lo, hi),
        method=method,
        notes=notes,
    )
    log.info("shift=corruptions: Kendall tau(FMR_v, corruption accuracy) = %s", shift.tau.fmt(3))
    comp = replace(comp, fixed_shift=shift)
    return write_comparison(comp, comp.out_dir) if write and comp.out_dir else comp


__all__ = ["SHIFTS", "CorruptionScores", "attach_fixed_shift", "score_corruptions", "family_of"]
