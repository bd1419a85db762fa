"""What a job's submitter may read of why it failed: the reason, without the server's paths, host names, process ids,
worker ids or tracebacks (the job view is readable without a token). The full text goes to the worker's log and to
the job's ``error_detail``, which only admins see.

Errors of the run directory itself are told in the service's terms (another evaluation holds its lock; the disk is
full or read-only); every other message is kept, with each path reduced to its last component (the uploaded model
file named as such), host names and worker ids removed and process ids left out.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Sequence
from pathlib import Path

#: Longest reason stored for the submitter (the detail keeps everything).
MAX_REASON = 1000
#: Exception types whose name adds nothing to their message (the reason is the message).
PLAIN = {
    "ValueError",
    "SettingError",
    "BuildError",
    "OSError",
    "FileNotFoundError",
    "PermissionError",
    "NonFiniteError",
    "RunMismatch",
    "ImportError",
    "ModuleNotFoundError",
}
#: Reasons for the errors of a job's run directory (by exception type), which name hosts, pids and paths.
BY_TYPE = {
    "RunDirectoryBusy": "another evaluation is still writing this job's run directory (its lock is live); an admin "
    "can re-queue the job once that one has stopped",
    "Interrupted": "the evaluation was stopped (its worker was shut down); it resumes when the job is run again",
}
_FULL = "the service ran out of disk space while writing this job's results; an admin can re-queue it and it resumes"
_READ_ONLY = "the service could not write this job's run directory; an admin can see why and re-queue it"
_PATH = re.compile(
    r"(?<![\w.:/-])(?:~|\.{1,2})?/(?:[^\s'\"()<>,;:]+/)*[^\s'\"()<>,;:]*|(?<![\w/.-])(?=[\w.-]*[A-Za-z_])[\w.-]+(?:/[\w.-]+)+"
)
_WORKER_ID = re.compile(r"\b[\w.-]+:\d+:[0-9a-f]{8}\b")
_PROCESS = re.compile(r"\b(?:process|pid)\s+\d+\b", re.I)
_ON_HOST = re.compile(r"\s*\bon host\s+'[^']*'", re.I)


def public_reason(
    kind: str,
    message: str,
    *,
    hide: Sequence[str] = (),
    upload: str | Path | None = None,
    home: str | Path | None = None,
) -> str:
    """The reason a submitter reads for an error of type ``kind`` with ``message`` (see the module docstring).

    ``upload``: the job's uploaded file (relative to ``home``), named "the uploaded model file"; ``hide``: further
    words to remove (this worker's host name and id)."""
    if kind in BY_TYPE:
        return BY_TYPE[kind]
    if kind == "RunDirectoryError":
        return _FULL if "no space left" in message else _READ_ONLY
    text = message.split("Traceback (most recent call last)")[0]
    if upload is not None:
        for form in {str(upload), str(Path(home or "") / upload)}:
            text = text.replace(form, "the uploaded model file")
    text = _WORKER_ID.sub("a worker", text)
    text = _ON_HOST.sub("", text)
    for word in {*hide, socket.gethostname()}:
        if word:
            text = text.replace(word, "<host>")
    text = _PATH.sub(lambda m: _last_part(m.group(0)), text)
    text = _PROCESS.sub("a process", text)
    text = re.sub(r"\s+", " ", text).strip()
    if kind not in PLAIN:
        text = f"{kind}: {text}" if text else kind
    return text[:MAX_REASON] or kind


def _last_part(path: str) -> str:
    """A path reduced to its last component (``'/srv/x/model.safetensors'`` -> ``model.safetensors``)."""
    return path.rstrip("/").rsplit("/", 1)[-1] or "<path>"
