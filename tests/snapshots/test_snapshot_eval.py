"""Scoring on snapshots: re-scoring, the transfer matrix, adversarial filtration, and their commands.

Known answers come from the toy run (tests/support/snapshots.py): the channel classifier's decisions are the
run's own final predictions, a constant classifier is right exactly on its class.
"""

from __future__ import annotations

import csv
import json

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from genEval import evaluate
from genEval.commands import CONF_DIR, build
from genEval.commands.snapshot import build_classifiers, run_filter, run_score, run_transfer
from genEval.interfaces import SettingError
from genEval.runs import read_samples
from genEval.runs.recording import RunOutput
from genEval.scores.intervals import proportion
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from genEval.snapshots.export import export_snapshot
from genEval.snapshots.filtration import Candidate, filter_snapshots
from genEval.snapshots.manifest import SnapshotError
from genEval.snapshots.reader import load_snapshot
from genEval.snapshots.scoring import TRANSFER_COLUMNS, score_snapshot, transfer_matrix
from genEval.snapshots.verify import verify_snapshot
from tests.support.snapshots import ChannelClassifier, ConstClassifier, compose_config

# --------------------------------------------------------------------------------------------- score


def test_score_known_answers(snap_if, snap_wds, run_data, run_dir):
    labels = run_data["labels"]
    n_still = sum(r["final_pred"] == r["label"] for r in run_data["records"])
    run_sa = json.loads((run_dir / "results.json").read_text())["scores"]["sa"]
    assert (run_sa["k"], run_sa["n"]) == (30, 30)  # the run's whole sample: 30 sources, 27 of them validated
    for path in (snap_if, snap_wds):
        r = score_snapshot(path, ChannelClassifier(), batch_size=7, device="cpu")
        assert r.predictions == [rec["final_pred"] for rec in run_data["records"]]  # PNG kept the decisions
        assert r.original_predictions == [rec["clean_pred"] for rec in run_data["records"]]
        assert (r.pa.k, r.pa.n, r.sa.k, r.sa.n) == (n_still, 27, 27, 27)
        assert r.pa.value == pytest.approx(100 * n_still / 27) and r.sa.value == 100.0
        assert r.sa_full.to_dict() == run_sa  # the tested model: the manifest's full-sample SA
        assert r.fmr == pytest.approx(100 * r.pa.value / run_sa["value"]) and r.fmr_validated == pytest.approx(
            100 * n_still / 27
        )
        assert r.tested_models == ["channel"] and r.classifier == "channel"
    const = score_snapshot(snap_if, ConstClassifier(0), device="cpu")
    k0 = int((labels == 0).sum())
    assert const.pa.k == const.sa.k == k0 and const.fmr_validated == 100.0
    # another model's full-sample SA is not in the manifest: FMR is undefined unless it is given
    assert const.fmr is None and const.sa_full is None
    assert const.fmr_reason.startswith("the full-sample SA of const0 is unknown: the snapshot was made against channel")
    given = score_snapshot(snap_if, ConstClassifier(0), device="cpu", sa_full=50.0)
    assert given.fmr == pytest.approx(100 * const.pa.value / 50.0) and given.fmr_validated == 100.0
    assert const.pa.low == pytest.approx(proportion(k0, 27).low)
    assert [c["pa"] for c in const.per_class] == [100.0, 0.0, 0.0]
    assert [c["n"] for c in const.per_class] == [int((labels == k).sum()) for k in range(3)]


def test_the_manifest_stores_the_runs_full_sample_sa(snap_if, run_dir):
    m = load_snapshot(snap_if, lazy=True).manifest
    assert m.full_sample_sa == json.loads((run_dir / "results.json").read_text())["scores"]["sa"]
    assert m.samples == 27 and m.counts["run_samples"] == 30


def test_score_summary_and_json(snap_if):
    r = score_snapshot(snap_if, ChannelClassifier(), device="cpu")
    d = json.loads(json.dumps(r.to_dict()))
    assert d["pa"]["k"] == r.pa.k and d["sa"]["value"] == 100.0 and d["n"] == 27
    text = r.summary()
    assert f"({r.pa.k}/27)" in text and "SA (originals)  100.00" in text and "snapshot made against: channel" in text
    assert "SA (full sample of the run)  100.00 [" in text and "(100 PA / SA_full)" in text and "FMR_v  " in text
    assert d["sa_full"]["n"] == 30 and d["fmr_validated"] == r.fmr_validated


def test_score_refuses_a_classifier_with_other_classes(snap_if):
    with pytest.raises(
        SnapshotError,
        match=r"classifier channel has 4 classes but snapshot '.*' has 3 \(cat, dog, originals\)",
    ):
        score_snapshot(snap_if, ChannelClassifier(num_classes=4))
    with pytest.raises(SettingError, match=r"batch_size must be a whole number >= 1, got 0; e.g. batch_size=64"):
        score_snapshot(snap_if, ChannelClassifier(), batch_size=0)


# --------------------------------------------------------------------------------------------- transfer


def test_transfer_matrix_shape_diagonal_and_csv(snap_if, snap_wds, tmp_path):
    out = tmp_path / "t.csv"
    rows = transfer_matrix(
        {"channel": snap_if, "copy": snap_wds},
        {"channel": ChannelClassifier(), "const0": ConstClassifier(0)},
        out_csv=out,
        device="cpu",
    )
    assert [(r.source, r.target) for r in rows] == [
        ("channel", "channel"),
        ("channel", "const0"),
        ("copy", "channel"),
        ("copy", "const0"),
    ]
    assert [r.self_generated for r in rows] == [True, False, False, False]
    direct = score_snapshot(snap_if, ChannelClassifier())
    assert rows[0].pa == rows[2].pa == direct.pa.value and rows[0].fmr == direct.fmr
    assert rows[2].sa_full == rows[0].sa_full == direct.sa_full.value  # the target's own snapshot gives SA_full
    assert (rows[0].pa_low, rows[0].pa_high) == (direct.pa.low, direct.pa.high)
    assert rows[1].sa == rows[1].pa == pytest.approx(100 * 9 / 27)  # const0 is right on the 9 cats, perturbed or not
    assert rows[1].fmr is None and rows[1].sa_full is None and rows[1].fmr_validated == 100.0  # no SA_full for const0
    with out.open() as fh:
        table = list(csv.DictReader(fh))
    assert list(table[0]) == list(TRANSFER_COLUMNS)
    assert len(table) == 4 and table[0]["source"] == "channel" and float(table[0]["pa"]) == rows[0].pa
    assert table[0]["self_generated"] == "True" and table[0]["skipped"] == "False" and table[1]["fmr"] == ""
    given = transfer_matrix(
        {"channel": snap_if}, {"const0": ConstClassifier(0)}, device="cpu", clean_accuracy={"const0": 40.0}
    )
    assert given[0].sa_full == 40.0 and given[0].fmr == pytest.approx(100 * (100 * 9 / 27) / 40.0)


# --------------------------------------------------------------------------------------------- filter


def test_pair_prediction_is_the_most_common_wrong_one_ties_to_the_first_surrogate():
    assert Candidate(0, 0, 2, {"a": 0, "b": 1, "c": 1}, 0.1).pair_pred == 1
    assert Candidate(0, 0, 2, {"a": 1, "b": 0}, 0.1).pair_pred == 1  # tie: the first surrogate's
    assert Candidate(0, 0, 2, {"a": 2, "b": 0}, 0.1).pair_pred == 0  # the first *wrong* one
    assert Candidate(0, 0, 2, {"a": 2, "b": 2}, 0.1).pair_pred == 2 and Candidate(0, 0, 2, {"a": 2}, 0).n_fooled == 0


def test_filter_keeps_samples_fooling_k_surrogates(snap_if, run_data, tmp_path):
    surrogates = {"channel": ChannelClassifier(), "const0": ConstClassifier(0)}
    out = filter_snapshots(snap_if, surrogates, tmp_path / "hard", min_fooled=2, device="cpu")
    labels = run_data["labels"].tolist()
    fooled = [(r["final_pred"] != y) + (y != 0) for r, y in zip(run_data["records"], labels, strict=True)]
    expected = [sid for sid, f in zip(run_data["ids"], fooled, strict=True) if f >= 2]
    assert 0 < len(expected) < 27
    snap = load_snapshot(out)
    m = snap.manifest
    assert m.source_ids == expected and m.filtered_with == ["channel", "const0"] and m.kind == "filter"
    assert m.format == "imagefolder" and m.sources[0]["snapshot"] == str(snap_if.resolve())
    assert m.counts == {"candidates": 27, "fooled_enough": len(expected), "below_max_true_conf": len(expected),
                        "samples": len(expected), "per_class": m.counts["per_class"]}  # fmt: skip
    assert all(r["n_fooled"] == 2 and r["tested_model"] == "channel" for r in snap.records)
    keep = [i for i, f in enumerate(fooled) if f >= 2]
    assert torch.equal(snap.images, run_data["perturbed"][keep])  # the PNG bytes are carried over unchanged
    assert torch.equal(snap.originals, run_data["original"][keep])
    rows = transfer_matrix(
        {"hard": out},
        {"const0": ConstClassifier(0), "const1": ConstClassifier(1)},
        device="cpu",
        skip_filtering_models=True,
    )
    assert [(r.target, r.used_for_filtering, r.skipped) for r in rows] == [
        ("const0", True, True),
        ("const1", False, False),
    ]
    assert rows[0].pa is None and rows[1].pa is not None


def test_filter_per_pair_cap_and_confidence(snap_wds, run_data, tmp_path):
    surrogates = {"c0": ConstClassifier(0), "c1": ConstClassifier(1)}
    # pairs: label 0 -> (0, 1), label 1 -> (1, 0), label 2 -> both wrong, tie -> first surrogate: (2, 0)
    out = filter_snapshots([snap_wds], surrogates, tmp_path / "capped", min_fooled=1, max_per_pair=1, device="cpu")
    snap = load_snapshot(out, lazy=True)
    labels = run_data["labels"].tolist()
    first = [run_data["ids"][labels.index(c)] for c in range(3)]  # equal confidence: the earliest one stays
    assert snap.manifest.source_ids == sorted(first, key=run_data["ids"].index)
    assert snap.manifest.format == "webdataset"
    assert [(r["label"], r["pair_pred"]) for r in snap.records] == [(0, 1), (1, 0), (2, 0)]
    # mean true-class probability: 0.447 for labels 0 and 1, 0.107 for label 2
    conf = filter_snapshots(
        [snap_wds],
        surrogates,
        tmp_path / "conf",
        min_fooled=1,
        max_true_conf=0.2,
        device="cpu",
        format="imagefolder",
    )
    ids = load_snapshot(conf).manifest.source_ids
    assert ids == [sid for sid, y in zip(run_data["ids"], labels, strict=True) if y == 2]
    with pytest.raises(SnapshotError, match=r"min_fooled must be a whole number in 1..2 .* got 3"):
        filter_snapshots([snap_wds], surrogates, tmp_path / "x", min_fooled=3)
    with pytest.raises(SnapshotError, match=r"max_true_conf must be a probability in \(0, 1\] or None, got 1.5"):
        filter_snapshots([snap_wds], surrogates, tmp_path / "x", max_true_conf=1.5)
    with pytest.raises(SnapshotError, match=r"max_per_pair must be a whole number >= 1 or None, got 0"):
        filter_snapshots([snap_wds], surrogates, tmp_path / "x", max_per_pair=0)
    with pytest.raises(SnapshotError, match=r"no sample passes the filter"):
        filter_snapshots([snap_wds], surrogates, tmp_path / "x", min_fooled=1, max_true_conf=0.05)
    with pytest.raises(SnapshotError, match=r"is, or contains, the source"):
        filter_snapshots([snap_wds], surrogates, snap_wds, overwrite=True)
    assert not (tmp_path / "x").exists() and verify_snapshot(snap_wds).ok


def test_filter_pools_several_snapshots_in_order(snap_if, snap_wds, run_data, tmp_path):
    out = filter_snapshots([snap_if, snap_wds], {"c1": ConstClassifier(1)}, tmp_path / "pool", device="cpu")
    m = load_snapshot(out).manifest
    assert m.counts["candidates"] == 54 and m.samples == 36  # 18 non-dogs in each source
    assert [s["snapshot"] for s in m.sources] == [str(snap_if.resolve()), str(snap_wds.resolve())]
    non_dogs = [sid for sid, y in zip(run_data["ids"], run_data["labels"].tolist(), strict=True) if y != 1]
    assert m.source_ids == non_dogs + non_dogs  # both sources are exports of the same run, pooled in order


# --------------------------------------------------------------------------------------------- CLI


def test_cli_score_transfer_filter(snap_if, tmp_path, capsys):
    node = {"_target_": "tests.support.snapshots.ChannelClassifier"}
    cfg = compose_config("score", [f"snapshot={snap_if}", f"out={tmp_path / 'score.json'}", "device=cpu"])
    cfg.classifier = OmegaConf.create(node)
    res = run_score(cfg)
    written = json.loads((tmp_path / "score.json").read_text())
    assert res["sa"] == 100.0 and written["n"] == 27 and written["config"]["snapshot"] == str(snap_if)
    cfg = compose_config("transfer", [f"snapshots={{channel: {snap_if}}}", f"out={tmp_path / 't.csv'}", "device=cpu"])
    cfg.targets = OmegaConf.create({"channel": node})
    rows = run_transfer(cfg)
    assert len(rows) == 1 and rows[0]["self_generated"] and (tmp_path / "t.csv").is_file()
    assert "channel" in capsys.readouterr().out
    cfg = compose_config("filter", [f"snapshots=[{snap_if}]", f"out={tmp_path / 'hard'}", "device=cpu"])
    cfg.surrogates = OmegaConf.create({"channel": node})
    assert run_filter(cfg) == str(tmp_path / "hard") and verify_snapshot(tmp_path / "hard").ok
    assert "report transfer on models NOT in filtered_with" in capsys.readouterr().out
    cfg = compose_config("transfer", [f"snapshots=[{snap_if}]", "targets=[nope]"])
    with pytest.raises(SystemExit) as e:
        run_transfer(cfg)
    assert e.value.code == 2
    assert "unknown classifier config 'nope' in targets; available: " in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.weights
def test_real_cifar_resnets_end_to_end(tmp_path):
    """Shared CIFAR-10 JPEGs and ResNets: originals score exactly like the run's clean predictions."""
    from tests.support.assets import asset

    asset("weights/cifar10-resnet/resnet56-4bfd9763.th")
    asset("cifar10/test-jpg")
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                "data=cifar10_jpg",
                "data.limit=20",
                "classifier=cifar_resnet20",
                "generator=identity",
                "oracle=classifier",
            ],
        )
        targets = build_classifiers(compose("transfer"), "targets")
        surrogates = build_classifiers(compose("filter"), "surrogates")
    assert list(targets) == ["cifar_resnet20", "cifar_resnet32", "cifar_resnet56"]
    assert list(surrogates) == ["cifar_resnet20", "cifar_resnet32"]
    run = tmp_path / "run"
    evaluate(
        build(cfg.classifier, "classifier"),
        build(cfg.data, "data"),
        build(cfg.generator, "generator"),
        build(cfg.oracle, "oracle"),
        SearchConfig(budget=3, step_size=2 / 255, update="sign"),
        seed=0,
        execution=Execution(device="cpu"),
        output=RunOutput(run, save_images=True),
    )
    recs = [r for r in read_samples(run) if r.validated]
    snap = export_snapshot(run, tmp_path / "snap", format="webdataset")
    rows = transfer_matrix({"cifar_resnet20": snap}, targets, device="cpu")
    r20 = score_snapshot(snap, targets["cifar_resnet20"], device="cpu")
    assert r20.original_predictions == [r.clean_pred for r in recs]  # JPEG pixels are uint8: exact
    assert rows[0].self_generated and rows[0].pa == r20.pa.value
    preds = {n: score_snapshot(snap, c, device="cpu").predictions for n, c in surrogates.items()}
    labels = [r.label for r in recs]
    both = [r.source_id for i, r in enumerate(recs) if all(preds[n][i] != labels[i] for n in preds)]
    assert both, "the fixed run (seed 0, 20 images) has samples that fool both surrogates; the filter must run"
    hard = filter_snapshots(snap, surrogates, tmp_path / "hard", device="cpu")
    assert load_snapshot(hard).manifest.source_ids == both


def test_filter_cap_keeps_the_least_confident_sample_per_pair(snap_if, run_data, tmp_path):
    """With one surrogate that is fooled on some samples, the cap keeps, per (label, prediction) pair, the
    sample with the lowest true-class probability, computed here from the run's pixels by hand."""
    x = run_data["perturbed"].float() / 255
    logits = 10.0 * x.mean((2, 3))  # ChannelClassifier, written out
    prob = logits.softmax(1)
    labels = run_data["labels"]
    pred = prob.argmax(1)
    p_true = prob[torch.arange(len(labels)), labels]
    best: dict[tuple[int, int], int] = {}
    for i in range(len(labels)):
        pair = (int(labels[i]), int(pred[i]))
        if pair[0] != pair[1] and (pair not in best or p_true[i] < p_true[best[pair]]):
            best[pair] = i
    assert any(sum(1 for i in range(len(labels)) if (labels[i], pred[i]) == p) > 1 for p in best)  # a cap bites
    out = filter_snapshots(
        snap_if, {"channel": ChannelClassifier()}, tmp_path / "cap", max_per_pair=1, device="cpu", format="webdataset"
    )
    m = load_snapshot(out, lazy=True).manifest
    assert m.source_ids == [run_data["ids"][i] for i in sorted(best.values())]
    assert m.counts["fooled_enough"] > m.samples == len(best)
