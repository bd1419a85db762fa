"""The command line composed into a command's config, with errors that suggest the fix (docs/configuration.md).

:func:`compose_config` composes ``conf/<config>.yaml`` with the user's overrides through Hydra's compose API (nothing
is written, no run directory is made) and turns Hydra's composition errors into one paragraph that names the bad
key and its nearest names (:func:`difflib.get_close_matches`): ``geneval data.limt=5`` gets "did you mean
data.limit?", never Hydra's advice to add the typo with ``+data.limt=5``; a preset that does not exist
(``classifier=resnet`` ) gets the nearest presets and the list of all. :func:`nearest` is the one suggestion rule,
for commands and for keys.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from genEval.commands.early import one_paragraph
from genEval.commands.registry import CONF_DIR, config_options


class CommandLineError(ValueError):
    """The command line cannot be composed into a config: the message names the override and the fix."""


def nearest(word: str, names: Iterable[str], n: int = 3) -> list[str]:
    """The names closest to ``word``, best first: difflib's best match (ratio >= 0.6) and any others as close as it
    (within 0.05), at most ``n``; when none is that close, the names that contain ``word``."""
    names = sorted(set(names))
    close = difflib.get_close_matches(word, names, n=n, cutoff=0.6)
    if close:
        ratio = {m: difflib.SequenceMatcher(None, word, m).ratio() for m in close}
        return [m for m in close if ratio[m] >= ratio[close[0]] - 0.05]
    return [m for m in names if len(word) >= 3 and word in m][:n]


def did_you_mean(close: Sequence[str]) -> str:
    return f"; did you mean {' or '.join(close)}?" if close else "."


def _keys(node: Any, prefix: str = "") -> Iterator[str]:
    """Every dotted key of a config tree (list items left out)."""
    if isinstance(node, DictConfig):
        for key in node.keys():
            full = f"{prefix}{key}"
            yield full
            if not OmegaConf.is_missing(node, key) and not OmegaConf.is_interpolation(node, key):
                yield from _keys(node._get_node(key), f"{full}.")
    elif isinstance(node, ListConfig):
        return


def _is_group(name: str) -> bool:
    return (CONF_DIR / name).is_dir()


def _compose(config: str, overrides: Sequence[str]) -> DictConfig:
    if GlobalHydra.instance().is_initialized():
        return compose(config_name=config, overrides=list(overrides), return_hydra_config=True)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name=config, overrides=list(overrides), return_hydra_config=True)


def compose_config(config: str, overrides: Sequence[str], prog: str) -> DictConfig:
    """``conf/<config>.yaml`` composed with ``overrides`` (the hydra node included), or a :class:`CommandLineError`
    naming the override that failed and the nearest names."""
    try:
        return _compose(config, overrides)
    except OverrideParseException as err:
        raise CommandLineError(
            f"{one_paragraph(err)} (an override is key=value, e.g. data.limit=20; a value with spaces or "
            "commas goes in quotes: 'key=a b')."
        ) from None
    except (HydraException, OmegaConfBaseException) as err:
        raise CommandLineError(_explain(config, overrides, prog, err)) from None


def _explain(config: str, overrides: Sequence[str], prog: str, err: BaseException) -> str:
    """What went wrong with ``overrides``, told from the overrides themselves where one of them is the cause."""
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    groups = [o for o in parsed if _is_group(o.key_or_group.split("@")[0]) and not o.is_delete()]
    if isinstance(err, MissingConfigException):
        for o in groups:
            group, option = o.key_or_group.split("@")[0], str(o.value())
            options = config_options(group)
            if option not in options:
                near = did_you_mean(nearest(option, options))
                return (
                    f"Could not find '{group}/{option}': {group}={option} names no preset{near} "
                    f"Available options in '{group}': {', '.join(options)} (conf/{group}/; your own configs through "
                    "'hydra.searchpath=[file:///path/to/conf]')."
                )
    try:  # the keys there are with the presets the command line chose
        base = _compose(config, [o.input_line for o in groups if o.input_line])
    except (HydraException, OmegaConfBaseException):
        base = None
    if base is not None:
        keys = [k for k in _keys(base) if not k.startswith("hydra.")]
        for o in parsed:
            key = o.key_or_group
            if o.is_add() or o.is_delete() or _is_group(key.split("@")[0]) or key.startswith("hydra"):
                continue
            if OmegaConf.select(base, key, default=_ABSENT, throw_on_missing=False) is _ABSENT:
                parent = key.rpartition(".")[0]
                near = nearest(key, [k for k in keys if k.rpartition(".")[0] == parent] or keys)
                near = near or nearest(key.rpartition(".")[2], keys)
                return (
                    f"{key} is not a setting of {prog}{did_you_mean(near)} (`{prog} --help` lists the settings, "
                    f"`{prog} --cfg job` prints every key with its value)."
                )
    return one_paragraph(err)


_ABSENT = object()


def job_config(cfg: DictConfig) -> DictConfig:
    """The config a command runs with when it runs without ``@hydra.main``: Hydra's part of ``cfg`` becomes
    :class:`HydraConfig` (the presets chosen, the overrides; no run directory) and is taken out of the copy returned,
    as ``@hydra.main`` hands a command its config."""
    HydraConfig.instance().set_config(cfg)
    task = copy.deepcopy(cfg)
    with read_write(task), open_dict(task):
        del task["hydra"]
    return task
