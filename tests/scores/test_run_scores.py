"""A run's scores, summary and warnings from hand-made per-sample records (driver.summarize), and results.json.

Issue 10: SA_v, FMR_v, VR_cond, the oracle's own accuracy and the unchanged share in every result, with the
warnings that say when PA means little. Issue 14: the summary says why FMR can exceed 100, which interval is
missing and why, and the real reason PA is undefined.
"""

from __future__ import annotations

import json

import pytest
import torch

from genEval import evaluate
from genEval.runs import RunConfig, RunIdentity, SampleRecord
from genEval.runs.recording import RunOutput
from genEval.runs.summary import summarize
from genEval.scores.run_scores import Scoring
from genEval.search.perturb import SearchConfig
from tests.support.toys import LinearClassifier, ListDataset, ModelOracle, SigmoidGenerator

CLASSES = ["a", "b", "c", "d"]


def rec(
    i: int,
    *,
    label: int = 0,
    clean: bool = True,
    start_ok: bool = True,
    steps: int = 2,
    rejected: int = -1,
    final: bool = True,
    oracle_clean: bool = True,
    oracle_recon: bool = True,
    linf: float = 0.1,
) -> SampleRecord:
    """One sample's record; ``steps`` accepted steps (0 = not validated), predictions right or wrong."""
    wrong = (label + 1) % len(CLASSES)
    return SampleRecord(
        source_id=f"s{i}",
        index=i,
        label=label,
        reference=label,
        clean_pred=label if clean else wrong,
        recon_pred=label,
        start_ok=start_ok,
        validated=steps > 0,
        accepted_steps=steps,
        rejected_at=rejected,
        first_fooled=-1 if final else 1,
        final_pred=label if final else wrong,
        oracle_clean_pred=label if oracle_clean else wrong,
        oracle_start_pred=label if oracle_recon else wrong,
        oracle_score=0.9,
        latent_dist=0.0,
        image_dist=0.0,
        image_linf=linf,
    )


def run(records, config=None):
    config = {"search": {"budget": 2, "update": "adam", "step_size": 0.001}} if config is None else config
    scoring = Scoring.coerce({"interval": "wilson", "n_boot": 200, "gap_warn_points": 10.0, **config})
    return summarize(
        records,
        CLASSES,
        config=RunConfig.of(config, SearchConfig.recorded(config.get("search")), scoring),
        identity=RunIdentity(config, {"classifier": "c", "generator": "g", "oracle": "o", "data": "d"}, seed=0),
        seed_drawn=False,
        device="cpu",
        run_dir=None,
        timings={},
    )


def test_results_json_carries_the_new_scores_with_intervals_and_counts():
    # 10 samples; 8 validated (s0..s7), 9 passed the start check; clean right on s0..s6; perturbed right on
    # s0..s3; the oracle wrong on the clean image of s9 and on the reconstruction of s8 s9; s0 unchanged
    records = [
        rec(
            i,
            clean=i < 7,
            final=i < 4,
            linf=0.1 if i else 0.5 / 255,
            steps=2 if i < 8 else 0,
            start_ok=i < 9,
            oracle_clean=i != 9,
            oracle_recon=i < 8,
        )
        for i in range(10)
    ]
    res = run(records)
    scores = json.loads(json.dumps(res.to_dict()))["scores"]  # what results.json holds
    expect = {
        "sa_validated": (7, 8),
        "vr_conditional": (8, 9),
        "oracle_clean_accuracy": (9, 10),
        "oracle_recon_accuracy": (8, 10),
        "unchanged_share": (1, 8),
    }
    for key, (k, n) in expect.items():
        e = scores[key]
        assert (e["k"], e["n"], e["method"]) == (k, n, "wilson") and e["value"] == pytest.approx(100 * k / n)
        assert e["low"] < e["value"] < e["high"] or e["value"] in (0.0, 100.0)
    assert scores["sa"]["value"] == 70.0 and scores["pa"]["value"] == 50.0
    fmr_v = scores["fmr_validated"]
    assert fmr_v["value"] == pytest.approx(100 * 50 / 87.5) and fmr_v["low"] <= fmr_v["value"] <= fmr_v["high"]
    assert fmr_v["method"] == "bootstrap(200, source images)"
    assert res.metrics["fmr_validated"] == fmr_v["value"] and "oracle_start_accuracy" not in res.metrics
    text = res.summary()
    assert "SA_v 87.50 [" in text and "(7/8: SA over the validated samples)" in text
    assert "VR_cond 88.89 [" in text and "FMR_v 57.14 [" in text
    assert "oracle clean acc. 90.00 [" in text and "(9/10: the oracle's own verdict" in text
    assert "oracle recon. acc. 80.00 [" in text
    assert "unchanged 12.50 [" in text
    assert res.per_class[0]["sa_low"] is not None and res.per_class[0]["oracle_clean_accuracy"] == 90.0


def test_an_oracle_below_the_threshold_warns():
    records = [rec(i, oracle_clean=i < 6, oracle_recon=i < 9) for i in range(10)]  # 60% and 90%
    res = run(records, {"search": {"budget": 2}, "oracle_warn_accuracy": 70})
    warn = [w for w in res.warnings if w.startswith("oracle accuracy")]
    assert warn == [
        "oracle accuracy: the oracle is right on only 60.0% on the clean images (oracle_warn_accuracy=70)"
        ". PA is only as meaningful as the judge: use a stronger oracle or check its class names / "
        "prompts."
    ]
    assert not [w for w in run(records, {"oracle_warn_accuracy": 50}).warnings if w.startswith("oracle accuracy")]
    assert not [w for w in run(records, {"oracle_warn_accuracy": None}).warnings if w.startswith("oracle")]
    assert [w for w in run(records, {}).warnings if w.startswith("oracle accuracy")]  # default threshold 70


def test_a_run_whose_validated_samples_did_not_move_warns_naming_the_search_settings():
    moved = [rec(i, linf=0.5 / 255 if i < 6 else 0.05) for i in range(10)]  # 6 of 10 unchanged
    res = run(moved, {"search": {"budget": 50, "update": "sgd", "step_size": 0.001}})
    warn = [w for w in res.warnings if w.startswith("unchanged")]
    assert len(warn) == 1 and warn[0].startswith("unchanged: 6 of 10 validated samples moved less than 1/255")
    assert "search.step_size" in warn[0] and "search.update" in warn[0]
    assert "(now update=sgd, step_size=0.001, budget=50); e.g. search.update=adam." in warn[0]
    adam = run(moved, {"search": {"budget": 2, "update": "adam", "step_size": 0.001}}).warnings
    assert "search.budget" in adam[-1] and adam[-1].endswith(
        "(now update=adam, step_size=0.001, budget=2); e.g. search.update=sign."
    )
    half = [rec(i, linf=0.5 / 255 if i < 5 else 0.05) for i in range(10)]  # not most: no warning
    assert not [w for w in run(half).warnings if w.startswith("unchanged")]


def test_sgd_with_a_tiny_step_leaves_the_validated_images_unchanged_and_warns():
    """The measured case of issue 10 (update=sgd, step 0.001: 188 of 194 unchanged), on a toy."""
    x = torch.rand(20, 1, 4, 3, generator=torch.Generator().manual_seed(0))
    clf, judge = LinearClassifier(12, 3, seed=0), LinearClassifier(12, 3, seed=1)
    with torch.no_grad():
        y = judge(x).argmax(1).tolist()
    res = evaluate(
        clf,
        ListDataset(x, y, ["a", "b", "c"]),
        SigmoidGenerator(),
        ModelOracle(judge),
        SearchConfig(budget=3, step_size=0.001, update="sgd", start_noise=0.0),
        seed=0,
        output=RunOutput(progress=False),
        scoring=Scoring(n_boot=50),
    )
    s = res.scores
    assert s.n_validated > 10 and s.n_unchanged == s.n_validated and s.unchanged_share.value == 100.0
    assert any(w.startswith("unchanged:") and "now update=sgd, step_size=0.001, budget=3" in w for w in res.warnings)
    big = evaluate(
        clf,
        ListDataset(x, y, ["a", "b", "c"]),
        SigmoidGenerator(),
        ModelOracle(judge),
        SearchConfig(budget=3, step_size=0.3, update="sign", start_noise=0.0),
        seed=0,
        output=RunOutput(progress=False),
        scoring=Scoring(n_boot=50),
    )
    assert big.scores.n_unchanged == 0 and not any(w.startswith("unchanged:") for w in big.warnings)


def test_the_summary_explains_an_fmr_above_100():
    # SA 50 over all 10, but the 5 validated samples are 4 right clean / 4 right perturbed: PA 80, FMR 160
    records = [rec(i, clean=i < 5, final=i < 4, steps=2 if i < 5 else 0) for i in range(10)]
    res = run(records)
    assert res.scores.fmr.value == pytest.approx(160.0) and res.scores.fmr_validated.value == pytest.approx(80.0)
    text = res.summary()
    assert "note: FMR > 100 is possible: PA is measured over the validated samples only" in text
    assert "note: FMR > 100" not in run([rec(i) for i in range(10)]).summary()


def test_the_summary_says_which_interval_is_missing_and_why():
    records = [rec(i, steps=2 if i == 0 else 0, final=False) for i in range(12)]  # one validated sample, fooled
    text = run(records).summary()
    assert (
        "FMR  0.00 (no interval: only 1 source images with a validated sample (< 5): a bootstrap over so few is "
        "degenerate, so no interval is given)"
    ) in text
    assert "PA   0.00 [0.00, 79.35]" in text  # a proportion keeps its Wilson interval


def test_undefined_pa_in_the_summary_names_the_budget_from_the_config():
    records = [rec(i, steps=0) for i in range(6)]
    res = run(records, {"search": {"budget": 0}})
    assert "PA   undefined (no validated sample: search.budget is 0, so no step was taken)" in res.summary()
    rejected = run([rec(i, steps=0, rejected=1) for i in range(6)], {"search": {"budget": 50}})
    assert "the oracle rejected the first step of every one of the 6 samples" in rejected.scores.pa.reason
    nothing = run([rec(i, steps=0, start_ok=False) for i in range(6)], {"search": {"budget": 50}})
    assert "no sample passed the start check" in nothing.scores.pa.reason
