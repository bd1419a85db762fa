"""``GET /api/workers`` (viewer) and ``GET /api/health`` (public): who evaluates, and whether the service works."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel, Field

from genEval import __version__
from genEval.service.records import WorkerInfo
from genEval.service.server.deps import Facade, Viewer
from genEval.service.server.outages import UNREACHABLE, short
from genEval.service.server.views import view_of

Worker = view_of(
    WorkerInfo,
    "Worker",
    "A worker and its state.",
    extra={"state": (str, Field(description="busy, idle, gone (not seen within its lease) or stopped"))},
)


class Health(BaseModel):
    status: str = Field(description='"ok", or "degraded" (HTTP 503) with the problems')
    problems: list[str] = Field(description="why the service is degraded: the database, the workers")
    version: str = Field(description="genEval's version")
    database: str = Field(description="sqlite or postgresql")
    benchmarks: list[str]
    jobs: dict[str, int] | None = Field(description="jobs by status (null while the database is unreachable)")
    workers: int | None = Field(description="workers seen within their lease (null while the database is unreachable)")


def health(svc) -> dict[str, Any]:
    """Version, database kind, benchmarks, job counts by status and live workers, and ``status``: ``ok``, or
    ``degraded`` with the ``problems`` (the database is unreachable; no worker is alive, so queued jobs wait)."""
    problems, jobs, workers = [], None, None
    try:
        jobs, workers = svc.db.jobs.count(), svc.db.workers.live()
    except UNREACHABLE as err:
        problems.append(f"the database is unreachable ({short(err)})")
    if workers == 0:
        problems.append("no worker is alive: queued jobs wait until one starts (geneval worker)")
    return {
        "status": "degraded" if problems else "ok",
        "problems": problems,
        "version": __version__,
        "database": svc.db.dialect,
        "benchmarks": list(svc.catalog.benchmarks),
        "jobs": jobs,
        "workers": workers,
    }


router = APIRouter(tags=["workers"])


@router.get("/api/workers", response_model=list[Worker])
def workers(svc: Facade, _token: Viewer) -> list[dict]:
    """Workers with their ``state``: ``busy``, ``idle``, ``gone`` (not seen within their lease: killed, or their
    machine lost) or ``stopped``; those stopped or gone for ``worker_retention_s`` are dropped."""
    retention = svc.settings.worker_retention_s
    svc.db.workers.prune(retention)
    now = svc.db.now()
    return [vars(w) | {"state": w.state(now)} for w in svc.db.workers.list(retention)]


@router.get("/api/health", response_model=Health, responses={503: {"model": Health, "description": "degraded"}})
def health_route(svc: Facade, response: Response) -> dict:
    """Whether the service works: ``ok`` (200), or ``degraded`` (503) while the database is unreachable or no worker
    is alive, naming the ``problems``; its version, database kind, benchmarks, job counts by status and live
    workers (null while the database is unreachable)."""
    answer = health(svc)
    if answer["status"] != "ok":
        response.status_code = 503
    return answer
