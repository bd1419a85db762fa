"""What goes wrong with a run directory, said so that it teaches: a full or read-only disk, and record files that
two writers (or a hand edit) left with duplicated, foreign or malformed lines.

* :func:`disk_errors` turns an ``OSError`` raised while writing a run directory into a :class:`RunDirectoryError`
  that names the directory: a full disk (``ENOSPC``, ``EDQUOT``) says the run is resumable and how; a read-only or
  forbidden one says which directory and how to choose another.
* :func:`record_lines` reads a records file (``samples.partial.jsonl``, ``samples.jsonl``): every line must be a
  JSON object holding a sample record, or the file and line are named.
* :func:`unique_records` keeps one record per source id of the run: a record of a source that is not in the run
  is refused (file, line, source, position); a second record of a source with the same content (a batch written
  twice) is dropped with a warning; one with other content is refused, because only two processes writing one
  directory at once produce it.
"""

from __future__ import annotations

import errno
import json
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from genEval.fileio import WriteError

log = logging.getLogger(__name__)

_FULL = {errno.ENOSPC, errno.EDQUOT}
_READ_ONLY = {errno.EROFS, errno.EACCES, errno.EPERM}
#: Keys every sample record written by genEval has (``samples.jsonl`` written by hand may lack ``index``).
RECORD_KEYS = ("source_id", "index")
_JSON_KIND = {"dict": "object", "list": "list", "str": "string", "int": "number", "float": "number", "bool": "boolean"}


class RunDirectoryError(WriteError):
    """Writing a run directory failed for a reason outside genEval (a full disk, a read-only one); the message
    names the directory and says what to do. ``errno`` is the original error number."""


@contextmanager
def disk_errors(run_dir: str | Path, doing: str, kept: int | None = None) -> Iterator[None]:
    """Re-raise an ``OSError`` of a full or unwritable disk met while ``doing`` something in ``run_dir`` as a
    :class:`RunDirectoryError` naming the directory (``kept``: samples already safe on disk, for the message)."""
    try:
        yield
    except RunDirectoryError:
        raise
    except OSError as err:
        if err.errno in _FULL:
            safe = f"the {kept} samples written so far are kept" if kept else "what was written so far is kept"
            raise RunDirectoryError(
                err.errno,
                f"no space left on the device of run directory '{run_dir}' ({err.strerror} while {doing}). The run "
                f"is resumable: {safe}; free some space (or raise the quota) and rerun the same command with the "
                "same run directory (hydra.run.dir) to continue where it stopped.",
            ) from err
        if err.errno in _READ_ONLY:
            raise RunDirectoryError(
                err.errno,
                f"run directory '{run_dir}' is not writable ({err.strerror} while {doing}"
                + (f": '{err.filename}'" if err.filename else "")
                + "). Choose a writable one with hydra.run.dir=/some/writable/path (output= in Python), or make "
                "it writable.",
            ) from err
        raise


def record_lines(path: Path, text: str, keys: tuple[str, ...] = RECORD_KEYS) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` for every non-empty line of a records file; a line that is not a JSON object with
    the record ``keys`` raises ValueError naming the file and the line."""
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"{path} line {n} is corrupt (not JSON: {err.msg}); it was not written by genEval's writer. Remove "
                "the line, or move the directory away and rerun."
            ) from None
        missing = [k for k in keys if k not in d] if isinstance(d, dict) else list(keys)
        if missing:
            what = "null" if d is None else f"a JSON {_JSON_KIND.get(type(d).__name__, 'value')}"
            raise ValueError(
                f"{path} line {n} is corrupt: not a sample record ({what} without {', '.join(missing)}); every line "
                "must be a JSON object such as genEval's writer writes. Remove the line, or move the directory away "
                "and rerun."
            )
        yield n, d


def _differing(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    return sorted(k for k in set(a) | set(b) if k != "part" and a.get(k) != b.get(k))


def unique_records(
    items: list[tuple[int, dict[str, Any]]], path: Path, sources: Mapping[int, str | None] | None = None
) -> list[tuple[int, dict[str, Any]]]:
    """The records of ``items`` (line number, record) with one record per source id (see the module docstring).

    ``sources``: position -> source id of the run (None where the id is not known), or None when the run's
    sources are not known; a record at another position, or naming another source at its position, is refused.
    """
    first: dict[str, tuple[int, Mapping[str, Any]]] = {}
    where: dict[int, tuple[int, str]] = {}
    out, dropped = [], []
    for n, rec in items:
        sid, pos = str(rec["source_id"]), int(rec["index"])
        if sources is not None:
            if pos not in sources:
                raise ValueError(
                    f"{path} line {n} is a record of source {sid!r} at position {pos}, which is not in this run "
                    f"({len(sources)} sources); it was written by another run. Remove the line, or move the "
                    "directory away and rerun."
                )
            if sources[pos] is not None and sources[pos] != sid:
                raise ValueError(
                    f"{path} line {n} is a record of source {sid!r}, but position {pos} of this run is source "
                    f"{sources[pos]!r}; it was written by another run. Remove the line, or move the directory "
                    "away and rerun."
                )
        if sid in first:
            m, earlier = first[sid]
            diff = _differing(earlier, rec)
            if not diff:
                dropped.append(n)
                continue
            raise ValueError(
                f"{path} lines {m} and {n} are two different records of source {sid!r} (they differ in "
                f"{', '.join(diff[:6])}): two processes wrote this run directory at once. Its records cannot be "
                "trusted; move the directory away and rerun."
            )
        if pos in where:
            m, other = where[pos]
            raise ValueError(
                f"{path} lines {m} and {n} put two sources ({other!r} and {sid!r}) at position {pos}; they were "
                "written by different runs. Move the directory away and rerun."
            )
        first[sid], where[pos] = (n, rec), (n, sid)
        out.append((n, rec))
    if dropped:
        shown = ", ".join(map(str, dropped[:5])) + (", ..." if len(dropped) > 5 else "")
        log.warning(
            "%s: dropped %d duplicate record(s) (lines %s repeat earlier records of the same sources with the same "
            "content)",
            path,
            len(dropped),
            shown,
        )
    return out
