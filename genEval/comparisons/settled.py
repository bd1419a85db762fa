"""Is a comparison's ranking settled? Verdicts on its adjacent pairs from the rounds it ran (docs/comparing.md).

Every repetition of a comparison is a *round*: fresh sources, the same for every model (paired). After the rounds so
far, the models are ordered by the ranking score pooled over every source unit of each (:func:`order_board`), and
each adjacent pair is judged on the rounds both of its models ran by the rule of :mod:`genEval.scores.sequential`
(``ordered``, ``equivalent`` within the margin, ``resolved`` at the resolution, or ``open`` with a forecast). A pair
whose verdict orders the lower model higher (the pooled values drifted after the verdict was reached: its warning
says the rounds disagree) is swapped, so that the order never contradicts a verdict. Models joined by a pair that is
not ordered share a tied rank ("2–3"). With ``familywise`` the ordered verdicts are Holm's step-down over the board's
adjacent pairs (Holm 1979), so the chance that *any* adjacent pair is wrongly ordered stays below 1 - confidence;
else the guarantee is per pair.

:func:`next_rounds` says which models run the next round: the models of open adjacent pairs, the one with the fewer
rounds of the two (both when even), while the pair has fewer than ``max_sources`` sources. ``stop=settled``
(:mod:`genEval.campaigns.rounds`) and the service's settled benchmarks
(:mod:`genEval.service.server.standings.settled`) both order, judge and queue with these functions, so they reach
the same verdicts on the same rounds, and a re-rank of stored rounds (``geneval compare 'runs=[...]'``) too.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

import numpy as np

from genEval.comparisons.loading import LoadedRun
from genEval.scores.definitions import SCORE, score_values
from genEval.scores.sequential import PairLooks, PairVerdict, SequentialTest, judge, pair_units, points, track

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Settled:
    """The verdicts of a comparison after ``rounds`` rounds (the most any model ran; ``sources`` per model at most;
    ``model_sources``: model -> the sources it ran on).

    ``order``: the models by the ranking ``score`` pooled over each model's rounds (``pooled``: model -> value),
    with no pair's verdict contradicted; ``pairs``: the verdict on each adjacent pair of ``order``; ``tied_ranks``:
    model -> its rank, or a range ("2–3") where an adjacent pair is not ordered; ``done``: every adjacent pair is
    settled; ``rule``: the filled :class:`~genEval.comparisons.settings.StopRule` as a dict; ``guarantee``: "per
    pair at 95%" or "family-wise at 95% ..."; ``rule_note``: what a re-rank with ``rule=override`` changed;
    ``stopped``: why a ``stop=settled`` run stopped (empty for a fixed design or a re-rank); ``reason``: why no
    verdicts were given (e.g. ``rank_by=er``)."""

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
    model_sources: dict[str, int] = field(default_factory=dict)
    guarantee: str = ""
    rule_note: str = ""

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
        """One sentence: settled or not, under which rule and guarantee, after how many sources."""
        label = SCORE[self.score].label if self.score in SCORE else self.score
        if self.reason:
            return f"settled ranking: not judged ({self.reason})"
        rule = self.rule
        state = (
            "every adjacent pair is settled"
            if self.done
            else f"{len(self.open_pairs)} of {len(self.pairs)} adjacent pairs still open"
        )
        how = (
            f"alpha spending ({rule.get('spending', 'obrien-fleming')} type) over {rule.get('max_sources'):,} sources"
            if rule.get("boundary") == "spending"
            else "anytime-valid confidence sequences"
        )
        tol = f"margin {points(rule.get('margin'))}" + (
            f", resolution {points(rule['resolution'])}" if rule.get("resolution") else ""
        )
        spent = sum(self.model_sources.values())
        used = f", {spent:,} model-sources in all" if spent and len(set(self.model_sources.values())) > 1 else ""
        return (
            f"settled ranking by {label} ({how}, {self.guarantee or guarantee_text(rule, len(self.pairs))}, {tol}) "
            f"after {self.rounds} round(s), {self.sources:,} sources per model{' at most' if used else ''}{used}: "
            f"{state}" + (f"; stopped: {self.stopped}" if self.stopped else "")
        )

    def notes(self) -> list[str]:
        """The headline, one line per adjacent pair and the warnings (summary, leaderboard.md, report)."""
        label = SCORE[self.score].label if self.score in SCORE else self.score
        order = " > ".join(f"{m} ({self.tied_ranks[m]})" for m in self.order)
        out = [self.headline(), *([self.rule_note] if self.rule_note else [])]
        if not self.reason:
            out.append(f"settled order: {order}")
            out += [p.describe(label) for p in self.pairs]
        return out + [f"WARNING: {w}" for w in self.warnings]


def guarantee_text(rule: Mapping[str, Any], pairs: int) -> str:
    """ "per pair at 95%" or "family-wise at 95% over the 7 adjacent pairs (Holm)"."""
    level = f"{100 * float(rule.get('confidence', 0.95)):.4g}%"
    if rule.get("familywise"):
        return f"family-wise at {level} over the {pairs} adjacent pair{'s' * (pairs != 1)} (Holm)"
    return f"per pair at {level}"


def tied_ranks(order: Sequence[K], pairs: Sequence[PairVerdict]) -> dict[K, str]:
    """Model -> rank in ``order``; models joined by an adjacent pair that is not ``ordered`` share the range of
    their ranks ("2–3")."""
    groups: list[list[K]] = []
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


# ------------------------------------------------------------------------------------------ the board
def settled_order(pooled: Mapping[K, float | None]) -> list[K]:
    """The keys of ``pooled`` by their pooled value, highest first; undefined ones last; ties in the mapping's
    order."""
    keys = list(pooled)
    return sorted(keys, key=lambda m: (pooled[m] is None, -(pooled[m] or 0.0), keys.index(m)))


def order_board(
    pooled: Mapping[K, float | None], verdict: Callable[[K, K], PairVerdict]
) -> tuple[list[K], list[PairVerdict]]:
    """The board's order and the verdict on each adjacent pair (``verdict(upper, lower)``: upper minus lower).

    By the pooled value (:func:`settled_order`), then every adjacent pair whose verdict orders the lower one higher
    is swapped and its new neighbours judged, until none is (a verdict, once reached, is kept even where the pooled
    values drifted past it: the order follows it)."""
    order = settled_order(pooled)
    for _ in range(len(order) ** 2 + 1):
        pairs = [verdict(a, b) for a, b in zip(order, order[1:])]
        wrong = next((i for i, p in enumerate(pairs) if p.verdict == "ordered" and p.higher == p.b), None)
        if wrong is None:
            break
        order[wrong], order[wrong + 1] = order[wrong + 1], order[wrong]
    return order, pairs


def holm(looks: Sequence[PairLooks], test: SequentialTest) -> list[PairVerdict]:
    """The verdicts on a board's adjacent pairs under Holm's step-down procedure (Holm 1979, "A simple sequentially
    rejective multiple test procedure"): with ``m`` pairs and ``r`` already ordered, the others are judged at level
    ``alpha / (m - r)``; a pair ordered at that level joins the ordered ones, until none does. Each pair is reported
    at the level it was ordered at, the rest at the last level. Every pair's own rule is valid at every look, so the
    chance that any of the ``m`` pairs is wrongly ordered at any look stays below ``alpha`` (a union bound over the
    ones whose difference is 0, as for Holm's fixed-sample procedure)."""
    m, alpha = len(looks), test.alpha
    level: dict[int, float] = {}
    while len(level) < m:
        step = alpha / (m - len(level))
        new = [i for i in range(m) if i not in level and _orders(looks[i], test.at(1.0 - step))]
        if not new:
            break
        level.update({i: step for i in new})
    last = alpha / (m - len(level)) if len(level) < m else alpha
    return [judge(looks[i], test.at(1.0 - level.get(i, last))) for i in range(m)]


def _orders(looks: PairLooks, test: SequentialTest) -> bool:
    """Whether the pair's running interval under ``test`` excludes 0 (the verdict without its forecast)."""
    if not len(looks.n):
        return False
    tr = track(looks.n, looks.d, looks.sd, test)
    return bool(tr.low[-1] > 0 or tr.high[-1] < 0)


def round_seed(base: int, r: int) -> int:
    """Round ``r``'s seed, derived from ``base`` (the same for every model of the round; independent of how many
    rounds run)."""
    return int(np.random.SeedSequence([int(base), int(r)]).generate_state(1)[0] & 0x7FFFFFFF)


def next_rounds(pairs: Sequence[PairVerdict], rounds: Mapping[str, int], max_sources: int) -> dict[str, int]:
    """Model -> the round it runs next: in each open adjacent pair (``pairs``, by model name) with fewer than
    ``max_sources`` sources, the model(s) with the rounds the pair shares (the one behind, or both when even);
    ``rounds``: model -> the rounds it ran (rounds ``0 .. rounds - 1``)."""
    out: dict[str, int] = {}
    for p in pairs:
        shared = min(rounds[p.a], rounds[p.b])
        if p.settled or p.n_sources >= max_sources:
            continue
        out.update({side: shared for side in (p.a, p.b) if rounds[side] == shared})
    return out


# ------------------------------------------------------------------------------------------ a comparison
def settle_comparison(
    runs: Mapping[str, Sequence[LoadedRun]],
    score: str,
    num_classes: int,
    test: SequentialTest,
    rule: Mapping[str, Any],
    fresh_sources: bool | None = None,
    stopped: str = "",
    rule_note: str = "",
) -> Settled:
    """The verdicts on the adjacent pairs of ``runs`` (model -> its repetitions = rounds ``0, 1, ...``) by ``score``
    under ``test``, the rule of ``rule`` (a filled :class:`~genEval.comparisons.settings.StopRule` as a dict,
    recorded with the verdicts). A pair is judged on the rounds both its models ran. ``fresh_sources``: whether the
    rounds drew different sources (False: the units repeat, and a warning says the verdicts assume otherwise).
    ``rule_note``: what a ``rule=override`` re-rank changed (shown with the verdicts)."""
    models = list(runs)
    rounds = {m: len(runs[m]) for m in models}
    spent = {m: int(sum(len(r.outcomes) for r in runs[m])) for m in models}
    common = dict(
        score=score, rounds=max(rounds.values()), sources=max(spent.values()), rule=dict(rule),
        fresh_sources=fresh_sources, model_sources=spent, rule_note=rule_note,
    )  # fmt: skip
    if score not in SCORE:
        why = f"rank_by={score} is fitted across models (not a per-source score): rank by a score for verdicts"
        return Settled(**common, order=models, pooled={}, pairs=[], tied_ranks={}, done=False, reason=why)
    totals = {m: sum(r.outcomes.totals() for r in runs[m]) for m in models}
    values = {m: float(score_values(t, num_classes, [score])[score]) for m, t in totals.items()}
    pooled = {m: (v if np.isfinite(v) else None) for m, v in values.items()}
    cache: dict[tuple[str, str], PairLooks] = {}

    def looks(a: str, b: str) -> PairLooks:
        if (a, b) not in cache:
            shared = range(min(rounds[a], rounds[b]))
            units = [pair_units(runs[a][r].outcomes, runs[b][r].outcomes) for r in shared]
            cache[a, b] = PairLooks.of(a, b, units, score, num_classes, test.safeguard)
        return cache[a, b]

    order, pairs = order_board(pooled, lambda a, b: judge(looks(a, b), test))
    if rule.get("familywise") and len(pairs) > 1:
        pairs = holm([looks(a, b) for a, b in zip(order, order[1:])], test)
    warnings = [f"{p.a} vs {p.b}: {w}" for p in pairs for w in p.warnings]
    if fresh_sources is False and max(rounds.values()) > 1:
        warnings.append(
            "the rounds evaluated the same source images, but the verdicts assume fresh sources per round "
            "(data.subset=random with data.limit): they overstate the evidence here"
        )
    return Settled(
        **common,
        order=order,
        pooled=pooled,
        pairs=pairs,
        tied_ranks=tied_ranks(order, pairs),
        done=all(p.settled for p in pairs),
        stopped=stopped,
        warnings=warnings,
        guarantee=guarantee_text(rule, len(pairs)),
    )
