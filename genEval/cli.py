"""``geneval``: the command line. Hydra composes ``conf/``; this file only dispatches and reports.

Commands: ``geneval [overrides]`` (the main job, ``conf/config.yaml``) and
``geneval train-generator [overrides]`` (``conf/train_generator.yaml``).
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

    from genEval.driver import evaluate
    from genEval.perturb import SearchConfig

    try:
        search = SearchConfig(**OmegaConf.to_container(cfg.search, resolve=True))
        data = build(cfg.data, "data")
        classifier = build(cfg.classifier, "classifier")
        generator = build(cfg.generator, "generator")
        oracle = build(cfg.oracle, "oracle")
        result = evaluate(
            classifier=classifier, data=data, generator=generator, oracle=oracle, search=search,
            seed=cfg.seed, batch_size=cfg.batch_size, device=cfg.device,
            output_dir=HydraConfig.get().runtime.output_dir, progress=cfg.progress,
            interval=cfg.interval, n_boot=cfg.n_boot, grid_size=cfg.grid_size,
            gap_warn_points=cfg.gap_warn_points, num_workers=cfg.num_workers, save_latents=cfg.save_latents,
            config=OmegaConf.to_container(cfg, resolve=True))
    except _user_errors() as err:
        print(f"geneval: error: {err}", file=sys.stderr)
        sys.exit(2)
    print(result.summary())
    return result.metrics


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


COMMANDS = {"evaluate": ("config", run_evaluate), "train-generator": ("train_generator", run_train_generator)}


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
