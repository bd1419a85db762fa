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

from dataclasses import dataclass, field, replace

from genEval.comparisons.ranking import rank_reason
from genEval.scores.sequential import PairVerdict
from genEval.service.records import BoardRow
from genEval.service.refusals import Invalid, NotFound
from genEval.service.server.benchmarks.catalog import Catalog
from genEval.service.server.database import Database
from genEval.service.server.standings.compute import MARKED, RANK_BY, SORT_KEYS, ModelStanding
from genEval.service.server.standings.settled import SettledRanks, withdrawn

#: The rank a settled benchmark's leaderboard shows for a model its submitter withdrew.
WITHDRAWN = "withdrawn"


class UnknownVersion(NotFound):
    """A leaderboard asked for a version of a benchmark that was never registered (the API answers 404)."""


@dataclass(frozen=True)
class Row:
    """A leaderboard row: the job and its standing; ``marks``: metric -> count and first names of the models it is
    significantly better than (``standing.better_than`` holds every name only when they were read); ``run_dirs``
    its runs (one per repetition or round). On a settled benchmark: ``rank`` ("2" or "2–3"), the verdict on it and
    the row below it in the settled order (``below``; None for the last) and its ``sources`` (per round, in all)."""

    job_id: str
    name: str
    finished_at: float | None
    standing: ModelStanding
    marks: dict = field(default_factory=dict)
    run_dirs: list = field(default_factory=list)
    rank: str | None = None
    below: PairVerdict | None = None
    sources: int | None = None

    def sort_value(self, key: str):
        if key == "name":
            return self.name.lower()
        if key == "date":
            return self.finished_at or 0.0
        if key == "repetitions":
            return self.standing.repetitions
        return (self.standing.scores.get(key) or {}).get("value")  # a row stored before the score existed: none


@dataclass(frozen=True)
class Standings:
    """Stored standings of one benchmark version: ``rows`` (one page of them when read with a limit, already in
    the order asked for), ``total`` ranked rows, ``pending`` finished jobs whose row is not stored yet."""

    benchmark: str
    version: str
    rows: list[Row]
    interval_note: str
    warnings: list[str]
    pending: int = 0
    total: int = 0
    offset: int = 0
    rank_by: str = "fmr_validated"  # the score rows are ranked by unless a column is chosen, and why
    rank_reason: str = ""
    stop: dict | None = None  # a settled benchmark's stop rule (StopRule as a dict)
    settled: bool | None = None  # a settled benchmark: every pair of neighbours is ordered or equivalent


def read_standings(
    db: Database,
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
    compare`` orders its leaderboard; a settled one: the settled order, with tied ranks; see the module docstring)."""
    sort = sort or "rank"
    if sort not in SORT_KEYS:
        raise ValueError(f"unknown sort key {sort!r}; choose one of {', '.join(SORT_KEYS)}.")
    registered = db.benchmarks.get(benchmark, version)
    stop = registered and registered.config.get("stop")
    ranks = None
    if stop:  # the settled order and its ranks, from the light columns of every row and the stored verdicts
        every = db.standings.board(benchmark, version, "date")[1]
        ranks = SettledRanks.of(every, db.verdicts.of_version(benchmark, version))
        gone = [r.job_id for r in every if withdrawn(r)]
    if ranks is not None and sort == "rank":
        ids = (ranks.order if descending else ranks.order[::-1]) + gone  # the withdrawn ones last
        total, board = (
            len(ids),
            db.standings.board_of(ids[offset : None if limit is None else offset + limit], every_mark),
        )
    else:
        by = RANK_BY if sort == "rank" else sort
        total, board = db.standings.board(benchmark, version, by, descending, limit, offset, every_mark)
    notes, warnings = db.standings.notes(benchmark, version)
    note = max(set(notes), key=notes.count) if notes else ""
    return Standings(
        benchmark,
        version,
        [_row(b, every_mark, ranks) for b in board],
        note,
        list(dict.fromkeys(warnings)),
        db.standings.count_unranked(benchmark, version),
        total,
        offset,
        RANK_BY,
        rank_reason(RANK_BY),
        stop or None,
        None if ranks is None else ranks.done,
    )


def _row(b: BoardRow, every_mark: bool, ranks: SettledRanks | None) -> Row:
    standing = ModelStanding(
        b.name,
        b.repetitions,
        b.scores,
        {k: list((b.better_than or {}).get(k, [])) for k in MARKED} if every_mark else {},
    )
    marks = {k: (b.marks or {}).get(k, {"count": 0, "first": []}) for k in MARKED}
    row = Row(b.job_id, b.name, b.finished_at, standing, marks, list(b.run_dirs or []))
    if ranks is not None and withdrawn(b):
        return replace(row, rank=WITHDRAWN, sources=(b.settled or {}).get("sources"))
    if ranks is None or b.job_id not in ranks.rank:
        return row
    sources = (b.settled or {}).get("sources")
    return replace(row, rank=ranks.rank[b.job_id], below=ranks.below[b.job_id], sources=sources)


def standings(db: Database, catalog: Catalog, name: str, version: str | None = None, **page) -> Standings:
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
    return read_standings(db, name, version or bench.version, **page)
