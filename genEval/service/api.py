"""The HTTP API (FastAPI; OpenAPI docs at ``/docs``) and the app that also serves the leaderboard pages.

Public: ``GET /api/health``, ``/api/benchmarks``, ``/api/classifiers``, ``/api/leaderboard/{benchmark}``,
``/api/jobs/{id}`` (+ ``/results.json``, ``/snapshot``), and the HTML pages. With a token
(``Authorization: Bearer <token>``, roles in :mod:`genEval.service.auth`): ``POST /api/uploads`` and
``POST /api/jobs`` (submitter), ``POST /api/jobs/{id}/cancel`` (its submitter or an admin),
``GET /api/jobs`` and ``/api/workers`` (viewer), ``/api/tokens`` and ``POST /api/jobs/{id}/requeue`` (admin).

What a request can never do: name a ``_target_`` or any config key outside the benchmark's override
allowlist (422 naming the key), send a pickle or a file that is neither safetensors nor TorchScript (415),
send a body above its limit (413 before it is read or its token checked: :mod:`genEval.service.limits`), have
its body echoed back (a 422 names keys and rules, never the values sent), or choose where a file is stored
(uploads are stored under ``home/uploads/<sha256>``, whatever the client calls them). A job's ``error`` is its
reason alone; an admin token also sees ``error_detail`` and the worker.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from genEval import __version__
from genEval.service.auth import ROLES, role_allows
from genEval.service.benchmarks import NAME_RE, OverrideRefused
from genEval.service.core import Service, UnknownVersion
from genEval.service.db import FINAL, JobInfo, NameTaken, TokenInfo
from genEval.service.leaderboard import RANK_BY, SORT_KEYS
from genEval.service.limits import BodyLimit
from genEval.service.models import KINDS, ModelRefused, UploadRefused, classifier_config, safe_filename, sniff_upload
from genEval.service.pages import add_pages
from genEval.snapshots.format import SnapshotError

CHUNK = 1024 * 1024
MULTIPART_SLACK = 64 * 1024  # multipart boundaries and headers around the file


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


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    role: Literal["viewer", "submitter", "admin"]


def _refuse(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse(status_code=status, content={"detail": message, **extra})


class Refused(Exception):
    """A request refused with a status and a message (turned into ``{"detail": ..., "key": ...}``)."""

    def __init__(self, status: int, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.key = status, message, key


def _job_view(job: JobInfo, token: TokenInfo | None = None) -> dict:
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


_bearer = HTTPBearer(auto_error=False, description="an API token made with `geneval token`")


def _role(role: str):
    """A dependency that yields the request's token when it has at least ``role`` (401/403 otherwise)."""

    def check(request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> TokenInfo:
        if creds is None:
            raise HTTPException(
                401,
                "this needs an API token: send 'Authorization: Bearer <token>' (an admin "
                "creates one with `geneval token`).",
                headers={"WWW-Authenticate": "Bearer"},
            )
        token = request.app.state.service.db.token_for(creds.credentials)
        if token is None:
            raise HTTPException(401, "unknown or revoked API token.", headers={"WWW-Authenticate": "Bearer"})
        if not role_allows(token.role, role):
            raise HTTPException(403, f"this needs a {role} token (roles: {', '.join(ROLES)}); yours is {token.role}.")
        return token

    return check


def _maybe_token(request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]):
    """The request's live token when it sends one, else None (public routes that show admins more)."""
    return None if creds is None else request.app.state.service.db.token_for(creds.credentials)


MaybeToken = Annotated[TokenInfo | None, Depends(_maybe_token)]
Viewer = Annotated[TokenInfo, Depends(_role("viewer"))]
Submitter = Annotated[TokenInfo, Depends(_role("submitter"))]
Admin = Annotated[TokenInfo, Depends(_role("admin"))]


def _get_job(service: Service, job_id: str) -> JobInfo:
    job = service.db.get_job(job_id)
    if job is None:
        raise HTTPException(404, f"no job {job_id!r}.")
    return job


def _finished_rep(service: Service, job_id: str, rep: int) -> tuple[JobInfo, Path]:
    job = _get_job(service, job_id)
    if job.status != "done":
        raise HTTPException(409, f"job {job_id} is {job.status}; its results exist once it is done.")
    try:
        return job, service.rep_dir(job, rep)
    except IndexError as err:
        raise HTTPException(404, str(err)) from None


async def _receive_upload(service: Service, request: Request) -> tuple[Path, str, int, str]:
    """Stream the multipart ``file`` field to a temp file under home/uploads: (temp path, sha256, size, name)."""
    limit = service.settings.max_upload_bytes
    length = request.headers.get("content-length")
    if length is None:
        raise Refused(411, "send the upload with a Content-Length header.")
    if not length.isdigit() or int(length) > limit + MULTIPART_SLACK:
        raise Refused(413, f"upload too large: {length} bytes; the limit is {limit} bytes.")
    form = await request.form(max_files=1, max_fields=2)
    part = form.get("file")
    if not isinstance(part, UploadFile):
        raise Refused(422, "send the model as a multipart form field named 'file'.", key="file")
    digest, size = hashlib.sha256(), 0
    fd, tmp = tempfile.mkstemp(prefix=".incoming-", dir=service.home / "uploads")
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := await part.read(CHUNK):
                size += len(chunk)
                if size > limit:
                    raise Refused(413, f"upload too large: more than {limit} bytes.")
                digest.update(chunk)
                out.write(chunk)
    except BaseException:  # a refused or broken upload leaves nothing behind
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        await form.close()
    return Path(tmp), digest.hexdigest(), size, safe_filename(part.filename)


def _store_upload(service: Service, tmp: Path, sha: str) -> tuple[str, str]:
    """Identify the file (refusing pickles and unknown formats) and move it to home/uploads/<sha256>.<ext>."""
    try:
        kind = sniff_upload(tmp)
    except UploadRefused:
        tmp.unlink(missing_ok=True)
        raise
    rel = f"uploads/{sha}.{'safetensors' if kind == 'safetensors' else 'pt'}"
    os.replace(tmp, service.home / rel)
    return kind, rel


def _new_job(service: Service, body: JobIn, token: TokenInfo) -> JobInfo:
    try:
        bench = service.benchmark(body.benchmark)
    except KeyError as err:
        raise Refused(422, err.args[0], key="benchmark") from None
    try:
        config, overrides = bench.apply_overrides(body.overrides)
    except OverrideRefused as err:
        raise Refused(422, str(err), key=f"overrides.{err.key}") from None
    upload = None
    if body.model.upload is not None:
        upload = service.db.get_upload(body.model.upload)
        if upload is None or (upload.owner_id != token.id and token.role != "admin"):
            raise Refused(
                422,
                f"no upload {body.model.upload!r} of yours; upload the file first (POST /api/uploads).",
                key="model.upload",
            )
    spec = body.model.model_dump(exclude={"upload"})
    try:
        config["classifier"] = classifier_config(
            spec, service.classifiers, upload and upload.kind, upload and upload.path
        )
    except ModelRefused as err:
        raise Refused(422, str(err), key=f"model.{err.key}") from None
    seeds = [secrets.randbits(31) for _ in range(bench.repetitions)]  # fresh per submission, recorded
    model = body.model.model_dump(exclude_none=True) | ({"sha256": upload.sha256} if upload else {})
    try:
        return service.db.submit_job(
            benchmark=bench.name,
            benchmark_version=bench.version,
            name=body.name,
            owner=token,
            model=model,
            config=config,
            overrides=overrides,
            seeds=seeds,
            upload_path=upload and upload.path,
        )
    except NameTaken as err:
        raise Refused(409, str(err), key="name") from None


def create_app(service: Service) -> FastAPI:
    """The FastAPI application serving ``service``."""
    app = FastAPI(
        title="genEval service",
        version=__version__,
        description="Submit an image classifier; it is evaluated on freshly generated, oracle-vetted "
        "images (FMR, Zhang et al., ICLR 2024) and ranked on a leaderboard.",
    )
    app.state.service = service
    app.add_middleware(
        BodyLimit,
        limit_for=lambda path, _method: (
            service.settings.max_upload_bytes + MULTIPART_SLACK
            if path == "/api/uploads"
            else service.settings.max_json_bytes
        ),
        setting=lambda path: "max_upload_mb" if path == "/api/uploads" else "max_request_kb",
    )
    _error_handlers(app)
    _read_routes(app, service)
    _submit_routes(app, service)
    _admin_routes(app, service)
    add_pages(app, service, lambda job_id: _get_job(service, job_id))
    return app


def _error_handlers(app: FastAPI) -> None:
    """Refusals as ``{"detail": message, "key": offending key}``; validation errors name their keys."""

    @app.exception_handler(Refused)
    async def _refused(_request: Request, err: Refused) -> JSONResponse:
        return _refuse(err.status, err.message, **({"key": err.key} if err.key else {}))

    @app.exception_handler(UploadRefused)
    async def _upload_refused(_request: Request, err: UploadRefused) -> JSONResponse:
        return _refuse(415, f"upload refused: {err}")

    @app.exception_handler(UnknownVersion)
    async def _unknown_version(_request: Request, err: UnknownVersion) -> JSONResponse:
        return _refuse(404, str(err))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, err: RequestValidationError) -> JSONResponse:
        # keys, rules and messages only: the values sent ("input", "ctx") are never echoed back
        errors = [{k: e[k] for k in ("type", "loc", "msg") if k in e} for e in err.errors()]
        keys = [".".join(str(p) for p in e["loc"] if p != "body")[:200] for e in errors]
        message = "; ".join(f"{k}: {e['msg']}" for k, e in zip(keys, errors))[:2000]
        return JSONResponse(
            status_code=422, content={"detail": jsonable_encoder(errors), "message": message, "keys": keys}
        )


def _read_routes(app: FastAPI, service: Service) -> None:
    """Public reads: health, benchmarks, leaderboards, one job, its results and snapshot."""

    @app.get("/api/health", tags=["service"])
    def health() -> dict:
        service.db.ping()
        return {
            "status": "ok",
            "version": __version__,
            "database": service.db.dialect,
            "benchmarks": list(service.benchmarks),
            "jobs": service.db.count_jobs(),
            "workers": service.db.live_workers(),
        }

    @app.get("/api/benchmarks", tags=["benchmarks"])
    def benchmarks() -> list[dict]:
        return [
            b.record() | {"versions": [v.version for v in service.db.benchmark_versions(b.name)]}
            for b in service.benchmarks.values()
        ]

    @app.get("/api/classifiers", tags=["benchmarks"])
    def classifiers() -> dict:
        return {"kinds": list(KINDS), "configs": sorted(service.classifiers)}

    @app.get("/api/leaderboard/{benchmark}", tags=["benchmarks"])
    def leaderboard(
        benchmark: str,
        version: str | None = None,
        sort: str = RANK_BY,
        order: Literal["asc", "desc"] = "desc",
        limit: int | None = Query(None, ge=1, description="rows to return (default: all)"),
        offset: int = Query(0, ge=0),
    ) -> dict:
        """The stored standings, ordered by ``sort`` (a score, ``name``, ``date`` or ``repetitions``; default the
        ranking score ``rank_by``, FMR_v, whose reason ``rank_reason`` states), every row or
        ``limit`` rows from ``offset``; ``better_than`` lists every model a row is significantly better than."""
        if benchmark not in service.benchmarks:
            raise HTTPException(404, f"unknown benchmark {benchmark!r}; available: {', '.join(service.benchmarks)}.")
        if sort not in SORT_KEYS:
            raise HTTPException(422, f"sort must be one of {', '.join(SORT_KEYS)}.")
        st = service.standings(benchmark, version, sort=sort, descending=order == "desc", limit=limit, offset=offset)
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

    @app.get("/api/jobs/{job_id}", tags=["jobs"])
    def job(job_id: str, token: MaybeToken) -> dict:
        """A job's status; ``error`` is the reason only (an admin token also gets ``error_detail`` and the worker)."""
        return _job_view(_get_job(service, job_id), token)

    @app.get("/api/jobs/{job_id}/results.json", tags=["results"])
    def results(job_id: str, rep: int = 0) -> FileResponse:
        _, run = _finished_rep(service, job_id, rep)
        return FileResponse(run / "results.json", media_type="application/json")

    @app.get("/api/jobs/{job_id}/snapshot", tags=["results"])
    def snapshot(job_id: str, rep: int = 0) -> FileResponse:
        """The run's validated perturbed images (and originals) as a snapshot (image folder + metadata.jsonl +
        manifest.json with sha256 sums; `geneval verify` checks it), in one tar."""
        found, _ = _finished_rep(service, job_id, rep)
        try:
            path = service.snapshot_tar(found, rep)
        except (SnapshotError, FileNotFoundError) as err:
            raise HTTPException(409, f"no snapshot for this run: {err}") from None
        return FileResponse(path, media_type="application/x-tar", filename=f"{found.name}-rep{rep}-snapshot.tar")


def _submit_routes(app: FastAPI, service: Service) -> None:
    """Submitters: upload, submit, cancel their jobs (and viewers: the queue)."""

    @app.post(
        "/api/uploads",
        status_code=201,
        tags=["submit"],
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "multipart/form-data": {
                        "schema": {
                            "type": "object",
                            "required": ["file"],
                            "properties": {"file": {"type": "string", "format": "binary"}},
                        }
                    }
                },
            }
        },
    )
    async def upload(request: Request, token: Submitter) -> dict:
        """Upload a model file (safetensors weights or a TorchScript archive; never a pickle)."""
        tmp, sha, size, filename = await _receive_upload(service, request)
        kind, rel = await run_in_threadpool(_store_upload, service, tmp, sha)
        info = service.db.add_upload(token.id, kind, sha, size, filename, rel)
        return {"id": info.id, "kind": kind, "sha256": sha, "size": size, "filename": filename}

    @app.post("/api/jobs", status_code=201, tags=["submit"])
    def submit(body: JobIn, token: Submitter) -> dict:
        """Submit a model for evaluation on a benchmark (fresh recorded seeds, one run per repetition)."""
        return _job_view(_new_job(service, body, token))

    @app.get("/api/jobs", tags=["jobs"])
    def jobs(token: Viewer, status: str | None = None, benchmark: str | None = None, limit: int = 200) -> list[dict]:
        return [
            _job_view(j, token)
            for j in service.db.list_jobs(status=status, benchmark=benchmark, limit=max(1, min(limit, 1000)))
        ]

    @app.post("/api/jobs/{job_id}/cancel", tags=["jobs"])
    def cancel(job_id: str, token: Submitter) -> dict:
        found = _get_job(service, job_id)
        if found.owner_id != token.id and token.role != "admin":
            raise HTTPException(403, "only the job's submitter or an admin may cancel it.")
        if found.status in FINAL:
            raise HTTPException(409, f"job {job_id} is already {found.status}.")
        return _job_view(service.db.cancel_job(job_id))

    @app.get("/api/workers", tags=["jobs"])
    def workers(_token: Viewer) -> list[dict]:
        """Workers with their ``state``: ``busy``, ``idle``, ``gone`` (not seen within their lease: killed, or their
        machine lost) or ``stopped``; those stopped or gone for ``worker_retention_s`` are dropped."""
        service.db.prune_workers(service.settings.worker_retention_s)
        now = time.time()
        return [vars(w) | {"state": w.state(now)} for w in service.db.list_workers(service.settings.worker_retention_s)]


def _admin_routes(app: FastAPI, service: Service) -> None:
    """Admins: tokens and re-queueing."""

    @app.post("/api/jobs/{job_id}/requeue", tags=["admin"])
    def requeue(job_id: str, _token: Admin) -> dict:
        found = _get_job(service, job_id)
        if found.status not in ("failed", "cancelled"):
            raise HTTPException(409, f"job {job_id} is {found.status}; only failed or cancelled jobs are re-queued.")
        try:
            return _job_view(service.db.requeue_job(job_id), _token)
        except NameTaken as err:  # another job took its name since: one leaderboard row per name
            raise Refused(409, str(err), key="name") from None

    @app.post("/api/tokens", status_code=201, tags=["admin"])
    def create_token(body: TokenIn, _token: Admin) -> dict:
        secret, info = service.db.create_token(body.name, body.role)
        return {"token": secret, **vars(info)}

    @app.get("/api/tokens", tags=["admin"])
    def tokens(_token: Admin) -> list[dict]:
        return [vars(t) for t in service.db.list_tokens()]

    @app.delete("/api/tokens/{token_id}", tags=["admin"])
    def revoke(token_id: str, _token: Admin) -> dict:
        if not service.db.revoke_token(token_id):
            raise HTTPException(404, f"no live token {token_id!r}.")
        return {"revoked": token_id}
