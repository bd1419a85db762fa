"""Leaderboard standings of one benchmark version (the paper's Appendix N leaderboards, served live).

One row per model (a finished job): SA, PA, FMR, VR (and chance-corrected FMR) with 95% intervals, its
repetitions, date, and which other models it is *significantly better* than: the paired bootstrap over
source images that ``genEval.comparisons.aggregate`` computes for every pair (a difference whose 95% interval excludes
zero). All of that comes from one call, :func:`aggregate`, the single point where the service depends on
the comparison engine. Standings are cached per set of finished jobs, so page views cost no bootstrap.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from genEval.comparisons.aggregate import aggregate as compare_runs
from genEval.service.db import JobInfo

#: Metrics shown, in column order, and those that get "significantly better" marks.
COLUMNS = ("sa", "pa", "fmr", "fmr_validated", "vr", "fmr_chance_corrected")
MARKED = ("fmr", "sa", "pa")
LABELS = {"sa": "SA", "pa": "PA", "fmr": "FMR", "fmr_validated": "FMR_v", "vr": "VR", "fmr_chance_corrected": "FMR cc"}
SORT_KEYS = (*COLUMNS, "name", "date", "repetitions")


@dataclass(frozen=True)
class ModelStanding:
    """One model's aggregated scores: metric -> {value, low, high} (percent; None when undefined), and
    metric -> names of the models it is significantly better than."""

    name: str
    repetitions: int
    scores: dict[str, dict]
    better_than: dict[str, list[str]]


@dataclass(frozen=True)
class ModelComparison:
    models: dict[str, ModelStanding]
    interval_note: str
    warnings: list[str] = field(default_factory=list)
    rank_by: str = "fmr"  # the score that orders the standings (the comparison's rank_by) and why
    rank_reason: str = ""


def aggregate(run_dirs: Mapping[str, Sequence[Path]], n_boot: int = 1000, seed: int = 0) -> ModelComparison:
    """Model name -> its run directories (one per repetition) -> scores and pairwise significance.

    The one call into genEval.comparisons.aggregate (``aggregate``: paired bootstrap over source images when models
    share them, as all runs of one benchmark do).
    """
    if not run_dirs:
        return ModelComparison({}, "")
    comp = compare_runs({k: [str(p) for p in v] for k, v in run_dirs.items()}, n_boot=n_boot, seed=seed)
    better: dict[str, dict[str, list[str]]] = {m: {k: [] for k in MARKED} for m in comp.models}
    for d in comp.differences:
        if d.metric in MARKED and d.excludes_zero and d.value:
            winner, loser = (d.a, d.b) if d.value > 0 else (d.b, d.a)
            better[winner][d.metric].append(loser)
    models = {}
    for row in comp.leaderboard:
        scores = {k: {"value": row[k].value, "low": row[k].low, "high": row[k].high} for k in COLUMNS}
        models[row.model] = ModelStanding(row.model, int(row.repetitions), scores, better[row.model])
    return ModelComparison(
        models, comp.settings.interval_note, list(comp.warnings), comp.rank_by, comp.settings.rank_reason
    )


@dataclass(frozen=True)
class Row:
    """A leaderboard row: the job and its standing."""

    job: JobInfo
    standing: ModelStanding

    def sort_value(self, key: str):
        if key == "name":
            return self.job.name.lower()
        if key == "date":
            return self.job.finished_at or 0.0
        if key == "repetitions":
            return self.standing.repetitions
        return self.standing.scores[key]["value"]


@dataclass(frozen=True)
class Standings:
    benchmark: str
    version: str
    rows: list[Row]
    interval_note: str
    warnings: list[str]
    rank_by: str = "fmr"
    rank_reason: str = ""

    @property
    def default_sort(self) -> str:
        """The comparison's ranking score when the page can sort by it, else FMR."""
        return self.rank_by if self.rank_by in SORT_KEYS else "fmr"

    def sorted(self, key: str | None = None, descending: bool = True) -> list[Row]:
        """Rows ordered by ``key`` (one of :data:`SORT_KEYS`; default the ranking score); undefined values last."""
        key = key or self.default_sort
        if key not in SORT_KEYS:
            raise ValueError(f"unknown sort key {key!r}; choose one of {', '.join(SORT_KEYS)}.")
        known = [r for r in self.rows if r.sort_value(key) is not None]
        unknown = [r for r in self.rows if r.sort_value(key) is None]
        return sorted(known, key=lambda r: r.sort_value(key), reverse=descending) + unknown


class Leaderboards:
    """Standings per benchmark version, computed from finished jobs' run directories and cached until the
    set of finished jobs changes."""

    def __init__(self, home: str | Path, n_boot: int = 1000) -> None:
        self.home, self.n_boot = Path(home), n_boot
        self._cache: dict[tuple, Standings] = {}
        self._lock = threading.Lock()

    def standings(self, benchmark: str, version: str, jobs: list[JobInfo]) -> Standings:
        """Standings of the ``done`` jobs among ``jobs`` (those of one benchmark version)."""
        done = sorted((j for j in jobs if j.status == "done"), key=lambda j: j.id)
        key = (benchmark, version, tuple((j.id, j.finished_at) for j in done))
        with self._lock:  # one computation per key, however many requests arrive at once
            if key not in self._cache:
                dirs = {j.name: [j.rep_dir(self.home, r) for r in range(len(j.seeds))] for j in done}
                missing = [j for j in done if not all((d / "results.json").is_file() for d in dirs[j.name])]
                warnings = [
                    f"{j.name}: run directory {dirs[j.name][0].parent} is missing or incomplete; left out"
                    for j in missing
                ]
                done = [j for j in done if j not in missing]
                comp = aggregate({j.name: dirs[j.name] for j in done}, n_boot=self.n_boot)
                rows = [Row(j, comp.models[j.name]) for j in done]
                self._cache = {k: v for k, v in self._cache.items() if k[:2] != key[:2]}
                self._cache[key] = Standings(
                    benchmark,
                    version,
                    rows,
                    comp.interval_note,
                    warnings + comp.warnings,
                    comp.rank_by,
                    comp.rank_reason,
                )
            return self._cache[key]
