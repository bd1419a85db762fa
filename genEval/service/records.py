"""The service's plain records: job statuses and the frozen records the database's stores return
(:mod:`genEval.service.server.database`), of which the API's answers are views (:mod:`genEval.service.server.views`).

Plain dataclasses and constants, no database library: the HTTP client, the job runner and the command layer use
them without the service stack (the ``[service]`` extra); the server's stores map them onto tables.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
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
class Mark:
    """What a page shows of the models a row is significantly better than on one score: how many (``count``) and
    the ``first`` :data:`MARK_NAMES` names in sorted order (the API lists them all). Stored as
    ``{"count", "first"}``."""

    count: int = 0
    first: tuple[str, ...] = ()

    @classmethod
    def of(cls, names: Sequence[str]) -> Mark:
        return cls(len(names), tuple(sorted(names)[:MARK_NAMES]))

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "first": list(self.first)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Mark:
        return cls(int(d["count"]), tuple(d["first"]))


@dataclass(frozen=True)
class SettledInfo:
    """What a settled benchmark's row holds beyond its standing: ``pooled``, the ranking score pooled over every
    source of every round (what orders the settled leaderboard; None: undefined), ``sources`` per model, ``rounds``
    run, and whether its submitter ``withdrawn`` it (it keeps its row but leaves the settled order). Stored as JSON
    (:meth:`to_dict` / :meth:`from_dict`, the ``{"pooled", "sources", "rounds"}`` of rows stored before it existed)."""

    pooled: float | None = None
    sources: int | None = None
    rounds: int = 0
    withdrawn: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; ``withdrawn`` only when set (the stored form of every earlier genEval)."""
        d = {"pooled": self.pooled, "sources": self.sources, "rounds": self.rounds}
        return d | ({"withdrawn": True} if self.withdrawn else {})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SettledInfo:
        """The inverse of :meth:`to_dict`; a key it does not know is refused, naming it."""
        unknown = sorted(set(d) - {"pooled", "sources", "rounds", "withdrawn"})
        if unknown:
            raise ValueError(
                f"a stored settled row has unknown keys {unknown}; known: pooled, sources, rounds, withdrawn."
            )
        pooled, sources = d.get("pooled"), d.get("sources")
        return cls(
            None if pooled is None else float(pooled),
            None if sources is None else int(sources),
            int(d.get("rounds") or 0),
            bool(d.get("withdrawn", False)),
        )


@dataclass(frozen=True)
class StandingInfo:
    """A finished job's leaderboard row, as the ``standings`` store keeps and returns it: the typed
    :class:`~genEval.comparisons.standing.Standing` (its name, repetitions, scores and ``better_than``: score ->
    names of the models it is significantly better than; no scores when its runs could not be read: not
    :attr:`ranked`, left out with a warning), ``run_dirs`` (its repetitions' run directories relative to ``home``),
    the comparison's ``warnings`` and ``interval_note``. On a settled benchmark the row is the submission's
    (``job_id``) over all its finished rounds (repetitions = rounds, ``run_dirs`` one per round) with its
    :class:`SettledInfo`, and a board read sets the standing's rank, sources and verdict on it and the row below.

    ``marks`` (score -> :class:`Mark`) is what a page shows of ``better_than`` without reading every name: set for
    every marked score when read from the store (whose board read leaves ``better_than`` empty unless asked for
    every name); the store derives it from ``better_than`` when storing."""

    job_id: str
    benchmark: str
    version: str
    standing: Standing
    finished_at: float | None
    run_dirs: list
    warnings: list = field(default_factory=list)
    interval_note: str = ""
    computed_at: float = 0.0
    settled: SettledInfo | None = None
    marks: dict[str, Mark] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.standing.name

    @property
    def repetitions(self) -> int:
        return self.standing.repetitions

    @property
    def ranked(self) -> bool:
        """Whether the row has scores (a row whose runs could not be read has none and is not ranked)."""
        return bool(self.standing.scores)


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
