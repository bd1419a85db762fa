"""How likely an open pair is to be settled by the rule's ``max_sources``, and after how many more (docs/comparing.md).

The first settled rule said "≈ N more sources at 80% power", with the observed difference taken as the truth. After a
first round of 200 sources that promise was kept in 11% to 91% of simulated pairs depending on the true gap: the
observed difference of a small gap is as often far above it as near it. One round cannot tell a 1-point gap from a
3-point one, and no single number made from it can be right for both (a predictive probability, which averages over what
the data allow, stated 73-86% for every gap from 0 to 6 points, where 2-100% happened: benchmarks/RESULTS.md). So
the statement is a **range**, as the data support it: the *conditional power* (the chance that the rule settles the
pair at one of its remaining looks, given the looks so far, if the true difference is ``theta``) for every
``theta`` in the pair's current interval, its smallest and largest value (``p_low``, ``p_high``), and the sources
after which the power reaches the rule's ``power`` at the most and the least favourable ``theta`` (``more_low``,
``more_high``; None: not within ``max_sources``). If the interval holds the truth, as it does at the rule's
confidence, the realised chance lies inside the range.

The future is simulated: for each ``theta`` of a grid over the interval (its ends, and 0 when it is inside),
:data:`PATHS` paths of the looks still to come (every ``round_sources`` until ``max_sources``), each adding the
estimate's Brownian increments ``N(step theta, step sd^2)`` (the spread taken as known) to the units so far, judged
with the rule's own boundary and running intersection (for alpha spending, the boundaries of the looks seen so far
and those planned). The paths are seeded, so the same data give the same statement.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Protocol

import numpy as np

#: Simulated futures per ``theta`` of the grid (the conditional powers' Monte Carlo error: below 5 points, 95%).
PATHS = 400
#: Points of the grid over the current interval.
GRID = 7
KINDS = ("order", "show equivalence", "resolve")


class Rule(Protocol):
    """What a forecast needs of the rule (:class:`genEval.scores.sequential.SequentialTest` has it)."""

    margin: float
    resolution: float
    power: float
    max_sources: int | None
    round_sources: int | None

    def critical(self, n: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class Forecast:
    """``p_low``..``p_high``: the conditional power by ``max_sources`` over the current interval; ``more_low``..
    ``more_high``: the sources per model more after which it reaches the rule's power at the most and the least
    favourable difference (``more_high`` None: not within ``max_sources`` there; both None: nowhere in the interval);
    ``kind``: how the most favourable one settles (:data:`KINDS`); ``reason``: why there is no forecast."""

    p_low: float | None
    p_high: float | None
    more_low: int | None = None
    more_high: int | None = None
    kind: str = ""
    reason: str = ""


def future_looks(n: np.ndarray, test: Rule) -> np.ndarray:
    """The units of the looks still to come: one every ``round_sources`` (else the mean round so far) while the
    pair has fewer than ``max_sources`` (the rounds ``stop=settled`` would still run)."""
    now = float(n[-1])
    step = float(test.round_sources or max(1.0, now / len(n)))
    count = int(np.ceil(max(0.0, float(test.max_sources) - now) / step))
    return now + step * np.arange(1, count + 1)


def _first_settled(
    theta: float, now: float, value: float, spread: float, future: np.ndarray, half: np.ndarray, held, test: Rule
) -> tuple[np.ndarray, np.ndarray]:
    """Per path, the index of the first future look that settles the pair (``len(future)``: none) and how (a code
    of :data:`KINDS`), if the true difference is ``theta``; ``held``: the running interval so far."""
    rng = np.random.default_rng(0)
    steps = np.diff(np.concatenate([[now], future]))
    est = (
        now * value + np.cumsum(rng.normal(steps * theta, np.sqrt(steps) * spread, (PATHS, len(future))), 1)
    ) / future
    lo, hi = np.full(PATHS, held[0]), np.full(PATHS, held[1])
    first, kind = np.full(PATHS, len(future)), np.full(PATHS, -1)
    for j in range(len(future)):
        new_lo, new_hi = np.maximum(lo, est[:, j] - half[j]), np.minimum(hi, est[:, j] + half[j])
        keep = new_lo <= new_hi  # a disjoint look leaves the running interval as it was, as the rule does
        lo, hi = np.where(keep, new_lo, lo), np.where(keep, new_hi, hi)
        codes = np.select(
            [
                (lo > 0) | (hi < 0),
                (test.margin > 0) & (lo >= -test.margin) & (hi <= test.margin),
                (test.resolution > 0) & (hi - lo < test.resolution),
            ],
            [0, 1, 2],
            -1,
        )
        newly = (first == len(future)) & (codes >= 0)
        first[newly], kind[newly] = j, codes[newly]
    return first, kind


def forecast(
    n: np.ndarray,
    d: np.ndarray,
    sd: np.ndarray,
    valid: np.ndarray,
    interval: tuple[float, float],
    held: tuple[float, float],
    test: Rule,
) -> Forecast:
    """The forecast of an open pair from its looks (``n``, ``d``, ``sd`` (L,) of
    :func:`genEval.scores.sequential.looks_of`; ``valid`` (L,): the looks that count), its current ``interval``
    (the range of differences the forecast covers) and its running interval ``held`` under ``test``."""
    if test.max_sources is None:
        return Forecast(None, None, reason="no forecast: the rule has no max_sources")
    future = future_looks(n, test)
    if not len(future):
        return Forecast(None, None, reason=f"max_sources={test.max_sources:,} reached")
    now, value, spread = float(n[-1]), float(d[-1]), float(sd[-1])
    half = test.critical(np.concatenate([n[valid], future]))[-len(future) :] * spread / np.sqrt(future)
    lo, hi = interval
    thetas = np.unique(np.concatenate([np.linspace(lo, hi, GRID), [0.0] if lo < 0 < hi else []]))
    power, needed, kinds = [], [], []
    for theta in thetas:
        first, kind = _first_settled(float(theta), now, value, spread, future, half, held, test)
        by = np.array([np.mean(first <= j) for j in range(len(future))])
        reach = np.nonzero(by >= test.power)[0]
        power.append(float(by[-1]))
        needed.append(None if not len(reach) else int(round(future[reach[0]] - now)))
        settled = kind[first <= (reach[0] if len(reach) else len(future))]
        kinds.append(Counter(settled[settled >= 0].tolist()).most_common(1))
    reached = [(m, i) for i, m in enumerate(needed) if m is not None]
    if not reached:
        return Forecast(min(power), max(power))
    more_low, best = min(reached)
    more_high = None if any(m is None for m in needed) else max(needed)
    return Forecast(min(power), max(power), more_low, more_high, KINDS[kinds[best][0][0]] if kinds[best] else "")
