"""``geneval train-generator``: train a small VQ autoencoder on any supported dataset (conf/train_generator.yaml).

The training function arrives through config (the ``trainer`` node, ``_target_`` into ``generators/``), so
this command never names a backend.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from genEval.commands import build, command, hydra_output_dir
from genEval.interfaces import hook


@command("train-generator")
def run_train_generator(cfg: DictConfig) -> Any:
    """Build the data (and held-out data), call the configured trainer, print where the checkpoint went."""
    out_dir = cfg.get("out_dir") or hydra_output_dir()
    if out_dir is None:
        raise ValueError("geneval train-generator needs out_dir=...; e.g. geneval train-generator out_dir=runs/my-vq")
    train = build(cfg.trainer, "trainer")
    data = build(cfg.data, "data")
    held_out = build(cfg.held_out, "held_out data") if cfg.get("held_out") else None
    report = train(data, held_out, out_dir=str(out_dir))
    print(
        f"trained VQ generator on {hook(data, 'name') or data}: {report.epochs} epochs (resumed at "
        f"{report.start_epoch}), held-out PSNR {report.psnr:.2f} dB (quantized {report.psnr_quantized:.2f} dB)\n"
        f"checkpoint: {report.checkpoint}\n"
        f"use it with: geneval generator=trained_vq generator.checkpoint_path={report.checkpoint}"
    )
    return report
