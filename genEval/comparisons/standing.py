"""One model's standing on a stored leaderboard (the paper's App. N leaderboards, as the service keeps them): the
typed row the service stores, serves and renders, built from the comparison library's own row.

A :class:`Standing` is made from a :class:`~genEval.comparisons.leaderboard.LeaderboardRow` (its scores as
:class:`Score`: percent, with the 95% interval; ``None`` where undefined) and the names of the models it is
significantly better than; on a settled leaderboard (:mod:`genEval.comparisons.settled`) it also holds its tied
rank, its sources per model and the :class:`~genEval.scores.sequential.PairVerdict` on it and the row below it.
It is stored as JSON (:meth:`Standing.to_dict` / :meth:`Standing.from_dict`, a round trip), the HTTP answer is a
view of it and the pages render it; :func:`verdict_view` is the one place a verdict is put into a leaderboard's
words (the API's fields and the page's short text, with :meth:`PairVerdict.describe` as the whole sentence).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from genEval.comparisons.leaderboard import TABLE_SCORES, LeaderboardRow, MetricEntry
from genEval.scores.intervals import format_estimate
from genEval.scores.sequential import PairVerdict, points

__all__ = ["Score", "Standing", "verdict_view"]


@dataclass(frozen=True)
class Score:
    """A score in percent with its 95% interval ``[low, high]``; all None when the runs could not define it."""

    value: float | None = None
    low: float | None = None
    high: float | None = None

    @classmethod
    def of(cls, entry: MetricEntry | Mapping[str, Any] | None) -> Score:
        """From a library :class:`MetricEntry` or its stored dict (missing keys: None)."""
        if entry is None:
            return cls()
        get = entry.get if isinstance(entry, Mapping) else (lambda k: getattr(entry, k))
        return cls(get("value"), get("low"), get("high"))

    def to_dict(self) -> dict[str, float | None]:
        return {"value": self.value, "low": self.low, "high": self.high}

    def fmt(self, digits: int = 2) -> str:
        """``"value [low, high]"`` (:func:`genEval.scores.intervals.format_estimate`)."""
        return format_estimate(self, digits)


@dataclass(frozen=True)
class Standing:
    """One model's row: ``scores`` (score key -> :class:`Score`, in :data:`TABLE_SCORES` order; a row stored before
    a score existed lacks it), ``repetitions`` (or on a settled leaderboard the rounds run) and ``better_than``
    (score key -> names it is significantly better than; empty when not read). Settled only: ``rank`` ("2", or
    "2–3" tied with a neighbour whose pair is not ordered), ``sources`` per model and ``below``, the verdict on this
    row minus the next one (None for the last)."""

    name: str
    repetitions: int
    scores: dict[str, Score]
    better_than: dict[str, list[str]] = field(default_factory=dict)
    rank: str | None = None
    sources: int | None = None
    below: PairVerdict | None = None

    @classmethod
    def of(
        cls,
        row: LeaderboardRow,
        better_than: Mapping[str, Sequence[str]] | None = None,
        columns: Sequence[str] = TABLE_SCORES,
    ) -> Standing:
        """The standing of a comparison's ``row``: its ``columns`` as :class:`Score` and ``better_than``."""
        scores = {k: Score.of(row.scores.get(k)) for k in columns}
        return cls(row.model, int(row.repetitions), scores, {k: list(v) for k, v in (better_than or {}).items()})

    def value(self, key: str) -> float | None:
        """The value of score ``key`` (None: undefined, or not stored with this row)."""
        return self.scores[key].value if key in self.scores else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: scores as ``{value, low, high}``, ``below`` as :meth:`PairVerdict.to_dict`."""
        return {
            "name": self.name,
            "repetitions": self.repetitions,
            "scores": {k: s.to_dict() for k, s in self.scores.items()},
            "better_than": {k: list(v) for k, v in self.better_than.items()},
            "rank": self.rank,
            "sources": self.sources,
            "below": None if self.below is None else self.below.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Standing:
        """The inverse of :meth:`to_dict` (also reads a row stored without the settled keys)."""
        for key in ("name", "repetitions", "scores"):
            if key not in d:
                raise ValueError(f"a stored standing needs {key!r}; got the keys {sorted(d)}.")
        below = d.get("below")
        return cls(
            str(d["name"]),
            int(d["repetitions"]),
            {k: Score.of(v) for k, v in (d["scores"] or {}).items()},
            {k: list(v) for k, v in (d.get("better_than") or {}).items()},
            d.get("rank"),
            d.get("sources"),
            None if below is None else PairVerdict.from_dict(dict(below)),
        )


def verdict_view(v: PairVerdict, label: str) -> dict[str, Any]:
    """The verdict on a row and the one below it as a leaderboard shows it: the API's fields (``name`` of the row
    below, ``verdict``, ``difference``, ``low``/``high``, ``sources``, ``more_sources``/``more_kind``, ``reason``),
    ``text``, the settled column's short words, and ``title``, the whole sentence (``label``: the ranking score's
    name, e.g. ``FMR_v``)."""
    if v.verdict == "ordered":
        text = f"ordered above {v.b}"
    elif v.verdict == "equivalent":
        text = f"equivalent to {v.b} (within {points(v.margin)})"
    elif v.verdict == "resolved":
        text = f"tied with {v.b} (resolved: interval under {points(v.resolution)})"
    elif v.more_sources is not None:
        text = f"open vs {v.b}: ≈ {v.more_sources:,} more sources to {v.more_kind}"
    else:
        text = f"open vs {v.b} ({v.reason})" if v.reason else f"open vs {v.b}"
    return {
        "name": v.b,
        "verdict": v.verdict,
        "difference": v.value,
        "low": v.low,
        "high": v.high,
        "sources": v.n_sources,
        "more_sources": v.more_sources,
        "more_kind": v.more_kind,
        "reason": v.reason,
        "text": text,
        "title": v.describe(label) if v.metric else text,
    }
