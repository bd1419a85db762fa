"""The stores the standings slice works with, handed to it as one bundle instead of the whole
:class:`~genEval.service.server.database.Database`: what the leaderboard's reader
(:func:`~genEval.service.server.standings.board.read_standings`) and the worker's builder
(:class:`~genEval.service.server.standings.compute.StandingsBuilder`) read and write, and nothing else (no tokens,
uploads, queue or workers). The database makes one (``db.leaderboard``).
"""

from __future__ import annotations

from dataclasses import dataclass

from genEval.service.server.benchmarks.store import BenchmarkStore
from genEval.service.server.finishing import JobEndings
from genEval.service.server.jobs.store import JobStore
from genEval.service.server.standings.store import StandingStore
from genEval.service.server.standings.verdicts import VerdictStore


@dataclass(frozen=True)
class StandingsStores:
    """``standings`` (the rows), ``verdicts`` (a settled benchmark's verdicts on neighbours), ``benchmarks`` (a
    version's stop rule, round seeds and reuse budget), ``jobs`` (a settled model's rounds, and queueing the next)
    and ``endings`` (storing a done job's row with it, and the done jobs without a row)."""

    standings: StandingStore
    verdicts: VerdictStore
    benchmarks: BenchmarkStore
    jobs: JobStore
    endings: JobEndings
