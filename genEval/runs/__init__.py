"""Run directories: ``rundir`` writes and reads them (identity, records, tensor parts, the result object), ``lock``
is the lease of the process writing one, ``faults`` says what went wrong with one (a full or read-only disk,
duplicated or foreign records), ``stopping`` stops a run cleanly on SIGTERM/SIGINT, ``summary`` turns a run's
records into its scores and ``results.json``, ``shards`` merges the shards of one evaluation into the run an
unsharded evaluation would have written."""

from genEval.runs.results import EvalResult, RunConfig
from genEval.runs.rundir import read_results, read_samples
from genEval.scores.outcomes import SampleRecord

__all__ = ["EvalResult", "RunConfig", "SampleRecord", "read_results", "read_samples"]
