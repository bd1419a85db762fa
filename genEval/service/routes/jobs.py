"""``/api/jobs``: submit a model (submitter), follow, cancel (its submitter or an admin) and re-queue (admin) jobs,
list the queue (viewer), and read a done job's results.json and snapshot (public: a job id is a capability)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field

from genEval.service.benchmarks import NAME_RE
from genEval.service.records import JobInfo, TokenInfo
from genEval.service.responses import Job
from genEval.service.routes.deps import Admin, Facade, MaybeToken, Submitter, Viewer

router = APIRouter(prefix="/api/jobs", tags=["jobs"])


class ModelIn(BaseModel):
    """The model of a submission (see genEval.service.models): never code, only names and numbers."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["config", "timm", "torchvision", "torchscript"]
    name: str | None = Field(
        None,
        max_length=200,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$",
        description="config name (kind=config) or architecture (timm/torchvision)",
    )
    upload: str | None = Field(None, pattern=r"^[0-9a-f]{32}$", description="id from POST /api/uploads")
    num_classes: int | None = Field(None, ge=1, le=100_000)
    input_size: int | None = Field(None, ge=4, le=4096)
    mean: list[float] | None = Field(None, min_length=1, max_length=3)
    std: list[float] | None = Field(None, min_length=1, max_length=3)


class JobIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    benchmark: str = Field(max_length=64)
    name: str = Field(pattern=NAME_RE.pattern, max_length=64, description="the model's name on the leaderboard")
    model: ModelIn
    overrides: dict[str, int | float | bool | str] = Field(
        default_factory=dict, description="only keys the benchmark allowlists (GET /api/benchmarks)"
    )


def job_view(job: JobInfo, token: TokenInfo | None = None) -> dict:
    """What a caller sees of ``job`` (an admin token more: :meth:`JobInfo.for_admin`) with its links."""
    view = job.for_admin() if token is not None and token.role == "admin" else job.public()
    base = f"/api/jobs/{job.id}"
    view["links"] = {"self": base, "page": f"/jobs/{job.id}"}
    if job.status == "done":
        reps = range(len(job.seeds))
        view["links"].update(
            results=[f"{base}/results.json?rep={r}" for r in reps],
            report=[f"/jobs/{job.id}/report?rep={r}" for r in reps],
            snapshot=[f"{base}/snapshot?rep={r}" for r in reps],
        )
    return view


#: A job view keeps only the fields its caller may see (see genEval.service.responses).
AS_JOB = {"response_model": Job, "response_model_exclude_unset": True}


@router.post("", status_code=201, **AS_JOB)
def submit(body: JobIn, svc: Facade, token: Submitter) -> dict:
    """Submit a model for evaluation on a benchmark (fresh recorded seeds, one run per repetition)."""
    job = svc.submit(body.benchmark, body.name, body.model.model_dump(), body.overrides, owner=token)
    return job_view(job)


@router.get("", response_model=list[Job], response_model_exclude_unset=True)
def jobs(
    svc: Facade, token: Viewer, status: str | None = None, benchmark: str | None = None, limit: int = 200
) -> list[dict]:
    """The queue, newest first (at most ``limit`` jobs, up to 1000)."""
    return [job_view(j, token) for j in svc.jobs(status=status, benchmark=benchmark, limit=limit)]


@router.get("/{job_id}", **AS_JOB)
def job(job_id: str, svc: Facade, token: MaybeToken) -> dict:
    """A job's status; ``error`` is the reason only (an admin token also gets ``error_detail`` and the worker)."""
    return job_view(svc.job(job_id), token)


@router.post("/{job_id}/cancel", **AS_JOB)
def cancel(job_id: str, svc: Facade, token: Submitter) -> dict:
    """Cancel a queued or running job (its submitter or an admin)."""
    return job_view(svc.cancel(job_id, by=token))


@router.post("/{job_id}/requeue", **AS_JOB)
def requeue(job_id: str, svc: Facade, token: Admin) -> dict:
    """Put a failed or cancelled job back in the queue with its seeds (admin)."""
    return job_view(svc.requeue(job_id), token)


def file_answer(media_type: str, schema: dict, description: str) -> dict:
    """Route settings for an answer that is a file served as it is (no response model): its media type and schema
    in the OpenAPI docs."""
    content = {media_type: {"schema": schema}}
    return {"response_class": FileResponse, "responses": {200: {"description": description, "content": content}}}


@router.get(
    "/{job_id}/results.json",
    **file_answer("application/json", {"type": "object"}, "the run's results.json (docs/run-directory.md)"),
)
def results(job_id: str, svc: Facade, rep: int = 0) -> FileResponse:
    """Repetition ``rep``'s results.json, as the run wrote it (a file of the run format, not a model here)."""
    return FileResponse(svc.results_file(job_id, rep), media_type="application/json")


@router.get(
    "/{job_id}/snapshot",
    **file_answer("application/x-tar", {"type": "string", "format": "binary"}, "the run's snapshot in one tar"),
)
def snapshot(job_id: str, svc: Facade, rep: int = 0) -> FileResponse:
    """The run's validated perturbed images (and originals) as a snapshot (image folder + metadata.jsonl +
    manifest.json with sha256 sums; `geneval verify` checks it), in one tar."""
    found, path = svc.snapshot(job_id, rep)
    return FileResponse(path, media_type="application/x-tar", filename=f"{found.name}-rep{rep}-snapshot.tar")
