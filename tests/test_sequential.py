"""The anytime-valid comparison (genEval/scores/sequential.py, issue 33): known answers, and simulated comparisons
with known truths (benchmarks/sequential.py) showing that the false-ordering rate holds at every number of looks,
that a fixed-design interval looked at every round does not (so the check can fail), and that the sources-needed
estimate delivers the power it promises."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from genEval.scores.outcomes import COLUMNS, Outcomes
from genEval.scores.sequential import SequentialTest, looks_of, pair_units, settle_pair

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sim():
    """benchmarks/sequential.py as a module (benchmarks/ is a folder of scripts)."""
    spec = importlib.util.spec_from_file_location("sequential_sim", ROOT / "benchmarks" / "sequential.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["sequential_sim"] = module
    spec.loader.exec_module(module)
    return module


def _outcomes(ids, clean, validated=None, final=None) -> Outcomes:
    n = len(ids)
    validated = np.ones(n, bool) if validated is None else np.asarray(validated, bool)
    final = np.asarray(clean, bool) if final is None else np.asarray(final, bool)
    z = np.zeros(n, bool)
    return Outcomes(
        ids=ids, labels=np.zeros(n), clean=clean, recon=clean, start_ok=validated, validated=validated, final=final,
        rejected=z, oracle_clean=~z, oracle_recon=~z, unchanged=z,
    )  # fmt: skip


def test_boundary_known_value():
    """alpha 0.05, t* 1000: eta^2 = (5.99146 + ln 6.99146) / 1000 = 0.0079362 and w(1000) = 0.09598, by hand
    from Waudby-Smith et al. (2024) Thm 2.2 / eq. 13; 1.55 times the fixed-design 1.96 / sqrt(1000)."""
    test = SequentialTest(confidence=0.95, margin=0, t_star=1000)
    assert test.eta2 == pytest.approx(0.0079362, rel=1e-4)
    assert float(test.width(1000)) == pytest.approx(0.09598, rel=1e-3)
    assert float(test.width(1000)) / (1.96 / math.sqrt(1000)) == pytest.approx(1.549, abs=0.01)
    w = test.width(np.array([100, 1000, 10000, 100000]))
    assert np.all(np.diff(w) < 0)  # tighter with every source


def test_sa_difference_and_spread_are_the_paired_known_answer():
    """For SA (a proportion) the influence of a source is 100 (c_a - c_b) - d, so the spread is the plain standard
    deviation of the paired differences of correctness, with the documented pseudo-unit at the largest possible
    influence (100 max(p, 1 - p) per model, p its share correct) weighted 1 / (n + 1): computed here without the
    module."""
    rng = np.random.default_rng(0)
    ids = [f"s{i:04d}" for i in range(400)]  # pair_units orders units by id
    ca, cb = rng.random(400) < 0.8, rng.random(400) < 0.7
    units = pair_units(_outcomes(ids, ca), _outcomes(ids, cb))
    assert units.shape == (400, 2 * len(COLUMNS))
    n, d, sd = looks_of([units[:150], units[150:]], "sa", 10)
    assert n.tolist() == [150, 400]
    diff = 100.0 * (ca.astype(float) - cb)
    assert d[-1] == pytest.approx(diff.mean())
    worst = sum(100.0 * max(c.mean(), 1 - c.mean()) for c in (ca, cb))
    assert sd[-1] == pytest.approx(math.sqrt((400 * diff.var() + worst**2) / 401), rel=1e-4)
    assert sd[-1] == pytest.approx(diff.std(), rel=0.01)  # the pseudo-unit weighs 1 / 401
    assert d[0] == pytest.approx(diff[:150].mean())


def test_a_rare_disagreement_is_not_read_as_certainty():
    """Two models with the same FMR_v decisions on 599 of 600 sources (all perturbed images still correct) and one
    disagreement: the sample spread is tiny (its Wald interval is +-0.33 points), but the exact binomial bound on one
    failure in 600 reaches 0.93 points; the interval must not shrink to a point (measured on the digits zoo before
    the pseudo-unit: +0.01 [-0.00, +0.00]) and must contain 0."""
    ids = [f"s{i:04d}" for i in range(600)]
    clean = np.ones(600, bool)
    fb = clean.copy()
    fb[0] = False
    verdict = settle_pair(
        "a", "b", [pair_units(_outcomes(ids, clean), _outcomes(ids, clean, final=fb))], "fmr_validated", 10,
        SequentialTest(confidence=0.95, margin=1.0, t_star=1000),
    )  # fmt: skip
    assert verdict.value == pytest.approx(100 / 600)
    assert verdict.low < 0 < verdict.high and verdict.high - verdict.low > 1.0


def test_fmr_v_difference_is_the_ratio_difference():
    rng = np.random.default_rng(1)
    ids = [f"s{i}" for i in range(300)]
    val, clean = rng.random(300) < 0.6, rng.random(300) < 0.85
    fa, fb = clean & (rng.random(300) < 0.9), clean & (rng.random(300) < 0.8)
    a, b = _outcomes(ids, clean, val, fa), _outcomes(ids, clean, val, fb)
    _, d, _ = looks_of([pair_units(a, b)], "fmr_validated", 10)
    fmr = [100.0 * (val & f).sum() / (val & clean).sum() for f in (fa, fb)]
    assert d[-1] == pytest.approx(fmr[0] - fmr[1])


def test_unpaired_sources_count_once_each():
    """A source only one model saw is one unit with zeros for the other (the union of the round's sources)."""
    a = _outcomes(["x", "y"], [True, True])
    b = _outcomes(["y", "z"], [False, True])
    units = pair_units(a, b)
    k = len(COLUMNS)
    assert units.shape == (3, 2 * k)
    assert units[:, 0].tolist() == [1, 1, 0] and units[:, k].tolist() == [0, 1, 1]  # "n" of a, of b per source


def test_verdicts_and_sources_needed():
    test = SequentialTest(confidence=0.95, margin=1.0, t_star=1000)
    rng = np.random.default_rng(2)
    ids = [f"s{i}" for i in range(2000)]
    clean = rng.random(2000) < 0.8
    # far apart: ordered, a higher
    far = settle_pair("a", "b", [pair_units(_outcomes(ids, clean), _outcomes(ids, clean & (rng.random(2000) < 0.7)))],
                      "sa", 10, test)  # fmt: skip
    assert far.verdict == "ordered" and far.value > 0 and far.low > 0 and far.more_sources is None
    # identical decisions on every source: equivalent (the difference is 0 on every source)
    same = settle_pair("a", "b", [pair_units(_outcomes(ids, clean), _outcomes(ids, clean))], "sa", 10, test)
    assert same.verdict == "equivalent" and same.value == 0
    # too few sources: open with the reason
    few = settle_pair("a", "b", [pair_units(_outcomes(ids[:20], clean[:20]), _outcomes(ids[:20], ~clean[:20]))],
                      "sa", 10, test)  # fmt: skip
    assert few.verdict == "open" and "fewer than 30" in few.reason
    # close: open, with an estimate that grows as the observed difference shrinks
    n3, _ = test.sources_to_settle(3.0, 40.0)
    n2, _ = test.sources_to_settle(2.0, 40.0)
    assert n3 < n2
    assert test.sources_to_settle(0.2, 40.0)[1] == "show equivalence"
    # just inside the margin, ordering is nearer than showing equivalence: the smaller estimate is given
    near_margin, kind = test.sources_to_settle(0.95, 40.0)
    order_only = SequentialTest(confidence=0.95, margin=0.0, t_star=1000).sources_to_settle(0.95, 40.0)
    assert kind == "order" and (near_margin, kind) == order_only
    assert SequentialTest(margin=0).sources_to_settle(0.0, 40.0) == (None, "order")
    with pytest.raises(ValueError, match="confidence must be a number in \\(0, 1\\), got 1.5"):
        SequentialTest(confidence=1.5)


def test_equal_models_false_ordering_holds_at_every_look_and_the_fixed_interval_fails(sim):
    """2,000 equal-model comparisons, 50 looks of 100 sources: called ordered by look k at most 1 - confidence for
    every k; the fixed-design interval looked at every round breaks that bound (the check can fail)."""
    test = SequentialTest(confidence=0.95, margin=0.0, t_star=math.sqrt(100 * 5000))
    sc = sim.run_scenario(sim.Pair(0.9, 0.9), test, sims=2000, looks=50, round_sources=100, seed=0)
    assert max(sc.ordered_by_look) <= 0.05
    assert sc.naive_ordered_by_look[-1] > 0.15  # measured 0.33 with 300 comparisons
    assert np.all(np.diff(sc.ordered_by_look) >= 0)  # the running intersection: verdicts never flip back


def test_three_points_apart_is_ordered_the_right_way(sim):
    test = SequentialTest(confidence=0.95, margin=1.0, t_star=math.sqrt(100 * 5000))
    sc = sim.run_scenario(sim.Pair(0.90, 0.87), test, sims=400, looks=50, round_sources=100, seed=1)
    assert sc.ordered_by_look[-1] > 0.6 and sc.wrong_direction == 0
    assert sc.mean_sources_at_stop < 5000


def test_sources_needed_delivers_its_power(sim):
    """The estimate from the true difference and spread: simulated comparisons that run that many sources are
    ordered in about 80% of cases (the power it aims at)."""
    test = SequentialTest(confidence=0.95, margin=0.0, t_star=1000)
    pair = sim.Pair(0.90, 0.86)
    probe = sim.run_scenario(pair, test, sims=200, looks=20, round_sources=100, seed=3)
    need, kind = test.sources_to_settle(pair.delta, probe.sigma)
    assert kind == "order"
    looks = math.ceil(need / 100)
    sc = sim.run_scenario(pair, test, sims=400, looks=looks, round_sources=100, seed=4)
    assert 0.7 <= sc.ordered_by_look[-1] <= 0.95, (need, sc.ordered_by_look[-1])
