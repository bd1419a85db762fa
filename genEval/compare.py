"""Compare robustness interventions: one dynamic evaluation per model and repetition, then a leaderboard.

The paper compares models by FMR (Table 2: ANT, SIN, AugMix, DeepAug, DAT on ResNet50; App. N
leaderboards). A dynamic benchmark draws new samples every run, so a ranking is only worth as much as its
stability across fresh runs (``../seeds/digest.md`` 5.3.5, S0 App. A.2). This module therefore:

* runs ``genEval.evaluate`` ``repetitions`` times per model; repetition ``r`` uses the **same seed for
  every model** (same source images, same start noise), a **fresh seed per repetition**, all recorded;
* aggregates per model: SA, RA, VR, PA, FMR and chance-corrected FMR as the **mean over repetitions**
  with a 95% interval. With one repetition the interval is the run's own (Wilson for proportions,
  bootstrap over source images for FMR), so the leaderboard repeats ``results.json`` exactly. With
  several, the interval is a percentile bootstrap over source images that resamples each source's
  samples in *all* repetitions together and recomputes the mean over repetitions (pooling repetitions as
  if independent would understate the interval: SA is the same images every time);
* ranks models by FMR and by SA with ``rank_diff = rank_sa - rank_fmr`` (timm's results convention:
  positive = the model ranks higher on FMR than on SA);
* pairwise differences a - b with intervals from a bootstrap over source images, **paired** (pairing key
  ``(repetition, source id)``) when the models share source images (stats.metric_differences);
* stability: Kendall tau-b between the FMR rankings of every pair of repetitions (mean, min), Kendall tau
  between the FMR and SA rankings, and every pair of models whose FMR order flips between repetitions;
* effective robustness (S0; stats.fit_effective_robustness) over the baseline models, gated on R^2.

Outputs in ``out_dir``: ``runs/<model>/rep<r>/`` (run directories), ``leaderboard.csv``,
``leaderboard.md``, ``models/<model>.json``, ``comparison.json`` and ``report.html`` (genEval.report).
"""

from __future__ import annotations

import csv
import inspect
import io
import json
import logging
import re
import secrets
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from genEval.rundir import find_run_dirs, read_results, read_samples
from genEval.stats import (
    METRIC_LABELS,
    METRICS,
    Outcomes,
    bootstrap_scores,
    fit_effective_robustness,
    format_estimate,
    kendall_tau,
    metric_differences,
    per_class_table,
    rank,
)

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
REP_RE = re.compile(r"^rep(\d+)$")
DIFF_METRICS = ("sa", "vr", "pa", "fmr", "fmr_chance_corrected")
COMPARISON_SCHEMA = 1


# ------------------------------------------------------------------------------------------ run loading
@dataclass
class LoadedRun:
    """One finished run directory: its results.json, its per-sample records and where it came from."""

    model: str
    repetition: int
    run_dir: str
    results: dict
    records: list[dict]

    @property
    def outcomes(self) -> Outcomes:
        return Outcomes.from_records(self.records)


def _infer_identity(run_dir: Path, results: dict) -> tuple[str, int | None]:
    """Model name and repetition of a run: recorded by compare(), else the runs/<model>/rep<r> layout,
    else the classifier's component id."""
    info = (results.get("config") or {}).get("comparison") or {}
    if info.get("model"):
        return str(info["model"]), info.get("repetition")
    m = REP_RE.match(run_dir.name)
    if m:
        return run_dir.parent.name, int(m.group(1))
    return str((results.get("components") or {}).get("classifier") or run_dir.name), None


def load_runs(
    run_dirs: Sequence[str | Path] | Mapping[str, Sequence[str | Path]],
) -> dict[str, list[LoadedRun]]:
    """Load runs grouped by model; a mapping gives the names, a list infers them (see _infer_identity)."""
    grouped: dict[str, list[tuple[int | None, Path]]] = {}
    if isinstance(run_dirs, Mapping):
        for name, dirs in run_dirs.items():
            grouped[str(name)] = [
                (None, p) for p in find_run_dirs([dirs] if isinstance(dirs, (str, Path)) else dirs)
            ]
        results_of = {p: read_results(p) for v in grouped.values() for _, p in v}
    else:
        found = find_run_dirs(run_dirs)
        twice = sorted({str(p) for p in found if found.count(p) > 1})
        if twice:
            raise ValueError(f"run directories given more than once: {twice}; pass each run once.")
        results_of = {p: read_results(p) for p in found}
        for p, res in results_of.items():
            name, r = _infer_identity(p, res)
            grouped.setdefault(name, []).append((r, p))
    if not grouped:
        raise ValueError("no run directories given; pass runs=[<run dir>, ...] or a comparison directory.")
    out: dict[str, list[LoadedRun]] = {}
    for name, items in grouped.items():
        reps = [r for r, _ in items]
        if all(r is not None for r in reps):
            dup = {r for r in reps if reps.count(r) > 1}
            if dup:
                raise ValueError(
                    f"model {name!r} has more than one run for repetition(s) {sorted(dup)}: "
                    f"{[str(p) for r, p in items if r in dup]}. Pass each run once."
                )
            items = sorted(items, key=lambda t: t[0])
        else:  # no recorded repetition: the order of the directories is the repetition order
            items = [(i, p) for i, (_, p) in enumerate(sorted(items, key=lambda t: str(t[1])))]
        out[name] = [LoadedRun(name, int(r), str(p), results_of[p], read_samples(p)) for r, p in items]
    return out


# ------------------------------------------------------------------------------------------ comparison
@dataclass
class Comparison:
    """A model comparison: leaderboard rows (sorted by FMR rank), differences, stability, ER, provenance.

    Every number is a plain float/int (None when undefined), the same names as in results.json.
    """

    leaderboard: list[dict]
    differences: list[dict]
    stability: dict
    effective_robustness: dict
    runs: dict[str, list[str]]
    seeds: dict[str, list[int]]
    class_names: list[str]
    per_class: dict[str, list[dict]]
    settings: dict
    warnings: list[str] = field(default_factory=list)
    out_dir: str | None = None

    @property
    def models(self) -> list[str]:
        return [row["model"] for row in self.leaderboard]

    def row(self, model: str) -> dict:
        for r in self.leaderboard:
            if r["model"] == model:
                return r
        raise KeyError(f"no model {model!r} in this comparison; models: {', '.join(self.models)}.")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["schema_version"] = COMPARISON_SCHEMA
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Comparison:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def load(cls, path: str | Path) -> Comparison:
        """From ``comparison.json`` or the directory that holds it."""
        p = Path(path)
        p = p / "comparison.json" if p.is_dir() else p
        if not p.is_file():
            raise FileNotFoundError(f"no comparison.json at '{p}'; make one with `geneval compare`.")
        return cls.from_dict(json.loads(p.read_text(encoding="utf-8")))

    def summary(self) -> str:
        """The fixed-width table printed at the end of ``geneval compare``."""
        lines = [
            f"genEval compare  {len(self.models)} models x {self.settings.get('repetitions')} repetitions  "
            f"(95% intervals: {self.settings.get('interval_note', '')})"
        ]
        head = f"{'#':>2} {'model':<20} {'FMR':>22} {'SA':>22} {'PA':>22} {'VR':>7} {'rankSA':>6} {'diff':>5}"
        lines += [head, "-" * len(head)]
        for r in self.leaderboard:
            lines.append(
                f"{_fmt_int(r['rank_fmr']):>2} {r['model'][:20]:<20} {_fmt_est(r['fmr']):>22} "
                f"{_fmt_est(r['sa']):>22} {_fmt_est(r['pa']):>22} {_fmt_num(r['vr']['value']):>7} "
                f"{_fmt_int(r['rank_sa']):>6} {_fmt_signed(r['rank_diff']):>5}"
            )
        lines += ["", *self.notes()]
        if self.out_dir:
            lines.append(
                f"comparison directory: {self.out_dir} (leaderboard.md, comparison.json, report.html)"
            )
        return "\n".join(lines)

    def notes(self) -> list[str]:
        """Stability, ER and warnings as short sentences (summary, leaderboard.md, report)."""
        s, er = self.stability, self.effective_robustness
        out = []
        if s.get("tau_reps_mean") is not None:
            out.append(
                f"rank stability: Kendall tau between repetitions' FMR rankings mean "
                f"{s['tau_reps_mean']:.3f}, min {s['tau_reps_min']:.3f} ({len(s['tau_reps'])} pairs)"
            )
        else:
            out.append(f"rank stability: {s.get('tau_reps_note', 'not computed')}")
        t = s.get("tau_fmr_sa")
        out.append("Kendall tau(FMR ranking, SA ranking): " + ("undefined" if t is None else f"{t:.3f}"))
        for f in s.get("flips", []):
            out.append(
                f"FMR order of {f['a']} and {f['b']} flips across repetitions "
                f"({f['a']} higher in reps {f['a_higher']}, {f['b']} higher in reps {f['b_higher']})"
            )
        if er.get("w") is not None:
            r2 = "undefined" if er.get("r2") is None else f"{er['r2']:.3f}"
            out.append(
                f"effective robustness fit ({er['space']} space, {er['n_baselines']} baselines): "
                f"logit(PA) = {er['w']:.3f} logit(SA) + {er['b']:.3f}, R^2 = {r2} (threshold "
                f"{er['min_r2']}), MAE = {er['mae']:.2f} points -> "
                + ("ER reported" if er["trusted"] else er["reason"])
            )
        else:
            out.append(f"effective robustness: {er.get('reason', 'not computed')}")
        out += [f"WARNING: {w}" for w in self.warnings]
        return out

    def markdown(self) -> str:
        """``leaderboard.md``."""
        cols = ["rank", "model", "FMR", "SA", "PA", "VR", "RA", "FMR cc", "ER", "rank SA", "rank_diff"]
        lines = [
            "# genEval leaderboard",
            "",
            f"{len(self.models)} models, {self.settings.get('repetitions')} repetition(s); seeds per "
            f"repetition: {self.settings.get('repetition_seeds')}. Scores in percent, mean over repetitions "
            f"with 95% interval: {self.settings.get('interval_note', '')}. Ranked by FMR; "
            "rank_diff = rank by SA - rank by FMR (positive: higher on FMR than on SA). "
            "ER = effective robustness in points (blank when the baseline fit is not trusted).",
            "",
            "| " + " | ".join(cols) + " |",
            "|" + "---|" * len(cols),
        ]
        for r in self.leaderboard:
            cells = [
                _fmt_int(r["rank_fmr"]),
                f"{r['model']}{' (baseline)' if r.get('baseline') else ''}",
                _fmt_est(r["fmr"]),
                _fmt_est(r["sa"]),
                _fmt_est(r["pa"]),
                _fmt_est(r["vr"]),
                _fmt_est(r["ra"]),
                _fmt_est(r["fmr_chance_corrected"]),
                _fmt_num(r.get("er")),
                _fmt_int(r["rank_sa"]),
                _fmt_signed(r["rank_diff"]),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "## Notes", "", *[f"- {n}" for n in self.notes()], ""]
        if self.differences:
            lines += [
                "## Pairwise differences (a - b, points, 95% interval)",
                "",
                "| a | b | metric | difference | paired | separated |",
                "|---|---|---|---|---|---|",
            ]
            for d in self.differences:
                iv = (
                    "undefined"
                    if d["value"] is None
                    else f"{d['value']:.2f} [{_fmt_num(d['low'])}, {_fmt_num(d['high'])}]"
                )
                lines.append(
                    f"| {d['a']} | {d['b']} | {METRIC_LABELS.get(d['metric'], d['metric'])} | {iv} | "
                    f"{'yes' if d['paired'] else 'no'} | {'yes' if d['excludes_zero'] else 'no'} |"
                )
            lines.append("")
        return "\n".join(lines)

    def csv(self) -> str:
        """``leaderboard.csv``: one row per model, numbers as numbers (empty = undefined)."""
        buf = io.StringIO()
        fields = ["model", "rank_fmr", "rank_sa", "rank_diff", "baseline", "repetitions", "n", "n_validated"]
        for m in METRICS:
            fields += [m, f"{m}_low", f"{m}_high", f"{m}_std"]
        fields += ["er", "er_predicted_pa"]
        w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        for r in self.leaderboard:
            row = {k: r.get(k) for k in fields if k in r}
            for m in METRICS:
                row.update(
                    {
                        m: r[m]["value"],
                        f"{m}_low": r[m]["low"],
                        f"{m}_high": r[m]["high"],
                        f"{m}_std": r[m].get("std"),
                    }
                )
            w.writerow({k: ("" if v is None else v) for k, v in row.items()})
        return buf.getvalue()


def _fmt_num(v: float | None, d: int = 2) -> str:
    return "" if v is None else f"{v:.{d}f}"


def _fmt_int(v: int | None) -> str:
    return "-" if v is None else str(v)


def _fmt_signed(v: int | None) -> str:
    return "-" if v is None else (f"+{v}" if v > 0 else str(v))


def _fmt_est(e: dict) -> str:
    return format_estimate(e)


def _metric_entry(est: Any, per_rep: list[float | None]) -> dict:
    d = est if isinstance(est, dict) else est.to_dict()
    vals = [v for v in per_rep if v is not None]
    return {
        "value": d.get("value"),
        "low": d.get("low"),
        "high": d.get("high"),
        "n": d.get("n"),
        "method": d.get("method", ""),
        "reason": d.get("reason", ""),
        "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else None,
        "per_rep": per_rep,
    }


def _build(
    runs: dict[str, list[LoadedRun]],
    *,
    baselines: Sequence[str] | None,
    er_min_r2: float,
    n_boot: int,
    seed: int,
    level: float,
    out_dir: str | None,
    repetition_seeds: list[int] | None = None,
) -> Comparison:
    """Aggregate loaded runs into a Comparison (no I/O)."""
    models = list(runs)
    first = runs[models[0]][0].results
    class_names = list(first.get("class_names") or [])
    num_classes = int(first["scores"]["num_classes"])
    warnings: list[str] = []
    for name, reps in runs.items():
        for run in reps:
            if list(run.results.get("class_names") or []) != class_names:
                raise ValueError(
                    f"run {run.run_dir} ({name}) has classes {run.results.get('class_names')} but "
                    f"{runs[models[0]][0].run_dir} has {class_names}; compare runs on the same data."
                )
    for role in ("data", "generator", "oracle"):
        ids = {str((r.results.get("components") or {}).get(role)) for reps in runs.values() for r in reps}
        if len(ids) > 1:
            warnings.append(
                f"the runs use different {role}s ({', '.join(sorted(ids))}); differences then mix "
                f"the {role} with the model."
            )
    base = set(models if baselines is None else baselines)
    unknown = base - set(models)
    if unknown:
        raise ValueError(
            f"baselines {sorted(unknown)} are not among the compared models ({', '.join(models)}); "
            "set baselines to a subset of the model names or null for all."
        )

    rows: dict[str, dict] = {}
    outcomes = {name: [r.outcomes for r in reps] for name, reps in runs.items()}
    for name, reps in runs.items():
        per_rep = {m: [r.results["scores"][m]["value"] for r in reps] for m in METRICS}
        if len(reps) == 1:
            ests = {m: reps[0].results["scores"][m] for m in METRICS}
        else:
            ests = bootstrap_scores(
                outcomes[name], num_classes, METRICS, n_boot=n_boot, seed=seed, level=level
            )
        row = {
            "model": name,
            "baseline": name in base,
            "repetitions": len(reps),
            "n": float(np.mean([r.results["scores"]["n"] for r in reps])),
            "n_validated": float(np.mean([r.results["scores"]["n_validated"] for r in reps])),
            **{m: _metric_entry(ests[m], per_rep[m]) for m in METRICS},
            "components": reps[0].results.get("components", {}),
            "seeds": [r.results.get("seed") for r in reps],
            "run_dirs": [r.run_dir for r in reps],
            "warnings": [],
        }
        if row["pa"]["value"] == 100.0 and row["n_validated"] > 0:
            row["warnings"].append(
                "PA is 100: every accepted image is still correct for this model; it may be "
                "(part of) the oracle, which makes its PA and FMR meaningless."
            )
        for w in row["warnings"]:
            warnings.append(f"{name}: {w}")
        rows[name] = row

    fmr_ranks = rank([rows[m]["fmr"]["value"] for m in models])
    sa_ranks = rank([rows[m]["sa"]["value"] for m in models])
    for m, rf, rs in zip(models, fmr_ranks, sa_ranks):
        rows[m].update(rank_fmr=rf, rank_sa=rs, rank_diff=None if rf is None or rs is None else rs - rf)

    er_fit = fit_effective_robustness(
        [rows[m]["sa"]["value"] for m in models],
        [rows[m]["pa"]["value"] for m in models],
        [m in base for m in models],
        min_r2=er_min_r2,
    )
    for i, m in enumerate(models):
        rows[m].update(er=er_fit.er[i], er_predicted_pa=er_fit.predicted[i])
    er_dict = er_fit.to_dict()
    er_dict["models"] = models
    er_dict["baseline_models"] = [m for m in models if m in base]

    order = sorted(models, key=lambda m: (rows[m]["rank_fmr"] is None, rows[m]["rank_fmr"] or 0, m))
    diffs = []
    for a, b in combinations(order, 2):
        res = metric_differences(
            outcomes[a],
            outcomes[b],
            num_classes,
            DIFF_METRICS,
            names=(a, b),
            n_boot=n_boot,
            seed=seed,
            level=level,
        )
        diffs += [res[k].to_dict() for k in DIFF_METRICS]

    stability = _stability(models, rows, diffs)
    stability["identical_repetitions"] = _identical_repetitions(runs)
    if stability["identical_repetitions"]:
        warnings.append(
            "every repetition produced the same per-sample outcomes (the search has no randomness, e.g. "
            "search.start_noise=0, and the data are the same), so rank stability is trivially perfect; set "
            "search.start_noise > 0 for repetitions that differ, or use repetitions=1."
        )
    if stability["flips"]:
        warnings.append(
            f"{len(stability['flips'])} pair(s) of models change FMR order between repetitions; "
            "their ranking is not stable (see stability.flips and the paired differences)."
        )
    per_class = {}
    for name, reps in runs.items():
        recs = [rec for r in reps for rec in r.records]
        lab = np.asarray([rec["label"] for rec in recs])
        arr = lambda k, recs=recs: np.asarray([rec[k] for rec in recs])
        per_class[name] = per_class_table(
            lab,
            class_names,
            clean_correct=arr("clean_pred") == lab,
            recon_correct=arr("recon_pred") == lab,
            validated=arr("validated"),
            final_correct=(arr("final_pred") == lab) & arr("validated").astype(bool),
        )
    n_reps = sorted({len(v) for v in runs.values()})
    note = (
        "single run's interval (Wilson for SA/RA/VR/PA, bootstrap over source images for FMR)"
        if n_reps == [1]
        else "bootstrap over source images, all repetitions resampled together "
        "(one repetition: the run's own)"
    )
    settings = {
        "repetitions": n_reps[0] if len(n_reps) == 1 else n_reps,
        "n_boot": n_boot,
        "level": level,
        "bootstrap_seed": seed,
        "er_min_r2": er_min_r2,
        "interval_note": note,
        "repetition_seeds": repetition_seeds
        or [runs[models[0]][i].results.get("seed") for i in range(len(runs[models[0]]))],
        "num_classes": num_classes,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        "components": {k: first.get("components", {}).get(k) for k in ("data", "generator", "oracle")},
        "search": (first.get("config") or {}).get("search"),
    }
    return Comparison(
        leaderboard=[rows[m] for m in order],
        differences=diffs,
        stability=stability,
        effective_robustness=er_dict,
        runs={m: [r.run_dir for r in runs[m]] for m in models},
        seeds={m: [r.results.get("seed") for r in runs[m]] for m in models},
        class_names=class_names,
        per_class=per_class,
        settings=settings,
        warnings=warnings,
        out_dir=out_dir,
    )


def _identical_repetitions(runs: dict[str, list[LoadedRun]]) -> bool:
    """True when some model has >= 2 repetitions and all of every model's repetitions are identical."""
    keys = (
        "source_id",
        "clean_pred",
        "recon_pred",
        "validated",
        "accepted_steps",
        "final_pred",
        "first_fooled",
    )
    multi = [reps for reps in runs.values() if len(reps) > 1]
    if not multi:
        return False
    sig = lambda run: [tuple(rec.get(k) for k in keys) for rec in run.records]
    return all(sig(r) == sig(reps[0]) for reps in multi for r in reps[1:])


def _stability(models: list[str], rows: dict[str, dict], diffs: list[dict]) -> dict:
    """Kendall tau between repetitions' FMR rankings, FMR-vs-SA tau, and FMR order flips."""
    n_reps = min(len(rows[m]["fmr"]["per_rep"]) for m in models)
    per_rep = np.array(
        [[np.nan if v is None else v for v in rows[m]["fmr"]["per_rep"][:n_reps]] for m in models]
    )
    taus = []
    for r1, r2 in combinations(range(n_reps), 2):
        ok = ~np.isnan(per_rep[:, r1]) & ~np.isnan(per_rep[:, r2])
        t = kendall_tau(per_rep[ok, r1], per_rep[ok, r2]) if ok.sum() >= 2 else None
        taus.append({"reps": [r1, r2], "tau": t, "n_models": int(ok.sum())})
    defined = [t["tau"] for t in taus if t["tau"] is not None]
    fmr = [rows[m]["fmr"]["value"] for m in models]
    sa = [rows[m]["sa"]["value"] for m in models]
    both = [i for i in range(len(models)) if fmr[i] is not None and sa[i] is not None]
    sep = {(d["a"], d["b"]): d["excludes_zero"] for d in diffs if d["metric"] == "fmr"}
    flips = []
    for i, j in combinations(range(len(models)), 2):
        d = per_rep[i] - per_rep[j]
        hi_a = [int(r) for r in np.nonzero(d > 0)[0]]
        hi_b = [int(r) for r in np.nonzero(d < 0)[0]]
        if hi_a and hi_b:
            a, b = models[i], models[j]
            flips.append(
                {
                    "a": a,
                    "b": b,
                    "a_higher": hi_a,
                    "b_higher": hi_b,
                    "fmr_difference_separated": sep.get((a, b), sep.get((b, a))),
                }
            )
    note = (
        "needs at least 2 repetitions"
        if n_reps < 2
        else "needs at least 2 models with FMR defined in two repetitions"
        if not defined
        else ""
    )
    return {
        "repetitions": n_reps,
        "tau_reps": taus,
        "tau_reps_mean": float(np.mean(defined)) if defined else None,
        "tau_reps_min": float(np.min(defined)) if defined else None,
        "tau_reps_note": note,
        "tau_fmr_sa": kendall_tau([fmr[i] for i in both], [sa[i] for i in both]) if len(both) >= 2 else None,
        "flips": flips,
        "stable": not flips,
    }


# ------------------------------------------------------------------------------------------ writing
def write_comparison(comp: Comparison, out_dir: str | Path, report: bool = True) -> Path:
    """Write leaderboard.csv/.md, models/<name>.json, comparison.json (and report.html) into ``out_dir``."""
    from genEval.fileio import atomic_write_bytes, atomic_write_json, ensure_writable_dir

    out = ensure_writable_dir(out_dir)
    comp.out_dir = str(out)
    (out / "models").mkdir(exist_ok=True)
    for row in comp.leaderboard:
        atomic_write_json(
            out / "models" / f"{row['model']}.json",
            {
                **row,
                "per_class": comp.per_class.get(row["model"], []),
                "class_names": comp.class_names,
                "settings": comp.settings,
            },
        )
    atomic_write_bytes(out / "leaderboard.csv", comp.csv().encode())
    atomic_write_bytes(out / "leaderboard.md", comp.markdown().encode())
    atomic_write_json(out / "comparison.json", comp.to_dict())
    if report:
        from genEval.report import write_report

        write_report(comp, out / "report.html")
    return out


def aggregate(
    run_dirs: Sequence[str | Path] | Mapping[str, Sequence[str | Path]],
    *,
    out_dir: str | Path | None = None,
    baselines: Sequence[str] | None = None,
    er_min_r2: float = 0.8,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    report: bool = True,
    repetition_seeds: list[int] | None = None,
) -> Comparison:
    """Build a :class:`Comparison` from finished run directories (``results.json`` + ``samples.jsonl``).

    ``run_dirs``: run directories or folders containing them (e.g. a comparison's ``runs/``), or a mapping
    model name -> its run directories (one per repetition). Names and repetitions otherwise come from what
    compare() recorded, the ``<model>/rep<r>`` layout, or the classifier id. ``seed`` seeds the bootstraps.
    With ``out_dir`` the comparison files are written there.
    """
    runs = load_runs(run_dirs)
    comp = _build(
        runs,
        baselines=baselines,
        er_min_r2=er_min_r2,
        n_boot=n_boot,
        seed=seed,
        level=level,
        out_dir=None,
        repetition_seeds=repetition_seeds,
    )
    if out_dir is not None:
        write_comparison(comp, out_dir, report=report)
    log.info(
        "compared %d models (%s); leaderboard by FMR: %s",
        len(comp.models),
        comp.settings["interval_note"],
        ", ".join(comp.models),
    )
    return comp


def derive_seeds(seed: int | None, repetitions: int) -> list[int]:
    """One seed per repetition: fresh ones for ``seed=None``, else derived reproducibly from ``seed``."""
    if seed is None:
        return [secrets.randbits(31) for _ in range(repetitions)]
    return [
        int(np.random.SeedSequence([int(seed), r]).generate_state(1)[0] & 0x7FFFFFFF)
        for r in range(repetitions)
    ]


def _is_factory(obj: Any) -> bool:
    """A zero-argument callable that builds a classifier (not a classifier itself, which takes images)."""
    import torch

    if isinstance(obj, torch.nn.Module) or not callable(obj):
        return False
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return False
    return all(
        p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        for p in sig.parameters.values()
    )


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
    report: bool = True,
    run_configs: Mapping[str, dict] | None = None,
    **evaluate_kwargs: Any,
) -> Comparison:
    """Evaluate every classifier ``repetitions`` times and compare them (see the module docstring).

    ``classifiers``: name -> classifier, or name -> zero-argument factory (built once, when its turn comes,
    and released after its repetitions). Names become directory names (letters, digits, ``_.+-``).
    ``seeds``: one per repetition (the same for every model within a repetition), an int to derive them,
    or None for fresh seeds; they are recorded. ``baselines``: models for the ER fit (None = all).
    ``run_configs``: per model, the config recorded in its results.json (the CLI passes the resolved one).
    Other keyword arguments go to ``genEval.evaluate`` (batch_size, device, save_images, ...).
    """
    from tqdm.auto import tqdm

    from genEval.driver import evaluate
    from genEval.perturb import SearchConfig

    if not classifiers:
        raise ValueError("compare needs at least one classifier: classifiers={name: classifier, ...}.")
    bad = [n for n in classifiers if not NAME_RE.match(str(n))]
    if bad:
        raise ValueError(
            f"model names {bad} are not usable as directory names; use letters, digits and _.+- "
            "(starting with a letter or digit), e.g. resnet20."
        )
    if not isinstance(repetitions, int) or repetitions < 1:
        raise ValueError(f"repetitions must be an integer >= 1, got {repetitions!r}.")
    if seeds is None or isinstance(seeds, int):
        rep_seeds = derive_seeds(seeds, repetitions)
    else:
        rep_seeds = [int(s) for s in seeds]
        if len(rep_seeds) != repetitions:
            raise ValueError(
                f"got {len(rep_seeds)} seeds for {repetitions} repetitions; give one seed per "
                "repetition, an int to derive them, or null for fresh ones."
            )
    for k in ("seed", "output_dir"):
        if k in evaluate_kwargs:
            raise ValueError(f"compare sets {k} itself (seeds=..., out_dir=...); do not pass {k}.")
    if baselines is not None:
        unknown = set(baselines) - set(map(str, classifiers))
        if unknown:
            raise ValueError(
                f"baselines {sorted(unknown)} are not among the classifiers "
                f"({', '.join(map(str, classifiers))})."
            )
    search = SearchConfig.coerce(search)
    out = Path(out_dir)
    evaluate_kwargs.setdefault("progress", False)
    show = sys.stderr.isatty() if progress is None else bool(progress)
    bar = tqdm(
        total=len(classifiers) * repetitions, desc="compare", unit="run", disable=not show, dynamic_ncols=True
    )
    dirs: dict[str, list[str]] = {}
    log.info(
        "compare: %d models x %d repetitions, seeds %s, out_dir=%s",
        len(classifiers),
        repetitions,
        rep_seeds,
        out,
    )
    try:
        for name, entry in classifiers.items():
            clf = entry() if _is_factory(entry) else entry
            for r, s in enumerate(rep_seeds):
                bar.set_postfix(model=name, rep=r)
                run_dir = out / "runs" / str(name) / f"rep{r}"
                base_cfg = dict(
                    (run_configs or {}).get(name)
                    or {"search": asdict(search) if is_dataclass(search) else search}
                )
                base_cfg["comparison"] = {
                    "model": str(name),
                    "repetition": r,
                    "seed": s,
                    "repetitions": repetitions,
                    "models": list(map(str, classifiers)),
                }
                evaluate(
                    clf,
                    data,
                    generator,
                    oracle,
                    search,
                    seed=s,
                    output_dir=run_dir,
                    config=base_cfg,
                    n_boot=n_boot,
                    **evaluate_kwargs,
                )
                dirs.setdefault(str(name), []).append(str(run_dir))
                bar.update(1)
            del clf
    finally:
        bar.close()
    return aggregate(
        dirs,
        out_dir=out,
        baselines=baselines,
        er_min_r2=er_min_r2,
        n_boot=n_boot,
        level=level,
        report=report,
        repetition_seeds=rep_seeds,
    )
