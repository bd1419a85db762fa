"""ImageNet as the paper means it (issue 10 §1): wnid folders -> 1k index and name, open_clip's curated names,
the 9-class ImageNet of Santurkar et al. 2019 with pooled 1k logits, and the documented command end to end."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
from PIL import Image
from torch import nn

from genEval.classifiers.superclass import SuperclassClassifier, superclass_classifier
from genEval.data.folders import ImageNetData
from genEval.data.imagenet import (
    RESTRICTED_IMAGENET9,
    disambiguate,
    imagenet_class_names,
    imagenet_wnids,
    superclass_members,
    superclass_table,
    wnid_index,
)
from tests.support.assets import asset
from tests.support.cli import geneval

TINY_CLIP = {
    "model_cfg": {
        "embed_dim": 32,
        "vision_cfg": {"image_size": 32, "layers": 1, "width": 64, "patch_size": 16},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
    }
}


# ------------------------------------------------------------------------------------------------- metadata
def test_imagenet_metadata_known_answers():
    wnids = imagenet_wnids()
    assert len(wnids) == 1000 and wnids[0] == "n01440764" and wnids[999] == "n15075141"
    assert wnid_index("n02085620") == 151 and wnid_index("n02123045") == 281  # Chihuahua, tabby
    openai, lemma = imagenet_class_names("openai"), imagenet_class_names("lemma")
    assert openai[:3] == ["tench", "goldfish", "great white shark"] and lemma[0] == "tench"
    assert imagenet_class_names("wnid") == list(wnids)
    for names in (openai, lemma):
        assert len(set(names)) == 1000  # every class its own name
    # open_clip names 657/744 "missile" and 836/837 "sunglasses": each class gets its own WordNet lemma
    assert [openai[i] for i in (657, 744, 836, 837)] == ["missile", "projectile", "sunglass", "sunglasses"]
    assert [openai[i] for i in (134, 517)] == ["crane bird", "construction crane"]
    # WordNet's first lemmas share "crane" (no other lemma) and "maillot" (639 also has "tank suit")
    assert [lemma[i] for i in (134, 517, 638, 639)] == ["crane", "crane (n03126707)", "maillot", "tank suit"]
    with pytest.raises(ValueError, match=r"unknown ImageNet class-name source 'clip'; choose one of openai"):
        imagenet_class_names("clip")
    with pytest.raises(ValueError, match=r"'n99999999' is not an ImageNet-1k class \(it is not one of the 1,000"):
        wnid_index("n99999999")
    with pytest.raises(ValueError, match=r"folder 'cats' .*named by WordNet id, e.g. n01440764"):
        wnid_index("cats")


def test_disambiguate_keeps_unique_names_and_uses_free_alternatives():
    names = ["a", "x", "b", "x", "x"]
    alts = [["a"], ["x", "y"], ["b"], ["x", "a", "z"], ["x"]]
    assert disambiguate(names, alts, ["t0", "t1", "t2", "t3", "t4"]) == ["a", "x", "b", "z", "x (t4)"]


def test_restricted_imagenet9_ranges_and_checks():
    # RESTRICTED_IMAGNET_RANGES of MadryLab/robustness (robustness/tools/constants.py), paper Table 13 order
    assert {k: list(v) for k, v in RESTRICTED_IMAGENET9.items()} == {
        "dog": [(151, 268)],
        "cat": [(281, 285)],
        "frog": [(30, 32)],
        "turtle": [(33, 37)],
        "bird": [(80, 100)],
        "primate": [(365, 382)],
        "fish": [(389, 397)],
        "crab": [(118, 121)],
        "insect": [(300, 319)],
    }
    members = superclass_members(superclass_table("restricted_imagenet9"))
    assert [len(m) for m in members] == [118, 5, 3, 5, 21, 18, 9, 4, 20]  # inclusive ranges
    assert superclass_table({"a": [0, 2], "b": [[5, 5], [7, 9]]}) == {"a": ((0, 2),), "b": ((5, 5), (7, 9))}
    with pytest.raises(ValueError, match=r"super-classes 'a' and 'b' both claim 1k class 2"):
        superclass_table({"a": [0, 2], "b": [2, 3]})
    with pytest.raises(ValueError, match=r"range \[990, 1000\] must be \[first, last\] with 0 <= first"):
        superclass_table({"a": [990, 1000]})
    with pytest.raises(ValueError, match=r"unknown super-class set 'imagenet10'"):
        superclass_table("imagenet10")


# -------------------------------------------------------------------------------------------- data reader
def _wnid_folder(root: Path, wnids: dict[str, int], size: tuple[int, int] = (40, 30)) -> Path:
    for k, (wnid, n) in enumerate(wnids.items()):
        (root / wnid).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            Image.new("RGB", (size[0] + 4 * i, size[1]), (30 * k, 60, 9 * i)).save(root / wnid / f"img{i}.JPEG")
    return root


def test_any_subset_of_wnid_folders_gets_1k_indices_and_names(tmp_path, caplog):
    root = _wnid_folder(tmp_path / "val", {"n01440764": 2, "n02085620": 1, "n15075141": 1})
    caplog.set_level("INFO", logger="genEval.data")
    ds = ImageNetData(root, image_size=32)  # photos of different sizes: resized by the preset's image_size
    assert len(ds.class_names) == 1000 and ds.class_names[0] == "tench" and ds.name == "imagenet:val"
    assert ds.labels == [0, 0, 151, 999]
    assert [ds[i][2] for i in range(4)] == [
        "n01440764/img0.JPEG",
        "n01440764/img1.JPEG",
        "n02085620/img0.JPEG",
        "n15075141/img0.JPEG",
    ]
    assert ds.folder_classes == {
        "n01440764": (0, "tench"),
        "n02085620": (151, "Chihuahua"),
        "n15075141": (999, "toilet paper"),
    }
    assert "n01440764 -> 0 'tench'" in caplog.text  # the mapping is in the log
    assert ImageNetData(root, class_names="lemma", image_size=32).class_names[151] == "Chihuahua"
    assert ImageNetData(root, class_names="wnid", image_size=32).class_names[0] == "n01440764"
    with pytest.raises(ValueError, match=r"'n01440764/img0.JPEG' is 40x30 px but 'n01440764/img1.JPEG' is 44x30"):
        ImageNetData(root, image_size=None)
    (root / "not_a_wnid").mkdir()
    with pytest.raises(ValueError, match=r"folder 'not_a_wnid' is not an ImageNet-1k class.*data=imagefolder"):
        ImageNetData(root)


def test_imagenet9_labels_by_superclass_and_leaves_other_folders_out(tmp_path):
    root = _wnid_folder(tmp_path / "val", {"n01440764": 1, "n02085620": 2, "n02123045": 1, "n02259212": 1})
    ds = ImageNetData(
        root, superclasses="restricted_imagenet9", class_names=None, image_size=16, limit=3, subset="first"
    )
    assert ds.class_names == ["dog", "cat", "frog", "turtle", "bird", "primate", "fish", "crab", "insect"]
    assert ds.folder_classes == {"n02085620": (0, "dog"), "n02123045": (1, "cat"), "n02259212": (8, "insect")}
    assert ds.labels == [0, 1, 8] and ds.name == "imagenet9:val"  # the tench folder is not in any super-class
    with pytest.raises(ValueError, match=r"none of the 1 wnid folders .* belongs to a super-class"):
        ImageNetData(_wnid_folder(tmp_path / "fish_only", {"n01440764": 1}), superclasses="restricted_imagenet9")


def test_real_imagenet_samples_keep_their_1k_labels(tmp_path):
    """The foolbox ImageNet samples carry their 1k label in the file name; in wnid folders they get it back."""
    files = sorted(asset("samples/foolbox").glob("imagenet_*.jpg"))
    wnids = imagenet_wnids()
    for f in files:
        label = int(f.stem.split("_")[-1])
        (tmp_path / wnids[label]).mkdir(exist_ok=True)
        shutil.copy(f, tmp_path / wnids[label] / f.name)
    ds = ImageNetData(tmp_path, image_size=64)
    assert sorted(ds.labels) == sorted(int(f.stem.split("_")[-1]) for f in files)
    assert all(int(ds.source_id(i).rsplit("_", 1)[-1].split(".")[0]) == y for i, y in enumerate(ds.labels))
    nine = ImageNetData(tmp_path, superclasses="restricted_imagenet9", class_names=None, image_size=64)
    # 243 Bullmastiff, 251 Dalmatian -> dog; 99 goose -> bird; 305 dung beetle, 317 leafhopper -> insect
    assert Counter(nine.class_names[y] for y in nine.labels) == {"dog": 2, "bird": 1, "insect": 2}


# -------------------------------------------------------------------------------------- 9-class classifier
class FixedLogits(nn.Module):
    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("table", logits)
        self.num_classes = logits.shape[1]
        self.name = "fixed"

    def forward(self, images):
        return self.table[: images.shape[0]]


def test_superclass_classifier_pools_the_1k_logits():
    logits = torch.randn(3, 1000, generator=torch.Generator().manual_seed(0))
    clf = superclass_classifier(FixedLogits(logits), "restricted_imagenet9")
    x = torch.rand(3, 3, 8, 8)
    pooled = clf(x)
    assert pooled.shape == (3, 9) and clf.num_classes == 9 and clf.class_names[0] == "dog"
    assert clf.name == "fixed>9-superclass"
    torch.testing.assert_close(pooled[:, 0], logits[:, 151:269].logsumexp(1))
    torch.testing.assert_close(pooled[:, 8], logits[:, 300:320].logsumexp(1))
    # softmax over the pooled logits = each super-class's share of the 1k probability mass
    p = logits.softmax(1)
    mass = torch.stack([p[:, m].sum(1) for m in superclass_members(RESTRICTED_IMAGENET9)], 1)
    torch.testing.assert_close(pooled.softmax(1), mass / mass.sum(1, keepdim=True))
    torch.testing.assert_close(
        SuperclassClassifier(FixedLogits(logits), {"a": [5, 9]}, pool="max")(x)[:, 0], logits[:, 5:10].amax(1)
    )
    torch.testing.assert_close(
        SuperclassClassifier(FixedLogits(logits), {"a": [5, 9]}, pool="mean")(x)[:, 0], logits[:, 5:10].mean(1)
    )
    with pytest.raises(ValueError, match=r"must be a 1000-class ImageNet classifier .* got num_classes=10"):
        superclass_classifier(FixedLogits(torch.zeros(1, 10)), "restricted_imagenet9")
    with pytest.raises(ValueError, match=r"unknown pool 'sum'"):
        superclass_classifier(FixedLogits(logits), "restricted_imagenet9", pool="sum")
    with pytest.raises(ValueError, match=r"classifier.superclasses is not set"):
        superclass_classifier(FixedLogits(logits), None)


def test_imagenet9_presets_share_the_superclasses():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from genEval.commands import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["data=imagenet9", "data.root=/x"])
        custom = compose("config", overrides=["data=imagenet9", "data.root=/x", "+data.superclasses={a: [0, 9]}"])
        explicit = compose("config", overrides=["data=imagenet9", "data.root=/x", "classifier=timm"])
    assert (
        cfg.classifier._target_.endswith("superclass_classifier")
        and cfg.classifier.superclasses == "restricted_imagenet9"
        and cfg.oracle.templates == "openai"
    )
    assert OmegaConf.to_container(custom.classifier.superclasses) == {"a": [0, 9]}  # follows the data
    assert explicit.classifier._target_.endswith("timm_classifier")  # an explicit classifier=... wins


# -------------------------------------------------------------------------------------- the command, end to end
def _imagenet_folder(root: Path) -> Path:
    """A tench folder (made-up image) plus the foolbox ImageNet photos in their wnid folders."""
    _wnid_folder(root, {"n01440764": 1}, size=(50, 40))
    wnids = imagenet_wnids()
    for f in sorted(asset("samples/foolbox").glob("imagenet_0[0-2]_*.jpg")):
        (root / wnids[int(f.stem.split("_")[-1])]).mkdir(exist_ok=True)
        shutil.copy(f, root / wnids[int(f.stem.split("_")[-1])] / f.name)
    return root


def _check_imagenet_run(run: Path, r) -> dict:
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((run / "results.json").read_text())
    names = res["class_names"]
    assert len(names) == 1000 and names[0] == "tench" and names[243] == "Bullmastiff"
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert {s["source_id"].split("/")[0]: names[s["label"]] for s in samples} == {
        "n01440764": "tench",
        "n02108422": "Bullmastiff",
        "n03376595": "folding chair",
        "n02815834": "beaker",
    }
    assert res["config"]["oracle"]["reference"] == "label"
    return res


def test_imagenet_command_end_to_end(tmp_path):
    """`geneval data=imagenet data.root=<wnid folders> classifier=timm classifier.name=resnet18
    classifier.pretrained=false oracle=clip oracle.pretrained=null`, small (a tiny CLIP text tower keeps the
    1000 x 4 prompts quick; the slow test below runs the configured ViT-B-16)."""
    root = _imagenet_folder(tmp_path / "val")
    asset("weights/taef2")
    clip_dir = tmp_path / "tiny_clip"
    clip_dir.mkdir()
    (clip_dir / "open_clip_config.json").write_text(json.dumps(TINY_CLIP))
    run = tmp_path / "run"
    r = geneval(
        "data=imagenet",
        f"data.root={root}",
        "classifier=timm",
        "classifier.name=resnet18",
        "classifier.pretrained=false",
        "oracle=clip",
        "oracle.pretrained=null",
        f"oracle.model_name=local-dir:{clip_dir}",
        "data.image_size=32",
        "data.limit=4",
        "search.budget=1",
        "seed=0",
        "batch_size=4",
        "progress=false",
        f"hydra.run.dir={run}",
    )
    _check_imagenet_run(run, r)
    log = r.stderr + "".join(p.read_text() for p in run.glob("*.log"))
    assert "n01440764 -> 0 'tench'" in log  # the wnid -> class mapping used
    assert "1000 classes x 4 templates = 4000 prompts" in log
    assert "prompts of 'tench': ['an image of tench', 'a photo of a tench.'" in log


@pytest.mark.slow
def test_imagenet_command_as_documented(tmp_path):
    """The documented command with the configured CLIP (ViT-B-16, random weights): ~15 min on 2 CPU cores."""
    root = _imagenet_folder(tmp_path / "val")
    asset("weights/taef2")
    run = tmp_path / "run"
    r = geneval(
        "data=imagenet",
        f"data.root={root}",
        "classifier=timm",
        "classifier.name=resnet18",
        "classifier.pretrained=false",
        "oracle=clip",
        "oracle.pretrained=null",
        "data.image_size=32",
        "data.limit=4",
        "search.budget=1",
        "progress=false",
        f"hydra.run.dir={run}",
        timeout=3600,
    )
    _check_imagenet_run(run, r)
