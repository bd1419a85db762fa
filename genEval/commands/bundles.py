"""The settings bundles of a command's config (docs/configuration.md): ``conf/{search,execution,scoring,output,
comparison}/`` are ordinary config nodes with ``_target_`` on their dataclass
(:class:`~genEval.runs.settings.SearchConfig`, :class:`~genEval.search.execution_settings.Execution`,
:class:`~genEval.scores.scoring.Scoring`, :class:`~genEval.runs.settings.RunOutput`,
:class:`~genEval.comparisons.settings.ComparisonSettings` with its :class:`~genEval.comparisons.settings.StopRule` as
the nested node ``sequential``), built here by Hydra's ``instantiate`` like any role. The dataclass holds the defaults
and validates every value; nothing here re-checks one.

Short spellings. The names users type at the top level (``device=cuda batch_size=64 precision=bf16``, ``n_boot=200``,
``save_images=true``, ``stop=settled``, ``er.scale=probit``) are the keys of ``conf/_shortcuts/<bundle>.yaml``; the
bundle's node interpolates them (``device: ${device}``), so no key list routes them. The node's own spelling
(``execution.device=cuda``) works too. The rule when both are given: a short name set to something other than its
default while the node's key no longer interpolates it, and holds another value (``device=cpu execution.device=cuda``,
or ``device=cpu`` under ``execution=gpu``), is refused, naming both spellings, rather than one silently winning. A
bad value is named as the user spelled it: ``n_boot=0`` as ``n_boot``, ``scoring.gap_warn_points=x`` as
``scoring.gap_warn_points``.

This module imports neither torch nor the library's heavy modules, so the command line builds (and so checks) the
bundles before it imports torch (:mod:`genEval.commands.early`).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from genEval.commands.registry import CONF_DIR
from genEval.commands.settings import parameters
from genEval.search.execution_settings import refuse_cuda_without_driver
from genEval.validation import SettingError

#: The bundles a run records in its config, each as the built object's ``to_dict()`` (:func:`recorded`); the
#: comparison's settings are recorded by the comparison itself (``config.comparison``), not as a bundle.
RUN_BUNDLES = ("execution", "scoring", "output")
#: Nodes built by their ``_target_`` but recorded by their keys as given (the search: a run's identity holds its config,
#: so a run recorded before ``conf/search`` had a ``_target_`` still resumes, and a benchmark's jobs store the same).
PLAIN_NODES = ("search",)
#: An interpolation of one top-level key, as a bundle's node writes its short spellings (``${device}``).
_SHORT = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_.]*)\}")
_HYDRA_KEYS = {"_target_", "_convert_", "_recursive_", "_partial_", "_args_"}


def settings_of(node: dict) -> dict:
    """A node made plain, without Hydra's keys (``_target_``...): the settings it holds, as a run records them."""
    return {key: value for key, value in node.items() if key not in _HYDRA_KEYS}


def _dotted(tree: dict, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as ``{dotted key: value}`` (``er.scale``, ``sequential.stop``), Hydra's keys left out."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out |= _dotted(value, f"{prefix}{key}.")
        elif key not in _HYDRA_KEYS:
            out[f"{prefix}{key}"] = value
    return out


@functools.cache
def shortcut_defaults(bundle: str) -> dict[str, Any]:
    """The short spellings of ``bundle`` with their defaults: ``conf/_shortcuts/<bundle>.yaml`` (dotted keys; empty
    for a bundle without that file)."""
    path = Path(CONF_DIR) / "_shortcuts" / f"{bundle}.yaml"
    return _dotted(OmegaConf.to_container(OmegaConf.load(path))) if path.is_file() else {}


def shortcuts(bundle: str) -> tuple[str, ...]:
    """The short spellings of ``bundle`` (``device``, ``batch_size``, ...; ``er.scale`` for the comparison)."""
    return tuple(shortcut_defaults(bundle))


def spelled(cfg: DictConfig, bundle: str) -> dict[str, str]:
    """Each key of node ``cfg[bundle]`` (dotted in a nested node: ``sequential.stop``) -> the config key the user
    sets it by: the top-level short name it interpolates (``device``, ``er.scale``), else its own dotted key
    (``execution.num_workers``)."""
    out = {}
    for key, value in _dotted(OmegaConf.to_container(cfg[bundle], resolve=False)).items():
        short = _SHORT.fullmatch(value) if isinstance(value, str) else None
        out[key] = short.group(1) if short else f"{bundle}.{key}"
    return out


def _spelling(names: dict[str, str], bundle: str, key: str) -> str:
    """The config key of a dataclass's argument ``key`` (a SettingError's) as the user spells it: the node key that
    is it, or the one node key ending in it (a nested node's); a dotted key the dataclass already spelled
    (``er.scale``) as it is."""
    head, dot, rest = key.partition(".")
    if head in names:
        return names[head] + dot + rest
    found = [spelling for path, spelling in names.items() if path.endswith(f".{key}")]
    return found[0] if len(found) == 1 else key if dot else f"{bundle}.{key}"


@functools.cache
def _default_spellings(bundle: str) -> dict[str, str]:
    """Each key of ``conf/<bundle>/default.yaml`` -> the short name it interpolates there (``retention_s`` ->
    ``worker_retention_s``), as the node reads before any override."""
    path = Path(CONF_DIR) / bundle / "default.yaml"
    if not path.is_file():
        return {}
    raw = _dotted(OmegaConf.to_container(OmegaConf.load(path), resolve=False))
    return {key: m.group(1) for key, value in raw.items() if isinstance(value, str) and (m := _SHORT.fullmatch(value))}


def _check_spellings(cfg: DictConfig, bundle: str, names: dict[str, str]) -> None:
    """Refuse a short name and a node key that both set one setting to different values (module docstring)."""
    defaults = shortcut_defaults(bundle)
    for path, spelling in names.items():
        name = _default_spellings(bundle).get(path) or (path if path in defaults else path.rsplit(".", 1)[-1])
        if spelling != f"{bundle}.{path}" or name not in defaults:
            continue  # the node reads a short name, or the setting has none
        given, node = OmegaConf.select(cfg, name, default=None), OmegaConf.select(cfg, spelling)
        if given != defaults[name] and given != node:
            presets = sorted(p.stem for p in (Path(CONF_DIR) / bundle).glob("*.yaml") if p.stem != "default")
            raise ValueError(
                f"{name}={_text(given)} and {spelling}={_text(node)} both set the {bundle} setting {path!r}; give "
                f"one of them (e.g. {spelling}={_text(given)})"
                + (f"; {spelling} may come from a preset of conf/{bundle}/ (such as {bundle}={presets[0]})." if presets
                   else ".")
            )  # fmt: skip


def _text(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def bundle(cfg: DictConfig, key: str, **kwargs: Any) -> Any:
    """Build the settings bundle at ``cfg[key]`` (a node with ``_target_``), ``kwargs`` passed to the target on top
    of the config (the output's ``dir=``, as for :func:`genEval.commands.build`): the dataclass validates it; an
    error names the key as the user spelled it (module docstring)."""
    node = cfg[key]
    if not isinstance(node, DictConfig) or "_target_" not in node:
        raise ValueError(f"{key} must be a config node with _target_ (conf/{key}/default.yaml), got {node!r}.")
    takes = parameters(get_class(node._target_))[0]
    unknown = sorted(set(node) - set(takes) - _HYDRA_KEYS)
    if unknown:
        raise ValueError(
            f"{key}.{unknown[0]} is not a setting of {node._target_}; it takes: {', '.join(takes)} "
            f"(conf/{key}/default.yaml)."
        )
    names = spelled(cfg, key)
    _check_spellings(cfg, key, names)
    try:
        return instantiate(node, _convert_="all", **kwargs)
    except InstantiationException as err:
        cause: BaseException = err
        while isinstance(cause, InstantiationException) and cause.__cause__ is not None:
            cause = cause.__cause__  # Hydra wraps the dataclass's error once per nested node
        if isinstance(cause, SettingError):
            spelled_as = _spelling(names, key, cause.key)
            raise SettingError(spelled_as, cause.value, cause.expected, cause.example, cause.note) from None
        raise cause from err  # the dataclass's own message (a ValueError), not Hydra's wrapper


def execution_bundle(cfg: DictConfig) -> Any:
    """The :class:`~genEval.search.execution_settings.Execution` of a command's config (node ``execution``), with
    ``device=cuda`` on a machine without a GPU driver refused at once (before torch; docs/configuration.md)."""
    built = bundle(cfg, "execution")
    try:
        refuse_cuda_without_driver(built.device)
    except SettingError as err:
        key = spelled(cfg, "execution")["device"]
        raise SettingError(key, err.value, err.expected, err.example, err.note) from None
    return built


def recorded(cfg: DictConfig) -> dict[str, Any]:
    """``cfg`` resolved to plain values as a run records it: each bundle of :data:`RUN_BUNDLES` it composes as the
    built object's ``to_dict()`` (what took effect, without ``_target_`` import paths), each of :data:`PLAIN_NODES` by
    its keys, the comparison's node left to the comparison's own record, and the bundles' short spellings left out
    (``device`` is recorded once, as ``execution.device``)."""
    out = OmegaConf.to_container(cfg, resolve=True)
    for key in (*RUN_BUNDLES, "comparison"):
        if isinstance(cfg.get(key), DictConfig) and "_target_" in cfg[key]:
            if key in RUN_BUNDLES:
                out[key] = bundle(cfg, key).to_dict()
            for name in shortcuts(key):
                head, _, rest = name.partition(".")
                if not rest:
                    out.pop(name, None)
                elif isinstance(out.get(head), dict):
                    out[head].pop(rest, None)
                    if not out[head]:
                        out.pop(head)
    if isinstance(cfg.get("comparison"), DictConfig):
        out.pop("comparison")
    for key in PLAIN_NODES:
        if isinstance(out.get(key), dict):
            out[key] = settings_of(out[key])
    return out
