"""Classifiers (genEval.classifiers): the [0, 1] contract, factories, checkpoints, known answers."""

from __future__ import annotations

import argparse
import logging
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from omegaconf import OmegaConf
from torch import nn

from genEval.classifiers.architectures import CifarResNet
from genEval.classifiers.base import IMAGENET_MEAN, IMAGENET_STD, ImageClassifier
from genEval.classifiers.digits import digits_classifier
from genEval.classifiers.loaders import (
    _torchvision_weights,
    cifar_resnet,
    module_classifier,
    timm_classifier,
    torchscript_classifier,
    torchvision_classifier,
)
from genEval.data.standard import DigitsData
from genEval.interfaces import Classifier, resize_images
from tests.support.assets import ASSETS, ROOT, asset

CONF = ROOT / "conf" / "classifier"
RESNET_WEIGHTS = {20: "resnet20-12fca82f.th", 32: "resnet32-d509ac18.th", 56: "resnet56-4bfd9763.th"}


def _manual(model: nn.Module, x: torch.Tensor, mean, std, size) -> torch.Tensor:
    """What a classifier must compute: resize, normalise, model."""
    x = resize_images(x, size)
    m = torch.tensor(mean).view(1, -1, 1, 1)
    s = torch.tensor(std).view(1, -1, 1, 1)
    return model((x - m) / s)


def _check_frozen(clf: nn.Module, x: torch.Tensor, num_classes: int) -> torch.Tensor:
    assert isinstance(clf, Classifier) and clf.num_classes == num_classes
    assert not clf.training and all(not p.requires_grad for p in clf.parameters())
    x = x.clone().requires_grad_(True)
    logits = clf(x)
    assert logits.shape == (x.shape[0], num_classes)
    logits[:, 0].sum().backward()
    assert x.grad is not None and float(x.grad.abs().sum()) > 0  # gradients reach the input
    return logits.detach()


# ----------------------------------------------------------------------------------- ImageClassifier
def test_image_classifier_resizes_normalises_and_matches_channels():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 4))
    mean, std = (0.1, 0.2, 0.3), (0.5, 0.25, 2.0)
    clf = ImageClassifier(net, 4, mean, std, input_size=8, name="toy")
    x = torch.rand(2, 3, 13, 11)
    assert torch.allclose(clf(x), _manual(net, x, mean, std, 8), atol=1e-6)
    gray = torch.rand(2, 1, 8, 8)
    assert torch.allclose(clf(gray), clf(gray.expand(-1, 3, -1, -1)), atol=1e-6)  # 1 -> 3 channels
    clf.train()
    assert not clf.training and not net.training  # a tested classifier stays in inference mode
    assert "name='toy', num_classes=4, input_size=8, mean=(0.1, 0.2, 0.3)" in repr(clf)
    one = ImageClassifier(nn.Sequential(nn.Flatten(), nn.Linear(16, 2)), 2, (0.0,), (1.0,), 4)
    rgb = torch.rand(1, 3, 4, 4)
    luma = (rgb * torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)).sum(1, keepdim=True)
    assert torch.allclose(one(rgb), one(luma), atol=1e-6)  # 3 -> 1 channel (luma)


def test_image_classifier_errors():
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 5))
    with pytest.raises(ValueError, match=r"mean and std must both have 1 or 3 entries"):
        ImageClassifier(net, 5, (0.5, 0.5), (1.0, 1.0), None)
    with pytest.raises(ValueError, match=r"std must be positive, got \[1.0, 0.0, 1.0\]"):
        ImageClassifier(net, 5, (0.0,) * 3, (1.0, 0.0, 1.0), None)
    clf = ImageClassifier(net, 7, (0.0,) * 3, (1.0,) * 3, 2, name="wrong")
    with pytest.raises(ValueError, match=r"wrong returned logits shaped \(1, 5\) but num_classes is 7"):
        clf(torch.rand(1, 3, 2, 2))
    with pytest.raises(ValueError, match=r"takes 3-channel images but got 2 channels.*data.channels=3"):
        clf(torch.rand(1, 2, 2, 2))
    with pytest.raises(ValueError, match=r"expected images shaped \(B, C, H, W\), got \(3, 2, 2\)"):
        clf(torch.rand(3, 2, 2))


# -------------------------------------------------------------------------------------- CIFAR ResNet
def test_cifar_resnet_architecture_keys_and_shapes():
    net = CifarResNet(20)
    keys = [k for k in net.state_dict() if not k.endswith("num_batches_tracked")]
    assert keys[:2] == ["conv1.weight", "bn1.weight"] and keys[-2:] == ["linear.weight", "linear.bias"]
    blocks = {re.match(r"(layer\d\.\d)\.", k).group(1) for k in keys if k.startswith("layer")}
    assert blocks == {f"layer{s}.{i}" for s in (1, 2, 3) for i in range(3)}
    assert {k.split(".", 2)[2] for k in keys if k.startswith("layer1.0.")} == {
        f"{m}.{p}" for m in ("conv1", "conv2") for p in ("weight",)
    } | {f"{m}.{p}" for m in ("bn1", "bn2") for p in ("weight", "bias", "running_mean", "running_var")}
    n_params = sum(p.numel() for p in net.parameters())
    assert n_params == 269_722  # ResNet-20 has 0.27M parameters (He et al. 2016, Table 6)
    assert len(CifarResNet(56).layer2) == 9
    clf = cifar_resnet(20, checkpoint=None)
    _check_frozen(clf, torch.rand(2, 3, 48, 40), 10)
    with pytest.raises(ValueError, match=r"depth must be 6n\+2 .* got 21"):
        CifarResNet(21)


def test_cifar_resnet_checkpoint_round_trip_and_errors(tmp_path):
    torch.manual_seed(1)
    net = CifarResNet(8)
    with torch.no_grad():  # non-trivial BN statistics so that a mis-load would show
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    net.eval()
    sd = {f"module.{k}": v for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")}
    path = tmp_path / "r8.th"
    torch.save({"state_dict": sd, "best_prec1": 12.5}, path)  # akamaster's layout, old-BN keys
    clf = cifar_resnet(8, checkpoint=path)
    x = torch.rand(3, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(clf(x), _manual(net, x, IMAGENET_MEAN, IMAGENET_STD, 32), atol=1e-5)
    assert "cifar_resnet8:r8.th" in repr(clf)

    with pytest.raises(FileNotFoundError, match=r"CIFAR ResNet-8 checkpoint not found: '.*missing\.th'"):
        cifar_resnet(8, checkpoint=tmp_path / "missing.th")
    bad = dict(sd)
    bad["module.fc.weight"] = bad.pop("module.linear.weight")
    torch.save({"state_dict": bad}, tmp_path / "bad.th")
    with pytest.raises(ValueError, match=r"missing keys: linear\.weight; unexpected keys: fc\.weight"):
        cifar_resnet(8, checkpoint=tmp_path / "bad.th")
    with pytest.raises(ValueError, match=r"mismatches: linear\.bias: checkpoint \(10,\) vs model \(5,\)"):
        cifar_resnet(8, checkpoint=path, num_classes=5)
    with pytest.raises(ValueError, match=r"missing keys: layer1\.1\.bn1\.bias"):
        cifar_resnet(14, checkpoint=path)  # depth 14 has 2 blocks per stage
    torch.save({"state_dict": sd, "args": argparse.Namespace(lr=0.1)}, tmp_path / "pickled.th")
    with pytest.raises(ValueError, match=r"pickled Python objects .* set allow_pickle=true"):
        cifar_resnet(8, checkpoint=tmp_path / "pickled.th")
    clf2 = cifar_resnet(8, checkpoint=tmp_path / "pickled.th", allow_pickle=True)
    assert torch.equal(clf2(x), clf(x))


@pytest.mark.weights
@pytest.mark.parametrize("depth,expected", [(20, 20), (32, 19), (56, 20)])
def test_cifar_resnets_on_lossless_foolbox_pngs(depth, expected):
    from PIL import Image

    folder = asset("samples/foolbox")
    files = sorted(folder.glob("cifar10_*_*.png"))
    assert len(files) == 20
    x = (
        torch.stack(
            [torch.from_numpy(np.asarray(Image.open(f).convert("RGB")).copy()).permute(2, 0, 1) for f in files]
        ).float()
        / 255
    )
    y = torch.tensor([int(f.stem.split("_")[-1]) for f in files])
    clf = cifar_resnet(depth, checkpoint=asset(f"weights/cifar10-resnet/{RESNET_WEIGHTS[depth]}"))
    with torch.no_grad():
        assert int((clf(x).argmax(1) == y).sum()) == expected


# ---------------------------------------------------------------------------------------------- timm
def test_timm_classifier_normalises_and_loads_checkpoint(tmp_path):
    import timm

    torch.manual_seed(0)
    ref = timm.create_model("test_resnet", pretrained=False, num_classes=5).eval()
    path = tmp_path / "test_resnet.safetensors"
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))
    clf = timm_classifier("test_resnet", checkpoint=path, num_classes=5)
    cfg = timm.data.resolve_model_data_config(ref)
    x = torch.rand(2, 3, 40, 40)
    logits = _check_frozen(clf, x, 5)
    with torch.no_grad():
        assert torch.allclose(logits, _manual(ref, x, cfg["mean"], cfg["std"], cfg["input_size"][1:]), atol=1e-4)
    assert clf.input_size == tuple(cfg["input_size"][1:])
    assert timm_classifier("test_resnet", num_classes=3, input_size=32).input_size == 32
    with pytest.raises(ValueError, match=r"unknown timm model 'test_resnett'\. Close names: .*test_resnet"):
        timm_classifier("test_resnett")
    torch.save({"state_dict": {"head.weight": torch.zeros(1)}}, tmp_path / "wrong.pth")
    with pytest.raises(ValueError, match=r"unexpected keys: head\.weight"):
        timm_classifier("test_resnet", checkpoint=tmp_path / "wrong.pth", num_classes=5)


# --------------------------------------------------------------------------------------- torchvision
def test_torchvision_classifier_shapes_checkpoint_and_weights_meta(tmp_path, monkeypatch):
    import torchvision

    torch.manual_seed(0)
    ref = torchvision.models.get_model("resnet18", num_classes=3).eval()
    torch.save(ref.state_dict(), tmp_path / "r18.pth")
    clf = torchvision_classifier("resnet18", checkpoint=tmp_path / "r18.pth", num_classes=3, input_size=64)
    x = torch.rand(2, 3, 50, 50)
    logits = _check_frozen(clf, x, 3)
    with torch.no_grad():
        assert torch.allclose(logits, _manual(ref, x, IMAGENET_MEAN, IMAGENET_STD, 64), atol=1e-4)
    assert torchvision_classifier("resnet18", num_classes=3).input_size == 224  # ImageNet default
    with pytest.raises(ValueError, match=r"shape mismatches: fc\.bias: checkpoint \(3,\) vs model \(1000,\)"):
        torchvision_classifier("resnet18", checkpoint=tmp_path / "r18.pth")
    with pytest.raises(ValueError, match=r"unknown torchvision model 'resnet19'\. Close names: .*resnet18"):
        torchvision_classifier("resnet19")
    # weights -> preprocessing from the weights' transforms (download replaced: no network in tests)
    w = _torchvision_weights("efficientnet_b1", "DEFAULT")
    assert str(w) == "EfficientNet_B1_Weights.IMAGENET1K_V2"
    assert _torchvision_weights("resnet18", "ResNet18_Weights.IMAGENET1K_V1").transforms().crop_size == [224]
    with pytest.raises(ValueError, match=r"has no weights 'IMAGENET9K'; available: \['IMAGENET1K_V1'"):
        _torchvision_weights("resnet18", "IMAGENET9K")
    real = torchvision.models.get_model
    monkeypatch.setattr(torchvision.models, "get_model", lambda name, weights=None, **kw: real(name, **kw))
    clf = torchvision_classifier("efficientnet_b1", weights="DEFAULT")
    assert clf.input_size == 240 and clf.num_classes == 1000 and "IMAGENET1K_V2" in clf.name


# --------------------------------------------------------------------------------------- torchscript
def test_torchscript_classifier(tmp_path):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 6))
    net.eval()
    path = tmp_path / "net.pt"
    with warnings.catch_warnings():  # torch >= 2.9 marks jit as deprecated
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.save(torch.jit.script(net), str(path))
    mean, std = (0.4, 0.5, 0.6), (0.2, 0.3, 0.4)
    clf = torchscript_classifier(path, num_classes=6, mean=mean, std=std, input_size=12)
    x = torch.rand(3, 3, 20, 16)
    logits = _check_frozen(clf, x, 6)
    with torch.no_grad():
        assert torch.allclose(logits, _manual(net, x, mean, std, 12), atol=1e-5)
    with pytest.raises(FileNotFoundError, match=r"model file \(torch.export or TorchScript\) not found: '.*nope\.pt'"):
        torchscript_classifier(tmp_path / "nope.pt", num_classes=6)
    torch.save(net.state_dict(), tmp_path / "sd.pt")
    with pytest.raises(ValueError, match=r"is a torch.save archive \(a pickle\).*classifier=module"):
        torchscript_classifier(tmp_path / "sd.pt", num_classes=6)


def _script(net: nn.Module, path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.save(torch.jit.script(net.eval()), str(path))
    return path


def test_torchscript_channel_count_is_read_from_the_model(tmp_path, caplog):
    """A 1-channel scripted model without mean/std (issue 14): channels from its first conv, or by a probe."""
    torch.manual_seed(0)
    conv = nn.Sequential(nn.Conv2d(1, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))
    clf = torchscript_classifier(_script(conv, tmp_path / "grey.pt"), num_classes=10)
    assert clf.in_channels == 1 and clf.mean.flatten().tolist() == [0.0] and clf.std.flatten().tolist() == [1.0]
    assert "classifier.mean=[...] classifier.std=[...]" in caplog.text
    rgb = torch.rand(2, 3, 12, 12)
    grey = (rgb * torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)).sum(1, keepdim=True)
    with torch.no_grad():
        assert torch.allclose(clf(rgb), conv(grey), atol=1e-5)  # RGB data reaches it as luma
    linear = nn.Sequential(nn.Flatten(), nn.Linear(1 * 8 * 8, 10))  # no conv weight: found by a probe
    assert torchscript_classifier(_script(linear, tmp_path / "lin.pt"), 10, input_size=8).in_channels == 1
    three = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))
    c3 = torchscript_classifier(_script(three, tmp_path / "rgb.pt"), num_classes=10)
    assert c3.in_channels == 3 and torch.allclose(c3.mean.flatten(), torch.tensor([0.485, 0.456, 0.406]))
    with pytest.raises(
        ValueError,
        match=r"mean/std have 3 entries but the TorchScript model 'grey.pt' takes "
        r"1-channel images; give 1 entries",
    ):
        torchscript_classifier(tmp_path / "grey.pt", 10, mean=[0.5] * 3, std=[0.5] * 3)
    with pytest.raises(ValueError, match=r"give both classifier.mean and classifier.std"):
        torchscript_classifier(tmp_path / "grey.pt", 10, mean=[0.5])
    odd = nn.Sequential(nn.Flatten(), nn.Linear(2 * 5 * 5, 10))  # 2 channels at 5 px: no probe fits
    with pytest.raises(ValueError, match=r"cannot tell how many channels .* Set classifier.mean and classifier.std"):
        torchscript_classifier(_script(odd, tmp_path / "odd.pt"), 10)


def test_classifiers_know_their_classes():
    from genEval.data.standard import CIFAR10_CLASSES

    assert cifar_resnet(20).class_names == CIFAR10_CLASSES
    assert cifar_resnet(20, num_classes=100).class_names is None
    assert ImageClassifier(nn.Flatten(), 3, (0.0,), (1.0,)).class_names is None
    with pytest.raises(ValueError, match=r"class_names has 2 entries but num_classes is 3"):
        ImageClassifier(nn.Flatten(), 3, (0.0,), (1.0,), class_names=["a", "b"])


# -------------------------------------------------------------------------------------------- module
def test_module_classifier_from_hydra_config(tmp_path):
    torch.manual_seed(0)
    ref = CifarResNet(8, num_classes=4).eval()
    torch.save(ref.state_dict(), tmp_path / "r8.pt")
    cfg = OmegaConf.load(CONF / "module.yaml")
    cfg.module = {"_target_": "genEval.classifiers.CifarResNet", "depth": 8, "num_classes": 4}
    cfg.num_classes = 4
    cfg.checkpoint = str(tmp_path / "r8.pt")
    cfg.mean, cfg.std, cfg.input_size = [0.5, 0.5, 0.5], [0.25, 0.25, 0.25], 32
    clf = instantiate(cfg)
    x = torch.rand(2, 3, 32, 32)
    logits = _check_frozen(clf, x, 4)
    with torch.no_grad():
        assert torch.allclose(logits, _manual(ref, x, (0.5,) * 3, (0.25,) * 3, 32), atol=1e-5)
    assert "module:CifarResNet:r8.pt" in repr(clf)
    with pytest.raises(TypeError, match=r"classifier\.module must build an nn\.Module, got dict"):
        module_classifier({"depth": 8}, num_classes=4)
    with pytest.raises(FileNotFoundError, match=r"CifarResNet checkpoint not found"):
        module_classifier(CifarResNet(8), num_classes=10, checkpoint=tmp_path / "none.pt")


# -------------------------------------------------------------------------------------------- digits
def _accuracy(clf: nn.Module) -> float:
    test = DigitsData(split="test")
    x = torch.stack([test[i][0] for i in range(len(test))])
    with torch.no_grad():
        return 100.0 * float((clf(x).argmax(1) == torch.tensor(test.labels)).float().mean())


def test_digits_classifier_cache_and_determinism(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("GENEVAL_CACHE", str(tmp_path / "a"))
    rng = torch.get_rng_state()
    with caplog.at_level(logging.INFO, logger="genEval.classifiers"):
        first = digits_classifier("mlp", seed=3, epochs=2)
    assert "trained digits classifier" in caplog.text
    assert torch.equal(torch.get_rng_state(), rng)  # the global RNG is untouched
    files = list((tmp_path / "a" / "digits_classifiers").glob("mlp-seed3-ep2-px16-*.safetensors"))
    assert len(files) == 1
    mtime = files[0].stat().st_mtime_ns
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="genEval.classifiers"):
        second = digits_classifier("mlp", seed=3, epochs=2)
    assert "loaded cached digits classifier" in caplog.text and "trained" not in caplog.text
    assert files[0].stat().st_mtime_ns == mtime
    for (k, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items(), strict=True):
        assert torch.equal(a, b), k
    monkeypatch.setenv("GENEVAL_CACHE", str(tmp_path / "b"))  # retrain from scratch: same weights
    again = digits_classifier("mlp", seed=3, epochs=2)
    pairs = zip(first.state_dict().values(), again.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    other = digits_classifier("mlp", seed=4, epochs=2)
    assert not torch.equal(first.model[1].weight, other.model[1].weight)
    with pytest.raises(ValueError, match=r"arch must be a digits classifier architecture: one of \['cnn'.*got 'vit'"):
        digits_classifier("vit")


@pytest.mark.parametrize("config", ["digits_cnn", "digits_mlp", "digits_wide_cnn"])
def test_digits_classifiers_are_accurate(config):
    clf = instantiate(OmegaConf.load(CONF / f"{config}.yaml"))
    x = torch.rand(2, 1, 16, 16)
    _check_frozen(clf, x, 10)
    assert clf(torch.rand(2, 3, 28, 28)).shape == (2, 10)  # RGB, other sizes: converted inside
    assert _accuracy(clf) >= 95.0


# ------------------------------------------------------------------------------------------- configs
def _cfg(name: str):
    return OmegaConf.create({"assets": str(ASSETS), "classifier": OmegaConf.load(CONF / f"{name}.yaml")})


def test_all_classifier_configs_exist_and_mandatory_keys():
    names = {p.stem for p in CONF.glob("*.yaml")}
    assert names >= {
        "digits_cnn",
        "digits_mlp",
        "digits_wide_cnn",
        "cifar_resnet20",
        "cifar_resnet32",
        "cifar_resnet44",
        "cifar_resnet56",
        "timm",
        "torchvision",
        "torchscript",
        "module",
    }
    for name in ("cifar_resnet44", "timm", "torchvision", "torchscript", "module"):
        with pytest.raises(Exception, match="Missing mandatory value"):
            instantiate(_cfg(name).classifier)
    cfg = _cfg("timm")
    cfg.classifier.name, cfg.classifier.pretrained, cfg.classifier.num_classes = "test_vit", False, 4
    assert instantiate(cfg.classifier)(torch.rand(1, 3, 32, 32)).shape == (1, 4)
    for depth, fname in RESNET_WEIGHTS.items():  # configs name the shared files as assets
        assert _cfg(f"cifar_resnet{depth}").classifier.checkpoint == f"asset:weights/cifar10-resnet/{fname}"


@pytest.mark.weights
@pytest.mark.parametrize("depth", [20, 32, 56])
def test_cifar_resnet_configs_load_shared_weights(depth):
    asset(f"weights/cifar10-resnet/{RESNET_WEIGHTS[depth]}")
    clf = instantiate(_cfg(f"cifar_resnet{depth}").classifier)
    assert clf.num_classes == 10 and Path(clf.name.split(":")[1]).name == RESNET_WEIGHTS[depth]
    assert F.softmax(clf(torch.rand(1, 3, 32, 32)), 1).shape == (1, 10)
