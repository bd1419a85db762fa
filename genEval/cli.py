"""``geneval``: the command line. Hydra composes ``conf/``; this file only dispatches and reports.

Commands (each composes ``conf/<command>.yaml``): ``geneval [overrides]`` (the main job,
``conf/config.yaml``), ``train-generator``, ``fit-mask run=<run dir>``, ``export run=<run dir>``,
``verify snapshot=<dir>``, ``score snapshot=<dir> classifier=<name>``, ``transfer``, ``filter``,
``compare`` and ``report input=<dir>``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = ROOT / "conf"
log = logging.getLogger("genEval")

if not OmegaConf.has_resolver("geneval_root"):
    OmegaConf.register_new_resolver("geneval_root", lambda: str(ROOT))


def build(cfg: DictConfig, role: str, **kwargs: Any) -> Any:
    """Instantiate one component from its config (the single instantiation helper).

    Hydra wraps errors raised while building; unwrap the user-facing ones so the message that
    names the bad value reaches the user first.
    """
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(cfg, _convert_="partial", **kwargs)
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, (ValueError, FileNotFoundError, PermissionError, KeyError, RuntimeError)):
            raise type(cause)(f"while building {role}: {cause}") from err
        raise


def _user_errors() -> tuple[type[BaseException], ...]:
    from genEval.perturb import NonFiniteError

    return (ValueError, FileNotFoundError, PermissionError, NonFiniteError)


def run_evaluate(cfg: DictConfig) -> Any:
    """The main job: build the four roles, evaluate, print the summary."""
    from hydra.core.hydra_config import HydraConfig

    from genEval.perturb import SearchConfig

    try:
        search = SearchConfig(**OmegaConf.to_container(cfg.search, resolve=True))
        data = build(cfg.data, "data")
        classifier = build(cfg.classifier, "classifier")
        generator = build(cfg.generator, "generator")
        oracle = build(cfg.oracle, "oracle")
        kwargs = dict(
            seed=cfg.seed, batch_size=cfg.batch_size, device=cfg.device,
            output_dir=HydraConfig.get().runtime.output_dir, progress=cfg.progress,
            interval=cfg.interval, n_boot=cfg.n_boot, grid_size=cfg.grid_size,
            gap_warn_points=cfg.gap_warn_points, num_workers=cfg.num_workers, save_latents=cfg.save_latents,
            save_images=cfg.save_images,
            config=OmegaConf.to_container(cfg, resolve=True))
        result = _evaluate_with_mask(cfg.mask, classifier, data, generator, oracle, search, kwargs)
    except _user_errors() as err:
        print(f"geneval: error: {err}", file=sys.stderr)
        sys.exit(2)
    print(result.summary())
    return result.metrics


MASK_MODES = ("none", "sparse", "auto")


def _evaluate_with_mask(mask_cfg: DictConfig, classifier, data, generator, oracle, search, kwargs):
    """``mask=none`` (all latent dims move), ``mask=sparse mask.path=...`` or ``mask=auto`` (paper 3.2.1)."""
    from genEval import style_mask
    from genEval.driver import evaluate

    mode = mask_cfg.get("mode", "none")
    if mode not in MASK_MODES:
        raise ValueError(f"unknown mask.mode={mode!r}; choose one of {', '.join(MASK_MODES)} (mask=none|sparse|auto).")
    if mode == "none":
        return evaluate(classifier=classifier, data=data, generator=generator, oracle=oracle, search=search, **kwargs)
    if mode == "sparse":
        m = style_mask.load_mask_for_run(mask_cfg.path, generator, data)
        return evaluate(classifier=classifier, data=data, generator=generator, oracle=oracle, search=search,
                        mask=m.as_tensor(), mask_id=f"{mask_cfg.path}#{m.sha256[:16]}", **kwargs)
    opts = OmegaConf.to_container(mask_cfg, resolve=True)
    fit_kwargs = {k: opts[k] for k in ("C", "solver", "target_sparsity", "target_score", "test_fraction",
                                       "max_iter") if k in opts}
    output_dir, seed = kwargs.pop("output_dir"), kwargs.pop("seed")
    return style_mask.evaluate_with_auto_mask(
        classifier, data, generator, oracle, search, output_dir=output_dir, seed=seed,
        fit_fraction=opts.get("fit_fraction", 0.2), fit_budget=opts.get("fit_budget"), fit_kwargs=fit_kwargs,
        **kwargs)


def run_fit_mask(cfg: DictConfig) -> Any:
    """``geneval fit-mask run=<run dir>``: fit a sparse style mask from a run saved with save_latents=true."""
    from pathlib import Path

    from genEval import style_mask

    try:
        if cfg.get("run") is None:
            raise ValueError("geneval fit-mask needs run=<directory of a finished run made with save_latents=true>.")
        opts = OmegaConf.to_container(cfg, resolve=True)
        fit_kwargs = {k: opts[k] for k in ("C", "solver", "target_sparsity", "target_score", "test_fraction",
                                           "max_iter", "seed") if k in opts}
        m = style_mask.fit_mask_from_run(cfg.run, **fit_kwargs)
        out = Path(cfg.out) if cfg.get("out") else Path(cfg.run) / "style_mask.safetensors"
        m.save(out)
        style_mask.plot_style_mask(m, out.with_suffix(".png"))
    except _user_errors() as err:
        print(f"geneval fit-mask: error: {err}", file=sys.stderr)
        sys.exit(2)
    print(f"{m!r}\nsparsity {m.sparsity:.2f}% zero dims, held-out accuracy {m.heldout_accuracy:.1f}%, C={m.C}\n"
          f"mask written to {out} (plot: {out.with_suffix('.png')})\nuse it with: geneval mask=sparse mask.path={out}")
    return str(out)


def run_train_generator(cfg: DictConfig) -> Any:
    """Train a small taming-architecture VQ autoencoder on any supported dataset."""
    from hydra.core.hydra_config import HydraConfig

    from genEval.train_generator import main_train_generator

    try:
        params = OmegaConf.to_container(cfg, resolve=True)
        params["data"] = build(cfg.data, "data")
        params["held_out"] = build(cfg.held_out, "held_out data") if cfg.get("held_out") else None
        params["out_dir"] = cfg.get("out_dir") or HydraConfig.get().runtime.output_dir
        report = main_train_generator(params)
    except _user_errors() as err:
        print(f"geneval train-generator: error: {err}", file=sys.stderr)
        sys.exit(2)
    print(report)
    return report


def _lazy_command(module: str, name: str):
    """Commands implemented in other modules, imported only when used."""

    def run(cfg: DictConfig) -> Any:
        import importlib

        return getattr(importlib.import_module(module), f"run_{name}")(cfg)

    run.__name__ = f"run_{name}"
    return run


COMMANDS = {
    "evaluate": ("config", run_evaluate),
    "train-generator": ("train_generator", run_train_generator),
    "fit-mask": ("fit_mask", run_fit_mask),
    **{name: (name, _lazy_command("genEval.snapshot_cli", name))
       for name in ("export", "verify", "score", "transfer", "filter")},
    "compare": ("compare", _lazy_command("genEval.compare", "compare")),
    "report": ("report", _lazy_command("genEval.report", "report")),
}


def main(argv: list[str] | None = None) -> None:
    import hydra

    args = list(sys.argv[1:] if argv is None else argv)
    cmd = "evaluate"
    if args and args[0] in COMMANDS:
        cmd = args.pop(0)
    elif args and not args[0].startswith("-") and "=" not in args[0]:
        print(f"geneval: unknown command {args[0]!r}; commands: {', '.join(COMMANDS)} "
              "(or Hydra overrides such as data=cifar10_jpg).", file=sys.stderr)
        sys.exit(2)
    config_name, fn = COMMANDS[cmd]
    sys.argv = [f"geneval {cmd}" if cmd != "evaluate" else "geneval", *args]
    hydra.main(config_path=str(CONF_DIR), config_name=config_name, version_base="1.3")(fn)()


if __name__ == "__main__":
    main()
