"""Known answers for the scores and their intervals."""

from __future__ import annotations

import numpy as np
import pytest

from genEval.stats import bootstrap_fmr, chance_corrected_fmr, compute_scores, fmr_value, proportion


@pytest.mark.parametrize("sa,pa,fmr", [(76.26, 33.15, 43.47), (95.38, 52.34, 54.88), (99.09, 27.78, 28.04)])
def test_fmr_reproduces_the_papers_tables(sa, pa, fmr):
    assert fmr_value(sa, pa) == pytest.approx(fmr, abs=0.005)


def test_wilson_and_clopper_pearson_known_values():
    w = proportion(5, 10, "wilson")
    assert (w.value, round(w.low, 2), round(w.high, 2)) == (50.0, 23.66, 76.34)
    cp = proportion(5, 10, "clopper-pearson")
    assert (round(cp.low, 2), round(cp.high, 2)) == (18.71, 81.29)
    assert proportion(0, 20, "clopper-pearson").low == 0.0
    assert proportion(20, 20, "clopper-pearson").high == 100.0
    assert round(proportion(0, 20, "clopper-pearson").high, 2) == 16.84


def test_empty_proportion_is_undefined_not_zero():
    e = proportion(0, 0, what="PA")
    assert e.value is None and "PA" in e.reason
    assert "undefined" in e.fmt()


def test_chance_corrected_fmr():
    assert chance_corrected_fmr(90.0, 90.0, 10) == pytest.approx(100.0)
    assert chance_corrected_fmr(90.0, 10.0, 10) == pytest.approx(0.0)
    assert chance_corrected_fmr(10.0, 50.0, 10) is None  # SA at chance: undefined


def test_bootstrap_groups_repeats_of_one_source_image():
    rng = np.random.default_rng(0)
    n = 200
    clean = rng.random(n) < 0.9
    valid = np.ones(n, bool)
    final = rng.random(n) < 0.5
    ids = [f"s{i}" for i in range(n)]
    one, _ = bootstrap_fmr(clean, valid, final, ids, 10, n_boot=400)
    # ten copies of each sample: as independent samples the interval shrinks ~sqrt(10)x,
    # grouped by source image it stays as wide as the original
    rep = lambda a: np.repeat(a, 10)  # noqa: E731
    grouped, _ = bootstrap_fmr(rep(clean), rep(valid), rep(final), list(np.repeat(ids, 10)), 10, n_boot=400)
    naive, _ = bootstrap_fmr(rep(clean), rep(valid), rep(final), [str(i) for i in range(10 * n)], 10, n_boot=400)
    width = lambda e: e.high - e.low  # noqa: E731
    assert grouped.value == pytest.approx(one.value)
    assert width(grouped) == pytest.approx(width(one), rel=0.25)
    assert width(naive) < 0.5 * width(one)
    assert one.low < one.value < one.high


def test_scores_pa_undefined_without_validated_samples():
    n = 10
    z = np.zeros(n, bool)
    s = compute_scores(np.ones(n, bool), np.ones(n, bool), np.ones(n, bool), z, z, z, [str(i) for i in range(n)], 10)
    assert s.sa.value == 100.0 and s.vr.value == 0.0
    assert s.pa.value is None and "no validated sample" in s.pa.reason
    assert s.fmr.value is None


def test_unknown_interval_method():
    with pytest.raises(ValueError, match="unknown interval method 'exact'; choose one of wilson, clopper-pearson"):
        proportion(1, 2, "exact")
