"""``geneval export|verify|score|transfer|filter``: the snapshot commands (genEval/snapshot.py).

Each ``run_*`` takes the Hydra ``DictConfig`` composed from ``conf/<command>.yaml``, prints a summary,
and exits with status 2 and a ``geneval <command>: error: ...`` line for user errors (``verify`` exits 1
when the snapshot does not match its manifest). Classifier lists (``targets``, ``surrogates``) name
files of ``conf/classifier/`` or give inline classifier config nodes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from genEval.cli import CONF_DIR, build


def _user_errors() -> tuple[type[BaseException], ...]:
    from genEval.cli import _user_errors as base

    return (*base(), FileExistsError, NotADirectoryError)


def _fail(cmd: str, err: BaseException) -> None:
    print(f"geneval {cmd}: error: {err}", file=sys.stderr)
    sys.exit(2)


def _hydra_output_dir() -> Path | None:
    """The Hydra run directory under ``@hydra.main``; None under ``compose`` (tests, notebooks)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return Path(HydraConfig.get().runtime.output_dir)
    except (ValueError, ImportError):
        return None


def _require(cfg: DictConfig, key: str, cmd: str, example: str) -> Any:
    value = cfg.get(key)
    if value is None or (isinstance(value, (ListConfig, DictConfig)) and len(value) == 0):
        raise ValueError(f"geneval {cmd} needs {key}=...; e.g. geneval {cmd} {example}")
    return value


def classifier_options() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "classifier").glob("*.yaml"))


def build_classifiers(cfg: DictConfig, key: str) -> dict[str, Any]:
    """``cfg[key]``: list of conf/classifier names, or mapping name -> conf/classifier name | config node."""
    spec = cfg.get(key)
    if spec is None or len(spec) == 0:
        raise ValueError(
            f"{key} is empty; list classifier configs, e.g. {key}=[cifar_resnet20,cifar_resnet32] "
            f"(available: {', '.join(classifier_options())})."
        )
    pairs = list(spec.items()) if isinstance(spec, DictConfig) else [(str(s), s) for s in spec]
    out: dict[str, Any] = {}
    for name, value in pairs:
        if isinstance(value, str):
            path = CONF_DIR / "classifier" / f"{value}.yaml"
            if not path.is_file():
                raise ValueError(
                    f"unknown classifier config {value!r} in {key}; available: {', '.join(classifier_options())}."
                )
            root = OmegaConf.create({"assets": cfg.get("assets"), "classifier": OmegaConf.load(path)})
            out[str(name)] = build(root.classifier, f"{key}.{name}")
        elif isinstance(value, DictConfig) and "_target_" in value:
            out[str(name)] = build(value, f"{key}.{name}")
        else:
            raise ValueError(
                f"{key}.{name} must name a conf/classifier config or be a node with _target_; got {value!r}."
            )
    return out


def run_export(cfg: DictConfig) -> Any:
    """``geneval export run=<run dir> [out=...] [format=imagefolder|webdataset]``."""
    from genEval.snapshot import export_snapshot, load_snapshot

    try:
        run = Path(_require(cfg, "run", "export", "run=outputs/2024-01-01/12-00-00"))
        out = cfg.get("out") or run / ("snapshot" if cfg.format == "imagefolder" else f"snapshot-{cfg.format}")
        path = export_snapshot(
            run,
            out,
            format=cfg.format,
            overwrite=cfg.overwrite,
            include_latents=cfg.include_latents,
            shard_size=cfg.shard_size,
        )
        snap = load_snapshot(path, lazy=True, verify=False)
    except _user_errors() as err:
        _fail("export", err)
    m = snap.manifest
    print(
        f"snapshot: {len(snap)} validated samples of {m['counts']['run_samples']} "
        f"from {run} ({m['format']})\n"
        f"  written to {path}\n  tested model: {', '.join(m['tested_models'])}\n"
        f"  check it:  geneval verify snapshot={path}\n  score it:  geneval score snapshot={path} classifier=<name>"
    )
    return str(path)


def run_verify(cfg: DictConfig) -> Any:
    """``geneval verify snapshot=<snapshot>``: exit 0 when every file and count matches the manifest, else 1."""
    from genEval.snapshot import verify_snapshot

    try:
        report = verify_snapshot(_require(cfg, "snapshot", "verify", "snapshot=outputs/.../snapshot"))
    except _user_errors() as err:
        _fail("verify", err)
    print(report.summary(limit=cfg.get("limit", 20)))
    if not report.ok:
        print(
            f"geneval verify: snapshot {report.path} does not match its manifest; export it again.",
            file=sys.stderr,
        )
        sys.exit(1)
    return report.ok


def run_score(cfg: DictConfig) -> Any:
    """``geneval score snapshot=<snapshot> classifier=<name>``: accuracy on the perturbed images and originals."""
    from genEval.results import atomic_write_json
    from genEval.snapshot import format_score, score_snapshot

    try:
        path = _require(cfg, "snapshot", "score", "snapshot=outputs/.../snapshot classifier=cifar_resnet32")
        classifier = build(cfg.classifier, "classifier")
        result = score_snapshot(path, classifier, batch_size=cfg.batch_size, device=cfg.device, interval=cfg.interval)
        out = Path(cfg.out) if cfg.get("out") else (d / "score.json" if (d := _hydra_output_dir()) else None)
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(out, {**result, "config": OmegaConf.to_container(cfg, resolve=True)})
    except _user_errors() as err:
        _fail("score", err)
    print(format_score(result) + (f"\n  written to {out}" if out else ""))
    return {"pa": result["pa"]["value"], "sa": result["sa"]["value"], "fmr": result["fmr"]}


def _snapshot_map(spec: Any) -> dict[str, str]:
    if isinstance(spec, DictConfig):
        return {str(k): str(v) for k, v in spec.items()}
    paths = [str(p) for p in spec]
    names = [Path(p).name for p in paths]
    if len(set(names)) != len(names):
        names = paths  # directory names collide: use the full paths as names
    return dict(zip(names, paths, strict=True))


def run_transfer(cfg: DictConfig) -> Any:
    """``geneval transfer snapshots='{r20: <dir>}' targets=[cifar_resnet20,...]`` (paper Table 6)."""
    from genEval.snapshot import format_transfer, transfer_matrix

    try:
        snaps = _snapshot_map(
            _require(
                cfg,
                "snapshots",
                "transfer",
                "snapshots='{cifar_resnet20: outputs/.../snapshot}' targets=[cifar_resnet20,cifar_resnet32]",
            )
        )
        classifiers = build_classifiers(cfg, "targets")
        out = Path(cfg.out) if cfg.get("out") else ((_hydra_output_dir() or Path(".")) / "transfer.csv")
        out.parent.mkdir(parents=True, exist_ok=True)
        rows = transfer_matrix(
            snaps,
            classifiers,
            out_csv=out,
            batch_size=cfg.batch_size,
            device=cfg.device,
            interval=cfg.interval,
            skip_filtering_models=cfg.skip_filtering_models,
        )
    except _user_errors() as err:
        _fail("transfer", err)
    print(format_transfer(rows) + f"\nwritten to {out}")
    return json.loads(json.dumps(rows))


def run_filter(cfg: DictConfig) -> Any:
    """``geneval filter snapshots=[<dir>,...] surrogates=[...] out=<dir>`` (ImageNet-A style filtration)."""
    from genEval.snapshot import filter_snapshots, load_snapshot

    try:
        srcs = _require(
            cfg,
            "snapshots",
            "filter",
            "snapshots=[outputs/.../snapshot] surrogates=[cifar_resnet20,cifar_resnet32] out=outputs/hard",
        )
        srcs = [str(srcs)] if isinstance(srcs, str) else [str(s) for s in srcs]
        out = _require(cfg, "out", "filter", "snapshots=[outputs/.../snapshot] out=outputs/hard")
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
            device=cfg.device,
            format=cfg.format,
            shard_size=cfg.shard_size,
        )
        snap = load_snapshot(path, lazy=True, verify=False)
    except _user_errors() as err:
        _fail("filter", err)
    c = snap.manifest["counts"]
    print(
        f"filtered {c['candidates']} samples from {len(srcs)} snapshot(s) with {', '.join(surrogates)}:\n"
        f"  {c['fooled_enough']} fool >= {snap.manifest['filter']['min_fooled']} surrogates, "
        f"{c['below_max_true_conf']} below max_true_conf, {c['samples']} kept after the per-pair cap\n"
        f"  written to {path}\n  report transfer on models NOT in filtered_with: "
        f"geneval transfer snapshots='{{hard: {path}}}' targets=[...]"
    )
    return str(path)
