"""``geneval train-generator``: train a small taming-architecture VQ autoencoder on any supported dataset."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from genEval.commands import build, command, hydra_output_dir, plain
from genEval.train_generator import main_train_generator


@command("train-generator", config="train_generator")
def run_train_generator(cfg: DictConfig) -> Any:
    params = plain(cfg)
    params["data"] = build(cfg.data, "data")
    params["held_out"] = build(cfg.held_out, "held_out data") if cfg.get("held_out") else None
    params["out_dir"] = cfg.get("out_dir") or str(hydra_output_dir())
    report = main_train_generator(params)
    print(report)
    return report
