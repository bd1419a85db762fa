"""Compare robustness interventions: aggregate runs of several models into a leaderboard, and its stability.

The paper compares models by FMR (Table 2: ANT, SIN, AugMix, DeepAug, DAT on ResNet50; App. N leaderboards).
A dynamic benchmark draws new samples every run, so a ranking is only worth as much as its stability across
fresh runs (``../seeds/digest.md`` 5.3.5, S0 App. A.2). :func:`aggregate` turns finished run directories
(read through :mod:`genEval.rundir`) into a :class:`~genEval.leaderboard.Comparison`:

* per model, every score as the **mean over repetitions** with a 95% interval. With one repetition the
  interval is the run's own (Wilson for proportions, bootstrap over source images for FMR), so the
  leaderboard repeats ``results.json`` exactly. With several it is the bootstrap over source images of
  :func:`genEval.stats.bootstrap_scores`, which resamples each source's samples in *all* repetitions together
  (pooling repetitions as if independent would understate the interval when they share images);
* ranks by FMR and by SA with ``rank_diff = rank_sa - rank_fmr``;
* pairwise differences a - b, **paired** when repetition r of both models saw the same source images
  (stats.metric_differences);
* stability: Kendall tau-b between the FMR rankings of every pair of repetitions (meaningful when the
  repetitions drew fresh sources, see :mod:`genEval.repetitions`), and its **bootstrap distribution**: tau between
  the FMR ranking and the rankings of resamples of the source images (stats.rank_stability; mean, median,
  quantiles, share of resamples with the same order), Kendall tau between the FMR and SA rankings, and every pair
  of models whose FMR order flips between repetitions;
* effective robustness (S0; stats.fit_effective_robustness) fitted on the **named baseline models only**
  (``baselines``; without them ER is left out with a note: it is never fitted on the interventions it judges),
  gated on R^2, with a bootstrap interval over the source images (stats.er_intervals);
* a label-free diagnostic (S1): SoftmaxCorr of each model on its perturbed images and its Spearman correlation
  with PA across the models. The records hold hard decisions only, so P is one-hot (the model's class for each
  validated perturbed image) and q the class histogram of the oracle's verdicts on those images (the class it
  accepted, ``reference``): :func:`genEval.stats.hard_softmax_corr`;
* run cost per model: rejected steps per sample next to the run time (the paper's speed claim for the mask).

:func:`compare` first runs the models (:func:`genEval.repetitions.evaluate_repetitions`), then aggregates.
With ``out_dir`` the comparison's files are written there (:func:`genEval.leaderboard.write_comparison`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from genEval.leaderboard import (
    Comparison,
    Flip,
    LabelFree,
    LeaderboardRow,
    MetricEntry,
    Settings,
    Stability,
    TauPair,
    write_comparison,
)
from genEval.repetitions import check_model_names, evaluate_repetitions, repetition_seeds
from genEval.rundir import find_run_dirs, read_results, read_samples
from genEval.stats import (
    COMPARED_SCORES,
    LEADERBOARD_SCORES,
    MIN_BOOTSTRAP_SOURCES,
    Difference,
    ERFit,
    Outcomes,
    TauDistribution,
    bootstrap_scores,
    er_intervals,
    few_sources,
    fit_effective_robustness,
    hard_softmax_corr,
    kendall_tau,
    metric_differences,
    model_draws,
    per_class_table,
    rank,
    rank_stability,
    score_values,
    spearman,
)

log = logging.getLogger(__name__)

REP_RE = re.compile(r"^rep(\d+)$")


# ------------------------------------------------------------------------------------------ run loading
@dataclass(frozen=True)
class LoadedRun:
    """One finished run directory: its results.json, its per-sample records and outcomes, and its place."""

    model: str
    repetition: int
    run_dir: str
    results: dict
    records: list[dict]
    outcomes: Outcomes

    @classmethod
    def read(cls, model: str, repetition: int, run_dir: Path, results: dict | None = None) -> LoadedRun:
        records = read_samples(run_dir)
        return cls(
            model,
            repetition,
            str(run_dir),
            results if results is not None else read_results(run_dir),
            records,
            Outcomes.from_records(records),
        )


def _identity(run_dir: Path, results: dict) -> tuple[str, int | None]:
    """Model name and repetition of a run: recorded by compare(), else the runs/<model>/rep<r> layout,
    else the classifier's component id."""
    info = (results.get("config") or {}).get("comparison") or {}
    if info.get("model"):
        return str(info["model"]), info.get("repetition")
    m = REP_RE.match(run_dir.name)
    if m:
        return run_dir.parent.name, int(m.group(1))
    return str((results.get("components") or {}).get("classifier") or run_dir.name), None


def _group(
    run_dirs: Sequence[str | Path] | Mapping[str, Sequence[str | Path]],
) -> dict[str, list[tuple[int | None, Path, dict]]]:
    """model -> [(repetition or None, run dir, results)]: names from a mapping, else from each run."""
    grouped: dict[str, list[tuple[int | None, Path, dict]]] = {}
    if isinstance(run_dirs, Mapping):
        for name, dirs in run_dirs.items():
            found = find_run_dirs([dirs] if isinstance(dirs, (str, Path)) else dirs)
            grouped[str(name)] = [(None, p, read_results(p)) for p in found]
        return grouped
    found = find_run_dirs(run_dirs)
    twice = sorted({str(p) for p in found if found.count(p) > 1})
    if twice:
        raise ValueError(f"run directories given more than once: {twice}; pass each run once.")
    for p in found:
        results = read_results(p)
        name, r = _identity(p, results)
        grouped.setdefault(name, []).append((r, p, results))
    return grouped


def load_runs(run_dirs: Sequence[str | Path] | Mapping[str, Sequence[str | Path]]) -> dict[str, list[LoadedRun]]:
    """Load runs grouped by model, in repetition order; a mapping gives the names, a list infers them."""
    grouped = _group(run_dirs)
    if not grouped:
        raise ValueError("no run directories given; pass runs=[<run dir>, ...] or a comparison directory.")
    out: dict[str, list[LoadedRun]] = {}
    for name, items in grouped.items():
        reps = [r for r, _, _ in items]
        if all(r is not None for r in reps):
            dup = sorted({r for r in reps if reps.count(r) > 1})
            if dup:
                raise ValueError(
                    f"model {name!r} has more than one run for repetition(s) {dup}: "
                    f"{[str(p) for r, p, _ in items if r in dup]}. Pass each run once."
                )
            items = sorted(items, key=lambda t: t[0])
        else:  # no recorded repetition: the order of the directories is the repetition order
            items = [(i, p, res) for i, (_, p, res) in enumerate(sorted(items, key=lambda t: str(t[1])))]
        out[name] = [LoadedRun.read(name, int(r), p, res) for r, p, res in items]
    return out


# ------------------------------------------------------------------------------------------ building steps
def _check_same_classes(runs: Mapping[str, list[LoadedRun]]) -> list[str]:
    """The class names all runs share; a run on other classes is an error."""
    first = next(iter(runs.values()))[0]
    class_names = list(first.results.get("class_names") or [])
    for name, reps in runs.items():
        for run in reps:
            if list(run.results.get("class_names") or []) != class_names:
                raise ValueError(
                    f"run {run.run_dir} ({name}) has classes {run.results.get('class_names')} but "
                    f"{first.run_dir} has {class_names}; compare runs on the same data."
                )
    return class_names


def _component_warnings(runs: Mapping[str, list[LoadedRun]]) -> list[str]:
    out = []
    for role in ("data", "generator", "oracle"):
        ids = {str((r.results.get("components") or {}).get(role)) for reps in runs.values() for r in reps}
        if len(ids) > 1:
            out.append(
                f"the runs use different {role}s ({', '.join(sorted(ids))}); differences then mix the "
                f"{role} with the model."
            )
    return out


NO_BASELINES = (
    "left out: effective robustness is fitted on baseline models only, never on the interventions it "
    "judges; name them with baselines=[...] (standard models, e.g. ERM-trained) to get it"
)


def _baseline_set(models: list[str], baselines: Sequence[str] | None) -> set[str]:
    base = set() if baselines is None else set(map(str, baselines))
    unknown = base - set(models)
    if unknown:
        raise ValueError(
            f"baselines {sorted(unknown)} are not among the compared models ({', '.join(models)}); "
            "set baselines to a subset of the model names, or null to leave ER out."
        )
    return base


def _score_entries(
    reps: list[LoadedRun], num_classes: int, n_boot: int, seed: int, level: float
) -> dict[str, MetricEntry]:
    """Every leaderboard score of one model: the run's own estimate (one repetition) or the bootstrap mean."""
    per_rep = {
        k: [None if np.isnan(v) else float(v) for v in vals]
        for k, vals in score_values(
            np.stack([r.outcomes.totals() for r in reps]), num_classes, LEADERBOARD_SCORES
        ).items()
    }
    own = reps[0].results.get("scores", {})
    if len(reps) == 1 and all(k in own for k in LEADERBOARD_SCORES):
        estimates: Mapping[str, Any] = own
    else:
        budget = ((reps[0].results.get("config") or {}).get("search") or {}).get("budget")
        estimates = bootstrap_scores(
            [r.outcomes for r in reps],
            num_classes,
            LEADERBOARD_SCORES,
            n_boot=n_boot,
            seed=seed,
            level=level,
            context={"budget": budget},
        )
    out = {}
    for k in LEADERBOARD_SCORES:
        defined = [v for v in per_rep[k] if v is not None]
        std = float(np.std(defined, ddof=1)) if len(defined) > 1 else None
        out[k] = MetricEntry.of(estimates[k], per_rep[k], std)
    return out


def _mean(values: Sequence[float | None]) -> float | None:
    defined = [v for v in values if v is not None]
    return float(np.mean(defined)) if defined else None


def _cost_and_label_free(reps: list[LoadedRun], num_classes: int) -> dict[str, float | None]:
    """Run cost (rejections and steps per sample, run time) and hard-label SoftmaxCorr, means over repetitions."""

    def steps(run: LoadedRun) -> float | None:
        judged = [int(r.get("accepted_steps", 0)) + (int(r.get("rejected_at", -1)) > 0) for r in run.records]
        return float(np.mean(judged)) if judged else None

    def corr(o: Outcomes) -> float | None:
        v = o.validated
        return hard_softmax_corr(o.predictions[v], o.references[v], num_classes)

    timings = [r.results.get("timings") or {} for r in reps]
    return {
        "rejected_per_sample": _mean([float(r.outcomes.rejected.mean()) if len(r.outcomes) else None for r in reps]),
        "steps_per_sample": _mean([steps(r) for r in reps]),
        "time_s": _mean([t.get("total_s") for t in timings]),
        "time_per_sample_s": _mean([t.get("per_sample_s") for t in timings]),
        "softmax_corr": _mean([corr(r.outcomes) for r in reps]),
    }


def _order(entries: Mapping[str, Mapping[str, MetricEntry]]) -> tuple[list[str], dict, dict]:
    """Models sorted by FMR rank (ties and undefined by name), with the FMR and SA ranks."""
    models = list(entries)
    fmr_ranks = dict(zip(models, rank([entries[m]["fmr"].value for m in models])))
    sa_ranks = dict(zip(models, rank([entries[m]["sa"].value for m in models])))
    order = sorted(models, key=lambda m: (fmr_ranks[m] is None, fmr_ranks[m] or 0, m))
    return order, fmr_ranks, sa_ranks


def _effective_robustness(
    order: list[str],
    entries: Mapping[str, Mapping[str, MetricEntry]],
    base: set[str],
    er_min_r2: float,
    draws: np.ndarray,
    n_sources: int,
) -> ERFit:
    """ER over the named baselines (none named: left out), with its bootstrap interval over the sources."""
    if not base:
        return ERFit.unfitted(len(order), NO_BASELINES, min_r2=er_min_r2)
    er = fit_effective_robustness(
        [entries[m]["sa"].value for m in order],
        [entries[m]["pa"].value for m in order],
        [m in base for m in order],
        min_r2=er_min_r2,
    )
    if n_sources < MIN_BOOTSTRAP_SOURCES:
        return er_intervals(er, draws[:0, :, 0], draws[:0, :, 1], how=few_sources(n_sources))
    return er_intervals(er, draws[:, :, 0], draws[:, :, 1])


def _rows(
    runs: Mapping[str, list[LoadedRun]],
    entries: Mapping[str, dict[str, MetricEntry]],
    order: list[str],
    ranks: tuple[dict, dict],
    base: set[str],
    er: ERFit,
    num_classes: int,
) -> list[LeaderboardRow]:
    """Leaderboard rows in ``order`` with ranks, ER (and its interval), run cost and the label-free score."""
    fmr_ranks, sa_ranks = ranks
    rows = []
    for i, m in enumerate(order):
        reps = runs[m]
        rf, rs = fmr_ranks[m], sa_ranks[m]
        pa = entries[m]["pa"]
        n_validated = float(np.mean([r.outcomes.validated.sum() for r in reps]))
        warnings = (
            [
                "PA is 100: every accepted image is still correct for this model; it may be (part of) the "
                "oracle, which makes its PA and FMR meaningless."
            ]
            if pa.value == 100.0 and n_validated
            else []
        )
        rows.append(
            LeaderboardRow(
                model=m,
                scores=entries[m],
                rank_fmr=rf,
                rank_sa=rs,
                rank_diff=None if rf is None or rs is None else rs - rf,
                baseline=m in base,
                repetitions=len(reps),
                n=float(np.mean([len(r.outcomes) for r in reps])),
                n_validated=n_validated,
                er=er.er[i],
                er_predicted_pa=er.predicted[i],
                er_low=er.er_low[i] if er.er_low else None,
                er_high=er.er_high[i] if er.er_high else None,
                **_cost_and_label_free(reps, num_classes),
                components=reps[0].results.get("components", {}),
                seeds=[r.results.get("seed") for r in reps],
                run_dirs=[r.run_dir for r in reps],
                warnings=warnings,
            )
        )
    return rows


def _differences(
    order: list[str], outcomes: Mapping[str, list[Outcomes]], num_classes: int, n_boot: int, seed: int, level: float
) -> list[Difference]:
    """Every pair of models (a above b on the leaderboard), every compared score."""
    out = []
    for a, b in combinations(order, 2):
        res = metric_differences(
            outcomes[a], outcomes[b], num_classes, COMPARED_SCORES, names=(a, b), n_boot=n_boot, seed=seed, level=level
        )
        out += [res[k] for k in COMPARED_SCORES]
    return out


# ------------------------------------------------------------------------------------------ stability
def identical_repetitions(runs: Mapping[str, list[LoadedRun]]) -> bool:
    """True when some model has >= 2 repetitions and all of every model's repetitions are identical."""
    keys = ("source_id", "clean_pred", "recon_pred", "validated", "accepted_steps", "final_pred", "first_fooled")
    multi = [reps for reps in runs.values() if len(reps) > 1]
    if not multi:
        return False

    def sig(run: LoadedRun) -> list[tuple]:
        return [tuple(rec.get(k) for k in keys) for rec in run.records]

    return all(sig(r) == sig(reps[0]) for reps in multi for r in reps[1:])


def _flips(models: list[str], per_rep: np.ndarray, diffs: Sequence[Difference]) -> list[Flip]:
    """Pairs of models whose FMR order differs between repetitions; per_rep: (models, repetitions), NaN = undefined."""
    separated = {(d.a, d.b): d.excludes_zero for d in diffs if d.metric == "fmr"}
    out = []
    for i, j in combinations(range(len(models)), 2):
        d = per_rep[i] - per_rep[j]
        hi_a, hi_b = [int(r) for r in np.nonzero(d > 0)[0]], [int(r) for r in np.nonzero(d < 0)[0]]
        if hi_a and hi_b:
            a, b = models[i], models[j]
            out.append(Flip(a, b, hi_a, hi_b, separated.get((a, b), separated.get((b, a)))))
    return out


def sources_resampled(runs: Mapping[str, list[LoadedRun]]) -> bool | None:
    """Whether some model's repetitions evaluated different source images; None below 2 repetitions."""
    multi = [reps for reps in runs.values() if len(reps) > 1]
    if not multi:
        return None
    return any(len({frozenset(r.outcomes.ids.tolist()) for r in reps}) > 1 for reps in multi)


def stability(
    rows: Sequence[LeaderboardRow],
    diffs: Sequence[Difference],
    identical: bool = False,
    tau_bootstrap: TauDistribution | None = None,
    resampled: bool | None = None,
) -> Stability:
    """Kendall tau between repetitions' FMR rankings, its bootstrap distribution (``tau_bootstrap``), FMR-vs-SA
    tau, and FMR order flips."""
    models = [r.model for r in rows]
    n_reps = min(len(r["fmr"].per_rep) for r in rows)
    per_rep = np.array([[np.nan if v is None else v for v in r["fmr"].per_rep[:n_reps]] for r in rows], dtype=float)
    taus = []
    for r1, r2 in combinations(range(n_reps), 2):
        ok = ~np.isnan(per_rep[:, r1]) & ~np.isnan(per_rep[:, r2])
        tau = kendall_tau(per_rep[ok, r1], per_rep[ok, r2]) if ok.sum() >= 2 else None
        taus.append(TauPair([r1, r2], tau, int(ok.sum())))
    defined = [t.tau for t in taus if t.tau is not None]
    both = [r for r in rows if r["fmr"].value is not None and r["sa"].value is not None]
    note = (
        "needs at least 2 repetitions"
        if n_reps < 2
        else "needs at least 2 models with FMR defined in two repetitions"
        if not defined
        else ""
    )
    return Stability(
        repetitions=n_reps,
        tau_reps=taus,
        tau_reps_mean=float(np.mean(defined)) if defined else None,
        tau_reps_min=float(np.min(defined)) if defined else None,
        tau_reps_note=note,
        tau_fmr_sa=kendall_tau([r["fmr"].value for r in both], [r["sa"].value for r in both])
        if len(both) >= 2
        else None,
        flips=_flips(models, per_rep, diffs),
        identical_repetitions=identical,
        tau_bootstrap=tau_bootstrap,
        sources_resampled=resampled,
    )


def _stability_warnings(stab: Stability) -> list[str]:
    out = []
    if stab.identical_repetitions:
        out.append(
            "every repetition produced the same per-sample outcomes (the search has no randomness, e.g. "
            "search.start_noise=0, and the data are the same), so rank stability is trivially perfect; set "
            "search.start_noise > 0 for repetitions that differ, or use repetitions=1."
        )
    elif stab.sources_resampled is False:
        out.append(
            "every repetition evaluated the same source images (the data were not re-drawn: use "
            "data.subset=random with data.limit, or data with a with_seed(seed) hook), so tau between "
            "repetitions reflects the start noise only; the bootstrap distribution over source images "
            "measures the sampling of sources."
        )
    if stab.flips:
        out.append(
            f"{len(stab.flips)} pair(s) of models change FMR order between repetitions; their ranking is "
            "not stable (see stability.flips and the paired differences)."
        )
    return out


def _comparison_record(runs: Mapping[str, list[LoadedRun]]) -> list[dict]:
    """``config.comparison`` of the first model's runs (what compare() recorded), one per repetition."""
    first = next(iter(runs.values()))
    return [(r.results.get("config") or {}).get("comparison") or {} for r in first]


def _settings(
    runs: Mapping[str, list[LoadedRun]],
    num_classes: int,
    n_boot: int,
    seed: int,
    level: float,
    er_min_r2: float,
    repetition_seeds: list[int] | None,
    baselines: set[str],
) -> Settings:
    first_reps = next(iter(runs.values()))
    first = first_reps[0].results
    n_reps = sorted({len(v) for v in runs.values()})
    note = (
        "single run's interval (Wilson for proportions, bootstrap over source images for FMR)"
        if n_reps == [1]
        else "bootstrap over source images, all repetitions resampled together (one repetition: the run's own)"
    )
    recorded = _comparison_record(runs)
    return Settings(
        repetitions=n_reps[0] if len(n_reps) == 1 else n_reps,
        n_boot=n_boot,
        level=level,
        bootstrap_seed=seed,
        er_min_r2=er_min_r2,
        interval_note=note,
        repetition_seeds=repetition_seeds or [r.results.get("seed") for r in first_reps],
        num_classes=num_classes,
        created=time.strftime("%Y-%m-%d %H:%M:%S"),
        components={k: (first.get("components") or {}).get(k) for k in ("data", "generator", "oracle", "mask")},
        search=(first.get("config") or {}).get("search"),
        baselines=sorted(baselines) or None,
        mask=recorded[0].get("mask"),
        data_seeds=[c.get("data_seed") for c in recorded],
    )


def _label_free(rows: Sequence[LeaderboardRow]) -> LabelFree:
    rho = spearman([r.softmax_corr for r in rows], [r["pa"].value for r in rows])
    n = sum(r.softmax_corr is not None and r["pa"].value is not None for r in rows)
    return LabelFree(
        rho,
        n,
        "hard decisions: P one-hot from the model's class for each validated perturbed image, "
        "q the histogram of the oracle's accepted class; the records hold no softmax vectors",
        "" if rho is not None else "needs at least 3 models with SoftmaxCorr and PA defined and not all equal",
    )


def build_comparison(
    runs: Mapping[str, list[LoadedRun]],
    *,
    baselines: Sequence[str] | None = None,
    er_min_r2: float = 0.8,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    repetition_seeds: list[int] | None = None,
) -> Comparison:
    """Aggregate loaded runs (model -> repetitions, see :func:`load_runs`) into a Comparison; no I/O."""
    if not runs:
        raise ValueError("no runs to compare.")
    class_names = _check_same_classes(runs)
    num_classes = int(next(iter(runs.values()))[0].results["scores"]["num_classes"])
    base = _baseline_set(list(runs), baselines)
    entries = {m: _score_entries(reps, num_classes, n_boot, seed, level) for m, reps in runs.items()}
    order, fmr_ranks, sa_ranks = _order(entries)
    outcomes = {m: [r.outcomes for r in runs[m]] for m in order}
    point, draws, g = model_draws([outcomes[m] for m in order], num_classes, ("sa", "pa", "fmr"), n_boot, seed)
    er = _effective_robustness(order, entries, base, er_min_r2, draws, g)
    rows = _rows(runs, entries, order, (fmr_ranks, sa_ranks), base, er, num_classes)
    diffs = _differences(order, outcomes, num_classes, n_boot, seed, level)
    stab = stability(
        rows,
        diffs,
        identical_repetitions(runs),
        rank_stability(point[:, 2], draws[:, :, 2], score="fmr", n_sources=g, level=level),
        sources_resampled(runs),
    )
    warnings = [
        *_component_warnings(runs),
        *(f"{r.model}: {w}" for r in rows for w in r.warnings),
        *_stability_warnings(stab),
    ]
    per_class = {
        m: per_class_table(Outcomes.from_records([x for r in runs[m] for x in r.records]), class_names) for m in order
    }
    return Comparison(
        leaderboard=rows,
        differences=diffs,
        stability=stab,
        effective_robustness=er,
        runs={m: [r.run_dir for r in runs[m]] for m in order},
        seeds={m: [r.results.get("seed") for r in runs[m]] for m in order},
        class_names=class_names,
        per_class=per_class,
        settings=_settings(runs, num_classes, n_boot, seed, level, er_min_r2, repetition_seeds, base),
        warnings=warnings,
        label_free=_label_free(rows),
    )


def aggregate(
    run_dirs: Sequence[str | Path] | Mapping[str, Sequence[str | Path]],
    *,
    out_dir: str | Path | None = None,
    baselines: Sequence[str] | None = None,
    er_min_r2: float = 0.8,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    repetition_seeds: list[int] | None = None,
) -> Comparison:
    """Build a :class:`~genEval.leaderboard.Comparison` from finished run directories.

    ``run_dirs``: run directories or folders containing them (e.g. a comparison's ``runs/``), or a mapping
    model name -> its run directories (one per repetition). Names and repetitions otherwise come from what
    compare() recorded, the ``<model>/rep<r>`` layout, or the classifier id. ``seed`` seeds the bootstraps.
    ``baselines``: the models effective robustness is fitted on (None: ER is left out, with a note).
    With ``out_dir`` the comparison files are written there (not the report: genEval.report.write_report).
    """
    comp = build_comparison(
        load_runs(run_dirs),
        baselines=baselines,
        er_min_r2=er_min_r2,
        n_boot=n_boot,
        seed=seed,
        level=level,
        repetition_seeds=repetition_seeds,
    )
    if out_dir is not None:
        comp = write_comparison(comp, out_dir)
    log.info(
        "compared %d models (%s); leaderboard by FMR: %s",
        len(comp.models),
        comp.settings.interval_note,
        ", ".join(comp.models),
    )
    return comp


def compare(
    classifiers: Mapping[str, Any],
    data: Any,
    generator: Any,
    oracle: Any,
    search: Any = None,
    *,
    repetitions: int = 1,
    seeds: Sequence[int] | int | None = None,
    out_dir: str | Path,
    baselines: Sequence[str] | None = None,
    progress: bool | None = True,
    er_min_r2: float = 0.8,
    n_boot: int = 1000,
    level: float = 0.95,
    run_configs: Mapping[str, dict] | None = None,
    mask: Any = None,
    mask_reference: str | None = None,
    **evaluate_kwargs: Any,
) -> Comparison:
    """Evaluate every classifier ``repetitions`` times and compare them (see the module docstring).

    ``classifiers``: name -> classifier, or name -> zero-argument factory. ``data``: a data set; one with a
    ``with_seed(seed)`` method (or a factory ``seed -> data``) is re-drawn per repetition with the repetition's
    seed, shared by every model of that repetition (:func:`genEval.repetitions.data_for_seed`). ``seeds``: one
    per repetition (the same for every model within a repetition), an int to derive them, or None for fresh
    seeds; they are recorded. ``baselines``: the models effective robustness is fitted on (None: ER is left
    out). ``mask``: a mask for every run; ``AutoMask`` (``mask=auto``) is fitted once with the model named by
    ``mask_reference`` and reused for every model. ``run_configs``: per model, the config recorded in its
    results.json. Other keyword arguments go to ``genEval.evaluate`` (batch_size, device, save_images, ...).
    Writes the runs and the comparison files into ``out_dir``.
    """
    check_model_names(list(classifiers))
    seeds_used = repetition_seeds(seeds, repetitions)
    if baselines is not None:
        unknown = set(map(str, baselines)) - set(map(str, classifiers))
        if unknown:
            raise ValueError(
                f"baselines {sorted(unknown)} are not among the classifiers ({', '.join(map(str, classifiers))})."
            )
    dirs = evaluate_repetitions(
        classifiers,
        data,
        generator,
        oracle,
        search,
        seeds_used,
        out_dir,
        progress=progress,
        run_configs=run_configs,
        n_boot=n_boot,
        mask=mask,
        mask_reference=mask_reference,
        **evaluate_kwargs,
    )
    return aggregate(
        dirs,
        out_dir=out_dir,
        baselines=baselines,
        er_min_r2=er_min_r2,
        n_boot=n_boot,
        level=level,
        repetition_seeds=seeds_used,
    )
