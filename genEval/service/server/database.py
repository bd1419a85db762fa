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
``db.leaderboard``    the stores the standings slice reads and writes, as one bundle
                      (:mod:`~genEval.service.server.standings.stores`)
====================  =========================================================================================

Stores return frozen records (:mod:`genEval.service.records`), never ORM objects, so callers hold no session; every
time they store is on the database's clock. Opening the database runs its schema migrations
(:mod:`~genEval.service.server.migrations`, Alembic): a fresh database gets every table, one an earlier genEval made
is brought up to them.
"""

from __future__ import annotations

from genEval.service.server.benchmarks.store import BenchmarkStore
from genEval.service.server.finishing import JobEndings
from genEval.service.server.jobs.queue import JobQueue
from genEval.service.server.jobs.store import JobStore
from genEval.service.server.migrations import upgrade
from genEval.service.server.session import Sessions, sqlite_url
from genEval.service.server.standings.store import StandingStore
from genEval.service.server.standings.stores import StandingsStores
from genEval.service.server.standings.verdicts import VerdictStore
from genEval.service.server.tokens.store import TokenStore
from genEval.service.server.uploads.store import UploadStore
from genEval.service.server.workers.store import WorkerStore

__all__ = ["Database", "sqlite_url"]


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
        self.leaderboard = StandingsStores(self.standings, self.verdicts, self.benchmarks, self.jobs, self.endings)
        upgrade(self.writer)  # the schema migrations (genEval.service.server.migrations), on every start
