"""``GET /api/leaderboard/{benchmark}``: the stored standings of a benchmark version (public)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from genEval.comparisons.standing import Standing
from genEval.service.server.deps import Facade
from genEval.service.server.standings.board import below_view, standings
from genEval.service.server.views import view_of


class Below(BaseModel):
    """A settled benchmark: the anytime-valid verdict on a row and the row below it (docs/service.md), in the words
    of :func:`genEval.comparisons.standing.verdict_view` (the page's settled column shows ``text`` and ``title``)."""

    name: str = Field(description="the model of the row below")
    verdict: str = Field(description="ordered | equivalent (within the margin) | resolved | open")
    difference: float | None = Field(description="ranking score of this row minus the one below (points)")
    low: float | None = Field(description="the confidence sequence's bounds on the difference (null: not yet)")
    high: float | None
    sources: int = Field(description="paired sources per model it was judged on (the rounds both have)")
    more_sources: int | None = Field(description="an open pair: ≈ sources per model more that would settle it")
    more_kind: str = Field(description='what more_sources would do: "order" or "show equivalence"')
    reason: str = Field(description="why a verdict or estimate is missing")
    text: str = Field(description="the verdict in a few words")
    title: str = Field(description="the verdict in one sentence, with the interval and the sources")


#: A model's row: a view of the library's :class:`~genEval.comparisons.standing.Standing` with its job and date.
LeaderboardRow = view_of(
    Standing,
    "LeaderboardRow",
    "A model's row on the leaderboard: its scores with their 95% intervals (all null when its runs could not be read)",
    optional=("rank", "sources", "below"),
    types={"below": Below},
    describe={
        "repetitions": "repetitions, or on a settled benchmark the rounds run",
        "better_than": "score -> every model this one is significantly better than",
        "rank": 'a settled benchmark: the rank, tied ("2–3") unless ordered',
        "sources": "a settled benchmark: sources per model so far",
        "below": "a settled benchmark: the verdict on this row and the one below",
    },
    extra={
        "job": (str, Field(description="the job id of the submission (its page: /jobs/<job>)")),
        "finished_at": (float | None, Field(description="when it finished (Unix time)")),
    },
)


class Leaderboard(BaseModel):
    benchmark: str
    version: str
    interval_note: str
    warnings: list[str]
    pending: int = Field(description="finished jobs whose row is not stored yet")
    total: int = Field(description="ranked rows in all (rows holds one page of them when limit is given)")
    offset: int
    rank_by: str = Field(description="the score rows are ranked by unless sort names another")
    rank_reason: str
    stop: dict | None = Field(None, description="a settled benchmark's stop rule (null: fixed repetitions)")
    settled: bool | None = Field(None, description="a settled benchmark: every pair of neighbours is settled")
    rows: list[LeaderboardRow]


router = APIRouter(tags=["leaderboard"])


@router.get("/api/leaderboard/{benchmark}", response_model=Leaderboard)
def leaderboard(
    benchmark: str,
    svc: Facade,
    version: str | None = None,
    sort: str | None = None,
    order: Literal["asc", "desc"] = "desc",
    limit: int | None = Query(None, ge=1, description="rows to return (default: all)"),
    offset: int = Query(0, ge=0),
) -> dict:
    """The stored standings, ordered by ``sort`` (a score, ``name``, ``date``, ``repetitions`` or ``rank``; default
    ``rank``: by the ranking score ``rank_by``, FMR_v, whose reason ``rank_reason`` states; on a settled benchmark
    the settled order, each row with its ``rank``, tied where a pair of neighbours is open or equivalent, and the
    verdict on it and the row ``below``), every row or ``limit`` rows from ``offset``; ``better_than`` lists every
    model a row is significantly better than."""
    page = {"sort": sort, "descending": order == "desc", "limit": limit, "offset": offset}
    st = standings(svc.db.leaderboard, svc.catalog, benchmark, version, **page)
    return {
        "benchmark": benchmark,
        "version": st.version,
        "interval_note": st.interval_note,
        "warnings": st.warnings,
        "pending": st.pending,
        "total": st.total,
        "offset": st.offset,
        "rank_by": st.rank_by,
        "rank_reason": st.rank_reason,
        "stop": None if st.stop is None else st.stop.to_dict(),
        "settled": st.settled,
        "rows": [
            {**r.standing.to_dict(), "job": r.job_id, "finished_at": r.finished_at, "below": below_view(r)}
            for r in st.rows
        ],
    }
