"""``geneval merge runs=[DIR,...] out=DIR``: combine the shards of one evaluation (genEval/runs/shards.py)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from genEval.commands import command, hydra_output_dir, require
from genEval.runs.shards import merge_runs


@command("merge", config="merge")
def run_merge(cfg: DictConfig) -> dict:
    runs = require(
        cfg,
        "runs",
        "merge",
        "runs=[outputs/run/shard-0-of-2,outputs/run/shard-1-of-2] out=outputs/merged (or runs=<a multirun directory>)",
    )
    runs = [str(runs)] if isinstance(runs, str) else [str(r) for r in runs]
    out = Path(cfg.out) if cfg.get("out") else hydra_output_dir()
    result = merge_runs(runs, out)
    print(result.summary())
    return result.metrics
