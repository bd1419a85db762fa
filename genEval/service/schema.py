"""The service database's tables (:mod:`genEval.service.db` uses them).

Rows are SQLAlchemy ORM classes; callers get the frozen views of :mod:`genEval.service.records` (:class:`JobInfo`,
...) and hold no session. The
name rule (one queued, running or done job per name and benchmark version: one leaderboard row per model) is a
partial unique index, :data:`ACTIVE_NAME`, so the database itself refuses a second one however many servers submit
at once. :func:`upgrade` brings a database made by an earlier genEval up to these tables (new columns, the index).
"""

from __future__ import annotations

import logging
from dataclasses import fields
from typing import Any

from sqlalchemy import JSON, Float, Index, Integer, String, Text, inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

log = logging.getLogger(__name__)


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


def _view(cls: type, row: Any) -> Any:
    return cls(**{f.name: getattr(row, f.name) for f in fields(cls)})


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
