"""Anytime-valid comparison of two models from rounds of fresh, paired sources (issue 33).

A dynamic benchmark can keep drawing sources, so a comparison may *look* after every round and stop when the order
of two models is known. A fixed-design interval (the bootstrap of :mod:`genEval.scores.intervals`) used that way
inflates false orderings: with equal models and 50 looks, a 95% interval excludes 0 at some look in about a quarter
of the comparisons (``tests/test_sequential.py`` shows it). This module gives intervals that hold at *every* look.

**Method: asymptotic confidence sequences** (Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas, "Time-uniform central
limit theory and asymptotic confidence sequences", Annals of Statistics 2024; arXiv 2103.06476, Theorem 2.2, the
Robbins normal-mixture boundary). A ranking score is a ratio of column sums (FMR_v = 100 PA / SA_v = 100
sum(validated & perturbed correct) / sum(validated & clean correct); :mod:`genEval.scores.definitions`), hence a
smooth function ``g`` of the mean column vector over source units. The difference ``d = g(m_a) - g(m_b)`` of two
models evaluated on the *same* sources (paired) is estimated by the plug-in ``d_n``, whose influence per source is
``psi_i = J_a (x_ia - m_a) - J_b (x_ib - m_b)`` (``J`` the gradient of ``g``: the delta method). With ``sigma_n``
the standard deviation of ``psi`` (with one pseudo-unit at the largest possible influence, so that a look where every
unit agrees, or a rare outcome was seen once, is not read as certainty: :func:`looks_of`), the sequence::

    d_n +- sigma_n * sqrt( 2 (n eta^2 + 1) / (n^2 eta^2) * log( sqrt(n eta^2 + 1) / alpha ) )

covers ``d`` at every ``n`` simultaneously with probability >= 1 - alpha, asymptotically (the paper's Theorem 2.2;
``eta`` the mixture's width on the standardised scale, chosen to make the sequence tightest at ``n = t_star``
sources: ``eta^2 = (-2 log alpha + log(-2 log alpha + 1)) / t_star``, their eq. (13)). Any stopping rule may then
look after every round; the running intersection of the intervals is also a confidence sequence, so a verdict,
once reached, never flips back. Why not a betting sequence: those are exact for *means of bounded* paired
differences (Waudby-Smith & Ramdas, JRSS-B 2024), but FMR_v is a ratio of two means, not a mean; the asymptotic
sequence covers every score of the leaderboard with one rule. The guarantee is per pair (not family-wise).

A unit is one source image in one round (a round draws fresh sources; the same image drawn again in a later round
is a new unit, with new start noise). Verdicts (:class:`PairVerdict`): ``ordered`` when the interval excludes 0,
``equivalent`` when it lies within ``[-margin, margin]``, else ``open``, with the sources per model that would settle
an open pair at ``power`` (:meth:`SequentialTest.sources_to_settle`: the observed difference and spread taken as the
truth, the smallest ``N`` with ``|d| >= sigma (w(N) + z_power / sqrt(N))``, ``w`` the boundary above).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from genEval.interfaces import SettingError
from genEval.scores.definitions import score_values
from genEval.scores.intervals import source_sums
from genEval.scores.outcomes import COLUMNS, Outcomes

#: Before this many source units no verdict is given: the sequence rests on a central limit theorem and a variance
#: estimated from the units, which a few dozen binary outcomes do not yet pin down.
MIN_UNITS = 30
#: Sources to settle a pair are searched up to this; beyond it the estimate says "more than".
MAX_SOURCES_ESTIMATE = 10**9
VERDICTS = ("ordered", "equivalent", "open")


@dataclass(frozen=True)
class SequentialTest:
    """The anytime-valid rule: ``confidence`` (1 - alpha, per pair), the equivalence ``margin`` (points of the
    score; 0 = no equivalence verdict), ``t_star`` (sources per model where the sequence is tightest; fixed before
    any data, e.g. from the design's round and maximum sizes) and the ``power`` the sources-needed estimate aims at."""

    confidence: float = 0.95
    margin: float = 1.0
    t_star: float = 1000.0
    power: float = 0.8

    def __post_init__(self) -> None:
        for name, low, high, allowed, example in (
            ("confidence", 0, 1, "a number in (0, 1)", "0.95"),
            ("margin", 0, math.inf, "a number of points >= 0 (0: no equivalence verdict)", "1"),
            ("t_star", 1, math.inf, "a number of sources >= 1", "1000"),
            ("power", 0.5, 1, "a number in [0.5, 1)", "0.8"),
        ):
            v = getattr(self, name)
            number = isinstance(v, (int, float)) and not isinstance(v, bool)
            if not number or not (low <= v < high) or (name == "confidence" and v == 0):
                raise SettingError(name, v, allowed, example, "the sequential comparison, genEval/scores/sequential.py")

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence

    @property
    def eta2(self) -> float:
        """The normal mixture's variance on the standardised scale, tightest at ``t_star`` (paper eq. 13)."""
        la = -2.0 * math.log(self.alpha)
        return (la + math.log(la + 1.0)) / self.t_star

    def width(self, n: np.ndarray | float) -> np.ndarray:
        """Half-width of the sequence per unit standard deviation after ``n`` units: ``w(n)`` (0 < w, decreasing
        for large n); multiply by ``sigma_n``."""
        n = np.asarray(n, dtype=float)
        e = self.eta2
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.sqrt(2.0 * (n * e + 1.0) / (n * n * e) * np.log(np.sqrt(n * e + 1.0) / self.alpha))

    def sources_to_settle(self, diff: float, sd: float) -> tuple[int | None, str]:
        """Sources per model (in all) at which a pair with true difference ``diff`` and influence spread ``sd``
        is settled with probability ``power``, and how: ``order`` it, or (``|diff| < margin``) ``show equivalence``,
        whichever needs fewer; ``(None, kind)`` when neither is within :data:`MAX_SOURCES_ESTIMATE` (e.g. an
        observed difference of exactly 0 and no margin)."""
        targets = {"order": abs(diff)}
        if self.margin > 0 and abs(diff) < self.margin:
            targets["show equivalence"] = self.margin - abs(diff)
        found = [(n, kind) for kind, target in targets.items() if (n := self._sources_for(target, sd)) is not None]
        return min(found) if found else (None, next(iter(targets)))

    def _sources_for(self, target: float, sd: float) -> int | None:
        """The smallest n with ``sd (w(n) + z_power / sqrt(n)) <= target``: the sequence's half-width plus the
        estimate's own spread at the rule's power fit within ``target``."""
        from scipy.stats import norm  # slow import, kept off the command line's start

        if target <= 0:
            return None
        if sd <= 0:
            return MIN_UNITS
        z = float(norm.ppf(self.power))

        def settled(n: int) -> bool:
            return bool(sd * (self.width(n) + z / math.sqrt(n)) <= target)

        if not settled(MAX_SOURCES_ESTIMATE):
            return None
        if settled(MIN_UNITS):
            return MIN_UNITS
        lo, hi = MIN_UNITS, MAX_SOURCES_ESTIMATE  # the bound shrinks with n beyond its first few units: bisect
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if settled(mid) else (mid, hi)
        return hi


@dataclass(frozen=True)
class PairVerdict:
    """Score ``metric`` of ``a`` minus that of ``b`` (points, pooled over every unit so far) after ``looks``
    rounds and ``n_sources`` paired source units, with the anytime-valid interval ``[low, high]`` (running
    intersection over the looks), the influence spread ``sd``, the ``verdict`` and, for an open pair, the
    ``more_sources`` per model that would settle it at the rule's power (``more_kind``: "order" or "show
    equivalence"; None: more than :data:`MAX_SOURCES_ESTIMATE`, or ``reason`` says why not)."""

    a: str
    b: str
    metric: str
    value: float | None
    low: float | None
    high: float | None
    n_sources: int
    looks: int
    sd: float | None
    verdict: str
    confidence: float
    margin: float
    more_sources: int | None = None
    more_kind: str = ""
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> PairVerdict:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    @property
    def settled(self) -> bool:
        return self.verdict in ("ordered", "equivalent")

    def describe(self, label: str) -> str:
        """One line, e.g. "resnet20 vs resnet44: open after 200 sources, ≈ 1,400 more to order at 80% power"."""
        head = f"{self.a} vs {self.b}: {label} difference "
        if self.value is None:
            return head + f"undefined ({self.reason})"
        iv = f"{self.value:+.2f} [{self.low:+.2f}, {self.high:+.2f}]" if self.low is not None else f"{self.value:+.2f}"
        head += f"{iv} after {self.n_sources:,} sources ({self.looks} looks)"
        if self.verdict == "ordered":
            return head + f": ordered ({self.a if self.value > 0 else self.b} higher)"
        if self.verdict == "equivalent":
            return head + f": equivalent within {points(self.margin)}"
        if self.more_sources is not None:
            return head + f": open, ≈ {self.more_sources:,} more to {self.more_kind} at the rule's power"
        return head + f": open ({self.reason or 'no estimate of the sources needed'})"


def points(x: float) -> str:
    """``1 point``, ``0.5 points``, ``2 points``."""
    return f"{x:g} point" + ("" if x == 1 else "s")


def _moments(units: np.ndarray) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(count, column sums (P,), outer-product sums (P, P), column minima and maxima (P,)) of units (U, P)."""
    if not len(units):
        return 0, units.sum(0), units.T @ units, np.full(units.shape[1], np.inf), np.full(units.shape[1], -np.inf)
    return units.shape[0], units.sum(0), units.T @ units, units.min(0), units.max(0)


def pair_units(a: Outcomes, b: Outcomes) -> np.ndarray:
    """One round of two models as paired units: (U, 2 * len(COLUMNS)) per-source column sums, ``a``'s columns then
    ``b``'s (a source only one of them saw has zeros for the other)."""
    sums = source_sums([a, b])  # (2, U, K) over the union of their source ids
    return np.concatenate([sums[0], sums[1]], axis=1)


def _gradient(mean: np.ndarray, key: str, num_classes: int, h: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """The score and its gradient in the mean columns, vectorised: ``mean`` (L, K) -> (L,), (L, K); forward
    differences (the score is a ratio of sums, smooth where defined; NaN where undefined)."""
    k = mean.shape[-1]
    shifted = mean[:, None, :] + h * np.eye(k)[None]  # (L, K, K)
    base = score_values(mean, num_classes, [key])[key]
    moved = score_values(shifted, num_classes, [key])[key]  # (L, K)
    return base, (moved - base[:, None]) / h


def looks_of(rounds: Sequence[np.ndarray], key: str, num_classes: int) -> tuple[np.ndarray, ...]:
    """After each round (cumulative): units ``n`` (L,), difference ``d`` (L,) and influence spread ``sd`` (L,) of
    ``key`` for paired units per round ``rounds`` [(U_r, 2K)].

    ``sd`` includes one pseudo-unit at the largest influence a unit can have, every column anywhere in the range it
    took so far (``sum_k |J_k| max(high_k - m_k, m_k - low_k)`` over both models): a look where every unit agrees
    (two models with the same decisions on the first 60 sources) has a sample variance of 0, and one where a rare
    outcome was seen once (one disagreement in 600 sources) a variance far below its uncertainty, both of which
    would read as certainty. The pseudo-unit keeps them honest, and its weight vanishes as 1 / n (the estimate stays
    consistent, as the sequence requires); measured cost: 3-5% more sources to settle a pair (benchmarks/RESULTS.md)."""
    k = len(COLUMNS)
    rounds = [np.asarray(u, dtype=float).reshape(-1, 2 * k) for u in rounds]
    counts, s1, s2, lows, highs = zip(*(_moments(u) for u in rounds))
    n = np.cumsum(counts).astype(float)
    m = np.cumsum(np.stack(s1), 0) / np.maximum(n, 1)[:, None]  # (L, 2K)
    cov = np.cumsum(np.stack(s2), 0) / np.maximum(n, 1)[:, None, None] - m[:, :, None] * m[:, None, :]
    ga, ja = _gradient(m[:, :k], key, num_classes)
    gb, jb = _gradient(m[:, k:], key, num_classes)
    j = np.concatenate([ja, -jb], axis=1)  # (L, 2K): the influence of a unit is j . (x - m)
    var = np.maximum(np.einsum("lp,lpq,lq->l", j, cov, j), 0.0)
    low, high = np.minimum.accumulate(np.stack(lows), 0), np.maximum.accumulate(np.stack(highs), 0)
    with np.errstate(invalid="ignore"):
        worst = np.nansum(np.abs(j) * np.maximum(high - m, m - low), axis=1)
    var = (n * var + worst**2) / (n + 1.0)
    return n, ga - gb, np.sqrt(var)


def running_bounds(n: np.ndarray, d: np.ndarray, sd: np.ndarray, test: SequentialTest) -> tuple[np.ndarray, ...]:
    """The anytime-valid interval after each look, intersected with the earlier looks' (``-inf, inf`` until
    :data:`MIN_UNITS` units with a defined difference and a spread above 0: a look where both models gave one
    outcome on every source judges nothing): ``low`` (L,), ``high`` (L,) from :func:`looks_of`'s ``n``, ``d``,
    ``sd``. A look whose interval is disjoint from the running one (the sequence's assumptions failed) restarts the
    intersection from that look rather than giving an empty interval."""
    low, high = np.full(len(n), -np.inf), np.full(len(n), np.inf)
    lo, hi = -np.inf, np.inf
    for t in range(len(n)):
        if n[t] >= MIN_UNITS and np.isfinite(d[t]) and np.isfinite(sd[t]) and sd[t] > 0:
            half = sd[t] * float(test.width(n[t]))
            lo_t, hi_t = d[t] - half, d[t] + half
            lo, hi = (lo_t, hi_t) if max(lo, lo_t) > min(hi, hi_t) else (max(lo, lo_t), min(hi, hi_t))
        low[t], high[t] = lo, hi
    return low, high


def verdict_of(low: float, high: float, margin: float) -> str:
    """``ordered`` when ``[low, high]`` excludes 0, ``equivalent`` when it lies within ``[-margin, margin]``
    (margin > 0), else ``open``."""
    if low > 0 or high < 0:
        return "ordered"
    if margin > 0 and -margin <= low and high <= margin:
        return "equivalent"
    return "open"


def settle_pair(
    a: str, b: str, rounds: Sequence[np.ndarray], key: str, num_classes: int, test: SequentialTest
) -> PairVerdict:
    """The verdict on ``a`` vs ``b`` by score ``key`` after every round of paired units ``rounds`` [(U_r, 2K)]:
    the anytime-valid interval at each look, intersected over the looks (see the module docstring)."""
    conf, margin = test.confidence, test.margin
    if not rounds:
        return PairVerdict(a, b, key, None, None, None, 0, 0, None, "open", conf, margin, reason="no rounds")
    n, d, sd = looks_of(rounds, key, num_classes)
    low, high = (float(x[-1]) for x in running_bounds(n, d, sd, test))
    units, looks = int(n[-1]), len(n)
    if not np.isfinite(d[-1]):
        why = "the score is undefined for one of the two models"
        return PairVerdict(a, b, key, None, None, None, units, looks, None, "open", conf, margin, reason=why)
    value, spread = float(d[-1]), float(sd[-1])
    if not np.isfinite(low):
        why = (
            f"fewer than {MIN_UNITS} paired sources (too few for the sequence's central limit theorem), or every "
            "source so far gave both models one outcome (no spread to judge by)"
        )
        return PairVerdict(a, b, key, value, None, None, units, looks, spread, "open", conf, margin, reason=why)
    verdict = verdict_of(low, high, margin)
    more, kind, why = None, "", ""
    if verdict == "open":
        total, kind = test.sources_to_settle(value, spread)
        more = None if total is None else max(total - units, 1)
        why = "" if more is not None else f"not within {MAX_SOURCES_ESTIMATE:,} sources at the observed difference"
    return PairVerdict(a, b, key, value, low, high, units, looks, spread, verdict, conf, margin, more, kind, why)
