"""The service as one object: what a server process works with, composed of the slices.

:class:`Service` holds the database (the session factory and each slice's store:
:class:`~genEval.service.server.database.Database`), the service directory and the settings, and the slices' desks:
what this server offers (``catalog``: benchmarks and classifier configs), what submissions go through (``jobs``),
a finished job's files (``files``), uploads (``uploads``) and the failed authentications counted per client address
(``auth_failures``). The routes reach it through :mod:`~genEval.service.server.deps`; every slice owns its store, its
router and its answers (:mod:`genEval.service.server`), and everything durable is in the database and under
``home``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from genEval.sandbox import ISOLATION
from genEval.scores.intervals import N_BOOT
from genEval.service.benchmarks import Benchmark
from genEval.service.limits import RateLimit
from genEval.service.records import WORKER_RETENTION_S
from genEval.service.server.benchmarks.catalog import Catalog
from genEval.service.server.database import Database
from genEval.service.server.jobs.desk import JobDesk
from genEval.service.server.jobs.files import RunFiles
from genEval.service.server.uploads.desk import UploadDesk
from genEval.validation import SettingError, is_whole

MiB = 1024 * 1024
#: The quotas of :class:`Settings` (0: no limit).
QUOTAS = ("max_active_jobs", "max_uploads_per_hour", "max_auth_failures")


@dataclass(frozen=True)
class Settings:
    """Server settings: the node ``conf/server/default.yaml`` (``_target_`` this class), built by ``geneval serve``
    (which passes ``home``); its keys are also spelled at the top level of ``conf/serve.yaml`` (``max_checks=2``:
    ``conf/_shortcuts/server.yaml``). ``home``: the service directory (database file for SQLite, uploads, run
    directories, snapshots). ``max_upload_mb``: the largest model file accepted (:attr:`max_upload_bytes`).
    ``n_boot``: bootstrap resamples of the leaderboard's intervals and marks (the workers' ``n_boot`` too).
    ``max_request_kb``: the largest request body other than an upload (:attr:`max_json_bytes`).
    ``worker_retention_s``: how long stopped or gone workers stay listed.

    Limits (``conf/serve.yaml`` says why each default): an upload's check, in a sandboxed child process
    (``isolation``: :data:`genEval.sandbox.ISOLATION`), may take ``check_timeout_s`` seconds and ``check_memory_mb``
    MiB, and at most ``max_checks`` run at once, ``max_checks_per_token`` of one token; where the check cannot be
    isolated, TorchScript and torch.export uploads are refused unless ``allow_unsandboxed_models``; a submitter
    token may have ``max_active_jobs`` jobs queued or running and make ``max_uploads_per_hour`` uploads (admins
    neither; both counted in the database); a client address may fail ``max_auth_failures`` authentications per
    ``auth_window_s`` seconds with unknown tokens. A limit of 0 is no limit."""

    home: Path
    max_upload_mb: float = 512.0
    default_benchmark: str | None = None
    n_boot: int = N_BOOT
    max_request_kb: float = 1024.0
    worker_retention_s: float = WORKER_RETENTION_S
    check_timeout_s: float = 60.0
    check_memory_mb: int = 4096
    max_checks: int = 2
    max_checks_per_token: int = 1
    isolation: str = "auto"
    allow_unsandboxed_models: bool = False
    max_active_jobs: int = 20
    max_uploads_per_hour: int = 20
    max_auth_failures: int = 20
    auth_window_s: float = 60.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "home", Path(self.home))
        for key, example in (("max_upload_mb", "512"), ("max_request_kb", "1024")):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise SettingError(key, value, "a number > 0", example)
        if not is_whole(self.n_boot, 1):
            raise SettingError("n_boot", self.n_boot, "a whole number >= 1", str(N_BOOT))
        for key in ("check_memory_mb", "max_checks", "max_checks_per_token", *QUOTAS):
            if not is_whole(getattr(self, key), 0):
                raise SettingError(key, getattr(self, key), "a whole number >= 0", str(getattr(Settings, key)))
        for key in ("check_timeout_s", "worker_retention_s", "auth_window_s"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise SettingError(key, value, "a number of seconds >= 0", str(getattr(Settings, key)))
        if self.isolation not in ISOLATION:
            raise SettingError("isolation", self.isolation, " | ".join(ISOLATION), "auto", "docs/service.md")
        if not isinstance(self.allow_unsandboxed_models, bool):
            raise SettingError("allow_unsandboxed_models", self.allow_unsandboxed_models, "true or false", "false")

    @property
    def max_upload_bytes(self) -> int:
        """The largest model file accepted, in bytes (``max_upload_mb``)."""
        return int(self.max_upload_mb * MiB)

    @property
    def max_json_bytes(self) -> int:
        """The largest JSON request body, in bytes (``max_request_kb``)."""
        return int(self.max_request_kb * 1024)


@dataclass
class Service:
    """The service of one server process (see the module docstring): ``benchmarks`` name -> current preset,
    ``classifiers`` the registered classifier configs a submission may name (name -> resolved config)."""

    db: Database
    settings: Settings
    benchmarks: dict[str, Benchmark]
    classifiers: dict[str, dict]
    catalog: Catalog = field(init=False)
    jobs: JobDesk = field(init=False)
    files: RunFiles = field(init=False)
    uploads: UploadDesk = field(init=False)
    auth_failures: RateLimit = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self.catalog = Catalog(self.db.benchmarks, self.benchmarks, self.classifiers, s.default_benchmark)
        db = self.db
        self.jobs = JobDesk(db.jobs, db.uploads, db.benchmarks, db.endings.withdraw, self.catalog, s.max_active_jobs)
        self.files = RunFiles(self.jobs, self.home)
        self.uploads = UploadDesk(self.db.uploads, self.home, s)
        self.auth_failures = RateLimit(s.max_auth_failures, s.auth_window_s)

    @property
    def home(self) -> Path:
        return self.settings.home
