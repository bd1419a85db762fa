"""``/api/jobs``: submit a model (submitter), follow, cancel (its submitter or an admin) and re-queue (admin) jobs,
list the queue (viewer), and read a done job's results.json and snapshot (public: a job id is a capability)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field

from genEval.service.benchmarks import NAME_RE
from genEval.service.records import JobInfo, TokenInfo
from genEval.service.server.deps import Admin, Facade, MaybeToken, Submitter, Viewer
from genEval.service.server.views import view_of

router = APIRouter(prefix="/api/jobs", tags=["jobs"])


class ModelIn(BaseModel):
    """The model of a submission (:mod:`genEval.service.models`): never code, only names and numbers."""

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


class JobLinks(BaseModel):
    self: str
    page: str = Field(description="the job's HTML page")
    results: list[str] | None = Field(None, description="each repetition's results.json (done jobs)")
    report: list[str] | None = Field(None, description="each repetition's HTML report (done jobs)")
    snapshot: list[str] | None = Field(None, description="each repetition's snapshot tar (done jobs)")


#: What a caller sees of a job (:meth:`JobInfo.public`; an admin token also the worker and the error's full text).
Job = view_of(
    JobInfo,
    "Job",
    "A submission and its evaluation. ``error`` is the reason alone; an admin token also sees ``worker_id`` and "
    "``error_detail`` (the full text).",
    exclude=("owner_id", "config", "upload_path", "lease_expires_at"),
    optional=("worker_id", "error_detail"),
    types={
        "model": dict[str, Any],
        "overrides": dict[str, Any],
        "seeds": list[int] | None,
        "result": dict[str, Any] | None,
    },
    describe={
        "status": "queued, running, done, failed or cancelled",
        "seeds": "one per repetition; a settled benchmark's round: null until it has run",
        "worker_id": "admin tokens only",
        "error_detail": "admin tokens only",
    },
    extra={"links": (JobLinks, Field())},
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


#: A job view keeps only the fields its caller may see (admin-only ones are absent, not null, for others).
AS_JOB = {"response_model": Job, "response_model_exclude_unset": True}


@router.post("", status_code=201, **AS_JOB)
def submit(body: JobIn, svc: Facade, token: Submitter) -> dict:
    """Submit a model for evaluation on a benchmark (fresh recorded seeds, one run per repetition)."""
    job = svc.jobs.submit(body.benchmark, body.name, body.model.model_dump(), body.overrides, owner=token)
    return job_view(job)


@router.get("", response_model=list[Job], response_model_exclude_unset=True)
def jobs(
    svc: Facade, token: Viewer, status: str | None = None, benchmark: str | None = None, limit: int = 200
) -> list[dict]:
    """The queue, newest first (at most ``limit`` jobs, up to 1000)."""
    return [job_view(j, token) for j in svc.jobs.jobs(status=status, benchmark=benchmark, limit=limit)]


@router.get("/{job_id}", **AS_JOB)
def job(job_id: str, svc: Facade, token: MaybeToken) -> dict:
    """A job's status; ``error`` is the reason only (an admin token also gets ``error_detail`` and the worker)."""
    return job_view(svc.jobs.job(job_id), token)


@router.post("/{job_id}/cancel", **AS_JOB)
def cancel(job_id: str, svc: Facade, token: Submitter) -> dict:
    """Cancel a queued or running job (its submitter or an admin). On a settled benchmark the submission's job
    withdraws the model (its rounds stop and its row shows ``withdrawn``); a single later round is the benchmark's,
    and only an admin may cancel it."""
    return job_view(svc.jobs.cancel(job_id, by=token))


@router.post("/{job_id}/requeue", **AS_JOB)
def requeue(job_id: str, svc: Facade, token: Admin) -> dict:
    """Put a failed or cancelled job back in the queue with its seeds (admin)."""
    return job_view(svc.jobs.requeue(job_id), token)


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
    return FileResponse(svc.files.results_file(job_id, rep), media_type="application/json")


@router.get(
    "/{job_id}/snapshot",
    **file_answer("application/x-tar", {"type": "string", "format": "binary"}, "the run's snapshot in one tar"),
)
def snapshot(job_id: str, svc: Facade, rep: int = 0) -> FileResponse:
    """The run's validated perturbed images (and originals) as a snapshot (image folder + metadata.jsonl +
    manifest.json with sha256 sums; `geneval verify` checks it), in one tar."""
    found, path = svc.files.snapshot(job_id, rep)
    return FileResponse(path, media_type="application/x-tar", filename=f"{found.name}-rep{rep}-snapshot.tar")
