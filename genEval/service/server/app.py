"""The HTTP API (FastAPI; OpenAPI docs at ``/docs``, served offline, the schema at ``/openapi.json``) and the app that
also serves the leaderboard pages: :func:`create_app` puts together the router of each slice (:data:`ROUTERS`), the
pages (:mod:`~genEval.service.server.pages`), the body limit (:mod:`genEval.service.limits`) and the error answers,
around one :class:`~genEval.service.server.facade.Service`.

Public: ``GET /api/health``, ``/api/benchmarks``, ``/api/classifiers``, ``/api/leaderboard/{benchmark}``,
``/api/jobs/{id}`` (+ ``/results.json``, ``/snapshot``), and the HTML pages. With a token
(``Authorization: Bearer <token>``, roles in :mod:`genEval.service.auth`): ``POST /api/uploads`` and
``POST /api/jobs`` (submitter), ``POST /api/jobs/{id}/cancel`` (its submitter or an admin),
``GET /api/jobs`` and ``/api/workers`` (viewer), ``/api/tokens`` and ``POST /api/jobs/{id}/requeue`` (admin).

What a request can never do: name a ``_target_`` or any config key outside the benchmark's override
allowlist (422 naming the key), send a pickle or a file that is neither safetensors nor TorchScript (415),
send a body above its limit (413 before it is read or its token checked: :mod:`genEval.service.limits`), have
its body echoed back (a 422 names keys and rules, never the values sent, and lists at most 20 of them, each cut
short), or choose where a file is stored
(uploads are stored under ``home/uploads/<sha256>``, whatever the client calls them). A job's ``error`` is its
reason alone; an admin token also sees ``error_detail`` and the worker.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline

from genEval import __version__
from genEval.sandbox import CheckStopped
from genEval.service.limits import BodyLimit
from genEval.service.models import UploadRefused
from genEval.service.refusals import Refused, clip
from genEval.service.server.benchmarks import routes as benchmarks
from genEval.service.server.facade import Service
from genEval.service.server.jobs import routes as jobs
from genEval.service.server.pages import router as pages
from genEval.service.server.standings import routes as standings
from genEval.service.server.tokens import routes as tokens
from genEval.service.server.uploads import routes as uploads
from genEval.service.server.uploads.routes import MULTIPART_SLACK
from genEval.service.server.views import Refusal
from genEval.service.server.workers import routes as workers

#: Every API router, one per slice, in the order the OpenAPI docs list them.
ROUTERS = (benchmarks.router, standings.router, uploads.router, jobs.router, tokens.router, workers.router)

#: The refusals every API route may answer with, in the OpenAPI docs (the routes' own answers are their models).
REFUSALS = {status: {"model": Refusal} for status in (401, 403, 404, 409, 413, 415, 422, 429)}


def create_app(service: Service) -> FastAPI:
    """The FastAPI application serving ``service``. Its API pages (Swagger UI at ``/docs``, ReDoc at ``/redoc``) load
    their scripts and styles from this server, out of the fastapi-offline package (``/static-offline-docs``), never
    from a CDN, so they work offline."""
    app = FastAPIOffline(
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
    for router in ROUTERS:
        app.include_router(router, responses=REFUSALS)
    app.include_router(pages)
    return app


def _error_handlers(app: FastAPI) -> None:
    """Refusals as ``{"detail": message, "key": offending key}``; validation errors name their keys."""

    @app.exception_handler(Refused)
    async def _refused(_request: Request, err: Refused) -> JSONResponse:
        return JSONResponse(status_code=err.status, content=err.body(), headers=err.headers)

    @app.exception_handler(UploadRefused)
    async def _upload_refused(_request: Request, err: UploadRefused) -> JSONResponse:
        return JSONResponse(status_code=err.status, content={"detail": f"upload refused: {err}"})

    @app.exception_handler(CheckStopped)
    async def _stopping(_request: Request, err: CheckStopped) -> JSONResponse:
        return JSONResponse(status_code=503, content={"detail": f"{err} Retry later."}, headers={"Retry-After": "30"})

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, err: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content=validation_answer(err.errors()))


#: The most validation errors a 422 lists, and the longest key (per path part) and rule it shows: a request with 60,000
#: bad keys, or a key of a megabyte, gets an answer of a few kilobytes, not its own size back.
MAX_ERRORS, MAX_PART, MAX_MSG = 20, 64, 200


def validation_answer(errors: list[dict]) -> dict:
    """A 422's body: each error's type, place (``loc``) and rule (``msg``), never the value sent (``input``,
    ``ctx``), and bounded: the first :data:`MAX_ERRORS` errors, each part of a place and each rule cut short
    (:func:`~genEval.service.refusals.clip`), with ``count`` giving how many there were."""
    shown = [
        {
            "type": clip(str(e.get("type", "")), MAX_PART),
            "loc": [p if isinstance(p, int) else clip(str(p), MAX_PART) for p in e.get("loc", ())],
            "msg": clip(str(e.get("msg", "")), MAX_MSG),
        }
        for e in errors[:MAX_ERRORS]
    ]
    keys = [".".join(str(p) for p in e["loc"] if p != "body") for e in shown]
    more = f"; and {len(errors) - len(shown)} more" if len(errors) > len(shown) else ""
    message = "; ".join(f"{k}: {e['msg']}" for k, e in zip(keys, shown)) + more
    return {"detail": jsonable_encoder(shown), "message": message, "keys": keys, "count": len(errors)}
