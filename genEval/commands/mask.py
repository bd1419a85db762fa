"""``geneval fit-mask run=<run dir>``: fit a sparse style mask from a run saved with ``save_latents=true``."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from genEval.commands import command, plain, require
from genEval.masks import AUTO, AUTO_C, fit_mask_from_run, plot_style_mask
from genEval.runs.shards import resolve_run_dir

FIT_KEYS = ("C", "solver", "target_sparsity", "target_score", "test_fraction", "max_iter", "seed")


@command("fit-mask")
def run_fit_mask(cfg: DictConfig) -> str:
    run = resolve_run_dir(
        require(cfg, "run", "fit-mask", "run=<directory of a finished run made with save_latents=true>")
    )
    opts = plain(cfg)
    m = fit_mask_from_run(run, **{k: opts[k] for k in FIT_KEYS if k in opts})
    out = Path(cfg.out) if cfg.get("out") else Path(run) / "style_mask.safetensors"
    m.save(out)
    plot_style_mask(m, out.with_suffix(".png"))
    chosen = ""
    if str(opts.get("C")) == AUTO and m.C != AUTO_C:
        chosen = f" (chosen automatically: C={AUTO_C:g} selected no dim on these {m.n_samples} samples)"
    print(
        f"{m!r}\nsparsity {m.sparsity:.2f}% zero dims, held-out accuracy {m.heldout_accuracy:.1f}%, "
        f"C={m.C:.4g}{chosen}\n"
        f"mask written to {out} (plot: {out.with_suffix('.png')})\nuse it with: geneval mask=sparse mask.path={out}"
    )
    return str(out)
