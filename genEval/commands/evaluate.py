"""``geneval [overrides]``: the main job (conf/config.yaml). Builds the roles, evaluates, prints the summary."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from genEval.commands import build, command, hydra_output_dir, plain
from genEval.driver import evaluate
from genEval.perturb import SearchConfig


@command("evaluate", config="config")
def run_evaluate(cfg: DictConfig) -> dict[str, Any]:
    """Build data, classifier, generator, oracle and mask from their groups and run ``genEval.evaluate``."""
    search = SearchConfig.coerce(plain(cfg.search))
    mask = build(cfg.mask, "mask")
    data = build(cfg.data, "data")
    classifier = build(cfg.classifier, "classifier")
    generator = build(cfg.generator, "generator")
    oracle = build(cfg.oracle, "oracle")
    result = evaluate(
        classifier=classifier, data=data, generator=generator, oracle=oracle, search=search, mask=mask,
        seed=cfg.seed, batch_size=cfg.batch_size, device=cfg.device, output_dir=hydra_output_dir(),
        progress=cfg.progress, interval=cfg.interval, n_boot=cfg.n_boot, grid_size=cfg.grid_size,
        gap_warn_points=cfg.gap_warn_points, num_workers=cfg.num_workers, save_latents=cfg.save_latents,
        save_images=cfg.save_images, config=plain(cfg))
    print(result.summary())
    return result.metrics
