"""Static benchmark snapshots of a run: the format, and writing, reading and verifying it (paper App. O).

The paper ships static benchmarks made from its generated images (App. O). :func:`export_snapshot` turns a
finished run (made with ``save_images=true``) into one: the *validated* perturbed images as lossless PNGs,
the matching originals, per-sample metadata and a ``manifest.json`` (:class:`Manifest`) that records the
run's config, versions, components, counts and a sha256 for every file. Two layouts:

* ``imagefolder``: ``<class>/<index>.png``, ``originals/<class>/<index>.png`` and ``metadata.jsonl``, which
  Hugging Face ``datasets.load_dataset("imagefolder", data_dir=out)`` reads (columns ``image``, ``original``).
* ``webdataset``: ``shard-000000.tar``... written with ``webdataset.ShardWriter`` (``<key>.png``,
  ``<key>.original.png``, ``<key>.cls``, ``<key>.json`` per sample) and ``_info.json`` for timm's ``wds/``
  reader. Tar headers carry a fixed mtime, owner and mode, so exporting the same run again gives
  byte-identical shards and the same hashes.

:func:`verify_snapshot` checks every file and count against the manifest; :func:`load_snapshot` reads a
snapshot back (eagerly as uint8 tensors, or lazily as :class:`SnapshotDataset`). :func:`write_snapshot` is
the one writer, shared by export and by adversarial filtration (:mod:`genEval.snapshots.filtration`). Scoring and
transfer live in :mod:`genEval.snapshots.scoring`.

A snapshot is written into a temporary directory next to its destination and renamed into place at the end,
so an interrupted export never leaves a snapshot that looks complete.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import tarfile
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
import webdataset as wds
from PIL import Image
from torch import Tensor

from genEval.fileio import atomic_write_json, sha256_file
from genEval.runs.identity import package_versions
from genEval.runs.parts import IMAGES, save_latent_file
from genEval.runs.parts import LATENTS as LATENT_PARTS
from genEval.runs.reader import RunDir
from genEval.scores.outcomes import SampleRecord

log = logging.getLogger(__name__)

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


# --------------------------------------------------------------------------------------------- writing


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


def _tree_files(root: Path) -> list[str]:
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
                rel: {"sha256": sha256_file(tmp / rel), "size": (tmp / rel).stat().st_size} for rel in _tree_files(tmp)
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


# --------------------------------------------------------------------------------------------- export


def _validated(run: RunDir) -> list[SampleRecord]:
    """The run's validated samples, in run order; an unfinished run, one without saved images or with no validated
    sample is refused."""
    if not run.finished:
        run.results  # noqa: B018 (raises the reader's error: what is missing and what to do)
    validated = [s for s in run.samples if s.validated]
    run.require(IMAGES)
    if not validated:
        raise SnapshotError(
            f"run '{run}' has no validated samples (VR 0), so there is nothing to export. Raise "
            "search.budget or lower search.step_size so the oracle accepts some steps."
        )
    return validated


def _validated_rows(run: RunDir, validated: list[SampleRecord]) -> Iterator[tuple[SampleRecord, dict[str, Tensor]]]:
    """``(record, {"original", "perturbed", "labels", "validated", ...})`` of every validated sample, in run
    order, one row at a time (streamed from the run's image parts)."""
    for record, row in run.rows(IMAGES, validated):
        if not bool(row["validated"]):
            raise SnapshotError(
                f"samples.jsonl and the images of '{run}' disagree on whether {record.source_id!r} "
                "was validated; they come from different runs. Rerun the evaluation."
            )
        yield record, row


def _image_shapes(run: RunDir, validated: list[SampleRecord]) -> dict[str, list[int]]:
    """(C, H, W) of the perturbed and original images (of the first validated sample)."""
    _, first = next(run.rows(IMAGES, validated[:1]))
    return {k: list(first[k].shape) for k in ("perturbed", "original")}


def _read_latents(run: RunDir, validated: list[SampleRecord]) -> SnapshotLatents:
    """Start and final latents of the validated samples (held in memory: an ``include_latents`` export holds
    ``2 x validated x latent size`` floats, unlike the images, which are streamed)."""
    starts, finals = [], []
    for _, row in run.rows(LATENT_PARTS, validated):
        starts.append(row["start"])
        finals.append(row["final"])
    ids = [r.source_id for r in validated]
    return SnapshotLatents(torch.stack(starts), torch.stack(finals), ids, run.latents_generator)


def _export_items(run: RunDir, validated: list[SampleRecord]) -> Iterator[SnapshotItem]:
    """The validated samples as PNGs, with the per-sample metadata that goes into the snapshot, one at a time."""
    class_names = run.results.class_names
    tested = _tested_model(run)
    for s, row in _validated_rows(run, validated):
        label = int(row["labels"])
        meta = {
            "label": label,
            "class_name": class_names[label],
            "source_id": s.source_id,
            "tested_model": tested,
            "seed": run.results.seed,
            "steps": s.accepted_steps,
            "first_fooled": s.first_fooled,
            "oracle_score": s.oracle_score,
            "clean_pred": s.clean_pred,
            "tested_pred": s.final_pred,
        }
        yield SnapshotItem(encode_png(row["perturbed"].numpy()), encode_png(row["original"].numpy()), meta)


def _tested_model(run: RunDir) -> str:
    return str(run.results.components.get("classifier", ""))


def _export_manifest(run: RunDir, validated: list[SampleRecord], latents: SnapshotLatents | None) -> Manifest:
    r = run.results
    components = dict(r.components)
    sa = r.scores.estimates.get("sa")
    path = run.path.resolve()
    return Manifest(
        kind="export",
        name=path.name,
        created=now_utc(),
        tested_models=[_tested_model(run)],
        sources=[
            {
                "run_dir": str(path),
                "results_sha256": sha256_file(run.path / "results.json"),
                "components": components,
                "seed": r.seed,
            }
        ],
        class_names=list(r.class_names),
        image_shapes=_image_shapes(run, validated),
        versions=r.versions,
        latents=None if latents is None else {"file": LATENTS, "generator": latents.generator},
        counts={"run_samples": len(run.samples)},
        components=components,
        seed=r.seed,
        config=r.config.to_dict(),
        exported_with=package_versions(),
        run_scores=r.scores.to_dict(),
        full_sample_sa={} if sa is None else sa.to_dict(),
    )


def export_snapshot(
    run_dir: RunDir | str | Path,
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
    Both get ``manifest.json`` (config, versions, components, counts, sha256 of every file); exporting the
    same run again gives the same files. ``include_latents``: also ``latents.safetensors`` with the samples'
    start and final latents (snapshot order) so the images can be regenerated; needs ``save_latents=true``.
    The images are streamed from the run's parts one sample at a time, so peak memory does not grow with the
    number of samples (``benchmarks/scale_out.py export``); only ``include_latents`` holds the validated
    samples' latents in memory. Returns the snapshot directory.
    """
    check_format(format, shard_size)
    run = RunDir.of(run_dir)
    if not run.path.is_dir():
        raise FileNotFoundError(f"run directory '{run}' does not exist; pass the directory of a finished run.")
    validated = _validated(run)
    check_out_dir(out_dir, overwrite, [run.path])
    latents = _read_latents(run, validated) if include_latents else None
    return write_snapshot(
        out_dir,
        _export_items(run, validated),
        len(validated),
        _export_manifest(run, validated, latents),
        fmt=format,
        overwrite=overwrite,
        shard_size=shard_size,
        protect=[run.path],
        latents=latents,
    )


# --------------------------------------------------------------------------------------------- reading


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
    with open(root / METADATA, encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
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
        lines = [f"snapshot {self.path}: {'OK' if self.ok else 'FAILED'} ({self.checked} files checked)"]
        for what, items in (
            ("missing", self.missing),
            ("extra", self.extra),
            ("modified", self.modified),
            ("count mismatch", self.count_mismatch),
        ):
            if items:
                more = f", ... ({len(items) - limit} more)" if len(items) > limit else ""
                lines.append(f"  {what} ({len(items)}): {', '.join(items[:limit])}{more}")
        return "\n".join(lines)


def verify_snapshot(path: str | Path) -> VerifyReport:
    """Check every file's size and sha256, and every count, against ``manifest.json``."""
    root = Path(path).expanduser()
    manifest = Manifest.read(root)
    missing, modified = [], []
    for rel, info in manifest.files.items():
        p = root / rel
        if not p.is_file():
            missing.append(rel)
        elif p.stat().st_size != info.get("size") or sha256_file(p) != info.get("sha256"):
            modified.append(rel)
    extra = [rel for rel in _tree_files(root) if rel != MANIFEST and rel not in manifest.files]
    counts = _count_problems(root, manifest, set(missing) | set(modified))
    report = VerifyReport(str(root), len(manifest.files), missing, extra, modified, counts)
    log.log(logging.DEBUG if report.ok else logging.WARNING, "%s", report.summary())
    return report


def _count_problems(root: Path, manifest: Manifest, bad: set[str]) -> list[str]:
    """Counts that disagree with ``counts.samples``; files already found missing or modified are skipped."""
    n = manifest.counts.get("samples")
    if not isinstance(n, int):
        return ["manifest counts.samples is missing"]
    out = []

    def check(what: str, got: int) -> None:
        if got != n:
            out.append(f"{what}: {got} (manifest says {n} samples)")

    check("source_ids in manifest", len(manifest.source_ids))
    per_class = manifest.counts.get("per_class")
    if isinstance(per_class, dict):
        check("sum of per-class counts", sum(per_class.values()))
    if manifest.format == "imagefolder":
        pngs = [r for r in manifest.files if r.endswith(".png")]
        check("perturbed PNGs in manifest", sum(not r.startswith(f"{ORIGINALS}/") for r in pngs))
        check("original PNGs in manifest", sum(r.startswith(f"{ORIGINALS}/") for r in pngs))
        if (root / METADATA).is_file() and METADATA not in bad:
            check(f"rows in {METADATA}", len(_index_imagefolder(root)[0]))
        return out
    check("shard_lengths in manifest", sum(manifest.shard_lengths))
    for shard, length in zip(manifest.shards, manifest.shard_lengths, strict=False):
        if (root / shard).is_file() and shard not in bad:
            got = sum(1 for _ in wds_samples(root / shard))
            if got != length:
                out.append(f"samples in {shard}: {got} (manifest says {length})")
    return out


__all__ = [
    "FORMATS",
    "Manifest",
    "Snapshot",
    "SnapshotDataset",
    "SnapshotError",
    "SnapshotItem",
    "SnapshotLatents",
    "VerifyReport",
    "export_snapshot",
    "load_snapshot",
    "verify_snapshot",
    "write_snapshot",
]
