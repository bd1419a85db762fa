"""Loading finished runs for a comparison: one :class:`LoadedRun` per run directory, grouped by model.

Names and repetitions come from what ``compare`` recorded in ``results.json``, else the ``<model>/rep<r>``
layout, else the classifier's component id (:func:`load_runs`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from genEval.runs.results import EvalResult
from genEval.runs.rundir import find_run_dirs, read_results, read_samples
from genEval.scores.outcomes import Outcomes, SampleRecord

REP_RE = re.compile(r"^rep(\d+)$")


@dataclass(frozen=True)
class LoadedRun:
    """One finished run directory: its results (:class:`~genEval.runs.results.EvalResult`), its per-sample records
    and outcomes, and its place."""

    model: str
    repetition: int
    run_dir: str
    results: EvalResult
    records: list[SampleRecord]
    outcomes: Outcomes

    @classmethod
    def read(cls, model: str, repetition: int, run_dir: Path, results: EvalResult | None = None) -> LoadedRun:
        records = read_samples(run_dir)
        return cls(
            model,
            repetition,
            str(run_dir),
            results if results is not None else read_results(run_dir),
            records,
            Outcomes.from_records(records),
        )


def _identity(run_dir: Path, results: EvalResult) -> tuple[str, int | None]:
    """Model name and repetition of a run: recorded by compare(), else the runs/<model>/rep<r> layout,
    else the classifier's component id."""
    info = results.config.comparison
    if info is not None and info.model:
        return info.model, info.repetition
    m = REP_RE.match(run_dir.name)
    if m:
        return run_dir.parent.name, int(m.group(1))
    return str(results.components.get("classifier") or run_dir.name), None


def _group(
    run_dirs: Sequence[str | Path] | Mapping[str, Sequence[str | Path]],
) -> dict[str, list[tuple[int | None, Path, EvalResult]]]:
    """model -> [(repetition or None, run dir, results)]: names from a mapping, else from each run."""
    grouped: dict[str, list[tuple[int | None, Path, EvalResult]]] = {}
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
