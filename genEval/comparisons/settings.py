"""How runs are aggregated into a comparison: one settings object for compare, ablation, re-ranking and the service.

:class:`ComparisonSettings` is the aggregation tail every comparison shares: the ER ``baselines``, the fit gate
``er_min_r2``, the bootstrap (``n_boot`` resamples seeded by ``seed``, ``level`` intervals), the
``repetition_seeds`` recorded with it, and ``rank_by``, the score that orders the leaderboard. It is validated
once, here. :func:`genEval.campaigns.run.run_campaign` / ``aggregate`` / ``build_comparison``, the generator
ablation (:mod:`genEval.comparisons.ablation`) and the service's stored standings
(:mod:`genEval.service.server.standings.compute`) all take it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from genEval.comparisons.ranking import DEFAULT_RANK_BY, check_rank_by
from genEval.interfaces import SettingError, is_whole
from genEval.scores.effective_robustness import ACCURACY_FLOOR, SCALES
from genEval.scores.intervals import N_BOOT
from genEval.scores.sequential import SequentialTest

STOPS = ("fixed", "settled")
RULES = ("recorded", "override")
#: The fields of the stop rule that decide a verdict: a re-rank that gives one of them differently from what the
#: runs recorded is refused, unless ``rule=override``.
VERDICT_KEYS = ("stop", "round_sources", "max_sources", "confidence", "margin", "resolution", "familywise", "boundary",
                "spending")  # fmt: skip


@dataclass(frozen=True)
class StopRule:
    """When a comparison has seen enough (docs/comparing.md): ``stop=fixed`` runs its repetitions; ``stop=settled``
    runs rounds of ``round_sources`` fresh, paired sources, each only for the models of open adjacent pairs
    (:func:`genEval.comparisons.settled.next_rounds`), until every adjacent pair of the ranking is ordered,
    equivalent within ``margin`` points or resolved (its interval narrower than ``resolution`` points; 0: never) at
    ``confidence`` (per pair, or ``familywise`` over the board's adjacent pairs), or has ``max_sources`` per model.
    ``boundary``: ``spending`` (alpha spending of type ``spending`` over the planned ``max_sources``) or
    ``sequence`` (the open-ended confidence sequence, tightest at ``sqrt(round_sources * max_sources)``;
    :mod:`genEval.scores.sequential`). ``power``: what the forecast of an open pair aims at. ``rule``: a re-rank
    judges stored rounds by the rule they recorded (``recorded``: a differing setting is refused, naming the recorded
    value), or by this one (``override``: the verdicts then say so).

    A field left None takes the value the runs recorded, else :data:`STOP_DEFAULTS` (:meth:`filled`); runs
    recorded before the resolved verdict lack its fields and get :data:`LEGACY_RULE`, the rule they ran with."""

    stop: str | None = None
    round_sources: int | None = None
    max_sources: int | None = None
    confidence: float | None = None
    margin: float | None = None
    power: float | None = None
    resolution: float | None = None
    familywise: bool | None = None
    boundary: str | None = None
    spending: str | None = None
    rule: str | None = None

    def __post_init__(self) -> None:
        if self.stop is not None and self.stop not in STOPS:
            raise SettingError("stop", self.stop, " | ".join(STOPS), "settled", "when a comparison has seen enough")
        if self.rule is not None and self.rule not in RULES:
            raise SettingError("rule", self.rule, " | ".join(RULES), "override", "how a re-rank treats the rule")
        if self.familywise is not None and not isinstance(self.familywise, bool):
            raise SettingError("familywise", self.familywise, "true or false", "true", "a leaderboard guarantee")
        for key in ("round_sources", "max_sources"):
            v = getattr(self, key)
            if v is not None and not is_whole(v, 1):
                raise SettingError(key, v, "a whole number of sources per model >= 1", str(STOP_DEFAULTS[key]))
        if self.round_sources and self.max_sources and self.max_sources < self.round_sources:
            raise SettingError(
                "max_sources", self.max_sources, f">= round_sources ({self.round_sources})", str(self.round_sources)
            )
        # checks confidence, margin, resolution, power, boundary and spending (the others at their defaults)
        _sequential_test({k: STOP_DEFAULTS[k] if getattr(self, k) is None else getattr(self, k) for k in STOP_DEFAULTS})

    @classmethod
    def coerce(cls, value: StopRule | Mapping[str, Any] | None) -> StopRule:
        """From itself, a mapping of its fields (its :meth:`to_dict`; a config node or a preset's ``sequential:``
        block made plain), or None (every field left to the record, else the defaults); an unknown key is refused by
        name."""
        if value is None or isinstance(value, cls):
            return value or cls()
        if not isinstance(value, Mapping):
            raise TypeError(f"a stop rule must be a StopRule or a mapping of its fields, got {value!r}.")
        unknown = sorted(set(value) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(
                f"unknown stop-rule setting(s) {unknown}; known: {', '.join(f.name for f in fields(cls))}."
            )
        return cls(**value)

    @classmethod
    def carried_by(cls, config: Mapping[str, Any]) -> StopRule | None:
        """The rule an evaluation config carries: ``comparison.sequential`` (a service job's config, as the runs it
        makes record it in ``results.json``), or, for a job stored before that spelling, the mapping under ``stop``
        (docs/service.md); None when it carries none (a fixed benchmark's job, a CLI run's ``stop=fixed``)."""
        comparison = config.get("comparison")
        sequential = comparison.get("sequential") if isinstance(comparison, Mapping) else None
        legacy = config.get("stop")
        found = sequential if sequential is not None else legacy if isinstance(legacy, Mapping) else None
        return None if found is None else cls.coerce(found)

    def filled(self, recorded: Mapping[str, Any] | None = None) -> StopRule:
        """Every field set: this rule's, else ``recorded`` (what the runs recorded; :data:`LEGACY_RULE` for the
        fields the first settled runs did not record), else the defaults."""
        legacy = {k: v for k, v in LEGACY_RULE.items() if recorded and k not in recorded}
        base = {**STOP_DEFAULTS, **legacy, **{k: v for k, v in (recorded or {}).items() if k in STOP_DEFAULTS}}
        base = {k: STOP_DEFAULTS[k] if base[k] is None else base[k] for k in STOP_DEFAULTS}
        values = {k: base[k] if getattr(self, k) is None else getattr(self, k) for k in STOP_DEFAULTS}
        return StopRule(**values, rule=self.rule)

    @property
    def _complete(self) -> bool:
        return all(getattr(self, k) is not None for k in STOP_DEFAULTS)

    def against(self, recorded: Mapping[str, Any] | None) -> str:
        """What judging stored rounds that recorded the rule ``recorded`` with this one changes: "" when nothing
        (or nothing was recorded); with ``rule=override`` the note the verdicts carry; else a refusal naming the
        recorded value."""
        if not recorded:
            return ""
        mine, theirs = self.filled(recorded), StopRule().filled(recorded)
        changed = [k for k in VERDICT_KEYS if getattr(self, k) is not None and getattr(mine, k) != getattr(theirs, k)]
        if not changed:
            return ""
        given = ", ".join(f"{k}={getattr(mine, k)} (recorded: {getattr(theirs, k)})" for k in changed)
        if self.rule == "override":
            return f"rule=override: these rounds were run with another rule; judged here with {given}"
        k = changed[0]
        raise SettingError(
            k,
            getattr(mine, k),
            f"the {getattr(theirs, k)} these rounds recorded (a re-rank judges rounds by the rule they were run "
            f"with; add rule=override to judge them by another rule, and the output says so)",
            str(getattr(theirs, k)),
        )

    def test(self) -> SequentialTest:
        """The rule a pair is judged by under this (filled) rule."""
        return _sequential_test((self if self._complete else self.filled()).to_dict())

    @property
    def settled_mode(self) -> bool:
        return self.stop == "settled"

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in STOP_DEFAULTS}


def _sequential_test(rule: Mapping[str, Any]) -> SequentialTest:
    """The :class:`SequentialTest` of a stop rule's values (every field set); the sequence is tightest at
    ``sqrt(round_sources * max_sources)`` sources, fixed by the design before any data."""
    return SequentialTest(
        confidence=rule["confidence"], margin=rule["margin"], power=rule["power"], resolution=rule["resolution"],
        t_star=math.sqrt(rule["round_sources"] * rule["max_sources"]), boundary=rule["boundary"],
        spending=rule["spending"], max_sources=int(rule["max_sources"]), round_sources=int(rule["round_sources"]),
    )  # fmt: skip


#: The defaults of :class:`StopRule` (``stop=fixed`` stays the default: a comparison runs its repetitions unless
#: asked to settle). ``boundary``, ``resolution``: chosen by simulation (benchmarks/sequential.py, docs/comparing.md).
STOP_DEFAULTS: dict[str, Any] = dict(
    stop="fixed", round_sources=200, max_sources=5000, confidence=0.95, margin=1.0, power=0.8, resolution=2.0,
    familywise=False, boundary="spending", spending="pocock",
)  # fmt: skip
#: What runs recorded before the resolved verdict ran with: the confidence sequence, no resolved verdict, per pair.
LEGACY_RULE: dict[str, Any] = dict(resolution=0.0, familywise=False, boundary="sequence", spending="pocock")


@dataclass(frozen=True)
class ComparisonSettings:
    """The aggregation of a comparison (see the module docstring).

    ``baselines``: the models effective robustness is fitted on (None: the ones the runs record, else ER is left
    out). ``er_min_r2``: ER is reported only when the baselines' fit reaches this R^2. ``n_boot``, ``seed``,
    ``level``: the bootstrap over source images behind every interval, difference and rank stability.
    ``repetition_seeds``: the seeds of the repetitions, recorded (None: read from the runs). ``rank_by``: the score
    that orders the leaderboard (:data:`genEval.comparisons.ranking.RANK_SCORES`; default FMR_v). ``sequential``:
    the :class:`StopRule` whose verdicts on adjacent pairs every comparison reports (and, with ``stop=settled``,
    stops on). ``er_scale``: the axes the ER line (and the multi-ID plane) is fitted in, ``logit`` (Shi et al.) or
    ``probit`` (Miller); ``er_floor``: baselines whose ID accuracy is below it (percent) are left out of the fit.
    ``label_free_sensitivity``: also run the label-free measures' sensitivity protocol (S1: the measures on 1/5/10/30%
    of the sources and the ranking with 20/50/70% of the models, 3 runs each seeded by ``seed``; docs/scores.md).
    """

    baselines: tuple[str, ...] | None = None
    er_min_r2: float = 0.8
    n_boot: int = N_BOOT
    seed: int = 0
    level: float = 0.95
    repetition_seeds: tuple[int, ...] | None = None
    rank_by: str = DEFAULT_RANK_BY
    sequential: StopRule = StopRule()
    er_scale: str = "logit"
    er_floor: float = ACCURACY_FLOOR
    label_free_sensitivity: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.label_free_sensitivity, bool):
            raise SettingError("label_free.sensitivity", self.label_free_sensitivity, "true or false", "true")
        object.__setattr__(self, "sequential", StopRule.coerce(self.sequential))
        if self.baselines is not None:
            if isinstance(self.baselines, str):
                raise SettingError("baselines", self.baselines, "a list of model names or null", "[resnet20,resnet32]")
            object.__setattr__(self, "baselines", tuple(str(b) for b in self.baselines))
        if self.repetition_seeds is not None:
            object.__setattr__(self, "repetition_seeds", tuple(self.repetition_seeds))
        if not is_whole(self.n_boot, 1):
            raise SettingError("n_boot", self.n_boot, "a whole number >= 1", str(N_BOOT))
        if not is_whole(self.seed, 0):
            raise SettingError("seed", self.seed, "a whole number >= 0", "0", "the seed of the bootstraps")
        if not _number(self.level) or not 0 < self.level < 1:
            raise SettingError("level", self.level, "a number in (0, 1)", "0.95", "the level of every interval")
        if not _number(self.er_min_r2) or not 0 <= self.er_min_r2 <= 1:
            raise SettingError("er_min_r2", self.er_min_r2, "a number in [0, 1]", "0.8")
        object.__setattr__(self, "n_boot", int(self.n_boot))
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "rank_by", check_rank_by(self.rank_by))
        if self.er_scale not in SCALES:
            raise SettingError("er.scale", self.er_scale, " | ".join(SCALES), "probit", "the axes of the ER fit")
        if not _number(self.er_floor) or not 0 <= self.er_floor < 100:
            raise SettingError(
                "er.floor", self.er_floor, "a percentage in [0, 100)", "5", "baselines below it are left out"
            )
        object.__setattr__(self, "er_floor", float(self.er_floor))

    @classmethod
    def coerce(cls, settings: ComparisonSettings | Mapping[str, Any] | None = None) -> ComparisonSettings:
        """From itself, a mapping of its fields, or None (defaults); an unknown key is refused by name."""
        if isinstance(settings, cls):
            return settings
        if settings is not None and not isinstance(settings, Mapping):
            raise TypeError(f"settings must be a ComparisonSettings or a mapping of its fields, got {settings!r}.")
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(settings or {}) - set(names))
        if unknown:
            raise TypeError(f"unknown comparison setting(s) {unknown}; known: {', '.join(names)}.")
        return cls(**dict(settings or {}))

    @property
    def baseline_list(self) -> list[str] | None:
        return None if self.baselines is None else list(self.baselines)

    def with_seeds(self, seeds: Sequence[int]) -> ComparisonSettings:
        """These settings recording ``seeds`` as the repetition seeds."""
        return replace(self, repetition_seeds=tuple(int(s) for s in seeds))


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
