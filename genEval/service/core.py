"""The service facade: one object the routes and pages call (:mod:`genEval.service.routes`, :mod:`~.pages`).

:class:`Service` owns what one server process works with (the database, the service directory, the benchmarks it
offers and the classifier configs a submission may name) and is the only way the HTTP layer reaches them: every
route asks it, none imports :mod:`genEval.service.db`. It speaks in records (:mod:`genEval.service.records`) and
refusals (:mod:`genEval.service.refusals`, each with its HTTP status), not in requests and responses; the routes
shape its answers into the API's response models. Everything durable is in the database and under ``home``;
leaderboard standings are read from the database, where workers store them when jobs finish
(:mod:`genEval.service.leaderboard`).
"""

from __future__ import annotations

import os
import secrets
import tarfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genEval import __version__
from genEval.fileio import atomic_write, ensure_writable_dir
from genEval.reports.report import write_report
from genEval.sandbox import Limits
from genEval.service.benchmarks import Benchmark, OverrideRefused
from genEval.service.db import (
    FINAL,
    WORKER_RETENTION_S,
    Database,
    JobInfo,
    NameTaken,
    QuotaExceeded,
    TokenInfo,
    UploadInfo,
)
from genEval.service.leaderboard import SORT_KEYS, Standings, read_standings
from genEval.service.limits import RateLimit
from genEval.service.models import KINDS, ModelRefused, classifier_config, sniff_upload
from genEval.service.outages import UNREACHABLE, short
from genEval.service.refusals import Conflict, Forbidden, Invalid, NotFound, TooMany, clip
from genEval.snapshots.format import SnapshotError, export_snapshot

MiB = 1024 * 1024
#: What a token over its job quota is told to wait (seconds): jobs take minutes, and one may finish any time.
QUOTA_RETRY_S = 60


class UnknownVersion(NotFound):
    """A leaderboard asked for a version of a benchmark that was never registered (the API answers 404)."""


@dataclass(frozen=True)
class Settings:
    """Server settings. ``home``: the service directory (database file for SQLite, uploads, run directories,
    snapshots). ``max_upload_bytes``: the largest model file accepted. ``n_boot``: bootstrap resamples of the
    leaderboard's intervals and marks, used by the server's in-process workers. ``max_json_bytes``: the largest
    request body other than an upload. ``worker_retention_s``: how long stopped or gone workers stay listed.

    Limits (``conf/serve.yaml`` says why each default): an upload's check, in a child process, may take
    ``check_timeout_s`` seconds and ``check_memory_mb`` MiB, and at most ``max_checks`` run at once; a submitter
    token may have ``max_active_jobs`` jobs queued or running and make ``max_uploads_per_hour`` uploads (admins
    neither); a client address may fail ``max_auth_failures`` authentications per ``auth_window_s`` seconds. A limit
    of 0 is no limit."""

    home: Path
    max_upload_bytes: int = 512 * MiB
    default_benchmark: str | None = None
    n_boot: int = 1000
    max_json_bytes: int = MiB
    worker_retention_s: float = WORKER_RETENTION_S
    check_timeout_s: float = 60.0
    check_memory_mb: int = 4096
    max_checks: int = 2
    max_active_jobs: int = 20
    max_uploads_per_hour: int = 20
    max_auth_failures: int = 20
    auth_window_s: float = 60.0


@dataclass
class Service:
    """The facade (see the module docstring): database + directory + the benchmarks this server offers (name ->
    current preset) + the registered classifier configs a submission may name (name -> resolved config)."""

    db: Database
    settings: Settings
    benchmarks: dict[str, Benchmark]
    classifiers: dict[str, dict]
    _export_lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    auth_failures: RateLimit = field(init=False)
    uploads: RateLimit = field(init=False)

    def __post_init__(self) -> None:
        if not self.benchmarks:
            raise ValueError("the service needs at least one benchmark (conf/benchmark/*.yaml).")
        default = self.settings.default_benchmark
        if default is not None and default not in self.benchmarks:
            raise ValueError(
                f"default benchmark {default!r} is not among the loaded ones: {', '.join(self.benchmarks)}."
            )
        ensure_writable_dir(self.home / "uploads")
        limits = self.settings
        self.auth_failures = RateLimit(limits.max_auth_failures, limits.auth_window_s)
        self.uploads = RateLimit(limits.max_uploads_per_hour, 3600.0)
        self._checks = threading.BoundedSemaphore(max(1, limits.max_checks))
        self.check_limits = Limits(limits.check_timeout_s, limits.check_memory_mb)
        for b in self.benchmarks.values():
            self.db.register_benchmark(b.name, b.version, b.title, b.record())

    @property
    def home(self) -> Path:
        return self.settings.home

    @property
    def default_benchmark(self) -> str:
        return self.settings.default_benchmark or next(iter(self.benchmarks))

    # ------------------------------------------------------------------ the service and its benchmarks
    def health(self) -> dict[str, Any]:
        """Version, database kind, benchmarks, job counts by status and live workers, and ``status``: ``ok``, or
        ``degraded`` with the ``problems`` (the database is unreachable; no worker is alive, so queued jobs wait)."""
        problems, jobs, workers = [], None, None
        try:
            jobs, workers = self.db.count_jobs(), self.db.live_workers()
        except UNREACHABLE as err:
            problems.append(f"the database is unreachable ({short(err)})")
        if workers == 0:
            problems.append("no worker is alive: queued jobs wait until one starts (geneval worker)")
        return {
            "status": "degraded" if problems else "ok",
            "problems": problems,
            "version": __version__,
            "database": self.db.dialect,
            "benchmarks": list(self.benchmarks),
            "jobs": jobs,
            "workers": workers,
        }

    def benchmark(self, name: str) -> Benchmark:
        if name not in self.benchmarks:
            raise KeyError(f"unknown benchmark {clip(name, 64)!r}; available: {', '.join(self.benchmarks)}.")
        return self.benchmarks[name]

    def offered(self, name: str) -> Benchmark:
        """:meth:`benchmark` for a benchmark named in a URL: an unknown one is :class:`NotFound`."""
        try:
            return self.benchmark(name)
        except KeyError as err:
            raise NotFound(err.args[0]) from None

    def benchmark_records(self) -> list[dict[str, Any]]:
        """Every offered benchmark's record (:meth:`Benchmark.record`) with the versions registered, newest first."""
        return [b.record() | {"versions": self.versions(b.name)} for b in self.benchmarks.values()]

    def versions(self, name: str) -> list[str]:
        """The registered versions of benchmark ``name``, newest first."""
        return [v.version for v in self.db.benchmark_versions(name)]

    def classifier_choices(self) -> dict[str, list[str]]:
        """The model kinds a submission may use and the registered classifier configs ``kind=config`` may name."""
        return {"kinds": list(KINDS), "configs": sorted(self.classifiers)}

    def job_counts(self, benchmark: str | None = None, version: str | None = None) -> dict[str, int]:
        return self.db.count_jobs(benchmark=benchmark, version=version)

    def standings(self, name: str, version: str | None = None, **page) -> Standings:
        """The stored standings of benchmark ``name`` at ``version`` (default: the current preset's); ``page``:
        ``sort``, ``descending``, ``limit``, ``offset``, ``every_mark`` (:func:`read_standings`). Raises
        :class:`NotFound` for an unknown benchmark, :class:`UnknownVersion` for a version never registered and
        :class:`Invalid` for an unknown ``sort``."""
        bench = self.offered(name)
        if page.get("sort", SORT_KEYS[0]) not in SORT_KEYS:
            raise Invalid(f"sort must be one of {', '.join(SORT_KEYS)}.")
        if version is not None and version != bench.version:
            known = self.versions(name)
            if version not in known:
                shown = version if len(version) <= 64 else version[:64] + "..."
                raise UnknownVersion(
                    f"benchmark {name} has no version {shown!r}; its versions: {', '.join(known)} (newest first)."
                )
        return read_standings(self.db, name, version or bench.version, **page)

    # ------------------------------------------------------------------ tokens
    def token_for(self, secret: str) -> TokenInfo | None:
        """The live token whose secret is ``secret``, else None."""
        return self.db.token_for(secret)

    def create_token(self, name: str, role: str) -> tuple[str, TokenInfo]:
        """A new token: its secret (shown once) and its record."""
        return self.db.create_token(name, role)

    def tokens(self) -> list[TokenInfo]:
        return self.db.list_tokens()

    def revoke_token(self, token_id: str) -> None:
        if not self.db.revoke_token(token_id):
            raise NotFound(f"no live token {clip(token_id, 64)!r}.")

    # ------------------------------------------------------------------ uploads and jobs
    @property
    def upload_dir(self) -> Path:
        """Where uploads arrive (as temp files) and are kept (as ``<sha256>.<ext>``)."""
        return self.home / "uploads"

    def may_upload(self, owner: TokenInfo) -> None:
        """Count an upload of ``owner``'s, or refuse it (:class:`TooMany`, before its body is read) when the token
        made ``max_uploads_per_hour`` in the last hour (refused ones count too: each costs a check)."""
        if owner.role == "admin":
            return
        wait = self.uploads.retry_after(owner.id)
        if wait is not None:
            raise TooMany(
                f"token {owner.name!r} made {self.uploads.limit} uploads in the last hour, its limit (server setting "
                f"max_uploads_per_hour); retry in {wait:.0f} s.",
                wait,
            )
        self.uploads.add(owner.id)

    def add_upload(self, owner: TokenInfo, tmp: Path, sha256: str, size: int, filename: str) -> UploadInfo:
        """Identify the received file ``tmp`` (refusing pickles and unknown formats: :class:`UploadRefused`; a check
        past its limits: :class:`UploadTooCostly`), move it to ``home/uploads/<sha256>.<ext>`` and record it as
        ``owner``'s. The temp file is removed whatever refuses it. At most ``max_checks`` checks run at once; one more
        is :class:`TooMany`."""
        try:
            if not self._checks.acquire(blocking=False):
                raise TooMany(
                    f"the server is checking {self.settings.max_checks} uploads already (server setting max_checks); "
                    "retry in a few seconds.",
                    5,
                )
            try:
                kind = sniff_upload(tmp, self.check_limits)
            finally:
                self._checks.release()
        except BaseException:  # refused, over a limit, or the server stopping: nothing is left behind
            tmp.unlink(missing_ok=True)
            raise
        rel = f"uploads/{sha256}.{'safetensors' if kind == 'safetensors' else 'pt'}"
        os.replace(tmp, self.home / rel)
        return self.db.add_upload(owner.id, kind, sha256, size, filename, rel)

    def submit(self, benchmark: str, name: str, model: dict, overrides: dict, owner: TokenInfo) -> JobInfo:
        """Queue ``owner``'s model ``model`` (kind, name, upload id, ...) as ``name`` on ``benchmark`` with the
        allowlisted ``overrides``, with fresh recorded seeds; a refusal names the request key at fault."""
        try:
            bench = self.benchmark(benchmark)
        except KeyError as err:
            raise Invalid(err.args[0], key="benchmark") from None
        try:
            config, overrides = bench.apply_overrides(overrides)
        except OverrideRefused as err:
            raise Invalid(str(err), key=f"overrides.{err.key}") from None
        upload = None
        if model.get("upload") is not None:
            upload = self.db.get_upload(model["upload"])
            if upload is None or (upload.owner_id != owner.id and owner.role != "admin"):
                raise Invalid(
                    f"no upload {model['upload']!r} of yours; upload the file first (POST /api/uploads).",
                    key="model.upload",
                )
        spec = {k: v for k, v in model.items() if k != "upload"}
        try:
            config["classifier"] = classifier_config(
                spec, self.classifiers, upload and upload.kind, upload and upload.path
            )
        except ModelRefused as err:
            raise Invalid(str(err), key=f"model.{err.key}") from None
        try:
            return self.db.submit_job(
                benchmark=bench.name,
                benchmark_version=bench.version,
                name=name,
                owner=owner,
                model={k: v for k, v in model.items() if v is not None} | ({"sha256": upload.sha256} if upload else {}),
                config=config,
                overrides=overrides,
                seeds=[secrets.randbits(31) for _ in range(bench.repetitions)],  # fresh per submission, recorded
                upload_path=upload and upload.path,
                max_active=0 if owner.role == "admin" else self.settings.max_active_jobs,
            )
        except NameTaken as err:
            raise Conflict(str(err), key="name") from None
        except QuotaExceeded as err:
            raise TooMany(str(err), QUOTA_RETRY_S) from None

    def job(self, job_id: str) -> JobInfo:
        job = self.db.get_job(job_id)
        if job is None:
            raise NotFound(f"no job {clip(job_id, 64)!r}.")
        return job

    def jobs(self, status: str | None = None, benchmark: str | None = None, limit: int = 200) -> list[JobInfo]:
        """The queue, newest first, at most ``limit`` (1..1000) jobs."""
        return self.db.list_jobs(status=status, benchmark=benchmark, limit=max(1, min(limit, 1000)))

    def cancel(self, job_id: str, by: TokenInfo) -> JobInfo:
        """Cancel a job not yet final; only its submitter or an admin may."""
        job = self.job(job_id)
        if job.owner_id != by.id and by.role != "admin":
            raise Forbidden("only the job's submitter or an admin may cancel it.")
        if job.status in FINAL:
            raise Conflict(f"job {job_id} is already {job.status}.")
        return self.db.cancel_job(job_id)

    def requeue(self, job_id: str) -> JobInfo:
        """Put a failed or cancelled job back in the queue (same seeds), unless its name was taken since."""
        job = self.job(job_id)
        if job.status not in ("failed", "cancelled"):
            raise Conflict(f"job {job_id} is {job.status}; only failed or cancelled jobs are re-queued.")
        try:
            return self.db.requeue_job(job_id)
        except NameTaken as err:  # another job took its name since: one leaderboard row per name
            raise Conflict(str(err), key="name") from None

    # ------------------------------------------------------------------ a finished job's files
    def rep_dir(self, job: JobInfo, rep: int) -> Path:
        return job.rep_dir(self.home, rep)

    def finished_run(self, job_id: str, rep: int, what: str = "results exist") -> tuple[JobInfo, Path]:
        """A done job and the run directory of its repetition ``rep`` (:class:`Conflict` before it is done)."""
        job = self.job(job_id)
        if job.status != "done":
            raise Conflict(f"job {job_id} is {job.status}; its {what} once it is done.")
        try:
            return job, self.rep_dir(job, rep)
        except IndexError as err:
            raise NotFound(str(err)) from None

    def results_file(self, job_id: str, rep: int) -> Path:
        """The results.json of a done job's repetition."""
        return self.finished_run(job_id, rep)[1] / "results.json"

    def report_file(self, job_id: str, rep: int) -> Path:
        """The report.html of a done job's repetition."""
        job, _ = self.finished_run(job_id, rep, what="report exists")
        return self.report(job, rep)

    def report(self, job: JobInfo, rep: int) -> Path:
        """The run's report.html (the worker writes it; made here when missing)."""
        path = self.rep_dir(job, rep) / "report.html"
        if not path.is_file():
            write_report(self.rep_dir(job, rep), path)
        return path

    def snapshot(self, job_id: str, rep: int) -> tuple[JobInfo, Path]:
        """A done job's repetition as a snapshot tar (:meth:`snapshot_tar`); :class:`Conflict` when it has none."""
        job, _ = self.finished_run(job_id, rep)
        try:
            return job, self.snapshot_tar(job, rep)
        except (SnapshotError, FileNotFoundError) as err:
            raise Conflict(f"no snapshot for this run: {err}") from None

    def snapshot_tar(self, job: JobInfo, rep: int) -> Path:
        """The run's generated images as a snapshot (genEval.snapshots.format.export_snapshot, image-folder format),
        packed into one tar under ``home/snapshots`` (made once, then served from there)."""
        out = self.home / "snapshots" / job.id
        tar_path = out / f"rep{rep}.tar"
        with self._export_lock:
            if not tar_path.is_file():
                snap = export_snapshot(self.rep_dir(job, rep), out / f"rep{rep}", overwrite=True)

                def pack(fh) -> None:
                    with tarfile.open(fileobj=fh, mode="w") as tar:
                        tar.add(snap, arcname=f"{job.name}-rep{rep}-snapshot")

                atomic_write(tar_path, pack)
        return tar_path

    # ------------------------------------------------------------------ workers
    def workers(self) -> list[dict[str, Any]]:
        """The workers with their ``state`` (:meth:`WorkerInfo.state`); those stopped or gone for
        ``worker_retention_s`` are dropped first."""
        retention = self.settings.worker_retention_s
        self.db.prune_workers(retention)
        now = self.db.now()
        return [vars(w) | {"state": w.state(now)} for w in self.db.list_workers(retention)]
