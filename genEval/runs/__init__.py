"""Run directories: :class:`RunDir` (``reader``) is the typed handle on one (``.identity``, ``.results``,
``.samples``, the tensor parts); ``writer`` writes them, ``parts`` holds their tensor parts, ``identity`` says what a
run is (``run.json``), ``results`` what it found (``results.json``), ``settings`` the search it ran with, ``lock`` is
the lease of the process writing one, ``faults`` says what went wrong with one (a full or read-only disk, duplicated
or foreign records), ``stopping`` stops a run cleanly on SIGTERM/SIGINT, ``summary`` turns a run's records into its
scores and ``results.json``, ``shards`` merges the shards of one evaluation into the run an unsharded evaluation
would have written."""

from genEval.runs.identity import RunIdentity, Shard
from genEval.runs.reader import RunDir, read_results, read_samples
from genEval.runs.results import EvalResult, RunConfig
from genEval.scores.outcomes import SampleRecord

__all__ = ["EvalResult", "RunConfig", "RunDir", "RunIdentity", "SampleRecord", "Shard", "read_results", "read_samples"]
