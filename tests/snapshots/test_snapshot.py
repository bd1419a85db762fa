"""Benchmark snapshots, the format: export round trips (imagefolder / webdataset), manifest, verify, load.

Expected content comes from the run directory (read through genEval.runs.RunDir), hashes from hashlib on the
bytes read back, never from the writer's own helpers.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import webdataset as wds
from hydra import compose, initialize_config_dir
from PIL import Image

from genEval.commands import CONF_DIR
from genEval.commands.snapshot import run_export, run_verify
from genEval.runs import RunDir
from genEval.runs.parts import load_latent_file
from genEval.runs.recording import RunOutput
from genEval.scores.run_scores import Scoring
from genEval.search.execution import Execution
from genEval.snapshots import export as snapmod  # the exporter encodes each PNG
from genEval.snapshots.export import export_snapshot
from genEval.snapshots.manifest import Manifest, SnapshotError
from genEval.snapshots.reader import load_snapshot
from genEval.snapshots.verify import verify_snapshot
from tests.support.snapshots import CLASSES, compose_config


def _png(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path)).transpose(2, 0, 1)


def _files_on_disk(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_the_toy_run_has_validated_fooled_and_unvalidated_samples(run_data):
    recs = run_data["records"]
    assert len(recs) == 27  # 3 of 30 are dark and rejected at the start
    fooled = sum(r["final_pred"] != r["label"] for r in recs)
    assert 0 < fooled < len(recs)
    assert tuple(run_data["perturbed"].shape[1:]) == (3, 16, 16)
    assert tuple(run_data["original"].shape[1:]) == (3, 8, 8)


def test_imagefolder_layout_and_manifest(snap_if, run_dir, run_data):
    m = json.loads((snap_if / "manifest.json").read_text())
    assert m["format"] == "imagefolder" and m["kind"] == "export" and m["class_names"] == CLASSES
    assert m["class_dirs"] == ["cat", "dog", "originals_2"]
    assert m["counts"]["samples"] == 27 and m["counts"]["run_samples"] == 30
    assert m["counts"]["per_class"] == {c: int((run_data["labels"] == k).sum()) for k, c in enumerate(CLASSES)}
    assert m["source_ids"] == run_data["ids"]
    assert m["components"] == {"classifier": "channel", "generator": "up2", "oracle": "bright", "data": "toy",
                               "mask": "none"}  # fmt: skip
    assert m["seed"] == 0 and m["config"]["search"]["budget"] == 2 and "torch" in m["exported_with"]
    assert m["image_shapes"] == {"perturbed": [3, 16, 16], "original": [3, 8, 8]}
    rows = [json.loads(line) for line in (snap_if / "metadata.jsonl").read_text().splitlines()]
    assert rows[0]["file_name"] == f"{m['class_dirs'][rows[0]['label']]}/000000.png"
    assert rows[0]["original_file_name"] == "originals/" + rows[0]["file_name"]
    for key in ("label", "class_name", "source_id", "tested_model", "seed", "steps", "first_fooled", "oracle_score"):
        assert key in rows[0]
    assert [r["steps"] for r in rows] == [r["accepted_steps"] for r in run_data["records"]]
    assert all((snap_if / r["file_name"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for r in rows)  # PNG, not JPEG
    for i, r in enumerate(rows):  # lossless: pixel-exact to the run's uint8 images
        assert np.array_equal(_png(snap_if / r["file_name"]), run_data["perturbed"][i].numpy())
        assert np.array_equal(_png(snap_if / r["original_file_name"]), run_data["original"][i].numpy())
    lat = load_latent_file(snap_if / "latents.safetensors")
    full = RunDir(run_dir).tensors("latents")
    assert lat["source_ids"] == run_data["ids"] and torch.equal(lat["final"], full["final"][full["validated"]])


@pytest.mark.parametrize("fixture", ["snap_if", "snap_wds"])
def test_manifest_hashes_every_file_as_hashlib_reads_it(fixture, request):
    """Every file but the manifest is listed, with the sha256 and size of its bytes as read back."""
    root = request.getfixturevalue(fixture)
    files = json.loads((root / "manifest.json").read_text())["files"]
    assert sorted(files) == [f for f in _files_on_disk(root) if f != "manifest.json"]
    for rel, info in files.items():
        data = (root / rel).read_bytes()
        assert info == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


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
    m = json.loads((snap_wds / "manifest.json").read_text())
    assert m["shards"] == ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    assert m["shard_lengths"] == [10, 10, 7]
    info = json.loads((snap_wds / "_info.json").read_text())
    assert info["splits"]["validation"]["num_samples"] == 27
    assert info["splits"]["validation"]["shard_lengths"] == [10, 10, 7]
    samples = list(wds.WebDataset([str(snap_wds / s) for s in m["shards"]], shardshuffle=False))
    assert len(samples) == 27
    for i, s in enumerate(samples):
        assert "." not in s["__key__"]
        img = np.asarray(Image.open(io.BytesIO(s["png"]))).transpose(2, 0, 1)
        assert np.array_equal(img, run_data["perturbed"][i].numpy())
        orig = np.asarray(Image.open(io.BytesIO(s["original.png"]))).transpose(2, 0, 1)
        assert np.array_equal(orig, run_data["original"][i].numpy())
        assert int(s["cls"]) == int(run_data["labels"][i])
        assert json.loads(s["json"])["source_id"] == run_data["ids"][i]


def test_webdataset_tar_headers_are_fixed(snap_wds):
    """Same content, same shard bytes: no export time, owner or umask may leak into the tar headers."""
    for shard in ("shard-000000.tar", "shard-000001.tar", "shard-000002.tar"):
        with tarfile.open(snap_wds / shard) as tar:
            members = tar.getmembers()
        assert len(members) == 4 * (10 if shard != "shard-000002.tar" else 7)
        headers = {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode, m.type) for m in members}
        assert headers == {(0, 0, 0, "", "", 0o644, tarfile.REGTYPE)}


@pytest.mark.parametrize("fmt", ["imagefolder", "webdataset"])
def test_reexport_gives_byte_identical_files(run_dir, tmp_path, fmt):
    """Exporting the same run twice gives the same files, byte for byte, so the manifests' hashes agree."""
    a = export_snapshot(run_dir, tmp_path / "a", format=fmt, shard_size=10)
    b = export_snapshot(run_dir, tmp_path / "b", format=fmt, shard_size=10)
    ma, mb = Manifest.read(a), Manifest.read(b)
    assert ma.files == mb.files and len(ma.files) >= 3
    for rel in ma.files:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_timm_wds_reader_reads_the_shards(snap_wds, run_data):
    from timm.data import create_dataset

    ds = create_dataset("wds/snapshot", root=str(snap_wds), split="validation")
    targets = [int(t) for _, t in ds]
    assert sorted(targets) == sorted(run_data["labels"].tolist())


@pytest.mark.parametrize("fixture", ["snap_if", "snap_wds"])
def test_load_snapshot_eager_and_lazy_are_pixel_exact(fixture, request, run_data):
    path = request.getfixturevalue(fixture)
    images, labels, class_names, manifest = load_snapshot(path)
    assert torch.equal(images, run_data["perturbed"]) and torch.equal(labels, run_data["labels"])
    assert class_names == CLASSES and manifest.counts["samples"] == 27
    snap = load_snapshot(path, lazy=True)
    assert torch.equal(torch.from_numpy(snap.originals.uint8(3)), run_data["original"][3])
    x, y, sid = snap.images[5]
    assert x.dtype == torch.float32 and torch.equal((x * 255).round().byte(), run_data["perturbed"][5])
    assert (y, sid) == (int(run_data["labels"][5]), run_data["ids"][5])
    assert [r["source_id"] for r in snap.records] == run_data["ids"]


def test_manifest_round_trips_and_keeps_unknown_keys(snap_wds, tmp_path):
    raw = json.loads((snap_wds / "manifest.json").read_text())
    m = Manifest.from_dict(raw)
    assert m.to_dict() == raw and m.samples == 27 and m.shards == raw["shards"]
    later = Manifest.from_dict({**raw, "sa_full": {"value": 90.0}})  # a field a later version adds
    assert later.extra == {"sa_full": {"value": 90.0}} and later.to_dict()["sa_full"] == {"value": 90.0}
    with pytest.raises(SnapshotError, match=r"snapshot format 99, newer than this genEval reads \(1\)"):
        Manifest.from_dict({**raw, "geneval_snapshot": 99})
    with pytest.raises(SnapshotError, match=r"lacks class_names; the snapshot is damaged"):
        Manifest.from_dict({k: v for k, v in raw.items() if k != "class_names"})
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(SnapshotError, match=r"is not valid JSON"):
        Manifest.read(tmp_path)


# --------------------------------------------------------------------------------------------- verify


def _tamper(root: Path, fault: str) -> str:
    """Damage a copied snapshot in one way; returns the name verify should report."""
    m = json.loads((root / "manifest.json").read_text())
    victim = sorted(f for f in m["files"] if f.endswith((".png", ".tar")))[0]
    if fault == "modified":  # same size, one byte flipped: only the hash can see it
        data = bytearray((root / victim).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (root / victim).write_bytes(bytes(data))
        return victim
    if fault == "missing":
        (root / victim).unlink()
        return victim
    if fault == "extra":
        (root / "stray.png").write_bytes(b"x")
        return "stray.png"
    if m["format"] == "webdataset":  # count: a shard said to hold one sample more than it does
        m["shard_lengths"][0] += 1
    else:  # count: a manifest that claims one sample more than the files hold
        m["counts"]["samples"] += 1
    (root / "manifest.json").write_text(json.dumps(m))
    return "count"


@pytest.mark.parametrize("fault", ["modified", "missing", "extra", "count"])
@pytest.mark.parametrize("fixture", ["snap_if", "snap_wds"])
def test_verify_catches_each_fault_and_the_command_exits_1(fixture, fault, request, tmp_path, capsys):
    src = request.getfixturevalue(fixture)
    assert verify_snapshot(src).ok
    bad = tmp_path / "bad"
    shutil.copytree(src, bad)
    name = _tamper(bad, fault)
    r = verify_snapshot(bad)
    assert not r.ok
    found = {"modified": r.modified, "missing": r.missing, "extra": r.extra, "count": r.count_mismatch}
    assert {k for k, v in found.items() if v} == {fault}
    if fault == "count" and fixture == "snap_wds":
        assert r.count_mismatch == [
            "shard_lengths in manifest: 28 (manifest says 27 samples)",
            "samples in shard-000000.tar: 10 (manifest says 11)",
        ]
    elif fault == "count":
        assert "source_ids in manifest: 27 (manifest says 28 samples)" in r.count_mismatch
        assert "rows in metadata.jsonl: 27 (manifest says 28 samples)" in r.count_mismatch
    else:
        assert found[fault] == [name]
    with pytest.raises(SnapshotError, match=r"does not match its manifest"):
        load_snapshot(bad)
    with pytest.raises(SystemExit) as e:
        run_verify(compose_config("verify", [f"snapshot={bad}"]))
    assert e.value.code == 1
    out = capsys.readouterr()
    label = "count mismatch" if fault == "count" else fault
    assert "FAILED" in out.out and f"  {label} (" in out.out and "does not match its manifest" in out.err


def test_verify_without_manifest(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(SnapshotError, match=r"has no manifest.json: it is not a genEval snapshot"):
        verify_snapshot(tmp_path / "x")
    with pytest.raises(FileNotFoundError, match=r"snapshot directory .* does not exist"):
        verify_snapshot(tmp_path / "nowhere")


# --------------------------------------------------------------------------------------------- export errors


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
    with pytest.raises(FileNotFoundError, match=r"has no results.json: not a finished genEval run"):
        export_snapshot(partial, tmp_path / "s1")
    no_images = tmp_path / "no_images"
    shutil.copytree(run_dir, no_images)
    shutil.rmtree(no_images / "images")
    with pytest.raises(FileNotFoundError, match=r"saved no images .*rerun the evaluation with save_images=true"):
        export_snapshot(no_images, tmp_path / "s2")
    (partial / "results.json").write_text((run_dir / "results.json").read_text())
    shutil.rmtree(partial / "latents")
    with pytest.raises(FileNotFoundError, match=r"rerun the evaluation with save_latents=true"):
        export_snapshot(partial, tmp_path / "s3", include_latents=True)
    with pytest.raises(SnapshotError, match=r"unknown snapshot format 'zip'; choose one of imagefolder, webdataset"):
        export_snapshot(run_dir, tmp_path / "s4", format="zip")
    with pytest.raises(SnapshotError, match=r"shard_size must be a whole number >= 1, got 0"):
        export_snapshot(run_dir, tmp_path / "s5", format="webdataset", shard_size=0)
    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    lines = (other / "samples.jsonl").read_text().splitlines()
    (other / "samples.jsonl").write_text(
        "\n".join([lines[0].replace('"source_id": "', '"source_id": "x')] + lines[1:]) + "\n"
    )
    with pytest.raises(ValueError, match=r"disagree .* they come from different runs"):
        export_snapshot(other, tmp_path / "s6")
    assert not any((tmp_path / f"s{i}").exists() for i in range(1, 7))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["no_images", "other", "partial"]  # no temp dirs left


@pytest.mark.parametrize("fmt", ["imagefolder", "webdataset"])
def test_interrupted_export_leaves_no_snapshot(run_dir, tmp_path, monkeypatch, fmt):
    real, calls = snapmod.encode_png, []

    def flaky(image):
        calls.append(1)
        if len(calls) > 9:
            raise OSError(28, "No space left on device")
        return real(image)

    monkeypatch.setattr(snapmod, "encode_png", flaky)
    with pytest.raises(OSError, match="No space left"):
        export_snapshot(run_dir, tmp_path / "snap", format=fmt)
    assert not (tmp_path / "snap").exists() and list(tmp_path.iterdir()) == []
    # over an existing snapshot, the old one survives intact
    monkeypatch.setattr(snapmod, "encode_png", real)
    old = export_snapshot(run_dir, tmp_path / "old", format=fmt)
    calls.clear()
    monkeypatch.setattr(snapmod, "encode_png", flaky)
    with pytest.raises(OSError):
        export_snapshot(run_dir, old, format=fmt, overwrite=True)
    assert verify_snapshot(old).ok and sorted(p.name for p in tmp_path.iterdir()) == ["old"]


def test_snapshot_directory_gets_the_umask_permissions(run_dir, tmp_path):
    """Colleagues on a shared cluster can read a snapshot: its directory is 0777 minus the umask, not 0700."""
    old = os.umask(0o022)
    try:
        out = export_snapshot(run_dir, tmp_path / "shared")
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o755
    assert (out / "manifest.json").stat().st_mode & 0o777 == 0o644


# --------------------------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("name", ["export", "verify", "score", "transfer", "filter"])
def test_every_snapshot_config_composes(name):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose(name, return_hydra_config=True)
    assert cfg.hydra.run.dir.startswith(f"outputs/{name}/") and cfg.hydra.job.chdir is False


def test_cli_export_verify_and_exit_codes(run_dir, tmp_path, capsys):
    out = tmp_path / "cli_snap"
    assert run_export(compose_config("export", [f"run={run_dir}", f"out={out}", "format=webdataset"])) == str(out)
    assert "27 validated samples of 30" in capsys.readouterr().out
    assert run_verify(compose_config("verify", [f"snapshot={out}"])) is True
    assert "OK (2 files checked)" in capsys.readouterr().out  # one shard (shard_size 1000) and _info.json
    with pytest.raises(SystemExit) as e:
        run_export(compose_config("export", [f"run={run_dir}", f"out={out}"]))
    assert e.value.code == 2
    assert "geneval export: error: out_dir" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        run_verify(compose_config("verify", []))
    assert e.value.code == 2 and "geneval verify: error: geneval verify needs snapshot=" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ streaming (issue 20)
def test_export_holds_one_image_row_at_a_time(run_dir, run_data, tmp_path, monkeypatch):
    """Export streams: never every image at once (50,000 pairs at 256 px are ~19.6 GB), one row after another."""
    import weakref

    from genEval.runs import parts, reader

    def refuse(*args, **kwargs):
        raise AssertionError("export loaded every image of the run at once")

    for loads_all in ("stack_tensors", "iter_tensor_parts"):
        monkeypatch.setattr(reader, loads_all, refuse)
        monkeypatch.setattr(parts, loads_all, refuse)
    real, alive, peak, seen = reader.iter_tensor_rows, weakref.WeakSet(), [0], []

    def counting(*args, **kwargs):
        for record, row in real(*args, **kwargs):
            alive.add(row["perturbed"])
            peak[0] = max(peak[0], len(alive))
            seen.append(record.source_id)
            yield record, row

    monkeypatch.setattr(reader, "iter_tensor_rows", counting)  # what RunDir.rows streams through
    for fmt in ("imagefolder", "webdataset"):
        seen.clear()
        out = export_snapshot(run_dir, tmp_path / fmt, format=fmt)
        assert verify_snapshot(out).ok and Manifest.read(out).source_ids == run_data["ids"]
        assert seen[1:] == run_data["ids"]  # after the first row (the image shapes), each validated row once
    assert peak[0] <= 3  # of 27 rows: the one being encoded, and the next being read


def _parts_run(tmp_path: Path, n: int = 150) -> Path:
    """A toy run with save_images=true over three tensor parts (the writer flushes every batch of 50)."""
    from genEval import evaluate
    from genEval.search.perturb import SearchConfig
    from tests.support.toys import AcceptAllOracle, LinearClassifier, SigmoidGenerator, toy_data

    evaluate(
        LinearClassifier(seed=0),
        toy_data(n),
        SigmoidGenerator(),
        AcceptAllOracle(),
        SearchConfig(budget=1, step_size=0.1),
        seed=0,
        execution=Execution(batch_size=50),
        output=RunOutput(tmp_path, save_images=True, progress=False),
        scoring=Scoring(n_boot=10),
    )
    return tmp_path


def test_iter_tensor_rows_reads_rows_in_any_order_keeping_few_parts_open(tmp_path, monkeypatch):
    from genEval.runs import parts

    run = _parts_run(tmp_path / "run")
    everything = RunDir(run).tensors("images")
    row_of = {sid: i for i, sid in enumerate(everything["source_ids"])}
    records = RunDir(run).samples
    assert len({r.part for r in records}) == 3
    opened = []
    real_open = parts.safe_open
    monkeypatch.setattr(parts, "safe_open", lambda path, **kw: opened.append(Path(path).name) or real_open(path, **kw))
    backwards = records[::-1]
    got = list(parts.iter_tensor_rows(run, "images", backwards))
    assert [r.source_id for r, _ in got] == [r.source_id for r in backwards]
    for r, row in got:
        i = row_of[r.source_id]
        assert torch.equal(row["perturbed"], everything["perturbed"][i])
        assert torch.equal(row["original"], everything["original"][i])
    assert sorted(opened) == sorted(set(opened)) and len(opened) == 3  # grouped parts: each opened once
    opened.clear()
    by_part = {p: [r for r in records if r.part == p] for p in range(3)}
    alternating = [rs[k] for k in range(20) for rs in by_part.values()]  # part 0, 1, 2, 0, 1, 2, ...
    assert len(list(parts.iter_tensor_rows(run, "images", alternating, keep_open=3))) == 60
    assert len(opened) == 3  # three may stay open: no part is read twice
    opened.clear()
    list(parts.iter_tensor_rows(run, "images", alternating, keep_open=2))
    assert len(opened) == 60  # two may stay open: the least recent is closed and reopened when needed
    stranger = [replace(records[0], source_id="not-in-the-run")]
    with pytest.raises(ValueError, match=r"disagree \('not-in-the-run' is not in that part\)"):
        list(parts.iter_tensor_rows(run, "images", stranger))
    with pytest.raises(FileNotFoundError, match=r"no images part for sample"):
        list(parts.iter_tensor_rows(run, "images", [replace(records[0], part=7)]))
