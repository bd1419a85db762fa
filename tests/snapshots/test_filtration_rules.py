"""ImageNet-A's filtration exactly (issue 44, Hendrycks et al. 2021 Sec. 3): removed when ANY surrogate gives the true
class more than 15% (a max, not the mean rule's mean), the 10-crop check, the caps on by default under
``rule=imagenet_a``; and the 200-class protocol (``protocol=imagenet_a_200``) with the wnids timm ships."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from genEval.classifiers.subset import SubsetClassifier, imagenet_subset, logit_protocol
from genEval.commands import build
from genEval.commands.snapshot import build_classifiers, run_filter
from genEval.data.imagenet import imagenet_wnids
from genEval.snapshots.filtration import Candidate, FilterRule, filter_snapshots, select
from genEval.snapshots.manifest import SnapshotError
from genEval.snapshots.reader import load_snapshot
from tests.support.snapshots import compose_config


class SizeClassifier(torch.nn.Module):
    """Class 0 on images of ``full`` px, class 1 on any other size (a crop), recording the sizes it saw."""

    def __init__(self, full: int = 16):
        super().__init__()
        self.num_classes, self.name, self.full, self.seen = 3, "size", full, []

    def forward(self, x):
        self.seen.append((len(x), x.shape[-1]))
        out = torch.zeros(len(x), 3)
        out[:, 0 if x.shape[-1] == self.full else 1] = 5.0
        return out


def cand(label: int, preds: dict, mean: float, top: float, crop: bool | None = None) -> Candidate:
    return Candidate(0, 0, label, preds, mean, top, crop)


def test_imagenet_a_rule_takes_the_max_over_surrogates_and_the_mean_rule_the_mean():
    # surrogate a gives the true class 25%, b 2%: mean 13.5% < 15% keeps it under rule=mean, max 25% > 15% removes it
    c = cand(2, {"a": 0, "b": 1}, mean=0.135, top=0.25)
    edge = cand(2, {"a": 0, "b": 1}, mean=0.15, top=0.15)  # exactly 15%: "more than 15%" removes, 15% stays
    mean = FilterRule.make(2, None, 0.15, None, "mean")
    ima = FilterRule.make(2, None, None, None, "imagenet_a")
    assert select([c, edge], mean).kept == [c]  # the mean rule keeps mean < 0.15 (strictly)
    assert select([c, edge], ima).kept == [edge]
    assert ima.to_dict()["true_conf"].startswith("max") and mean.to_dict()["true_conf"].startswith("mean")


def test_imagenet_a_caps_are_on_by_default_and_can_be_set():
    r = FilterRule.make(2, None, None, None, "imagenet_a")
    assert (r.min_fooled, r.max_true_conf, r.max_per_pair, r.ten_crop) == (2, 0.15, 15, True)
    m = FilterRule.make(2, None, None, None)  # the mean rule, as before: no caps, no crops
    assert (m.rule, m.max_true_conf, m.max_per_pair, m.ten_crop) == ("mean", None, None, False)
    assert FilterRule.make(3, 2, 0.3, 4, "imagenet_a", ten_crop=False).to_dict()["ten_crop"] is False
    with pytest.raises(SnapshotError, match=r"rule must be one of mean, imagenet_a, got 'imagenet'"):
        FilterRule.make(2, None, None, None, "imagenet")
    # the cap keeps the 15 least confident (by the max) per (true, predicted) pair
    many = [cand(0, {"a": 1}, mean=0.0, top=0.001 * (20 - i)) for i in range(20)]
    kept = select(many, FilterRule.make(1, None, None, None, "imagenet_a")).kept
    assert kept == many[5:]


def test_ten_crop_check_removes_images_any_crop_of_which_is_right(snap_if, run_data, tmp_path):
    # SizeClassifier: class 0 on the whole 16-px image, class 1 on every crop (14 px = 0.875 x 16). So the whole image
    # fools it for labels 1 and 2, and a crop is right exactly for label 1: the 10-crop check leaves label 2 only
    labels = run_data["labels"].tolist()
    surrogate = SizeClassifier()
    kw = dict(max_true_conf=1.0, max_per_pair=100, device="cpu", rule="imagenet_a")
    out = filter_snapshots(snap_if, {"size": surrogate}, tmp_path / "crops", **kw)
    m = load_snapshot(out).manifest
    assert m.source_ids == [sid for sid, y in zip(run_data["ids"], labels) if y == 2]
    assert m.counts["fooled_enough"] == sum(y != 0 for y in labels) and m.counts["no_crop_right"] == m.samples
    assert m.filter["ten_crop"] is True and m.filter["rule"] == "imagenet_a"
    crops = [(n, side) for n, side in surrogate.seen if side != 16]
    assert {side for _, side in crops} == {14} and sum(n for n, _ in crops) == 10 * len(labels)
    off = filter_snapshots(snap_if, {"size": SizeClassifier()}, tmp_path / "nocrop", ten_crop=False, **kw)
    assert load_snapshot(off).manifest.source_ids == [sid for sid, y in zip(run_data["ids"], labels) if y != 0]


def test_cli_filter_rule_imagenet_a(snap_if, tmp_path, capsys):
    cfg = compose_config(
        "filter", [f"snapshots=[{snap_if}]", f"out={tmp_path / 'hard'}", "device=cpu", "rule=imagenet_a",
                   "max_true_conf=1.0"],
    )  # fmt: skip
    cfg.surrogates = OmegaConf.create({"size": {"_target_": "tests.snapshots.test_filtration_rules.SizeClassifier"}})
    run_filter(cfg)
    out = capsys.readouterr().out
    assert "(rule=imagenet_a)" in out and "with no crop right (10-crop)" in out and "max over surrogates" in out


# ------------------------------------------------------------------------------------------ the 200-class protocol
class Thousand(torch.nn.Module):
    """A 1000-class classifier whose logit k is k (so every kept logit is its 1k index)."""

    num_classes = 1000

    def forward(self, x):
        return torch.arange(1000.0).expand(len(x), 1000)


def test_imagenet_a_200_protocol_keeps_the_200_logits_timm_lists():
    wnids, indices = imagenet_subset("imagenet_a")
    assert len(wnids) == len(set(wnids)) == 200 and wnids[:2] == ("n01498041", "n01531178")  # stingray, goldfinch
    assert all(imagenet_wnids()[i] == w for w, i in zip(wnids, indices))  # each index is the wnid's 1k position
    assert "n01443537" not in wnids  # goldfish: ImageNet-R's list starts there, not ImageNet-A's (digest S2 3.4)
    protocol = logit_protocol("imagenet_a", name="imagenet_a_200")
    wrapped = protocol.wrap(Thousand())
    out = wrapped(torch.zeros(2, 3, 8, 8))
    assert out.shape == (2, 200) and out[0].tolist() == [float(i) for i in indices]
    assert wrapped.class_names == list(wnids) and wrapped.num_classes == 200
    with pytest.raises(ValueError, match=r"restricts a 1000-class ImageNet classifier's logits, but .* num_classes=3"):
        protocol.wrap(SizeClassifier())
    with pytest.raises(ValueError, match=r"unknown ImageNet subset 'imagenet_o'"):
        imagenet_subset("imagenet_o")
    assert isinstance(wrapped, SubsetClassifier)


def test_protocol_preset_wraps_every_surrogate():
    cfg = compose_config("filter", ["protocol=imagenet_a_200"])
    assert build(cfg.protocol, "protocol").name == "imagenet_a_200"
    cfg.surrogates = OmegaConf.create({"big": {"_target_": "tests.snapshots.test_filtration_rules.Thousand"}})
    got = build_classifiers(cfg, "surrogates")
    assert got["big"].num_classes == 200 and got["big"].name.endswith(">imagenet_a_200")
