"""Label-free measures (S1, Tu et al. 2024; issue 44 and issue 40 item 9): known answers on hand-made probability
tables, their rank agreement, the sensitivity protocol, and that no measure computed without labels reads one."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from genEval.comparisons.aggregate import aggregate
from genEval.comparisons.settings import ComparisonSettings
from genEval.scores.confidence import Confidences
from genEval.scores.label_free import (
    atc_mc,
    atc_threshold,
    hard_softmax_corr,
    label_free_scores,
    max_pred,
    oracle_agreement,
    oracle_prior,
    probability_rows,
    rank_agreement,
    sensitivity,
    soft_gap,
    softmax_corr,
)
from genEval.scores.outcomes import SampleRecord


def record(sid: str, label: int, probs: list[float], oracle: int, clean: list[float] | None = None) -> SampleRecord:
    """A validated sample whose final image has softmax ``probs`` (and the clean image ``clean``, default the same)."""
    clean = probs if clean is None else clean
    top = sorted(range(len(probs)), key=lambda k: -probs[k])
    ctop = sorted(range(len(clean)), key=lambda k: -clean[k])
    ent = lambda p: -sum(v * math.log(v) for v in p if v > 0)  # noqa: E731
    return SampleRecord(
        source_id=sid, index=int(sid[1:]), label=label, reference=label, clean_pred=ctop[0], recon_pred=ctop[0],
        start_ok=True, validated=True, accepted_steps=1, rejected_at=-1, first_fooled=-1, final_pred=top[0],
        oracle_clean_pred=label, oracle_start_pred=label, oracle_score=0.9, latent_dist=0.0, image_dist=0.0,
        image_linf=0.1, clean_top_probs=tuple(clean[k] for k in ctop[:5]), clean_top_classes=tuple(ctop[:5]),
        clean_entropy=ent(clean), final_top_probs=tuple(probs[k] for k in top[:5]), final_top_classes=tuple(top[:5]),
        final_entropy=ent(probs), final_probs=tuple(probs), oracle_final_pred=oracle,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------ the measures
def test_baselines_on_a_hand_made_table():
    msp, second = np.array([0.9, 0.6, 0.5, 0.7]), np.array([0.1, 0.3, 0.4, 0.2])
    assert max_pred(msp) == pytest.approx(0.675)  # (0.9 + 0.6 + 0.5 + 0.7) / 4
    assert soft_gap(msp, second) == pytest.approx((0.8 + 0.3 + 0.1 + 0.5) / 4)
    assert oracle_agreement(np.array([0, 1, 2, 2]), np.array([0, 1, 1, 2])) == pytest.approx(0.75)
    # ATC-MC (Garg et al. 2022): 2 of 5 clean images wrong -> t is the 3rd smallest confidence, so exactly 2 lie below
    clean, ok = np.array([0.95, 0.4, 0.8, 0.55, 0.99]), np.array([1, 0, 1, 0, 1])
    assert atc_threshold(clean, ok) == 0.8
    assert atc_mc(np.array([0.9, 0.79, 0.8, 0.3]), 0.8) == pytest.approx(0.5)  # 0.9 and 0.8 reach t
    assert atc_threshold(clean, np.zeros(5)) == math.inf and atc_mc(msp, math.inf) == 0.0  # every one wrong: 0
    assert all(f(np.array([])) is None for f in (max_pred,)) and atc_mc(np.array([]), 0.5) is None
    assert oracle_prior([0, 0, 2, -1], 3) == pytest.approx([2 / 3, 0, 1 / 3])  # -1 (not recorded) left out


def test_probability_rows_spread_the_tail_evenly():
    rows = probability_rows([(0.7, 0.2)], [(3, 0)], 5)  # top-2 of 5 classes: 0.1 left for the other three
    assert rows[0] == pytest.approx([0.2, 0.1 / 3, 0.1 / 3, 0.7, 0.1 / 3])
    assert probability_rows([(0.6, 0.4)], [(1, 0)], 2)[0] == pytest.approx([0.4, 0.6])  # k = K: exact


def test_label_free_scores_of_records_match_the_definitions():
    recs = [
        record("s0", 0, [0.8, 0.1, 0.1], oracle=0),
        record("s1", 1, [0.2, 0.7, 0.1], oracle=1),
        record("s2", 2, [0.5, 0.1, 0.4], oracle=2),  # wrong, and the oracle says 2
        record("s3", 0, [0.6, 0.3, 0.1], oracle=0),
    ]
    got = label_free_scores(Confidences.of(recs), 3)
    p = np.array([r.final_probs for r in recs])
    q = np.array([0.5, 0.25, 0.25])  # the oracle's classes 0, 1, 2, 0
    c = p.T @ p / 4
    assert got["softmax_corr"] == pytest.approx(float(np.diag(c) @ q / (np.linalg.norm(c) * np.linalg.norm(q))))
    assert got["max_pred"] == pytest.approx((0.8 + 0.7 + 0.5 + 0.6) / 4)
    assert got["soft_gap"] == pytest.approx((0.7 + 0.5 + 0.1 + 0.3) / 4)
    assert got["oracle_agreement"] == pytest.approx(0.75)
    # clean = final here: 1 of 4 wrong -> t = 0.6 (2nd smallest); final confidences >= 0.6: 0.8, 0.7, 0.6
    assert got["atc_mc"] == pytest.approx(0.75)
    # a sample that was not validated is not among the test images
    other = label_free_scores(Confidences.of([*recs, replace(record("s4", 1, [0.1, 0.1, 0.8], 2), validated=False)]), 3)
    assert other["max_pred"] == got["max_pred"] and other["softmax_corr"] == got["softmax_corr"]


def test_softmax_corr_reads_no_label():
    # issue 40 item 9: an imbalanced run (labels 0 x5, 1 x2, 2 x1); moving the labels to other samples and renaming the
    # classes (0 -> 1 -> 2 -> 0) leaves every measure computed without labels unchanged, where SoftmaxCorr with q from
    # the labels (the defect: q = the histogram of the references, which default to the labels) changes
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(3) * 0.5, size=8)
    labels = [0, 0, 0, 0, 0, 1, 1, 2]
    oracle = [int(np.argmax(p)) for p in probs]
    recs = [record(f"s{i}", y, list(map(float, p)), o) for i, (y, p, o) in enumerate(zip(labels, probs, oracle))]
    moved = np.roll(np.array(labels), 3)
    renamed = [(int(y) + 1) % 3 for y in moved]
    permuted = [replace(r, label=y, reference=y) for r, y in zip(recs, renamed)]
    before, after = (label_free_scores(Confidences.of(x), 3) for x in (recs, permuted))
    for name in ("softmax_corr", "max_pred", "soft_gap", "oracle_agreement"):
        assert after[name] == pytest.approx(before[name]), name
    preds = [r.final_pred for r in recs]
    assert hard_softmax_corr(preds, labels, 3) != pytest.approx(hard_softmax_corr(preds, renamed, 3))


def _write_run(d: Path, recs: list[SampleRecord], model: str) -> None:
    d.mkdir(parents=True)
    (d / "samples.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in recs))
    (d / "results.json").write_text(
        json.dumps(
            {
                "scores": {"num_classes": 3},
                "class_names": ["a", "b", "c"],
                "seed": 1,
                "components": {"data": "hand", "generator": "g", "oracle": "o", "classifier": model},
                "config": {"search": {"budget": 1}},
            }
        )
    )


def test_a_comparison_of_relabelled_runs_has_the_same_label_free_measures(tmp_path):
    rng = np.random.default_rng(1)
    labels = [0] * 6 + [1] * 3 + [2]
    runs = {}
    for m, sharp in (("m1", 0.3), ("m2", 1.0), ("m3", 3.0)):
        probs = rng.dirichlet(np.ones(3) * sharp, size=len(labels))
        runs[m] = [record(f"s{i}", y, list(map(float, p)), y) for i, (y, p) in enumerate(zip(labels, probs))]
    for name, relabel in (("orig", lambda y: y), ("perm", lambda y: (y + 1) % 3)):
        for m, recs in runs.items():
            shifted = np.roll([relabel(r.label) for r in recs], 4)
            moved = [replace(r, label=int(y), reference=int(y)) for r, y in zip(recs, shifted)]
            _write_run(tmp_path / name / m / "rep0", moved, m)
    a, b = (
        aggregate({m: [tmp_path / n / m / "rep0"] for m in runs}, ComparisonSettings(n_boot=20))
        for n in ("orig", "perm")
    )
    for m in runs:
        assert b.row(m).softmax_corr == pytest.approx(a.row(m).softmax_corr)
        assert b.row(m).oracle_agreement == pytest.approx(a.row(m).oracle_agreement)


def test_runs_without_recorded_confidence_read_as_not_recorded():
    plain = replace(record("s0", 0, [0.9, 0.1], 0), clean_top_probs=None, final_top_probs=None, final_probs=None)
    c = Confidences.of([plain])
    assert len(c) == 0 and c.missing == 1
    assert SampleRecord.from_dict({k: v for k, v in plain.to_dict().items() if k != "final_probs"}).final_probs is None


# ------------------------------------------------------------------------------------------ evaluation
def test_rank_agreement_known_answers():
    perfect = rank_agreement([0.1, 0.5, 0.3, 0.9], [10, 50, 30, 90])
    assert perfect.rho == pytest.approx(1.0) and perfect.tau_w == pytest.approx(1.0) and perfect.n_models == 4
    reverse = rank_agreement([4, 3, 2, 1], [1, 2, 3, 4])
    assert reverse.rho == pytest.approx(-1.0) and reverse.tau_w == pytest.approx(-1.0)
    two = rank_agreement([1, 2], [3, 4])
    assert two.rho is None and two.tau_w == pytest.approx(1.0) and "3 models" in two.reason
    flat = rank_agreement([1, 1, 1], [1, 2, 3])
    assert flat.rho is None and flat.tau_w is None and "same for every model" in flat.reason
    assert rank_agreement([1, None, 3], [1, 2, None]).n_models == 1  # None entries left out
    # tau_w weighs the top: swapping the two best costs more than swapping the two worst (hyperbolic weigher)
    top = rank_agreement([5, 4, 3, 2, 1], [4, 5, 3, 2, 1]).tau_w
    bottom = rank_agreement([5, 4, 3, 2, 1], [5, 4, 3, 1, 2]).tau_w
    assert top < bottom < 1.0
    assert rank_agreement([5, 4, 3, 2, 1], [4, 5, 3, 2, 1]).rho == rank_agreement([5, 4, 3, 2, 1], [5, 4, 3, 1, 2]).rho


def test_sensitivity_protocol_fractions_seeds_and_known_answers():
    ids = [f"s{i}" for i in range(200)]
    truth = {"pa": [10.0, 20.0, 30.0, 40.0, 50.0]}
    seen: list[int] = []

    def measure_of(sources):  # a measure that ranks the models right on any subsample, recording the sizes drawn
        seen.append(200 if sources is None else len(sources))
        return {"m": [1.0, 2.0, 3.0, 4.0, 5.0]}

    out = sensitivity(measure_of, ids, truth, seed=7)["m"]["pa"]
    assert sorted(out.subsample) == ["0.01", "0.05", "0.1", "0.3"] and sorted(out.kept_models) == ["0.2", "0.5", "0.7"]
    assert seen == [200] + [2] * 3 + [10] * 3 + [20] * 3 + [60] * 3  # the paper's 1/5/10/30%, 3 runs each
    assert all(v == {"rho": pytest.approx(1.0), "tau_w": pytest.approx(1.0)} for v in out.subsample.values())
    assert out.kept_models["0.2"] == {"rho": None, "tau_w": None}  # 1 of 5 models: nothing to rank
    assert out.kept_models["0.7"]["rho"] == pytest.approx(1.0)  # 4 of 5 models, still in order

    draws: list[list[str]] = []

    def noisy(sources):
        draws.append([] if sources is None else sorted(map(str, sources)))
        return {"m": [5.0, 4.0, 3.0, 2.0, 1.0]}

    sensitivity(noisy, ids, truth, seed=7)
    first = list(draws)
    draws.clear()
    sensitivity(noisy, ids, truth, seed=7)
    assert draws == first  # seeded: the same subsamples
    draws.clear()
    sensitivity(noisy, ids, truth, seed=8)
    assert draws != first
    assert softmax_corr(np.eye(2)[[0, 1]], np.array([0.5, 0.5])) == pytest.approx(1.0)
