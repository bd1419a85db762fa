"""``geneval merge runs=[DIR,...] [out=DIR]``: combine the shards of one evaluation (genEval/runs/shards.py); without
``out=`` into ``merged/`` beside the shards (no ``outputs/`` folder: merge makes no Hydra run directory).

:class:`MergeShards` is the Hydra callback (registered under ``hydra.callbacks`` in ``conf/config.yaml``) that does the
same by itself at the end of a multirun over shards: ``geneval -m shard.count=N 'shard.index=range(N)' ...`` leaves
``<sweep dir>/merged`` next to the shards.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from genEval.commands import USER_ERRORS, command, require
from genEval.commands.evaluate import summary_lines
from genEval.runs.shards import MERGED, merge_runs, merge_sweep


@command("merge")
def run_merge(cfg: DictConfig) -> dict:
    runs = require(
        cfg,
        "runs",
        "merge",
        "runs=[outputs/run/shard-0-of-2,outputs/run/shard-1-of-2] out=outputs/merged (or runs=<a multirun directory>)",
    )
    runs = [str(runs)] if isinstance(runs, str) else [str(r) for r in runs]
    out = Path(cfg.out) if cfg.get("out") else merged_dir(runs)
    result = merge_runs(runs, out)
    print("\n".join(summary_lines(result)))
    return result.metrics


def merged_dir(runs: list[str]) -> Path:
    """Where ``geneval merge`` writes without ``out=``: ``<the folder holding the shards>/merged`` (a multirun
    directory given as such: inside it, as a multirun merges itself)."""
    if len(runs) == 1:
        return Path(runs[0]).expanduser() / MERGED
    return Path(os.path.commonpath([str(Path(r).expanduser().resolve()) for r in runs])) / MERGED


class MergeShards(Callback):
    """At the end of a multirun, merge the shards it wrote into ``<hydra.sweep.dir>/merged`` and print the summary.

    Runs on the machine that launched the sweep (Hydra calls ``on_multirun_end`` there after every job returned,
    for the basic, joblib, submitit and Ray launchers alike). A multirun without shards is left alone. When the
    shards cannot be merged (one failed, or they are of different evaluations) the error is printed with the
    ``geneval merge`` command to run after fixing it, and the multirun exits with status 2.
    """

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = Path(str(config.hydra.sweep.dir))
        try:
            merged = merge_sweep(sweep)
        except USER_ERRORS as err:
            print(
                f"geneval: error: the shards under {sweep} were not merged: {err} When they are complete: "
                f"geneval merge runs={sweep} out={sweep / MERGED}",
                file=sys.stderr,
            )
            sys.exit(2)
        for out, result in merged:
            print("\n".join([*summary_lines(result), f"merged the shards of {sweep} into {out}"]))
