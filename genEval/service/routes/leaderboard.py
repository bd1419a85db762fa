"""``GET /api/leaderboard/{benchmark}``: the stored standings of a benchmark version (public)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query

from genEval.service.leaderboard import RANK_BY
from genEval.service.responses import Leaderboard
from genEval.service.routes.deps import Facade

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
    st = svc.standings(benchmark, version, sort=sort, descending=order == "desc", limit=limit, offset=offset)
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
