"""Type and range checks of config values, before anything is built, with errors that name the key.

Two kinds of keys are checked here, in the command layer, because only here is it known which config key a value
came from:

* a command's own settings (``seed``, ``batch_size``, ``shard.index``, ...): a table of :class:`Setting` per
  command, checked by :func:`check_settings` before the first component is built (``seed=-5`` fails in a second,
  not after the models were loaded);
* a component's settings (``data.limit``, ``classifier.num_classes``, ...): :func:`check_node` reads the type
  annotations of the config's ``_target_`` (``inspect.signature`` + ``typing.get_type_hints``) and refuses a value
  of the wrong type, and a key the target does not take, before Hydra calls it. Range checks stay with the
  component (a notebook user gets them too); it raises :class:`~genEval.interfaces.SettingError` with the argument
  name, and :func:`genEval.commands.build` shows it under its config key.

Every error is a :class:`~genEval.interfaces.SettingError`: key, value, what is allowed, a valid example.
"""

from __future__ import annotations

import collections.abc
import difflib
import importlib
import inspect
import math
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from genEval.validation import SettingError

#: Examples of valid values for common argument names (else the signature's default, else one per type).
EXAMPLES = {
    "limit": "100",
    "image_size": "224",
    "channels": "3",
    "num_classes": "10",
    "input_size": "224",
    "seed": "0",
    "subset_seed": "0",
    "batch_size": "64",
    "epochs": "10",
    "depth": "20",
    "threshold": "0.5",
    "root": "/path/to/images",
    "path": "/path/to/model.pt",
    "mask.path": "outputs/<date>/<time>/style_mask.safetensors",
    "checkpoint": "/path/to/weights.safetensors",
    "class_names": "[cat,dog]",
    "mean": "[0.485,0.456,0.406]",
    "std": "[0.229,0.224,0.225]",
}
_TYPE_EXAMPLES = {int: "1", float: "0.5", bool: "true", str: "name"}
_HYDRA_KEYS = {"_target_", "_convert_", "_recursive_", "_partial_", "_args_"}


@dataclass(frozen=True)
class Setting:
    """One command setting: its type (``int``, ``float``, ``bool``, ``str``), bounds (``low``/``high`` inclusive;
    ``above`` exclusive), allowed ``choices``, whether ``null`` is allowed, and a valid example."""

    kind: type
    example: str
    low: float | None = None
    high: float | None = None
    above: float | None = None
    choices: tuple = ()
    nullable: bool = False
    note: str = ""

    def expected(self) -> str:
        if self.choices:
            text = "one of " + ", ".join(str(c) for c in self.choices)
        else:
            text = {int: "a whole number", float: "a number", bool: "true or false", str: "text"}[self.kind]
            if self.above is not None:
                text += f" > {self.above:g}"
            if self.low is not None and self.high is not None:
                text += f" in [{self.low:g}, {self.high:g}]"
            elif self.low is not None:
                text += f" >= {self.low:g}"
            elif self.high is not None:
                text += f" <= {self.high:g}"
        return text + (" or null" if self.nullable else "")

    def check(self, key: str, value: Any) -> None:
        """Raise :class:`SettingError` naming ``key`` when ``value`` breaks this setting."""
        if value is None and self.nullable:
            return
        ok = value is not None and _is_kind(self.kind, value)
        if ok and self.choices:
            ok = value in self.choices
        if ok and self.kind in (int, float):
            ok = (
                math.isfinite(float(value))
                and (self.low is None or value >= self.low)
                and (self.high is None or value <= self.high)
                and (self.above is None or value > self.above)
            )
        if not ok:
            raise SettingError(key, value, self.expected(), self.example, self.note)


def check_settings(cfg: DictConfig, settings: Mapping[str, Setting]) -> None:
    """Check the command settings ``settings`` (dotted keys, e.g. ``shard.index``) that ``cfg`` holds."""
    for key, setting in settings.items():
        value = OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=False)
        if value is not _ABSENT:
            setting.check(key, value)


_ABSENT = object()


def _is_kind(kind: type, value: Any) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind is int:
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind is float:
        return isinstance(value, (int, float))
    if kind is str:
        return isinstance(value, (str, int, float))  # a name that looks like a number ("2024") is still a name
    return isinstance(value, kind)


# ----------------------------------------------------------------------------------------- components
def target_of(node: DictConfig) -> Callable | None:
    """The callable a config node's ``_target_`` names, or None when it cannot be imported (Hydra then says
    why when it builds the node, and :func:`genEval.commands.build` shows that). Resolved here by import and
    attribute lookup rather than ``hydra.utils.get_method``, which logs an error of its own on failure."""
    path = str(node["_target_"])
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                obj = getattr(obj, name)
        except AttributeError:
            return None
        return obj if callable(obj) else None
    return None


def parameters(target: Callable) -> tuple[dict[str, inspect.Parameter], dict[str, Any], bool]:
    """``target``'s named parameters, their resolved type hints (those that resolve), and whether it takes
    ``**kwargs``."""
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return {}, {}, True
    fn = target.__init__ if inspect.isclass(target) else target
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - an annotation that names a type only imported for type checkers
        hints = {}
    params = {
        n: p for n, p in sig.parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and n != "self"
    }
    var_kw = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    return params, hints, var_kw


def check_node(node: Any, path: str) -> None:
    """Check every ``_target_`` node in ``node`` (a config subtree at config key ``path``): no key the target
    does not take, and every value of the type its annotation allows (see the module docstring)."""
    if isinstance(node, ListConfig):
        for i, item in enumerate(node):
            check_node(item, f"{path}.{i}")
        return
    if not isinstance(node, DictConfig):
        return
    target = target_of(node) if "_target_" in node else None
    params, hints, var_kw = parameters(target) if target is not None else ({}, {}, True)
    for key in node:
        key = str(key)
        if key in _HYDRA_KEYS:
            continue
        sub = f"{path}.{key}"
        if OmegaConf.is_missing(node, key):
            if target is not None and key in params:
                raise SettingError(
                    sub, "???", "given (it has no default)", _example(key, params[key], hints.get(key), sub)
                )
            continue
        value = node[key]
        if isinstance(value, (DictConfig, ListConfig)):
            check_node(value, sub)
        if target is None:
            continue
        if key not in params:
            if not var_kw:
                close = difflib.get_close_matches(key, list(params), n=1)
                raise ValueError(
                    f"{sub} is not a setting of {node['_target_']}; it takes: {', '.join(params) or 'nothing'}. "
                    + (f"Did you mean {path}.{close[0]}? " if close else "")
                    + f"Remove +{sub}=... from the command line."
                )
            continue
        hint = hints.get(key)
        if hint is not None and not _fits(hint, value):
            raise SettingError(sub, _plain(value), _describe(hint), _example(key, params[key], hint, sub))


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value) if isinstance(value, (DictConfig, ListConfig)) else value


_SEQUENCES = (collections.abc.Sequence, list, tuple, collections.abc.Iterable)
_MAPPINGS = (collections.abc.Mapping, dict, collections.abc.MutableMapping)


def _fits(hint: Any, value: Any) -> bool:
    """Whether a config value can be passed as an argument annotated ``hint`` (True when the hint is a type this
    check does not know, e.g. an ``nn.Module`` that Hydra builds from a nested ``_target_``)."""
    if hint is Any:
        return True
    if isinstance(value, DictConfig) and "_target_" in value:
        return True  # Hydra builds it; its own node is checked separately
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(h, value) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint in (int, float, bool, str):
        return value is not None and not isinstance(value, (DictConfig, ListConfig)) and _is_kind(hint, value)
    if hint in (Path, os.PathLike) or origin is os.PathLike:
        return isinstance(value, str)
    if origin in _SEQUENCES or hint in _SEQUENCES:
        if not isinstance(value, ListConfig):
            return False
        args = typing.get_args(hint)
        if not args or origin is tuple:
            return True
        return all(_fits(args[0], v) for v in value)
    if origin in _MAPPINGS or hint in _MAPPINGS:
        return isinstance(value, DictConfig)
    return True


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        parts = [_describe(h) for h in typing.get_args(hint)]
        return " or ".join(dict.fromkeys(parts))
    if hint is type(None):
        return "null"
    if origin is typing.Literal:
        return "one of " + ", ".join(map(str, typing.get_args(hint)))
    if hint in (Path, os.PathLike) or origin is os.PathLike:
        return "a path"
    if origin in _SEQUENCES or hint in _SEQUENCES:
        args = typing.get_args(hint)
        return "a list" + (f" of {_plural(_describe(args[0]))}" if args and origin is not tuple else "")
    if origin in _MAPPINGS or hint in _MAPPINGS:
        return "a mapping"
    return {int: "a whole number", float: "a number", bool: "true or false", str: "text"}.get(
        hint, getattr(hint, "__name__", str(hint))
    )


def _plural(text: str) -> str:
    return {"a whole number": "whole numbers", "a number": "numbers", "text": "names", "a path": "paths"}.get(
        text, text
    )


def _example(key: str, param: inspect.Parameter, hint: Any, full: str = "") -> str:
    if full in EXAMPLES:
        return EXAMPLES[full]
    default = param.default
    if default is not inspect.Parameter.empty and default is not None and hint is not None and _fits(hint, default):
        if isinstance(default, bool):
            return str(default).lower()
        if isinstance(default, (int, float, str)) and str(default):
            return str(default)
    if key in EXAMPLES:
        return EXAMPLES[key]
    for kind, example in _TYPE_EXAMPLES.items():
        if hint is not None and _fits(hint, kind(example) if kind is not bool else True):
            return example
    return "..."
