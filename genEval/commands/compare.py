"""``geneval compare [overrides]`` (conf/compare.yaml): run and compare classifiers, or aggregate ``runs=[...]``.

The path runs top-down: this module turns the config into objects (classifier factories from ``conf/classifier`` names,
data, generator, oracle, search, mask), calls :func:`genEval.comparisons.aggregate.compare` (or
:func:`genEval.comparisons.aggregate.aggregate` for existing runs), which writes the runs and the comparison files, then
writes ``report.html`` (:func:`genEval.reports.report.write_report`) and prints the leaderboard.

Fresh sources per repetition: the data are built once, and every data set of ``conf/data`` re-draws its ``data.limit``
subset from a seed (``with_seed``, ``data.subset=random``); :mod:`genEval.comparisons.repetitions` calls it with the
repetition's seed, shared by every model of that repetition. ``data.subset=first`` or a fixed
``data.subset_seed`` keeps the same sources in every repetition (the comparison then says so).
"""

from __future__ import annotations

from omegaconf import DictConfig

from genEval.commands import (
    build,
    classifier_factories,
    classifier_nodes,
    command,
    hydra_output_dir,
    plain,
)
from genEval.comparisons.aggregate import aggregate, compare
from genEval.comparisons.leaderboard import Comparison
from genEval.reports.report import write_report
from genEval.runs.shards import resolve_run_dir
from genEval.search.perturb import SearchConfig


def _run_models(cfg: DictConfig, **common) -> Comparison:
    """Evaluate every classifier of ``cfg.classifiers`` ``cfg.repetitions`` times, then compare them."""
    nodes = classifier_nodes(cfg, "classifiers")
    shared = {k: v for k, v in plain(cfg).items() if k not in ("classifiers", "hydra")}
    mask = build(cfg.mask, "mask") if cfg.get("mask") is not None else None
    return compare(
        classifier_factories(nodes, "classifiers"),
        build(cfg.data, "data"),
        build(cfg.generator, "generator"),
        build(cfg.oracle, "oracle"),
        SearchConfig.coerce(plain(cfg.search)),
        mask=mask,
        mask_reference=None if cfg.get("mask_reference") is None else str(cfg.mask_reference),
        repetitions=int(cfg.repetitions),
        seeds=list(cfg.seeds) if cfg.get("seeds") is not None else cfg.get("seed"),
        progress=cfg.get("progress"),
        run_configs={name: {**shared, "classifier": plain(node)} for name, node in nodes.items()},
        batch_size=cfg.batch_size,
        device=str(cfg.device),
        interval=str(cfg.interval),
        grid_size=int(cfg.grid_size),
        gap_warn_points=float(cfg.gap_warn_points),
        num_workers=int(cfg.num_workers),
        save_images=bool(cfg.save_images),
        save_latents=bool(cfg.save_latents),
        **common,
    )


@command("compare", config="compare")
def run_compare(cfg: DictConfig) -> str:
    out_dir = cfg.get("out_dir") or str(hydra_output_dir())
    baselines = None if cfg.get("baselines") is None else [str(b) for b in cfg.baselines]
    common = dict(out_dir=out_dir, baselines=baselines, er_min_r2=float(cfg.er_min_r2), n_boot=int(cfg.n_boot))
    if cfg.get("runs"):
        runs = cfg.runs
        runs = [runs] if isinstance(runs, str) else list(runs)
        comp = aggregate([str(resolve_run_dir(r)) for r in runs], **common)  # a sharded sweep: its merged run
    else:
        comp = _run_models(cfg, **common)
    if cfg.get("report", True):
        write_report(comp)
    print(comp.summary())
    return comp.out_dir
