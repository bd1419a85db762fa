"""What submitters and admins do with jobs, in the service's terms: submit a model (the benchmark's allowlisted
overrides, the classifier config it becomes, fresh recorded seeds, the token's quota), look jobs up, cancel and
re-queue them. Refusals name the request key at fault (:mod:`genEval.service.refusals`).

On a settled benchmark a submission is the model's round 0: its seed is round 0's of the version
(:meth:`~genEval.service.server.benchmarks.store.BenchmarkStore.round_base`), shared by every model, so that all
models' first rounds see the same sources; the workers queue its later rounds
(:mod:`genEval.service.server.standings.settled`)."""

from __future__ import annotations

import secrets
from collections.abc import Callable

from genEval.comparisons.settings import StopRule
from genEval.comparisons.settled import round_seed
from genEval.service.benchmarks import Benchmark, OverrideRefused
from genEval.service.models import ModelRefused, classifier_config
from genEval.service.records import FINAL, JobInfo, NameTaken, QuotaExceeded, TokenInfo
from genEval.service.refusals import Conflict, Forbidden, Invalid, NotFound, TooMany, clip
from genEval.service.server.benchmarks.catalog import Catalog
from genEval.service.server.benchmarks.store import BenchmarkStore
from genEval.service.server.jobs.store import JobStore
from genEval.service.server.uploads.store import UploadStore

#: What a token over its job quota is told to wait (seconds): jobs take minutes, and one may finish any time.
QUOTA_RETRY_S = 60


class JobDesk:
    """Jobs (``jobs``, with the ``uploads`` they name and the ``benchmarks``' round seeds; ``withdraw``: a settled
    model's withdrawal, :meth:`genEval.service.server.finishing.JobEndings.withdraw`) of the benchmarks ``catalog``
    offers; a submitter token may have ``max_active_jobs`` queued or running (admins: no limit)."""

    def __init__(
        self,
        jobs: JobStore,
        uploads: UploadStore,
        benchmarks: BenchmarkStore,
        withdraw: Callable[[str], JobInfo | None],
        catalog: Catalog,
        max_active_jobs: int,
    ) -> None:
        self.store, self.uploads, self.benchmarks, self.withdraw = jobs, uploads, benchmarks, withdraw
        self.catalog, self.max_active_jobs = catalog, int(max_active_jobs)

    def submit(self, benchmark: str, name: str, model: dict, overrides: dict, owner: TokenInfo) -> JobInfo:
        """Queue ``owner``'s model ``model`` (kind, name, upload id, ...) as ``name`` on ``benchmark`` with the
        allowlisted ``overrides``, with fresh recorded seeds; a refusal names the request key at fault."""
        try:
            bench = self.catalog.benchmark(benchmark)
        except KeyError as err:
            raise Invalid(err.args[0], key="benchmark") from None
        try:
            config, overrides = bench.apply_overrides(overrides)
        except OverrideRefused as err:
            raise Invalid(str(err), key=f"overrides.{err.key}") from None
        upload = None
        if model.get("upload") is not None:
            upload = self.uploads.get(model["upload"])
            if upload is None or (upload.owner_id != owner.id and owner.role != "admin"):
                raise Invalid(
                    f"no upload {model['upload']!r} of yours; upload the file first (POST /api/uploads).",
                    key="model.upload",
                )
        spec = {k: v for k, v in model.items() if k != "upload"}
        try:
            config["classifier"] = classifier_config(
                spec, self.catalog.classifiers, upload and upload.kind, upload and upload.path
            )
        except ModelRefused as err:
            raise Invalid(str(err), key=f"model.{err.key}") from None
        try:
            return self.store.submit(
                benchmark=bench.name,
                benchmark_version=bench.version,
                name=name,
                owner=owner,
                model={k: v for k, v in model.items() if v is not None} | ({"sha256": upload.sha256} if upload else {}),
                config=config,
                overrides=overrides,
                seeds=self._seeds(bench),
                upload_path=upload and upload.path,
                max_active=0 if owner.role == "admin" else self.max_active_jobs,
            )
        except NameTaken as err:
            raise Conflict(str(err), key="name") from None
        except QuotaExceeded as err:
            raise TooMany(str(err), QUOTA_RETRY_S) from None

    def _seeds(self, bench: Benchmark) -> list[int]:
        """A submission's seeds: fresh and recorded, one per repetition; on a settled benchmark round 0's seed of the
        version, the same for every model."""
        if bench.settled:
            return [round_seed(self.benchmarks.round_base(bench.name, bench.version), 0)]
        return [secrets.randbits(31) for _ in range(bench.repetitions)]

    def job(self, job_id: str) -> JobInfo:
        job = self.store.get(job_id)
        if job is None:
            raise NotFound(f"no job {clip(job_id, 64)!r}.")
        return job

    def jobs(self, status: str | None = None, benchmark: str | None = None, limit: int = 200) -> list[JobInfo]:
        """The queue, newest first, at most ``limit`` (1..1000) jobs."""
        return self.store.list(status=status, benchmark=benchmark, limit=max(1, min(limit, 1000)))

    def cancel(self, job_id: str, by: TokenInfo) -> JobInfo:
        """Cancel a job not yet final; only its submitter or an admin may. On a settled benchmark the rounds belong to
        the benchmark (docs/service.md): a submitter cannot cancel a later round alone (an admin can), and cancelling
        the submission's job withdraws the model (:meth:`~genEval.service.server.jobs.store.JobStore.withdraw`: its
        rounds stop, its row shows withdrawn), even after its first round is done."""
        job = self.job(job_id)
        if job.owner_id != by.id and by.role != "admin":
            raise Forbidden("only the job's submitter or an admin may cancel it.")
        settled = StopRule.carried_by(job.config) is not None
        if settled and job.parent_id is not None and by.role != "admin":
            raise Forbidden(
                f"job {job_id} is round {job.round} of a settled benchmark, which runs rounds until its models are "
                f"ordered: a round is the benchmark's, not the submitter's. To withdraw the model, cancel its "
                f"submission (job {job.parent_id})."
            )
        if settled and job.parent_id is None:
            if job.status in ("failed", "cancelled"):
                raise Conflict(f"job {job_id} is already {job.status}.")
            return self.withdraw(job_id)
        if job.status in FINAL:
            raise Conflict(f"job {job_id} is already {job.status}.")
        return self.store.cancel(job_id)

    def requeue(self, job_id: str) -> JobInfo:
        """Put a failed or cancelled job back in the queue (same seeds), unless its name was taken since."""
        job = self.job(job_id)
        if job.status not in ("failed", "cancelled"):
            raise Conflict(f"job {job_id} is {job.status}; only failed or cancelled jobs are re-queued.")
        try:
            return self.store.requeue(job_id)
        except NameTaken as err:  # another job took its name since: one leaderboard row per name
            raise Conflict(str(err), key="name") from None
