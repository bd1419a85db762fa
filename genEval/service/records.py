"""The service's plain records: job statuses and the frozen records the database's stores return
(:mod:`genEval.service.server.database`), of which the API's answers are views (:mod:`genEval.service.server.views`).

Plain dataclasses and constants, no database library: the HTTP client, the job runner and the command layer use
them without the service stack (the ``[service]`` extra); the server's stores map them onto tables.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the client and the job runner import these records without the comparison library
    from genEval.comparisons.settings import StopRule
    from genEval.comparisons.standing import Standing

STATUSES = ("queued", "running", "done", "failed", "cancelled")
#: Names of the beaten models a page shows per metric (the rest are counted; the API lists them all).
MARK_NAMES = 8
#: The scores that get "significantly better" marks (paired bootstrap differences).
MARKED = ("fmr", "sa", "pa")
ACTIVE = ("queued", "running")
FINAL = ("done", "failed", "cancelled")
#: The statuses that hold a model's name in its benchmark version (a failed or cancelled job frees it).
NAMED = ("queued", "running", "done")
#: How long a worker that stopped or vanished stays listed by ``/api/workers`` (seconds; ``worker_retention_s``).
WORKER_RETENTION_S = 24 * 3600.0


class NameTaken(ValueError):
    """A submission's name is already used by an active or finished job of that benchmark version."""


class QuotaExceeded(ValueError):
    """A token already has as many jobs queued or running as a token may."""


def new_id() -> str:
    """A random, unguessable id (job and upload ids double as capability URLs for their results)."""
    return secrets.token_hex(16)


@dataclass(frozen=True)
class TokenInfo:
    id: str
    name: str
    role: str
    created_at: float
    revoked_at: float | None


@dataclass(frozen=True)
class BenchmarkVersion:
    name: str
    version: str
    title: str
    config: dict
    registered_at: float
    reuse: dict | None = None
    #: The comparison settings: a settled version's stop rule (None: fixed repetitions).
    stop: StopRule | None = None


@dataclass(frozen=True)
class UploadInfo:
    id: str
    owner_id: str
    kind: str
    sha256: str
    size: int
    filename: str
    path: str
    created_at: float


@dataclass(frozen=True)
class JobInfo:
    id: str
    benchmark: str
    benchmark_version: str
    name: str
    owner_id: str
    owner_name: str
    model: dict
    config: dict
    overrides: dict
    seeds: list
    run_dir: str
    upload_path: str | None
    status: str
    created_at: float
    started_at: float | None
    finished_at: float | None
    worker_id: str | None
    lease_expires_at: float | None
    heartbeat_at: float | None
    attempts: int
    images_done: int
    images_total: int | None
    eta_s: float | None
    error: str | None
    result: dict | None
    error_detail: str | None = None
    #: A settled benchmark's round (0: the submission itself) and, for a later round, the submission's job id.
    round: int = 0
    parent_id: str | None = None

    @property
    def root_id(self) -> str:
        """The job id of the submission this job is a round of (its own for a submission): its leaderboard row."""
        return self.parent_id or self.id

    def rep_dir(self, home: str | Path, rep: int) -> Path:
        """Run directory of repetition ``rep`` (``<home>/<run_dir>/rep<rep>``)."""
        if not 0 <= rep < len(self.seeds):
            raise IndexError(f"job {self.id} has repetitions 0..{len(self.seeds) - 1}, not {rep}.")
        return Path(home) / self.run_dir / f"rep{rep}"

    @property
    def shown_seeds(self) -> list | None:
        """The seeds as anyone may see them: a settled benchmark's round (its seed draws the round's sources, the same
        for every model) shows its seed only once it has run; None before."""
        # a settled job's config carries its rule (comparison.sequential; stored before that spelling: stop), as
        # StopRule.carried_by reads it; read here by its keys, so that this module stays torch-free
        settled = (self.config.get("comparison") or {}).get("sequential") or self.config.get("stop")
        return None if settled and self.status != "done" else self.seeds

    def public(self) -> dict[str, Any]:
        """What ``GET /api/jobs/{id}`` shows anyone: everything but the resolved config, the upload path, the
        worker (host and pid) and the error's full text (``error`` is the reason alone); a settled round's seed only
        once it has run (:attr:`shown_seeds`)."""
        skip = {"config", "upload_path", "owner_id", "lease_expires_at", "worker_id", "error_detail"}
        shown = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        return shown | {"seeds": self.shown_seeds}

    def for_admin(self) -> dict[str, Any]:
        """:meth:`public` plus the worker and the error's full text (what an admin token sees)."""
        return {**self.public(), "worker_id": self.worker_id, "error_detail": self.error_detail}


@dataclass(frozen=True)
class StandingInfo:
    """A finished job's leaderboard row. ``run_dirs``: its repetitions' run directories relative to ``home``;
    ``scores``: metric -> {value, low, high} (None when its runs could not be read: left out, with a warning);
    ``better_than``: metric -> names of the models it is significantly better than. On a settled benchmark the row
    is the submission's (``job_id``) over all its finished rounds (``repetitions`` = rounds, ``run_dirs`` one per
    round) and ``settled`` holds ``pooled`` (the ranking score pooled over every source, which orders the settled
    leaderboard), ``sources`` and ``rounds``; None on a fixed benchmark."""

    job_id: str
    benchmark: str
    version: str
    name: str
    finished_at: float | None
    run_dirs: list
    repetitions: int
    scores: dict | None
    better_than: dict
    warnings: list
    interval_note: str
    computed_at: float
    settled: dict | None = None


@dataclass(frozen=True)
class BoardRow:
    """A row as a leaderboard shows it: the job, its typed :class:`~genEval.comparisons.standing.Standing` (its
    ``better_than`` every name only when asked for; on a settled benchmark its rank, sources and the verdict on it
    and the row below, set by the reader), ``marks`` (metric -> count and first names) always, ``run_dirs`` (one per
    repetition or round) and ``settled`` (``pooled``, ``sources``, ``rounds``) as stored."""

    job_id: str
    finished_at: float | None
    standing: Standing
    marks: dict
    run_dirs: list
    settled: dict | None = None

    @property
    def name(self) -> str:
        return self.standing.name

    @property
    def repetitions(self) -> int:
        return self.standing.repetitions

    @property
    def scores(self) -> dict:
        """The typed scores (a board row always has them: rows without are not ranked)."""
        return self.standing.scores


@dataclass(frozen=True)
class WorkerInfo:
    id: str
    host: str
    pid: int
    device: str
    started_at: float
    last_seen: float
    job_id: str | None
    stopped_at: float | None
    lease_s: float | None = None

    def state(self, now: float, default_lease_s: float = 60.0) -> str:
        """``stopped`` (it said so), ``gone`` (not seen within its lease: killed, or its machine lost), ``busy``
        (running a job) or ``idle``."""
        if self.stopped_at is not None:
            return "stopped"
        if now - self.last_seen > (self.lease_s or default_lease_s):
            return "gone"
        return "busy" if self.job_id else "idle"
