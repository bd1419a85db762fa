"""A run directory's tensor parts: ``latents/part-NNNNNN.safetensors`` and ``images/part-NNNNNN.safetensors``.

A run made with ``save_latents`` / ``save_images`` streams its tensors to disk in parts as samples finish, so memory
stays flat in the data set size. A part is written (atomically) before the records that point to it
(:attr:`~genEval.scores.outcomes.SampleRecord.part`); readers take from a part only the samples whose record names
it, matched by the ``source_ids`` in the part's metadata. Latent parts hold ``start`` = E(x) and ``final`` = the last
accepted z, (N, *latent), float32; image parts the uint8 ``original`` and ``perturbed`` images and the ``labels``;
both hold ``validated``. :meth:`genEval.runs.reader.RunDir.parts` and friends read them for a run directory.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save as save_safetensors

from genEval.fileio import atomic_write_bytes
from genEval.runs.results import SCHEMA_VERSION
from genEval.scores.outcomes import SampleRecord

LATENTS, IMAGES = "latents", "images"


def part_path(run_dir: Path, kind: str, part: int) -> Path:
    return run_dir / kind / f"part-{part:06d}.safetensors"


def part_numbers(run_dir: Path) -> list[int]:
    """The numbers of the parts a run directory holds (latents and images)."""
    return [int(p.stem.split("-")[1]) for kind in (LATENTS, IMAGES) for p in (run_dir / kind).glob("part-*")]


def write_part(run_dir: Path, kind: str, part: int, tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> None:
    """One part, atomically (``meta``: ``source_ids`` as JSON, ``generator``, ``schema_version``)."""
    (run_dir / kind).mkdir(exist_ok=True)
    data = save_safetensors({k: v.contiguous() for k, v in tensors.items()}, metadata=meta)
    atomic_write_bytes(part_path(run_dir, kind, part), data)


def to_uint8(images: torch.Tensor) -> torch.Tensor:
    """[0,1] float images -> uint8 (round to nearest), the lossless-PNG representation of a snapshot."""
    return images.clamp(0, 1).mul(255).round().to(dtype=torch.uint8)


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


def _shown(ids: Sequence[str], most: int) -> str:
    """``'a'`` for one source id, ``['a', 'b']`` for several (at most ``most``)."""
    return repr(ids[0]) if len(ids) == 1 else str(list(ids)[:most])


def _missing(d: Path, kind: str, ids: Sequence[str]) -> FileNotFoundError:
    return FileNotFoundError(
        f"run '{d}': no {kind} part for sample{'s' * (len(ids) > 1)} {_shown(ids, 5)}; the run directory is "
        "incomplete or was copied partly."
    )


def _disagree(d: Path, kind: str, part: int, ids: Sequence[str]) -> ValueError:
    return ValueError(
        f"run '{d}': samples.jsonl and {part_path(d, kind, part).name} of {kind} disagree ({_shown(ids, 3)} "
        f"{'are' if len(ids) > 1 else 'is'} not in that part); they come from different runs. Rerun the evaluation."
    )


def iter_tensor_parts(
    run_dir: str | Path, kind: str, records: Sequence[SampleRecord]
) -> Iterator[tuple[list[SampleRecord], dict[str, torch.Tensor]]]:
    """Stream a run's ``kind`` parts in record order: yields (records, tensors) with one tensor row per
    record, part by part, so memory stays flat. Only samples whose record names the part are taken."""
    d = Path(run_dir)
    require_tensors(d, kind)
    by_part: dict[int, list[SampleRecord]] = {}
    for r in records:
        by_part.setdefault(r.part, []).append(r)
    for part in sorted(by_part):
        path = part_path(d, kind, part)
        if part < 0 or not path.is_file():
            raise _missing(d, kind, [r.source_id for r in by_part[part]])
        with safe_open(str(path), framework="pt") as fh:
            ids = json.loads((fh.metadata() or {}).get("source_ids", "[]"))
            where = {sid: i for i, sid in enumerate(ids)}
            strangers = [r.source_id for r in by_part[part] if r.source_id not in where]
            if strangers:
                raise _disagree(d, kind, part, strangers)
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
            path = part_path(d, kind, part)
            if part < 0 or not path.is_file():
                raise _missing(d, kind, [r.source_id])
            fh = safe_open(str(path), framework="pt")
            ids = json.loads((fh.metadata() or {}).get("source_ids", "[]"))
            open_parts[part] = (fh, {sid: i for i, sid in enumerate(ids)})
            while len(open_parts) > keep_open:
                open_parts.popitem(last=False)  # the oldest part: its file is closed when dropped
        open_parts.move_to_end(part)
        fh, where = open_parts[part]
        row = where.get(r.source_id)
        if row is None:
            raise _disagree(d, kind, part, [r.source_id])
        yield r, {k: fh.get_slice(k)[row : row + 1][0] for k in fh.keys()}


def stack_tensors(run_dir: str | Path, kind: str, records: Sequence[SampleRecord]) -> dict[str, Any]:
    """All of a run's ``kind`` tensors in the order of ``records``, plus ``source_ids`` (and ``generator``).

    ``latents``: ``start`` = E(x), ``final`` = last accepted z, (N, *latent); ``images``: uint8 ``original``
    and ``perturbed`` (sizes may differ between the two), ``labels``; both: ``validated`` (bool)."""
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
    """Inverse of :func:`save_latent_file` (a run directory's latents: :meth:`RunDir.tensors`)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no latents file at '{p}'.")
    with safe_open(str(p), framework="pt") as fh:
        meta = fh.metadata() or {}
        out: dict[str, Any] = {k: fh.get_tensor(k) for k in fh.keys()}
    out["validated"] = out["validated"].bool()
    out["source_ids"] = json.loads(meta.get("source_ids", "[]"))
    out["generator"] = meta.get("generator", "")
    return out
