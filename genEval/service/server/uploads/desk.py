"""What an upload goes through before it is kept: the token's quota (before its body is read), a check of the file
in a child process with a time and a memory limit (:func:`genEval.service.models.sniff_upload`; at most
``max_checks`` at once), then storage as ``home/uploads/<sha256>.<ext>``, whatever the client called it. A refused
upload leaves nothing behind."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from genEval.fileio import ensure_writable_dir
from genEval.sandbox import Limits
from genEval.service.limits import RateLimit
from genEval.service.models import SAFETENSORS, sniff_upload
from genEval.service.records import TokenInfo, UploadInfo
from genEval.service.refusals import TooMany
from genEval.service.server.uploads.store import UploadStore


class UploadDesk:
    """Uploads into ``home/uploads`` recorded in ``store``, within the limits of ``settings``
    (:class:`~genEval.service.server.facade.Settings`: ``max_uploads_per_hour``, ``check_timeout_s``,
    ``check_memory_mb``, ``max_checks``)."""

    def __init__(self, store: UploadStore, home: Path, settings) -> None:
        self.store, self.folder, self.settings = store, ensure_writable_dir(home / "uploads"), settings
        self.quota = RateLimit(settings.max_uploads_per_hour, 3600.0)
        self.limits = Limits(settings.check_timeout_s, settings.check_memory_mb)
        self._checks = threading.BoundedSemaphore(max(1, settings.max_checks))

    def may_upload(self, owner: TokenInfo) -> None:
        """Count an upload of ``owner``'s, or refuse it (:class:`TooMany`, before its body is read) when the token
        made ``max_uploads_per_hour`` in the last hour (refused ones count too: each costs a check). Admins have no
        quota."""
        if owner.role == "admin":
            return
        wait = self.quota.retry_after(owner.id)
        if wait is not None:
            raise TooMany(
                f"token {owner.name!r} made {self.quota.limit} uploads in the last hour, its limit (server setting "
                f"max_uploads_per_hour); retry in {wait:.0f} s.",
                wait,
            )
        self.quota.add(owner.id)

    def accept(self, owner: TokenInfo, tmp: Path, sha256: str, size: int, filename: str) -> UploadInfo:
        """Identify the received file ``tmp`` (refusing pickles and unknown formats: ``UploadRefused``; a check past
        its limits: ``UploadTooCostly``), move it to ``home/uploads/<sha256>.<ext>`` and record it as ``owner``'s.
        The temp file is removed whatever refuses it; one check more than ``max_checks`` is :class:`TooMany`."""
        try:
            if not self._checks.acquire(blocking=False):
                raise TooMany(
                    f"the server is checking {self.settings.max_checks} uploads already (server setting max_checks); "
                    "retry in a few seconds.",
                    5,
                )
            try:
                kind = sniff_upload(tmp, self.limits)
            finally:
                self._checks.release()
        except BaseException:  # refused, over a limit, or the server stopping: nothing is left behind
            tmp.unlink(missing_ok=True)
            raise
        rel = f"uploads/{sha256}.{'safetensors' if kind == SAFETENSORS else 'pt'}"
        os.replace(tmp, self.folder / Path(rel).name)
        return self.store.add(owner.id, kind, sha256, size, filename, rel)
