"""Is a comparison's ranking settled? Verdicts on its adjacent pairs from the rounds it ran (issue 33).

Every repetition of a comparison is a *round*: fresh sources, the same for every model (paired). After the rounds so
far, :func:`settle_comparison` orders the models by the ranking score pooled over every source unit, and judges each
adjacent pair with the anytime-valid rule of :mod:`genEval.scores.sequential` (``ordered``, ``equivalent`` within the
margin, or ``open`` with the sources that would settle it). Models joined by an open or equivalent pair share a tied
rank ("2–3"). The rule is valid at every look, so ``stop=settled`` (:mod:`genEval.comparisons.rounds`) may look after
every round, and a re-rank of stored rounds (``geneval compare 'runs=[...]'``) reaches the same verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from genEval.comparisons.loading import LoadedRun
from genEval.scores.definitions import SCORE, score_values
from genEval.scores.sequential import PairVerdict, SequentialTest, pair_units, points, settle_pair


@dataclass(frozen=True)
class Settled:
    """The verdicts of a comparison after ``rounds`` rounds (``sources`` per model in all).

    ``order``: the models by the ranking ``score`` pooled over all rounds (``pooled``: model -> value); ``pairs``:
    the verdict on each adjacent pair of ``order``; ``tied_ranks``: model -> its rank, or a range ("2–3") where an
    adjacent pair is open or equivalent; ``done``: every adjacent pair is ordered or equivalent; ``rule``: the
    filled :class:`~genEval.comparisons.settings.StopRule` as a dict; ``stopped``: why a ``stop=settled`` run
    stopped (empty for a fixed design or a re-rank); ``reason``: why no verdicts were given (e.g. ``rank_by=er``)."""

    score: str
    rounds: int
    sources: int
    order: list[str]
    pooled: dict[str, float | None]
    pairs: list[PairVerdict]
    tied_ranks: dict[str, str]
    done: bool
    rule: dict[str, Any]
    fresh_sources: bool | None = None
    stopped: str = ""
    reason: str = ""
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {**asdict(self), "pairs": [p.to_dict() for p in self.pairs]}

    @classmethod
    def from_dict(cls, d: Mapping) -> Settled:
        fields = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**{**fields, "pairs": [PairVerdict.from_dict(p) for p in d.get("pairs", [])]})

    @property
    def open_pairs(self) -> list[PairVerdict]:
        return [p for p in self.pairs if not p.settled]

    def headline(self) -> str:
        """One sentence: settled or not, after how many sources."""
        label = SCORE[self.score].label if self.score in SCORE else self.score
        if self.reason:
            return f"settled ranking: not judged ({self.reason})"
        conf = self.rule.get("confidence")
        state = (
            "every adjacent pair is ordered or equivalent"
            if self.done
            else f"{len(self.open_pairs)} of {len(self.pairs)} adjacent pairs still open"
        )
        return (
            f"settled ranking by {label} (anytime-valid {conf:.0%} confidence sequences, margin "
            f"{points(self.rule.get('margin'))}) after {self.rounds} round(s), {self.sources:,} sources per model: "
            f"{state}" + (f"; stopped: {self.stopped}" if self.stopped else "")
        )

    def notes(self) -> list[str]:
        """The headline, one line per adjacent pair and the warnings (summary, leaderboard.md, report)."""
        label = SCORE[self.score].label if self.score in SCORE else self.score
        order = " > ".join(f"{m} ({self.tied_ranks[m]})" for m in self.order)
        out = [self.headline()]
        if not self.reason:
            out.append(f"settled order: {order}")
            out += [p.describe(label) for p in self.pairs]
        return out + [f"WARNING: {w}" for w in self.warnings]


def tied_ranks(order: Sequence[str], pairs: Sequence[PairVerdict]) -> dict[str, str]:
    """Model -> rank in ``order``; models joined by an adjacent pair that is not ``ordered`` share the range of
    their ranks ("2–3")."""
    groups: list[list[str]] = []
    for i, m in enumerate(order):
        if i and pairs[i - 1].verdict != "ordered":
            groups[-1].append(m)
        else:
            groups.append([m])
    out, start = {}, 1
    for g in groups:
        end = start + len(g) - 1
        for m in g:
            out[m] = str(start) if start == end else f"{start}–{end}"
        start = end + 1
    return out


def settle_comparison(
    runs: Mapping[str, Sequence[LoadedRun]],
    score: str,
    num_classes: int,
    test: SequentialTest,
    rule: Mapping[str, Any],
    fresh_sources: bool | None = None,
    stopped: str = "",
) -> Settled:
    """The verdicts on the adjacent pairs of ``runs`` (model -> its repetitions = rounds, in order) by ``score``
    under the anytime-valid ``test`` of the stop rule ``rule`` (a filled
    :class:`~genEval.comparisons.settings.StopRule` as a dict, recorded with the verdicts). Rounds beyond the
    fewest any model has are left out. ``fresh_sources``: whether the rounds drew different sources (False: the
    sequence's units repeat, and a warning says the verdicts assume otherwise)."""
    rounds = min(len(reps) for reps in runs.values())
    models = list(runs)
    sources = int(sum(len(runs[models[0]][r].outcomes) for r in range(rounds)))
    common = dict(score=score, rounds=rounds, sources=sources, rule=dict(rule), fresh_sources=fresh_sources)
    if score not in SCORE:
        why = f"rank_by={score} is fitted across models (not a per-source score): rank by a score for verdicts"
        return Settled(**common, order=models, pooled={}, pairs=[], tied_ranks={}, done=False, reason=why)
    totals = {m: sum(runs[m][r].outcomes.totals() for r in range(rounds)) for m in models}
    values = {m: float(score_values(t, num_classes, [score])[score]) for m, t in totals.items()}
    pooled = {m: (v if np.isfinite(v) else None) for m, v in values.items()}
    order = sorted(models, key=lambda m: (pooled[m] is None, -(pooled[m] or 0.0), models.index(m)))
    pairs = [
        settle_pair(
            a,
            b,
            [pair_units(runs[a][r].outcomes, runs[b][r].outcomes) for r in range(rounds)],
            score,
            num_classes,
            test,
        )
        for a, b in zip(order, order[1:])
    ]
    warnings = []
    if fresh_sources is False and rounds > 1:
        warnings.append(
            "the rounds evaluated the same source images, but the anytime-valid verdicts assume fresh sources per "
            "round (data.subset=random with data.limit): they overstate the evidence here"
        )
    done = all(p.settled for p in pairs)
    return Settled(
        **common,
        order=order,
        pooled=pooled,
        pairs=pairs,
        tied_ranks=tied_ranks(order, pairs),
        done=done,
        stopped=stopped,
        warnings=warnings,
    )
