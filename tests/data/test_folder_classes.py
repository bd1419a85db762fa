"""Image folders holding some of a model's classes are mapped onto its class indices by name, and unreadable files
are skipped on request (``data.skip_unreadable``) exactly and deterministically: same scores as without the file,
with shards merged, and after a resume."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from PIL import Image

from genEval.commands import build_data
from genEval.data import CIFAR10_CLASSES, ImageFolderData
from genEval.interfaces import UnreadableSource
from genEval.runs import Shard
from genEval.runs.shards import merge_runs
from genEval.search.driver import evaluate
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from tests.support.assets import ROOT
from tests.support.toys import LinearClassifier, ModelOracle, SigmoidGenerator

CFG = SearchConfig(budget=3, step_size=0.3, start_noise=0.0)


def write_folder(root: Path, counts: dict[str, int], size: int = 2) -> Path:
    """Class folders of tiny PNGs with distinct colours."""
    for c, (cls, n) in enumerate(sorted(counts.items())):
        (root / cls).mkdir(parents=True, exist_ok=True)
        for k in range(n):
            Image.new("RGB", (size, size), (40 * c + 9 * k, 255 - 30 * k, 11 * c)).save(root / cls / f"{k:03d}.png")
    return root


# ------------------------------------------------------------------------------------- classes by name
def test_folders_are_mapped_onto_the_known_classes_by_name(tmp_path):
    root = write_folder(tmp_path / "imgs", {"ship": 2, "Dog": 1})  # a folder's case does not matter
    ds = ImageFolderData(root, known_classes=CIFAR10_CLASSES, known_from="classifier r20")
    assert ds.class_names == list(CIFAR10_CLASSES)
    labels = {ds.source_id(i): ds[i][1] for i in range(len(ds))}
    assert labels == {"ship/000.png": 8, "ship/001.png": 8, "Dog/000.png": 5}
    assert ds.folder_classes == {"Dog": (5, "dog"), "ship": (8, "ship")}
    # without known classes the generic reader numbers its folders 0..k-1: wrong indices for a 10-class model
    assert sorted({ImageFolderData(root)[i][1] for i in range(3)}) == [0, 1]


def test_folders_the_classifier_does_not_know_are_all_listed(tmp_path):
    root = write_folder(tmp_path / "imgs", {"ship": 1, "zebra": 1, "unicorn": 1})
    with pytest.raises(ValueError) as err:
        ImageFolderData(root, known_classes=CIFAR10_CLASSES, known_from="classifier r20")
    msg = str(err.value)
    assert "folder classes 'unicorn', 'zebra'" in msg and "not in the classes of classifier r20" in msg
    assert "'airplane'" in msg and "data.class_names" in msg


class Named:
    """A classifier that knows its classes (what the command layer reads)."""

    name = "toy:named"
    class_names = list(CIFAR10_CLASSES)


def test_the_command_layer_passes_the_classifiers_classes_unless_the_data_names_its_own(tmp_path):
    root = write_folder(tmp_path / "imgs", {"ship": 1, "dog": 1})
    node = {"_target_": "genEval.data.ImageFolderData", "root": str(root), "class_names": None}
    ds = build_data(OmegaConf.create({"data": node}).data, Named())
    assert [ds[i][1] for i in range(len(ds))] == [5, 8] and len(ds.class_names) == 10
    own = build_data(OmegaConf.create({"data": {**node, "class_names": ["dog", "ship"]}}).data, Named())
    assert [own[i][1] for i in range(len(own))] == [0, 1]  # data.class_names wins
    plain = build_data(OmegaConf.create({"data": node}).data, object())  # a classifier that knows no names
    assert plain.class_names == ["dog", "ship"]


def test_interface_line_a_folder_of_ship_and_dog_runs_with_a_cifar_model(tmp_path):
    from tests.support.assets import asset

    jpgs = asset("cifar10/test-jpg")
    asset("weights/cifar10-resnet")
    root = tmp_path / "two"
    for cls in ("ship", "dog"):
        (root / cls).mkdir(parents=True)
        for f in sorted((jpgs / cls).glob("*.jpg"))[:3]:
            shutil.copy(f, root / cls / f.name)
    run = tmp_path / "run"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "genEval.cli",
            "data=imagefolder",
            f"data.root={root}",
            "classifier=cifar_resnet20",
            "oracle=cifar_resnet_zoo",
            "generator=identity",
            "data.image_size=32",
            "search.budget=2",
            "seed=0",
            f"hydra.run.dir={run}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((run / "results.json").read_text())
    assert res["class_names"] == list(CIFAR10_CLASSES)
    labels = {json.loads(ln)["source_id"].split("/")[0]: json.loads(ln)["label"] for ln in open(run / "samples.jsonl")}
    assert labels == {"dog": 5, "ship": 8}
    assert "folders mapped onto the 10 classes of classifier cifar_resnet20" in r.stdout + r.stderr


# ------------------------------------------------------------------------------------ unreadable files
def roles():
    return dict(
        classifier=LinearClassifier(seed=0), generator=SigmoidGenerator(), oracle=ModelOracle(LinearClassifier(seed=1))
    )


@pytest.fixture
def scraped(tmp_path) -> tuple[Path, Path]:
    """The same 3-class folder twice: ``clean`` and ``dirty`` (plus a truncated PNG and a text file named .jpg)."""
    clean = write_folder(tmp_path / "clean", {"a": 7, "b": 6, "c": 7})
    dirty = tmp_path / "dirty"
    shutil.copytree(clean, dirty)
    good = (dirty / "b" / "002.png").read_bytes()
    (dirty / "b" / "002x.png").write_bytes(good[: len(good) // 2])  # truncated: the header reads, the pixels do not
    (dirty / "c" / "readme.jpg").write_text("not an image")
    return clean, dirty


def run(data: ImageFolderData, out: Path, **kw):
    return evaluate(data=data, search=CFG, seed=3, execution=Execution(batch_size=4), output=out, **kw, **roles())


def results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def decisions(out: Path) -> dict[str, tuple]:
    keys = ("label", "clean_pred", "validated", "accepted_steps", "first_fooled", "final_pred")
    return {r["source_id"]: tuple(r[k] for k in keys) for r in map(json.loads, open(out / "samples.jsonl"))}


def test_by_default_an_unreadable_file_stops_the_run_naming_it_and_the_switch(scraped, tmp_path):
    _, dirty = scraped
    with pytest.raises(UnreadableSource, match=r"cannot read image file '.*002x\.png'.*data\.skip_unreadable=true"):
        run(ImageFolderData(dirty, image_size=2), tmp_path / "run")
    assert not (tmp_path / "run" / "results.json").exists()


def test_skipped_files_are_listed_and_the_scores_equal_a_run_without_them(scraped, tmp_path):
    clean, dirty = scraped
    whole = run(ImageFolderData(clean, image_size=2), tmp_path / "clean")
    skipping = run(ImageFolderData(dirty, image_size=2, skip_unreadable=True), tmp_path / "dirty")
    skipped = results(tmp_path / "dirty")["skipped"]
    assert [(s["source_id"], Path(s["path"]).name) for s in skipped] == [
        ("b/002x.png", "002x.png"),
        ("c/readme.jpg", "readme.jpg"),
    ]
    assert all(s["reason"] and isinstance(s["position"], int) for s in skipped)
    assert results(tmp_path / "dirty")["scores"] == results(tmp_path / "clean")["scores"]
    assert decisions(tmp_path / "dirty") == decisions(tmp_path / "clean")
    assert any("2 unreadable source file(s) were skipped" in w for w in skipping.warnings)
    assert "skipped" not in results(tmp_path / "clean")  # a run that does not skip has no list
    assert whole.scores.n == skipping.scores.n == 20


def test_shards_of_a_skipping_run_merge_into_the_unsharded_run(scraped, tmp_path):
    _, dirty = scraped
    data = ImageFolderData(dirty, image_size=2, skip_unreadable=True)
    run(data, tmp_path / "whole")
    for i in range(3):
        run(data, tmp_path / "shards" / f"s{i}", shard=Shard(i, 3))
    merged = merge_runs([tmp_path / "shards"], tmp_path / "merged")
    assert results(tmp_path / "merged")["scores"] == results(tmp_path / "whole")["scores"]
    assert results(tmp_path / "merged")["skipped"] == results(tmp_path / "whole")["skipped"]
    assert decisions(tmp_path / "merged") == decisions(tmp_path / "whole")
    assert merged.scores.n == 20


def test_a_run_stopped_by_a_corrupt_file_resumes_with_skipping_switched_on(scraped, tmp_path):
    """The natural recovery: the run stopped at the corrupt file; rerun it with data.skip_unreadable=true on the same
    directory: the finished samples are kept and the result equals an uninterrupted skipping run."""
    _, dirty = scraped
    out = tmp_path / "run"
    with pytest.raises(UnreadableSource):
        run(ImageFolderData(dirty, image_size=2), out, config={"data": {"skip_unreadable": False}})
    kept = len((out / "samples.partial.jsonl").read_text().splitlines())
    assert 0 < kept < 20
    resumed = run(
        ImageFolderData(dirty, image_size=2, skip_unreadable=True), out, config={"data": {"skip_unreadable": True}}
    )
    assert resumed.timings["samples_computed"] == 22 - kept  # only the rest was read (the 2 skipped among them)
    fresh = tmp_path / "fresh"
    run(ImageFolderData(dirty, image_size=2, skip_unreadable=True), fresh, config={"data": {"skip_unreadable": True}})
    assert results(out)["scores"] == results(fresh)["scores"]
    assert results(out)["skipped"] == results(fresh)["skipped"]
    assert decisions(out) == decisions(fresh)
