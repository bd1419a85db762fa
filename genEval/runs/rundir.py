"""The run directory: the one module that writes *and* reads it (docs/run-directory.md; docs/architecture.md, "Habits").

A run directory holds:

* ``run.json`` - the run's identity, written when it starts: seed, the resolved config minus execution
  settings, component ids, the hash of the source list, the shard. A rerun on the same directory resumes
  only when its identity is the same (:func:`identity_differences` names what differs).
* ``run.lock`` - the lease of the process writing the directory: host, pid, a random token, a heartbeat
  (:mod:`genEval.runs.lock`). A live one stops a second writer; a stale one (heartbeat older than its lease, or its
  process gone from this host) is taken over atomically with a warning naming the old owner.
* ``samples.partial.jsonl`` while running, ``samples.jsonl`` when done - one JSON record per sample
  (:class:`SampleRecord`). Records are appended and fsynced as samples finish (in completion order); a line
  cut short by a crash is dropped on resume, never parsed as data. The final file is in data-set order. A resume
  keeps one record per source of the run (:func:`genEval.runs.faults.unique_records`).
* ``latents/part-NNNNNN.safetensors`` (``save_latents``) and ``images/part-NNNNNN.safetensors``
  (``save_images``) - tensors streamed to disk in parts as samples finish, so memory stays flat in the data
  set size. A part is written (atomically) before the records that point to it (``SampleRecord.part``);
  readers take from a part only the samples whose record names it.
* ``grid.png`` - a few originals over their perturbed images.
* ``results.json`` - scores with intervals, per-class table, seed, config, versions, timings. Written last
  and atomically: its presence marks a complete run.

What is written is typed and comes back typed: :func:`read_results` gives the
:class:`~genEval.runs.results.EvalResult` the run wrote, :func:`read_samples` its
:class:`~genEval.scores.outcomes.SampleRecord` list (both names are importable from here, as before).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import platform
import socket
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import save as save_safetensors

from genEval.fileio import atomic_write_bytes, atomic_write_json, ensure_writable_dir, to_json
from genEval.interfaces import resize_images
from genEval.runs.faults import RunDirectoryError, disk_errors, record_lines, unique_records  # noqa: F401
from genEval.runs.lock import LOCK, RunDirectoryBusy, RunLock  # noqa: F401 (the errors are re-exported)
from genEval.runs.results import SCHEMA_VERSION, EvalResult
from genEval.scores.outcomes import SampleRecord

log = logging.getLogger(__name__)

PACKAGES = (
    "geneval-fmr",
    "torch",
    "torchvision",
    "hydra-core",
    "open_clip_torch",
    "timm",
    "diffusers",
    "scikit-learn",
    "taming-transformers-rom1504",
    "numpy",
    "scipy",
    "safetensors",
    "pillow",
)
RESULTS, SAMPLES, PARTIAL, RUN = "results.json", "samples.jsonl", "samples.partial.jsonl", "run.json"
LATENTS, IMAGES = "latents", "images"


@dataclass(frozen=True)
class Shard:
    """Part ``index`` of ``count`` of a data set: the sources at positions ``index, index + count, ...``."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        for key in ("index", "count"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"shard.{key} must be a whole number, got {v!r}.")
        if self.count < 1:
            raise ValueError(f"shard.count must be >= 1, got {self.count}; use shard.count=1 for no sharding.")
        if not 0 <= self.index < self.count:
            raise ValueError(
                f"shard.index={self.index} must lie in 0..{self.count - 1} (shard.count={self.count}); "
                "shards are numbered from 0."
            )

    def positions(self, n: int) -> list[int]:
        return list(range(self.index, n, self.count))

    @property
    def name(self) -> str:
        return f"shard-{self.index}-of-{self.count}"


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def environment(device: str) -> dict[str, Any]:
    env: dict[str, Any] = {
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "device": device,
        "torch_threads": torch.get_num_threads(),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return env


# ----------------------------------------------------------------------------------------------- identity
def config_hash(config: dict[str, Any]) -> str:
    """16 hex digits of the sha256 of a config's canonical JSON (sorted keys): a version id for presets."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def identity_differences(a: dict, b: dict) -> list[str]:
    """Dotted keys whose values differ between two run identities (``key: old -> new``)."""
    fa, fb = _flatten(a), _flatten(b)
    return [
        f"{k}: {fa.get(k, '<absent>')!r} -> {fb.get(k, '<absent>')!r}"
        for k in sorted(set(fa) | set(fb))
        if fa.get(k, "<absent>") != fb.get(k, "<absent>")
    ]


class RunMismatch(ValueError):
    """The run directory holds a run of another configuration."""


# ------------------------------------------------------------------------------------------------- writer
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
        identity: dict[str, Any],
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

    def _start(self, identity: dict[str, Any], source_ids: Sequence[str] | None) -> None:
        identity = json.loads(to_json(identity))  # compare in the form it is stored in (tuples -> lists)
        run_json = self.dir / RUN
        previous = _read_json(run_json)
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
                    "to resume it, or choose another hydra.run.dir (output_dir) for a new run."
                )
        if (self.dir / RESULTS).is_file() and (self.dir / SAMPLES).is_file():
            self.finished_before = True
            self.done = read_samples(self.dir)
            return
        self.done = self._recover(_run_sources(identity, source_ids))
        parts = [int(p.stem.split("-")[1]) for sub in (LATENTS, IMAGES) for p in (self.dir / sub).glob("part-*")]
        self._next_part = max(parts, default=-1) + 1
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
                if wanted and (rec.part < 0 or not _part_path(self.dir, sub, rec.part).is_file()):
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
            _write_part(self.dir, LATENTS, part, tensors, meta)
        if self.save_images:
            tensors = {
                "original": to_uint8(torch.stack([o.original for o in outs])),
                "perturbed": to_uint8(torch.stack([o.image for o in outs])),
                "validated": valid,
                "labels": torch.tensor([o.label for o in outs], dtype=torch.int64),
            }
            _write_part(self.dir, IMAGES, part, tensors, meta)

    def adopt_part(self, run_dir: Path, part: int) -> int:
        """Copy part ``part`` of another run (a shard being merged) in as this run's next part; returns its
        number here. Every kind this run saves (latents, images) is copied under the same number."""
        new, self._next_part = self._next_part, self._next_part + 1
        with disk_errors(self.dir, "copying tensor parts"):
            for kind, wanted in ((LATENTS, self.save_latents), (IMAGES, self.save_images)):
                if wanted:
                    (self.dir / kind).mkdir(exist_ok=True)
                    atomic_write_bytes(_part_path(self.dir, kind, new), _part_path(run_dir, kind, part).read_bytes())
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


def read_unique_records(path: Path, text: str, sources: dict[int, str | None] | None) -> list[SampleRecord]:
    """The records of a records file's ``text``, one per source of the run (``sources``: position -> source id,
    see :func:`genEval.runs.faults.unique_records`); a line that is not a complete record is refused, named."""
    records = []
    for n, d in unique_records(list(record_lines(path, text)), path, sources):
        try:
            records.append(SampleRecord.from_dict(d))
        except TypeError as err:
            raise ValueError(
                f"{path} line {n} is corrupt: not a complete sample record ({err}); it was not written by this "
                "genEval's writer. Move the directory away and rerun."
            ) from err
    return records


def _run_sources(identity: dict[str, Any], source_ids: Sequence[str] | None) -> dict[int, str | None] | None:
    """Position -> source id (None when unknown) of the sources a run evaluates, from its identity (shard and data
    set size) and, when known, the ids; None when the identity does not say."""
    try:
        shard = Shard(int(identity["shard"]["index"]), int(identity["shard"]["count"]))
        positions = shard.positions(int(identity["sources"]["n_total"]))
    except (KeyError, TypeError, ValueError):
        return None
    if source_ids is not None and len(source_ids) == len(positions):
        return dict(zip(positions, map(str, source_ids)))
    return dict.fromkeys(positions)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _part_path(run_dir: Path, sub: str, part: int) -> Path:
    return run_dir / sub / f"part-{part:06d}.safetensors"


def _write_part(run_dir: Path, sub: str, part: int, tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> None:
    (run_dir / sub).mkdir(exist_ok=True)
    atomic_write_bytes(
        _part_path(run_dir, sub, part), save_safetensors({k: v.contiguous() for k, v in tensors.items()}, metadata=meta)
    )


def to_uint8(images: torch.Tensor) -> torch.Tensor:
    """[0,1] float images -> uint8 (round to nearest), the lossless-PNG representation of a snapshot."""
    return images.clamp(0, 1).mul(255).round().to(dtype=torch.uint8)


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


# ---------------------------------------------------------------------------------------------- reading
def read_results(run_dir: str | Path, samples: bool = False) -> EvalResult:
    """``results.json`` of a finished run as the :class:`~genEval.runs.results.EvalResult` it was written from (with
    its per-sample records when ``samples``); a results.json of another schema version is refused, naming it."""
    p = Path(run_dir) / RESULTS
    if not p.is_file():
        raise FileNotFoundError(
            f"'{run_dir}' has no results.json: not a finished genEval run directory (an interrupted run "
            "leaves samples.partial.jsonl and no results.json; rerun it to resume). Pass run directories "
            "made by `geneval` or `geneval compare`, or a folder containing them."
        )
    d = json.loads(p.read_text(encoding="utf-8"))
    return EvalResult.from_dict(d, read_samples(run_dir) if samples else (), where=f"run directory '{run_dir}'")


def read_samples(run_dir: str | Path) -> list[SampleRecord]:
    """Per-sample records of a finished run (``samples.jsonl``), in data-set order."""
    p = Path(run_dir) / SAMPLES
    if not p.is_file():
        raise FileNotFoundError(
            f"run directory '{run_dir}' has no samples.jsonl; it is not a finished genEval run "
            "(an interrupted run leaves samples.partial.jsonl and no results.json)."
        )
    return [SampleRecord.from_dict(d) for _, d in record_lines(p, p.read_text(encoding="utf-8"), keys=("source_id",))]


def read_run_identity(run_dir: str | Path) -> dict:
    """The identity a run recorded in ``run.json`` when it started."""
    info = _read_json(Path(run_dir) / RUN)
    if info is None:
        raise FileNotFoundError(f"'{run_dir}' has no {RUN}; it is not a genEval run directory.")
    return info["identity"]


def find_run_dirs(paths: Sequence[str | Path]) -> list[Path]:
    """Expand paths: a run directory (has results.json) stays; any other directory is searched for runs."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw).expanduser()
        if (p / RESULTS).is_file():
            out.append(p)
        elif p.is_dir():
            found = sorted(q.parent for q in p.rglob(RESULTS))
            if not found:
                raise FileNotFoundError(f"no finished run (results.json) under '{p}'.")
            out += found
        else:
            raise FileNotFoundError(f"run directory '{p}' does not exist.")
    return out


def has_tensors(run_dir: str | Path, kind: str) -> bool:
    """Whether a run saved ``kind`` ("latents" or "images") parts."""
    return any((Path(run_dir) / kind).glob("part-*.safetensors"))


def require_tensors(run_dir: str | Path, kind: str) -> None:
    """Raise FileNotFoundError, naming the switch that saves them, when a run saved no ``kind`` parts."""
    if not has_tensors(run_dir, kind):
        flag = "save_latents" if kind == LATENTS else "save_images"
        raise FileNotFoundError(
            f"run '{run_dir}' saved no {kind} (no {kind}/part-*.safetensors): rerun the evaluation with {flag}=true."
        )


def latents_generator(run_dir: str | Path) -> str:
    """The generator id a run's latent parts were saved with (their ``generator`` metadata)."""
    require_tensors(run_dir, LATENTS)
    with safe_open(str(next((Path(run_dir) / LATENTS).glob("part-*.safetensors"))), framework="pt") as fh:
        return (fh.metadata() or {}).get("generator", "")


def iter_tensor_parts(
    run_dir: str | Path, kind: str, records: Sequence[SampleRecord] | None = None
) -> Iterator[tuple[list[SampleRecord], dict[str, torch.Tensor]]]:
    """Stream a run's ``kind`` parts in record order: yields (records, tensors) with one tensor row per
    record, part by part, so memory stays flat. Only samples whose record names the part are taken."""
    d = Path(run_dir)
    records = read_samples(d) if records is None else records
    require_tensors(d, kind)
    by_part: dict[int, list[SampleRecord]] = {}
    for r in records:
        by_part.setdefault(r.part, []).append(r)
    for part in sorted(by_part):
        path = _part_path(d, kind, part)
        if part < 0 or not path.is_file():
            missing = [r.source_id for r in by_part[part]][:5]
            raise FileNotFoundError(
                f"run '{d}': no {kind} part for samples {missing}; the run directory is "
                "incomplete or was copied partly."
            )
        with safe_open(str(path), framework="pt") as fh:
            ids = json.loads((fh.metadata() or {}).get("source_ids", "[]"))
            where = {sid: i for i, sid in enumerate(ids)}
            strangers = [r.source_id for r in by_part[part] if r.source_id not in where]
            if strangers:
                raise ValueError(
                    f"run '{d}': samples.jsonl and {path.name} of {kind} disagree ({strangers[:3]} are "
                    "not in that part); they come from different runs. Rerun the evaluation."
                )
            rows = torch.tensor([where[r.source_id] for r in by_part[part]])
            tensors = {k: fh.get_tensor(k)[rows] for k in fh.keys()}
        yield by_part[part], tensors


def iter_tensor_rows(
    run_dir: str | Path, kind: str, records: Sequence[SampleRecord], keep_open: int = 2
) -> Iterator[tuple[SampleRecord, dict[str, torch.Tensor]]]:
    """Stream one tensor row per record, in the order of ``records``: yields ``(record, {name: row})``.

    Rows are read from the memory-mapped parts one at a time (safetensors slices), with at most ``keep_open`` parts
    open, so memory stays flat in the number of samples whatever order the records and parts are in (a run's
    records are in data-set order, its parts in completion order: nearly the same, so few parts are reopened).
    Raises as :func:`iter_tensor_parts` when a part is missing or does not hold a record's sample.
    """
    d = Path(run_dir)
    require_tensors(d, kind)
    open_parts: OrderedDict[int, tuple[Any, dict[str, int]]] = OrderedDict()
    for r in records:
        part = r.part
        if part not in open_parts:
            path = _part_path(d, kind, part)
            if part < 0 or not path.is_file():
                raise FileNotFoundError(
                    f"run '{d}': no {kind} part for sample {r.source_id!r}; the run directory is "
                    "incomplete or was copied partly."
                )
            fh = safe_open(str(path), framework="pt")
            ids = json.loads((fh.metadata() or {}).get("source_ids", "[]"))
            open_parts[part] = (fh, {sid: i for i, sid in enumerate(ids)})
            while len(open_parts) > keep_open:
                open_parts.popitem(last=False)  # the oldest part: its file is closed when dropped
        open_parts.move_to_end(part)
        fh, where = open_parts[part]
        row = where.get(r.source_id)
        if row is None:
            raise ValueError(
                f"run '{d}': samples.jsonl and {_part_path(d, kind, part).name} of {kind} disagree "
                f"({r.source_id!r} is not in that part); they come from different runs. Rerun the evaluation."
            )
        yield r, {k: fh.get_slice(k)[row : row + 1][0] for k in fh.keys()}


def load_tensors(run_dir: str | Path, kind: str) -> dict[str, Any]:
    """All of a run's ``kind`` tensors in ``samples.jsonl`` order, plus ``source_ids`` (and ``generator``).

    ``latents``: ``start`` = E(x), ``final`` = last accepted z, (N, *latent); ``images``: uint8 ``original``
    and ``perturbed`` (sizes may differ between the two), ``labels``; both: ``validated`` (bool)."""
    records = read_samples(run_dir)
    order = {r.source_id: i for i, r in enumerate(records)}
    chunks: dict[str, list[torch.Tensor]] = {}
    ids: list[str] = []
    for recs, tensors in iter_tensor_parts(run_dir, kind, records):
        ids += [r.source_id for r in recs]
        for k, v in tensors.items():
            chunks.setdefault(k, []).append(v)
    perm = torch.tensor(sorted(range(len(ids)), key=lambda i: order[ids[i]]))
    out: dict[str, Any] = {k: torch.cat(v)[perm] for k, v in chunks.items()}
    out["validated"] = out["validated"].bool()
    out["source_ids"] = [ids[i] for i in perm.tolist()]
    if kind == LATENTS:
        out["generator"] = latents_generator(run_dir)
    return out


def save_latent_file(
    path: Path, start: torch.Tensor, final: torch.Tensor, validated: torch.Tensor, source_ids: list[str], generator: str
) -> None:
    """One self-contained latents file (a snapshot's ``latents.safetensors``): E(x) and final z, (N, ...)."""
    meta = {"source_ids": json.dumps(source_ids), "generator": generator, "schema_version": str(SCHEMA_VERSION)}
    atomic_write_bytes(
        Path(path),
        save_safetensors(
            {"start": start.contiguous(), "final": final.contiguous(), "validated": validated.to(torch.uint8)},
            metadata=meta,
        ),
    )


def load_latent_file(path: str | Path) -> dict[str, Any]:
    """Inverse of :func:`save_latent_file`; given a run directory, :func:`load_tensors` of its latents."""
    p = Path(path)
    if p.is_dir():
        return load_tensors(p, LATENTS)
    if not p.is_file():
        raise FileNotFoundError(f"no latents file at '{p}'.")
    with safe_open(str(p), framework="pt") as fh:
        meta = fh.metadata() or {}
        out: dict[str, Any] = {k: fh.get_tensor(k) for k in fh.keys()}
    out["validated"] = out["validated"].bool()
    out["source_ids"] = json.loads(meta.get("source_ids", "[]"))
    out["generator"] = meta.get("generator", "")
    return out
