"""Benchmark snapshots: export round trips (imagefolder / webdataset), verify, re-score, transfer, filtration.

The run is made with known components: a classifier that predicts the brightest channel, a sigmoid
latent space that decodes at twice the resolution (8 px originals, 16 px perturbed images), and an
oracle that rejects dark images, so which samples are validated and fooled is known.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from PIL import Image
from toys import ListDataset

from genEval import evaluate
from genEval import snapshot as snapmod
from genEval.commands import CONF_DIR
from genEval.commands.snapshot import run_export, run_filter, run_score, run_transfer, run_verify
from genEval.interfaces import Judgement
from genEval.perturb import SearchConfig
from genEval.rundir import load_latent_file, load_tensors
from genEval.snapshot import (
    SnapshotError,
    export_snapshot,
    filter_snapshots,
    load_snapshot,
    score_snapshot,
    transfer_matrix,
    verify_snapshot,
)
from genEval.stats import proportion

CLASSES = ["cat", "dog", "originals"]  # a class named like the originals/ folder must not collide with it


class UpsampleGenerator(torch.nn.Module):
    """x = upsample2(sigmoid(z)): perturbed images come out at twice the originals' size."""

    name = "up2"
    downsample = 1

    def encode(self, x):
        return torch.logit(x.clamp(1e-3, 1 - 1e-3))

    def decode(self, z):
        return torch.nn.functional.interpolate(torch.sigmoid(z), scale_factor=2, mode="nearest")


class ChannelClassifier(torch.nn.Module):
    """Predicts the brightest channel (any image size)."""

    def __init__(self, num_classes: int = 3, name: str = "channel"):
        super().__init__()
        self.num_classes, self.name = num_classes, name

    def forward(self, x):
        m = 10.0 * x.mean((2, 3))
        return torch.cat([m, m.new_zeros(len(x), self.num_classes - 3)], 1) if self.num_classes > 3 else m


class ConstClassifier(torch.nn.Module):
    """Always the same logits: predicts ``cls`` with softmax probability e^2/(e^2+2) = 0.787."""

    def __init__(self, cls: int):
        super().__init__()
        self.cls, self.num_classes, self.name = cls, 3, f"const{cls}"

    def forward(self, x):
        out = torch.zeros(len(x), 3)
        out[:, self.cls] = 2.0
        return out


class BrightOracle(torch.nn.Module):
    name = "bright"

    def prepare(self, class_names):
        pass

    def judge(self, x, y):
        m = x.mean((1, 2, 3))
        return Judgement(m > 0.2, m, y)


def toy_images(n: int = 30, seed: int = 0) -> ListDataset:
    g = torch.Generator().manual_seed(seed)
    y = [i % 3 for i in range(n)]
    x = 0.3 + 0.15 * torch.rand(n, 3, 8, 8, generator=g)
    for i, c in enumerate(y):
        x[i, c] = 0.4 + 0.35 * torch.rand(1, generator=g) + 0.1 * torch.rand(8, 8, generator=g)
        if i % 10 == 9:
            x[i] *= 0.3  # dark: the oracle rejects it at the start check -> not validated
    return ListDataset((x * 255).round() / 255, y, CLASSES)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run")
    evaluate(
        ChannelClassifier(),
        toy_images(),
        UpsampleGenerator(),
        BrightOracle(),
        SearchConfig(budget=2, step_size=0.2, update="sign"),
        seed=0,
        batch_size=16,
        output_dir=out,
        save_images=True,
        save_latents=True,
    )
    return out


@pytest.fixture(scope="module")
def run_data(run_dir):
    imgs = load_tensors(run_dir, "images")
    recs = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    v = imgs["validated"]
    return {
        "perturbed": imgs["perturbed"][v],
        "original": imgs["original"][v],
        "labels": imgs["labels"][v],
        "ids": [i for i, ok in zip(imgs["source_ids"], v.tolist(), strict=True) if ok],
        "records": [r for r in recs if r["validated"]],
    }


@pytest.fixture(scope="module")
def snap_if(run_dir, tmp_path_factory) -> Path:
    return export_snapshot(run_dir, tmp_path_factory.mktemp("snaps") / "imagefolder", include_latents=True)


@pytest.fixture(scope="module")
def snap_wds(run_dir, tmp_path_factory) -> Path:
    return export_snapshot(run_dir, tmp_path_factory.mktemp("snaps") / "wds", format="webdataset", shard_size=10)


def _png(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path)).transpose(2, 0, 1)


def test_the_toy_run_has_validated_fooled_and_unvalidated_samples(run_data):
    recs = run_data["records"]
    assert len(recs) == 27  # 3 of 30 are dark and rejected at the start
    fooled = sum(r["final_pred"] != r["label"] for r in recs)
    assert 0 < fooled < len(recs)
    assert tuple(run_data["perturbed"].shape[1:]) == (3, 16, 16)
    assert tuple(run_data["original"].shape[1:]) == (3, 8, 8)


def test_imagefolder_layout_manifest_and_hashes(snap_if, run_dir, run_data):
    m = json.loads((snap_if / "manifest.json").read_text())
    assert m["format"] == "imagefolder" and m["kind"] == "export" and m["class_names"] == CLASSES
    assert m["class_dirs"] == ["cat", "dog", "originals_2"]
    assert m["counts"]["samples"] == 27 and m["counts"]["run_samples"] == 30
    assert m["counts"]["per_class"] == {c: int((run_data["labels"] == k).sum()) for k, c in enumerate(CLASSES)}
    assert m["source_ids"] == run_data["ids"]
    assert m["components"] == {
        "classifier": "channel",
        "generator": "up2",
        "oracle": "bright",
        "data": "toy",
        "mask": "none",
    }
    assert m["seed"] == 0 and m["config"]["search"]["budget"] == 2 and "torch" in m["versions"]
    assert m["image_shapes"] == {"perturbed": [3, 16, 16], "original": [3, 8, 8]}
    on_disk = sorted(p.relative_to(snap_if).as_posix() for p in snap_if.rglob("*") if p.is_file())
    assert sorted(m["files"]) == [f for f in on_disk if f != "manifest.json"]
    for rel, info in m["files"].items():
        assert snapmod._sha256(snap_if / rel) == info["sha256"] and (snap_if / rel).stat().st_size == info["size"]
    rows = [json.loads(line) for line in (snap_if / "metadata.jsonl").read_text().splitlines()]
    assert rows[0]["file_name"] == f"{m['class_dirs'][rows[0]['label']]}/000000.png"
    assert rows[0]["original_file_name"] == "originals/" + rows[0]["file_name"]
    for key in (
        "label",
        "class_name",
        "source_id",
        "tested_model",
        "seed",
        "steps",
        "first_fooled",
        "oracle_score",
    ):
        assert key in rows[0]
    assert [r["steps"] for r in rows] == [r["accepted_steps"] for r in run_data["records"]]
    assert all((snap_if / r["file_name"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for r in rows)  # PNG, not JPEG
    for i, r in enumerate(rows):  # lossless: pixel-exact to the run's uint8 images
        assert np.array_equal(_png(snap_if / r["file_name"]), run_data["perturbed"][i].numpy())
        assert np.array_equal(_png(snap_if / r["original_file_name"]), run_data["original"][i].numpy())
    lat = load_latent_file(snap_if / "latents.safetensors")
    full = load_latent_file(run_dir)
    assert lat["source_ids"] == run_data["ids"] and torch.equal(lat["final"], full["final"][full["validated"]])


def test_huggingface_datasets_reads_the_imagefolder_pixel_exact(snap_if, run_data, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets = pytest.importorskip("datasets", reason="Hugging Face datasets is not installed (test extra)")
    ds = datasets.load_dataset("imagefolder", data_dir=str(snap_if), split="train", cache_dir=str(tmp_path))
    assert len(ds) == 27 and {"image", "original", "label", "source_id"} <= set(ds.column_names)
    for i, row in enumerate(ds):
        assert np.array_equal(np.asarray(row["image"]).transpose(2, 0, 1), run_data["perturbed"][i].numpy())
        assert np.array_equal(np.asarray(row["original"]).transpose(2, 0, 1), run_data["original"][i].numpy())
        assert row["label"] == int(run_data["labels"][i]) and row["source_id"] == run_data["ids"][i]


def test_webdataset_shards_read_pixel_exact(snap_wds, run_data):
    wds = pytest.importorskip("webdataset", reason="webdataset is not installed (test extra)")
    m = json.loads((snap_wds / "manifest.json").read_text())
    assert m["shards"] == ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    assert m["shard_lengths"] == [10, 10, 7]
    info = json.loads((snap_wds / "_info.json").read_text())
    assert info["splits"]["validation"]["num_samples"] == 27
    urls = [str(snap_wds / s) for s in m["shards"]]
    samples = list(wds.WebDataset(urls, shardshuffle=False))
    assert len(samples) == 27
    for i, s in enumerate(samples):
        assert "." not in s["__key__"]
        img = np.asarray(Image.open(io.BytesIO(s["png"]))).transpose(2, 0, 1)
        assert np.array_equal(img, run_data["perturbed"][i].numpy())
        orig = np.asarray(Image.open(io.BytesIO(s["original.png"]))).transpose(2, 0, 1)
        assert np.array_equal(orig, run_data["original"][i].numpy())
        assert int(s["cls"]) == int(run_data["labels"][i])
        assert json.loads(s["json"])["source_id"] == run_data["ids"][i]


def test_timm_wds_reader_reads_the_shards(snap_wds, run_data):
    pytest.importorskip("webdataset", reason="webdataset is not installed (test extra)")
    from timm.data import create_dataset

    ds = create_dataset("wds/snapshot", root=str(snap_wds), split="validation")
    targets = [int(t) for _, t in ds]
    assert sorted(targets) == sorted(run_data["labels"].tolist())


@pytest.mark.parametrize("fixture", ["snap_if", "snap_wds"])
def test_load_snapshot_eager_and_lazy_are_pixel_exact(fixture, request, run_data):
    path = request.getfixturevalue(fixture)
    images, labels, class_names, manifest = load_snapshot(path)
    assert torch.equal(images, run_data["perturbed"]) and torch.equal(labels, run_data["labels"])
    assert class_names == CLASSES and manifest["counts"]["samples"] == 27
    snap = load_snapshot(path, lazy=True)
    assert torch.equal(torch.from_numpy(snap.originals.uint8(3)), run_data["original"][3])
    x, y, sid = snap.images[5]
    assert x.dtype == torch.float32 and torch.equal((x * 255).round().byte(), run_data["perturbed"][5])
    assert (y, sid) == (int(run_data["labels"][5]), run_data["ids"][5])


def test_verify_catches_modified_missing_extra_and_miscounted_files(snap_if, snap_wds, tmp_path):
    assert verify_snapshot(snap_if).ok and verify_snapshot(snap_wds).ok
    bad = tmp_path / "bad"
    shutil.copytree(snap_if, bad)
    pngs = sorted(p for p in (bad / "cat").glob("*.png"))
    pngs[0].write_bytes(pngs[0].read_bytes()[:-20])  # truncated
    pngs[1].unlink()
    (bad / "dog" / "999999.png").write_bytes(pngs[2].read_bytes())
    r = verify_snapshot(bad)
    assert not r.ok
    assert r.modified == [f"cat/{pngs[0].name}"] and r.missing == [f"cat/{pngs[1].name}"]
    assert r.extra == ["dog/999999.png"] and r.count_mismatch == []
    with pytest.raises(SnapshotError, match=r"does not match its manifest"):
        load_snapshot(bad)
    tampered = tmp_path / "tampered"
    shutil.copytree(snap_wds, tampered)
    m = json.loads((tampered / "manifest.json").read_text())
    m["counts"]["samples"] = 28
    (tampered / "manifest.json").write_text(json.dumps(m))
    r2 = verify_snapshot(tampered)
    assert not r2.ok and r2.missing == r2.modified == r2.extra == []
    assert any("shard_lengths in manifest: 27 (manifest says 28" in c for c in r2.count_mismatch)


def test_verify_without_manifest(snap_if, tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(SnapshotError, match=r"has no manifest.json: it is not a genEval snapshot"):
        verify_snapshot(tmp_path / "x")
    with pytest.raises(FileNotFoundError, match=r"snapshot directory .* does not exist"):
        verify_snapshot(tmp_path / "nowhere")


def test_export_refuses_a_non_empty_out_dir_and_overwrites_on_request(run_dir, tmp_path):
    out = tmp_path / "snap"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match=r"is not empty; choose a new directory, or pass overwrite=True"):
        export_snapshot(run_dir, out)
    assert (out / "notes.txt").read_text() == "keep me"
    export_snapshot(run_dir, out, overwrite=True)
    assert not (out / "notes.txt").exists() and verify_snapshot(out).ok
    with pytest.raises(SnapshotError, match=r"is, or contains, the source"):
        export_snapshot(run_dir, run_dir, overwrite=True)
    assert (run_dir / "results.json").is_file()


def test_export_errors_for_incomplete_runs(run_dir, tmp_path):
    partial = tmp_path / "partial"
    shutil.copytree(run_dir, partial)
    (partial / "results.json").unlink()
    with pytest.raises(SnapshotError, match=r"has no results.json: the run is incomplete"):
        export_snapshot(partial, tmp_path / "s1")
    no_images = tmp_path / "no_images"
    shutil.copytree(run_dir, no_images)
    shutil.rmtree(no_images / "images")
    with pytest.raises(FileNotFoundError, match=r"no images.safetensors; rerun the evaluation with save_images=true"):
        export_snapshot(no_images, tmp_path / "s2")
    (partial / "results.json").write_text((run_dir / "results.json").read_text())
    shutil.rmtree(partial / "latents")
    with pytest.raises(FileNotFoundError, match=r"rerun the evaluation with save_latents=true"):
        export_snapshot(partial, tmp_path / "s3", include_latents=True)
    with pytest.raises(SnapshotError, match=r"unknown snapshot format 'zip'; choose one of imagefolder, webdataset"):
        export_snapshot(run_dir, tmp_path / "s4", format="zip")
    assert not any((tmp_path / f"s{i}").exists() for i in range(1, 5))


@pytest.mark.parametrize("fmt", ["imagefolder", "webdataset"])
def test_interrupted_export_leaves_no_snapshot(run_dir, tmp_path, monkeypatch, fmt):
    real, calls = snapmod._encode_png, []

    def flaky(image):
        calls.append(1)
        if len(calls) > 9:
            raise OSError(28, "No space left on device")
        return real(image)

    monkeypatch.setattr(snapmod, "_encode_png", flaky)
    with pytest.raises(OSError, match="No space left"):
        export_snapshot(run_dir, tmp_path / "snap", format=fmt)
    assert not (tmp_path / "snap").exists() and list(tmp_path.iterdir()) == []
    # over an existing snapshot, the old one survives intact
    monkeypatch.setattr(snapmod, "_encode_png", real)
    old = export_snapshot(run_dir, tmp_path / "old", format=fmt)
    calls.clear()
    monkeypatch.setattr(snapmod, "_encode_png", flaky)
    with pytest.raises(OSError):
        export_snapshot(run_dir, old, format=fmt, overwrite=True)
    assert verify_snapshot(old).ok and sorted(p.name for p in tmp_path.iterdir()) == ["old"]


def test_score_known_answers(snap_if, snap_wds, run_data):
    labels = run_data["labels"]
    n_still = sum(r["final_pred"] == r["label"] for r in run_data["records"])
    for path in (snap_if, snap_wds):
        r = score_snapshot(path, ChannelClassifier(), batch_size=7, device="cpu")
        assert r["predictions"] == [rec["final_pred"] for rec in run_data["records"]]  # PNG kept the decisions
        assert r["pa"] == proportion(n_still, 27).to_dict() and r["sa"]["value"] == 100.0
        assert r["fmr"] == pytest.approx(100 * n_still / 27)
    const = score_snapshot(snap_if, ConstClassifier(0), device="cpu")
    k0 = int((labels == 0).sum())
    assert const["pa"]["k"] == const["sa"]["k"] == k0 and const["fmr"] == 100.0
    assert const["pa"]["low"] == pytest.approx(proportion(k0, 27).low)


def test_score_refuses_a_classifier_with_other_classes(snap_if):
    with pytest.raises(
        SnapshotError,
        match=r"classifier channel has 4 classes but snapshot '.*' has 3 "
        r"\(cat, dog, originals\)",
    ):
        score_snapshot(snap_if, ChannelClassifier(num_classes=4))


def test_transfer_matrix_shape_diagonal_and_csv(snap_if, snap_wds, tmp_path):
    out = tmp_path / "t.csv"
    rows = transfer_matrix(
        {"channel": snap_if, "copy": snap_wds},
        {"channel": ChannelClassifier(), "const0": ConstClassifier(0)},
        out_csv=out,
        device="cpu",
    )
    assert [(r["source"], r["target"]) for r in rows] == [
        ("channel", "channel"),
        ("channel", "const0"),
        ("copy", "channel"),
        ("copy", "const0"),
    ]
    assert [r["self_generated"] for r in rows] == [True, False, False, False]
    assert rows[0]["pa"] == rows[2]["pa"] == score_snapshot(snap_if, ChannelClassifier())["pa"]["value"]
    table = list(csv.DictReader(out.open()))
    assert len(table) == 4 and table[0]["source"] == "channel" and float(table[0]["pa"]) == rows[0]["pa"]
    assert table[0]["self_generated"] == "True"


def test_filter_keeps_samples_fooling_k_surrogates(snap_if, run_data, tmp_path):
    surrogates = {"channel": ChannelClassifier(), "const0": ConstClassifier(0)}
    out = filter_snapshots(snap_if, surrogates, tmp_path / "hard", min_fooled=2, device="cpu")
    labels = run_data["labels"].tolist()
    fooled = [(r["final_pred"] != y) + (y != 0) for r, y in zip(run_data["records"], labels, strict=True)]
    expected = [sid for sid, f in zip(run_data["ids"], fooled, strict=True) if f >= 2]
    assert 0 < len(expected) < 27
    snap = load_snapshot(out)
    m = snap.manifest
    assert m["source_ids"] == expected and m["filtered_with"] == ["channel", "const0"] and m["kind"] == "filter"
    assert m["format"] == "imagefolder" and m["sources"][0]["snapshot"] == str(snap_if.resolve())
    assert all(r["n_fooled"] == 2 and r["tested_model"] == "channel" for r in snap.records)
    keep = [i for i, f in enumerate(fooled) if f >= 2]
    assert torch.equal(snap.images, run_data["perturbed"][keep])  # the PNG bytes are carried over unchanged
    rows = transfer_matrix(
        {"hard": out},
        {"const0": ConstClassifier(0), "const1": ConstClassifier(1)},
        device="cpu",
        skip_filtering_models=True,
    )
    assert [(r["target"], r["used_for_filtering"], r["skipped"]) for r in rows] == [
        ("const0", True, True),
        ("const1", False, False),
    ]
    assert rows[0]["pa"] is None and rows[1]["pa"] is not None


def test_filter_per_pair_cap_and_confidence(snap_wds, run_data, tmp_path):
    surrogates = {"c0": ConstClassifier(0), "c1": ConstClassifier(1)}
    # pairs: label 0 -> (0, 1), label 1 -> (1, 0), label 2 -> both wrong, tie -> first surrogate: (2, 0)
    out = filter_snapshots([snap_wds], surrogates, tmp_path / "capped", min_fooled=1, max_per_pair=1, device="cpu")
    snap = load_snapshot(out, lazy=True)
    labels = run_data["labels"].tolist()
    first = [run_data["ids"][labels.index(c)] for c in range(3)]  # equal confidence: the earliest one stays
    assert snap.manifest["source_ids"] == sorted(first, key=run_data["ids"].index)
    assert snap.manifest["format"] == "webdataset"
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
    ids = load_snapshot(conf).manifest["source_ids"]
    assert ids == [sid for sid, y in zip(run_data["ids"], labels, strict=True) if y == 2]
    with pytest.raises(SnapshotError, match=r"min_fooled must be a whole number in 1..2 .* got 3"):
        filter_snapshots([snap_wds], surrogates, tmp_path / "x", min_fooled=3)
    with pytest.raises(SnapshotError, match=r"no sample passes the filter"):
        filter_snapshots([snap_wds], surrogates, tmp_path / "x", min_fooled=1, max_true_conf=0.05)
    assert not (tmp_path / "x").exists()


# --------------------------------------------------------------------------------------------- CLI


def _cfg(name: str, overrides: list[str]):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(name, overrides=overrides)


@pytest.mark.parametrize("name", ["export", "verify", "score", "transfer", "filter"])
def test_every_snapshot_config_composes(name):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose(name, return_hydra_config=True)
    assert cfg.hydra.run.dir.startswith(f"outputs/{name}/") and cfg.hydra.job.chdir is False


def test_cli_export_verify_and_exit_codes(run_dir, tmp_path, capsys):
    out = tmp_path / "cli_snap"
    assert run_export(_cfg("export", [f"run={run_dir}", f"out={out}", "format=webdataset"])) == str(out)
    assert "27 validated samples of 30" in capsys.readouterr().out
    assert run_verify(_cfg("verify", [f"snapshot={out}"])) is True
    (out / "stray.txt").write_text("x")
    with pytest.raises(SystemExit) as e:
        run_verify(_cfg("verify", [f"snapshot={out}"]))
    assert e.value.code == 1
    assert "extra (1): stray.txt" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        run_export(_cfg("export", [f"run={run_dir}", f"out={out}"]))
    assert e.value.code == 2
    assert "geneval export: error: out_dir" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        run_verify(_cfg("verify", []))
    assert e.value.code == 2 and "geneval verify: error: geneval verify needs snapshot=" in capsys.readouterr().err


def test_cli_score_transfer_filter(snap_if, tmp_path, capsys):
    node = {"_target_": "test_snapshot.ChannelClassifier"}
    cfg = _cfg("score", [f"snapshot={snap_if}", f"out={tmp_path / 'score.json'}", "device=cpu"])
    cfg.classifier = OmegaConf.create(node)
    res = run_score(cfg)
    assert res["sa"] == 100.0 and json.loads((tmp_path / "score.json").read_text())["n"] == 27
    cfg = _cfg("transfer", [f"snapshots={{channel: {snap_if}}}", f"out={tmp_path / 't.csv'}", "device=cpu"])
    cfg.targets = OmegaConf.create({"channel": node})
    rows = run_transfer(cfg)
    assert len(rows) == 1 and rows[0]["self_generated"] and (tmp_path / "t.csv").is_file()
    assert "channel" in capsys.readouterr().out
    cfg = _cfg("filter", [f"snapshots=[{snap_if}]", f"out={tmp_path / 'hard'}", "device=cpu"])
    cfg.surrogates = OmegaConf.create({"channel": node})
    assert run_filter(cfg) == str(tmp_path / "hard") and verify_snapshot(tmp_path / "hard").ok
    cfg = _cfg("transfer", [f"snapshots=[{snap_if}]", "targets=[nope]"])
    with pytest.raises(SystemExit) as e:
        run_transfer(cfg)
    assert e.value.code == 2
    assert "unknown classifier config 'nope' in targets; available: " in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.weights
def test_real_cifar_resnets_end_to_end(tmp_path):
    """Shared CIFAR-10 JPEGs and ResNets: originals score exactly like the run's clean predictions."""
    from conftest import asset

    from genEval.commands import build
    from genEval.commands.snapshot import build_classifiers

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
        device="cpu",
        output_dir=run,
        save_images=True,
    )
    recs = [r for r in map(json.loads, (run / "samples.jsonl").read_text().splitlines()) if r["validated"]]
    snap = export_snapshot(run, tmp_path / "snap", format="webdataset")
    rows = transfer_matrix({"cifar_resnet20": snap}, targets, device="cpu")
    r20 = score_snapshot(snap, targets["cifar_resnet20"], device="cpu")
    assert r20["original_predictions"] == [r["clean_pred"] for r in recs]  # JPEG pixels are uint8: exact
    assert rows[0]["self_generated"] and rows[0]["pa"] == r20["pa"]["value"]
    preds = {n: score_snapshot(snap, c, device="cpu")["predictions"] for n, c in surrogates.items()}
    labels = [r["label"] for r in recs]
    both = [r["source_id"] for i, r in enumerate(recs) if all(preds[n][i] != labels[i] for n in preds)]
    if both:
        hard = filter_snapshots(snap, surrogates, tmp_path / "hard", device="cpu")
        assert load_snapshot(hard).manifest["source_ids"] == both
