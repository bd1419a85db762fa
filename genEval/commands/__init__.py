"""The command layer (STYLE.md "The house", layer 2): config in, objects built, library called, text out.

Every ``geneval`` command is a function ``run_<name>(cfg)`` in one module of this package, one module per
command group, registered with :func:`command`. This is the only layer that sees a Hydra ``DictConfig``,
prints, or chooses an exit code; the library below takes objects and returns data.

* :func:`command` wraps a command once: user errors (a bad value, a missing file) become one line
  ``geneval <command>: error: <message>`` on stderr and exit status 2, never a traceback.
* :func:`build` is the one instantiation helper (Hydra ``instantiate``, with the user's error unwrapped).
* :func:`config_nodes` (:func:`classifier_nodes`) turns a list or mapping of config names into config nodes,
  finding the names on Hydra's search path like ``geneval classifier=<name>`` does; :func:`classifier_factories`
  makes them factories.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from genEval.search.perturb import NonFiniteError

ROOT = Path(__file__).resolve().parents[2]
#: The Hydra configs travel inside the package (a wheel carries them); ``conf/`` at the top of a checkout is a
#: link to this folder, where users and docs look for them.
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
log = logging.getLogger("genEval")

if not OmegaConf.has_resolver("geneval_root"):
    OmegaConf.register_new_resolver("geneval_root", lambda: str(ROOT))

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
                return fn(cfg)
            except USER_ERRORS as err:
                print(f"{prog}: error: {err}", file=sys.stderr)
                sys.exit(2)

        REGISTRY[name] = (config, run)
        return run

    return wrap


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
    """The option names of a config group shipped with the package (``conf/<group>/*.yaml``)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def searchpath(cfg: DictConfig | None = None) -> list[str]:
    """The ``hydra.searchpath`` in effect: the running Hydra app's (``hydra.searchpath=[file://...]`` on the
    command line or in the primary config), else ``cfg.hydra.searchpath`` (``compose(..., return_hydra_config=True)``),
    else none."""
    try:
        found = HydraConfig.get().searchpath
    except ValueError:
        found = OmegaConf.select(cfg, "hydra.searchpath", default=None) if cfg is not None else None
    return [str(p) for p in (found or [])]


@contextlib.contextmanager
def _hydra_ready() -> Iterator[None]:
    """Hydra's compose API ready: the running app's (inside ``@hydra.main`` or ``initialize*``), else this package's
    configs for the duration of the block."""
    if GlobalHydra.instance().is_initialized():
        yield
        return
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


def _searchpath_override(paths: list[str]) -> list[str]:
    if not paths:
        return []
    quoted = ",".join("'" + p.replace("\\", "\\\\").replace("'", "\\'") + "'" for p in paths)
    return [f"hydra.searchpath=[{quoted}]"]


def group_options(group: str, paths: list[str]) -> list[str]:
    """The options of config group ``group`` on Hydra's search path (the package's configs plus ``paths``)."""
    with _hydra_ready():
        loader = GlobalHydra.instance().config_loader()
        return sorted(set(loader.get_group_options(group, overrides=_searchpath_override(paths))))


def group_option(group: str, name: str, paths: list[str]) -> DictConfig:
    """The config of option ``name`` of group ``group``, found on Hydra's search path exactly as
    ``geneval <group>=<name>`` finds it (the package's ``conf/<group>/<name>.yaml`` or one in a
    ``hydra.searchpath`` folder), not yet resolved."""
    with _hydra_ready():
        composed = compose(overrides=[f"+{group}={name}", *_searchpath_override(paths)])
    return composed[group]


def config_nodes(cfg: DictConfig, key: str, group: str) -> dict[str, DictConfig]:
    """``cfg[key]`` (a dotted key such as ``zoo.classifiers`` works too): a list of ``conf/<group>`` option names,
    or a mapping name -> such a name or a config node with ``_target_``. Returns name -> config node. Names are
    found on Hydra's config search path exactly like a single run finds ``<group>=<name>`` (the package's configs
    and every ``hydra.searchpath`` folder), and their interpolations (``${assets}``) resolve against ``cfg``'s top
    level.
    """
    spec = OmegaConf.select(cfg, key)
    paths = searchpath(cfg)
    if spec is None or len(spec) == 0:
        raise ValueError(
            f"{key} is empty; list {group} configs, e.g. {key}=[{','.join(group_options(group, paths)[:2])}] "
            f"(available: {', '.join(group_options(group, paths))})."
        )
    if isinstance(spec, str):
        spec = ListConfig([spec])
    pairs = list(spec.items()) if isinstance(spec, DictConfig) else [(str(s), s) for s in spec]
    nodes: dict[str, DictConfig] = {}
    available: list[str] | None = None
    for name, value in pairs:
        if str(name) in nodes:
            raise ValueError(f"{key} names {name!r} twice; give each {group} once.")
        if isinstance(value, str):
            available = group_options(group, paths) if available is None else available
            if value not in available:
                where = f" (search path: {', '.join(paths)})" if paths else ""
                raise ValueError(
                    f"unknown {group} config {value!r} in {key}; available: {', '.join(available)}{where} "
                    "(or give a mapping name -> config with _target_; configs of your own are found through "
                    "'hydra.searchpath=[file:///path/to/conf]' with a <conf>/" + group + "/<name>.yaml)."
                )
            root = copy.deepcopy(cfg)
            with open_dict(root):
                root[f"_{group}_{name}"] = group_option(group, value, paths)
            nodes[str(name)] = root[f"_{group}_{name}"]
        elif isinstance(value, DictConfig) and "_target_" in value:
            nodes[str(name)] = value
        else:
            raise ValueError(
                f"{key}.{name} must name a conf/{group} config ({', '.join(group_options(group, paths))}) or be a "
                f"config with _target_; got {value!r}."
            )
    return nodes


def classifier_nodes(cfg: DictConfig, key: str) -> dict[str, DictConfig]:
    """``cfg[key]`` as name -> classifier config node (:func:`config_nodes` for the ``classifier`` group), so
    ``classifiers=[cifar_resnet20,my_cnn]`` finds the package's configs and the user's own on the search path."""
    return config_nodes(cfg, key, "classifier")


def classifier_factories(nodes: dict[str, DictConfig], key: str) -> dict[str, Callable[[], Any]]:
    """name -> zero-argument factory building that component when called (one model in memory at a time)."""
    return {name: functools.partial(build, node, f"{key}.{name}") for name, node in nodes.items()}
