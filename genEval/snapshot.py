"""Static benchmark snapshots of a run: export, verify, load, re-score, transfer, adversarial filtration.

The paper finds that its generated images transfer to models that did not make them (App. D, Table 6)
and ships two static benchmarks built from them (App. O). This module turns a finished run into such a
benchmark and measures it:

* :func:`export_snapshot` writes the *validated* perturbed images of a run (made with
  ``save_images=true``) as lossless PNGs, with the matching originals, per-sample metadata and a
  ``manifest.json`` that records the run's config, versions, components and a sha256 for every file.
  Two layouts: a Hugging Face ``imagefolder`` directory (``datasets.load_dataset("imagefolder",
  data_dir=out)``) and WebDataset tar shards (the ``webdataset`` package, timm's ``wds/`` reader).
* :func:`verify_snapshot` checks every file and count against the manifest.
* :func:`load_snapshot` / :func:`score_snapshot` re-score any classifier on the perturbed images and on
  the originals (Wilson intervals), with no access to the source data set.
* :func:`transfer_matrix` is paper Table 6: source snapshot x target model accuracy.
* :func:`filter_snapshots` is ImageNet-A's adversarial filtration (Hendrycks et al. 2021, digest S2
  Sec. 3.2): keep the samples that fool at least ``k`` surrogate models (optionally with low true-class
  confidence), cap each (true, predicted) confusion pair, and record the surrogates so transfer is
  reported on models not used for filtering.

A snapshot is written into a temporary directory next to its destination and renamed into place at the
end, so an interrupted export never leaves a snapshot that looks complete.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import os
import re
import shutil
import tarfile
import tempfile
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from genEval.fileio import atomic_write_bytes, atomic_write_json
from genEval.rundir import has_tensors, load_latent_file, load_tensors, package_versions
from genEval.stats import fmr_value, proportion

log = logging.getLogger(__name__)

SNAPSHOT_VERSION = 1
FORMATS = ("imagefolder", "webdataset")
MANIFEST = "manifest.json"
METADATA = "metadata.jsonl"
ORIGINALS = "originals"
LATENTS = "latents.safetensors"
WDS_INFO = "_info.json"
WDS_SPLITS = ("validation", "test")  # timm's validate.py reads split "validation" by default
_RESERVED_DIRS = {ORIGINALS}


class SnapshotError(ValueError):
    """A snapshot, or the run it is made from, is not usable as asked; the message says how to fix it."""


# --------------------------------------------------------------------------------------------- writing


@dataclass
class _Item:
    """One sample to write: PNG bytes of the perturbed and original image, and its metadata."""

    perturbed_png: bytes
    original_png: bytes
    meta: dict[str, Any]


def _encode_png(image: np.ndarray) -> bytes:
    """Lossless PNG of a uint8 ``(C, H, W)`` image with 1 (grey), 3 (RGB) or 4 (RGBA) channels."""
    from PIL import Image

    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[0] not in (1, 3, 4):
        raise SnapshotError(
            f"can only store uint8 images shaped (C, H, W) with C in 1, 3, 4 as PNG; got "
            f"{image.dtype} {tuple(image.shape)}."
        )
    arr = image[0] if image.shape[0] == 1 else np.ascontiguousarray(image.transpose(1, 2, 0))
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def _decode_png(data: bytes) -> np.ndarray:
    """Inverse of :func:`_encode_png`: uint8 ``(C, H, W)``."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        if img.mode not in ("L", "RGB", "RGBA"):
            img = img.convert("RGB")
        arr = np.asarray(img, dtype=np.uint8)
    return arr[None].copy() if arr.ndim == 2 else np.ascontiguousarray(arr.transpose(2, 0, 1))


def _class_dirs(class_names: Sequence[str]) -> list[str]:
    """One safe, unique directory name per class (case-insensitively unique, never ``originals``)."""
    out: list[str] = []
    seen: set[str] = set()
    for i, name in enumerate(class_names):
        d = re.sub(r"[^A-Za-z0-9._ -]+", "_", str(name)).strip(" .") or f"class_{i}"
        if d.lower() in seen or d.lower() in _RESERVED_DIRS:
            d = f"{d}_{i}"
        seen.add(d.lower())
        out.append(d)
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _tree_files(root: Path) -> list[str]:
    """Every file under ``root`` (links included) as a sorted list of POSIX paths relative to it."""
    out = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            out.append((Path(dirpath) / f).relative_to(root).as_posix())
    return sorted(out)


def _prepare_out_dir(out_dir: str | Path, overwrite: bool, protect: Sequence[Path]) -> Path:
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
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PermissionError(
            f"cannot create the parent of out_dir '{out}' ({err.strerror}); choose a writable location."
        ) from err
    if not os.access(out.parent, os.W_OK):
        raise PermissionError(f"'{out.parent}' is not writable; choose another out_dir.")
    return out


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


def _tar_add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0  # fixed mtime: same content, same shard hash
    tar.addfile(info, io.BytesIO(data))


def _write_snapshot(
    out_dir: str | Path,
    items: Iterable[_Item],
    n: int,
    *,
    class_names: list[str],
    fmt: str,
    overwrite: bool,
    shard_size: int,
    manifest: dict[str, Any],
    protect: Sequence[Path] = (),
    latents: dict[str, Any] | None = None,
) -> Path:
    """Write ``n`` items as a snapshot in ``fmt`` into a temp dir beside ``out_dir``, then rename it there."""
    out = _prepare_out_dir(out_dir, overwrite, protect)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    dirs = _class_dirs(class_names)
    width = max(6, len(str(max(n - 1, 0))))
    records: list[dict[str, Any]] = []
    try:
        if fmt == "imagefolder":
            with open(tmp / METADATA, "w", encoding="utf-8") as meta_fh:
                for i, item in enumerate(items):
                    d = dirs[item.meta["label"]]
                    rel, orel = f"{d}/{i:0{width}d}.png", f"{ORIGINALS}/{d}/{i:0{width}d}.png"
                    for r, data in ((rel, item.perturbed_png), (orel, item.original_png)):
                        (tmp / r).parent.mkdir(parents=True, exist_ok=True)
                        (tmp / r).write_bytes(data)
                    row = {"file_name": rel, "original_file_name": orel, **item.meta}
                    meta_fh.write(json.dumps(row, allow_nan=False) + "\n")
                    records.append(row)
        else:
            shards: list[str] = []
            lengths: list[int] = []
            tar: tarfile.TarFile | None = None
            try:
                for i, item in enumerate(items):
                    if i % shard_size == 0:
                        if tar is not None:
                            tar.close()
                        shards.append(f"shard-{len(shards):06d}.tar")
                        lengths.append(0)
                        tar = tarfile.open(tmp / shards[-1], "w", format=tarfile.USTAR_FORMAT)
                    key = f"{i:0{width}d}"  # no dots: webdataset splits the key at the first dot
                    _tar_add(tar, f"{key}.png", item.perturbed_png)
                    _tar_add(tar, f"{key}.original.png", item.original_png)
                    _tar_add(tar, f"{key}.cls", str(item.meta["label"]).encode())
                    _tar_add(tar, f"{key}.json", json.dumps(item.meta, allow_nan=False).encode())
                    lengths[-1] += 1
                    records.append({"key": key, "shard": shards[-1], **item.meta})
            finally:
                if tar is not None:
                    tar.close()
            split = {"num_samples": len(records), "filenames": shards, "shard_lengths": lengths}
            atomic_write_json(
                tmp / WDS_INFO,
                {
                    "name": manifest.get("name", out.name),
                    "splits": {s: {"name": s, **split} for s in WDS_SPLITS},
                },
            )
            manifest = {**manifest, "shards": shards, "shard_lengths": lengths}
        if len(records) != n:
            raise SnapshotError(
                f"expected {n} samples but wrote {len(records)}; the source changed while exporting. Export again."
            )
        if latents is not None:
            _write_latents(tmp / LATENTS, latents)
        per_class = Counter(r["label"] for r in records)
        manifest = {
            **manifest,
            "format": fmt,
            "class_names": class_names,
            "class_dirs": dirs,
            "counts": {
                **manifest.get("counts", {}),
                "samples": n,
                "per_class": {class_names[k]: per_class.get(k, 0) for k in range(len(class_names))},
            },
            "source_ids": [r["source_id"] for r in records],
            "files": {
                rel: {"sha256": _sha256(tmp / rel), "size": (tmp / rel).stat().st_size} for rel in _tree_files(tmp)
            },
        }
        atomic_write_json(tmp / MANIFEST, manifest)  # written last inside the temp dir
        _swap_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("snapshot of %d samples written to %s (%s)", n, out, fmt)
    return out


def _write_latents(path: Path, latents: dict[str, Any]) -> None:
    from genEval.rundir import save_latent_file

    final = latents["final"]
    save_latent_file(
        path,
        latents["start"],
        final,
        torch.ones(len(final), dtype=torch.bool),
        latents["source_ids"],
        latents["generator"],
    )


# --------------------------------------------------------------------------------------------- export


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _check_format(fmt: str, shard_size: int) -> None:
    if fmt not in FORMATS:
        raise SnapshotError(f"unknown snapshot format {fmt!r}; choose one of {', '.join(FORMATS)}.")
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
        raise SnapshotError(f"shard_size must be a whole number >= 1, got {shard_size!r}.")


def export_snapshot(
    run_dir: str | Path,
    out_dir: str | Path,
    format: str = "imagefolder",
    overwrite: bool = False,
    include_latents: bool = False,
    shard_size: int = 1000,
) -> Path:
    """Write the validated perturbed images of a finished run as a static benchmark (paper App. O).

    ``format="imagefolder"``: ``out/<class>/<index>.png`` (perturbed), ``out/originals/<class>/<index>.png``
    and ``out/metadata.jsonl`` (``file_name``, ``original_file_name``, ``label``, ``class_name``,
    ``source_id``, ``tested_model``, ``seed``, ``steps``, ``first_fooled``, ``oracle_score``, ...), which
    ``datasets.load_dataset("imagefolder", data_dir=out)`` reads with columns ``image`` and ``original``
    (datasets >= 3.4: older versions want a metadata row for every image, originals included, and fail).
    Class folders are the class names made path-safe and unique (``originals`` gets a ``_<index>`` suffix).
    ``format="webdataset"``: ``shard-000000.tar``... with ``<key>.png``, ``<key>.original.png``,
    ``<key>.cls`` and ``<key>.json`` per sample, and ``_info.json`` for timm's ``wds/`` reader.
    Both get ``manifest.json`` (config, versions, components, counts, sha256 of every file).
    ``include_latents``: also ``latents.safetensors`` with the samples' start and final latents (in
    snapshot order) so the images can be regenerated; needs a run made with ``save_latents=true``.
    Returns the snapshot directory.
    """
    _check_format(format, shard_size)
    run = Path(run_dir).expanduser()
    if not run.is_dir():
        raise FileNotFoundError(f"run directory '{run}' does not exist; pass the directory of a finished run.")
    if not (run / "results.json").is_file():
        raise SnapshotError(
            f"run directory '{run}' has no results.json: the run is incomplete (interrupted or "
            "still running). Let it finish, or rerun it, before exporting."
        )
    if not has_tensors(run, "images"):
        raise FileNotFoundError(
            f"run directory '{run}' has no images.safetensors; rerun the evaluation with "
            "save_images=true to export it as a snapshot."
        )
    if not (run / "samples.jsonl").is_file():
        raise SnapshotError(
            f"run directory '{run}' has results.json but no samples.jsonl; the run directory is "
            "incomplete. Rerun the evaluation."
        )
    results = json.loads((run / "results.json").read_text())
    samples = _read_jsonl(run / "samples.jsonl")
    imgs = load_tensors(run, "images")
    ids = imgs["source_ids"]
    if len(samples) != len(ids) or [s["source_id"] for s in samples] != list(ids):
        raise SnapshotError(
            f"samples.jsonl ({len(samples)} records) and images.safetensors ({len(ids)} images) "
            f"of '{run}' disagree; they come from different runs. Rerun the evaluation."
        )
    keep = imgs["validated"].nonzero().flatten().tolist()
    if not keep:
        raise SnapshotError(
            f"run '{run}' has no validated samples (VR 0), so there is nothing to export. Raise "
            "search.budget or lower search.step_size so the oracle accepts some steps."
        )
    class_names = list(results["class_names"])
    components = dict(results.get("components", {}))
    latents = None
    if include_latents:
        lat = load_latent_file(run)
        if list(lat["source_ids"]) != list(ids):
            raise SnapshotError(
                f"latents.safetensors and images.safetensors of '{run}' list different samples; "
                "rerun the evaluation with save_images=true save_latents=true."
            )
        latents = {
            "start": lat["start"][keep],
            "final": lat["final"][keep],
            "generator": lat["generator"],
            "source_ids": [ids[i] for i in keep],
        }

    def items() -> Iterator[_Item]:
        for i in keep:
            s = samples[i]
            meta = {
                "label": int(imgs["labels"][i]),
                "class_name": class_names[int(imgs["labels"][i])],
                "source_id": ids[i],
                "tested_model": components.get("classifier", ""),
                "seed": results.get("seed"),
                "steps": s.get("accepted_steps"),
                "first_fooled": s.get("first_fooled"),
                "oracle_score": s.get("oracle_score"),
                "clean_pred": s.get("clean_pred"),
                "tested_pred": s.get("final_pred"),
            }
            yield _Item(_encode_png(imgs["perturbed"][i].numpy()), _encode_png(imgs["original"][i].numpy()), meta)

    manifest = {
        "geneval_snapshot": SNAPSHOT_VERSION,
        "kind": "export",
        "name": run.resolve().name,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tested_models": [components.get("classifier", "")],
        "components": components,
        "seed": results.get("seed"),
        "config": results.get("config", {}),
        "versions": results.get("versions", {}),
        "exported_with": package_versions(),
        "run_scores": results.get("scores", {}),
        "image_shapes": {
            "perturbed": list(imgs["perturbed"].shape[1:]),
            "original": list(imgs["original"].shape[1:]),
        },
        "counts": {"run_samples": len(ids)},
        "sources": [
            {
                "run_dir": str(run.resolve()),
                "results_sha256": _sha256(run / "results.json"),
                "components": components,
                "seed": results.get("seed"),
            }
        ],
        "latents": None if latents is None else {"file": LATENTS, "generator": latents["generator"]},
    }
    return _write_snapshot(
        out_dir,
        items(),
        len(keep),
        class_names=class_names,
        fmt=format,
        overwrite=overwrite,
        shard_size=shard_size,
        manifest=manifest,
        protect=[run],
        latents=latents,
    )


# --------------------------------------------------------------------------------------------- verify


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify_snapshot` found; ``ok`` when nothing is missing, extra, modified or miscounted."""

    path: str
    checked: int
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    count_mismatch: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.modified or self.count_mismatch)

    def summary(self, limit: int = 10) -> str:
        head = f"snapshot {self.path}: {'OK' if self.ok else 'FAILED'} ({self.checked} files checked)"
        lines = [head]
        for what, items in (
            ("missing", self.missing),
            ("extra", self.extra),
            ("modified", self.modified),
            ("count mismatch", self.count_mismatch),
        ):
            if items:
                shown = ", ".join(items[:limit]) + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")
                lines.append(f"  {what} ({len(items)}): {shown}")
        return "\n".join(lines)


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The parsed ``manifest.json`` of a snapshot, or a teaching error."""
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
        manifest = json.loads(mf.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SnapshotError(f"{mf} is not valid JSON ({err}); the snapshot is damaged. Export it again.") from err
    if not isinstance(manifest, dict) or "files" not in manifest or "format" not in manifest:
        raise SnapshotError(f"{mf} is not a genEval snapshot manifest (no 'files' / 'format'); export it again.")
    return manifest


def verify_snapshot(path: str | Path) -> VerifyReport:
    """Check every file's size and sha256, and every count, against ``manifest.json``."""
    root = Path(path).expanduser()
    manifest = read_manifest(root)
    files: dict[str, dict[str, Any]] = manifest["files"]
    missing, modified = [], []
    for rel, info in files.items():
        p = root / rel
        if not p.is_file():
            missing.append(rel)
        elif p.stat().st_size != info.get("size") or _sha256(p) != info.get("sha256"):
            modified.append(rel)
    extra = [rel for rel in _tree_files(root) if rel != MANIFEST and rel not in files]
    counts = _count_problems(root, manifest, set(missing) | set(modified))
    report = VerifyReport(str(root), len(files), missing, extra, modified, counts)
    if report.ok:
        log.debug("%s", report.summary())
    else:
        log.warning("%s", report.summary())
    return report


def _count_problems(root: Path, manifest: dict[str, Any], bad: set[str]) -> list[str]:
    n = manifest.get("counts", {}).get("samples")
    if not isinstance(n, int):
        return ["manifest counts.samples is missing"]
    out = []

    def check(what: str, got: int) -> None:
        if got != n:
            out.append(f"{what}: {got} (manifest says {n} samples)")

    check("source_ids in manifest", len(manifest.get("source_ids", [])))
    per_class = manifest.get("counts", {}).get("per_class")
    if isinstance(per_class, dict):
        check("sum of per-class counts", sum(per_class.values()))
    files = manifest["files"]
    if manifest["format"] == "imagefolder":
        pngs = [r for r in files if r.endswith(".png")]
        check("perturbed PNGs in manifest", sum(not r.startswith(f"{ORIGINALS}/") for r in pngs))
        check("original PNGs in manifest", sum(r.startswith(f"{ORIGINALS}/") for r in pngs))
        if (root / METADATA).is_file() and METADATA not in bad:
            check(f"rows in {METADATA}", len(_read_jsonl(root / METADATA)))
    else:
        check("shard_lengths in manifest", sum(manifest.get("shard_lengths", [])))
        for shard, length in zip(manifest.get("shards", []), manifest.get("shard_lengths", []), strict=False):
            if (root / shard).is_file() and shard not in bad:
                got = len(_tar_index(root / shard))
                if got != length:
                    out.append(f"samples in {shard}: {got} (manifest says {length})")
    return out


# --------------------------------------------------------------------------------------------- loading


def _tar_index(path: Path) -> dict[str, dict[str, tuple[int, int]]]:
    """``{key: {ext: (offset, size)}}`` of a WebDataset shard, in order (key: name up to the first dot)."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    with tarfile.open(path, "r:") as tar:
        for m in tar:
            if not m.isfile():
                continue
            key, _, ext = m.name.partition(".")
            out.setdefault(key, {})[ext] = (m.offset_data, m.size)
    return out


@dataclass(frozen=True)
class _Ref:
    """Where one PNG's bytes live: a file, or a byte range of a tar shard (``offset >= 0``)."""

    path: str
    offset: int = -1
    size: int = -1


def _read_ref(root: Path, ref: _Ref) -> bytes:
    with open(root / ref.path, "rb") as fh:
        if ref.offset < 0:
            return fh.read()
        fh.seek(ref.offset)
        return fh.read(ref.size)


class SnapshotDataset(torch.utils.data.Dataset):
    """Lazy :class:`~genEval.interfaces.ImageDataset` over a snapshot's PNGs.

    ``dataset[i] -> (image (C, H, W) float in [0, 1], label, source_id)``; ``uint8(i)`` gives the stored
    uint8 pixels. Usable as ``data`` in :func:`genEval.evaluate` (a new dynamic run from a static set).
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

    def uint8(self, index: int) -> np.ndarray:
        return _decode_png(_read_ref(self.root, self.refs[index]))

    def __getitem__(self, index: int) -> tuple[Tensor, int, str]:
        return (
            torch.from_numpy(self.uint8(index)).float().div(255),
            self.labels[index],
            self.source_ids[index],
        )

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
    manifest: dict[str, Any]
    originals: Tensor | SnapshotDataset
    records: list[dict[str, Any]]
    path: Path

    def __iter__(self) -> Iterator[Any]:
        return iter((self.images, self.labels, self.class_names, self.manifest))

    def __len__(self) -> int:
        return len(self.labels)


def _index_snapshot(root: Path, manifest: dict[str, Any]) -> tuple[list[dict[str, Any]], list[_Ref], list[_Ref]]:
    records: list[dict[str, Any]] = []
    pert: list[_Ref] = []
    orig: list[_Ref] = []
    if manifest["format"] == "imagefolder":
        for row in _read_jsonl(root / METADATA):
            records.append(row)
            pert.append(_Ref(row["file_name"]))
            orig.append(_Ref(row["original_file_name"]))
        return records, pert, orig
    for shard in manifest.get("shards", []):
        index = _tar_index(root / shard)
        with open(root / shard, "rb") as fh:
            for key, parts in index.items():
                missing = {"png", "original.png", "json"} - set(parts)
                if missing:
                    raise SnapshotError(
                        f"sample {key} of {root / shard} lacks {sorted(missing)}; the shard is "
                        "damaged. Run verify_snapshot and export again."
                    )
                off, size = parts["json"]
                fh.seek(off)
                records.append({"key": key, "shard": shard, **json.loads(fh.read(size))})
                pert.append(_Ref(shard, *parts["png"]))
                orig.append(_Ref(shard, *parts["original.png"]))
    return records, pert, orig


def load_snapshot(path: str | Path, lazy: bool = False, verify: bool = True) -> Snapshot:
    """Load a snapshot written by :func:`export_snapshot` or :func:`filter_snapshots`.

    ``lazy=False`` decodes every PNG into uint8 tensors (all perturbed images must share one size, and
    all originals); ``lazy=True`` returns :class:`SnapshotDataset` objects that decode on access.
    ``verify=True`` first checks the files against the manifest and refuses a damaged snapshot.
    """
    root = Path(path).expanduser()
    manifest = read_manifest(root)
    if verify:
        report = verify_snapshot(root)
        if not report.ok:
            raise SnapshotError(
                f"{report.summary()}\nThe snapshot does not match its manifest; export it again "
                "(or pass verify=False to load it anyway)."
            )
    records, pert, orig = _index_snapshot(root, manifest)
    class_names = list(manifest["class_names"])
    labels = [int(r["label"]) for r in records]
    ids = [str(r["source_id"]) for r in records]
    name = str(manifest.get("name", root.name))
    ds_p = SnapshotDataset(root, pert, labels, ids, class_names, name, "perturbed")
    ds_o = SnapshotDataset(root, orig, labels, ids, class_names, f"{name}/originals", "original")
    images: Tensor | SnapshotDataset = ds_p
    originals: Tensor | SnapshotDataset = ds_o
    if not lazy:
        images, originals = (_stack(ds, root) for ds in (ds_p, ds_o))
    return Snapshot(images, torch.tensor(labels, dtype=torch.long), class_names, manifest, originals, records, root)


def _stack(ds: SnapshotDataset, root: Path) -> Tensor:
    arrays = [ds.uint8(i) for i in range(len(ds))]
    shapes = sorted({a.shape for a in arrays})
    if len(shapes) > 1:
        raise SnapshotError(
            f"the {ds.which} images of '{root}' have different shapes {shapes}; load it with "
            "lazy=True to get a dataset instead of one tensor."
        )
    if not arrays:
        return torch.zeros(0, dtype=torch.uint8)
    return torch.from_numpy(np.stack(arrays))


# --------------------------------------------------------------------------------------------- scoring


def _classifier_name(classifier: Any) -> str:
    return str(getattr(classifier, "name", None) or type(classifier).__name__)


def _check_classes(classifier: Any, class_names: list[str], where: str, cname: str) -> None:
    k = getattr(classifier, "num_classes", None)
    if k is not None and int(k) != len(class_names):
        shown = ", ".join(class_names[:10]) + (", ..." if len(class_names) > 10 else "")
        raise SnapshotError(
            f"classifier {cname} has {int(k)} classes but snapshot '{where}' has "
            f"{len(class_names)} ({shown}). Use a classifier trained on the snapshot's classes."
        )


def _predict(
    ds: SnapshotDataset, classifier: Any, dev: torch.device, batch_size: int, cname: str, where: str
) -> tuple[Tensor, Tensor]:
    """Predictions ``(N,)`` and true-class softmax probabilities ``(N,)`` of ``classifier`` on ``ds``."""
    n = len(ds)
    preds = torch.empty(n, dtype=torch.long)
    p_true = torch.empty(n)
    labels = torch.tensor(ds.labels, dtype=torch.long)
    nc = len(ds.class_names)
    with torch.no_grad():
        for start in range(0, n, batch_size):
            idx = list(range(start, min(n, start + batch_size)))
            groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
            arrays = {i: ds.uint8(i) for i in idx}
            for i in idx:
                groups[arrays[i].shape].append(i)  # one forward per image size (snapshots may mix sizes)
            for rows in groups.values():
                x = torch.from_numpy(np.stack([arrays[i] for i in rows])).to(dev).float().div(255)
                logits = classifier(x)
                if logits.ndim != 2 or logits.shape[1] != nc:
                    raise SnapshotError(
                        f"classifier {cname} returned logits shaped {tuple(logits.shape)} but "
                        f"snapshot '{where}' has {nc} classes; use a classifier trained on them."
                    )
                r = torch.tensor(rows)
                prob = logits.float().softmax(1).cpu()
                preds[r] = prob.argmax(1)
                p_true[r] = prob.gather(1, labels[r][:, None])[:, 0]
    return preds, p_true


def _prepare(classifier: Any, device: str) -> torch.device:
    from genEval.driver import resolve_device

    dev = resolve_device(device)
    if isinstance(classifier, torch.nn.Module):
        classifier.to(dev).eval()
    return dev


def _score_loaded(
    snap: Snapshot, classifier: Any, dev: torch.device, batch_size: int, interval: str, cname: str
) -> dict[str, Any]:
    where = str(snap.path)
    _check_classes(classifier, snap.class_names, where, cname)
    labels = snap.labels
    n = len(labels)
    pp, _ = _predict(snap.images, classifier, dev, batch_size, cname, where)
    po, _ = _predict(snap.originals, classifier, dev, batch_size, cname, where)
    cp, co = pp == labels, po == labels
    pa = proportion(int(cp.sum()), n, interval, what="perturbed images")
    sa = proportion(int(co.sum()), n, interval, what="original images")
    per_class = []
    for k, name in enumerate(snap.class_names):
        m = labels == k
        per_class.append(
            {
                "class": name,
                "n": int(m.sum()),
                "pa": proportion(int(cp[m].sum()), int(m.sum()), interval).value,
                "sa": proportion(int(co[m].sum()), int(m.sum()), interval).value,
            }
        )
    return {
        "snapshot": where,
        "classifier": cname,
        "n": n,
        "pa": pa.to_dict(),
        "sa": sa.to_dict(),
        "fmr": fmr_value(sa.value, pa.value),
        "class_names": snap.class_names,
        "tested_models": snap.manifest.get("tested_models", []),
        "filtered_with": snap.manifest.get("filtered_with", []),
        "per_class": per_class,
        "predictions": pp.tolist(),
        "original_predictions": po.tolist(),
    }


def score_snapshot(
    path: str | Path,
    classifier: Any,
    batch_size: int = 64,
    device: str = "auto",
    interval: str = "wilson",
    verify: bool = True,
) -> dict[str, Any]:
    """Accuracy of ``classifier`` on a snapshot's perturbed images (``pa``) and on their originals (``sa``).

    Both are percentages with 95% intervals (``interval``: wilson | clopper-pearson) over the snapshot's
    samples; ``fmr = 100 * pa / sa``. Needs no access to the source data set (the originals are stored).
    Also returns per-class values and the predictions, in snapshot order.
    """
    if batch_size < 1:
        raise SnapshotError(f"batch_size must be >= 1, got {batch_size}.")
    cname = _classifier_name(classifier)
    snap = load_snapshot(path, lazy=True, verify=verify)
    _check_classes(classifier, snap.class_names, str(snap.path), cname)
    dev = _prepare(classifier, device)
    return _score_loaded(snap, classifier, dev, batch_size, interval, cname)


def format_score(result: dict[str, Any]) -> str:
    """The one-screen summary of :func:`score_snapshot`."""
    from genEval.stats import Estimate

    pa, sa = Estimate(**result["pa"]), Estimate(**result["sa"])
    fmr = "undefined" if result["fmr"] is None else f"{result['fmr']:.2f}"
    lines = [
        f"snapshot {result['snapshot']}  n={result['n']}  classes={len(result['class_names'])}",
        f"  classifier: {result['classifier']}   (snapshot made against: {', '.join(result['tested_models'])})",
        f"  SA (originals)  {sa.fmt()}   ({sa.k}/{sa.n})",
        f"  PA (perturbed)  {pa.fmt()}   ({pa.k}/{pa.n})",
        f"  FMR  {fmr}",
    ]
    if result.get("filtered_with"):
        lines.append(f"  filtered with: {', '.join(result['filtered_with'])}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- transfer

TRANSFER_COLUMNS = (
    "source",
    "target",
    "n",
    "pa",
    "pa_low",
    "pa_high",
    "sa",
    "sa_low",
    "sa_high",
    "fmr",
    "self_generated",
    "used_for_filtering",
    "skipped",
)


def transfer_matrix(
    snapshots: Mapping[str, str | Path],
    classifiers: Mapping[str, Any],
    out_csv: str | Path | None = None,
    batch_size: int = 64,
    device: str = "auto",
    interval: str = "wilson",
    skip_filtering_models: bool = False,
    verify: bool = True,
) -> list[dict[str, Any]]:
    """Accuracy of every target classifier on every source snapshot (paper App. D, Table 6).

    One row per (source, target) with ``pa``/``sa`` (percent, with interval bounds) and ``fmr``.
    ``self_generated`` marks the diagonal (source and target share a name); ``used_for_filtering``
    marks targets listed in the snapshot's ``filtered_with`` (their accuracy is not a transfer result),
    and ``skip_filtering_models=True`` leaves those cells empty (``skipped``). Written to ``out_csv`` when
    given (atomic). Returns the rows.
    """
    if not snapshots:
        raise SnapshotError("transfer_matrix needs at least one snapshot: {name: snapshot dir}.")
    if not classifiers:
        raise SnapshotError("transfer_matrix needs at least one target classifier: {name: classifier}.")
    loaded = {name: load_snapshot(p, lazy=True, verify=verify) for name, p in snapshots.items()}
    for tname, clf in classifiers.items():
        for snap in loaded.values():
            _check_classes(clf, snap.class_names, str(snap.path), tname)
    rows = []
    for tname, clf in classifiers.items():
        dev = _prepare(clf, device)
        for sname, snap in loaded.items():
            used = tname in snap.manifest.get("filtered_with", [])
            row: dict[str, Any] = {
                "source": sname,
                "target": tname,
                "n": len(snap),
                "self_generated": sname == tname,
                "used_for_filtering": used,
                "skipped": used and skip_filtering_models,
            }
            if row["skipped"]:
                row.update({k: None for k in ("pa", "pa_low", "pa_high", "sa", "sa_low", "sa_high", "fmr")})
            else:
                r = _score_loaded(snap, clf, dev, batch_size, interval, tname)
                vals = {
                    f"{m}{suffix}": r[m][key]
                    for m in ("pa", "sa")
                    for suffix, key in (("", "value"), ("_low", "low"), ("_high", "high"))
                }
                row.update({k: None if v is None else float(v) for k, v in {**vals, "fmr": r["fmr"]}.items()})
            rows.append(row)
    order = {s: i for i, s in enumerate(snapshots)}
    rows.sort(key=lambda r: order[r["source"]])
    if out_csv is not None:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=TRANSFER_COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows({k: ("" if r[k] is None else r[k]) for k in TRANSFER_COLUMNS} for r in rows)
        atomic_write_bytes(Path(out_csv), buf.getvalue().encode())
    return rows


def format_transfer(rows: list[dict[str, Any]]) -> str:
    """Sources as rows, targets as columns; cells ``PA / FMR``, ``*`` self-generated, ``f`` filter model."""
    sources = list(dict.fromkeys(r["source"] for r in rows))
    targets = list(dict.fromkeys(r["target"] for r in rows))
    cell = {(r["source"], r["target"]): r for r in rows}

    def fmt(r: dict[str, Any] | None) -> str:
        if r is None:
            return "-"
        if r["skipped"]:
            return "skipped(f)"
        pa = "n/a" if r["pa"] is None else f"{r['pa']:.1f}"
        fmr = "n/a" if r["fmr"] is None else f"{r['fmr']:.1f}"
        return f"{pa}/{fmr}" + ("*" if r["self_generated"] else "") + ("f" if r["used_for_filtering"] else "")

    table = [["source \\ target", *targets]] + [[s, *(fmt(cell.get((s, t))) for t in targets)] for s in sources]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in table]
    lines.append("cells: PA / FMR (percent); * = self-generated, f = target was a filtering surrogate")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- filtering


def filter_snapshots(
    paths: str | Path | Sequence[str | Path],
    surrogates: Mapping[str, Any],
    out_dir: str | Path,
    min_fooled: int | None = None,
    max_true_conf: float | None = None,
    max_per_pair: int | None = None,
    overwrite: bool = False,
    batch_size: int = 64,
    device: str = "auto",
    format: str | None = None,
    shard_size: int = 1000,
    verify: bool = True,
) -> Path:
    """Adversarial filtration of snapshots into a hard static set (ImageNet-A recipe, digest S2 Sec. 3.2).

    A sample is kept when at least ``min_fooled`` surrogates misclassify its perturbed image (default:
    all of them, ImageNet-A's rule), and, with ``max_true_conf``, when the surrogates' true-class softmax
    probability averaged over surrogates is below it (ImageNet-A: 0.15). Each kept sample's predicted
    class is the most common wrong prediction among the surrogates (ties: the first surrogate, in the
    given order, that predicts one of the tied classes); with ``max_per_pair`` at most that many samples
    per (true, predicted) pair are kept, the lowest mean true-class confidence first (ImageNet-A: 15).
    The new snapshot (``format``: default the first source's) lists the surrogates under
    ``filtered_with`` so :func:`transfer_matrix` can mark them; report transfer on other models.
    """
    srcs = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not srcs:
        raise SnapshotError("filter_snapshots needs at least one source snapshot directory.")
    if not surrogates:
        raise SnapshotError("filter_snapshots needs at least one surrogate classifier: {name: classifier}.")
    k_all = len(surrogates)
    k = k_all if min_fooled is None else min_fooled
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= k_all:
        raise SnapshotError(
            f"min_fooled must be a whole number in 1..{k_all} (the number of surrogates), got {min_fooled!r}."
        )
    if max_true_conf is not None and not (isinstance(max_true_conf, (int, float)) and 0 < max_true_conf <= 1):
        raise SnapshotError(
            f"max_true_conf must be a probability in (0, 1] or None, got {max_true_conf!r} (ImageNet-A used 0.15)."
        )
    if max_per_pair is not None and (
        isinstance(max_per_pair, bool) or not isinstance(max_per_pair, int) or max_per_pair < 1
    ):
        raise SnapshotError(
            f"max_per_pair must be a whole number >= 1 or None, got {max_per_pair!r} (ImageNet-A used 15)."
        )
    if batch_size < 1:
        raise SnapshotError(f"batch_size must be >= 1, got {batch_size}.")
    snaps = [load_snapshot(p, lazy=True, verify=verify) for p in srcs]
    fmt = format or snaps[0].manifest["format"]
    _check_format(fmt, shard_size)
    class_names = snaps[0].class_names
    for s in snaps[1:]:
        if s.class_names != class_names:
            raise SnapshotError(
                f"snapshots '{snaps[0].path}' and '{s.path}' have different class lists "
                f"({len(class_names)} vs {len(s.class_names)} classes); filter them separately."
            )
    for name, clf in surrogates.items():
        _check_classes(clf, class_names, str(snaps[0].path), name)

    # Score every sample with every surrogate.
    cand: list[dict[str, Any]] = []
    for si, snap in enumerate(snaps):
        preds, confs = [], []
        for name, clf in surrogates.items():
            dev = _prepare(clf, device)
            p, c = _predict(snap.images, clf, dev, batch_size, name, str(snap.path))
            preds.append(p)
            confs.append(c)
        P, C = torch.stack(preds, 1), torch.stack(confs, 1)  # (N, S)
        for i in range(len(snap)):
            y = int(snap.labels[i])
            row = P[i].tolist()
            wrong = [q for q in row if q != y]
            pair = y
            if wrong:
                top = Counter(wrong).most_common()
                tied = {q for q, c in top if c == top[0][1]}
                pair = next(q for q in row if q in tied)
            cand.append(
                {
                    "snap": si,
                    "index": i,
                    "label": y,
                    "n_fooled": len(wrong),
                    "pair_pred": pair,
                    "mean_true_conf": float(C[i].mean()),
                    "preds": dict(zip(surrogates, row, strict=True)),
                }
            )
    fooled = [c for c in cand if c["n_fooled"] >= k]
    confident = [c for c in fooled if max_true_conf is None or c["mean_true_conf"] < max_true_conf]
    kept = confident
    if max_per_pair is not None:
        groups: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
        for pos, c in enumerate(confident):
            groups[(c["label"], c["pair_pred"])].append({**c, "pos": pos})
        chosen = sorted(
            pos
            for g in groups.values()
            for pos in (c["pos"] for c in sorted(g, key=lambda c: (c["mean_true_conf"], c["pos"]))[:max_per_pair])
        )
        kept = [confident[p] for p in chosen]
    if not kept:
        raise SnapshotError(
            f"no sample passes the filter ({len(cand)} candidates, {len(fooled)} fool >= {k} "
            f"surrogates, {len(confident)} below max_true_conf); lower min_fooled or raise "
            "max_true_conf."
        )
    names = [str(s.manifest.get("name", s.path.name)) for s in snaps]

    def items() -> Iterator[_Item]:
        for c in kept:
            snap = snaps[c["snap"]]
            rec = {
                k2: v
                for k2, v in snap.records[c["index"]].items()
                if k2 not in ("file_name", "original_file_name", "key", "shard")
            }
            meta = {
                **rec,
                "source_snapshot": names[c["snap"]],
                "source_index": c["index"],
                "surrogate_preds": c["preds"],
                "n_fooled": c["n_fooled"],
                "pair_pred": c["pair_pred"],
                "mean_true_conf": c["mean_true_conf"],
            }
            yield _Item(
                _read_ref(snap.path, snap.images.refs[c["index"]]),
                _read_ref(snap.path, snap.originals.refs[c["index"]]),
                meta,
            )

    shapes = [s.manifest.get("image_shapes") for s in snaps]
    manifest = {
        "geneval_snapshot": SNAPSHOT_VERSION,
        "kind": "filter",
        "name": Path(out_dir).name,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tested_models": sorted({m for s in snaps for m in s.manifest.get("tested_models", [])}),
        "filtered_with": list(surrogates),
        "surrogates": {
            name: {"id": _classifier_name(clf), "repr": repr(clf)[:500]} for name, clf in surrogates.items()
        },
        "filter": {
            "min_fooled": k,
            "max_true_conf": max_true_conf,
            "max_per_pair": max_per_pair,
            "predicted": "most common wrong surrogate prediction",
            "cap_order": "lowest mean true-class confidence first",
        },
        "counts": {
            "candidates": len(cand),
            "fooled_enough": len(fooled),
            "below_max_true_conf": len(confident),
        },
        "image_shapes": shapes[0] if all(s == shapes[0] for s in shapes) else shapes,
        "sources": [
            {
                "snapshot": str(s.path.resolve()),
                "name": nm,
                "manifest_sha256": _sha256(s.path / MANIFEST),
                "kind": s.manifest.get("kind"),
                "samples": len(s),
                "tested_models": s.manifest.get("tested_models"),
                "components": s.manifest.get("components"),
                "seed": s.manifest.get("seed"),
                "sources": s.manifest.get("sources"),
            }
            for s, nm in zip(snaps, names, strict=True)
        ],
        "versions": package_versions(),
        "latents": None,
    }
    log.info(
        "filter: %d candidates -> %d fool >= %d surrogates -> %d confident -> %d kept",
        len(cand),
        len(fooled),
        k,
        len(confident),
        len(kept),
    )
    return _write_snapshot(
        out_dir,
        items(),
        len(kept),
        class_names=class_names,
        fmt=fmt,
        overwrite=overwrite,
        shard_size=shard_size,
        manifest=manifest,
        protect=[s.path for s in snaps],
    )


__all__ = [
    "FORMATS",
    "Snapshot",
    "SnapshotDataset",
    "SnapshotError",
    "VerifyReport",
    "export_snapshot",
    "filter_snapshots",
    "format_score",
    "format_transfer",
    "load_snapshot",
    "read_manifest",
    "score_snapshot",
    "transfer_matrix",
    "verify_snapshot",
]
