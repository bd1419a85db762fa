"""Reading run directories: :class:`RunDir`, the one typed handle on a run, and the readers under it.

``RunDir(path)`` reads a run directory lazily and keeps what it read: ``.identity`` (:class:`RunIdentity`, from
``run.json``), ``.results`` (the :class:`~genEval.runs.results.EvalResult` of ``results.json``), ``.samples`` (its
:class:`~genEval.scores.outcomes.SampleRecord` list, ``samples.jsonl``), ``.outcomes`` (the samples as the score
tables take them) and the tensor parts (:meth:`RunDir.parts`, :meth:`RunDir.rows`, :meth:`RunDir.tensors`).
Comparisons, snapshots, the oracle audit, mask fitting and the merge of shards all read runs through it::

    from genEval.runs import RunDir
    r = RunDir("outputs/2026-01-01/12-00-00")
    print(r.identity.seed, r.results.scores.fmr)

Records are typed strictly on read: a line of ``samples.jsonl`` or ``samples.partial.jsonl`` that is not a record,
or whose field has the wrong JSON type (a string label, a float index), is refused naming the file, the line and the
field (:func:`read_records`). Directories written before ``run.json`` existed (results.json and samples.jsonl only)
still read; their identity is the one results.json recorded, if any.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from genEval.runs.faults import RECORD_KEYS, record_lines, unique_records
from genEval.runs.identity import RunIdentity
from genEval.runs.index import PARTIAL, RESULTS, RUN, SAMPLES  # noqa: F401  (the file names, defined once)
from genEval.runs.parts import (
    LATENTS,
    has_tensors,
    iter_tensor_parts,
    iter_tensor_rows,
    latents_generator,
    require_tensors,
    stack_tensors,
)
from genEval.runs.results import EvalResult
from genEval.scores.outcomes import Outcomes, SampleRecord


def read_json(path: Path) -> dict | None:
    """A JSON file's content, or None when it is absent or cut short."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def read_records(path: Path, text: str, keys: tuple[str, ...] = RECORD_KEYS) -> list[tuple[int, SampleRecord, dict]]:
    """``(line number, record, the line's dict)`` for every record of a records file's ``text``; a line that is not a
    record object with ``keys``, or one with a field of the wrong type, is refused naming the file, line and field."""
    return [(n, SampleRecord.from_dict(d, where=f"{path} line {n}"), d) for n, d in record_lines(path, text, keys)]


def read_unique_records(path: Path, text: str, sources: dict[int, str | None] | None) -> list[SampleRecord]:
    """The records of a records file's ``text``, one per source of the run (``sources``: position -> source id,
    see :func:`genEval.runs.faults.unique_records`); a line that is not a well-typed record is refused, named."""
    parsed = read_records(path, text)
    by_line = {n: rec for n, rec, _ in parsed}
    return [by_line[n] for n, _ in unique_records([(n, d) for n, _, d in parsed], path, sources)]


def read_results(run_dir: str | Path, samples: bool = False) -> EvalResult:
    """``results.json`` of a finished run as the :class:`~genEval.runs.results.EvalResult` it was written from (with
    its per-sample records when ``samples``); a results.json of another schema version is refused, naming it."""
    p = Path(run_dir) / RESULTS
    if not p.is_file():
        raise FileNotFoundError(
            f"'{run_dir}' has no results.json: not a finished genEval run directory (an interrupted run "
            "leaves samples.partial.jsonl and no results.json; rerun it to resume). Pass run directories "
            "made by `geneval` or `geneval compare`, or a folder containing them."
        )
    d = json.loads(p.read_text(encoding="utf-8"))
    return EvalResult.from_dict(d, read_samples(run_dir) if samples else (), where=f"run directory '{run_dir}'")


def read_samples(run_dir: str | Path) -> list[SampleRecord]:
    """Per-sample records of a finished run (``samples.jsonl``), in data-set order."""
    p = Path(run_dir) / SAMPLES
    if not p.is_file():
        raise FileNotFoundError(
            f"run directory '{run_dir}' has no samples.jsonl; it is not a finished genEval run "
            "(an interrupted run leaves samples.partial.jsonl and no results.json)."
        )
    return [rec for _, rec, _ in read_records(p, p.read_text(encoding="utf-8"), keys=("source_id",))]


def read_run_identity(run_dir: str | Path) -> RunIdentity:
    """The identity a run recorded in ``run.json`` when it started."""
    info = read_json(Path(run_dir) / RUN)
    if info is None:
        raise FileNotFoundError(f"'{run_dir}' has no {RUN}; it is not a genEval run directory.")
    return RunIdentity.from_dict(info.get("identity"), where=str(Path(run_dir) / RUN))


def find_run_dirs(paths: Sequence[str | Path]) -> list[Path]:
    """Expand paths: a run directory (has results.json) stays; any other directory is searched for runs."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw).expanduser()
        if (p / RESULTS).is_file():
            out.append(p)
        elif p.is_dir():
            found = sorted(q.parent for q in p.rglob(RESULTS))
            if not found:
                raise FileNotFoundError(f"no finished run (results.json) under '{p}'.")
            out += found
        else:
            raise FileNotFoundError(f"run directory '{p}' does not exist.")
    return out


@dataclass(frozen=True)
class RunDir:
    """One run directory, read lazily; every part is read once and kept (a finished run never changes).

    ``path``: the directory (a str or Path). ``identity``, ``results``, ``samples`` and ``outcomes`` read on first
    use and raise FileNotFoundError (naming the directory) when the run lacks them; ``finished``: results.json is
    there. The tensor parts stream through :meth:`parts` and :meth:`rows`, or load whole with :meth:`tensors`.
    """

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path).expanduser())

    @classmethod
    def of(cls, run: RunDir | str | Path) -> RunDir:
        """``run`` itself, or a handle on the directory it names."""
        return run if isinstance(run, cls) else cls(Path(run))

    def __str__(self) -> str:
        return str(self.path)

    @property
    def finished(self) -> bool:
        return (self.path / RESULTS).is_file()

    @cached_property
    def identity(self) -> RunIdentity:
        """What the run is (``run.json``; for a directory written before run.json existed, the identity its
        results.json recorded)."""
        if (self.path / RUN).is_file() or not self.finished:
            return read_run_identity(self.path)
        recorded = self.results.identity
        if recorded is None:
            raise FileNotFoundError(
                f"'{self.path}' has no {RUN} and its results.json records no identity: it was written by an older "
                "genEval or by hand, so what it ran is not known. Rerun the evaluation."
            )
        return recorded

    @cached_property
    def results(self) -> EvalResult:
        return read_results(self.path)

    @cached_property
    def samples(self) -> list[SampleRecord]:
        return read_samples(self.path)

    @cached_property
    def outcomes(self) -> Outcomes:
        """The samples as the score tables take them (:class:`~genEval.scores.outcomes.Outcomes`)."""
        return Outcomes.from_records(self.samples)

    # ---- the tensor parts
    def has(self, kind: str) -> bool:
        """Whether the run saved ``kind`` (``latents`` or ``images``) parts."""
        return has_tensors(self.path, kind)

    def require(self, kind: str) -> None:
        """Raise FileNotFoundError, naming the switch that saves them, when the run saved no ``kind`` parts."""
        require_tensors(self.path, kind)

    def parts(
        self, kind: str, records: Sequence[SampleRecord] | None = None
    ) -> Iterator[tuple[list[SampleRecord], dict[str, torch.Tensor]]]:
        """``(records, tensors)`` part by part (:func:`~genEval.runs.parts.iter_tensor_parts`) for ``records``
        (None: every sample)."""
        return iter_tensor_parts(self.path, kind, self.samples if records is None else records)

    def rows(
        self, kind: str, records: Sequence[SampleRecord] | None = None
    ) -> Iterator[tuple[SampleRecord, dict[str, torch.Tensor]]]:
        """``(record, {name: row})`` one sample at a time, in the order of ``records`` (None: every sample)
        (:func:`~genEval.runs.parts.iter_tensor_rows`)."""
        return iter_tensor_rows(self.path, kind, self.samples if records is None else records)

    def tensors(self, kind: str) -> dict[str, Any]:
        """Every ``kind`` tensor of the run in samples.jsonl order, plus ``source_ids`` (and, for latents, the
        ``generator``) (:func:`~genEval.runs.parts.stack_tensors`)."""
        return stack_tensors(self.path, kind, self.samples)

    @property
    def latents_generator(self) -> str:
        """The generator id the run's latent parts were saved with."""
        return latents_generator(self.path)


__all__ = [
    "LATENTS",
    "PARTIAL",
    "RESULTS",
    "RUN",
    "SAMPLES",
    "RunDir",
    "find_run_dirs",
    "read_records",
    "read_results",
    "read_run_identity",
    "read_samples",
    "read_unique_records",
]
