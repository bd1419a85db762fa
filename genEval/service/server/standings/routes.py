"""``GET /api/leaderboard/{benchmark}``: the stored standings of a benchmark version (public)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from genEval.service.server.deps import Facade
from genEval.service.server.standings.board import standings
from genEval.service.server.standings.compute import RANK_BY


class Estimate(BaseModel):
    """A score with its 95% interval (all null when the runs could not be read)."""

    value: float | None
    low: float | None
    high: float | None


class LeaderboardRow(BaseModel):
    job: str
    name: str
    repetitions: int
    finished_at: float | None
    scores: dict[str, Estimate]
    better_than: dict[str, list[str]] = Field(description="score -> every model this one is significantly better than")


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
    rows: list[LeaderboardRow]


router = APIRouter(tags=["leaderboard"])


@router.get("/api/leaderboard/{benchmark}", response_model=Leaderboard)
def leaderboard(
    benchmark: str,
    svc: Facade,
    version: str | None = None,
    sort: str = RANK_BY,
    order: Literal["asc", "desc"] = "desc",
    limit: int | None = Query(None, ge=1, description="rows to return (default: all)"),
    offset: int = Query(0, ge=0),
) -> dict:
    """The stored standings, ordered by ``sort`` (a score, ``name``, ``date`` or ``repetitions``; default the
    ranking score ``rank_by``, FMR_v, whose reason ``rank_reason`` states), every row or
    ``limit`` rows from ``offset``; ``better_than`` lists every model a row is significantly better than."""
    page = {"sort": sort, "descending": order == "desc", "limit": limit, "offset": offset}
    st = standings(svc.db, svc.catalog, benchmark, version, **page)
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
        "rows": [
            {
                "job": r.job_id,
                "name": r.name,
                "repetitions": r.standing.repetitions,
                "finished_at": r.finished_at,
                "scores": r.standing.scores,
                "better_than": r.standing.better_than,
            }
            for r in st.rows
        ],
    }
