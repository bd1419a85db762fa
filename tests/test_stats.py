"""Known answers for genEval.stats: ranks, Kendall tau, effective robustness, bootstrap differences."""

from __future__ import annotations

import numpy as np
import pytest

from genEval.stats import (
    Outcomes,
    bootstrap_scores,
    expit,
    fit_effective_robustness,
    kendall_tau,
    logit,
    metric_differences,
    metric_from_sums,
    paired_difference,
    proportion,
    rank,
)


def test_wilson_interval_for_a_fixed_count():
    e = proportion(50, 100)
    assert e.value == 50.0
    assert (round(e.low, 2), round(e.high, 2)) == (40.38, 59.62)


def test_kendall_tau_known_values():
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(2 / 3, abs=1e-4)
    assert kendall_tau([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0)
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert kendall_tau([1, 2, 3], [5, 5, 5]) is None  # a constant ranking: tau undefined
    assert kendall_tau([1], [1]) is None
    with pytest.raises(ValueError, match=r"same items, got lengths 3 and 2"):
        kendall_tau([1, 2, 3], [1, 2])


def test_rank_with_ties_and_missing_values():
    assert rank([90.0, 80.0, 90.0, None]) == [1, 3, 1, None]
    assert rank([90.0, 80.0, 70.0], descending=False) == [3, 2, 1]
    assert rank([None, None]) == [None, None]


def _line(sa, w=1.5, b=-1.0):
    return [float(100 * expit(w * logit(s / 100) + b)) for s in sa]


def test_effective_robustness_on_an_exact_line():
    sa = [60.0, 70.0, 80.0, 90.0]
    off_sa = 75.0
    off_pa = _line([off_sa])[0] + 5.0  # 5 points above the line
    fit = fit_effective_robustness(sa + [off_sa], _line(sa) + [off_pa], [True] * 4 + [False])
    assert fit.trusted and fit.space == "logit" and fit.n_baselines == 4
    assert fit.w == pytest.approx(1.5) and fit.b == pytest.approx(-1.0)
    assert fit.r2 == pytest.approx(1.0) and fit.mae == pytest.approx(0.0, abs=1e-9)
    assert fit.er[:4] == pytest.approx([0.0] * 4, abs=1e-9)
    assert fit.er[4] == pytest.approx(5.0)
    assert fit.curve(np.array([75.0]))[0] == pytest.approx(off_pa - 5.0)


def test_effective_robustness_is_not_reported_for_a_poor_fit():
    sa = [60.0, 70.0, 80.0, 90.0, 65.0]
    pa = [40.0, 10.0, 45.0, 12.0, 30.0]  # no trend
    fit = fit_effective_robustness(sa, pa)
    assert not fit.trusted and fit.r2 < 0.8
    assert fit.er == [None] * 5
    assert all(v is not None for v in fit.er_untrusted)
    assert "below the threshold 0.8" in fit.reason
    # a looser gate accepts the same fit
    assert fit_effective_robustness(sa, pa, min_r2=0.0).trusted


def test_effective_robustness_needs_enough_baselines_and_defined_values():
    sa, pa = [60.0, 80.0, 70.0], _line([60.0, 80.0, 70.0])
    two = fit_effective_robustness(sa, pa, [True, True, False])
    assert two.r2 == pytest.approx(1.0) and not two.trusted and "only 2 baselines (need 3)" in two.reason
    one = fit_effective_robustness([60.0, None, 70.0], [50.0, 40.0, None])
    assert one.w is None and one.er == [None] * 3 and "a line needs at least 2" in one.reason
    same = fit_effective_robustness([70.0, 70.0, 70.0], [50.0, 40.0, 30.0])
    assert same.w is None and "slope of the line is undefined" in same.reason
    clipped = fit_effective_robustness([60.0, 80.0, 100.0, 90.0], [0.0, 50.0, 100.0, 70.0], min_r2=0.0)
    assert all(np.isfinite(v) for v in clipped.er)  # 0% and 100% are clipped away from the logit's poles


def test_effective_robustness_errors():
    with pytest.raises(ValueError, match=r"got 2 SA values but 1 PA values"):
        fit_effective_robustness([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match=r"er_min_r2=1.5 must lie in \[0, 1\]"):
        fit_effective_robustness([50.0, 60.0], [40.0, 50.0], min_r2=1.5)
    with pytest.raises(ValueError, match=r"baseline_mask has 1 entries for 2 models"):
        fit_effective_robustness([50.0, 60.0], [40.0, 50.0], [True])


def test_scores_from_summed_columns():
    sums = np.array([10.0, 8.0, 7.0, 5.0, 2.0])  # n, clean, recon, validated, validated & final
    assert metric_from_sums(sums, "sa") == pytest.approx(80.0)
    assert metric_from_sums(sums, "ra") == pytest.approx(70.0)
    assert metric_from_sums(sums, "vr") == pytest.approx(50.0)
    assert metric_from_sums(sums, "pa") == pytest.approx(40.0)
    assert metric_from_sums(sums, "fmr") == pytest.approx(50.0)
    assert metric_from_sums(sums, "fmr_chance_corrected", 2) == pytest.approx(100 * (40 - 50) / (80 - 50))
    assert np.isnan(metric_from_sums(np.array([4.0, 2, 2, 0, 0]), "pa"))
    with pytest.raises(ValueError, match=r"unknown metric 'acc'; choose one of sa, ra"):
        metric_from_sums(sums, "acc")


def test_paired_difference_known_answers():
    ids = [f"s{i}" for i in range(100)]
    a = np.r_[np.ones(50), np.zeros(50)].astype(bool)
    b = np.r_[np.ones(40), np.zeros(60)].astype(bool)  # b is wrong on 10 of the images a gets right
    d = paired_difference(a, b, ids, n_boot=500)
    assert d.value == pytest.approx(10.0) and d.paired and d.n_sources == 100
    assert 0 < d.low < 10 < d.high < 20 and d.excludes_zero
    same = paired_difference(a, a, ids, n_boot=200)
    assert (same.value, same.low, same.high) == (0.0, 0.0, 0.0) and not same.excludes_zero
    # masks restrict the denominators (PA counts validated samples only)
    m = paired_difference(a, b, ids, a_mask=np.r_[np.ones(60), np.zeros(40)].astype(bool), n_boot=100)
    assert m.value == pytest.approx(100 * 50 / 60 - 40.0)
    with pytest.raises(ValueError, match=r"aligned arrays: 100 and 99 outcomes for 100 ids"):
        paired_difference(a, b[:99], ids)


def _outcomes(ids, clean, valid, final):
    return Outcomes(
        ids=np.asarray(ids, dtype=object),
        clean=np.asarray(clean, bool),
        recon=np.asarray(clean, bool),
        validated=np.asarray(valid, bool),
        final=np.asarray(final, bool),
    )


def test_pairing_narrows_the_interval_of_correlated_models():
    rng = np.random.default_rng(0)
    ids = [f"s{i}" for i in range(200)]
    base = rng.random(200) < 0.6
    flip = rng.random(200) < 0.05
    a = _outcomes(ids, base, np.ones(200), base)
    b = _outcomes(ids, base & ~flip, np.ones(200), base & ~flip)
    paired = metric_differences([a], [b], 10, ("sa",), n_boot=400)["sa"]
    indep = metric_differences([a], [b], 10, ("sa",), n_boot=400, paired=False)["sa"]
    assert paired.value == pytest.approx(indep.value) and paired.paired and not indep.paired
    assert (paired.high - paired.low) < 0.5 * (indep.high - indep.low)
    other = _outcomes([f"t{i}" for i in range(200)], base, np.ones(200), base)
    assert not metric_differences([a], [other], 10, ("sa",), n_boot=50)["sa"].paired  # no shared sources
    with pytest.raises(ValueError, match=r"share no source ids; use paired=False"):
        metric_differences([a], [other], 10, ("sa",), n_boot=50, paired=True)


def test_bootstrap_scores_average_repetitions_and_resample_sources_together():
    ids = [f"s{i}" for i in range(40)]
    clean = np.arange(40) % 4 != 0  # SA 75
    r0 = _outcomes(ids, clean, np.ones(40), np.arange(40) % 2 == 0)  # PA 50
    r1 = _outcomes(ids, clean, np.ones(40), np.arange(40) % 4 == 0)  # PA 25
    est = bootstrap_scores([r0, r1], num_classes=4, n_boot=300)
    assert est["sa"].value == pytest.approx(75.0) and est["pa"].value == pytest.approx(37.5)
    assert est["fmr"].value == pytest.approx((100 * 50 / 75 + 100 * 25 / 75) / 2)
    assert est["sa"].low < 75 < est["sa"].high and est["sa"].n == 80
    assert "mean of 2 repetitions" in est["sa"].method
    with pytest.raises(ValueError, match=r"at least one repetition"):
        bootstrap_scores([], num_classes=4)
