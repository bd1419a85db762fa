"""Known answers for genEval.stats: the score definitions, intervals, the clustered bootstrap, per-class tables,
ranks, Kendall tau, effective robustness and differences between models."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit, logit

from genEval.stats import (
    COLUMNS,
    SCORES,
    Outcomes,
    bootstrap_scores,
    compute_scores,
    fit_effective_robustness,
    fmr_value,
    kendall_tau,
    metric_differences,
    per_class_table,
    proportion,
    rank,
    score_values,
)

RESULTS_SCORE_KEYS = ["sa", "ra", "vr", "pa", "fmr", "fmr_chance_corrected", "oracle_start_accuracy"]
RESULTS_COUNT_KEYS = ["n", "n_clean_correct", "n_validatable", "n_validated", "n_perturbed_correct", "n_rejected",
                      "num_classes"]


def outcomes(ids, clean, validated, final, *, recon=None, start_ok=None, labels=None, rejected=None) -> Outcomes:
    n = len(ids)
    return Outcomes(ids=ids, labels=np.zeros(n, int) if labels is None else labels, clean=clean,
                    recon=clean if recon is None else recon,
                    start_ok=np.ones(n, bool) if start_ok is None else start_ok, validated=validated, final=final,
                    rejected=np.zeros(n, bool) if rejected is None else rejected)


# ------------------------------------------------------------------------------------------ score definitions
@pytest.mark.parametrize("sa,pa,fmr", [(76.26, 33.15, 43.47), (95.38, 52.34, 54.88), (99.09, 27.78, 28.04)])
def test_fmr_reproduces_the_papers_tables(sa, pa, fmr):
    assert fmr_value(sa, pa) == pytest.approx(fmr, abs=0.005)


def test_fmr_value_is_undefined_without_sa_or_pa():
    assert fmr_value(0.0, 10.0) is None and fmr_value(None, 10.0) is None and fmr_value(50.0, None) is None


def test_every_score_from_hand_summed_columns():
    sums = dict(n=10, clean=8, recon=7, start_ok=9, validated=5, perturbed_correct=2, rejected=3)
    v = score_values(np.array([sums[c] for c in COLUMNS], float), num_classes=2)
    assert v["sa"] == pytest.approx(80.0) and v["ra"] == pytest.approx(70.0) and v["vr"] == pytest.approx(50.0)
    assert v["pa"] == pytest.approx(40.0) and v["fmr"] == pytest.approx(50.0)
    assert v["oracle_start_accuracy"] == pytest.approx(90.0)
    assert v["fmr_chance_corrected"] == pytest.approx(100 * (40 - 50) / (80 - 50))
    assert set(v) == {s.key for s in SCORES}
    with pytest.raises(ValueError, match=r"unknown score 'acc'; choose one of sa, ra"):
        score_values(np.ones(len(COLUMNS)), 2, ["acc"])


def test_chance_corrected_fmr_known_values():
    def cc(sa, pa, c):
        n = 1000  # SA and PA over the same 1000 samples, all validated
        sums = np.array([n, sa * n / 100, 0, n, n, pa * n / 100, 0], float)
        return score_values(sums, c, ["fmr_chance_corrected"])["fmr_chance_corrected"]

    assert cc(90.0, 90.0, 10) == pytest.approx(100.0)  # no drop
    assert cc(90.0, 10.0, 10) == pytest.approx(0.0)  # at chance after perturbation
    assert np.isnan(cc(10.0, 50.0, 10))  # SA at chance: undefined


def test_undefined_scores_are_nan_not_zero():
    v = score_values(np.array([4.0, 2, 2, 4, 0, 0, 0]), 10)  # nothing validated
    assert np.isnan(v["pa"]) and np.isnan(v["fmr"]) and v["vr"] == 0.0
    assert np.isnan(score_values(np.array([4.0, 0, 0, 4, 4, 1, 0]), 10)["fmr"])  # SA 0


# ------------------------------------------------------------------------------------------ intervals
def test_wilson_interval_for_a_fixed_count():
    e = proportion(50, 100)
    assert e.value == 50.0 and (e.k, e.n, e.method) == (50, 100, "wilson")
    assert (round(e.low, 2), round(e.high, 2)) == (40.38, 59.62)


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


def test_unknown_interval_method():
    with pytest.raises(ValueError, match="unknown interval method 'exact'; choose one of wilson, clopper-pearson"):
        proportion(1, 2, "exact")


# ------------------------------------------------------------------------------------------ one run
def test_compute_scores_of_a_hand_made_run():
    # 5 samples: clean right on 4, reconstruction right on 3, start check passed by 4, validated 2 (s0, s1),
    # perturbed right on 1 of them (s0); one rejected step
    o = outcomes([f"s{i}" for i in range(5)], clean=[1, 1, 1, 1, 0], recon=[1, 1, 1, 0, 0],
                 start_ok=[1, 1, 1, 1, 0], validated=[1, 1, 0, 0, 0], final=[1, 0, 1, 1, 0],
                 rejected=[0, 1, 0, 0, 0])
    s = compute_scores(o, num_classes=4, n_boot=200)
    d = s.to_dict()
    assert list(d) == RESULTS_SCORE_KEYS + RESULTS_COUNT_KEYS  # the keys of results.json's "scores"
    for k in RESULTS_SCORE_KEYS:
        assert list(d[k]) == ["value", "low", "high", "n", "k", "method", "reason"]
    assert (s.n, s.n_clean_correct, s.n_validatable, s.n_validated, s.n_perturbed_correct, s.n_rejected) == (
        5, 4, 4, 2, 1, 1)
    assert (s.sa.value, s.ra.value, s.vr.value, s.pa.value) == (80.0, 60.0, 40.0, 50.0)
    assert s.oracle_start_accuracy.value == 80.0 and (s.pa.k, s.pa.n) == (1, 2)
    assert s.fmr.value == pytest.approx(62.5) and s.fmr_chance_corrected.value == pytest.approx(100 * 25 / 55)
    assert s.sa.method == "wilson" and s.fmr.method == "bootstrap(200, source images)"
    assert s.sa.low < 80.0 < s.sa.high and s.fmr.low <= 62.5 <= s.fmr.high
    assert compute_scores(o, 4, interval="clopper-pearson").pa.method == "clopper-pearson"


def test_scores_undefined_without_validated_samples_say_why():
    n = 10
    z = np.zeros(n, bool)
    s = compute_scores(outcomes([str(i) for i in range(n)], np.ones(n, bool), z, z), 10)
    assert s.sa.value == 100.0 and s.vr.value == 0.0
    assert s.pa.value is None and "no validated sample" in s.pa.reason and s.pa.n == 0
    assert s.fmr.value is None and s.fmr.reason == "no validated sample, so PA is undefined"
    empty = compute_scores(outcomes([], [], [], []), 10)
    assert empty.sa.value is None and empty.sa.reason == "no samples for SA" and empty.fmr.reason == "no samples"
    sa0 = compute_scores(outcomes(["a", "b"], [0, 0], [1, 1], [1, 0]), 10)
    assert sa0.fmr.value is None and sa0.fmr.reason == "SA is 0" and sa0.pa.value == 50.0


def test_bootstrap_groups_repeats_of_one_source_image():
    rng = np.random.default_rng(0)
    n = 200
    clean, valid, final = rng.random(n) < 0.9, np.ones(n, bool), rng.random(n) < 0.5
    ids = [f"s{i}" for i in range(n)]

    def fmr(ids, rep=1):
        o = outcomes(ids, np.repeat(clean, rep), np.repeat(valid, rep), np.repeat(final, rep))
        return compute_scores(o, 10, n_boot=400).fmr

    one = fmr(ids)
    # ten copies of each sample: as independent samples the interval shrinks ~sqrt(10)x,
    # grouped by source image it stays as wide as the original
    grouped = fmr(list(np.repeat(ids, 10)), 10)
    naive = fmr([str(i) for i in range(10 * n)], 10)
    width = lambda e: e.high - e.low  # noqa: E731
    assert grouped.value == pytest.approx(one.value)
    assert width(grouped) == pytest.approx(width(one), rel=0.25)
    assert width(naive) < 0.5 * width(one)
    assert one.low < one.value < one.high


def test_per_class_table_known_answer():
    # class 0: s0..s2 (clean 2/3, validated s0 s1, perturbed right on s0); class 1: s3 (clean, not validated)
    o = outcomes(["s0", "s1", "s2", "s3"], clean=[1, 1, 0, 1], validated=[1, 1, 0, 0], final=[1, 0, 0, 1],
                 labels=[0, 0, 0, 1])
    rows = per_class_table(o, ["cat", "dog", "empty"])
    assert [r["name"] for r in rows] == ["cat", "dog"]  # a class without samples has no row
    cat, dog = rows
    assert list(cat) == ["class", "name", "n", "sa", "ra", "vr", "pa", "fmr", "n_validated"]
    assert (cat["n"], cat["n_validated"]) == (3, 2)
    assert cat["sa"] == pytest.approx(200 / 3) and cat["pa"] == 50.0 and cat["fmr"] == pytest.approx(75.0)
    assert (dog["sa"], dog["vr"], dog["pa"], dog["fmr"]) == (100.0, 0.0, None, None)


def test_outcomes_from_records_and_length_check():
    recs = [dict(source_id=7, label=1, clean_pred=1, recon_pred=0, start_ok=True, validated=True, final_pred=2,
                 rejected_at=3),
            dict(source_id="x", label=0, clean_pred=1, recon_pred=0, start_ok=False, validated=False, final_pred=0,
                 rejected_at=-1)]
    o = Outcomes.from_records(recs)
    assert o.ids.tolist() == ["7", "x"] and o.labels.tolist() == [1, 0]
    assert o.clean.tolist() == [True, False] and o.recon.tolist() == [False, True]
    assert o.start_ok.tolist() == [True, False] and o.validated.tolist() == [True, False]
    assert o.final.tolist() == [False, True] and o.rejected.tolist() == [True, False]
    with pytest.raises(ValueError, match=r"Outcomes.clean has 1 entries for 2 source ids"):
        outcomes(["a", "b"], [1], [1, 1], [1, 1])


# ------------------------------------------------------------------------------------------ repetitions
def test_bootstrap_scores_average_repetitions_and_resample_sources_together():
    ids = [f"s{i}" for i in range(40)]
    clean = np.arange(40) % 4 != 0  # SA 75
    r0 = outcomes(ids, clean, np.ones(40), np.arange(40) % 2 == 0)  # PA 50
    r1 = outcomes(ids, clean, np.ones(40), np.arange(40) % 4 == 0)  # PA 25
    est = bootstrap_scores([r0, r1], num_classes=4, n_boot=300)
    assert est["sa"].value == pytest.approx(75.0) and est["pa"].value == pytest.approx(37.5)
    assert est["fmr"].value == pytest.approx((100 * 50 / 75 + 100 * 25 / 75) / 2)
    assert est["sa"].low < 75 < est["sa"].high and est["sa"].n == 80
    assert est["sa"].method == "mean of 2 repetitions, bootstrap(300, 40 source images)"
    undefined = bootstrap_scores([outcomes(ids[:2], [1, 1], [0, 0], [0, 0])] * 2, 4, n_boot=10)["pa"]
    assert undefined.value is None and undefined.reason == "PA is undefined in every repetition"
    with pytest.raises(ValueError, match=r"at least one repetition"):
        bootstrap_scores([], num_classes=4)


def test_repetition_with_an_undefined_score_is_left_out_of_the_mean():
    ids = ["a", "b"]
    r0 = outcomes(ids, [1, 1], [1, 1], [1, 0])  # PA 50
    r1 = outcomes(ids, [1, 1], [0, 0], [0, 0])  # PA undefined
    assert bootstrap_scores([r0, r1], 2, ("pa",), n_boot=20)["pa"].value == pytest.approx(50.0)


# ------------------------------------------------------------------------------------------ differences
def test_paired_difference_known_answers():
    ids = [f"s{i}" for i in range(100)]
    a = outcomes(ids, np.r_[np.ones(50), np.zeros(50)], np.ones(100), np.ones(100))
    b = outcomes(ids, np.r_[np.ones(40), np.zeros(60)], np.ones(100), np.ones(100))  # wrong on 10 that a gets
    d = metric_differences([a], [b], 10, ("sa",), n_boot=500)["sa"]
    assert d.value == pytest.approx(10.0) and d.paired and d.n_sources == 100
    assert (d.a_value, d.b_value) == (50.0, 40.0)
    # paired: only the 10 discordant sources move the difference, so its interval is narrow around 10
    assert 2 < d.low < 10 < d.high < 18 and d.excludes_zero
    same = metric_differences([a], [a], 10, ("sa",), n_boot=200)["sa"]
    assert (same.value, same.low, same.high) == (0.0, 0.0, 0.0) and not same.excludes_zero


def test_pairing_narrows_the_interval_of_correlated_models():
    rng = np.random.default_rng(0)
    ids = [f"s{i}" for i in range(200)]
    base = rng.random(200) < 0.6
    flip = rng.random(200) < 0.05
    a = outcomes(ids, base, np.ones(200), base)
    b = outcomes(ids, base & ~flip, np.ones(200), base & ~flip)
    paired = metric_differences([a], [b], 10, ("sa",), n_boot=400)["sa"]
    indep = metric_differences([a], [b], 10, ("sa",), n_boot=400, paired=False)["sa"]
    assert paired.value == pytest.approx(indep.value) and paired.paired and not indep.paired
    assert (paired.high - paired.low) < 0.5 * (indep.high - indep.low)
    other = outcomes([f"t{i}" for i in range(200)], base, np.ones(200), base)
    assert not metric_differences([a], [other], 10, ("sa",), n_boot=50)["sa"].paired  # no shared sources
    with pytest.raises(ValueError, match=r"share no source ids; use paired=False"):
        metric_differences([a], [other], 10, ("sa",), n_boot=50, paired=True)


def test_difference_of_an_undefined_score_says_which_model():
    ids = ["a", "b"]
    ok = outcomes(ids, [1, 1], [1, 1], [1, 0])
    none = outcomes(ids, [1, 1], [0, 0], [0, 0])
    d = metric_differences([ok], [none], 2, ("pa",), names=("m1", "m2"), n_boot=10)["pa"]
    assert d.value is None and d.reason == "PA undefined for m2"


# ------------------------------------------------------------------------------------------ ranks and tau
def test_kendall_tau_known_values():
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(2 / 3, abs=1e-4)
    assert kendall_tau([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0)
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert kendall_tau([50, 50, 100], [75, 100, 33]) == pytest.approx(-2 / 6**0.5)  # tau-b with a tie
    assert kendall_tau([1, 2, 3], [5, 5, 5]) is None  # a constant ranking: tau undefined
    assert kendall_tau([1], [1]) is None
    with pytest.raises(ValueError, match=r"same items, got lengths 3 and 2"):
        kendall_tau([1, 2, 3], [1, 2])


def test_rank_with_ties_and_missing_values():
    assert rank([90.0, 80.0, 90.0, None]) == [1, 3, 1, None]
    assert rank([90.0, 80.0, 70.0], descending=False) == [3, 2, 1]
    assert rank([None, None]) == [None, None]


# ------------------------------------------------------------------------------------------ effective robustness
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


def test_effective_robustness_r2_is_the_logit_space_fit_quality():
    sa, pa = [60.0, 70.0, 80.0, 90.0], [30.0, 45.0, 41.0, 70.0]
    x, y = logit(np.array(sa) / 100), logit(np.array(pa) / 100)
    w, b = np.polyfit(x, y, 1)  # independent least squares
    r2 = 1 - ((y - (w * x + b)) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    fit = fit_effective_robustness(sa, pa, min_r2=0.0)
    assert (fit.w, fit.b, fit.r2) == pytest.approx((w, b, r2))
    assert fit.mae == pytest.approx(np.mean(np.abs(np.array(pa) - 100 * expit(w * x + b))))


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
    flat = fit_effective_robustness([60.0, 70.0, 80.0], [40.0, 40.0, 40.0])
    assert flat.r2 is None and "R^2 is undefined" in flat.reason
    clipped = fit_effective_robustness([60.0, 80.0, 100.0, 90.0], [0.0, 50.0, 100.0, 70.0], min_r2=0.0)
    assert all(np.isfinite(v) for v in clipped.er)  # 0% and 100% are clipped away from the logit's poles


def test_effective_robustness_errors():
    with pytest.raises(ValueError, match=r"got 2 SA values but 1 PA values"):
        fit_effective_robustness([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match=r"er_min_r2=1.5 must lie in \[0, 1\]"):
        fit_effective_robustness([50.0, 60.0], [40.0, 50.0], min_r2=1.5)
    with pytest.raises(ValueError, match=r"baseline_mask has 1 entries for 2 models"):
        fit_effective_robustness([50.0, 60.0], [40.0, 50.0], [True])
