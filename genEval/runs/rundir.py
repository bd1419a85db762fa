"""The old home of the run-directory code, kept so that ``from genEval.runs.rundir import ...`` still works.

The run directory is written by :mod:`genEval.runs.writer`, read by :mod:`genEval.runs.reader` (:class:`RunDir`, the
typed handle), its tensor parts by :mod:`genEval.runs.parts`, and what a run is by :mod:`genEval.runs.identity`;
import from those. ``read_run_identity`` now returns a :class:`RunIdentity` (it returned the dict of run.json), and
the tensor readers take the records they read for (:meth:`RunDir.parts`, :meth:`RunDir.tensors` read a run's own).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from genEval.runs.faults import RunDirectoryError, unique_records
from genEval.runs.identity import (
    RunIdentity,
    RunMismatch,
    RunSources,
    Shard,
    config_hash,
    environment,
    identity_differences,
    package_versions,
)
from genEval.runs.lock import LOCK, RunDirectoryBusy, RunLock
from genEval.runs.parts import (
    IMAGES,
    LATENTS,
    has_tensors,
    iter_tensor_parts,
    iter_tensor_rows,
    latents_generator,
    require_tensors,
    save_latent_file,
    stack_tensors,
    to_uint8,
)
from genEval.runs.parts import (
    load_latent_file as load_latent_file_only,
)
from genEval.runs.reader import (
    PARTIAL,
    RESULTS,
    RUN,
    SAMPLES,
    RunDir,
    find_run_dirs,
    read_records,
    read_results,
    read_run_identity,
    read_samples,
    read_unique_records,
)
from genEval.runs.results import EvalResult
from genEval.runs.writer import RunWriter, save_grid
from genEval.scores.outcomes import SampleRecord


def load_tensors(run_dir: str | Path, kind: str) -> dict[str, Any]:
    """``RunDir(run_dir).tensors(kind)``: every ``kind`` tensor of a run in samples.jsonl order."""
    return RunDir(run_dir).tensors(kind)


def load_latent_file(path: str | Path) -> dict[str, Any]:
    """A latents file (:func:`genEval.runs.parts.load_latent_file`), or a run directory's latents."""
    return RunDir(path).tensors(LATENTS) if Path(path).is_dir() else load_latent_file_only(path)


__all__ = [
    "IMAGES",
    "LATENTS",
    "LOCK",
    "PARTIAL",
    "RESULTS",
    "RUN",
    "SAMPLES",
    "EvalResult",
    "RunDir",
    "RunDirectoryBusy",
    "RunDirectoryError",
    "RunIdentity",
    "RunLock",
    "RunMismatch",
    "RunSources",
    "RunWriter",
    "SampleRecord",
    "Shard",
    "config_hash",
    "environment",
    "find_run_dirs",
    "has_tensors",
    "identity_differences",
    "iter_tensor_parts",
    "iter_tensor_rows",
    "latents_generator",
    "load_latent_file",
    "load_tensors",
    "package_versions",
    "read_records",
    "read_results",
    "read_run_identity",
    "read_samples",
    "read_unique_records",
    "require_tensors",
    "save_grid",
    "save_latent_file",
    "stack_tensors",
    "to_uint8",
    "unique_records",
]
