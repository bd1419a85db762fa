"""``GET /api/workers`` (viewer) and ``GET /api/health`` (public): who evaluates, and whether the service is up."""

from __future__ import annotations

from fastapi import APIRouter, Response

from genEval.service.responses import Health, Worker
from genEval.service.routes.deps import Facade, Viewer

router = APIRouter(tags=["workers"])


@router.get("/api/workers", response_model=list[Worker])
def workers(svc: Facade, _token: Viewer) -> list[dict]:
    """Workers with their ``state``: ``busy``, ``idle``, ``gone`` (not seen within their lease: killed, or their
    machine lost) or ``stopped``; those stopped or gone for ``worker_retention_s`` are dropped."""
    return svc.workers()


@router.get("/api/health", response_model=Health, responses={503: {"model": Health, "description": "degraded"}})
def health(svc: Facade, response: Response) -> dict:
    """Whether the service works: ``ok`` (200), or ``degraded`` (503) while the database is unreachable or no worker
    is alive, naming the ``problems``; its version, database kind, benchmarks, job counts by status and live
    workers (null while the database is unreachable)."""
    answer = svc.health()
    if answer["status"] != "ok":
        response.status_code = 503
    return answer
