"""The ``verdicts`` table and its store: a settled benchmark's verdicts on pairs of models that were neighbours on its
leaderboard (docs/service.md), computed by workers (:mod:`~genEval.service.server.standings.settled`) and read by the
leaderboard, which ties the ranks of neighbours whose pair is ``open`` or ``equivalent``.

One row per pair (two submissions' job ids), judged on the rounds both had then (``rounds``): the
:class:`~genEval.scores.sequential.PairVerdict` of the upper model minus the lower one, as a dict. A verdict on more
rounds replaces one on fewer, never the reverse, so workers that judge a pair at once, on different rounds, leave the
latest; a pair that is no longer adjacent keeps its row (it is judged again, on more rounds, when it is).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import JSON, Float, Integer, String, select
from sqlalchemy.orm import Mapped, mapped_column

from genEval.service.server.benchmarks.store import BenchmarkStore
from genEval.service.server.session import Base, Sessions


class VerdictRow(Base):
    __tablename__ = "verdicts"
    first: Mapped[str] = mapped_column(String(32), primary_key=True)  # the pair's job ids, sorted
    second: Mapped[str] = mapped_column(String(32), primary_key=True)
    benchmark: Mapped[str] = mapped_column(String(100))
    version: Mapped[str] = mapped_column(String(64), index=True)
    upper: Mapped[str] = mapped_column(String(32))  # the job whose model the verdict's ``a`` is
    rounds: Mapped[int] = mapped_column(Integer)
    verdict: Mapped[dict] = mapped_column(JSON)
    computed_at: Mapped[float] = mapped_column(Float)


@dataclass(frozen=True)
class StoredVerdict:
    """A stored verdict: the ``upper`` and ``lower`` job ids (its ``a`` and ``b``), the ``rounds`` it judged and the
    :class:`~genEval.scores.sequential.PairVerdict` as a dict."""

    upper: str
    lower: str
    rounds: int
    verdict: dict


def pair_key(a: str, b: str) -> tuple[str, str]:
    """The key of the pair of jobs ``a`` and ``b`` (in either order)."""
    return (a, b) if a < b else (b, a)


class VerdictStore:
    """The ``verdicts`` table (see the module docstring)."""

    def __init__(self, sessions: Sessions, benchmarks: BenchmarkStore) -> None:
        self.sessions, self.lock = sessions, benchmarks.lock

    def store(self, benchmark: str, version: str, found: StoredVerdict) -> bool:
        """Keep ``found`` unless the pair has a verdict on more rounds; True when it was kept."""
        first, second = pair_key(found.upper, found.lower)
        with self.sessions.write() as s:
            self.lock(s, benchmark, version)  # one writer of a version's pairs at a time (PostgreSQL)
            row = s.get(VerdictRow, (first, second))
            if row is not None and row.rounds > found.rounds:
                return False
            row = row or VerdictRow(first=first, second=second, benchmark=benchmark, version=version)
            row.upper, row.rounds, row.verdict = found.upper, found.rounds, found.verdict
            row.computed_at = self.sessions.now_in(s)
            s.add(row)
            return True

    def of_version(self, benchmark: str, version: str) -> dict[tuple[str, str], StoredVerdict]:
        """Every stored verdict of a version, by :func:`pair_key`."""
        q = select(VerdictRow).where(VerdictRow.version == version, VerdictRow.benchmark == benchmark)
        with self.sessions.read() as s:
            return {
                (r.first, r.second): StoredVerdict(
                    r.upper, r.second if r.upper == r.first else r.first, r.rounds, r.verdict
                )
                for r in s.scalars(q)
            }
