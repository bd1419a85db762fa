"""``POST /api/uploads`` (submitter): a model file.

An upload is streamed to a temp file under ``home/uploads`` and counted as it arrives (a file over ``max_upload_mb`` is
refused with 413 as soon as it passes the limit), then identified by its bytes and kept as
``home/uploads/<sha256>.<ext>``, whatever the client calls it
(:class:`~genEval.service.server.uploads.desk.UploadDesk`)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from genEval.service.models import safe_filename
from genEval.service.records import UploadInfo
from genEval.service.refusals import Invalid, Refused
from genEval.service.server.deps import Facade, Submitter
from genEval.service.server.views import view_of

router = APIRouter(tags=["models"])
CHUNK = 1024 * 1024
#: Multipart boundaries and headers around the file (the body limit of ``/api/uploads`` allows for them).
MULTIPART_SLACK = 64 * 1024
UPLOAD_BODY = {
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
}


Upload = view_of(
    UploadInfo,
    "Upload",
    "A model file kept by the service.",
    exclude=("owner_id", "path", "created_at"),
    describe={"id": "what a submission names as model.upload", "kind": "safetensors, torchscript or torch.export"},
)


@router.post("/api/uploads", status_code=201, response_model=Upload, openapi_extra=UPLOAD_BODY)
async def upload(request: Request, svc: Facade, token: Submitter) -> UploadInfo:
    """Upload a model file (safetensors weights, a torch.export program or a TorchScript archive; never a pickle). It
    is checked in a sandboxed child process with a time and a memory limit (422 naming the limit past either, or the
    op when its code or graph touches files, processes or the network); a token may make ``max_uploads_per_hour``
    uploads (429 with Retry-After beyond)."""
    svc.uploads.may_upload(token)
    tmp, sha, size, filename = await receive(request, svc.uploads.folder, svc.settings.max_upload_bytes)
    return await run_in_threadpool(svc.uploads.accept, token, tmp, sha, size, filename)


async def receive(request: Request, folder: Path, limit: int) -> tuple[Path, str, int, str]:
    """Stream the multipart ``file`` field to a temp file in ``folder``: (temp path, sha256, size, name)."""
    length = request.headers.get("content-length")
    if length is None:
        raise Refused("send the upload with a Content-Length header.", status=411)
    if not length.isdigit() or int(length) > limit + MULTIPART_SLACK:
        raise Refused(f"upload too large: {length} bytes; the limit is {limit} bytes.", status=413)
    form = await request.form(max_files=1, max_fields=2)
    part = form.get("file")
    if not isinstance(part, UploadFile):
        raise Invalid("send the model as a multipart form field named 'file'.", key="file")
    digest, size = hashlib.sha256(), 0
    fd, tmp = tempfile.mkstemp(prefix=".incoming-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := await part.read(CHUNK):
                size += len(chunk)
                if size > limit:
                    raise Refused(f"upload too large: more than {limit} bytes.", status=413)
                digest.update(chunk)
                out.write(chunk)
    except BaseException:  # a refused or broken upload leaves nothing behind
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        await form.close()
    return Path(tmp), digest.hexdigest(), size, safe_filename(part.filename)
