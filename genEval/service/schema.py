"""The service database's tables and the plain views its methods return (:mod:`genEval.service.db` uses them).

Rows are SQLAlchemy ORM classes; callers get frozen dataclasses (:class:`JobInfo`, ...) and hold no session. The
name rule (one queued, running or done job per name and benchmark version: one leaderboard row per model) is a
partial unique index, :data:`ACTIVE_NAME`, so the database itself refuses a second one however many servers submit
at once. :func:`upgrade` brings a database made by an earlier genEval up to these tables (new columns, the index).
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from sqlalchemy import JSON, Float, Index, Integer, String, Text, inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

log = logging.getLogger(__name__)

STATUSES = ("queued", "running", "done", "failed", "cancelled")
#: Names of the beaten models a page shows per metric (the rest are counted; the API lists them all).
MARK_NAMES = 8
ACTIVE = ("queued", "running")
FINAL = ("done", "failed", "cancelled")
#: The statuses that hold a model's name in its benchmark version (a failed or cancelled job frees it).
NAMED = ("queued", "running", "done")
#: How long a worker that stopped or vanished stays listed by ``/api/workers`` (seconds; ``worker_retention_s``).
WORKER_RETENTION_S = 24 * 3600.0
_NAMED_SQL = text("status IN ('queued', 'running', 'done')")


class Base(DeclarativeBase):
    pass


class TokenRow(Base):
    __tablename__ = "tokens"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class BenchmarkRow(Base):
    __tablename__ = "benchmarks"
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    version: Mapped[str] = mapped_column(String(64), primary_key=True)
    title: Mapped[str] = mapped_column(String(300))
    config: Mapped[dict] = mapped_column(JSON)
    registered_at: Mapped[float] = mapped_column(Float)


class UploadRow(Base):
    __tablename__ = "uploads"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner_id: Mapped[str] = mapped_column(String(32), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    sha256: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(Integer)
    filename: Mapped[str] = mapped_column(String(200))
    path: Mapped[str] = mapped_column(String(300))
    created_at: Mapped[float] = mapped_column(Float)


class JobRow(Base):
    __tablename__ = "jobs"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    benchmark: Mapped[str] = mapped_column(String(100), index=True)
    benchmark_version: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(100))
    owner_id: Mapped[str] = mapped_column(String(32), index=True)
    owner_name: Mapped[str] = mapped_column(String(200))
    model: Mapped[dict] = mapped_column(JSON)
    config: Mapped[dict] = mapped_column(JSON)
    overrides: Mapped[dict] = mapped_column(JSON)
    seeds: Mapped[list] = mapped_column(JSON)
    run_dir: Mapped[str] = mapped_column(String(300))
    upload_path: Mapped[str | None] = mapped_column(String(300), nullable=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    created_at: Mapped[float] = mapped_column(Float, index=True)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    worker_id: Mapped[str | None] = mapped_column(String(100), nullable=True)
    lease_expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    heartbeat_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    images_done: Mapped[int] = mapped_column(Integer, default=0)
    images_total: Mapped[int | None] = mapped_column(Integer, nullable=True)
    eta_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)  # the reason, as the submitter sees it
    result: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    error_detail: Mapped[str | None] = mapped_column(Text, nullable=True)  # the full text (admins, server log)

    __table_args__ = (
        Index(
            "uq_jobs_active_name",
            "benchmark",
            "benchmark_version",
            "name",
            unique=True,
            sqlite_where=_NAMED_SQL,
            postgresql_where=_NAMED_SQL,
        ),
    )


class StandingRow(Base):
    __tablename__ = "standings"
    job_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    benchmark: Mapped[str] = mapped_column(String(100), index=True)
    version: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(100))
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    run_dirs: Mapped[list] = mapped_column(JSON)
    repetitions: Mapped[int] = mapped_column(Integer)
    scores: Mapped[dict | None] = mapped_column(JSON(none_as_null=True), nullable=True)  # None: SQL NULL
    better_than: Mapped[dict] = mapped_column(JSON)
    warnings: Mapped[list] = mapped_column(JSON)
    interval_note: Mapped[str] = mapped_column(Text)
    computed_at: Mapped[float] = mapped_column(Float)
    #: metric -> {"count": n, "first": the first MARK_NAMES names in sorted order}: what a page shows of
    #: ``better_than`` without reading every name (``better_than`` grows with the square of the models).
    marks: Mapped[dict] = mapped_column(JSON)


class WorkerRow(Base):
    __tablename__ = "workers"
    id: Mapped[str] = mapped_column(String(100), primary_key=True)
    host: Mapped[str] = mapped_column(String(200))
    pid: Mapped[int] = mapped_column(Integer)
    device: Mapped[str] = mapped_column(String(50))
    started_at: Mapped[float] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)
    job_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    stopped_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    lease_s: Mapped[float | None] = mapped_column(Float, nullable=True)  # gone when not seen for this long


# ------------------------------------------------------------------------------------ plain views
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

    def rep_dir(self, home: str | Path, rep: int) -> Path:
        """Run directory of repetition ``rep`` (``<home>/<run_dir>/rep<rep>``)."""
        if not 0 <= rep < len(self.seeds):
            raise IndexError(f"job {self.id} has repetitions 0..{len(self.seeds) - 1}, not {rep}.")
        return Path(home) / self.run_dir / f"rep{rep}"

    def public(self) -> dict[str, Any]:
        """What ``GET /api/jobs/{id}`` shows anyone: everything but the resolved config, the upload path, the
        worker (host and pid) and the error's full text (``error`` is the reason alone)."""
        skip = {"config", "upload_path", "owner_id", "lease_expires_at", "worker_id", "error_detail"}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}

    def for_admin(self) -> dict[str, Any]:
        """:meth:`public` plus the worker and the error's full text (what an admin token sees)."""
        return {**self.public(), "worker_id": self.worker_id, "error_detail": self.error_detail}


@dataclass(frozen=True)
class StandingInfo:
    """A finished job's leaderboard row. ``run_dirs``: its repetitions' run directories relative to ``home``;
    ``scores``: metric -> {value, low, high} (None when its runs could not be read: left out, with a warning);
    ``better_than``: metric -> names of the models it is significantly better than."""

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


@dataclass(frozen=True)
class BoardRow:
    """A row as a leaderboard shows it: ``marks`` (metric -> count and first names) always, ``better_than`` (every
    name) only when asked for."""

    job_id: str
    name: str
    finished_at: float | None
    repetitions: int
    scores: dict
    marks: dict
    better_than: dict | None


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


def _view(cls: type, row: Any) -> Any:
    return cls(**{f.name: getattr(row, f.name) for f in fields(cls)})


class NameTaken(ValueError):
    """A submission's name is already used by an active or finished job of that benchmark version."""


def upgrade(engine: Engine) -> None:
    """Bring the tables of an earlier genEval up to these (idempotent): add missing columns, and the unique index of
    active names. A database that already holds two active jobs of one name (accepted by a genEval without the
    index) keeps working without the index, with an error in the log naming them, until an admin cancels one."""
    tables = inspect(engine)
    for table in (JobRow.__table__, WorkerRow.__table__):
        have = {c["name"] for c in tables.get_columns(table.name)}
        for column in table.columns:
            if column.name not in have:
                kind = column.type.compile(dialect=engine.dialect)
                with engine.begin() as conn:
                    conn.execute(text(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}"))
                log.info("database: added column %s.%s", table.name, column.name)
    index = next(i for i in JobRow.__table__.indexes if i.name == "uq_jobs_active_name")
    if index.name in {i["name"] for i in inspect(engine).get_indexes(JobRow.__tablename__)}:
        return
    try:
        index.create(engine)
    except (IntegrityError, OperationalError, ProgrammingError) as err:
        with engine.connect() as conn:
            dupes = conn.execute(
                text(
                    "SELECT benchmark, benchmark_version, name, COUNT(*) FROM jobs WHERE "
                    + _NAMED_SQL.text
                    + " GROUP BY benchmark, benchmark_version, name HAVING COUNT(*) > 1"
                )
            ).all()
        if not dupes:
            raise
        shown = "; ".join(f"{b} {v} {n!r} x{c}" for b, v, n, c in dupes[:10])
        log.error(
            "database: several active jobs share a name (%s), so the unique index of names (%s) cannot be made; "
            "cancel all but one of each (POST /api/jobs/<id>/cancel) and restart (%s)",
            shown,
            index.name,
            str(err).splitlines()[0],
        )


def new_id() -> str:
    """A random, unguessable id (job and upload ids double as capability URLs for their results)."""
    return secrets.token_hex(16)
