"""How a worker runs jobs: :class:`WorkerSettings`, the one object :class:`~genEval.service.server.worker.Worker`
takes (docs/service.md, "Workers").

``conf/worker/default.yaml`` is its node (``_target_`` this class), built by ``geneval worker`` and by ``geneval
serve`` for its in-process workers (:mod:`genEval.commands.server`, through :func:`genEval.commands.bundles.bundle`);
the names users type at the top level (``lease_s=120``, ``isolation=none``, ``max_job_s=600``) are its short
spellings (``conf/_shortcuts/worker.yaml``), the node's own spelling is ``worker.lease_s=120``. The defaults live
here; every value is checked here, and a bad one is refused naming its key, the value and a valid example.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from genEval.sandbox import ISOLATION
from genEval.scores.intervals import N_BOOT
from genEval.service.records import WORKER_RETENTION_S
from genEval.validation import SettingError, is_whole


def _seconds(key: str, value: Any, example: str, positive: bool = False, note: str = "") -> float:
    """``value`` as seconds, refused (naming ``key``) unless a number > 0 (``positive``) or >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value > 0 if positive else value >= 0):
        raise SettingError(key, value, "a number of seconds " + ("> 0" if positive else ">= 0"), example, note)
    return float(value)


def _whole(key: str, value: Any, low: int, example: str, note: str = "") -> int:
    if not is_whole(value, low):
        raise SettingError(key, value, f"a whole number >= {low}", example, note)
    return int(value)


@dataclass(frozen=True)
class WorkerSettings:
    """The settings of one worker (the loop: :mod:`genEval.service.server.worker`'s docstring says what each does).

    ``device``: the device its jobs run on (the command passes its execution's, ``conf/execution``); ``worker_id``:
    its id (None: ``<host>:<pid>:<random>``); ``host``: the name it gives itself (None: the machine's hostname).
    The lease: a running job is renewed every ``heartbeat_s`` (below ``lease_s``) and taken over by another worker
    once not renewed for ``lease_s``; an idle worker polls every ``poll_s``; a job whose worker died
    ``max_attempts`` times fails. ``exit_when_idle`` / ``max_jobs``: stop when the queue is empty / after that many
    jobs (None: no limit). ``n_boot``: bootstrap resamples of the leaderboard rows it stores (the server's, so that
    every row is computed alike). ``backfill_s``: how often an idle worker stores missing rows; ``retention_s``: how
    long stopped or gone workers stay listed; ``stop_timeout_s``: on SIGTERM, how long the running evaluation may
    take to keep its samples and hand the job back.

    Each job's evaluation child (:class:`genEval.service.child.JobChild`): ``isolation``
    (:data:`genEval.sandbox.ISOLATION`; ``allow_unsandboxed_models`` runs TorchScript/torch.export jobs where it
    cannot be had), at most ``max_job_s`` seconds, ``stall_heartbeats`` heartbeats without progress and
    ``job_memory_mb`` MiB (each 0: no limit); a cancelled child gets ``cancel_grace_s`` after SIGTERM, one that
    answered ``exit_grace_s`` to exit, then SIGKILL."""

    device: str = "auto"
    worker_id: str | None = None
    host: str | None = None
    lease_s: float = 60.0
    heartbeat_s: float = 5.0
    poll_s: float = 2.0
    max_attempts: int = 3
    exit_when_idle: bool = False
    max_jobs: int | None = None
    n_boot: int = N_BOOT
    backfill_s: float = 60.0
    retention_s: float = WORKER_RETENTION_S
    stop_timeout_s: float = 30.0
    isolation: str = "auto"
    allow_unsandboxed_models: bool = False
    max_job_s: float = 14400.0
    stall_heartbeats: int = 120
    job_memory_mb: int = 16384
    cancel_grace_s: float = 3.0
    exit_grace_s: float = 30.0

    def __post_init__(self) -> None:
        put = object.__setattr__  # frozen: the checked values are stored once, as numbers
        for key, example in (("lease_s", "60"), ("heartbeat_s", "5"), ("poll_s", "2"), ("backfill_s", "60")):
            put(self, key, _seconds(key, getattr(self, key), example, positive=True))
        if not self.heartbeat_s < self.lease_s:
            raise SettingError(
                "heartbeat_s", self.heartbeat_s, f"below lease_s ({self.lease_s:g})", f"{self.lease_s / 12:g}",
                "or jobs expire while their worker is alive",
            )  # fmt: skip
        for key, example, note in (
            ("retention_s", "86400", ""),
            ("stop_timeout_s", "30", ""),
            ("max_job_s", "14400", "0: no limit"),
            ("cancel_grace_s", "3", ""),
            ("exit_grace_s", "30", ""),
        ):
            put(self, key, _seconds(key, getattr(self, key), example, note=note))
        put(self, "max_attempts", _whole("max_attempts", self.max_attempts, 1, "3"))
        put(self, "n_boot", _whole("n_boot", self.n_boot, 1, str(N_BOOT)))
        put(self, "stall_heartbeats", _whole("stall_heartbeats", self.stall_heartbeats, 0, "120", "0: never stalled"))
        put(self, "job_memory_mb", _whole("job_memory_mb", self.job_memory_mb or 0, 0, "16384", "0: no limit"))
        if self.max_jobs is not None:
            put(self, "max_jobs", _whole("max_jobs", self.max_jobs, 1, "1", "null: no limit"))
        for key in ("exit_when_idle", "allow_unsandboxed_models"):
            if not isinstance(getattr(self, key), bool):
                raise SettingError(key, getattr(self, key), "true or false", "false")
        if self.isolation not in ISOLATION:
            raise SettingError("isolation", self.isolation, " | ".join(ISOLATION), "auto", "docs/service.md")

    @property
    def upkeep_s(self) -> float:
        """How often the server re-queues expired jobs (:class:`~genEval.service.server.supervisor.Supervisor`):
        four times a lease."""
        return self.lease_s / 4

    def to_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.__dataclass_fields__}
