"""The service database: the one state the server and its workers share (SQLite or PostgreSQL), as a session factory
(:class:`~genEval.service.server.session.Sessions`) with each slice's store over it.

====================  =========================================================================================
``db.tokens``         API tokens (:mod:`~genEval.service.server.tokens.store`)
``db.benchmarks``     the benchmark versions registered (:mod:`~genEval.service.server.benchmarks.store`)
``db.uploads``        model files kept (:mod:`~genEval.service.server.uploads.store`)
``db.jobs``           submissions, for submitters and admins (:mod:`~genEval.service.server.jobs.store`)
``db.queue``          the same jobs as workers claim, renew and finish them (:mod:`~genEval.service.server.jobs.queue`)
``db.standings``      one leaderboard row per finished job (:mod:`~genEval.service.server.standings.store`)
``db.endings``        a job's end in both slices at once: finished with its row, withdrawn
                      (:mod:`~genEval.service.server.finishing`)
``db.verdicts``       settled benchmarks' verdicts on neighbours (:mod:`~genEval.service.server.standings.verdicts`)
``db.workers``        who evaluates, seen when (:mod:`~genEval.service.server.workers.store`)
====================  =========================================================================================

Stores return frozen records (:mod:`genEval.service.records`), never ORM objects, so callers hold no session; every
time they store is on the database's clock. Tables are created when missing, and :func:`upgrade` brings a database
made by an earlier genEval up to them.
"""

from __future__ import annotations

import logging

from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from genEval.service.server.benchmarks.store import BenchmarkRow, BenchmarkStore
from genEval.service.server.finishing import JobEndings
from genEval.service.server.jobs.queue import JobQueue
from genEval.service.server.jobs.rows import NAME_INDEX, NAMED_SQL, OLD_NAME_INDEX, JobRow
from genEval.service.server.jobs.store import JobStore
from genEval.service.server.session import Base, Sessions, sqlite_url
from genEval.service.server.standings.store import StandingRow, StandingStore
from genEval.service.server.standings.verdicts import VerdictStore
from genEval.service.server.tokens.store import TokenStore
from genEval.service.server.uploads.store import UploadStore
from genEval.service.server.workers.store import WorkerRow, WorkerStore

__all__ = ["Database", "sqlite_url", "upgrade"]
log = logging.getLogger(__name__)


class Database(Sessions):
    """The database at ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``) and its stores (see the module
    docstring)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.tokens = TokenStore(self)
        self.benchmarks = BenchmarkStore(self)
        self.uploads = UploadStore(self)
        self.jobs = JobStore(self)
        self.standings = StandingStore(self, self.benchmarks)
        self.verdicts = VerdictStore(self, self.benchmarks)
        self.queue = JobQueue(self, self.benchmarks.lock)
        self.endings = JobEndings(self, self.jobs, self.queue, self.standings)
        self.workers = WorkerStore(self)
        Base.metadata.create_all(self.writer)
        upgrade(self.writer)


def upgrade(engine: Engine) -> None:
    """Bring the tables of an earlier genEval up to these (idempotent): add missing columns (with their defaults) and
    indexes, and the unique index of active names and rounds in place of the one of names. A database that already
    holds two active jobs of one name (accepted by a genEval without the index) keeps working without the index, with
    an error in the log naming them, until an admin cancels one."""
    tables = inspect(engine)
    for table in (JobRow.__table__, WorkerRow.__table__, BenchmarkRow.__table__, StandingRow.__table__):
        have = {c["name"] for c in tables.get_columns(table.name)}
        for column in table.columns:
            if column.name not in have:
                kind = column.type.compile(dialect=engine.dialect)
                if column.server_default is not None:
                    kind += f" DEFAULT {column.server_default.arg.text} NOT NULL"
                with engine.begin() as conn:
                    conn.execute(text(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}"))
                log.info("database: added column %s.%s", table.name, column.name)
    indexes = {i["name"] for i in inspect(engine).get_indexes(JobRow.__tablename__)}
    for other in JobRow.__table__.indexes:
        if other.name not in indexes and other.name != NAME_INDEX:
            other.create(engine)
    if OLD_NAME_INDEX in indexes:
        with engine.begin() as conn:
            conn.execute(text(f"DROP INDEX {OLD_NAME_INDEX}"))
    index = next(i for i in JobRow.__table__.indexes if i.name == NAME_INDEX)
    if index.name in indexes:
        return
    try:
        index.create(engine)
    except (IntegrityError, OperationalError, ProgrammingError) as err:
        with engine.connect() as conn:
            dupes = conn.execute(
                text(
                    "SELECT benchmark, benchmark_version, name, COUNT(*) FROM jobs WHERE "
                    + NAMED_SQL.text
                    + " GROUP BY benchmark, benchmark_version, name, round HAVING COUNT(*) > 1"
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
