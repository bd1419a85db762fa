"""compare / aggregate: known answers on hand-made runs, the layout and files of real toy runs, the command."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import get_method
from scipy.special import expit, logit

from genEval.campaigns import Design, EvaluationPlan, Setup, run_campaign
from genEval.campaigns.repetitions import derive_seeds
from genEval.commands import CONF_DIR, classifier_nodes, config_nodes
from genEval.commands.compare import run_compare
from genEval.comparisons.aggregate import aggregate
from genEval.comparisons.leaderboard import Comparison
from genEval.comparisons.settings import ComparisonSettings
from genEval.scores.definitions import LEADERBOARD_SCORES
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from tests.support.assets import ROOT
from tests.support.hand_runs import write_hand_runs
from tests.support.toys import LinearClassifier, ListDataset, ModelOracle, SigmoidGenerator

MODELS = ("lin0", "lin1", "lin2")
SEARCH = SearchConfig(budget=5, step_size=0.05, update="sign", start_noise=0.1)
N_BOOT = 150


# ------------------------------------------------------------------------------------------ hand-made runs
@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    root = tmp_path_factory.mktemp("hand")
    runs = write_hand_runs(root)
    return aggregate(
        [runs], out_dir=root / "cmp", settings=ComparisonSettings(baselines=["A", "B", "C"], n_boot=200)
    ), root / "cmp"


def test_hand_made_runs_give_the_hand_computed_leaderboard(hand):
    comp, _ = hand
    # FMR per repetition: A 50 | 75, B 50 | 100, C 100 | 33.3 -> means 62.5, 75, 66.7: B, C, A
    assert comp.models == ["B", "C", "A"]
    a, b, c = comp.row("A"), comp.row("B"), comp.row("C")
    assert (a["sa"].value, b["sa"].value, c["sa"].value) == (100.0, 50.0, 75.0)
    assert (a["pa"].value, b["pa"].value, c["pa"].value) == (62.5, 37.5, 50.0)
    assert a["fmr"].per_rep == [50.0, 75.0] and b["fmr"].per_rep == [50.0, 100.0]
    assert c["fmr"].per_rep == pytest.approx([100.0, 100 / 3])
    assert (a["fmr"].value, b["fmr"].value, c["fmr"].value) == pytest.approx((62.5, 75.0, 200 / 3))
    assert b["fmr"].std == pytest.approx(50 / 2**0.5) and a["sa"].std == 0.0
    assert a["vr"].value == 100.0 and a.n == 8 and a.n_validated == 8 and a.repetitions == 2
    # ranks: FMR B 1, C 2, A 3; SA A 1, C 2, B 3; rank_diff = rank_sa - rank_fmr
    assert [(r.rank_fmr, r.rank_sa, r.rank_diff) for r in comp.leaderboard] == [(1, 3, 2), (2, 2, 0), (3, 1, -2)]
    assert a.seeds == [100, 101] and comp.settings.repetition_seeds == [100, 101]
    assert a["fmr"].method == "mean of 2 repetitions, bootstrap(200, 8 source images)"
    # every sample validated: SA_v = SA, FMR_v = FMR, VR_cond 100; the oracle is wrong on 1 of 4 clean images
    # and 1 of 4 validated images is unchanged (hand_runs.py)
    for r in (a, b, c):
        assert r["sa_validated"].value == r["sa"].value and r["fmr_validated"].value == pytest.approx(r["fmr"].value)
        assert (r["vr_conditional"].value, r["oracle_clean_accuracy"].value) == (100.0, 75.0)
        assert (r["oracle_recon_accuracy"].value, r["unchanged_share"].value) == (100.0, 25.0)
        assert (r.rejected_per_sample, r.steps_per_sample, r.time_s) == (0.0, 3.0, None)


def test_hand_made_runs_give_the_hand_computed_stability(hand):
    s = hand[0].stability
    # rep0 FMR (A 50, B 50, C 100) vs rep1 (A 75, B 100, C 33.3): 0 concordant, 2 discordant, one tie in
    # rep0 -> tau-b = -2 / sqrt(2 * 3)
    assert [(t.reps, t.n_models) for t in s.tau_reps] == [([0, 1], 3)]
    boot = s.tau_bootstrap  # a distribution, not one tau: the three models are close, so resamples reorder them
    assert boot.n_models == 3 and boot.n_sources == 8 and boot.n_boot == 200 and boot.n_defined > 150
    assert -1 <= boot.low <= boot.median <= boot.high <= 1 and boot.low < boot.high
    assert 0 < boot.share_identical < 1 and boot.mean < 1
    assert s.sources_resampled is False  # both repetitions used s0..s7
    assert any("every repetition evaluated the same source images" in w for w in hand[0].warnings)
    assert s.tau_reps[0].tau == pytest.approx(-2 / 6**0.5) and s.tau_reps_mean == s.tau_reps_min
    assert s.tau_fmr_sa == pytest.approx(-1.0)  # FMR order B, C, A is exactly the reverse of SA order
    # A-C and B-C change order between the repetitions; A-B does not (tied in rep0)
    assert {frozenset((f.a, f.b)) for f in s.flips} == {frozenset("AC"), frozenset("BC")}
    for f in s.flips:
        assert sorted(f.a_higher + f.b_higher) == [0, 1]
    assert not s.stable and not s.identical_repetitions
    # the default ranking score is FMR_v (every hand-made sample is validated, so FMR_v = FMR here)
    assert s.score == "fmr_validated" and s.tau_rank_fmr == pytest.approx(1.0)
    assert any("2 pair(s) of models change FMR_v order" in w for w in hand[0].warnings)


def test_hand_made_runs_give_the_hand_computed_differences_and_er(hand):
    comp, _ = hand
    d = {(x.a, x.b, x.metric): x for x in comp.differences}
    assert len(comp.differences) == 3 * 7 and all(x.paired and x.n_sources == 8 for x in comp.differences)
    assert d[("B", "A", "sa")].value == -50.0 and d[("B", "A", "pa")].value == -25.0
    assert d[("B", "A", "fmr")].value == pytest.approx(12.5) and d[("C", "A", "vr")].value == 0.0
    # ER: an independent least-squares line through (logit SA, logit PA), SA 100 clipped to 0.999
    x = logit(np.clip(np.array([50.0, 75.0, 100.0]) / 100, 1e-3, 1 - 1e-3))
    y = logit(np.array([37.5, 50.0, 62.5]) / 100)
    w, b = np.polyfit(x, y, 1)
    er = comp.effective_robustness
    assert (er.w, er.b) == pytest.approx((w, b)) and er.n_baselines == 3
    pred = 100 * expit(w * x + b)
    assert [r.er_predicted_pa for r in comp.leaderboard] == pytest.approx(pred)
    assert (comp.row("A").er is None) == (not er.trusted)
    assert er.baselines == [True, True, True] and comp.settings.baselines == ["A", "B", "C"]


def test_effective_robustness_is_left_out_without_named_baselines(hand):
    runs = hand[1].parent / "runs"
    none = aggregate([runs], settings=ComparisonSettings(n_boot=50))
    er = none.effective_robustness
    assert er.w is None and er.n_baselines == 0 and all(r.er is None and not r.baseline for r in none.leaderboard)
    assert "never on the interventions it judges" in er.reason and "baselines=[...]" in er.reason
    assert any("effective robustness: left out" in n for n in none.notes())


def test_effective_robustness_gets_a_bootstrap_interval(hand):
    # the hand-made fit (three baselines) is trusted with the gate lowered; each resample refits the line
    runs = hand[1].parent / "runs"
    comp = aggregate([runs], settings=ComparisonSettings(baselines=["A", "B", "C"], er_min_r2=0.0, n_boot=300))
    er = comp.effective_robustness
    assert er.trusted and er.interval.startswith("bootstrap(300) over source images")
    for r in comp.leaderboard:
        assert r.er_low is not None and r.er_low <= r.er <= r.er_high
    assert "ER reported with bootstrap(300)" in " ".join(comp.notes())


def _softmax_corr_2(rows: list[tuple[float, float]], q: tuple[float, float]) -> float:
    """SoftmaxCorr written out for two classes (S1 Sec. 4.3): sum_k C_kk q_k / (||C||_F ||q||), C = mean p p^T."""
    c00 = sum(a * a for a, _ in rows) / len(rows)
    c11 = sum(b * b for _, b in rows) / len(rows)
    c01 = sum(a * b for a, b in rows) / len(rows)
    return (c00 * q[0] + c11 * q[1]) / ((c00**2 + c11**2 + 2 * c01**2) ** 0.5 * (q[0] ** 2 + q[1] ** 2) ** 0.5)


def test_hand_made_label_free_measures(hand):
    # hand_runs.CONFIDENCE: the predicted class gets p (right, wrong) = A (.9, .6), B (.8, .7), C (.95, .55); the
    # oracle's class on every final image is the label, so q = (.5, .5). Final correctness per repetition (HAND):
    # A 1100 | 1110, B 1000 | 1100, C 1110 | 1000; clean: A 1111, B 1100, C 1110 (both repetitions).
    comp = hand[0]
    outcome = {"A": ([1, 1, 0, 0], [1, 1, 1, 0]), "B": ([1, 0, 0, 0], [1, 1, 0, 0]), "C": ([1, 1, 1, 0], [1, 0, 0, 0])}
    p = {"A": (0.9, 0.6), "B": (0.8, 0.7), "C": (0.95, 0.55)}
    for m, reps in outcome.items():
        corr = []
        for final in reps:
            rows = []
            for ok, y in zip(final, [0, 1, 0, 1]):
                conf = p[m][0 if ok else 1]
                pred = y if ok else 1 - y
                rows.append((conf, 1 - conf) if pred == 0 else (1 - conf, conf))
            corr.append(_softmax_corr_2(rows, (0.5, 0.5)))
        assert comp.row(m).softmax_corr == pytest.approx(sum(corr) / 2)
    # MaxPred: mean top-1; SoftGap: mean (top-1 - top-2); agreement with the oracle = accuracy here (oracle = label)
    assert comp.row("A").max_pred == pytest.approx((0.75 + 0.825) / 2)
    assert comp.row("B").max_pred == pytest.approx((0.725 + 0.75) / 2)
    assert comp.row("C").soft_gap == pytest.approx(((0.9 * 3 + 0.1) / 4 + (0.9 + 0.1 * 3) / 4) / 2)
    assert [comp.row(m).oracle_agreement for m in "ABC"] == pytest.approx([0.625, 0.375, 0.5])
    # ATC-MC: t such that as many clean images fall below t as are wrong: A t=.9 (no error), B t=.8 (4 of 8 wrong),
    # C t=.95 (2 of 8 wrong); predicted accuracy = share of final images with top-1 >= t
    assert [comp.row(m).atc_mc for m in "ABC"] == pytest.approx([(0.5 + 0.75) / 2, (0.25 + 0.5) / 2, (0.75 + 0.25) / 2])
    lf = comp.label_free
    # PA: A 62.5 > C 50 > B 37.5; agreement, ATC-MC and MaxPred order the models the same: rho = tau_w = 1
    for name in ("oracle_agreement", "atc_mc", "max_pred"):
        assert lf.measures[name]["pa"]["rho"] == pytest.approx(1.0)
        assert lf.measures[name]["pa"]["tau_w"] == pytest.approx(1.0)
    assert lf.sensitivity is None and lf.not_recorded == []
    assert lf.spearman_pa == lf.measures["softmax_corr"]["pa"]["rho"]


def test_the_terminal_summary_prints_the_confidence_columns_with_distinct_headers(hand):
    # the two tables of the label-free measures and the confidence scores: every header once, no line over 101
    # characters (the terminal's score table), and each model's SoftmaxCorr as the row holds it
    comp = hand[0]
    lines = comp.summary().splitlines()
    heads = [line.split() for line in lines if line.lstrip().startswith("model") and "SoftmaxCorr" in line]
    heads += [line.split() for line in lines if line.lstrip().startswith("model") and "AURRA" in line]
    assert len(heads) == 2
    words = " ".join(" ".join(h) for h in heads)
    for header in ("SoftmaxCorr", "MaxPred", "SoftGap", "ATC-MC", "agree oracle", "AURRA clean", "AURRA pert"):
        assert words.count(header) == 1
    assert words.count("RMSCE clean") == 1 and words.count("RMSCE pert") == 1 and "shift AUROC" in words
    at = [
        i
        for i, line in enumerate(lines)
        if line.lstrip().startswith("model") and ("AURRA" in line or "MaxPred" in line)
    ]
    assert all(set(lines[i + 1]) == {"-"} and len(lines[i]) <= 101 for i in at)
    assert all(len(line) <= 101 for i in at for line in lines[i : i + 2 + len(comp.models)])
    row = next(line for line in lines if line.split()[:1] == ["A"] and len(line.split()) == 6)
    assert float(row.split()[1]) == pytest.approx(comp.row("A").softmax_corr, abs=5e-4)


def test_hand_made_per_class_table(hand):
    per = {r["name"]: r for r in hand[0].per_class["A"]}
    # A, both repetitions pooled: cat (s0, s2 and copies) perturbed right 6 of 8, dog (s1, s3, ...) 4 of 8
    assert (per["cat"]["sa"], per["cat"]["pa"], per["cat"]["fmr"], per["cat"]["n"]) == (100.0, 75.0, 75.0, 8)
    assert (per["dog"]["pa"], per["dog"]["fmr"]) == (50.0, 50.0)
    # Wilson intervals per class (scipy), and the oracle's per-class accuracy: wrong on every dog of outcome 3
    assert (per["cat"]["pa_low"], per["cat"]["pa_high"]) == pytest.approx((100 * 0.40927, 100 * 0.92853), abs=1e-3)
    assert per["cat"]["oracle_clean_accuracy"] == 100.0 and per["dog"]["oracle_clean_accuracy"] == 50.0


def test_hand_made_leaderboard_files(hand):
    comp, out = hand
    with open(out / "leaderboard.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["model"] for r in rows] == ["B", "C", "A"]
    b = rows[0]
    assert (b["rank_fmr"], b["rank_sa"], b["rank_diff"], b["repetitions"]) == ("1", "3", "2", "2")
    assert float(b["sa"]) == 50.0 and float(b["fmr"]) == 75.0 and float(b["fmr_std"]) == pytest.approx(35.3553, 1e-4)
    assert float(b["sa_low"]) <= 50.0 <= float(b["sa_high"])
    assert (b["er"] == "") == (not comp.effective_robustness.trusted)
    md = (out / "leaderboard.md").read_text()
    assert "| rank | model | FMR | FMR_v | SA | SA_v |" in md and "| 1 | B (baseline) | 75.00 [" in md
    assert "Kendall tau" in md and "## Run cost" in md and "| B | 0.000 | 3.00 |" in md
    model = json.loads((out / "models" / "A.json").read_text())
    assert model["sa"]["value"] == 100.0 and model["rank_fmr"] == 3 and model["sa"]["per_rep"] == [100.0, 100.0]
    assert {c["name"] for c in model["per_class"]} == {"cat", "dog"}
    assert Comparison.load(out).to_dict() == comp.to_dict()
    assert not (out / "report.html").exists()  # the library writes data; the command writes the report


def test_one_repetition_without_recorded_scores_is_bootstrapped(hand, tmp_path):
    runs = hand[1].parent / "runs"
    one = aggregate(
        {"A": [runs / "A" / "rep1"]}, settings=ComparisonSettings(n_boot=50)
    )  # results.json has no scores: recomputed
    assert one.row("A")["pa"].value == 75.0 and one.row("A")["pa"].method.startswith("bootstrap(50,")
    assert one.stability.tau_reps_mean is None and "at least 2 repetitions" in one.stability.tau_reps_note


# ------------------------------------------------------------------------------------------ real toy runs
def toy_roles(n: int = 24):
    """8x8 grey images labelled by the oracle itself, so its start check passes and SA varies by model."""
    x = torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    oracle_model = LinearClassifier(64, 3, seed=7)
    with torch.no_grad():
        y = oracle_model(x).argmax(1).tolist()
    return ListDataset(x, y, ["a", "b", "c"]), SigmoidGenerator(), ModelOracle(oracle_model)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("cmp")
    data, gen, oracle = toy_roles()
    calls = {m: 0 for m in MODELS}

    def factory(seed: int, name: str):
        def build():
            calls[name] += 1
            return LinearClassifier(64, 3, seed=seed)

        return build

    comp = run_campaign(
        EvaluationPlan(SEARCH, progress=False, execution=Execution(batch_size=12)),
        Design({m: factory(i, m) for i, m in enumerate(MODELS)}, out, 2, [11, 12], ComparisonSettings(n_boot=N_BOOT)),
        Setup(data, gen, oracle),
    )
    return comp, out, calls


def results(out: Path, model: str, rep: int) -> dict:
    return json.loads((out / "runs" / model / f"rep{rep}" / "results.json").read_text())


def test_directory_layout_and_recorded_seeds(made):
    comp, out, calls = made
    # each factory builds its model twice: once for the check that no model is part of the oracle (before any run),
    # once for all its repetitions (one model in memory at a time)
    assert calls == {m: 2 for m in MODELS}
    for m in MODELS:
        for r in (0, 1):
            d = out / "runs" / m / f"rep{r}"
            assert (d / "results.json").is_file() and (d / "samples.jsonl").is_file()
            assert not (d / "images").exists()  # save_images was not asked for
            res = results(out, m, r)
            assert res["seed"] == [11, 12][r]  # the same seed for every model within a repetition
            assert res["config"]["comparison"] == {
                "model": m,
                "repetition": r,
                "seed": [11, 12][r],
                "repetitions": 2,
                "models": list(MODELS),
                "data_seed": None,
                # the stop rule, filled with its defaults, so `compare runs=[...]` re-judges with the rule it ran with
                "sequential": {
                    "stop": "fixed",
                    "round_sources": 200,
                    "max_sources": 5000,
                    "confidence": 0.95,
                    "margin": 1.0,
                    "power": 0.8,
                    "resolution": 2.0,
                    "familywise": False,
                    "boundary": "spending",
                    "spending": "pocock",
                },
            }
        assert (out / "models" / f"{m}.json").is_file()
    for f in ("leaderboard.csv", "leaderboard.md", "comparison.json"):
        assert (out / f).is_file()
    assert comp.settings.repetition_seeds == [11, 12] and comp.seeds == {m: [11, 12] for m in MODELS}
    assert comp.out_dir == str(out)


def test_leaderboard_numbers_are_the_mean_of_the_runs(made):
    comp, out, _ = made
    for row in comp.leaderboard:
        for m in LEADERBOARD_SCORES:
            per = [results(out, row.model, r)["scores"][m]["value"] for r in (0, 1)]
            assert row[m].per_rep == per
            if None not in per:
                assert row[m].value == pytest.approx(sum(per) / 2, abs=1e-9)
                assert row[m].low <= row[m].value + 1e-9 and row[m].value - 1e-9 <= row[m].high
        assert row.n == 24 and row.repetitions == 2


def test_single_repetition_uses_the_runs_own_intervals(made):
    _, out, _ = made
    one = aggregate({m: [out / "runs" / m / "rep0"] for m in MODELS}, settings=ComparisonSettings(n_boot=N_BOOT))
    for row in one.leaderboard:
        scores = results(out, row.model, 0)["scores"]
        for m in LEADERBOARD_SCORES:
            assert (row[m].value, row[m].low, row[m].high, row[m].method) == (
                scores[m]["value"],
                scores[m]["low"],
                scores[m]["high"],
                scores[m]["method"],
            )


def test_identical_repetitions_are_flagged(made, tmp_path):
    _, out, _ = made
    assert made[0].stability.identical_repetitions is False  # start noise makes repetitions differ
    for i in (0, 1):
        shutil.copytree(out / "runs" / "lin0" / "rep0", tmp_path / f"copy{i}")
    same = aggregate({"lin0": [tmp_path / "copy0", tmp_path / "copy1"]}, settings=ComparisonSettings(n_boot=20))
    assert same.stability.identical_repetitions and same.stability.tau_reps_mean is None
    assert any("rank stability is trivially perfect" in w for w in same.warnings)


def test_aggregate_from_existing_directories_gives_the_same_comparison(made, tmp_path):
    comp, out, _ = made
    again = aggregate([out / "runs"], out_dir=tmp_path, settings=ComparisonSettings(n_boot=N_BOOT))
    assert again.leaderboard == comp.leaderboard
    assert again.differences == comp.differences and again.stability == comp.stability
    assert (tmp_path / "leaderboard.csv").read_text() == (out / "leaderboard.csv").read_text()


def test_compare_and_aggregate_errors(made, tmp_path):
    _, out, _ = made
    setup = Setup(*toy_roles(6))
    clf = {"ok": LinearClassifier(64, 3)}
    with pytest.raises(ValueError, match=r"model names \['bad name'\] are not usable as directory names"):
        run_campaign(EvaluationPlan(), Design({"bad name": LinearClassifier(64, 3)}, tmp_path), setup)
    with pytest.raises(ValueError, match=r"got 1 seeds for 2 repetitions"):
        run_campaign(EvaluationPlan(), Design(clf, tmp_path, repetitions=2, seeds=[1]), setup)
    with pytest.raises(ValueError, match=r"repetitions must be an integer >= 1, got 0"):
        run_campaign(EvaluationPlan(), Design(clf, tmp_path, repetitions=0), setup)
    with pytest.raises(ValueError, match=r"baselines \['nope'\] are not among the classifiers \(ok\)"):
        run_campaign(EvaluationPlan(), Design(clf, tmp_path, settings=ComparisonSettings(baselines=["nope"])), setup)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'seed'"):  # seeds=... (one per repetition)
        Design(clf, tmp_path, seed=3)
    assert not (tmp_path / "runs").exists()  # every error came before any run
    with pytest.raises(ValueError, match=r"baselines \['x'\] are not among the compared models"):
        aggregate([out / "runs"], settings=ComparisonSettings(baselines=["x"], n_boot=10))
    with pytest.raises(FileNotFoundError, match=r"does not exist"):
        aggregate([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no finished run \(results.json\) under"):
        aggregate([tmp_path / "empty"])
    with pytest.raises(ValueError, match=r"run directories given more than once"):
        aggregate([out / "runs" / "lin0" / "rep0", out / "runs" / "lin0" / "rep0"])
    shutil.copytree(out / "runs" / "lin0" / "rep0", tmp_path / "copy")
    with pytest.raises(ValueError, match=r"model 'lin0' has more than one run for repetition\(s\) \[0\]"):
        aggregate([out / "runs" / "lin0" / "rep0", tmp_path / "copy"])


def test_runs_on_other_classes_are_refused(hand, tmp_path):
    runs = hand[1].parent / "runs"
    shutil.copytree(runs / "A" / "rep0", tmp_path / "other")
    res = json.loads((tmp_path / "other" / "results.json").read_text())
    res["class_names"] = ["x", "y"]
    (tmp_path / "other" / "results.json").write_text(json.dumps(res))
    with pytest.raises(ValueError, match=r"has classes \['x', 'y'\] but .* has \['cat', 'dog'\]"):
        aggregate({"A": [runs / "A" / "rep0"], "Z": [tmp_path / "other"]}, settings=ComparisonSettings(n_boot=10))


def test_derive_seeds():
    assert derive_seeds(5, 3) == derive_seeds(5, 3) and len(set(derive_seeds(5, 3))) == 3
    assert derive_seeds(5, 3) != derive_seeds(6, 3)
    assert all(0 <= s < 2**31 for s in derive_seeds(None, 4))


# ------------------------------------------------------------------------------------------ the command
def _compose(overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="compare", overrides=overrides)


def test_compare_config_composes_with_the_intervention_zoo():
    cfg = _compose([])
    assert cfg.classifiers is None and cfg.zoo.baselines == ["erm_s0", "erm_s1", "erm_tenth", "erm_twentieth"]
    nodes = config_nodes(cfg, "zoo.classifiers", "classifier")
    assert {n.recipe for n in nodes.values()} >= {"erm", "gaussian_noise", "pgd", "augmix"}
    assert all(callable(get_method(node._target_)) for node in nodes.values())
    # no compared model is a member of the oracle: (architecture, seed) pairs differ (the CNN is the recipes' default)
    compared = {(node.get("arch", "cnn"), node.seed) for node in nodes.values()}
    judges = {(m.classifier.arch, m.classifier.seed) for m in cfg.oracle.members}
    assert compared.isdisjoint(judges) and len(compared) >= 4
    assert cfg.repetitions == 2 and cfg.er_min_r2 == 0.8 and cfg.data.limit == 100 and cfg.runs is None
    assert cfg.generator._target_ and cfg.oracle._target_ and cfg.search.budget == 50
    assert cfg.search.start_noise == 1.0  # repetitions must differ (see conf/compare.yaml)
    assert cfg.report is True and cfg.rank_by == "fmr_validated" and cfg.allow_self_judging is False


def test_command_aggregates_runs_writes_the_report_and_reports_user_errors(hand, tmp_path, capsys):
    runs = hand[1].parent / "runs"
    cfg = _compose([f"runs=[{runs}]", f"out_dir={tmp_path / 'agg'}", "n_boot=50"])
    assert run_compare(cfg) == str(tmp_path / "agg")
    printed = capsys.readouterr().out
    assert "genEval compare  3 models x 2 repetitions" in printed
    assert printed.index(" 1 B ") < printed.index(" 2 C ") < printed.index(" 3 A ")
    assert (tmp_path / "agg" / "report.html").is_file() and (tmp_path / "agg" / "leaderboard.csv").is_file()
    run_compare(_compose([f"runs=[{runs}]", f"out_dir={tmp_path / 'quiet'}", "n_boot=10", "report=false"]))
    assert not (tmp_path / "quiet" / "report.html").exists()

    with pytest.raises(SystemExit) as exc:
        run_compare(_compose([f"runs=[{tmp_path / 'nowhere'}]", f"out_dir={tmp_path / 'x'}"]))
    assert exc.value.code == 2
    assert "geneval compare: error: run directory" in capsys.readouterr().err

    with pytest.raises(SystemExit):
        run_compare(_compose(["classifiers={a: not_a_config}", f"out_dir={tmp_path / 'y'}"]))
    err = capsys.readouterr().err
    assert "unknown classifier config 'not_a_config' in classifiers; available:" in err and "digits_cnn" in err


def test_classifier_entries_accept_conf_classifier_names():
    cfg = _compose(["classifiers={r20: cifar_resnet20, cnn: digits_cnn}"])
    nodes = classifier_nodes(cfg, "classifiers")
    assert list(nodes) == ["r20", "cnn"]
    assert nodes["r20"]._target_ == "genEval.classifiers.cifar_resnet" and nodes["r20"].depth == 20
    as_list = classifier_nodes(_compose(["classifiers=[cifar_resnet20,cifar_resnet32]"]), "classifiers")
    assert list(as_list) == ["cifar_resnet20", "cifar_resnet32"] and as_list["cifar_resnet32"].depth == 32
    assert nodes["r20"].checkpoint.endswith("weights/cifar10-resnet/resnet20-12fca82f.th")  # ${assets}


def test_cli_runs_the_models_as_written(tmp_path):
    """`geneval compare ... 'classifiers=[a,b]' repetitions=2`: the model-running branch, end to end."""
    out = tmp_path / "cmp"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "genEval.cli",
            "compare",
            "data=digits",
            "data.limit=10",
            "generator=identity",
            "search.budget=2",
            "classifiers=[digits_cnn,digits_mlp]",
            "allow_self_judging=true",  # digits_mlp is a member of the default oracle
            "repetitions=2",
            "seed=3",
            "n_boot=50",
            "device=cpu",
            f"hydra.run.dir={out}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    with open(out / "leaderboard.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(row["model"] for row in rows) == ["digits_cnn", "digits_mlp"]  # one row per model
    assert all(row["repetitions"] == "2" and float(row["n"]) == 10 for row in rows)
    seeds = derive_seeds(3, 2)
    for model in ("digits_cnn", "digits_mlp"):
        for rep in (0, 1):
            res = results(out, model, rep)
            assert res["seed"] == seeds[rep] and res["config"]["classifier"]["arch"] == model.split("_")[1]
            assert res["scores"]["n"] == 10 and res["config"]["search"]["budget"] == 2
    assert (out / "report.html").is_file() and "genEval compare  2 models x 2 repetitions" in r.stdout
