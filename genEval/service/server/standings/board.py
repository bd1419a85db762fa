"""Reading the leaderboard: the stored standings of one benchmark version, ordered and paged by the database, as the
pages and ``GET /api/leaderboard/{benchmark}`` show them (no computation: the workers store the rows,
:mod:`~genEval.service.server.standings.compute`).

On a fixed benchmark a row's rank is its position in the order asked for. On a settled one (docs/service.md,
:mod:`~genEval.service.server.standings.settled`) every row has its rank in the settled order (by the ranking score
pooled over all its rounds), tied with a neighbour whose pair is ``open`` or ``equivalent`` ("2–3"), and the verdict
on it and the row below it (``below``; an open pair with the sources per model that would settle it); ``sort=rank``
(the default) pages through that order. A model its submitter withdrew (docs/service.md) keeps its row, ranked
``withdrawn`` after the others.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from genEval.comparisons.ranking import rank_reason
from genEval.comparisons.settings import StopRule
from genEval.comparisons.standing import verdict_view
from genEval.scores.definitions import SCORE
from genEval.service.records import StandingInfo
from genEval.service.refusals import Invalid, NotFound
from genEval.service.server.benchmarks.catalog import Catalog
from genEval.service.server.standings.compute import RANK_BY, SORT_KEYS
from genEval.service.server.standings.settled import SettledRanks, withdrawn
from genEval.service.server.standings.stores import StandingsStores

#: The rank a settled benchmark's leaderboard shows for a model its submitter withdrew.
WITHDRAWN = "withdrawn"


class UnknownVersion(NotFound):
    """A leaderboard asked for a version of a benchmark that was never registered (the API answers 404)."""


@dataclass(frozen=True)
class Standings:
    """Stored standings of one benchmark version: ``rows`` (one page of them when read with a limit, already in
    the order asked for), ``total`` ranked rows, ``pending`` finished jobs whose row is not stored yet."""

    benchmark: str
    version: str
    rows: list[StandingInfo]
    interval_note: str
    warnings: list[str]
    pending: int = 0
    total: int = 0
    offset: int = 0
    rank_by: str = "fmr_validated"  # the score rows are ranked by unless a column is chosen, and why
    rank_reason: str = ""
    stop: StopRule | None = None  # a settled benchmark's stop rule (None: fixed repetitions)
    settled: bool | None = None  # a settled benchmark: every pair of neighbours is ordered or equivalent


def read_standings(
    stores: StandingsStores,
    benchmark: str,
    version: str,
    sort: str | None = None,
    descending: bool = True,
    limit: int | None = None,
    offset: int = 0,
    every_mark: bool = True,
) -> Standings:
    """Stored rows of a version, ordered and paged by the database (no computation). ``every_mark=False`` reads
    only the counts and first names of the marks (what a page shows), not every name. ``sort`` None or ``rank``: the
    ranking's order (a fixed benchmark: the comparison library's ranking score :data:`RANK_BY`, FMR_v, as ``geneval
    compare`` orders its leaderboard; a settled one: the settled order, with tied ranks; see the module docstring).
    ``stores``: the standings slice's (``db.leaderboard``)."""
    sort = sort or "rank"
    if sort not in SORT_KEYS:
        raise ValueError(f"unknown sort key {sort!r}; choose one of {', '.join(SORT_KEYS)}.")
    registered = stores.benchmarks.get(benchmark, version)
    stop = registered.stop if registered else None
    ranks = None
    if stop:  # the settled order and its ranks, from the light columns of every row and the stored verdicts
        every = stores.standings.board(benchmark, version, "date")[1]
        ranks = SettledRanks.of(every, stores.verdicts.of_version(benchmark, version))
        gone = [r.job_id for r in every if withdrawn(r)]
    if ranks is not None and sort == "rank":
        ids = (ranks.order if descending else ranks.order[::-1]) + gone  # the withdrawn ones last
        total, board = (
            len(ids),
            stores.standings.board_of(ids[offset : None if limit is None else offset + limit], every_mark),
        )
    else:
        by = RANK_BY if sort == "rank" else sort
        total, board = stores.standings.board(benchmark, version, by, descending, limit, offset, every_mark)
    notes, warnings = stores.standings.notes(benchmark, version)
    note = max(set(notes), key=notes.count) if notes else ""
    return Standings(
        benchmark,
        version,
        [_ranked(b, ranks) for b in board],
        note,
        list(dict.fromkeys(warnings)),
        stores.endings.count_unranked(benchmark, version),
        total,
        offset,
        RANK_BY,
        rank_reason(RANK_BY),
        stop,
        None if ranks is None else ranks.done,
    )


def _ranked(b: StandingInfo, ranks: SettledRanks | None) -> StandingInfo:
    """``b`` with its settled rank, sources and the verdict on it and the row below in its standing (a fixed
    benchmark's rows as read)."""
    if ranks is None or b.settled is None:
        return b
    sources = b.settled.sources
    if withdrawn(b):
        return replace(b, standing=replace(b.standing, rank=WITHDRAWN, sources=sources))
    if b.job_id not in ranks.rank:
        return b
    return replace(
        b, standing=replace(b.standing, rank=ranks.rank[b.job_id], below=ranks.below[b.job_id], sources=sources)
    )


def below_view(row: StandingInfo) -> dict | None:
    """The verdict on ``row`` and the one below it in a leaderboard's words, for the API and the page alike
    (:func:`genEval.comparisons.standing.verdict_view`; None: a fixed benchmark's row, or the last)."""
    v = row.standing.below
    return None if v is None else verdict_view(v, SCORE[RANK_BY].label)


def standings(stores: StandingsStores, catalog: Catalog, name: str, version: str | None = None, **page) -> Standings:
    """The stored standings of benchmark ``name`` at ``version`` (default: the current preset's); ``page``:
    ``sort``, ``descending``, ``limit``, ``offset``, ``every_mark`` (:func:`read_standings`). Raises
    :class:`NotFound` for an unknown benchmark, :class:`UnknownVersion` for a version never registered and
    :class:`Invalid` for an unknown ``sort``."""
    bench = catalog.offered(name)
    if page.get("sort") not in (None, *SORT_KEYS):
        raise Invalid(f"sort must be one of {', '.join(SORT_KEYS)}.")
    if version is not None and version != bench.version:
        known = catalog.versions(name)
        if version not in known:
            shown = version if len(version) <= 64 else version[:64] + "..."
            raise UnknownVersion(
                f"benchmark {name} has no version {shown!r}; its versions: {', '.join(known)} (newest first)."
            )
    return read_standings(stores, name, version or bench.version, **page)
