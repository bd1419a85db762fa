"""A finished run (made with ``save_images=true``) as a static benchmark snapshot (paper App. O): its *validated*
perturbed images as lossless PNGs, the matching originals, per-sample metadata and a manifest recording the run's
config, versions, components and counts (:func:`export_snapshot`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor

from genEval.fileio import sha256_file
from genEval.runs.identity import package_versions
from genEval.runs.parts import IMAGES
from genEval.runs.parts import LATENTS as LATENT_PARTS
from genEval.runs.reader import RunDir
from genEval.scores.outcomes import SampleRecord
from genEval.snapshots.manifest import (
    LATENTS,
    Manifest,
    SnapshotError,
    encode_png,
    now_utc,
)
from genEval.snapshots.writer import SnapshotItem, SnapshotLatents, check_format, check_out_dir, write_snapshot


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
