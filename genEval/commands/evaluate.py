"""``geneval [overrides]``: the main job (conf/config.yaml). Builds the roles, evaluates, prints the summary.

Sharding (``shard.index=I shard.count=N``): when not given, the shard is taken from the launcher's
environment (``RANK``/``WORLD_SIZE`` under torchrun, ``SLURM_PROCID``/``SLURM_NTASKS`` under Slurm), and the
CUDA device from ``LOCAL_RANK`` (``SLURM_LOCALID``) when ``device=auto``. A sharded run writes its own run
directory ``<run dir>/shard-I-of-N``, so shards that share a Hydra run directory never share files;
``geneval merge`` combines them.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from genEval.commands import (
    build,
    build_data,
    command,
    execution_from,
    hydra_output_dir,
    output_from,
    plain,
    scoring_from,
)
from genEval.commands.checks import check_run, choice
from genEval.commands.settings import Setting, check_node, check_settings
from genEval.commands.tracking import run_config, tracked
from genEval.runs.identity import Shard
from genEval.scores.intervals import INTERVALS
from genEval.search.driver import evaluate
from genEval.search.perturb import SearchConfig

#: The main job's own settings (conf/config.yaml), checked before anything is built.
SETTINGS = {
    "seed": Setting(int, "0", low=0, nullable=True, note="null draws a fresh seed and records it"),
    "interval": Setting(str, "wilson", choices=tuple(INTERVALS)),
    "n_boot": Setting(int, "1000", low=1),
    "grid_size": Setting(int, "8", low=0),
    "gap_warn_points": Setting(float, "10"),
    "oracle_warn_accuracy": Setting(float, "70", low=0, high=100, nullable=True),
    "progress": Setting(bool, "false", nullable=True),
    "log_interval": Setting(float, "30", above=0),
    "shard.index": Setting(int, "0", low=0, nullable=True),
    "shard.count": Setting(int, "4", low=1, nullable=True),
    "save_latents": Setting(bool, "true"),
    "save_images": Setting(bool, "true"),
    "ood_data": Setting(
        str, "/data/ood_images", nullable=True, note="a folder of images of classes outside the label set"
    ),
}

#: The component groups the main job builds.
ROLES_BUILT = ("mask", "classifier", "data", "generator", "oracle")

#: (index variable, count variable, local-rank variable) of the launchers genEval understands.
LAUNCHER_ENV = (("RANK", "WORLD_SIZE", "LOCAL_RANK"), ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"))


def shard_from(cfg: DictConfig, environ: dict[str, str] | None = None) -> tuple[Shard, int | None]:
    """The shard (config first, then the launcher's environment) and the local rank, if a launcher set one."""
    env = os.environ if environ is None else environ
    index, count = cfg.get("shard", {}).get("index"), cfg.get("shard", {}).get("count")
    local = None
    for idx_var, cnt_var, local_var in LAUNCHER_ENV:
        if idx_var in env and cnt_var in env:
            if index is None and count is None:
                index, count = int(env[idx_var]), int(env[cnt_var])
            local = int(env[local_var]) if local_var in env else None
            break
    if index is not None and count is not None and not int(index) < int(count):
        raise ValueError(
            f"shard.index must lie in 0..shard.count-1, got shard.index={index} with shard.count={count}; "
            f"e.g. shard.index=0 shard.count={count}."
        )
    if (index is None) != (count is None):
        raise ValueError(
            f"give both shard.index and shard.count (got index={index}, count={count}), "
            "e.g. shard.index=0 shard.count=4."
        )
    return Shard(int(index or 0), int(count or 1)), local


def ood_data_for(root: str | None, data: Any) -> Any:
    """The images of ``ood_data=<folder>`` (sub-folders are read as classes, none of them the data's), at the size and
    channels of the run's data (the first source's), or None when not given."""
    if root is None:
        return None
    x = data[0][0]
    node = {"_target_": "genEval.data.ImageFolderData", "root": root, "image_size": int(x.shape[-1]),
            "channels": int(x.shape[0]), "name": f"ood:{Path(root).name}"}  # fmt: skip
    return build(OmegaConf.create(node), "ood_data")  # the one image-folder reader (genEval/data/folders.py)


def device_for(device: str, local_rank: int | None) -> str:
    """``device=auto`` under a launcher picks ``cuda:<local rank>`` when CUDA is there."""
    if device == "auto" and local_rank is not None and torch.cuda.is_available():
        return f"cuda:{local_rank % torch.cuda.device_count()}"
    return device


@command(
    "evaluate",
    config="config",
    summary="evaluate one classifier: SA, RA, VR, PA and FMR with 95% intervals (the main job)",
)
def run_evaluate(cfg: DictConfig) -> dict[str, Any]:
    """Check the settings, build classifier, data (folders mapped onto the classifier's classes), generator,
    oracle and mask from their groups, and run ``genEval.evaluate``."""
    check_settings(cfg, SETTINGS)
    execution = execution_from(cfg)  # device, batch size, precision, compile...: checked once, here
    for role in ROLES_BUILT:  # every component's keys and types, before the first (maybe slow) one is built
        check_node(cfg[role], role)
    # the pieces against each other (classes, images, latents, assets, weights), still before anything is built
    check_run(cfg, classifiers={"classifier": cfg.classifier}, generators={"generator": cfg.generator})
    shard, local_rank = shard_from(cfg)
    execution = replace(execution, device=device_for(execution.device, local_rank))
    search = SearchConfig.coerce(plain(cfg.search))
    name = f"{choice(cfg, 'classifier')} on {choice(cfg, 'data')}" + (f" {shard.name}" if shard.count > 1 else "")
    with tracked(cfg, name, "geneval") as track:  # tracking=mlflow: reached before anything is built
        mask = build(cfg.mask, "mask")
        classifier = build(cfg.classifier, "classifier")
        data = build_data(cfg.data, classifier)
        generator = build(cfg.generator, "generator")
        oracle = build(cfg.oracle, "oracle")
        ood = ood_data_for(cfg.get("ood_data"), data)
        run_dir = hydra_output_dir()
        if run_dir is not None and shard.count > 1:
            run_dir = Path(run_dir) / shard.name
        result = evaluate(
            classifier=classifier,
            data=data,
            generator=generator,
            oracle=oracle,
            search=search,
            mask=mask,
            seed=cfg.seed,
            execution=execution,
            output=output_from(cfg, run_dir),
            scoring=scoring_from(cfg),
            shard=shard,
            config=run_config(cfg),
            ood=ood,
        )
        track.results(result.to_dict(), result.run_dir)
    print(result.summary())
    return result.metrics
