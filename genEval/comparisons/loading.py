"""Loading finished runs for a comparison: one :class:`~genEval.runs.reader.RunDir` per run directory, grouped by
model.

Names and repetitions come from what ``compare`` recorded in ``results.json``, else the ``<model>/rep<r>``
layout, else the classifier's component id (:func:`load_runs`).

A run is only compared when its records agree with its ``results.json`` (:func:`check_records`): a ``samples.jsonl``
cut short or edited after the run finished (once, a truncated round was accepted, ranked on 43 of its 50 sources
and given an extra round) is refused, naming the file and what disagrees.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from genEval.runs.reader import RESULTS, SAMPLES, RunDir, find_run_dirs, read_json
from genEval.scores.outcomes import COLUMN, Outcomes

REP_RE = re.compile(r"^rep(\d+)$")
#: results.json's counts (``scores``) and the per-sample column each one sums.
COUNTS = {
    "n": "n",
    "n_clean_correct": "clean",
    "n_validatable": "start_ok",
    "n_validated": "validated",
    "n_perturbed_correct": "perturbed_correct",
    "n_rejected": "rejected",
    "n_clean_validated": "clean_validated",
    "n_oracle_clean_correct": "oracle_clean",
    "n_oracle_recon_correct": "oracle_recon",
    "n_unchanged": "unchanged",
}


class DamagedRun(ValueError):
    """A finished run whose records disagree with its results.json (the message names the file and the count)."""


def check_records(run: RunDir) -> None:
    """Refuse (:class:`DamagedRun`) a finished run whose ``samples.jsonl`` disagrees with its ``results.json``: a
    count of ``scores`` (those the file holds) that the records do not sum to, fewer or more records than the sources
    its identity recorded (``sources.n``), or source ids whose sha256 is not the recorded one."""
    samples = run.path / SAMPLES
    recorded = (read_json(run.path / RESULTS) or {}).get("scores") or {}
    totals = Outcomes.from_records(run.samples).totals() if run.samples else None

    def refuse(what: str) -> DamagedRun:
        return DamagedRun(
            f"run directory '{run.path}' is damaged: {samples.name} {what} (a file cut short or edited after the run "
            f"finished). Rerun it into a fresh directory, or leave it out; {SAMPLES} is refused as it is."
        )

    for key, column in COUNTS.items():
        if isinstance(recorded.get(key), int):
            have = 0 if totals is None else int(totals[COLUMN[column]])
            if have != recorded[key]:
                raise refuse(f"sums to {have} for {key} but {RESULTS} counts {recorded[key]}")
    try:
        sources = run.identity.sources
    except FileNotFoundError:  # an older run: its counts are all there is to go by
        return
    if sources.n is not None and sources.n != len(run.samples):
        raise refuse(f"holds {len(run.samples)} records but the run evaluated {sources.n} sources (run.json)")
    ids = [r.source_id for r in run.samples]
    if sources.sha256 is not None and all(i is not None for i in ids):
        if hashlib.sha256("\n".join(ids).encode()).hexdigest() != sources.sha256:
            raise refuse("names other sources than the run evaluated (their sha256 differs from run.json's)")


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
    """Runs grouped by model, in repetition order; a mapping gives the names, a list infers them. Each run's records
    are checked against its results.json first (:func:`check_records`: a damaged run is refused, named); a run's
    files are read once."""
    grouped = _group(run_dirs)
    if not grouped:
        raise ValueError("no run directories given; pass runs=[<run dir>, ...] or a comparison directory.")
    out: dict[str, list[RunDir]] = {}
    for items in grouped.values():
        for _, run in items:
            check_records(run)
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
