"""Known answers for genEval.scores: the score definitions, intervals, the clustered bootstrap, per-class tables,
ranks, Kendall tau, effective robustness and differences between models."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import expit, logit

from genEval.scores.definitions import SCORES, fmr_value, score_values
from genEval.scores.effective_robustness import er_intervals, fit_effective_robustness
from genEval.scores.intervals import (
    bootstrap,
    bootstrap_scores,
    model_draws,
    percentile,
    proportion,
    rep_mean,
    source_sums,
)
from genEval.scores.label_free import hard_softmax_corr, softmax_corr
from genEval.scores.outcomes import COLUMNS, Outcomes, SampleRecord
from genEval.scores.rankings import kendall_tau, metric_differences, rank, rank_stability, spearman
from genEval.scores.run_scores import compute_scores, per_class_table

RESULTS_SCORE_KEYS = [
    "sa",
    "ra",
    "vr",
    "pa",
    "fmr",
    "fmr_chance_corrected",
    "oracle_start_accuracy",
    "sa_validated",
    "fmr_validated",
    "vr_conditional",
    "oracle_clean_accuracy",
    "oracle_recon_accuracy",
    "unchanged_share",
]
RESULTS_COUNT_KEYS = [
    "n",
    "n_clean_correct",
    "n_validatable",
    "n_validated",
    "n_perturbed_correct",
    "n_rejected",
    "num_classes",
    "n_clean_validated",
    "n_oracle_clean_correct",
    "n_oracle_recon_correct",
    "n_unchanged",
]


def outcomes(
    ids,
    clean,
    validated,
    final,
    *,
    recon=None,
    start_ok=None,
    labels=None,
    rejected=None,
    oracle_clean=None,
    oracle_recon=None,
    unchanged=None,
) -> Outcomes:
    n = len(ids)
    ones, zeros = np.ones(n, bool), np.zeros(n, bool)
    return Outcomes(
        ids=ids,
        labels=np.zeros(n, int) if labels is None else labels,
        clean=clean,
        recon=clean if recon is None else recon,
        start_ok=ones if start_ok is None else start_ok,
        validated=validated,
        final=final,
        rejected=zeros if rejected is None else rejected,
        oracle_clean=ones if oracle_clean is None else oracle_clean,
        oracle_recon=ones if oracle_recon is None else oracle_recon,
        unchanged=zeros if unchanged is None else unchanged,
    )


def column_sums(**given) -> np.ndarray:
    """Column sums in the order of COLUMNS; columns not given are 0."""
    unknown = set(given) - set(COLUMNS)
    assert not unknown, unknown
    return np.array([given.get(c, 0) for c in COLUMNS], float)


# ------------------------------------------------------------------------------------------ score definitions
@pytest.mark.parametrize("sa,pa,fmr", [(76.26, 33.15, 43.47), (95.38, 52.34, 54.88), (99.09, 27.78, 28.04)])
def test_fmr_reproduces_the_papers_tables(sa, pa, fmr):
    assert fmr_value(sa, pa) == pytest.approx(fmr, abs=0.005)


def test_fmr_value_is_undefined_without_sa_or_pa():
    assert fmr_value(0.0, 10.0) is None and fmr_value(None, 10.0) is None and fmr_value(50.0, None) is None


def test_every_score_from_hand_summed_columns():
    sums = column_sums(
        n=10,
        clean=8,
        recon=7,
        start_ok=9,
        validated=5,
        perturbed_correct=2,
        rejected=3,
        clean_validated=4,
        oracle_clean=6,
        oracle_recon=5,
        unchanged=1,
    )
    v = score_values(sums, num_classes=2)
    assert v["sa"] == pytest.approx(80.0) and v["ra"] == pytest.approx(70.0) and v["vr"] == pytest.approx(50.0)
    assert v["pa"] == pytest.approx(40.0) and v["fmr"] == pytest.approx(50.0)
    assert v["oracle_start_accuracy"] == pytest.approx(90.0)
    assert v["fmr_chance_corrected"] == pytest.approx(100 * (40 - 50) / (80 - 50))
    # the same population as PA: SA_v = 4/5, FMR_v = 100 * 40 / 80; VR_cond = 5/9
    assert v["sa_validated"] == pytest.approx(80.0) and v["fmr_validated"] == pytest.approx(50.0)
    assert v["vr_conditional"] == pytest.approx(500 / 9)
    assert v["oracle_clean_accuracy"] == pytest.approx(60.0) and v["oracle_recon_accuracy"] == pytest.approx(50.0)
    assert v["unchanged_share"] == pytest.approx(20.0)  # 1 of the 5 validated samples
    assert set(v) == {s.key for s in SCORES}
    with pytest.raises(ValueError, match=r"unknown score 'acc'; choose one of sa, ra"):
        score_values(np.ones(len(COLUMNS)), 2, ["acc"])


def test_chance_corrected_fmr_known_values():
    def cc(sa, pa, c):
        n = 1000  # SA and PA over the same 1000 samples, all validated
        sums = column_sums(n=n, clean=sa * n / 100, start_ok=n, validated=n, perturbed_correct=pa * n / 100)
        return score_values(sums, c, ["fmr_chance_corrected"])["fmr_chance_corrected"]

    assert cc(90.0, 90.0, 10) == pytest.approx(100.0)  # no drop
    assert cc(90.0, 10.0, 10) == pytest.approx(0.0)  # at chance after perturbation
    assert np.isnan(cc(10.0, 50.0, 10))  # SA at chance: undefined
    assert np.isnan(cc(5.0, 5.0, 10)) and np.isnan(cc(0.0, 0.0, 1000))  # below chance: undefined too (issue 14)


def test_undefined_scores_are_nan_not_zero():
    v = score_values(column_sums(n=4, clean=2, recon=2, start_ok=4), 10)  # nothing validated
    assert np.isnan(v["pa"]) and np.isnan(v["fmr"]) and v["vr"] == 0.0
    assert np.isnan(v["sa_validated"]) and np.isnan(v["fmr_validated"]) and np.isnan(v["unchanged_share"])
    assert v["vr_conditional"] == 0.0
    assert np.isnan(score_values(column_sums(n=4, start_ok=4, validated=4, perturbed_correct=1), 10)["fmr"])  # SA 0
    assert np.isnan(score_values(column_sums(n=4), 10)["vr_conditional"])  # nothing passed the start check


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
    o = outcomes(
        [f"s{i}" for i in range(5)],
        clean=[1, 1, 1, 1, 0],
        recon=[1, 1, 1, 0, 0],
        start_ok=[1, 1, 1, 1, 0],
        validated=[1, 1, 0, 0, 0],
        final=[1, 0, 1, 1, 0],
        rejected=[0, 1, 0, 0, 0],
    )
    s = compute_scores(o, num_classes=4, n_boot=200)
    d = s.to_dict()
    assert list(d) == RESULTS_SCORE_KEYS + RESULTS_COUNT_KEYS  # the keys of results.json's "scores"
    for k in RESULTS_SCORE_KEYS:
        assert list(d[k]) == ["value", "low", "high", "n", "k", "method", "reason"]
    assert (s.n, s.n_clean_correct, s.n_validatable, s.n_validated, s.n_perturbed_correct, s.n_rejected) == (
        5,
        4,
        4,
        2,
        1,
        1,
    )
    assert (s.sa.value, s.ra.value, s.vr.value, s.pa.value) == (80.0, 60.0, 40.0, 50.0)
    assert s.oracle_start_accuracy.value == 80.0 and (s.pa.k, s.pa.n) == (1, 2)
    assert s.fmr.value == pytest.approx(62.5) and s.fmr_chance_corrected.value == pytest.approx(100 * 25 / 55)
    assert s.sa.method == "wilson" and s.fmr.method == "bootstrap(200, source images)"
    assert s.sa.low < 80.0 < s.sa.high
    # two validated sources: too few for a bootstrap interval (issue 14), the value stays
    assert s.fmr.low is s.fmr.high is None and "only 2 source images with a validated sample (< 5)" in s.fmr.reason
    assert compute_scores(o, 4, interval="clopper-pearson").pa.method == "clopper-pearson"


def test_new_scores_of_a_hand_made_run_compare_the_same_population():
    # 8 samples, 6 validated (s0..s5). The model is right on the clean image of s0 s1 s2 s6 s7 (SA 62.5) but of
    # the validated ones only s0 s1 s2 (SA_v 50); perturbed right on s0 s1 (PA 33.3). 7 passed the start check
    # (VR_cond 6/7). The oracle's own verdict is right on 6 clean images and 7 reconstructions; 2 of the 6
    # validated final images moved less than 1/255 (s4 s5; s7's is unchanged but s7 is not validated).
    o = outcomes(
        [f"s{i}" for i in range(8)],
        clean=[1, 1, 1, 0, 0, 0, 1, 1],
        validated=[1] * 6 + [0, 0],
        final=[1, 1, 0, 0, 0, 0, 1, 1],
        start_ok=[1] * 7 + [0],
        oracle_clean=[1, 1, 1, 1, 1, 1, 0, 0],
        oracle_recon=[1] * 7 + [0],
        unchanged=[0, 0, 0, 0, 1, 1, 0, 1],
    )
    s = compute_scores(o, num_classes=10, n_boot=300)
    assert s.sa.value == 62.5 and s.pa.value == pytest.approx(100 / 3) and s.fmr.value == pytest.approx(160 / 3)
    assert (s.sa_validated.value, s.sa_validated.k, s.sa_validated.n) == (50.0, 3, 6)
    assert s.fmr_validated.value == pytest.approx(200 / 3)  # 100 * 33.3 / 50: above the paper's FMR
    assert (s.vr_conditional.value, s.vr_conditional.k, s.vr_conditional.n) == (pytest.approx(600 / 7), 6, 7)
    assert (s.oracle_clean_accuracy.value, s.oracle_clean_accuracy.k, s.oracle_clean_accuracy.n) == (75.0, 6, 8)
    assert (s.oracle_recon_accuracy.value, s.oracle_recon_accuracy.k) == (87.5, 7)
    assert (s.unchanged_share.value, s.unchanged_share.k, s.unchanged_share.n) == (pytest.approx(100 / 3), 2, 6)
    assert s.sa_validated.low == pytest.approx(100 * proportion(3, 6).low / 100)  # Wilson, like SA
    assert s.fmr_validated.low is not None and s.fmr_validated.method == "bootstrap(300, source images)"
    assert (s.n_clean_validated, s.n_oracle_clean_correct, s.n_oracle_recon_correct, s.n_unchanged) == (3, 6, 7, 2)


def test_scores_undefined_without_validated_samples_say_why():
    n = 10
    z = np.zeros(n, bool)
    s = compute_scores(outcomes([str(i) for i in range(n)], np.ones(n, bool), z, z), 10)
    assert s.sa.value == 100.0 and s.vr.value == 0.0
    assert s.pa.value is None and "no validated sample" in s.pa.reason and s.pa.n == 0
    assert s.fmr.value is None and s.fmr.reason == "PA is undefined: " + s.pa.reason
    assert s.sa_validated.value is None and s.fmr_validated.reason == s.fmr.reason
    empty = compute_scores(outcomes([], [], [], []), 10)
    assert empty.sa.value is None and empty.sa.reason == "no samples for SA" and empty.fmr.reason == "no samples"
    sa0 = compute_scores(outcomes([f"s{i}" for i in range(6)], [0] * 6, [1] * 6, [1, 0, 0, 0, 0, 0]), 10)
    assert sa0.fmr.value is None and sa0.fmr.reason == "SA is 0" and sa0.pa.value == pytest.approx(100 / 6)
    assert sa0.fmr_validated.reason.startswith("SA_v is 0")


def test_undefined_pa_names_the_real_reason():
    """Issue 14: "no sample passed the start check", "budget 0" and "every first step rejected" are different
    faults with different fixes; the records (start_ok, rejected_at) and the budget tell them apart."""
    ids, n = [f"s{i}" for i in range(4)], 4
    z, one = np.zeros(n, bool), np.ones(n, bool)
    start_failed = compute_scores(outcomes(ids, one, z, z, start_ok=z), 10, budget=50)
    assert "no sample passed the start check" in start_failed.pa.reason
    assert "no sample passed the start check" in start_failed.fmr.reason
    assert start_failed.vr_conditional.reason == "no sample passed the start check, so VR_cond is undefined"
    budget0 = compute_scores(outcomes(ids, one, z, z), 10, budget=0)
    assert "search.budget is 0, so no step was taken" in budget0.pa.reason
    assert "budget 0" in compute_scores(outcomes(ids, one, z, z), 10).pa.reason  # budget unknown: inferred
    rejected = compute_scores(outcomes(ids, one, z, z, rejected=one), 10, budget=50)
    assert "the oracle rejected the first step of every one of the 4 samples" in rejected.pa.reason
    assert "search.step_size" in rejected.pa.reason and "budget" not in rejected.pa.reason


def test_chance_corrected_fmr_is_undefined_at_and_below_chance_with_the_reason():
    """Issue 14: SA 0 and PA 0 over 1000 classes read "100.00 [100.00, 100.00]" (perfectly robust)."""
    ids = [f"s{i}" for i in range(20)]
    z, one = np.zeros(20, bool), np.ones(20, bool)
    s = compute_scores(outcomes(ids, z, one, z), num_classes=1000, n_boot=100)
    assert (s.sa.value, s.pa.value) == (0.0, 0.0)
    cc = s.fmr_chance_corrected
    assert cc.value is None and cc.low is None and cc.high is None
    assert cc.reason == (
        "SA (0.00) is at or below chance (100/C = 0.10): the chance-corrected ratio is undefined there"
    )
    below = compute_scores(outcomes(ids, np.arange(20) < 1, one, z), num_classes=10, n_boot=100)  # SA 5 < 10
    cc = below.fmr_chance_corrected
    assert cc.value is None and "SA (5.00) is at or below chance (100/C = 10.00)" in cc.reason
    above = compute_scores(outcomes(ids, np.arange(20) < 10, one, np.arange(20) < 5), num_classes=10, n_boot=100)
    assert above.fmr_chance_corrected.value == pytest.approx(100 * (25 - 10) / (50 - 10))


def test_a_bootstrap_over_fewer_than_five_sources_gives_no_interval():
    """Issue 14: one validated sample gave "FMR 0.00 [0.00, 0.00]"; below 5 sources no interval is printed."""
    ids = [f"s{i}" for i in range(30)]
    val = np.arange(30) == 0  # one validated sample, fooled
    s = compute_scores(outcomes(ids, np.ones(30, bool), val, np.zeros(30, bool)), 10, n_boot=200)
    assert s.fmr.value == 0.0 and s.fmr.low is None and s.fmr.high is None
    assert s.fmr.reason == (
        "only 1 source images with a validated sample (< 5): a bootstrap over so few is "
        "degenerate, so no interval is given"
    )
    assert s.fmr.fmt() == "0.00 (no interval: " + s.fmr.reason + ")"  # what the run summary prints
    assert s.pa.low == 0.0 and s.pa.high > 50  # a proportion keeps its Wilson interval, valid at n = 1
    five = compute_scores(outcomes(ids, np.ones(30, bool), np.arange(30) < 5, np.arange(30) == 1), 10, n_boot=200)
    assert five.fmr.low is not None and five.fmr.low < five.fmr.high and five.fmr.reason == ""
    # the same rule for differences between models
    a = outcomes(ids[:3], [1, 1, 1], [1, 1, 1], [1, 0, 0])
    d = metric_differences([a], [a], 10, ("sa", "fmr"), n_boot=50)
    assert d["fmr"].value == 0.0 and d["fmr"].low is None and "only 3 source images" in d["fmr"].reason


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
    # class 0: s0..s2 (clean 2/3, validated s0 s1, perturbed right on s0); class 1: s3 (clean, not validated);
    # the oracle is wrong on the clean image of s2
    o = outcomes(
        ["s0", "s1", "s2", "s3"],
        clean=[1, 1, 0, 1],
        validated=[1, 1, 0, 0],
        final=[1, 0, 0, 1],
        labels=[0, 0, 0, 1],
        oracle_clean=[1, 1, 0, 1],
    )
    rows = per_class_table(o, ["cat", "dog", "empty"])
    assert [r["name"] for r in rows] == ["cat", "dog"]  # a class without samples has no row
    cat, dog = rows
    assert list(cat) == [
        "class",
        "name",
        "n",
        "sa",
        "sa_low",
        "sa_high",
        "ra",
        "ra_low",
        "ra_high",
        "vr",
        "vr_low",
        "vr_high",
        "pa",
        "pa_low",
        "pa_high",
        "fmr",
        "sa_validated",
        "sa_validated_low",
        "sa_validated_high",
        "fmr_validated",
        "vr_conditional",
        "vr_conditional_low",
        "vr_conditional_high",
        "oracle_clean_accuracy",
        "oracle_clean_accuracy_low",
        "oracle_clean_accuracy_high",
        "oracle_recon_accuracy",
        "oracle_recon_accuracy_low",
        "oracle_recon_accuracy_high",
        "n_validated",
    ]
    assert (cat["n"], cat["n_validated"]) == (3, 2)
    assert cat["sa"] == pytest.approx(200 / 3) and cat["pa"] == 50.0 and cat["fmr"] == pytest.approx(75.0)
    assert cat["sa_validated"] == 100.0 and cat["fmr_validated"] == 50.0  # both validated cats were right clean
    assert cat["oracle_clean_accuracy"] == pytest.approx(200 / 3) and dog["oracle_clean_accuracy"] == 100.0
    # Wilson 95% intervals (hand: 2 of 3 -> [20.77, 93.85]; 1 of 2 -> [9.45, 90.55]); none for undefined ones
    assert (cat["sa_low"], cat["sa_high"]) == pytest.approx((20.765, 93.851), abs=1e-3)
    assert (cat["pa_low"], cat["pa_high"]) == pytest.approx((9.453, 90.547), abs=1e-3)
    assert (dog["sa"], dog["vr"], dog["pa"], dog["fmr"]) == (100.0, 0.0, None, None)
    assert dog["pa_low"] is None and dog["vr_high"] == pytest.approx(79.345, abs=1e-3)  # 0 of 1
    cp = per_class_table(o, ["cat", "dog"], interval="clopper-pearson")[0]
    assert (cp["pa_low"], cp["pa_high"]) == pytest.approx((1.258, 98.742), abs=1e-3)


def test_outcomes_from_records_and_length_check():
    common = dict(index=0, accepted_steps=0, first_fooled=-1, oracle_score=0.5, latent_dist=0.0, image_dist=0.0)
    recs = [
        SampleRecord(
            source_id="7",
            label=1,
            clean_pred=1,
            recon_pred=0,
            start_ok=True,
            validated=True,
            final_pred=2,
            rejected_at=3,
            oracle_clean_pred=1,
            oracle_start_pred=0,
            image_linf=0.9 / 255,
            reference=1,
            **common,
        ),
        SampleRecord(
            source_id="x",
            label=0,
            clean_pred=1,
            recon_pred=0,
            start_ok=False,
            validated=False,
            final_pred=0,
            rejected_at=-1,
            oracle_clean_pred=2,
            oracle_start_pred=0,
            image_linf=1 / 255,
            reference=0,
            **common,
        ),
    ]
    o = Outcomes.from_records(recs)
    assert o.ids.tolist() == ["7", "x"] and o.labels.tolist() == [1, 0]
    assert o.clean.tolist() == [True, False] and o.recon.tolist() == [False, True]
    assert o.start_ok.tolist() == [True, False] and o.validated.tolist() == [True, False]
    assert o.final.tolist() == [False, True] and o.rejected.tolist() == [True, False]
    assert o.oracle_clean.tolist() == [True, False] and o.oracle_recon.tolist() == [False, True]
    assert o.unchanged.tolist() == [True, False]  # strictly less than 1/255
    assert o.predictions.tolist() == [2, 0] and o.references.tolist() == [1, 0]
    assert Outcomes.from_records([r.to_dict() for r in recs]).clean.tolist() == [True, False]  # samples.jsonl lines
    with pytest.raises(ValueError, match=r"Outcomes.clean has 1 entries for 2 source ids"):
        outcomes(["a", "b"], [1], [1, 1], [1, 1])
    old = [{k: v for k, v in recs[0].to_dict().items() if k not in ("oracle_clean_pred", "image_linf")}]
    with pytest.raises(ValueError, match=r"lack oracle_clean_pred, image_linf: .* older genEval; rerun"):
        Outcomes.from_records(old)


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
    assert same.value == 0.0 and same.low < 0 < same.high and not same.excludes_zero  # issue 40: not [0.00, 0.00]


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
    with pytest.raises(ValueError, match=r"share no source ids \(in at least one repetition\); use paired=False"):
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


# ------------------------------------------------------------------------------------------ rank stability
def test_rank_stability_known_distribution():
    point = np.array([3.0, 2.0, 1.0])
    draws = np.array([[3, 2, 1], [1, 2, 3], [3, 1, 2], [3, 2, 1], [np.nan, 2, 1], [2, 2, 2]], float)
    # taus: 1, -1, 1/3, 1, 1 (two models left), undefined (constant draw)
    t = rank_stability(point, draws, n_sources=10, level=0.5)
    assert t.n_defined == 5 and t.n_boot == 6 and t.n_models == 3 and t.n_sources == 10
    assert t.mean == pytest.approx((1 - 1 + 1 / 3 + 1 + 1) / 5) and t.median == 1.0
    assert t.share_identical == pytest.approx(3 / 5)
    assert (t.low, t.high) == pytest.approx((np.quantile([1, -1, 1 / 3, 1, 1], 0.25), 1.0))
    assert "mean 0.467, median 1.000, 50% of resamples in [0.333, 1.000], same order in 60.0%" in t.describe()
    few = rank_stability(point, draws, n_sources=4)
    assert few.mean is None and "only 4 source images (< 5)" in few.reason
    assert rank_stability(point[:1], draws[:, :1], n_sources=10).reason == "needs at least 2 models"


def test_model_draws_resample_every_model_with_the_same_sources():
    ids = [f"s{i}" for i in range(40)]
    good = outcomes(ids, np.ones(40), np.ones(40), np.ones(40))  # right everywhere: FMR 100 in every resample
    half = outcomes(ids, np.ones(40), np.ones(40), np.arange(40) % 2 == 0)
    point, draws, g = model_draws([[good], [half, half]], 10, ("sa", "fmr"), n_boot=200, seed=1)
    assert g == 40 and draws.shape == (200, 2, 2) and point[:, 1].tolist() == [100.0, 50.0]
    assert np.all(draws[:, 0, 1] == 100.0) and np.all(draws[:, 1, 1] < 100)  # dominance survives every resample
    t = rank_stability(point[:, 1], draws[:, :, 1], n_sources=g)
    assert (t.mean, t.low, t.high, t.share_identical) == (1.0, 1.0, 1.0, 1.0)
    # paired: a source that one model gets right is resampled for both; shares of the same draw agree
    tied = model_draws([[half], [half]], 10, ("fmr",), n_boot=50)[1]
    assert np.array_equal(tied[:, 0, 0], tied[:, 1, 0])


def test_paired_differences_when_every_repetition_draws_fresh_sources():
    """Repetition r of both models shares its draw, but the draws differ between repetitions: still paired."""
    rng = np.random.default_rng(0)
    reps_a, reps_b = [], []
    for r in range(2):
        ids = [f"r{r}s{i}" for i in range(100)]
        base = rng.random(100) < 0.6
        reps_a.append(outcomes(ids, base, np.ones(100), base))
        reps_b.append(outcomes(ids, base & (np.arange(100) % 10 != 0), np.ones(100), base))
    d = metric_differences(reps_a, reps_b, 10, ("sa",), n_boot=300)["sa"]
    assert d.paired and d.n_sources == 200 and d.method.startswith("paired bootstrap(300) over 200 shared")
    indep = metric_differences(reps_a, reps_b, 10, ("sa",), n_boot=300, paired=False)["sa"]
    assert d.value == pytest.approx(indep.value) and (d.high - d.low) < 0.6 * (indep.high - indep.low)


# ------------------------------------------------------------------------------------------ ER intervals
def test_er_intervals_refit_the_line_per_draw():
    # three resamples, each with its own baseline line; in each, the baselines lie on it and model 4 is 5 above
    sa = np.array([[60.0, 70.0, 80.0, 75.0], [62.0, 71.0, 85.0, 70.0], [58.0, 69.0, 82.0, 78.0]])
    lines = [(1.5, -1.0), (1.0, 0.0), (2.0, -0.5)]
    pa = np.array([[*_line(row[:3], *wb), _line([row[3]], *wb)[0] + 5.0] for row, wb in zip(sa, lines)])
    fit = fit_effective_robustness(sa[0].tolist(), pa[0].tolist(), [True, True, True, False])
    out = er_intervals(fit, sa, pa, level=0.95)
    assert out.er_low[:3] == pytest.approx([0.0] * 3, abs=1e-9) and out.er_high[:3] == pytest.approx(
        [0.0] * 3, abs=1e-9
    )
    assert (out.er_low[3], out.er_high[3]) == pytest.approx((5.0, 5.0))
    assert out.interval == "bootstrap(3) over source images, line refitted per resample"
    untrusted = fit_effective_robustness(sa[0, :2].tolist(), pa[0, :2].tolist())  # 2 baselines: not trusted
    assert er_intervals(untrusted, sa[:, :2], pa[:, :2]).er_low == [None, None]


# ------------------------------------------------------------------------------------------ label-free
def test_softmax_corr_known_answers():
    k = 4
    prior = np.full(k, 0.25)
    assert softmax_corr(np.full((10, k), 1 / k), prior) == pytest.approx(1 / np.sqrt(k))  # uncertain: 1/sqrt(K)
    onehot = np.eye(k)[[0, 1, 2, 3, 0, 1, 2, 3]]
    assert softmax_corr(onehot, prior) == pytest.approx(1.0)  # certain and matching the prior: the maximum
    assert softmax_corr(np.eye(k)[[0] * 8], np.array([0, 0.5, 0.5, 0])) == 0.0  # all on a class of prior 0
    # by hand: P rows (1, 0) and (0.5, 0.5): C = [[0.625, 0.125], [0.125, 0.125]], q = (0.5, 0.5)
    # sum C_kk q_k = 0.375; ||C||_F = sqrt(0.390625 + 2 * 0.015625 + 0.015625) = 0.661438; ||q|| = 0.707107
    assert softmax_corr(np.array([[1.0, 0.0], [0.5, 0.5]]), np.array([0.5, 0.5])) == pytest.approx(
        0.375 / (0.661438 * 0.707107), rel=1e-5
    )
    assert softmax_corr(np.zeros((0, 2)), np.array([0.5, 0.5])) is None
    with pytest.raises(ValueError, match=r"probs \(N, K\) and prior \(K,\), got \(2, 3\) and \(2,\)"):
        softmax_corr(np.ones((2, 3)), np.ones(2))
    # hard decisions: the cosine between the predicted and the reference class histograms
    assert hard_softmax_corr([0, 0, 0, 1], [0, 1, 0, 1], 2) == pytest.approx(0.5 / (np.sqrt(0.625) * np.sqrt(0.5)))
    assert hard_softmax_corr([], [], 3) is None


def test_spearman_known_values():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, None], [1, 3, 2, 5]) == pytest.approx(0.5)  # None left out: 1 - 6*2/(3*8)
    assert spearman([1, 2], [1, 2]) is None and spearman([1, 1, 1], [1, 2, 3]) is None


# ------------------------------------------------------------------------------------------ floors (issue 40)
def test_an_agreeing_ratio_gets_the_interval_of_its_parts():
    """Issue 40's defect 1: 18 of 20 samples validated, every clean and perturbed image right, printed "FMR 100.00
    [100.00, 100.00]". Its parts' Wilson intervals are PA [82.41, 100] (18/18) and SA [83.89, 100] (20/20), and
    their MOVER-R combination (Donner & Zou 2012, by hand: L = 1 - sqrt(1 - 0.8241 (2 - 0.8241)) = 0.8241,
    U = (1 + sqrt(1 - 0.8389 (2 - 0.8389))) / (0.8389 (2 - 0.8389)) = 1.1921) is FMR [82.41, 119.21]."""
    ids = [f"s{i}" for i in range(20)]
    s = compute_scores(outcomes(ids, np.ones(20, bool), np.arange(20) < 18, np.ones(20, bool)), 10, n_boot=200)
    assert (s.pa.low, s.sa.low) == (pytest.approx(82.41, abs=0.01), pytest.approx(83.89, abs=0.01))
    assert (s.fmr.value, s.fmr.low, s.fmr.high) == (
        100.0,
        pytest.approx(82.41, abs=0.01),
        pytest.approx(119.21, abs=0.01),
    )
    assert s.fmr_validated.low == pytest.approx(82.41, abs=0.01) and s.fmr_validated.high > 100


@pytest.mark.parametrize("n", [5, 20, 100, 400, 999])
def test_no_interval_of_zero_width_from_fewer_than_a_thousand_sources(n):
    """Every source agreeing (one model; and two identical models), at any n below 1,000: every score of a run, every
    repetition mean and every difference has an interval of width > 0 that holds its value."""
    ids = [f"s{i}" for i in range(n)]
    for clean, final in ((np.ones(n, bool), np.ones(n, bool)), (np.ones(n, bool), np.zeros(n, bool))):
        o = outcomes(ids, clean, np.ones(n, bool), final)
        run = compute_scores(o, 10, n_boot=100)
        reps = bootstrap_scores([o, o], 10, n_boot=100)
        for e in [*run.estimates.values(), *reps.values()]:
            if e.value is not None and e.low is not None:
                assert e.high - e.low > 0 and e.low <= e.value <= e.high, e
        for d in metric_differences([o], [o], 10, ("sa", "pa", "fmr", "fmr_validated"), n_boot=50).values():
            assert d.high - d.low > 0 and d.low <= d.value <= d.high, d


def test_identical_models_difference_is_the_bonett_price_interval():
    """Two identical models on 100 sources, 50 right: no discordant pair. Bonett & Price (2012) add one pseudo-count
    to each discordant cell: p12 = p21 = 1/102, se = sqrt((p12 + p21) / 102) = 0.01386, +-2.72 points. The floor
    carries the same pseudo-counts through the delta method (sd with them, over n = 100: +-2.74)."""
    ids = [f"s{i}" for i in range(100)]
    a = outcomes(ids, np.r_[np.ones(50), np.zeros(50)], np.ones(100), np.ones(100))
    d = metric_differences([a], [a], 10, ("sa",), n_boot=200)["sa"]
    bonett_price = 1.959964 * 100 * math.sqrt((2 / 102) / 102)
    assert d.high == pytest.approx(bonett_price, rel=0.02) and d.low == pytest.approx(-d.high)


def test_disagreeing_sources_keep_the_bootstrap_interval():
    """Where the sources disagree the bootstrap interval is the wider one and stands (the floor only widens): 500
    sources with FMR about 50."""
    rng = np.random.default_rng(0)
    ids = [f"s{i}" for i in range(500)]
    clean, val = rng.random(500) < 0.85, rng.random(500) < 0.6
    o = outcomes(ids, clean, val, clean & (rng.random(500) < 0.5))
    sums = source_sums([o])
    draws = bootstrap([sums], rep_mean(["fmr"], 10), 1000, np.random.default_rng(0))
    lo, hi = percentile(draws[:, 0], 0.95)
    e = bootstrap_scores([o], 10, ("fmr",), n_boot=1000)["fmr"]
    assert e.low <= lo and e.high >= hi and (e.high - e.low) < 1.05 * (hi - lo)
