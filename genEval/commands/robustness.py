"""The keys of ``geneval compare`` across training data (docs/comparing.md; conf/compare.yaml): ``id_data`` and
``families`` (multi-ID effective robustness), ``shift=corruptions`` with ``corruptions.*`` (a fixed-shift column beside
FMR_v) and ``ablate={key: [values]}`` (the ranking under each value of any setting).

This module turns those keys into objects for :mod:`genEval.comparisons.multi_id`,
:mod:`genEval.campaigns.fixed_shift` and :mod:`genEval.comparisons.ablation`; :mod:`genEval.commands.compare`
calls :func:`check_extras` before any run, :func:`add_extras` on the finished comparison and :func:`variants` for
an ablation.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from genEval.campaigns.fixed_shift import SHIFTS, attach_fixed_shift, score_corruptions
from genEval.campaigns.id_sets import score_id_sets
from genEval.commands import build, config_nodes, execution_bundle, plain
from genEval.commands.checks import choice
from genEval.comparisons.leaderboard import Comparison
from genEval.comparisons.multi_id import attach_multi_id, check_plane_baselines
from genEval.comparisons.settings import ComparisonSettings
from genEval.data.corruptions import check_corruptions

log = logging.getLogger(__name__)

#: Keys an ablation may vary by naming conf/<group> presets (the others are set as values: search.budget=10).
GROUP_KEYS = ("generator", "oracle", "mask")


def id_set_names(cfg: DictConfig) -> list[str] | None:
    """``id_data`` as a list of conf/data names (the first must be the search's ``data``), or None."""
    spec = cfg.get("id_data")
    if spec is None:
        return None
    names = [str(spec)] if isinstance(spec, str) else [str(s) for s in spec]
    if len(names) < 2:
        raise ValueError(
            f"id_data={names}: multi-ID effective robustness needs at least 2 ID sets, the search's data first, e.g. "
            f"'id_data=[{choice(cfg, 'data')},digits_noisy]'."
        )
    if names[0] != choice(cfg, "data"):
        raise ValueError(
            f"id_data={names}: the first ID set is the one the search uses, but data={choice(cfg, 'data')}; set "
            f"data={names[0]} or put {choice(cfg, 'data')} first."
        )
    if len(set(names)) < len(names):
        raise ValueError(f"id_data={names} names an ID set twice; give each once.")
    return names


def families(cfg: DictConfig) -> dict[str, str] | None:
    """Model -> training-data family: ``families=`` if given, else the compared zoo's ``families``."""
    spec = cfg.get("families")
    if spec is None and cfg.get("classifiers") is None and cfg.get("zoo") is not None:
        spec = cfg.zoo.get("families")
    return None if spec is None else {str(k): str(v) for k, v in plain(spec).items()}


def shift(cfg: DictConfig) -> str | None:
    """``shift`` (None or ``corruptions``), checked with its corruptions and severities."""
    kind = cfg.get("shift")
    if kind is None:
        return None
    if kind not in SHIFTS:
        raise ValueError(f"unknown shift={kind!r}; choose one of {', '.join(SHIFTS)} (or null for none).")
    c = cfg.get("corruptions") or {}
    check_corruptions(plain(c.get("names")), plain(c.get("severities")))
    return str(kind)


def check_extras(cfg: DictConfig, baselines: list[str] | None, ablation: bool) -> None:
    """Refuse, before any run, what the new keys cannot run with."""
    names, kind = id_set_names(cfg), shift(cfg)
    if (names or kind) and (ablation or cfg.get("runs")):
        raise ValueError(
            "id_data= and shift= score the models of one comparison after its runs; they run neither with ablate= / "
            "generators= nor with runs= (re-ranking). Run the comparison with them on its own."
        )
    if names:
        check_plane_baselines(baselines, names)


def add_extras(
    cfg: DictConfig, comp: Comparison, settings: ComparisonSettings, factories: dict, data: Any
) -> Comparison:
    """The comparison with multi-ID ER (``id_data``) and the fixed-shift column (``shift``) attached, its files
    rewritten."""
    names, kind = id_set_names(cfg), shift(cfg)
    execution = execution_bundle(cfg)
    if names:
        with open_dict(cfg):
            cfg["_id_data"] = ListConfig(names[1:])
        sets = {n: build(node, f"id_data.{n}") for n, node in config_nodes(cfg, "_id_data", "data").items()}
        scores = score_id_sets(factories, sets, comp.out_dir, execution)
        comp = attach_multi_id(comp, scores, names, families(cfg), settings)
    if kind == "corruptions":
        c = cfg.get("corruptions") or {}
        seeds = [int(s) for s in comp.settings.repetition_seeds]
        scores = score_corruptions(
            factories,
            data,
            seeds,
            comp.out_dir,
            corruptions=plain(c.get("names")),
            severities=plain(c.get("severities")),
            seed=int(c.get("seed") or 0),
            execution=execution,
        )
        comp = attach_fixed_shift(comp, scores, settings)
    return comp


# ------------------------------------------------------------------------------------------ ablate={key: [...]}
def ablation_spec(cfg: DictConfig) -> tuple[str, list[Any]] | None:
    """``ablate={key: [v1, v2, ...]}`` as (key, values), checked: one key, at least two distinct values, a key the
    config has (or a role: generator, oracle, mask)."""
    spec = cfg.get("ablate")
    if spec is None:
        return None
    if not isinstance(spec, DictConfig) or len(spec) != 1:
        raise ValueError(
            f"ablate={plain(spec)!r}: give one setting and its values, e.g. 'ablate={{search.budget:[10,50]}}' or "
            "'ablate={oracle:[digits_zoo,classifier]}'."
        )
    ((key, values),) = spec.items()
    key = str(key)
    values = plain(values)
    if not isinstance(values, list) or len(values) < 2:
        raise ValueError(f"ablate={{{key}: {values}}}: an ablation needs at least 2 values of {key}, as a list.")
    if len({repr(v) for v in values}) < len(values):
        raise ValueError(f"ablate={{{key}: {values}}} names a value twice; give each once.")
    if key.split(".")[0] not in GROUP_KEYS and OmegaConf.select(cfg, key, default="__missing__") == "__missing__":
        raise ValueError(
            f"ablate={{{key}: ...}}: the config has no key {key!r}; ablate a key it has (search.budget, "
            f"search.step_size, oracle.templates, ...) or a role ({', '.join(GROUP_KEYS)}: its conf/<role> presets)."
        )
    return key, values


def value_label(key: str, value: Any, index: int) -> str:
    """A label of one value that is also a directory name: ``budget-10``, ``oracle-digits_zoo``, else
    ``<leaf>-<i>`` (the i-th value, from 1: a list of prompt templates)."""
    leaf = key.split(".")[-1]
    text = str(value)
    if isinstance(value, (int, float, str)) and len(text) <= 40 and all(ch.isalnum() or ch in "._+-" for ch in text):
        return f"{leaf}-{text}"
    return f"{leaf}-{index + 1}"


def variants(cfg: DictConfig, key: str, values: list[Any]) -> dict[str, DictConfig]:
    """One config per value of ``key`` (label -> config): a role key takes conf/<role> preset names, any other key
    its value (``OmegaConf.update``)."""
    out = {}
    role = key if key in GROUP_KEYS else None
    if role is not None and not all(isinstance(v, str) for v in values):
        raise ValueError(f"ablate={{{key}: {values}}}: {key} values name conf/{key} presets (strings).")
    nodes = None
    if role is not None:
        with open_dict(cfg):
            cfg["_ablate_values"] = ListConfig([str(v) for v in values])
        nodes = config_nodes(cfg, "_ablate_values", role)
    for i, v in enumerate(values):
        variant = copy.deepcopy(cfg)
        with open_dict(variant):
            if nodes is not None:
                variant[role] = nodes[str(v)]
            else:
                OmegaConf.update(variant, key, v, merge=False)
        out[value_label(key, v, i)] = variant
    return out
