"""Benchmarks: named, fixed evaluation presets (``conf/benchmark/<name>.yaml``), versioned by a config hash.

A benchmark fixes everything a score depends on except the model: data, generator, oracle, search and
mask (composed from their config groups), the ``genEval.evaluate`` settings, and the number of repetitions
(fresh seeds) per submission. Its *version* is a hash of that resolved config, so a leaderboard only ever
ranks runs of one version: editing a preset registers a new version next to the old one, never mixes them.

A submission cannot change the preset, with one exception: the keys listed under ``benchmark.overrides``
(an allowlist such as ``batch_size``; each with a range or a list of choices). They are left out of the
version hash. Any other key, a ``_target_`` or a Hydra-style override is refused with an error naming it.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from genEval.runs.rundir import config_hash

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")
ROLES = ("data", "generator", "oracle", "search", "mask")
#: genEval.evaluate settings a preset may fix (conf/config.yaml gives their meaning). ``precision`` changes what a run
#: finds (bf16 moves about 3% of the decisions: benchmarks/RESULTS.md): a preset that fixes it overrides the
#: workers' own, so that every row of its leaderboard ran at one precision.
EVALUATE_KEYS = (
    "batch_size",
    "interval",
    "n_boot",
    "grid_size",
    "gap_warn_points",
    "num_workers",
    "precision",
    "role_precision",
)
MAX_REPETITIONS = 100


def shown(value: Any, limit: int = 40) -> str:
    """``repr(value)`` for a message when it is short, else what it is (``a str of 300000 characters``): a refusal
    names what was given without echoing a large request back."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters when printed"
    return f"a {type(value).__name__} of {size}"


class OverrideRefused(ValueError):
    """A submission asked to change a key that the benchmark does not allow (``key`` names it, cut short)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key if len(str(key)) <= 40 else "(a long key)"


def _get(config: dict, dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(dotted)
        node = node[part]
    return node


def _set(config: dict, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node = config
    for part in parents:
        node = node[part]
    node[last] = value


def _without(config: dict, keys: list[str]) -> dict:
    out = copy.deepcopy(config)
    for key in keys:
        *parents, last = key.split(".")
        node = out
        for part in parents:
            node = node[part]
        node.pop(last, None)
    return out


def _check_rule(name: str, key: str, rule: Any, default: Any) -> dict:
    """Validate one allowlist entry of a preset: the key exists, is a plain value, and the rule fits it."""
    if "_target_" in key.split(".") or key.split(".")[0] not in (*ROLES, *EVALUATE_KEYS):
        raise ValueError(
            f"benchmark {name}: override key {key!r} may not be allowlisted (only plain values "
            f"under {', '.join((*ROLES, *EVALUATE_KEYS))}, never _target_)."
        )
    if isinstance(default, (dict, list)) or default is None:
        raise ValueError(
            f"benchmark {name}: override key {key!r} must name a plain value (number, string or bool), not {default!r}."
        )
    rule = dict(rule or {})
    unknown = set(rule) - {"min", "max", "choices"}
    if unknown:
        raise ValueError(
            f"benchmark {name}: override {key!r} has unknown rule fields {sorted(unknown)}; use min, max or choices."
        )
    if isinstance(default, str) and "choices" not in rule:
        raise ValueError(f"benchmark {name}: string override {key!r} needs `choices`.")
    return rule


@dataclass(frozen=True)
class Benchmark:
    """A registered benchmark preset. ``config``: the resolved evaluation config (plain dicts) with the roles
    ``data generator oracle search mask`` and the evaluate settings; ``overrides``: the allowlist."""

    name: str
    title: str
    description: str
    repetitions: int
    config: dict
    overrides: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def from_config(cls, name: str, config: dict) -> Benchmark:
        """From a composed, resolved ``conf/benchmark/<name>.yaml`` (a plain dict); validates it."""
        if not NAME_RE.match(name):
            raise ValueError(f"benchmark name {name!r} must be letters, digits and _.+- (at most 64).")
        config = copy.deepcopy(config)
        meta = config.pop("benchmark", None) or {}
        missing = [r for r in ROLES if not isinstance(config.get(r), dict)]
        if missing:
            raise ValueError(
                f"benchmark {name} lacks the role(s) {missing}; a preset composes data, generator, "
                "oracle, search and mask from their config groups."
            )
        unknown = sorted(set(config) - {*ROLES, *EVALUATE_KEYS})
        if unknown:
            raise ValueError(
                f"benchmark {name} has unknown top-level keys {unknown}; allowed: the roles "
                f"{', '.join(ROLES)} and the evaluate settings {', '.join(EVALUATE_KEYS)}."
            )
        reps = meta.get("repetitions", 1)
        if isinstance(reps, bool) or not isinstance(reps, int) or not 1 <= reps <= MAX_REPETITIONS:
            raise ValueError(
                f"benchmark {name}: repetitions must be a whole number 1..{MAX_REPETITIONS}, got {reps!r}."
            )
        rules = {}
        for key, rule in (meta.get("overrides") or {}).items():
            try:
                default = _get(config, key)
            except KeyError:
                raise ValueError(f"benchmark {name}: override key {key!r} is not in the preset.") from None
            rules[key] = _check_rule(name, key, rule, default)
        return cls(
            name=name,
            title=str(meta.get("title") or name),
            description=str(meta.get("description") or ""),
            repetitions=reps,
            config=config,
            overrides=rules,
        )

    @property
    def version(self) -> str:
        """The config hash: everything that can change a score (the allowlisted keys excluded)."""
        return config_hash({"config": _without(self.config, list(self.overrides)), "repetitions": self.repetitions})

    def record(self) -> dict:
        """What the database keeps for this version (and ``GET /api/benchmarks`` shows)."""
        return {
            "name": self.name,
            "version": self.version,
            "title": self.title,
            "description": self.description,
            "repetitions": self.repetitions,
            "overrides": self.overrides,
            "config": self.config,
        }

    def apply_overrides(self, overrides: dict[str, Any]) -> tuple[dict, dict]:
        """The job config for a submission's ``overrides``: ``(config, cleaned overrides)``.

        Raises :class:`OverrideRefused` naming the first key that is not allowlisted or whose value is out of
        its range, of the wrong type or not among its choices.
        """
        config = copy.deepcopy(self.config)
        clean: dict[str, Any] = {}
        allowed = ", ".join(self.overrides) or "none"
        for key, value in (overrides or {}).items():
            if key not in self.overrides:
                raise OverrideRefused(
                    key,
                    f"override {shown(key)} is not allowed on benchmark {self.name}; a submission may only set: "
                    f"{allowed}.",
                )
            clean[key] = self._check_value(key, value, _get(self.config, key))
            _set(config, key, clean[key])
        return config, clean

    def _check_value(self, key: str, value: Any, default: Any) -> Any:
        rule = self.overrides[key]
        kind = type(default)
        ok = (
            isinstance(value, bool)
            if kind is bool
            else isinstance(value, int) and not isinstance(value, bool)
            if kind is int
            else isinstance(value, (int, float)) and not isinstance(value, bool)
            if kind is float
            else isinstance(value, str)
        )
        if not ok:
            raise OverrideRefused(key, f"override {key!r} must be a {kind.__name__}, got {shown(value)}.")
        if "choices" in rule and value not in rule["choices"]:
            raise OverrideRefused(key, f"override {key!r} must be one of {rule['choices']}, got {shown(value)}.")
        if "min" in rule and value < rule["min"] or "max" in rule and value > rule["max"]:
            raise OverrideRefused(
                key, f"override {key!r} must be within [{rule.get('min')}, {rule.get('max')}], got {shown(value)}."
            )
        return kind(value)
