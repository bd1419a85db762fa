"""The one snapshot writer (paper App. O), shared by export (:mod:`genEval.snapshots.export`) and adversarial
filtration (:mod:`genEval.snapshots.filtration`).

A snapshot is written into a temporary directory next to its destination and renamed into place at the end, so an
interrupted export never leaves a snapshot that looks complete. Web-dataset shards are written with
``webdataset.ShardWriter``; tar headers carry a fixed mtime, owner and mode, so writing the same items again gives
byte-identical shards and the same hashes.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import webdataset as wds
from torch import Tensor

from genEval.fileio import atomic_write_json, sha256_file
from genEval.runs.parts import save_latent_file
from genEval.snapshots.manifest import (
    FORMATS,
    LATENTS,
    METADATA,
    ORIGINALS,
    TAR_HEADERS,
    WDS_INFO,
    WDS_SHARD,
    WDS_SPLITS,
    Manifest,
    SnapshotError,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SnapshotItem:
    """One sample to write: PNG bytes of the perturbed and original image, and its metadata (``label`` ...)."""

    perturbed_png: bytes
    original_png: bytes
    meta: dict[str, Any]


@dataclass(frozen=True)
class SnapshotLatents:
    """Start and final latents ``(N, *latent_shape)`` of a snapshot's samples, in snapshot order."""

    start: Tensor
    final: Tensor
    source_ids: list[str]
    generator: str

    def write(self, path: Path) -> None:
        validated = torch.ones(len(self.final), dtype=torch.bool)
        save_latent_file(path, self.start, self.final, validated, self.source_ids, self.generator)


def check_format(fmt: str, shard_size: int) -> None:
    if fmt not in FORMATS:
        raise SnapshotError(f"unknown snapshot format {fmt!r}; choose one of {', '.join(FORMATS)}.")
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
        raise SnapshotError(f"shard_size must be a whole number >= 1, got {shard_size!r}.")


def _class_dirs(class_names: Sequence[str]) -> list[str]:
    """One safe, unique directory name per class (case-insensitively unique, never ``originals``)."""
    out: list[str] = []
    seen: set[str] = set()
    for i, name in enumerate(class_names):
        d = re.sub(r"[^A-Za-z0-9._ -]+", "_", str(name)).strip(" .") or f"class_{i}"
        if d.lower() in seen or d.lower() == ORIGINALS:
            d = f"{d}_{i}"
        seen.add(d.lower())
        out.append(d)
    return out


def tree_files(root: Path) -> list[str]:
    """Every file under ``root`` (links included) as a sorted list of POSIX paths relative to it."""
    return sorted((Path(d) / f).relative_to(root).as_posix() for d, _, files in os.walk(root) for f in files)


def check_out_dir(out_dir: str | Path, overwrite: bool, protect: Sequence[Path] = ()) -> Path:
    """The resolved ``out_dir`` if a snapshot may be written there, else a teaching error (before any work)."""
    out = Path(out_dir).expanduser().resolve()
    for p in protect:
        p = p.resolve()
        if out == p or out in p.parents:
            raise SnapshotError(
                f"out_dir '{out}' is, or contains, the source '{p}'; writing there would destroy "
                "it. Choose another out_dir (e.g. <run dir>/snapshot)."
            )
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"out_dir '{out}' exists and is a file; choose a directory path.")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(
            f"out_dir '{out}' is not empty; choose a new directory, or pass overwrite=True "
            "(CLI: overwrite=true) to replace its contents."
        )
    return out


def _make_temp_dir(out: Path) -> Path:
    """An empty directory beside ``out`` (same file system, so the final rename is atomic)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.parent / f".{out.name}.partial-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()  # plain mkdir, not mkdtemp: the snapshot gets the umask's permissions, not 0700
    except OSError as err:
        raise PermissionError(f"cannot write beside out_dir '{out}' ({err.strerror}); choose another out_dir.") from err
    return tmp


def _swap_into_place(tmp: Path, out: Path) -> None:
    """Rename the finished temporary directory to ``out``, replacing an existing (empty or old) one."""
    if not out.exists():
        os.rename(tmp, out)
        return
    aside = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
    os.rename(out, aside)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(aside, out)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _write_imagefolder(tmp: Path, items: Iterable[SnapshotItem], dirs: list[str], width: int) -> list[dict]:
    """``<class>/<i>.png``, ``originals/<class>/<i>.png`` and ``metadata.jsonl``; returns the metadata rows.

    Written by hand: no library writes the Hugging Face imagefolder layout (``datasets`` writes Arrow); the
    files need no atomic writes of their own because the whole directory is renamed into place at the end.
    """
    rows = []
    with open(tmp / METADATA, "w", encoding="utf-8") as meta_fh:
        for i, item in enumerate(items):
            rel = f"{dirs[item.meta['label']]}/{i:0{width}d}.png"
            row = {"file_name": rel, "original_file_name": f"{ORIGINALS}/{rel}", **item.meta}
            for r, data in ((rel, item.perturbed_png), (row["original_file_name"], item.original_png)):
                (tmp / r).parent.mkdir(parents=True, exist_ok=True)
                (tmp / r).write_bytes(data)
            meta_fh.write(json.dumps(row, allow_nan=False) + "\n")
            rows.append(row)
    return rows


def _write_webdataset(
    tmp: Path, items: Iterable[SnapshotItem], width: int, shard_size: int
) -> tuple[list[dict], Counter[str]]:
    """Tar shards of ``shard_size`` samples via ``webdataset.ShardWriter``; returns one record per sample and the
    number of samples per shard file (in writing order)."""
    rows, per_shard = [], Counter()
    pattern = str(tmp).replace("%", "%%") + "/" + WDS_SHARD
    with wds.ShardWriter(
        pattern, maxcount=shard_size, maxsize=float("inf"), verbose=0, encoder=False, **TAR_HEADERS
    ) as sink:
        for i, item in enumerate(items):
            key = f"{i:0{width}d}"  # no dots: webdataset splits the key at the first dot
            sink.write(
                {
                    "__key__": key,
                    "png": item.perturbed_png,
                    "original.png": item.original_png,
                    "cls": str(item.meta["label"]).encode(),
                    "json": json.dumps(item.meta, allow_nan=False).encode(),
                }
            )
            shard = Path(sink.fname).name
            per_shard[shard] += 1
            rows.append({"key": key, "shard": shard, **item.meta})
    return rows, per_shard


def _write_wds_info(tmp: Path, name: str, shards: list[str], lengths: list[int]) -> None:
    """``_info.json`` as timm's ``wds/`` reader expects it (one entry per split name it may ask for)."""
    split = {"num_samples": sum(lengths), "filenames": shards, "shard_lengths": lengths}
    atomic_write_json(tmp / WDS_INFO, {"name": name, "splits": {s: {"name": s, **split} for s in WDS_SPLITS}})


def write_snapshot(
    out_dir: str | Path,
    items: Iterable[SnapshotItem],
    n: int,
    manifest: Manifest,
    *,
    fmt: str,
    overwrite: bool = False,
    shard_size: int = 1000,
    protect: Sequence[Path] = (),
    latents: SnapshotLatents | None = None,
) -> Path:
    """Write ``n`` items in ``fmt`` with ``manifest`` (its provenance fields) and return the snapshot directory.

    Everything goes into a temporary directory beside ``out_dir`` that is renamed into place at the end;
    the manifest, with a sha256 for every file, is written last. ``protect``: sources that ``out_dir`` must
    not be or contain.
    """
    check_format(fmt, shard_size)
    out = check_out_dir(out_dir, overwrite, protect)
    tmp = _make_temp_dir(out)
    dirs = _class_dirs(manifest.class_names)
    width = max(6, len(str(max(n - 1, 0))))
    try:
        if fmt == "imagefolder":
            records = _write_imagefolder(tmp, items, dirs, width)
            shards: list[str] = []
            lengths: list[int] = []
        else:
            records, per_shard = _write_webdataset(tmp, items, width, shard_size)
            shards, lengths = list(per_shard), list(per_shard.values())
            _write_wds_info(tmp, manifest.name, shards, lengths)
        if len(records) != n:
            raise SnapshotError(
                f"expected {n} samples but wrote {len(records)}; the source changed while exporting. Export again."
            )
        if latents is not None:
            latents.write(tmp / LATENTS)
        per_class = Counter(r["label"] for r in records)
        manifest = replace(
            manifest,
            format=fmt,
            class_dirs=dirs,
            counts={
                **manifest.counts,
                "samples": n,
                "per_class": {c: per_class.get(k, 0) for k, c in enumerate(manifest.class_names)},
            },
            source_ids=[r["source_id"] for r in records],
            files={
                rel: {"sha256": sha256_file(tmp / rel), "size": (tmp / rel).stat().st_size} for rel in tree_files(tmp)
            },
            shards=shards,
            shard_lengths=lengths,
        )
        manifest.write(tmp)
        _swap_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("snapshot of %d samples written to %s (%s)", n, out, fmt)
    return out
