"""The JSON the API answers with, as pydantic models: the OpenAPI schema at ``/openapi.json`` documents each route's
answer with one of these, and FastAPI checks every answer against it.

Field names are the API's (unchanged since the routes returned plain dicts). Where a field is shown only to some
callers (a job's ``worker_id`` and ``error_detail``: admin tokens only; its result links: done jobs only), the
field is optional and the route answers with the fields that were set (``response_model_exclude_unset``), so a
field a caller may not see is absent, not ``null``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class Refusal(BaseModel):
    """A refused request: why, and the request key at fault when there is one (422s from validation list
    ``keys`` and a ``message`` instead; 413s come from the body limit before any route)."""

    detail: Any = Field(description="the reason (a list of errors for a request that fails validation)")
    key: str | None = Field(None, description="the request key at fault")
    message: str | None = Field(None, description="validation errors: every key at fault and its rule, in one line")
    keys: list[str] | None = Field(None, description="validation errors: the keys at fault (the first 20)")
    count: int | None = Field(None, description="validation errors: how many there were")


class Health(BaseModel):
    status: str = Field(description='"ok", or "degraded" (HTTP 503) with the problems')
    problems: list[str] = Field(description="why the service is degraded: the database, the workers")
    version: str = Field(description="genEval's version")
    database: str = Field(description="sqlite or postgresql")
    benchmarks: list[str]
    jobs: dict[str, int] | None = Field(description="jobs by status (null while the database is unreachable)")
    workers: int | None = Field(description="workers seen within their lease (null while the database is unreachable)")


class BenchmarkInfo(BaseModel):
    """A benchmark as offered now (its current preset) and every version of it registered so far."""

    name: str
    version: str = Field(description="hash of the preset's config: a changed preset is a new leaderboard")
    title: str
    description: str
    repetitions: int
    overrides: dict[str, Any] = Field(description="the keys a submission may set, each with its rule")
    config: dict[str, Any]
    versions: list[str] = Field(description="registered versions, newest first")


class Classifiers(BaseModel):
    kinds: list[str] = Field(description="how a submission may name its model (model.kind)")
    configs: list[str] = Field(description="classifier configs that model.kind=config may name")


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


class JobLinks(BaseModel):
    self: str
    page: str = Field(description="the job's HTML page")
    results: list[str] | None = Field(None, description="each repetition's results.json (done jobs)")
    report: list[str] | None = Field(None, description="each repetition's HTML report (done jobs)")
    snapshot: list[str] | None = Field(None, description="each repetition's snapshot tar (done jobs)")


class Job(BaseModel):
    """A submission and its evaluation. ``error`` is the reason alone; an admin token also sees ``worker_id`` and
    ``error_detail`` (the full text)."""

    id: str
    benchmark: str
    benchmark_version: str
    name: str
    owner_name: str
    model: dict[str, Any]
    overrides: dict[str, Any]
    seeds: list[int]
    run_dir: str
    status: str = Field(description="queued, running, done, failed or cancelled")
    created_at: float
    started_at: float | None
    finished_at: float | None
    heartbeat_at: float | None
    attempts: int
    images_done: int
    images_total: int | None
    eta_s: float | None
    error: str | None
    result: dict[str, Any] | None
    worker_id: str | None = Field(None, description="admin tokens only")
    error_detail: str | None = Field(None, description="admin tokens only")
    links: JobLinks


class Upload(BaseModel):
    id: str = Field(description="what a submission names as model.upload")
    kind: str = Field(description="safetensors, torchscript or torch.export")
    sha256: str
    size: int
    filename: str


class Token(BaseModel):
    id: str
    name: str
    role: str
    created_at: float
    revoked_at: float | None


class NewToken(Token):
    token: str = Field(description="the secret, shown only in this answer")


class Revoked(BaseModel):
    revoked: str = Field(description="the revoked token's id")


class Worker(BaseModel):
    id: str
    host: str
    pid: int
    device: str
    started_at: float
    last_seen: float
    job_id: str | None
    stopped_at: float | None
    lease_s: float | None
    state: str = Field(description="busy, idle, gone (not seen within its lease) or stopped")
