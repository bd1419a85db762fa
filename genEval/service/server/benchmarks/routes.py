"""``GET /api/benchmarks`` and ``GET /api/classifiers`` (public): what this server offers."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from genEval.service.server.deps import Facade


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


class Classifiers(BaseModel):
    kinds: list[str] = Field(description="how a submission may name its model (model.kind)")
    configs: list[str] = Field(description="classifier configs that model.kind=config may name")


router = APIRouter(tags=["benchmarks"])


@router.get("/api/benchmarks", response_model=list[BenchmarkInfo])
def benchmarks(svc: Facade) -> list[dict]:
    """Each offered benchmark's current preset (name, version hash, title, repetitions, the keys a submission may
    override and their rules, the resolved config) and every version registered so far, newest first."""
    return svc.catalog.records()


@router.get("/api/classifiers", response_model=Classifiers, tags=["models"])
def classifiers(svc: Facade) -> dict:
    """The model kinds a submission may use and the classifier configs ``kind=config`` may name."""
    return svc.catalog.choices()
