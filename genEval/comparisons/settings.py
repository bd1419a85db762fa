"""How runs are aggregated into a comparison: one settings object for compare, ablation, re-ranking and the service.

:class:`ComparisonSettings` is the aggregation tail every comparison shares: the ER ``baselines``, the fit gate
``er_min_r2``, the bootstrap (``n_boot`` resamples seeded by ``seed``, ``level`` intervals), the
``repetition_seeds`` recorded with it, and ``rank_by``, the score that orders the leaderboard. It is validated
once, here. :func:`genEval.comparisons.aggregate.compare` / ``aggregate`` / ``build_comparison``, the generator
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
from genEval.scores.sequential import SequentialTest

STOPS = ("fixed", "settled")


@dataclass(frozen=True)
class StopRule:
    """When a comparison has seen enough (issue 33): ``stop=fixed`` runs its repetitions; ``stop=settled`` runs
    rounds of ``round_sources`` fresh, paired sources until every adjacent pair of the ranking is ordered or
    equivalent within ``margin`` points at ``confidence`` (anytime-valid, :mod:`genEval.scores.sequential`), or
    ``max_sources`` per model. ``power``: what the sources-needed estimate of an open pair aims at.

    A field left None takes the value the runs recorded (a re-rank keeps the design a comparison ran with), else
    :data:`STOP_DEFAULTS` (:meth:`filled`). The sequence is tightest at ``sqrt(round_sources * max_sources)``
    sources per model, fixed by the design before any data (:meth:`test`)."""

    stop: str | None = None
    round_sources: int | None = None
    max_sources: int | None = None
    confidence: float | None = None
    margin: float | None = None
    power: float | None = None

    def __post_init__(self) -> None:
        if self.stop is not None and self.stop not in STOPS:
            raise SettingError("stop", self.stop, " | ".join(STOPS), "settled", "when a comparison has seen enough")
        for key in ("round_sources", "max_sources"):
            v = getattr(self, key)
            if v is not None and not is_whole(v, 1):
                raise SettingError(key, v, "a whole number of sources per model >= 1", str(STOP_DEFAULTS[key]))
        if self.round_sources and self.max_sources and self.max_sources < self.round_sources:
            raise SettingError(
                "max_sources", self.max_sources, f">= round_sources ({self.round_sources})", str(self.round_sources)
            )
        if all(getattr(self, k) is not None for k in ("confidence", "margin", "power")):
            self.test()  # checks confidence, margin and power, naming the bad one

    def filled(self, recorded: Mapping[str, Any] | None = None) -> StopRule:
        """Every field set: this rule's, else ``recorded`` (what the runs recorded), else the defaults."""
        base = {**STOP_DEFAULTS, **{k: v for k, v in (recorded or {}).items() if k in STOP_DEFAULTS and v is not None}}
        return StopRule(**{k: base[k] if getattr(self, k) is None else getattr(self, k) for k in STOP_DEFAULTS})

    def test(self) -> SequentialTest:
        """The anytime-valid test of this (filled) rule."""
        rule = self.filled() if None in (self.round_sources, self.max_sources) else self
        t_star = math.sqrt(rule.round_sources * rule.max_sources)
        return SequentialTest(rule.confidence, rule.margin, t_star, rule.power)

    @property
    def settled_mode(self) -> bool:
        return self.stop == "settled"

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in STOP_DEFAULTS}


#: The defaults of :class:`StopRule` (``stop=fixed`` stays the default until the settled mode is measured).
STOP_DEFAULTS: dict[str, Any] = dict(
    stop="fixed", round_sources=200, max_sources=5000, confidence=0.95, margin=1.0, power=0.8
)


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
    """

    baselines: tuple[str, ...] | None = None
    er_min_r2: float = 0.8
    n_boot: int = 1000
    seed: int = 0
    level: float = 0.95
    repetition_seeds: tuple[int, ...] | None = None
    rank_by: str = DEFAULT_RANK_BY
    sequential: StopRule = StopRule()
    er_scale: str = "logit"
    er_floor: float = ACCURACY_FLOOR

    def __post_init__(self) -> None:
        if isinstance(self.sequential, Mapping):
            object.__setattr__(self, "sequential", StopRule(**self.sequential))
        if self.baselines is not None:
            if isinstance(self.baselines, str):
                raise SettingError("baselines", self.baselines, "a list of model names or null", "[resnet20,resnet32]")
            object.__setattr__(self, "baselines", tuple(str(b) for b in self.baselines))
        if self.repetition_seeds is not None:
            object.__setattr__(self, "repetition_seeds", tuple(self.repetition_seeds))
        if not is_whole(self.n_boot, 1):
            raise SettingError("n_boot", self.n_boot, "a whole number >= 1", "1000")
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
