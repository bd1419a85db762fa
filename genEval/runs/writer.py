"""Writing a run directory: :class:`RunWriter` (the one writer: identity, records, tensor parts, results) and
:func:`save_grid`.

A run directory holds:

* ``run.json`` - the run's identity (:class:`~genEval.runs.identity.RunIdentity`), written when it starts. A rerun on
  the same directory resumes only when its identity is the same (the error names the keys that differ).
* ``run.lock`` - the lease of the process writing the directory: host, pid, a random token, a heartbeat
  (:mod:`genEval.runs.lock`). A live one stops a second writer; a stale one (heartbeat older than its lease, or its
  process gone from this host) is taken over atomically with a warning naming the old owner.
* ``samples.partial.jsonl`` while running, ``samples.jsonl`` when done - one JSON record per sample
  (:class:`~genEval.scores.outcomes.SampleRecord`). Records are appended and fsynced as samples finish (in
  completion order); a line cut short by a crash is dropped on resume, never parsed as data. The final file is in
  data-set order. A resume keeps one record per source of the run (:func:`genEval.runs.faults.unique_records`) and
  refuses a record with a field of the wrong type (:func:`genEval.runs.reader.read_records`).
* ``latents/part-NNNNNN.safetensors`` (``save_latents``) and ``images/part-NNNNNN.safetensors`` (``save_images``) -
  tensors streamed to disk in parts as samples finish (:mod:`genEval.runs.parts`).
* ``grid.png`` - a few originals over their perturbed images.
* ``results.json`` - scores with intervals, per-class table, seed, config, versions, timings. Written last
  and atomically: its presence marks a complete run.

:class:`~genEval.runs.reader.RunDir` reads it back typed.
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from genEval.fileio import atomic_write_bytes, atomic_write_json, ensure_writable_dir, to_json
from genEval.interfaces import resize_images
from genEval.runs.faults import disk_errors
from genEval.runs.identity import RunIdentity, RunMismatch, identity_differences
from genEval.runs.lock import LOCK, RunDirectoryBusy, RunLock
from genEval.runs.parts import IMAGES, LATENTS, part_numbers, part_path, to_uint8, write_part
from genEval.runs.reader import PARTIAL, RESULTS, RUN, SAMPLES, read_json, read_samples, read_unique_records
from genEval.runs.results import SCHEMA_VERSION
from genEval.scores.outcomes import SampleRecord

log = logging.getLogger(__name__)


class RunWriter:
    """Writes one run directory, resuming it when it holds an unfinished run of the same identity.

    Use :meth:`open`; then :meth:`add` finished samples (records and, when asked, their tensors), and
    :meth:`finish` with the final result, or :meth:`close` on an error or an interruption (the samples finished so
    far are flushed, the partial state stays, marked incomplete, and a rerun resumes it). ``done`` lists the records
    already written by an earlier attempt (one per source of the run).
    """

    def __init__(self, run_dir: Path, save_latents: bool, save_images: bool, generator: str, flush_every: int) -> None:
        self.dir, self.save_latents, self.save_images, self.generator = run_dir, save_latents, save_images, generator
        self.flush_every = max(1, int(flush_every))
        self.done: list[SampleRecord] = []
        self._pending: list[Any] = []  # finished Outcomes (records with their tensors)
        self._fh: io.TextIOWrapper | None = None
        self._next_part = 0
        self._lock: RunLock | None = None
        self.finished_before = False
        self.resumable = False

    @classmethod
    def open(
        cls,
        run_dir: str | Path,
        identity: RunIdentity,
        *,
        save_latents: bool = False,
        save_images: bool = False,
        generator: str = "",
        flush_every: int = 64,
        source_ids: Sequence[str] | None = None,
    ) -> RunWriter:
        """Lock ``run_dir``, check or write its identity (``run.json``) and read what an earlier attempt did.

        ``source_ids``: the ids of the run's sources in position order (its shard's positions), when the data set
        can tell them: a resume refuses a record of any other source. Without them the positions are checked."""
        d = ensure_writable_dir(run_dir)
        w = cls(d, save_latents, save_images, generator, flush_every)
        with disk_errors(d, f"creating its {LOCK}"):
            w._lock = RunLock(d)
            w._lock.acquire()
        try:
            with disk_errors(d, f"writing its {RUN}"):
                w._start(identity, source_ids)
        except BaseException:
            w._unlock()
            raise
        return w

    def _unlock(self) -> None:
        if self._lock is not None:
            self._lock.release()

    def _start(self, run: RunIdentity, source_ids: Sequence[str] | None) -> None:
        identity = json.loads(to_json(run.to_dict()))  # compare in the form it is stored in (tuples -> lists)
        run_json = self.dir / RUN
        previous = read_json(run_json)
        if previous is None:
            if (self.dir / PARTIAL).exists() or (self.dir / RESULTS).exists():
                raise RunMismatch(
                    f"'{self.dir}' holds samples but no {RUN}: it was written by an older genEval or "
                    "by hand. Use another hydra.run.dir."
                )
            atomic_write_json(
                run_json, {"schema_version": SCHEMA_VERSION, "identity": identity, "created": time.time()}
            )
        else:
            diff = identity_differences(previous.get("identity", {}), identity)
            if diff:
                raise RunMismatch(
                    f"'{self.dir}' holds a run of another configuration, so it cannot be resumed; differing "
                    f"keys: {'; '.join(diff[:12])}{' ...' if len(diff) > 12 else ''}. Rerun with the same settings "
                    "to resume it, or choose another hydra.run.dir (output= in Python) for a new run."
                )
        if (self.dir / RESULTS).is_file() and (self.dir / SAMPLES).is_file():
            self.finished_before = True
            self.done = read_samples(self.dir)
            return
        self.done = self._recover(run.source_positions(source_ids))
        self._next_part = max(part_numbers(self.dir), default=-1) + 1
        self.resumable = True

    def _recover(self, sources: dict[int, str | None] | None) -> list[SampleRecord]:
        """Records of an interrupted attempt, one per source of the run (``sources``: position -> id); a last line
        cut short by a crash is dropped (and cut off)."""
        path = self.dir / PARTIAL
        if not path.exists():
            return []
        raw = path.read_bytes()
        good_end = raw.rfind(b"\n") + 1
        if good_end < len(raw):
            log.warning(
                "%s: dropping an incomplete last record (%d bytes) left by an interrupted run",
                path,
                len(raw) - good_end,
            )
            with open(path, "r+b") as fh:
                fh.truncate(good_end)
        records = read_unique_records(path, raw[:good_end].decode("utf-8", "replace"), sources)
        for rec in records:
            for sub, wanted in ((LATENTS, self.save_latents), (IMAGES, self.save_images)):
                if wanted and (rec.part < 0 or not part_path(self.dir, sub, rec.part).is_file()):
                    raise ValueError(
                        f"{path}: sample {rec.source_id} has no {sub} part; this run was started "
                        f"without save_{sub}=true. Rerun with the original settings."
                    )
        if records:
            log.info("resuming %s: %d samples already done", self.dir, len(records))
        return records

    def add(self, outcome: Any) -> None:
        """Queue one finished sample (a :class:`~genEval.search.perturb.Outcome`: its record and tensors); it reaches
        the disk with the next flush (every ``flush_every``)."""
        self._pending.append(outcome)
        if len(self._pending) >= self.flush_every:
            self.flush()

    def _open_records(self) -> io.TextIOWrapper:
        if self._lock is not None:
            self._lock.check()  # never write after another process took the directory over
        if self._fh is None:  # created with the first record, so a run that fails early leaves no samples file
            self._fh = open(self.dir / PARTIAL, "a", encoding="utf-8")  # noqa: SIM115 (closed in finish/close)
        return self._fh

    def _append(self, records: Sequence[SampleRecord]) -> None:
        fh = self._open_records()
        fh.write("".join(to_json(r.to_dict(), indent=None) + "\n" for r in records))
        fh.flush()
        os.fsync(fh.fileno())
        self.done.extend(records)

    def flush(self) -> None:
        """Write the queued samples: their tensor parts first (atomically), then their records (fsynced). The queue
        is taken first, so samples whose write fails are recomputed by a resume, never written twice."""
        if not self._pending or not self.resumable:
            return
        pending, self._pending = self._pending, []
        with disk_errors(self.dir, "writing samples", kept=len(self.done)):
            self._open_records()
            part = -1
            if self.save_latents or self.save_images:
                part, self._next_part = self._next_part, self._next_part + 1
                self._write_parts(part, pending)
            self._append([replace(o.record(), part=part) for o in pending])

    def _write_parts(self, part: int, outs: list[Any]) -> None:
        meta = {
            "source_ids": json.dumps([o.source_id for o in outs]),
            "generator": self.generator,
            "schema_version": str(SCHEMA_VERSION),
        }
        valid = torch.tensor([o.validated for o in outs], dtype=torch.uint8)
        if self.save_latents:
            tensors = {
                "start": torch.stack([o.start_latent for o in outs]).float(),
                "final": torch.stack([o.latent for o in outs]).float(),
                "validated": valid,
            }
            write_part(self.dir, LATENTS, part, tensors, meta)
        if self.save_images:
            tensors = {
                "original": to_uint8(torch.stack([o.original for o in outs])),
                "perturbed": to_uint8(torch.stack([o.image for o in outs])),
                "validated": valid,
                "labels": torch.tensor([o.label for o in outs], dtype=torch.int64),
            }
            write_part(self.dir, IMAGES, part, tensors, meta)

    def adopt_part(self, run_dir: Path, part: int) -> int:
        """Copy part ``part`` of another run (a shard being merged) in as this run's next part; returns its
        number here. Every kind this run saves (latents, images) is copied under the same number."""
        new, self._next_part = self._next_part, self._next_part + 1
        with disk_errors(self.dir, "copying tensor parts"):
            for kind, wanted in ((LATENTS, self.save_latents), (IMAGES, self.save_images)):
                if wanted:
                    (self.dir / kind).mkdir(exist_ok=True)
                    atomic_write_bytes(part_path(self.dir, kind, new), part_path(run_dir, kind, part).read_bytes())
        return new

    def add_records(self, records: Sequence[SampleRecord]) -> None:
        """Append finished records whose tensors (if any) are already in place (see :meth:`adopt_part`)."""
        with disk_errors(self.dir, "writing samples", kept=len(self.done)):
            self._append(records)

    def finish(self, records: Sequence[SampleRecord], result: dict[str, Any]) -> None:
        """All samples are done: write ``samples.jsonl`` (in data-set order), then ``results.json``, unlock."""
        self.flush()
        with disk_errors(self.dir, "writing its results", kept=len(self.done)):
            if self._lock is not None:
                self._lock.check()
            atomic_write_bytes(
                self.dir / SAMPLES, "".join(to_json(r.to_dict(), indent=None) + "\n" for r in records).encode()
            )
            atomic_write_json(self.dir / RESULTS, result)  # written last: marks completion
        self.close()
        (self.dir / PARTIAL).unlink(missing_ok=True)

    def close(self) -> None:
        """Stop writing (after an error or an interruption): the samples finished so far are flushed when the disk
        takes them, what was flushed stays for a resume, and the lock is released."""
        try:
            if self._pending and not (self._lock is not None and self._lock.lost):
                try:
                    self.flush()
                except OSError as err:  # a full disk: those samples are recomputed by the resume
                    log.warning("%s: could not keep the last %d samples (%s)", self.dir, len(self._pending), err)
                except RunDirectoryBusy:
                    pass
        finally:
            try:
                if self._fh is not None and not self._fh.closed:
                    self._fh.close()
            except OSError as err:  # a full disk: the buffered half line is dropped by the resume
                log.warning("%s: closing %s failed (%s)", self.dir, PARTIAL, err)
            finally:
                self._unlock()


def save_grid(path: Path, originals: torch.Tensor, perturbed: torch.Tensor, nrow: int = 8) -> None:
    """Originals (top row) over their perturbed images (bottom row) as one PNG, written atomically."""
    k = min(len(originals), nrow)
    if k == 0:
        return
    size = tuple(perturbed.shape[-2:])
    a = resize_images(originals[:k].float(), size)
    b = perturbed[:k].float()
    if a.shape[1] != b.shape[1]:
        a, b = (t.expand(-1, 3, -1, -1) if t.shape[1] == 1 else t for t in (a, b))
    scale = max(1, 64 // size[0])
    both = torch.cat([a, b])
    if scale > 1:
        both = torch.nn.functional.interpolate(both, scale_factor=scale, mode="nearest")
    from torchvision.utils import make_grid  # slow import (about a second): only where a grid is drawn

    grid = make_grid(both, nrow=k, padding=2, pad_value=1.0)
    arr = grid.clamp(0, 1).mul(255).round().byte().permute(1, 2, 0).numpy()
    buf = io.BytesIO()
    Image.fromarray(arr.squeeze(-1) if arr.shape[-1] == 1 else arr).save(buf, format="PNG")
    with disk_errors(path.parent, f"writing {path.name}"):
        atomic_write_bytes(path, buf.getvalue())
