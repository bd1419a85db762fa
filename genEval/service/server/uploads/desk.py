"""What an upload goes through before it is kept: the token's quota (counted in the database, before its body is
read), a check of the file in a sandboxed child process with a time and a memory limit
(:func:`genEval.service.models.sniff_upload`; at most ``max_checks`` at once, ``max_checks_per_token`` of one token),
then storage as ``home/uploads/<sha256>.<ext>``, whatever the client called it. A refused upload leaves nothing
behind.

The check's sandbox (:mod:`genEval.sandbox`) sees the uploaded file alone, read-only, never the service's home.
Where this server cannot isolate it (no bubblewrap, or no namespaces), TorchScript and torch.export uploads (model
code) are refused unless the admin allows them (``allow_unsandboxed_models``), and the server says so at start."""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from genEval.fileio import ensure_writable_dir
from genEval.sandbox import Limits, isolates, isolation_problem
from genEval.service.models import SAFETENSORS, UploadSandbox, sniff_upload
from genEval.service.records import TokenInfo, UploadInfo
from genEval.service.refusals import TooMany
from genEval.service.server.uploads.store import UploadStore

log = logging.getLogger(__name__)
#: What a token over its hourly upload quota is told to wait at least (seconds).
QUOTA_WINDOW_S = 3600.0


def upload_sandbox(home: Path, isolation: str, allow_unsandboxed: bool) -> UploadSandbox:
    """How this server checks uploads: isolated where it can be (``isolation``; ``bwrap`` that cannot be had raises
    :class:`genEval.sandbox.IsolationUnavailable`), model code accepted unisolated only when ``allow_unsandboxed``."""
    isolated = isolates(isolation)
    problem = None if isolated else (isolation_problem() or f"isolation={isolation}")
    return UploadSandbox(isolation, (str(home),), allow_code=isolated or bool(allow_unsandboxed), code_problem=problem)


class UploadDesk:
    """Uploads into ``home/uploads`` recorded in ``store``, within the limits of ``settings``
    (:class:`~genEval.service.server.facade.Settings`: ``max_uploads_per_hour``, ``check_timeout_s``,
    ``check_memory_mb``, ``max_checks``, ``max_checks_per_token``, ``isolation``, ``allow_unsandboxed_models``)."""

    def __init__(self, store: UploadStore, home: Path, settings) -> None:
        self.store, self.folder, self.settings = store, ensure_writable_dir(home / "uploads"), settings
        self.limits = Limits(settings.check_timeout_s, settings.check_memory_mb)
        self.sandbox = upload_sandbox(home, settings.isolation, settings.allow_unsandboxed_models)
        if self.sandbox.code_problem is not None:
            log.warning(
                "uploads are checked without a sandbox (%s): TorchScript and torch.export uploads are %s",
                self.sandbox.code_problem,
                "accepted anyway (allow_unsandboxed_models=true)" if self.sandbox.allow_code else "refused",
            )
        self._checks = threading.BoundedSemaphore(max(1, settings.max_checks))
        self._per_token: Counter[str] = Counter()
        self._lock = threading.Lock()

    def may_upload(self, owner: TokenInfo) -> None:
        """Count an upload of ``owner``'s, or refuse it (:class:`TooMany`, before its body is read) when the token
        made ``max_uploads_per_hour`` in the last hour (refused ones count too: each costs a check), counted in the
        database (a restart or a second server grants none more). Admins have no quota."""
        limit = int(self.settings.max_uploads_per_hour)
        if owner.role == "admin" or not limit:
            return
        wait = self.store.take_attempt(owner.id, limit, QUOTA_WINDOW_S)
        if wait is not None:
            raise TooMany(
                f"token {owner.name!r} made {limit} uploads in the last hour, its limit (server setting "
                f"max_uploads_per_hour); retry in {wait:.0f} s.",
                wait,
            )

    @contextmanager
    def _check_slot(self, owner: TokenInfo) -> Iterator[None]:
        """One of the ``max_checks`` check slots, and one of the token's ``max_checks_per_token``; :class:`TooMany`
        when either is taken (a token cannot keep every slot busy with uploads that hang)."""
        per_token = int(self.settings.max_checks_per_token)
        with self._lock:
            if per_token and self._per_token[owner.id] >= per_token:
                raise TooMany(
                    f"token {owner.name!r} has {per_token} upload(s) being checked already (server setting "
                    "max_checks_per_token); retry once it is answered.",
                    5,
                )
            if not self._checks.acquire(blocking=False):
                raise TooMany(
                    f"the server is checking {self.settings.max_checks} uploads already (server setting max_checks); "
                    "retry in a few seconds.",
                    5,
                )
            self._per_token[owner.id] += 1
        try:
            yield
        finally:
            with self._lock:
                self._per_token[owner.id] -= 1
                if self._per_token[owner.id] <= 0:
                    del self._per_token[owner.id]
            self._checks.release()

    def accept(self, owner: TokenInfo, tmp: Path, sha256: str, size: int, filename: str) -> UploadInfo:
        """Identify the received file ``tmp`` (refusing pickles and unknown formats: ``UploadRefused``; a check past
        its limits: ``UploadTooCostly``; an op a classifier never needs: ``UploadUnsafe``), move it to
        ``home/uploads/<sha256>.<ext>`` and record it as ``owner``'s. The temp file is removed whatever refuses it;
        a check beyond ``max_checks`` or ``max_checks_per_token`` is :class:`TooMany`."""
        try:
            os.chmod(tmp, 0o644)  # the check's sandboxed user reads it (the service's home keeps others out)
            with self._check_slot(owner):
                kind = sniff_upload(tmp, self.limits, self.sandbox)
        except BaseException:  # refused, over a limit, or the server stopping: nothing is left behind
            tmp.unlink(missing_ok=True)
            raise
        rel = f"uploads/{sha256}.{'safetensors' if kind == SAFETENSORS else 'pt'}"
        os.replace(tmp, self.folder / Path(rel).name)
        return self.store.add(owner.id, kind, sha256, size, filename, rel)
