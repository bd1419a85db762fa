"""A snapshot's format (paper App. O): its constants, the :class:`Manifest` (config, versions, components, counts
and a sha256 per file), the items and latents a writer takes, and the lossless PNG codec.

The layouts (``imagefolder``: ``<class>/<index>.png`` + ``originals/`` + ``metadata.jsonl``, which Hugging Face
``datasets`` reads; ``webdataset``: ``shard-000000.tar``... + ``_info.json`` for timm's ``wds/`` reader) are
written by :mod:`genEval.snapshots.writer`, read by :mod:`genEval.snapshots.reader` and checked by
:mod:`genEval.snapshots.verify`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import webdataset as wds
from PIL import Image

from genEval.fileio import atomic_write_json

SNAPSHOT_VERSION = 1
FORMATS = ("imagefolder", "webdataset")
MANIFEST = "manifest.json"
METADATA = "metadata.jsonl"
ORIGINALS = "originals"
LATENTS = "latents.safetensors"
WDS_INFO = "_info.json"
WDS_SHARD = "shard-%06d.tar"
WDS_SPLITS = ("validation", "test")  # timm's validate.py reads split "validation" by default
# Fixed tar headers: the same samples give the same shard bytes, hence the same sha256 in the manifest.
TAR_HEADERS = {"mtime": 0, "user": "", "group": "", "mode": 0o644}


class SnapshotError(ValueError):
    """A snapshot, or the run it is made from, is not usable as asked; the message says how to fix it."""


# --------------------------------------------------------------------------------------------- manifest


@dataclass(frozen=True)
class Manifest:
    """``manifest.json``: what a snapshot holds, where it came from, and the sha256 of every file.

    Provenance (``kind``, ``sources``, the export and filter fields) is set by whoever makes the snapshot;
    :func:`write_snapshot` fills in the content fields (``format`` ... ``shard_lengths``). ``counts`` holds
    ``samples`` and ``per_class`` (class name -> n) plus the maker's own counts (export: ``run_samples``;
    filter: ``candidates``, ``fooled_enough``, ``below_max_true_conf``). ``files`` maps each file's POSIX
    path relative to the snapshot to ``{"sha256", "size"}``. New fields get a default, so older manifests
    still load; keys this version does not know are kept in ``extra`` and written back.
    """

    kind: str  # "export" | "filter"
    name: str
    created: str
    tested_models: list[str]
    sources: list[dict[str, Any]]
    class_names: list[str]
    image_shapes: dict[str, list[int]] | list[Any] | None = None
    versions: dict[str, str] = field(default_factory=dict)
    latents: dict[str, str] | None = None
    # content, filled in by write_snapshot
    format: str = ""
    class_dirs: list[str] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)
    source_ids: list[str] = field(default_factory=list)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    shards: list[str] = field(default_factory=list)
    shard_lengths: list[int] = field(default_factory=list)
    # export only
    components: dict[str, str] = field(default_factory=dict)
    seed: int | None = None
    config: dict[str, Any] = field(default_factory=dict)
    exported_with: dict[str, str] = field(default_factory=dict)
    run_scores: dict[str, Any] = field(default_factory=dict)
    # the tested model's SA over every sample of the run (not only the exported, validated ones), as results.json
    # has it (value, low, high, n, k, method): the denominator of a snapshot's FMR (genEval.snapshots.scoring)
    full_sample_sa: dict[str, Any] = field(default_factory=dict)
    # filter only
    filtered_with: list[str] = field(default_factory=list)
    surrogates: dict[str, dict[str, str]] = field(default_factory=dict)
    filter: dict[str, Any] = field(default_factory=dict)
    geneval_snapshot: int = SNAPSHOT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def samples(self) -> int:
        return int(self.counts.get("samples", 0))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        extra = d.pop("extra")
        return {**extra, **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "manifest") -> Manifest:
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        if not isinstance(d, dict) or "files" not in d or "format" not in d:
            raise SnapshotError(f"{where} is not a genEval snapshot manifest (no 'files' / 'format'); export it again.")
        lacking = [k for k in required if k not in d]
        if lacking:
            raise SnapshotError(f"{where} lacks {', '.join(lacking)}; the snapshot is damaged. Export it again.")
        if int(d.get("geneval_snapshot", 0)) > SNAPSHOT_VERSION:
            raise SnapshotError(
                f"{where} is snapshot format {d['geneval_snapshot']}, newer than this genEval reads "
                f"({SNAPSHOT_VERSION}); upgrade genEval."
            )
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in d.items() if k in known}, extra={k: v for k, v in d.items() if k not in known})

    def write(self, root: Path) -> None:
        atomic_write_json(root / MANIFEST, self.to_dict())

    @classmethod
    def read(cls, path: str | Path) -> Manifest:
        """The manifest of the snapshot directory ``path``, or a teaching error."""
        root = Path(path).expanduser()
        if not root.is_dir():
            raise FileNotFoundError(f"snapshot directory '{root}' does not exist.")
        mf = root / MANIFEST
        if not mf.is_file():
            raise SnapshotError(
                f"'{root}' has no {MANIFEST}: it is not a genEval snapshot, or its export did not "
                "finish. Export it again with export_snapshot (CLI: geneval export run=<run dir>)."
            )
        try:
            data = json.loads(mf.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise SnapshotError(f"{mf} is not valid JSON ({err}); the snapshot is damaged. Export it again.") from err
        return cls.from_dict(data, str(mf))


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def encode_png(image: np.ndarray) -> bytes:
    """Lossless PNG of a uint8 ``(C, H, W)`` image with 1 (grey), 3 (RGB) or 4 (RGBA) channels."""
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[0] not in (1, 3, 4):
        raise SnapshotError(
            f"can only store uint8 images shaped (C, H, W) with C in 1, 3, 4 as PNG; got "
            f"{image.dtype} {tuple(image.shape)}."
        )
    arr = image[0] if image.shape[0] == 1 else np.ascontiguousarray(image.transpose(1, 2, 0))
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def decode_png(data: bytes) -> np.ndarray:
    """Inverse of :func:`encode_png`: uint8 ``(C, H, W)``."""
    with Image.open(io.BytesIO(data)) as img:
        if img.mode not in ("L", "RGB", "RGBA"):
            img = img.convert("RGB")
        arr = np.asarray(img, dtype=np.uint8)
    return arr[None].copy() if arr.ndim == 2 else np.ascontiguousarray(arr.transpose(2, 0, 1))


def read_metadata(root: Path) -> list[dict[str, Any]]:
    """The rows of an image-folder snapshot's ``metadata.jsonl``, in order."""
    with open(root / METADATA, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def wds_samples(shard: Path, suffix: str = ".json") -> Iterator[dict[str, Any]]:
    """The samples of one shard, in order, as webdataset groups them: ``__key__`` plus the members whose
    names end in ``suffix`` (the others are skipped unread).

    webdataset's own tar expander and key grouper (the stages ``wds.WebDataset`` is built from), fed a file
    opened and closed here: ``wds.WebDataset`` leaves its file handles to the garbage collector.
    """
    with open(shard, "rb") as fh:
        stream = [{"url": str(shard), "stream": fh}]
        files = wds.tariterators.tar_file_expander(stream, select_files=lambda name: name.endswith(suffix))
        yield from wds.tariterators.group_by_keys(files)
