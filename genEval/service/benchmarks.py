"""Benchmarks: named, fixed evaluation presets (``conf/benchmark/<name>.yaml``), versioned by a canonical spec.

A benchmark fixes everything a score depends on except the model: data, generator, oracle, search and
mask (composed from their config groups), the ``genEval.evaluate`` settings, and the number of repetitions
(fresh seeds) per submission. Its *version* is the hash of its canonical spec (:meth:`Benchmark.spec`; docs/service.md):
each role by its component (the ``_target_``'s own name, as :func:`genEval.interfaces.component_id` names a built
component, never its import path) and settings, the search and scoring bundles by their ``to_dict()``, the other
evaluate settings, the repetitions, a settled benchmark's stop rule, a renewal's epoch and :data:`SCHEMA_VERSION`.
So a leaderboard only ever ranks runs of one version (editing a preset registers a new version next to the old
one, never mixes them), and a module can move without an alias module kept for the hash. The versions of the hash
before the canonical spec (the resolved YAML, import paths included) are carried over once by
:func:`genEval.service.server.benchmarks.store.remap_versions`,
standings kept (docs/service.md, "Benchmark versions").

A submission cannot change the preset, with one exception: the keys listed under ``benchmark.overrides``
(an allowlist such as ``batch_size``; each with a range or a list of choices). They are left out of the
version hash. Any other key, a ``_target_`` or a Hydra-style override is refused with an error naming it.

A benchmark may be *settled* (docs/service.md): ``stop: settled`` with ``max_sources`` (and optionally
``round_sources``, ``confidence``, ``margin``, ``power``: :class:`~genEval.comparisons.settings.StopRule`'s keys) in a
``sequential:`` block of its ``benchmark:`` block (the same keys directly in the ``benchmark:`` block, the spelling
before it, are still read). Its jobs carry the rule as ``comparison.sequential``, the key their runs record it under.
Each job is then one *round* of ``round_sources`` fresh sources (``data.subset: random``,
``data.limit`` = ``round_sources``) drawn with the round's seed, the same for every model of the version, and the
service adds rounds to a model until it is ordered or equivalent against its neighbours on the leaderboard, or has
``max_sources`` (:mod:`genEval.service.server.standings.settled`). The rule is part of the version.

Every submission to a settled version reuses its rounds (the same secret round seeds), which is the adaptive test-set
reuse Miller's thesis bounds (ch. 3; docs/scores.md): the service reports a *reuse budget* per settled version
(:mod:`genEval.scores.reuse`), with the preset's ``reuse_epsilon`` (how close every standing must stay to its
population value, a fraction: 0.01 = 1 point) and ``reuse_delta`` (at ``1 - delta``) in its ``benchmark:`` block; they
say how the budget is reported, not what is measured, so they are not part of the version. When a version's budget
is spent an admin *renews* it (:meth:`Benchmark.renewed`): a new version (``epoch`` + 1, part of its hash) whose
rounds draw from a fresh secret; standings carry over only by re-running.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from genEval.campaigns.plan import EvaluationPlan
from genEval.comparisons.settings import STOP_DEFAULTS, StopRule
from genEval.interfaces import SettingError
from genEval.runs.identity import config_hash
from genEval.runs.settings import SearchConfig
from genEval.scores.scoring import Scoring

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")
ROLES = ("data", "generator", "oracle", "search", "mask")
#: genEval.evaluate settings a preset may fix (conf/config.yaml gives their meaning), each a field of one bundle of the
#: :class:`~genEval.campaigns.plan.EvaluationPlan` its jobs get (``EvaluationPlan.from_config`` reads them; a test in
#: tests/service/domain checks). ``precision`` changes what a run finds (bf16 moves about 3% of the decisions:
#: benchmarks/RESULTS.md): a preset that fixes it overrides the workers' own, so that every row of its leaderboard ran
#: at one precision.
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
#: The layout of :meth:`Benchmark.spec`; a change of it is a new schema version (and one more remap of the versions).
SCHEMA_VERSION = 2
_HYDRA_KEYS = {"_target_", "_convert_", "_recursive_", "_partial_", "_args_"}
#: The keys of a preset's ``benchmark:`` block that declare when its comparison has seen enough (StopRule's fields).
STOP_KEYS = tuple(STOP_DEFAULTS)
#: The keys of a ``benchmark:`` block that set how a settled version's reuse budget is reported (docs/scores.md).
REUSE_KEYS = {"reuse_epsilon": 0.01, "reuse_delta": 0.05}


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


def _canonical(node: Any) -> Any:
    """A role's config as the version sees it: every node with ``_target_`` as ``{"component": <the target's own
    name>, "settings": {...}}`` (``genEval.masks.NoMask`` and ``genEval.style_mask.NoMask`` are one component), lists
    and plain values as they are."""
    if isinstance(node, dict):
        settings = {k: _canonical(v) for k, v in node.items() if k not in _HYDRA_KEYS}
        if "_target_" not in node:
            return settings
        return {"component": str(node["_target_"]).rsplit(".", 1)[-1], "settings": settings}
    if isinstance(node, list):
        return [_canonical(v) for v in node]
    return node


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


def _stop_keys(name: str, meta: dict) -> dict:
    """The stop rule's keys a preset gives (null ones left out): its ``benchmark.sequential`` block, StopRule's fields
    as ``geneval compare``'s ``comparison.sequential`` node spells them, or the same keys at the top of the
    ``benchmark:`` block (the spelling before the block: still read). Both at once, or a key StopRule does not have,
    is refused by name."""
    flat = {k: meta[k] for k in STOP_KEYS if k in meta}
    block = meta.get("sequential")
    if block is None:
        return flat
    if flat:
        raise ValueError(
            f"benchmark {name}: the stop rule is given twice, as benchmark.sequential and as {sorted(flat)} in the "
            "benchmark: block; move them into the sequential: block."
        )
    if not isinstance(block, dict) or set(block) - set(STOP_KEYS):
        raise ValueError(
            f"benchmark {name}: benchmark.sequential must hold the stop rule's keys ({', '.join(STOP_KEYS)}), got "
            f"{shown(block)}."
        )
    return {k: v for k, v in block.items() if v is not None}


def _stop_rule(name: str, meta: dict, config: dict, repetitions: int) -> StopRule | None:
    """The filled :class:`StopRule` of a settled preset (None: a fixed one); sets ``data.limit`` to
    ``round_sources`` when the preset leaves it out. Refuses a rule the service cannot run, naming the key."""
    given = _stop_keys(name, meta)
    if given.get("stop", "fixed") == "fixed":
        extra = sorted(set(given) - {"stop"})
        if extra:
            raise ValueError(f"benchmark {name}: {extra} apply to `stop: settled` only; add it or remove them.")
        return None
    try:
        rule = StopRule(**given)
    except SettingError as err:
        raise ValueError(f"benchmark {name}: {err}") from None
    if "max_sources" not in given:
        raise ValueError(
            f"benchmark {name}: `stop: settled` needs max_sources, the most sources a model is run on (e.g. "
            "max_sources: 5000)."
        )
    if repetitions != 1:
        raise ValueError(
            f"benchmark {name}: a settled benchmark runs one round per job (rounds take the place of repetitions); "
            f"remove repetitions: {repetitions}."
        )
    data = config["data"]
    target = data.get("_target_", "its data")
    why = (
        "has no `subset` setting, so it cannot draw a fresh subset per round"
        if "subset" not in data
        else f"has subset: {data['subset']} (the same images every round)"
        if data["subset"] != "random"
        else f"fixes subset_seed: {data['subset_seed']} (the same images every round)"
        if data.get("subset_seed") is not None
        else ""
    )
    if why:
        raise ValueError(
            f"benchmark {name}: `stop: settled` draws fresh sources every round, but the data ({target}) {why}. Use "
            "data that can be re-drawn with data.subset: random, data.limit (= round_sources) and data.subset_seed: "
            "null, or `stop: fixed`."
        )
    limit, round_sources = data.get("limit"), given.get("round_sources", data.get("limit"))
    if round_sources is None:
        raise ValueError(f"benchmark {name}: `stop: settled` needs round_sources (or data.limit): sources per round.")
    if limit is not None and limit != round_sources:
        raise ValueError(
            f"benchmark {name}: round_sources ({round_sources}) and data.limit ({limit}) differ; a round draws "
            "data.limit sources: set one of them, or both to the same number."
        )
    data["limit"] = round_sources
    rule = StopRule(**{**given, "round_sources": round_sources}).filled()
    if rule.max_sources < rule.round_sources:
        raise ValueError(
            f"benchmark {name}: max_sources ({rule.max_sources}) is below round_sources ({round_sources})."
        )
    return rule


@dataclass(frozen=True)
class Benchmark:
    """A registered benchmark preset. ``config``: the resolved evaluation config (plain dicts) with the roles
    ``data generator oracle search mask`` and the evaluate settings; ``overrides``: the allowlist; ``rule``: the
    filled stop rule of a settled benchmark (None: fixed, every submission runs its ``repetitions``)."""

    name: str
    title: str
    description: str
    repetitions: int
    config: dict
    overrides: dict[str, dict] = field(default_factory=dict)
    rule: StopRule | None = None
    reuse_epsilon: float = REUSE_KEYS["reuse_epsilon"]
    reuse_delta: float = REUSE_KEYS["reuse_delta"]
    epoch: int = 0

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
        try:  # the run settings as the typed bundles a job is evaluated with: a bad value is refused here, by key
            EvaluationPlan.from_config(config)
        except (ValueError, TypeError) as err:
            raise ValueError(f"benchmark {name}: {err}") from None
        rules = {}
        for key, rule in (meta.get("overrides") or {}).items():
            try:
                default = _get(config, key)
            except KeyError:
                raise ValueError(f"benchmark {name}: override key {key!r} is not in the preset.") from None
            rules[key] = _check_rule(name, key, rule, default)
        stop = _stop_rule(name, meta, config, reps)
        reuse = {}
        for key, default in REUSE_KEYS.items():
            v = meta.get(key, default)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
                raise ValueError(f"benchmark {name}: {key} must be a number in (0, 1), got {v!r} (default {default}).")
            reuse[key] = float(v)
        return cls(
            name=name,
            title=str(meta.get("title") or name),
            description=str(meta.get("description") or ""),
            repetitions=reps,
            config=config,
            overrides=rules,
            rule=stop,
            **reuse,
        )

    @property
    def settled(self) -> bool:
        return self.rule is not None

    def spec(self) -> dict[str, Any]:
        """The canonical spec the version hashes (module docstring): everything that can change a score, the
        allowlisted keys excluded, without import paths."""
        config = _without(self.config, list(self.overrides))
        scoring = {k: config.pop(k) for k in list(config) if k in Scoring.__dataclass_fields__}
        return {
            "schema_version": SCHEMA_VERSION,
            "roles": {role: _canonical(config.pop(role)) for role in ROLES if role != "search"},
            "search": SearchConfig.coerce(config.pop("search")).to_dict(),
            "scoring": Scoring.coerce(scoring).to_dict(),
            "evaluate": config,  # the rest of EVALUATE_KEYS the preset fixes (batch size, precision, ...)
            "repetitions": self.repetitions,
            "stop": self.rule.to_dict() if self.rule else None,
            "epoch": self.epoch,
        }

    @property
    def version(self) -> str:
        """The hash of :meth:`spec`."""
        return config_hash(self.spec())

    @property
    def base_version(self) -> str:
        """The version of the preset before any renewal (epoch 0): what ties a renewed version to its preset."""
        return replace(self, epoch=0).version if self.epoch else self.version

    def renewed(self) -> Benchmark:
        """The next version of this settled benchmark: the same preset with ``epoch`` + 1 (a new hash, so a new
        leaderboard, whose rounds draw from a fresh secret); a fixed benchmark draws fresh seeds per submission and
        reuses nothing, so it is refused."""
        if self.rule is None:
            raise ValueError(
                f"benchmark {self.name} is fixed: every submission draws fresh seeds, so its test images are never "
                "reused and it has no reuse budget to renew."
            )
        return replace(self, epoch=self.epoch + 1)

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
            "stop": self.rule.to_dict() if self.rule else None,
            "reuse": {"epsilon": self.reuse_epsilon, "delta": self.reuse_delta} if self.rule else None,
            "epoch": self.epoch,
            "base_version": self.base_version,
        }

    def apply_overrides(self, overrides: dict[str, Any]) -> tuple[dict, dict]:
        """The job config for a submission's ``overrides``: ``(config, cleaned overrides)``; a settled benchmark's
        job config also holds its rule as ``comparison.sequential`` (:meth:`StopRule.carried_by` reads it, and the
        ``stop`` of jobs stored before that spelling).

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
        if self.rule:  # spelled as its runs record it (results.json config.comparison.sequential)
            config["comparison"] = {"sequential": self.rule.to_dict()}
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


def from_record(record: dict) -> Benchmark:
    """The benchmark a database row's record (:meth:`Benchmark.record`) was made from."""
    reuse = record.get("reuse") or {}
    return Benchmark(
        name=record["name"],
        title=record.get("title") or record["name"],
        description=record.get("description") or "",
        repetitions=int(record.get("repetitions") or 1),
        config=record["config"],
        overrides=record.get("overrides") or {},
        rule=StopRule.coerce(record["stop"]) if record.get("stop") else None,
        reuse_epsilon=reuse.get("epsilon", REUSE_KEYS["reuse_epsilon"]),
        reuse_delta=reuse.get("delta", REUSE_KEYS["reuse_delta"]),
        epoch=int(record.get("epoch") or 0),
    )


def moved_versions(rows: Iterable[tuple[str, str, dict]]) -> dict[tuple[str, str], str]:
    """``{(name, stored version): its version now}`` for the stored benchmark rows ``(name, version, record)`` whose
    version is not what this genEval computes from their record (:func:`from_record`): the versions of the hash
    before the canonical spec, which :func:`genEval.service.server.benchmarks.store.remap_versions` carries over
    once."""
    moved = {}
    for name, old, record in rows:
        if not isinstance(record, dict) or not isinstance(record.get("config"), dict):
            continue  # not a preset's record (a hand-made row): nothing to compute its version from; it stays
        new = from_record({**record, "name": name}).version
        if new != old:
            moved[(name, old)] = new
    return moved
