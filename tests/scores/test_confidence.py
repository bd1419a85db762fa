"""Per-sample confidence (issue 44): what the search records, and the selective prediction, calibration and -MSP
detection scores computed from it (Hendrycks et al. 2021 Sec. 3 and App. 7.3), with known answers."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from genEval.runs.results import EvalResult
from genEval.scores.confidence import (
    NOT_RECORDED,
    RunConfidence,
    anomaly_detection,
    aurra,
    calibration_error,
    calibration_error_uniform,
    rra_curve,
    run_confidence,
    selective_prediction,
)
from genEval.scores.outcomes import TOP_K, SampleRecord
from genEval.search.perturb import Sample, SearchConfig, perturb
from tests.support.toys import LinearClassifier, ModelOracle, SigmoidGenerator


# ------------------------------------------------------------------------------------------ known answers
def test_rra_curve_and_aurra_by_hand():
    conf, ok = [0.9, 0.8, 0.7, 0.6], [1, 0, 1, 0]
    # most confident first: right, wrong, right, wrong -> accuracies 1, 1/2, 2/3, 1/2 at response rates 1/4 .. 1
    assert rra_curve(conf, ok) == pytest.approx([1, 0.5, 2 / 3, 0.5])
    assert aurra(conf, ok) == pytest.approx(100 * (1 + 0.5 + 2 / 3 + 0.5) / 4)
    # confidence that ranks the right answers first beats the accuracy; reversed, it falls below it
    assert aurra([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0]) == pytest.approx(100 * (1 + 1 + 2 / 3 + 0.5) / 4)
    assert aurra([0.1, 0.2, 0.8, 0.9], [1, 1, 0, 0]) == pytest.approx(100 * (0 + 0 + 1 / 3 + 0.5) / 4)
    assert rra_curve([0.5, 0.5], [0, 1]).tolist() == [0.0, 0.5]  # ties keep the data's order (stable)
    assert aurra([], []) is None


def test_rms_calibration_error_with_the_papers_bins_of_100():
    # 250 samples in confidence order: bins [0, 100), [100, 250) (the remainder joins the last bin)
    conf = np.r_[np.full(100, 0.3), np.full(150, 0.9)]
    ok = np.r_[np.ones(10), np.zeros(90), np.ones(150)]  # bin 1: conf 0.3, acc 0.1; bin 2: conf 0.9, acc 1.0
    want = math.sqrt(100 / 250 * 0.2**2 + 150 / 250 * 0.1**2)
    assert calibration_error(conf, ok) == pytest.approx(100 * want)
    assert calibration_error(conf[::-1], ok[::-1]) == pytest.approx(100 * want)  # the order of the input is irrelevant
    # fewer than 100 samples: one bin, |mean confidence - accuracy|
    assert calibration_error([0.9, 0.8, 0.7, 0.6], [1, 0, 1, 0]) == pytest.approx(25.0)
    assert calibration_error([1.0, 1.0], [1, 1]) == 0.0 and calibration_error([], []) is None
    # 15 equal-width bins (torchmetrics): four samples in four bins -> sqrt(mean of squared gaps)
    gaps = [0.9 - 1, 0.8 - 0, 0.7 - 1, 0.6 - 0]
    assert calibration_error_uniform([0.9, 0.8, 0.7, 0.6], [1, 0, 1, 0]) == pytest.approx(
        100 * math.sqrt(sum(g * g for g in gaps) / 4)
    )
    with pytest.raises(ValueError, match="confidence has 2 entries but correct has 1"):
        calibration_error([0.5, 0.5], [1])


def test_msp_anomaly_detection_by_hand():
    # -MSP: OOD 0.5 ranks first, then ID 0.8, OOD 0.85, ID 0.9; AP = (1/1 + 2/3) / 2; AUROC: 3 of 4 pairs ordered
    aupr, auroc = anomaly_detection([0.9, 0.8], [0.5, 0.85])
    assert aupr == pytest.approx(100 * (1 + 2 / 3) / 2) and auroc == pytest.approx(75.0)
    assert anomaly_detection([0.9], [0.1]) == pytest.approx((100.0, 100.0))
    assert anomaly_detection([], [0.3]) == (None, None)


def test_bootstrap_intervals_bracket_the_value_and_need_enough_sources():
    rng = np.random.default_rng(0)
    msp = rng.uniform(size=200)
    ok = rng.uniform(size=200) < msp
    sp = selective_prediction(msp, ok, what="sources", n_boot=200, seed=1)
    for est in (sp.aurra, sp.calibration_error):
        assert est.low < est.value < est.high and est.n == 200 and est.method.startswith("bootstrap(200")
    assert sp.calibration_error_uniform.low is None and "torchmetrics" in sp.calibration_error_uniform.reason
    assert sp == selective_prediction(msp, ok, what="sources", n_boot=200, seed=1)  # seeded
    few = selective_prediction(msp[:3], ok[:3], what="sources")
    assert few.aurra.value is not None and few.aurra.low is None and "only 3 sources" in few.aurra.reason
    assert sp.curve[0][0] == pytest.approx(1 / 200) and sp.curve[-1] == [1.0, pytest.approx(100 * ok.mean())]
    assert len(sp.curve) == 101


def test_the_bootstraps_batched_scores_equal_the_one_set_scores():
    # the bootstrap recomputes each score on (B, N) resamples at once; with ties, as sklearn groups them
    from genEval.scores.confidence import _aupr_rows, _auroc_rows, _aurra_rows, _calibration_rows

    rng = np.random.default_rng(4)
    for _ in range(5):
        a, b = rng.integers(0, 5, size=37) / 5, rng.integers(0, 5, size=23) / 5  # many tied confidences
        aupr, auroc = anomaly_detection(a, b)
        assert _aupr_rows(a[None], b[None])[0] == pytest.approx(aupr) and _auroc_rows(a[None], b[None])[
            0
        ] == pytest.approx(auroc)
        m = rng.uniform(size=257)
        k = (rng.uniform(size=257) < m).astype(float)
        assert _aurra_rows(m[None], k[None])[0] == pytest.approx(aurra(m, k))
        assert _calibration_rows(m[None], k[None])[0] == pytest.approx(calibration_error(m, k))


# ------------------------------------------------------------------------------------------ recording
def test_the_search_records_the_softmax_of_the_clean_and_the_final_image():
    torch.manual_seed(0)
    clf, gen = LinearClassifier(in_features=12, num_classes=7), SigmoidGenerator()
    oracle = ModelOracle(LinearClassifier(in_features=12, num_classes=7, seed=1))
    x = torch.rand(6, 3, 2, 2)
    y = clf(x).argmax(1)
    samples = [Sample(x[i], int(y[i]), f"s{i}", seed=i, index=i) for i in range(6)]
    outs = list(perturb(samples, clf, gen, oracle, SearchConfig(budget=4, step_size=0.5), batch_size=4))
    for o in outs:
        with torch.no_grad():
            clean, final = clf(o.original[None]).softmax(1)[0], clf(o.image[None]).softmax(1)[0]
            oracle_final = oracle.model(o.image[None]).argmax(1).item()
        top = final.topk(TOP_K)
        assert o.final_top_probs == pytest.approx(top.values.tolist(), abs=2e-6)
        assert list(o.final_top_classes) == top.indices.tolist() and o.final_top_classes[0] == o.final_pred
        assert o.clean_top_probs == pytest.approx(clean.topk(TOP_K).values.tolist(), abs=2e-6)
        assert o.clean_top_classes[0] == o.clean_pred
        assert o.final_probs == pytest.approx(final.tolist(), abs=2e-6) and len(o.final_probs) == 7
        assert o.final_entropy == pytest.approx(float(-(final * final.log()).sum()), abs=2e-6)
        assert 0 <= o.clean_entropy <= math.log(7) + 1e-6
        assert o.oracle_final_pred == oracle_final
        assert SampleRecord.from_dict(o.record().to_dict()) == o.record()  # the record round-trips through JSON


def test_confidence_fields_are_typed_strictly():
    rec = SampleRecord.from_dict(
        {"source_id": "a", "label": 0, "clean_pred": 0, "recon_pred": 0, "start_ok": True, "validated": True,
         "final_pred": 0, "rejected_at": -1, "oracle_clean_pred": 0, "oracle_start_pred": 0, "image_linf": 0.0,
         "final_top_probs": [1, 0.0], "final_top_classes": [0, 1]}
    )  # fmt: skip
    assert rec.final_top_probs == (1.0, 0.0) and rec.final_top_classes == (0, 1) and rec.clean_top_probs is None
    good = rec.to_dict()
    with pytest.raises(ValueError, match=r"field 'final_top_probs' .* must be a list of numbers or null, got"):
        SampleRecord.from_dict(good | {"final_top_probs": ["0.9"]})
    with pytest.raises(ValueError, match=r"field 'final_top_classes' .* must be a list of whole numbers or null"):
        SampleRecord.from_dict(good | {"final_top_classes": [0.5]})
    with pytest.raises(ValueError, match=r"field 'oracle_final_pred' .* must be a whole number or null"):
        SampleRecord.from_dict(good | {"oracle_final_pred": True})


# ------------------------------------------------------------------------------------------ one run
def _records() -> list[SampleRecord]:
    """10 sources: clean MSP 0.9 right on 8; validated perturbed images at MSP 0.6, right on 4 of the 6 validated."""
    base = dict(
        index=0, reference=0, recon_pred=0, start_ok=True, accepted_steps=1, rejected_at=-1, first_fooled=-1,
        oracle_clean_pred=0, oracle_start_pred=0, oracle_score=0.9, latent_dist=0.0, image_dist=0.0, image_linf=0.1,
        clean_entropy=0.3, final_entropy=0.6, oracle_final_pred=0,
    )  # fmt: skip
    out = []
    for i in range(10):
        clean_ok, validated, final_ok = i < 8, i < 6, i < 4
        out.append(
            SampleRecord(
                source_id=f"s{i}",
                label=0,
                clean_pred=0 if clean_ok else 1,
                validated=validated,
                final_pred=0 if final_ok else 1,
                clean_top_probs=(0.9, 0.1),
                clean_top_classes=(0, 1),
                final_top_probs=(0.6, 0.4),
                final_top_classes=(0, 1),
                final_probs=(0.6, 0.4),
                **base,
            )  # fmt: skip
        )
    return out


def test_run_confidence_of_a_hand_made_run():
    c = run_confidence(_records(), ood_msp=[0.5, 0.55, 0.95, 0.3, 0.2], n_boot=100)
    assert c.recorded and c.clean.n == 10 and c.perturbed.n == 6
    assert c.clean.accuracy == pytest.approx(80.0) and c.perturbed.accuracy == pytest.approx(400 / 6)
    assert c.clean.calibration_error.value == pytest.approx(10.0)  # one bin: |0.9 - 0.8|
    assert c.perturbed.calibration_error.value == pytest.approx(100 * abs(0.6 - 4 / 6))
    # equal confidences keep the order: the curve of the clean images is the accuracy of the first k sources
    assert c.clean.aurra.value == pytest.approx(100 * np.mean([min(k, 8) / k for k in range(1, 11)]))
    # the perturbed images are all less confident (0.6) than their clean sources (0.9): -MSP separates them fully
    assert c.shift.aupr.value == pytest.approx(100.0) and c.shift.auroc.value == pytest.approx(100.0)
    assert c.shift.n_in == c.shift.n_out == 6 and c.shift.chance_aupr == pytest.approx(50.0)
    # OOD MSPs 0.5 0.55 0.95 0.3 0.2 against ten clean 0.9: 4 of 5 below every clean one, 0.95 above all
    assert c.ood.auroc.value == pytest.approx(80.0) and c.ood.n_out == 5 and c.ood.n_in == 10
    back = RunConfidence.from_dict(c.to_dict())
    assert back == c and "AURRA" in "\n".join(back.lines())


def test_old_runs_read_as_not_recorded():
    old = [replace(r, clean_top_probs=None, final_top_probs=None, final_probs=None) for r in _records()]
    c = run_confidence(old)
    assert not c.recorded and c.reason == NOT_RECORDED and c.lines() == [f"  confidence: {NOT_RECORDED}"]
    assert RunConfidence.from_dict(None) == RunConfidence(False, reason=NOT_RECORDED)
    result = EvalResult.from_dict({"scores": {"num_classes": 2}, "class_names": ["a", "b"], "seed": 0})
    assert not result.confidence.recorded  # a results.json written before issue 44


# ------------------------------------------------------------------------------------------ ood_data
class Flat(torch.nn.Module):
    """A 3-class classifier sure of class 0 on bright images (logit 16 (m - 0.5) for mean brightness m, 0 for the
    others) and unsure on dark ones."""

    num_classes, name = 3, "flat"

    def forward(self, x):
        m = x.mean((1, 2, 3))[:, None]
        return torch.cat([16 * (m - 0.5), torch.zeros(len(x), 2)], 1)


def test_ood_images_are_scored_against_the_clean_images(tmp_path):
    from genEval import evaluate
    from tests.support.toys import AcceptAllOracle, ListDataset, SigmoidGenerator

    bright, dark = torch.full((6, 3, 2, 2), 0.9), torch.full((4, 3, 2, 2), 0.1)
    data = ListDataset(bright, [0] * 6, ["a", "b", "c"])
    ood = ListDataset(dark, [0] * 4, ["x"], name="ood")
    res = evaluate(Flat(), data, SigmoidGenerator(), AcceptAllOracle(), SearchConfig(budget=0), seed=0, ood=ood,
                   output=tmp_path / "run")  # fmt: skip
    c = res.confidence
    # clean MSP e^6.4/(e^6.4+2) ~ 0.997 on every in-distribution image, 1/(2+e^-6.4) ~ 0.499 on every OOD image
    assert c.ood.n_in == 6 and c.ood.n_out == 4 and c.ood.aupr.value == pytest.approx(100.0)
    assert c.ood.auroc.value == pytest.approx(100.0) and c.ood.chance_aupr == pytest.approx(40.0)
    want = 1 / (2 + math.exp(-6.4))
    assert res.extra["ood_data"]["msp"] == pytest.approx([want] * 4, abs=1e-5) and res.extra["ood_data"]["n"] == 4
    assert "-MSP OOD images (ood) vs the clean images: AUPR 100.00" in res.summary()
    # the merged summary of shards keeps it: results.json holds the OOD MSPs it was computed from
    from genEval.runs import read_results

    assert read_results(tmp_path / "run").confidence.ood == c.ood


def test_ood_data_folder_is_read_at_the_size_and_channels_of_the_data(tmp_path):
    from PIL import Image

    from genEval.commands.evaluate import ood_data_for

    for i, c in enumerate(("seven", "eight")):
        (tmp_path / c).mkdir()
        Image.new("L", (8, 8), 40 * i).save(tmp_path / c / f"{i}.png")
    data = [(torch.zeros(3, 32, 32), 0, "x")]
    ood = ood_data_for(str(tmp_path), data)
    assert len(ood) == 2 and ood[0][0].shape == (3, 32, 32) and ood_data_for(None, data) is None


def test_merged_shards_keep_the_ood_scores_of_the_unsharded_run(tmp_path):
    from genEval import evaluate
    from genEval.runs.identity import Shard
    from genEval.runs.shards import merge_runs
    from tests.support.toys import AcceptAllOracle, ListDataset, SigmoidGenerator

    g = torch.Generator().manual_seed(0)
    data = ListDataset(torch.rand(12, 3, 2, 2, generator=g), [0] * 12, ["a", "b", "c"])
    ood = ListDataset(torch.rand(7, 3, 2, 2, generator=g) * 0.5, [0] * 7, ["x"], name="ood")
    kw = dict(search=SearchConfig(budget=0), seed=0, ood=ood)
    whole = evaluate(Flat(), data, SigmoidGenerator(), AcceptAllOracle(), output=tmp_path / "whole", **kw)
    for i in range(2):
        evaluate(Flat(), data, SigmoidGenerator(), AcceptAllOracle(), shard=Shard(i, 2),
                 output=tmp_path / "shards" / f"s{i}", **kw)  # fmt: skip
    merged = merge_runs([tmp_path / "shards"], tmp_path / "merged")
    assert merged.confidence.ood == whole.confidence.ood and merged.confidence.ood.n_out == 7
    assert merged.confidence.clean == whole.confidence.clean
