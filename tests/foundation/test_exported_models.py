"""torch.export programs (``torch.export.save``, ``.pt2``) are accepted wherever TorchScript is:
``classifier=torchscript`` (told apart by content) and service uploads; pickles stay refused, including pickles
hidden inside a .pt2 archive."""

from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

from genEval.checkpoints import TORCH_EXPORT, TORCH_SAVE, TORCHSCRIPT, check_exported_archive, model_archive_kind
from genEval.classifiers import IMAGENET_MEAN, IMAGENET_STD, ImageClassifier, torchscript_classifier
from genEval.service.models import ModelRefused, UploadRefused, classifier_config, sniff_upload
from tests.support.assets import ROOT


def _net(channels: int = 3, classes: int = 6) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(channels, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(16, classes),
    ).eval()


def export(path: Path, net: nn.Module, example: torch.Tensor, dynamic_batch: bool = True) -> Path:
    shapes = ({0: torch.export.Dim("batch")},) if dynamic_batch else None
    torch.export.save(torch.export.export(net, (example,), dynamic_shapes=shapes), path)
    return path


@pytest.fixture(scope="module")
def pt2(tmp_path_factory) -> Path:
    return export(tmp_path_factory.mktemp("export") / "net.pt2", _net(), torch.rand(2, 3, 12, 12))


def test_an_exported_program_is_a_classifier_with_the_originals_logits_and_gradients(pt2):
    clf = torchscript_classifier(pt2, num_classes=6)
    assert clf.name == "export:net.pt2" and clf.input_size == (12, 12)  # the size it was exported with
    reference = ImageClassifier(_net(), 6, IMAGENET_MEAN, IMAGENET_STD, (12, 12)).eval()
    x = torch.rand(5, 3, 20, 20, requires_grad=True)
    torch.testing.assert_close(clf(x), reference(x))
    clf(x).logsumexp(1).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0  # the latent search needs input gradients
    assert not clf.training and not any(p.requires_grad for p in clf.parameters())


def test_the_kind_comes_from_the_content_not_the_name(pt2, tmp_path):
    renamed = tmp_path / "model.pt"
    renamed.write_bytes(pt2.read_bytes())
    assert model_archive_kind(renamed) == TORCH_EXPORT
    assert torchscript_classifier(renamed, num_classes=6).name == "export:model.pt"
    torch.jit.save(torch.jit.script(_net()), tmp_path / "s.pt2")
    assert model_archive_kind(tmp_path / "s.pt2") == TORCHSCRIPT
    assert torchscript_classifier(tmp_path / "s.pt2", num_classes=6).name == "torchscript:s.pt2"


def test_a_fixed_batch_program_runs_any_batch_in_chunks(tmp_path, caplog):
    path = export(tmp_path / "fixed.pt2", _net(), torch.rand(2, 3, 12, 12), dynamic_batch=False)
    with caplog.at_level(logging.WARNING):
        clf = torchscript_classifier(path, num_classes=6)
    assert "fixed batch size of 2" in caplog.text
    reference = ImageClassifier(_net(), 6, IMAGENET_MEAN, IMAGENET_STD, (12, 12)).eval()
    x = torch.rand(5, 3, 12, 12)
    torch.testing.assert_close(clf(x), reference(x))


def test_an_input_size_other_than_the_exported_one_is_refused_naming_it(pt2):
    with pytest.raises(ValueError, match=r"input_size must be the size the program was exported with \(12x12\)"):
        torchscript_classifier(pt2, num_classes=6, input_size=32)


def _rewrite(src: Path, dst: Path, change) -> Path:
    """A copy of the zip ``src`` with ``change(inner name, bytes) -> bytes`` applied to every entry."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            inner = info.filename.split("/", 1)[-1]
            zout.writestr(info.filename, change(inner, zin.read(info.filename)))
    return dst


class Payload:
    """Creates a directory when unpickled: stands in for code a hostile file would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


def test_pickles_inside_an_export_archive_are_refused_before_anything_is_unpickled(pt2, tmp_path):
    marker = tmp_path / "code-ran"

    def pickled_weights(inner, data):
        if inner.endswith("weights_config.json"):
            config = json.loads(data)
            first = next(iter(config["config"]))
            config["config"][first]["use_pickle"] = True
            return json.dumps(config).encode()
        return data

    def hostile_sample_inputs(inner, data):
        return pickle.dumps(Payload(marker)) if inner.startswith("data/sample_inputs/") else data

    for name, change, what in (
        ("weights.pt2", pickled_weights, "pickled weights"),
        ("inputs.pt2", hostile_sample_inputs, "sample inputs that only a full unpickle reads"),
    ):
        bad = _rewrite(pt2, tmp_path / name, change)
        with pytest.raises(ValueError, match=what):
            check_exported_archive(bad)
        with pytest.raises(ValueError, match=what):
            torchscript_classifier(bad, num_classes=6)
        with pytest.raises(UploadRefused, match=what):
            sniff_upload(bad)
    assert not marker.exists()


def test_plain_torch_save_pickles_stay_refused(tmp_path):
    torch.save(_net(), tmp_path / "whole.pt")
    torch.save(_net().state_dict(), tmp_path / "sd.pt2")
    for path in (tmp_path / "whole.pt", tmp_path / "sd.pt2"):
        assert model_archive_kind(path) == TORCH_SAVE
        with pytest.raises(ValueError, match=r"torch.save archive \(a pickle\).*never loaded"):
            torchscript_classifier(path, num_classes=6)
        with pytest.raises(UploadRefused, match="torch.save archive"):
            sniff_upload(path)


def test_the_service_takes_an_exported_program_as_a_torchscript_kind_upload(pt2):
    assert sniff_upload(pt2) == "torch.export"
    node = classifier_config({"kind": "torchscript", "num_classes": 6}, {}, "torch.export", "uploads/abc")
    assert node["_target_"] == "genEval.classifiers.torchscript_classifier" and node["path"] == "uploads/abc"
    with pytest.raises(ModelRefused, match="use kind torchscript for it"):
        classifier_config({"kind": "timm", "name": "resnet18"}, {}, "torch.export", "uploads/abc")


def test_interface_line_classifier_torchscript_with_a_pt2_file(tmp_path):
    path = export(tmp_path / "digits.pt2", _net(channels=1, classes=10), torch.rand(2, 1, 16, 16))
    run = tmp_path / "run"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "genEval.cli",
            "classifier=torchscript",
            f"classifier.path={path}",
            "classifier.num_classes=10",
            "generator=identity",
            "oracle=classifier",
            "oracle.classifier=${classifier}",
            "data.limit=4",
            "search.budget=1",
            "seed=0",
            f"hydra.run.dir={run}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((run / "results.json").read_text())
    assert res["components"]["classifier"] == "export:digits.pt2"
    assert res["scores"]["n"] == 4
