"""Run directories: :class:`RunDir` (``reader``) is the typed handle on one (``.identity``, ``.results``,
``.samples``, the tensor parts); ``writer`` writes them, ``parts`` holds their tensor parts, ``identity`` says what a
run is (``run.json``), ``results`` what it found (``results.json``), ``settings`` the search it ran with, ``lock`` is
the lease of the process writing one, ``faults`` says what went wrong with one (a full or read-only disk, duplicated
or foreign records), ``stopping`` stops a run cleanly on SIGTERM/SIGINT, ``summary`` turns a run's records into its
scores and ``results.json``, ``shards`` merges the shards of one evaluation into the run an unsharded evaluation
would have written, ``index`` lists the run directories under a folder (from their JSON files alone).

The names below are loaded on first use (``lazy_loader``), so that ``genEval.runs.index`` is read without torch
(``geneval runs``, docs/run-directory.md)."""

import lazy_loader

from genEval.scores.outcomes import SampleRecord

__getattr__, __dir__, _lazy = lazy_loader.attach(
    __name__,
    submod_attrs={
        "identity": ["RunIdentity", "Shard"],
        "reader": ["RunDir", "read_results", "read_samples"],
        "results": ["EvalResult", "RunConfig"],
    },
)
__all__ = ["EvalResult", "RunConfig", "RunDir", "RunIdentity", "SampleRecord", "Shard", "read_results", "read_samples"]
