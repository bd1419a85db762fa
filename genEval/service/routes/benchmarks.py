"""``GET /api/benchmarks``: the benchmarks this server offers, their override allowlists and versions (public)."""

from __future__ import annotations

from fastapi import APIRouter

from genEval.service.responses import BenchmarkInfo
from genEval.service.routes.deps import Facade

router = APIRouter(tags=["benchmarks"])


@router.get("/api/benchmarks", response_model=list[BenchmarkInfo])
def benchmarks(svc: Facade) -> list[dict]:
    """Each offered benchmark's current preset (name, version hash, title, repetitions, the keys a submission may
    override and their rules, the resolved config) and every version registered so far, newest first."""
    return svc.benchmark_records()
