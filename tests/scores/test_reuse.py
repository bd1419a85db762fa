"""Test-set reuse bounds (Miller 2022, ch. 3 and App. 3.8; issue 44): the thesis's worked number, the similarity
bound's gain on synthetic outcomes of known agreement, a Monte-Carlo check that the bounds hold, and the budget."""

from __future__ import annotations

import numpy as np
import pytest

from genEval.scores.reuse import (
    ReuseBudget,
    correctness_agreement,
    deviation_probability,
    independence_agreement,
    naive_bayes_models,
    reuse_budget,
    similarity_bound_models,
    union_bound_models,
)


def test_the_theses_worked_number():
    # n = 50,000 (ImageNet val), error 0.244 (mean accuracy 75.6% of 66 models), eps = 0.01, delta = 0.05: the plain
    # union bound allows k = 257,397 models (Miller 2022, Sec. 3.5)
    assert union_bound_models(50_000, 0.244, 0.01, 0.05) == 257_397
    # at the 66 models' mean similarity 0.85 the similarity union bound allows about 4x more (Fig. 3.1b) and the
    # Naive-Bayes assumption about 10^8 models (Sec. 3.5)
    sim = similarity_bound_models(50_000, 0.244, 0.85, 0.01, 0.05)
    assert 3.5 < sim / 257_397 < 5
    assert 1e8 <= naive_bayes_models(50_000, 0.244, 0.85, 0.01, 0.05) < 2e8


def test_the_gain_grows_with_agreement_and_vanishes_at_independence():
    n, p, eps = 2000, 0.2, 0.03
    union = union_bound_models(n, p, eps)
    base = independence_agreement(p, p)  # 0.68
    assert 1 <= similarity_bound_models(n, p, base, eps) / union < 1.05  # independent errors: (almost) no gain
    gains = [similarity_bound_models(n, p, eta, eps) / union for eta in (base, 0.8, 0.9, 0.95)]
    assert gains == sorted(gains) and gains[0] < gains[-1] and gains[-1] > 5
    assert similarity_bound_models(n, p, 0.5, eps) == union  # less alike than independent: the union bound
    with pytest.raises(ValueError, match=r"p must be a number in \[0, 1\], got 1.5"):
        union_bound_models(100, 1.5)
    with pytest.raises(ValueError, match=r"n must be a whole number of test points >= 1, got 0"):
        similarity_bound_models(0, 0.2, 0.9)


def _naive_bayes_queries(rng, reps: int, k: int, n: int, p: float, eta: float) -> np.ndarray:
    """(reps, k, n) 0/1 losses of k models with error p and pairwise agreement eta under A1: q = X W."""
    px = 1 - (1 - eta) / (2 * p)
    pw = p / px
    w = rng.random((reps, 1, n)) < pw
    return (rng.random((reps, k, n)) < px) & w


def _failure_rate(q: np.ndarray, p: float, eps: float) -> float:
    n = q.shape[-1]
    s = q.sum(-1)
    a, b = int(np.ceil(n * (p + eps) - 1e-9)), int(np.ceil(n * (p - eps) - 1e-9)) - 1
    return float(((s >= a) | (s <= b)).any(1).mean())


def test_monte_carlo_the_bounds_hold_and_naive_bayes_is_exact():
    rng = np.random.default_rng(0)
    n, p, eta, eps, delta = 100, 0.2, 0.9, 0.12, 0.05
    sim, nb = similarity_bound_models(n, p, eta, eps, delta), naive_bayes_models(n, p, eta, eps, delta)
    assert union_bound_models(n, p, eps, delta) < sim < nb
    assert _failure_rate(_naive_bayes_queries(rng, 4000, sim, n, p, eta), p, eps) <= delta
    at_nb = _failure_rate(_naive_bayes_queries(rng, 4000, nb, n, p, eta), p, eps)
    beyond = _failure_rate(_naive_bayes_queries(rng, 1000, 4 * nb, n, p, eta), p, eps)
    assert at_nb <= delta + 0.01 < beyond  # A1 holds here, so its count is the exact limit (up to MC noise)
    assert deviation_probability(n, p, eps) == pytest.approx(
        _failure_rate(_naive_bayes_queries(rng, 10000, 1, n, p, eta), p, eps), abs=0.01
    )


def test_agreement_of_synthetic_outcomes_and_the_budget():
    rng = np.random.default_rng(1)
    n, k, p, eta = 6000, 6, 0.2, 0.9
    wrong = _naive_bayes_queries(rng, 1, k, n, p, eta)[0]
    correct = {f"m{i}": {f"r0:s{j}": not bool(wrong[i, j]) for j in range(n)} for i in range(k)}
    got = reuse_budget(correct, epsilon=0.02, delta=0.05)
    assert got.eta == pytest.approx(eta, abs=0.01) and got.error_rate == pytest.approx(p, abs=0.01)
    assert got.eta_independent == pytest.approx(independence_agreement(p, p), abs=0.01)
    assert got.n_sources == n and got.models == k
    assert got.union_bound == union_bound_models(n, got.error_rate, 0.02, 0.05)
    assert got.similarity_bound == similarity_bound_models(n, got.error_rate, got.eta, 0.02, 0.05)
    assert got.similarity_bound > got.union_bound  # by how much: the ratio a synthetic agreement of 0.9 buys
    assert got.submissions_left == got.similarity_bound - k and not got.spent
    assert "reuse budget: about" in got.describe() and ReuseBudget.from_dict(got.to_dict()) == got
    assert "more than 10^15" in reuse_budget(correct, epsilon=0.2).describe()  # beyond what the bounds report
    # the same models on 120 shared sources: not one standing within 1 point -> spent, and said so
    small = {m: dict(list(v.items())[:120]) for m, v in correct.items()}
    spent = reuse_budget(small, epsilon=0.01)
    assert spent.spent and spent.submissions_left == 0 and spent.describe().startswith("reuse budget spent")
    assert reuse_budget({"m0": correct["m0"]}).submissions_left is None  # one model: not known yet


def test_correctness_agreement_on_a_hand_made_table():
    right = np.array([[1, 1, 0, 0], [1, 0, 0, 1], [0, 0, 0, 0]])
    seen = np.array([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=bool)  # model 1 skipped point 3
    eta, base, n = correctness_agreement(right, seen)
    # pairs: (0,1) on points 0-2: agree on 0, 2 -> 2/3; (0,2) on 0-3: agree on 2, 3 -> 1/2; (1,2) on 0-2: 1, 2 -> 2/3
    assert eta == pytest.approx((2 / 3 + 1 / 2 + 2 / 3) / 3) and n == 3
    # independence from each pair's own errors: (0,1) 1/3, 2/3 -> 4/9; (0,2) 1/2, 1 -> 1/2; (1,2) 2/3, 1 -> 2/3
    assert base == pytest.approx((4 / 9 + 1 / 2 + 2 / 3) / 3)
