"""``GET /api/workers`` (viewer) and ``GET /api/health`` (public): who evaluates, and whether the service is up."""

from __future__ import annotations

from fastapi import APIRouter

from genEval.service.responses import Health, Worker
from genEval.service.routes.deps import Facade, Viewer

router = APIRouter(tags=["workers"])


@router.get("/api/workers", response_model=list[Worker])
def workers(svc: Facade, _token: Viewer) -> list[dict]:
    """Workers with their ``state``: ``busy``, ``idle``, ``gone`` (not seen within their lease: killed, or their
    machine lost) or ``stopped``; those stopped or gone for ``worker_retention_s`` are dropped."""
    return svc.workers()


@router.get("/api/health", response_model=Health)
def health(svc: Facade) -> dict:
    """The service is up: its version, database kind, benchmarks, job counts by status and live workers."""
    return svc.health()
