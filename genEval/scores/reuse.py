"""How often a test set may be reused: model similarity and the number of models whose scores stay within epsilon
(S4: J. Miller, *Validity Challenges in Machine Learning Benchmarks*, PhD thesis 2022, ch. 3 and App. 3.8;
docs/scores.md, "Reuse budget").

Every model evaluated on the same ``n`` test points asks one query: its 0-1 loss ``q(z)`` per point. The chance
that some of ``k`` models' test errors lie ``epsilon`` or more from their population errors (3.1) is bounded

* by the union bound (3.2) over both tails: ``k * (P(Bin(n, p) >= n(p + eps)) + P(Bin(n, p) < n(p - eps)))``;
  :func:`union_bound_models` is the largest ``k`` with that at most ``delta`` (the thesis's worked number:
  n = 50,000, p = 0.244, eps = 0.01, delta = 0.05 gives k = 257,397);
* by the similarity union bound (3.3) with the exact pairwise tail (3.8): two queries with error ``p`` and
  correctness agreement ``eta = P(q1(z) = q2(z))`` are coupled as ``(X1 W, X2 W)`` with independent Bernoullis
  (App. 3.8), which gives ``P(S_i >= a, S_1 <= m - 1)`` as a sum over the count of ``W``; the bound is optimised
  over the threshold ``t`` (here over every whole count between ``n p`` and ``n(p + eps)``, per tail) instead of
  the thesis's binary search. :func:`similarity_bound_models`;
* under the Naive-Bayes assumption A1 (every model errs only on the "hard" points, ``W = 1``, and independently
  there), exactly: :func:`naive_bayes_models`.

Similar models (``eta`` well above the independence baseline ``p1 p2 + (1 - p1)(1 - p2)``) can be tested more
often. :func:`reuse_budget` estimates ``eta`` and ``p`` from the models' per-source correctness on shared points
and says how many further models the similarity bound allows. The binomial tails are ``scipy.stats.binom``'s
(beta functions, as the thesis computes them); no library computes these bounds, so they are written here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: Defaults of a reuse budget: standings within 1 point (the settled rule's default margin) at 95%.
EPSILON, DELTA = 0.01, 0.05
#: Whole counts of the optimised threshold tried per tail at most (evenly spaced, always with both ends).
MAX_THRESHOLDS = 400
#: The largest number of models the bounds report (the Naive-Bayes bound grows without end as eta -> 1).
MAX_MODELS = 10**15


def _counts(n: int, p: float, eps: float) -> tuple[int, int]:
    """``a``: the least count with ``S/n - p >= eps``; ``b``: the largest with ``S/n - p < -eps`` (the left tail is
    strict, as the thesis's 257,397 needs). A tolerance absorbs the float error of ``n (p +- eps)``."""
    a = math.ceil(n * (p + eps) - 1e-9)
    b = math.ceil(n * (p - eps) - 1e-9) - 1
    return a, b


def deviation_probability(n: int, p: float, eps: float) -> float:
    """``P(|Bin(n, p)/n - p| >= eps)`` (right tail inclusive, left tail strict, :func:`_counts`)."""
    from scipy.stats import binom  # slow import (about 0.8 s)

    a, b = _counts(n, p, eps)
    return float(binom.sf(a - 1, n, p) + (binom.cdf(b, n, p) if b >= 0 else 0.0))


def union_bound_models(n: int, p: float, eps: float = EPSILON, delta: float = DELTA) -> int:
    """The largest number of models the union bound (3.2) allows: ``floor(delta / P(|S/n - p| >= eps))``."""
    _check(n, p, 1.0, eps, delta)
    tail = deviation_probability(n, p, eps)
    return MAX_MODELS if tail <= 0 else min(MAX_MODELS, int(math.floor(delta / tail)))


def independence_agreement(p1: float, p2: float) -> float:
    """The correctness agreement of two models with error rates ``p1``, ``p2`` that err independently."""
    return p1 * p2 + (1 - p1) * (1 - p2)


def _coupling(p: float, eta: float) -> tuple[float, float] | None:
    """(P(X = 1), P(W = 1)) of App. 3.8's coupling for two queries of error ``p`` and agreement ``eta``; None when
    it does not exist (``eta`` below the independence baseline: the models err less alike than independently)."""
    p11 = (2 * p + eta - 1) / 2
    if p11 <= 0 or p11 < p * p - 1e-15:
        return None
    x = p11 / p  # P(X1 = 1) = p11 / (p01 + p11), p01 + p11 = p
    return x, min(1.0, p * p / p11)


def _check(n: Any, p: Any, eta: Any, eps: Any, delta: Any) -> None:
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a whole number of test points >= 1, got {n!r}.")
    for name, v, lo, hi in (("p", p, 0, 1), ("eta", eta, 0, 1), ("epsilon", eps, 0, 1), ("delta", delta, 0, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
            raise ValueError(f"{name} must be a number in [{lo}, {hi}], got {v!r}.")
    if not 0 < eps or not 0 < delta:
        raise ValueError(f"epsilon and delta must be above 0, got {eps!r} and {delta!r}.")


def _pair_tails(n: int, x: float, pw: float, a: int, bounds: np.ndarray) -> np.ndarray:
    """``P(S_i >= a, S_1 <= m)`` for every ``m`` of ``bounds`` under the coupling (``x``, ``pw``), App. 3.8 (3.8):
    ``sum_j Bin(n, pw)(j) P(Bin(j, x) >= a) P(Bin(j, x) <= m)``."""
    from scipy.stats import binom

    mean, sd = n * pw, math.sqrt(max(n * pw * (1 - pw), 1e-12))
    j = np.arange(max(0, int(mean - 12 * sd) - 1), min(n, int(mean + 12 * sd) + 2) + 1)  # the mass of Bin(n, pw)
    w = binom.pmf(j, n, pw) * binom.sf(a - 1, j, x)
    keep = w > 0
    j, w = j[keep], w[keep]
    return np.array([float(np.dot(w, binom.cdf(m, j, x))) for m in bounds])


def similarity_bound_models(n: int, p: float, eta: float, eps: float = EPSILON, delta: float = DELTA) -> int:
    """The largest number of models of error ``p`` and pairwise correctness agreement at least ``eta`` that the
    similarity union bound (3.3, with 3.8) allows: every test error within ``eps`` of its population error at
    ``1 - delta``. Per tail, ``P(U E_i) <= P(S_1 beyond m) + (k - 1) P(E_i, S_1 not beyond m)`` for the best
    threshold ``m``; below the independence baseline it is the union bound."""
    _check(n, p, eta, eps, delta)
    coupled = _coupling(p, eta)
    if coupled is None or p in (0.0, 1.0):
        return union_bound_models(n, p, eps, delta)
    from scipy.stats import binom

    x, pw = coupled
    a, b = _counts(n, p, eps)
    centre = n * p

    def grid(lo: int, hi: int) -> np.ndarray:
        if hi <= lo:
            return np.array([lo])
        return np.unique(np.linspace(lo, hi, min(MAX_THRESHOLDS, hi - lo + 1)).round().astype(int))

    # upper tail: thresholds m in [ceil(np), a]; first term P(S_1 >= m), pair term P(S_i >= a, S_1 <= m - 1)
    up = grid(math.ceil(centre), a)
    first_up = binom.sf(up - 1, n, p)
    pair_up = _pair_tails(n, x, pw, a, up - 1)
    # lower tail, on the correctness 1 - q (error 1 - p, the same agreement): P(S_i <= b) is the count of
    # correct answers C_i >= n - b, and "S_1 not below m'" is C_1 <= n - m'
    lo = grid(b, math.floor(centre))
    first_lo = binom.cdf(lo, n, p) if b >= 0 else np.zeros(len(lo))
    flipped = _coupling(1 - p, eta)
    if b < 0 or flipped is None:
        pair_lo = np.zeros(len(lo))
    else:
        pair_lo = _pair_tails(n, flipped[0], flipped[1], n - b, n - lo - 1)
    best = 1
    for fu, pu in zip(first_up, pair_up):
        room = delta - fu - first_lo  # (L,)
        pair = pu + pair_lo
        with np.errstate(divide="ignore", invalid="ignore"):
            k = np.where(room >= 0, np.where(pair > 0, 1 + np.floor(room / pair), MAX_MODELS), 0)
        best = max(best, int(min(MAX_MODELS, np.max(k))))
    return min(best, MAX_MODELS) if best > 1 or delta >= deviation_probability(n, p, eps) else 0


def naive_bayes_models(n: int, p: float, eta: float, eps: float = EPSILON, delta: float = DELTA) -> int:
    """The largest number of models allowed under the Naive-Bayes assumption A1 (App. 3.8): ``P(max_i |S_i/n - p|
    >= eps) = sum_j Bin(n, p_w)(j) [1 - (1 - a_j)^k]``, ``a_j = P(|Bin(j, p_x)/n - p| >= eps)``, with
    ``p_x = 1 - (1 - eta)/(2p)`` and ``p_w = p / p_x``; the union bound below the independence baseline."""
    _check(n, p, eta, eps, delta)
    px = 1 - (1 - eta) / (2 * p) if p > 0 else 0.0
    if p in (0.0, 1.0) or px < p or px > 1:
        return union_bound_models(n, p, eps, delta)
    from scipy.stats import binom

    pw = p / px
    a, b = _counts(n, p, eps)
    mean, sd = n * pw, math.sqrt(max(n * pw * (1 - pw), 1e-12))
    j = np.arange(max(0, int(mean - 12 * sd) - 1), min(n, int(mean + 12 * sd) + 2) + 1)
    weight = binom.pmf(j, n, pw)
    aj = binom.sf(a - 1, j, px) + (binom.cdf(b, j, px) if b >= 0 else 0.0)

    def failure(k: float) -> float:
        with np.errstate(divide="ignore"):  # a_j = 1: log1p(-1) = -inf, and the term is 1, as it should
            return float(np.dot(weight, -np.expm1(k * np.log1p(-aj))))

    if failure(1) > delta:
        return 0
    lo, hi = 1, MAX_MODELS  # failure(lo) <= delta < failure(hi); failure grows with k
    if failure(hi) <= delta:
        return MAX_MODELS
    while hi - lo > 1:  # bisection, geometric while the bracket is wide
        mid = math.isqrt(lo * hi) if hi > 4 * lo else (lo + hi) // 2
        mid = min(max(mid, lo + 1), hi - 1)
        lo, hi = (mid, hi) if failure(mid) <= delta else (lo, mid)
    return lo


# ------------------------------------------------------------------------------------------ a budget
@dataclass(frozen=True)
class ReuseBudget:
    """How many more models a shared test set may take (see the module docstring): from ``models`` models on at
    least ``n_sources`` shared points, the mean correctness agreement ``eta`` over their pairs (and
    ``eta_independent``, what independent errors would give), the mean error rate ``error_rate``, and at
    ``epsilon`` / ``delta`` the models the union, similarity and Naive-Bayes bounds allow. ``submissions_left`` =
    the similarity bound minus the models already tested (0: ``spent``)."""

    eta: float | None
    eta_independent: float | None
    error_rate: float | None
    n_sources: int
    models: int
    epsilon: float
    delta: float
    union_bound: int | None
    similarity_bound: int | None
    naive_bayes_bound: int | None
    submissions_left: int | None
    spent: bool
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ReuseBudget:
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__})

    def describe(self) -> str:
        """One sentence for a leaderboard: "reuse budget: about N submissions left" and what it rests on."""
        if self.submissions_left is None:
            return f"reuse budget: not known yet ({self.note})"
        basis = (
            f"{self.models} models on {self.n_sources:,} shared sources agree on {100 * self.eta:.1f}% of them "
            f"(independent errors: {100 * self.eta_independent:.1f}%); every standing within "
            f"{100 * self.epsilon:g} points at {100 * (1 - self.delta):g}% (similarity bound, Miller 2022 ch. 3)"
        )
        if self.spent:
            return f"reuse budget spent: {basis}; a new version with fresh round seeds is needed"
        if (self.similarity_bound or 0) >= MAX_MODELS:
            return f"reuse budget: more than 10^15 submissions left ({basis})"
        return f"reuse budget: about {self.submissions_left:,} submissions left ({basis})"


def correctness_agreement(correct: np.ndarray, seen: np.ndarray) -> tuple[float, float, int]:
    """Mean pairwise correctness agreement, its independence baseline (from each pair's own error rates on their
    shared points) and the fewest shared points of a pair, from ``correct`` (M, N) 0/1 and ``seen`` (M, N) bool
    (model m ran point n)."""
    c = np.asarray(correct, dtype=float) * seen
    w = np.asarray(seen, dtype=float)
    shared = w @ w.T
    agree = c @ c.T + ((1 - c) * w) @ ((1 - c) * w).T
    right_i = c @ w.T  # right_i[i, j]: points i got right among those j also ran
    iu = np.triu_indices(len(c), 1)
    pairs = shared[iu] > 0
    if not pairs.any():
        return float("nan"), float("nan"), 0
    s = shared[iu][pairs]
    eta = agree[iu][pairs] / s
    p1, p2 = 1 - right_i[iu][pairs] / s, 1 - right_i.T[iu][pairs] / s
    return float(eta.mean()), float(independence_agreement(p1, p2).mean()), int(s.min())


def reuse_budget(
    correct: Mapping[str, Mapping[str, bool]], epsilon: float = EPSILON, delta: float = DELTA
) -> ReuseBudget:
    """The reuse budget of a shared test set from every tested model's correctness per point (model -> point id ->
    right or not): ``eta`` the mean pairwise agreement on the points each pair shares, ``p`` the mean error rate,
    ``n`` the fewest points a pair shares (the least-tested standing is the loosest), and the bounds at
    ``epsilon`` / ``delta``. Fewer than 2 models: not known yet."""
    models = sorted(correct)
    points = sorted({pt for m in models for pt in correct[m]})
    if len(models) < 2 or not points:
        return ReuseBudget(None, None, None, len(points), len(models), epsilon, delta, None, None, None, None, False,
                           "it needs at least 2 models on shared sources")  # fmt: skip
    where = {pt: i for i, pt in enumerate(points)}
    right = np.zeros((len(models), len(points)))
    seen = np.zeros((len(models), len(points)), dtype=bool)
    for i, m in enumerate(models):
        for pt, ok in correct[m].items():
            right[i, where[pt]], seen[i, where[pt]] = float(bool(ok)), True
    eta, eta0, n = correctness_agreement(right, seen)
    if n == 0:
        return ReuseBudget(None, None, None, 0, len(models), epsilon, delta, None, None, None, None, False,
                           "the models share no source")  # fmt: skip
    p = float(np.mean([1 - right[i, seen[i]].mean() for i in range(len(models))]))
    union = union_bound_models(n, p, epsilon, delta)
    sim = similarity_bound_models(n, p, min(1.0, eta), epsilon, delta)
    nb = naive_bayes_models(n, p, min(1.0, eta), epsilon, delta)
    left = max(0, sim - len(models))
    note = "" if sim > 0 else f"{n} shared sources cannot hold even one standing within {100 * epsilon:g} points"
    return ReuseBudget(eta, eta0, p, n, len(models), epsilon, delta, union, sim, nb, left, left == 0, note)
