"""Writing files so that a crash never leaves one that looks complete (docs/architecture.md, "Habits": results
are data).

One atomic writer for the whole project: data goes to a temporary file in the target's directory, is
flushed and fsynced, gets the permissions an ordinary ``open()`` would have given it (``0666`` minus the
process umask: ``mkstemp`` creates ``0600`` files, which a colleague on a shared cluster could not read),
and is renamed onto the final name (atomic on POSIX). Readers therefore see the old file or the new one,
never half of one.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO


def _umask() -> int:
    # The only portable way to read the umask is to set it and put it back.
    mask = os.umask(0)
    os.umask(mask)
    return mask


def default_file_mode() -> int:
    """The mode ``open(path, "w")`` would give a new file here: ``0o666 & ~umask``."""
    return 0o666 & ~_umask()


def atomic_write(path: str | Path, write: Callable[[BinaryIO], Any]) -> Path:
    """Call ``write(fh)`` on a temp file next to ``path``, fsync, fix the mode, rename onto ``path``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, default_file_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see the module docstring)."""
    return atomic_write(path, lambda fh: fh.write(data))


def json_default(o: Any) -> Any:
    """JSON for the few non-JSON types results carry: numpy/torch scalars, paths, tuples and sets."""
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, tuple)):
        return list(o)
    raise TypeError(f"cannot serialise {type(o).__name__} to JSON")


def to_json(obj: Any, indent: int | None = 2) -> str:
    """Strict JSON (no NaN/inf: an undefined score is ``null`` with a reason, never a bare NaN)."""
    return json.dumps(obj, indent=indent, allow_nan=False, default=json_default)


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    return atomic_write_bytes(path, (to_json(obj) + "\n").encode())


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, streamed (``hashlib.file_digest``)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


class WriteError(OSError):
    """An ``OSError`` of writing (a full or read-only disk) whose message names the place and says what to do;
    ``errno`` is the original error's number. Printed as the message alone (no ``[Errno N]`` prefix)."""

    def __init__(self, code: int | None, message: str) -> None:
        super().__init__(code, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class NotWritable(WriteError, PermissionError):
    """A directory that cannot be written (read-only, forbidden, or not a directory)."""


def ensure_writable_dir(path: str | Path, probe_bytes: int = 0) -> Path:
    """Create ``path`` and prove it is writable (``probe_bytes``: and that it takes that many bytes: a full disk
    takes an empty file), or raise a teaching error naming it before any work is done."""
    p = Path(path).expanduser()
    try:
        p.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p, prefix=".write-test-") as fh:
            if probe_bytes:
                fh.write(b"\0" * probe_bytes)
                fh.flush()
                os.fsync(fh.fileno())
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise WriteError(
                err.errno,
                f"no space left on the device of output directory '{p}' ({err.strerror}). Free some space (a run "
                "already there resumes where it stopped) or choose another with hydra.run.dir=/some/path.",
            ) from err
        raise NotWritable(
            err.errno,
            f"output directory '{p}' is not writable ({err.strerror}"
            + (f": '{err.filename}'" if err.filename and str(err.filename) != str(p) else "")
            + "). Choose another with output=/some/writable/path (CLI: hydra.run.dir=...).",
        ) from err
    return p


def cache_dir(sub: str = "") -> Path:
    """genEval's cache (``$GENEVAL_CACHE`` or ``~/.cache/geneval``), created on demand."""
    root = Path(os.environ.get("GENEVAL_CACHE", Path.home() / ".cache" / "geneval")).expanduser()
    p = root / sub if sub else root
    p.mkdir(parents=True, exist_ok=True)
    return p
