"""``GET /api/benchmarks`` and ``GET /api/classifiers`` (public): what this server offers; ``POST
/api/benchmarks/{benchmark}/renew`` (admin): a new version of a settled benchmark whose reuse budget is spent."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field

from genEval.service.server.deps import Admin, Facade


class BenchmarkInfo(BaseModel):
    """A benchmark as offered now (its current preset) and every version of it registered so far."""

    name: str
    version: str = Field(description="hash of the preset's config: a changed preset is a new leaderboard")
    title: str
    description: str
    repetitions: int
    overrides: dict[str, Any] = Field(description="the keys a submission may set, each with its rule")
    config: dict[str, Any]
    stop: dict[str, Any] | None = Field(
        None, description="a settled benchmark's stop rule (rounds of round_sources until settled or max_sources)"
    )
    versions: list[str] = Field(description="registered versions, newest first")
    reuse_budget: dict[str, Any] | None = Field(
        None,
        description="a settled benchmark: correctness agreement eta of the submitted models on the shared rounds and "
        "how many further submissions keep every standing within reuse.epsilon at 1 - reuse.delta (similarity "
        "bound, Miller 2022 ch. 3); null for a fixed benchmark",
    )
    reuse: dict[str, Any] | None = Field(None, description="a settled benchmark's epsilon and delta of its budget")
    epoch: int = Field(0, description="how often an admin renewed this settled benchmark (fresh round seeds)")
    base_version: str | None = Field(None, description="the version before any renewal")


class Classifiers(BaseModel):
    kinds: list[str] = Field(description="how a submission may name its model (model.kind)")
    configs: list[str] = Field(description="classifier configs that model.kind=config may name")


router = APIRouter(tags=["benchmarks"])


@router.get("/api/benchmarks", response_model=list[BenchmarkInfo])
def benchmarks(svc: Facade) -> list[dict]:
    """Each offered benchmark's current preset (name, version hash, title, repetitions, the keys a submission may
    override and their rules, the resolved config) and every version registered so far, newest first."""
    return svc.catalog.records()


@router.post("/api/benchmarks/{benchmark}/renew", response_model=BenchmarkInfo)
def renew(benchmark: str, svc: Facade, _: Admin) -> dict:
    """(admin) Offer a new version of a settled benchmark whose reuse budget is spent: the same preset with its epoch
    + 1, so a new version hash, a new leaderboard and fresh secret round seeds. Earlier versions keep their
    leaderboards; a model's standing carries over only by submitting it again. 409 for a fixed benchmark (it
    reuses no rounds)."""
    try:
        new = svc.catalog.renew(benchmark)
    except ValueError as err:
        raise HTTPException(409, str(err)) from None
    return next(r for r in svc.catalog.records() if r["name"] == new.name)


@router.get("/api/classifiers", response_model=Classifiers, tags=["models"])
def classifiers(svc: Facade) -> dict:
    """The model kinds a submission may use and the classifier configs ``kind=config`` may name."""
    return svc.catalog.choices()
