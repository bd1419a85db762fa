"""How a run's records become scores and warnings: :class:`Scoring` (``conf/scoring``), checked without torch.

It lives apart from :mod:`genEval.scores.run_scores` (which computes the scores and re-exports it) so that the command
line builds and checks the node before it imports torch (``geneval n_boot=0`` answers at once; docs/configuration.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from genEval.scores.intervals import INTERVALS, N_BOOT
from genEval.validation import SettingError, is_whole


def _number(key: str, value: Any, example: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SettingError(key, value, "a number", example)
    return float(value)


@dataclass(frozen=True)
class Scoring:
    """How a run's records become its scores and warnings: ``interval`` for the proportions of one run (``wilson``
    or ``clopper-pearson``), ``n_boot`` bootstrap resamples behind the other intervals (the FMR interval, paper
    Sec. 4; >= 1), and when to warn: RA more than ``gap_warn_points`` below SA (the generator gap), the oracle's own
    accuracy below ``oracle_warn_accuracy`` percent (in [0, 100]; None: never). The node ``conf/scoring`` builds it;
    ``interval=`` and ``n_boot=`` are its short spellings at the top level of a command's config."""

    interval: str = "wilson"
    n_boot: int = N_BOOT
    gap_warn_points: float = 10.0
    oracle_warn_accuracy: float | None = 70.0

    def __post_init__(self) -> None:
        if self.interval not in INTERVALS:
            raise SettingError("interval", self.interval, "one of " + ", ".join(INTERVALS), "wilson")
        if not is_whole(self.n_boot, 1):
            raise SettingError("n_boot", self.n_boot, "a whole number >= 1", str(N_BOOT))
        object.__setattr__(self, "n_boot", int(self.n_boot))
        object.__setattr__(self, "gap_warn_points", _number("gap_warn_points", self.gap_warn_points, "10"))
        if self.oracle_warn_accuracy is not None:
            accuracy = _number("oracle_warn_accuracy", self.oracle_warn_accuracy, "70")
            if not 0 <= accuracy <= 100:
                raise SettingError("oracle_warn_accuracy", accuracy, "a number in [0, 100] or null", "70")
            object.__setattr__(self, "oracle_warn_accuracy", accuracy)

    @classmethod
    def coerce(cls, value: Scoring | Mapping[str, Any] | None) -> Scoring:
        """From itself, a mapping holding its keys (a run's recorded ``scoring``, or an older run's flat config:
        other keys are ignored), or None (defaults)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        names = cls.__dataclass_fields__  # a null oracle_warn_accuracy means "never warn"; any other null: the default
        return cls(**{k: v for k, v in value.items() if k in names and (v is not None or k == "oracle_warn_accuracy")})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
