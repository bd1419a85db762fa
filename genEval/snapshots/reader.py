"""Reading a snapshot back (paper App. O): eagerly as uint8 tensors, or lazily as :class:`SnapshotDataset`
(:func:`load_snapshot`), from either layout; ``verify=True`` checks it first (:mod:`genEval.snapshots.verify`)."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from genEval.snapshots.manifest import Manifest, SnapshotError, decode_png, read_metadata, wds_samples
from genEval.snapshots.verify import verify_snapshot


def _member_table(shard: Path) -> dict[str, tuple[int, int]]:
    """``{member name: (data offset, size)}`` of a tar shard.

    webdataset reads shards as streams only; a map-style dataset needs random access to one sample, which
    the tar member table (stdlib ``tarfile``, headers only) gives.
    """
    with tarfile.open(shard, "r:") as tar:
        return {m.name: (m.offset_data, m.size) for m in tar if m.isfile()}


@dataclass(frozen=True)
class _Ref:
    """Where one PNG's bytes live: a file, or a byte range of a tar shard (``offset >= 0``)."""

    path: str
    offset: int = -1
    size: int = -1

    def read(self, root: Path) -> bytes:
        with open(root / self.path, "rb") as fh:
            if self.offset < 0:
                return fh.read()
            fh.seek(self.offset)
            return fh.read(self.size)


class SnapshotDataset(torch.utils.data.Dataset):
    """Lazy :class:`~genEval.interfaces.ImageDataset` over a snapshot's PNGs.

    ``dataset[i] -> (image (C, H, W) float in [0, 1], label, source_id)``; ``uint8(i)`` gives the stored
    uint8 pixels, ``png_bytes(i)`` the stored file. Usable as ``data`` in :func:`genEval.evaluate` (a new
    dynamic run from a static set).
    """

    def __init__(
        self,
        root: Path,
        refs: list[_Ref],
        labels: list[int],
        source_ids: list[str],
        class_names: list[str],
        name: str,
        which: str,
    ) -> None:
        self.root, self.refs, self.labels, self.source_ids = root, refs, labels, source_ids
        self.class_names, self.name, self.which = list(class_names), name, which

    def __len__(self) -> int:
        return len(self.refs)

    def png_bytes(self, index: int) -> bytes:
        return self.refs[index].read(self.root)

    def uint8(self, index: int) -> np.ndarray:
        return decode_png(self.png_bytes(index))

    def __getitem__(self, index: int) -> tuple[Tensor, int, str]:
        return torch.from_numpy(self.uint8(index)).float().div(255), self.labels[index], self.source_ids[index]

    def __repr__(self) -> str:
        return (
            f"SnapshotDataset(root='{self.root}', which={self.which}, n={len(self)}, classes={len(self.class_names)})"
        )


@dataclass(frozen=True)
class Snapshot:
    """A loaded snapshot. Unpacks as ``images, labels, class_names, manifest``.

    images / originals: uint8 ``(N, C, H, W)`` tensors, or :class:`SnapshotDataset` when loaded lazily.
    labels: ``(N,)`` long. records: the per-sample metadata, in order.
    """

    images: Tensor | SnapshotDataset
    labels: Tensor
    class_names: list[str]
    manifest: Manifest
    originals: Tensor | SnapshotDataset
    records: list[dict[str, Any]]
    path: Path

    def __iter__(self) -> Iterator[Any]:
        return iter((self.images, self.labels, self.class_names, self.manifest))

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def name(self) -> str:
        return self.manifest.name or self.path.name


def _index_imagefolder(root: Path) -> tuple[list[dict[str, Any]], list[_Ref], list[_Ref]]:
    records = read_metadata(root)
    return records, [_Ref(r["file_name"]) for r in records], [_Ref(r["original_file_name"]) for r in records]


def _index_webdataset(root: Path, manifest: Manifest) -> tuple[list[dict[str, Any]], list[_Ref], list[_Ref]]:
    records: list[dict[str, Any]] = []
    pert: list[_Ref] = []
    orig: list[_Ref] = []
    for shard in manifest.shards:
        members = _member_table(root / shard)
        for sample in wds_samples(root / shard):
            key = sample["__key__"]
            lacking = [name for name in (f"{key}.png", f"{key}.original.png") if name not in members]
            if lacking:
                raise SnapshotError(
                    f"{root / shard} lacks {', '.join(lacking)}; the shard is damaged. Run verify_snapshot and "
                    "export again."
                )
            records.append({"key": key, "shard": shard, **json.loads(sample["json"])})
            pert.append(_Ref(shard, *members[f"{key}.png"]))
            orig.append(_Ref(shard, *members[f"{key}.original.png"]))
    return records, pert, orig


def _stack(ds: SnapshotDataset) -> Tensor:
    arrays = [ds.uint8(i) for i in range(len(ds))]
    shapes = sorted({a.shape for a in arrays})
    if len(shapes) > 1:
        raise SnapshotError(
            f"the {ds.which} images of '{ds.root}' have different shapes {shapes}; load it with "
            "lazy=True to get a dataset instead of one tensor."
        )
    return torch.from_numpy(np.stack(arrays)) if arrays else torch.zeros(0, dtype=torch.uint8)


def load_snapshot(path: str | Path, lazy: bool = False, verify: bool = True) -> Snapshot:
    """Load a snapshot written by :func:`export_snapshot` or :func:`~genEval.snapshots.filtration.filter_snapshots`.

    ``lazy=False`` decodes every PNG into uint8 tensors (all perturbed images must share one size, and
    all originals); ``lazy=True`` returns :class:`SnapshotDataset` objects that decode on access.
    ``verify=True`` first checks the files against the manifest and refuses a damaged snapshot.
    """
    root = Path(path).expanduser()
    manifest = Manifest.read(root)
    if verify:
        report = verify_snapshot(root)
        if not report.ok:
            raise SnapshotError(
                f"{report.summary()}\nThe snapshot does not match its manifest; export it again "
                "(or pass verify=False to load it anyway)."
            )
    if manifest.format == "imagefolder":
        records, pert, orig = _index_imagefolder(root)
    else:
        records, pert, orig = _index_webdataset(root, manifest)
    labels = [int(r["label"]) for r in records]
    ids = [str(r["source_id"]) for r in records]
    name = manifest.name or root.name
    cn = list(manifest.class_names)
    images = SnapshotDataset(root, pert, labels, ids, cn, name, "perturbed")
    originals = SnapshotDataset(root, orig, labels, ids, cn, f"{name}/originals", "original")
    y = torch.tensor(labels, dtype=torch.long)
    if not lazy:
        return Snapshot(_stack(images), y, cn, manifest, _stack(originals), records, root)
    return Snapshot(images, y, cn, manifest, originals, records, root)
