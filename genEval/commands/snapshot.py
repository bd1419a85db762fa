"""``geneval export|verify|score|transfer|filter``: the snapshot commands.

Library: genEval/snapshots/export.py, verify.py, genEval/snapshots/scoring.py (score, transfer),
genEval/snapshots/filtration.py (filter). ``device=auto`` is resolved here into a torch device.

Each ``run_*`` takes the config composed from ``conf/<command>.yaml`` and prints a summary; ``verify`` exits
1 when the snapshot does not match its manifest. Classifier lists (``targets``, ``surrogates``) name files of
``conf/classifier/`` or give inline classifier config nodes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from genEval.commands import build, classifier_factories, classifier_nodes, command, hydra_output_dir, plain, require
from genEval.commands.bundles import bundle
from genEval.commands.checks import check_snapshot_classes, choice
from genEval.fileio import atomic_write_json
from genEval.runs.shards import resolve_run_dir
from genEval.search.execution import resolve_device
from genEval.snapshots.export import export_snapshot
from genEval.snapshots.filtration import filter_snapshots
from genEval.snapshots.manifest import Manifest
from genEval.snapshots.scoring import format_transfer, score_snapshot, transfer_matrix
from genEval.snapshots.verify import verify_snapshot


def build_classifiers(cfg: DictConfig, key: str) -> dict[str, Any]:
    """The classifiers listed under ``key``; with ``protocol=`` (e.g. imagenet_a_200) each one's logits restricted to
    the protocol's classes (genEval/classifiers/subset.py)."""
    built = {name: make() for name, make in classifier_factories(classifier_nodes(cfg, key), key).items()}
    if cfg.get("protocol") is None:
        return built
    protocol = build(cfg.protocol, "protocol")
    return {name: protocol.wrap(clf) for name, clf in built.items()}


@command("export")
def run_export(cfg: DictConfig) -> Any:
    """``geneval export run=<run dir> [out=...] [format=imagefolder|webdataset]``."""
    run = resolve_run_dir(require(cfg, "run", "export", "runs/a (the run directory)"))  # a sweep: its merged/
    out = cfg.get("out") or run / ("snapshot" if cfg.format == "imagefolder" else f"snapshot-{cfg.format}")
    path = export_snapshot(
        run,
        out,
        format=cfg.format,
        overwrite=cfg.overwrite,
        include_latents=cfg.include_latents,
        shard_size=cfg.shard_size,
    )
    m = Manifest.read(path)
    print(
        f"snapshot: {m.samples} validated samples of {m.counts['run_samples']} from {run} ({m.format})\n"
        f"  written to {path}\n  tested model: {', '.join(m.tested_models)}\n"
        f"next:\n  geneval verify {path}                      (check every file against the manifest)\n"
        f"  geneval score {path} classifier=<name>     (score any classifier on it)"
    )
    return str(path)


@command("verify")
def run_verify(cfg: DictConfig) -> Any:
    """``geneval verify snapshot=<snapshot>``: exit 0 when every file and count matches the manifest, else 1."""
    report = verify_snapshot(require(cfg, "snapshot", "verify", "runs/a/snapshot (the snapshot directory)"))
    print(report.summary(limit=cfg.get("limit", 20)))
    if not report.ok:
        print(
            f"geneval verify: snapshot {report.path} does not match its manifest; export it again.",
            file=sys.stderr,
        )
        sys.exit(1)
    return report.ok


def check_score(cfg: DictConfig) -> None:
    """``geneval score``'s checks before the classifier is built: the snapshot exists and the classifier was trained
    on the snapshot's classes (as ``geneval`` checks its classifier against the data)."""
    path = require(cfg, "snapshot", "score", "snapshot=runs/a/snapshot classifier=cifar_resnet32")
    check_snapshot_classes(cfg, "classifier", Manifest.read(path).class_names, str(path))


def score_path(cfg: DictConfig) -> Path:
    """Where ``geneval score`` writes its JSON: ``out=``, else beside the snapshot,
    ``<snapshot>.score-<classifier>.json`` (one file per classifier scored; the snapshot itself stays as its manifest
    lists it)."""
    if cfg.get("out"):
        return Path(cfg.out)
    snapshot = Path(str(cfg.snapshot)).expanduser()
    return snapshot.parent / f"{snapshot.name}.score-{choice(cfg, 'classifier')}.json"


@command("score", check=check_score)
def run_score(cfg: DictConfig) -> Any:
    """``geneval score <snapshot> classifier=<name>``: accuracy on the perturbed images and originals."""
    check_score(cfg)
    path = str(cfg.snapshot)
    classifier = build(cfg.classifier, "classifier")
    result = score_snapshot(
        path,
        classifier,
        batch_size=cfg.batch_size,
        device=resolve_device(cfg.device),
        interval=bundle(cfg, "scoring").interval,
    )
    out = score_path(cfg)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out, {**result.to_dict(), "config": plain(cfg)})
    print(result.summary() + f"\n  written to {out}")
    return {"pa": result.pa.value, "sa": result.sa.value, "fmr": result.fmr}


def _snapshot_map(spec: Any) -> dict[str, str]:
    if isinstance(spec, DictConfig):
        return {str(k): str(v) for k, v in spec.items()}
    paths = [str(p) for p in spec]
    names = [Path(p).name for p in paths]
    if len(set(names)) != len(names):
        names = paths  # directory names collide: use the full paths as names
    return dict(zip(names, paths, strict=True))


@command("transfer")
def run_transfer(cfg: DictConfig) -> Any:
    """``geneval transfer snapshots='{r20: <dir>}' targets=[cifar_resnet20,...]`` (paper Table 6)."""
    snaps = _snapshot_map(
        require(
            cfg,
            "snapshots",
            "transfer",
            "snapshots='{cifar_resnet20: outputs/.../snapshot}' targets=[cifar_resnet20,cifar_resnet32]",
        )
    )
    classifiers = build_classifiers(cfg, "targets")
    out = Path(cfg.out) if cfg.get("out") else ((hydra_output_dir() or Path(".")) / "transfer.csv")
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = transfer_matrix(
        snaps,
        classifiers,
        out_csv=out,
        batch_size=cfg.batch_size,
        device=resolve_device(cfg.device),
        interval=bundle(cfg, "scoring").interval,
        skip_filtering_models=cfg.skip_filtering_models,
    )
    print(format_transfer(rows) + f"\nwritten to {out}")
    return [r.to_dict() for r in rows]


@command("filter")
def run_filter(cfg: DictConfig) -> Any:
    """``geneval filter snapshots=[<dir>,...] surrogates=[...] out=<dir>`` (ImageNet-A style filtration)."""
    srcs = require(
        cfg,
        "snapshots",
        "filter",
        "snapshots=[outputs/.../snapshot] surrogates=[cifar_resnet20,cifar_resnet32] out=outputs/hard",
    )
    srcs = [str(srcs)] if isinstance(srcs, str) else [str(s) for s in srcs]
    out = require(cfg, "out", "filter", "snapshots=[outputs/.../snapshot] out=outputs/hard")
    surrogates = build_classifiers(cfg, "surrogates")
    path = filter_snapshots(
        srcs,
        surrogates,
        out,
        min_fooled=cfg.min_fooled,
        max_true_conf=cfg.max_true_conf,
        max_per_pair=cfg.max_per_pair,
        overwrite=cfg.overwrite,
        batch_size=cfg.batch_size,
        device=resolve_device(cfg.device),
        format=cfg.format,
        shard_size=cfg.shard_size,
        rule=cfg.get("rule", "mean"),
        ten_crop=cfg.get("ten_crop"),
    )
    m = Manifest.read(path)
    c = m.counts
    f = m.filter
    crops = f", {c['no_crop_right']} with no crop right (10-crop)" if f.get("ten_crop") else ""
    print(
        f"filtered {c['candidates']} samples from {len(srcs)} snapshot(s) with {', '.join(surrogates)} "
        f"(rule={f.get('rule', 'mean')}):\n"
        f"  {c['fooled_enough']} fool >= {f['min_fooled']} surrogates, "
        f"{c['below_max_true_conf']} below max_true_conf={f['max_true_conf']} ({f['true_conf']}){crops}, "
        f"{c['samples']} kept after the per-pair cap ({f['max_per_pair']})\n"
        f"  written to {path}\n  report transfer on models NOT in filtered_with: "
        f"geneval transfer snapshots='{{hard: {path}}}' targets=[...]"
    )
    return str(path)
