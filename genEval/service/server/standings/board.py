"""Reading the leaderboard: the stored standings of one benchmark version, ordered and paged by the database, as the
pages and ``GET /api/leaderboard/{benchmark}`` show them (no computation: the workers store the rows,
:mod:`~genEval.service.server.standings.compute`).

Ranks are positions in the order asked for (:func:`read_standings`); a mode that ranks ties together (a settled
comparison's "2-3") would give :class:`Row` its rank and :func:`read_standings` the ordering that makes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from genEval.comparisons.ranking import rank_reason
from genEval.service.refusals import Invalid, NotFound
from genEval.service.server.benchmarks.catalog import Catalog
from genEval.service.server.database import Database
from genEval.service.server.standings.compute import MARKED, RANK_BY, SORT_KEYS, ModelStanding


class UnknownVersion(NotFound):
    """A leaderboard asked for a version of a benchmark that was never registered (the API answers 404)."""


@dataclass(frozen=True)
class Row:
    """A leaderboard row: the job and its standing; ``marks``: metric -> count and first names of the models it is
    significantly better than (``standing.better_than`` holds every name only when they were read)."""

    job_id: str
    name: str
    finished_at: float | None
    standing: ModelStanding
    marks: dict = field(default_factory=dict)

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
    only the counts and first names of the marks (what a page shows), not every name. ``sort`` None: the
    comparison library's ranking score (:data:`RANK_BY`, FMR_v), as ``geneval compare`` orders its leaderboard."""
    sort = sort or RANK_BY
    if sort not in SORT_KEYS:
        raise ValueError(f"unknown sort key {sort!r}; choose one of {', '.join(SORT_KEYS)}.")
    total, board = db.standings.board(benchmark, version, sort, descending, limit, offset, every_mark)
    rows = [
        Row(
            b.job_id,
            b.name,
            b.finished_at,
            ModelStanding(
                b.name,
                b.repetitions,
                b.scores,
                {k: list((b.better_than or {}).get(k, [])) for k in MARKED} if every_mark else {},
            ),
            {k: (b.marks or {}).get(k, {"count": 0, "first": []}) for k in MARKED},
        )
        for b in board
    ]
    notes, warnings = db.standings.notes(benchmark, version)
    note = max(set(notes), key=notes.count) if notes else ""
    return Standings(
        benchmark,
        version,
        rows,
        note,
        list(dict.fromkeys(warnings)),
        db.standings.count_unranked(benchmark, version),
        total,
        offset,
        RANK_BY,
        rank_reason(RANK_BY),
    )


def standings(db: Database, catalog: Catalog, name: str, version: str | None = None, **page) -> Standings:
    """The stored standings of benchmark ``name`` at ``version`` (default: the current preset's); ``page``:
    ``sort``, ``descending``, ``limit``, ``offset``, ``every_mark`` (:func:`read_standings`). Raises
    :class:`NotFound` for an unknown benchmark, :class:`UnknownVersion` for a version never registered and
    :class:`Invalid` for an unknown ``sort``."""
    bench = catalog.offered(name)
    if page.get("sort", SORT_KEYS[0]) not in SORT_KEYS:
        raise Invalid(f"sort must be one of {', '.join(SORT_KEYS)}.")
    if version is not None and version != bench.version:
        known = catalog.versions(name)
        if version not in known:
            shown = version if len(version) <= 64 else version[:64] + "..."
            raise UnknownVersion(
                f"benchmark {name} has no version {shown!r}; its versions: {', '.join(known)} (newest first)."
            )
    return read_standings(db, name, version or bench.version, **page)
