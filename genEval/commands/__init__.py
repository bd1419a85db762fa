"""The command layer (STYLE.md "The house", layer 2): config in, objects built, library called, text out.

Every ``geneval`` command is a function ``run_<name>(cfg)`` in one module of this package, one module per
command group, registered with :func:`command`. This is the only layer that sees a Hydra ``DictConfig``,
prints, or chooses an exit code; the library below takes objects and returns data.

* :func:`command` wraps a command once: user errors (a bad value, a missing file) become one line
  ``geneval <command>: error: <message>`` on stderr and exit status 2, never a traceback.
* :func:`build` is the one instantiation helper (Hydra ``instantiate``, with the user's error unwrapped).
* :func:`build_classifiers` turns a list or mapping of ``conf/classifier`` names into classifier factories.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf

from genEval.search.perturb import NonFiniteError

#: The Hydra configs travel inside the package (a wheel carries them); ``conf/`` at the top of a checkout is a
#: link to this folder, where users and docs look for them.
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
log = logging.getLogger("genEval")

#: Exceptions that mean "the user asked for something that cannot work": message, exit 2.
USER_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    FileNotFoundError,
    FileExistsError,
    NotADirectoryError,
    PermissionError,
    NonFiniteError,
)

#: Command name -> (config name in conf/, function); filled by :func:`command`.
REGISTRY: dict[str, tuple[str, Callable[[DictConfig], Any]]] = {}


def command(name: str, config: str) -> Callable[[Callable[[DictConfig], Any]], Callable[[DictConfig], Any]]:
    """Register ``fn`` as ``geneval <name>`` (composing ``conf/<config>.yaml``) and give it the one error
    policy: a user error prints ``geneval <name>: error: ...`` and exits with status 2."""
    prog = "geneval" if name == "evaluate" else f"geneval {name}"

    def wrap(fn: Callable[[DictConfig], Any]) -> Callable[[DictConfig], Any]:
        @functools.wraps(fn)
        def run(cfg: DictConfig) -> Any:
            try:
                use_assets(cfg)
                return fn(cfg)
            except USER_ERRORS as err:
                print(f"{prog}: error: {err}", file=sys.stderr)
                sys.exit(2)

        REGISTRY[name] = (config, run)
        return run

    return wrap


def use_assets(cfg: DictConfig) -> None:
    """``assets=<folder>`` on the command line: where ``asset:<path>`` files are looked for first in this
    process and the ones it starts (:mod:`genEval.assets` reads ``GENEVAL_ASSETS``)."""
    folder = cfg.get("assets") if isinstance(cfg, DictConfig) else None
    if folder:
        os.environ["GENEVAL_ASSETS"] = str(Path(str(folder)).expanduser())


def build(cfg: DictConfig, role: str, **kwargs: Any) -> Any:
    """Instantiate one component from its config node (the single instantiation helper).

    Hydra wraps errors raised while building; the user-facing ones are unwrapped so that the message
    naming the bad value reaches the user first, prefixed with the role being built.
    """
    try:
        return instantiate(cfg, _convert_="partial", **kwargs)
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, (*USER_ERRORS, KeyError, RuntimeError)):
            raise type(cause)(f"while building {role}: {cause}") from err
        raise


def plain(cfg: Any) -> Any:
    """A resolved plain-Python copy of a config node (dicts and lists), for the library and for records."""
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, (DictConfig, ListConfig)) else cfg


def hydra_output_dir() -> Path | None:
    """The Hydra run directory under ``@hydra.main``; None under ``compose`` (tests, notebooks)."""
    from hydra.core.hydra_config import HydraConfig

    try:
        return Path(HydraConfig.get().runtime.output_dir)
    except ValueError:
        return None


def require(cfg: DictConfig, key: str, cmd: str, example: str) -> Any:
    """``cfg[key]``, or a teaching error when it is missing or empty."""
    value = cfg.get(key) if not OmegaConf.is_missing(cfg, key) else None
    if value is None or (isinstance(value, (ListConfig, DictConfig)) and len(value) == 0):
        raise ValueError(f"geneval {cmd} needs {key}=...; e.g. geneval {cmd} {example}")
    return value


def config_options(group: str) -> list[str]:
    """The option names of a config group (``conf/<group>/*.yaml``)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def classifier_nodes(cfg: DictConfig, key: str) -> dict[str, DictConfig]:
    """``cfg[key]``: a list of ``conf/classifier`` names, or a mapping name -> such a name or a config node
    with ``_target_``. Returns name -> config node; names are composed from the group's files, with the
    run's ``assets`` path for interpolation (so ``classifiers=[cifar_resnet20,cifar_resnet32]`` works).
    """
    spec = cfg.get(key)
    available = config_options("classifier")
    if spec is None or len(spec) == 0:
        raise ValueError(
            f"{key} is empty; list classifier configs, e.g. {key}=[cifar_resnet20,cifar_resnet32] "
            f"(available: {', '.join(available)})."
        )
    if isinstance(spec, str):
        spec = ListConfig([spec])
    pairs = list(spec.items()) if isinstance(spec, DictConfig) else [(str(s), s) for s in spec]
    nodes: dict[str, DictConfig] = {}
    for name, value in pairs:
        if str(name) in nodes:
            raise ValueError(f"{key} names {name!r} twice; give each classifier once.")
        if isinstance(value, str):
            if value not in available:
                raise ValueError(
                    f"unknown classifier config {value!r} in {key}; available: {', '.join(available)} "
                    "(or give a mapping name -> config with _target_)."
                )
            root = OmegaConf.create(
                {"assets": cfg.get("assets"), "classifier": OmegaConf.load(CONF_DIR / "classifier" / f"{value}.yaml")}
            )
            nodes[str(name)] = root.classifier
        elif isinstance(value, DictConfig) and "_target_" in value:
            nodes[str(name)] = value
        else:
            raise ValueError(
                f"{key}.{name} must name a conf/classifier config ({', '.join(available)}) or be a "
                f"config with _target_; got {value!r}."
            )
    return nodes


def classifier_factories(nodes: dict[str, DictConfig], key: str) -> dict[str, Callable[[], Any]]:
    """name -> zero-argument factory building that classifier when called (one model in memory at a time)."""
    return {name: functools.partial(build, node, f"{key}.{name}") for name, node in nodes.items()}
