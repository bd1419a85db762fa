"""Loading finished runs for a comparison: one :class:`~genEval.runs.reader.RunDir` per run directory, grouped by
model.

Names and repetitions come from what ``compare`` recorded in ``results.json``, else the ``<model>/rep<r>``
layout, else the classifier's component id (:func:`load_runs`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from genEval.runs.reader import RunDir, find_run_dirs

REP_RE = re.compile(r"^rep(\d+)$")


def _place(run: RunDir) -> tuple[str, int | None]:
    """Model name and repetition of a run: recorded by compare(), else the runs/<model>/rep<r> layout,
    else the classifier's component id."""
    info = run.results.config.comparison
    if info is not None and info.model:
        return info.model, info.repetition
    m = REP_RE.match(run.path.name)
    if m:
        return run.path.parent.name, int(m.group(1))
    return str(run.results.components.get("classifier") or run.path.name), None


def _group(
    run_dirs: Sequence[str | Path] | Mapping[str, Sequence[str | Path]],
) -> dict[str, list[tuple[int | None, RunDir]]]:
    """model -> [(repetition or None, run)]: names from a mapping, else from each run."""
    grouped: dict[str, list[tuple[int | None, RunDir]]] = {}
    if isinstance(run_dirs, Mapping):
        for name, dirs in run_dirs.items():
            found = find_run_dirs([dirs] if isinstance(dirs, (str, Path)) else dirs)
            grouped[str(name)] = [(None, RunDir(p)) for p in found]
        return grouped
    found = find_run_dirs(run_dirs)
    twice = sorted({str(p) for p in found if found.count(p) > 1})
    if twice:
        raise ValueError(f"run directories given more than once: {twice}; pass each run once.")
    for p in found:
        run = RunDir(p)
        name, r = _place(run)
        grouped.setdefault(name, []).append((r, run))
    return grouped


def load_runs(run_dirs: Sequence[str | Path] | Mapping[str, Sequence[str | Path]]) -> dict[str, list[RunDir]]:
    """Runs grouped by model, in repetition order; a mapping gives the names, a list infers them. A run's files are
    read when first used, once."""
    grouped = _group(run_dirs)
    if not grouped:
        raise ValueError("no run directories given; pass runs=[<run dir>, ...] or a comparison directory.")
    out: dict[str, list[RunDir]] = {}
    for name, items in grouped.items():
        reps = [r for r, _ in items]
        if all(r is not None for r in reps):
            dup = sorted({r for r in reps if reps.count(r) > 1})
            if dup:
                raise ValueError(
                    f"model {name!r} has more than one run for repetition(s) {dup}: "
                    f"{[str(run) for r, run in items if r in dup]}. Pass each run once."
                )
            items = sorted(items, key=lambda t: t[0])
        else:  # no recorded repetition: the order of the directories is the repetition order
            items = sorted(items, key=lambda t: str(t[1]))
        out[name] = [run for _, run in items]
    return out


#: The name a loaded run had before runs were read through :class:`~genEval.runs.reader.RunDir` (kept for code
#: written against it; a RunDir has ``.path``, ``.samples``, ``.outcomes`` and ``.results``).
LoadedRun = RunDir
