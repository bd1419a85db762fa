"""Cheap checks first (issue 29): the tested classifier, the oracle's judges, the generator and a mask file are checked
against the data from their configs alone, before anything is built (genEval/commands/checks.py, genEval/declared.py).
Each refusal names the presets that fit; the ImageNet default is refused before the CLIP oracle prepares."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

import genEval.commands.compare as compare_command
import genEval.commands.evaluate as evaluate_command
from genEval import evaluate
from genEval.commands import CONF_DIR, REGISTRY
from genEval.commands.checks import check_run
from genEval.runs.recording import RunOutput
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from oracles.clip import CLIPOracle
from tests.support.assets import asset
from tests.support.toys import AcceptAllOracle, LinearClassifier, ListDataset, SigmoidGenerator

RESNET50 = "resnet50-0676ba61.pth"  # torchvision's IMAGENET1K_V1 file


def _cfg(*overrides: str, config: str = "config") -> DictConfig:
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(config, overrides=list(overrides), return_hydra_config=True)


def _check(*overrides: str) -> None:
    cfg = _cfg(*overrides)
    check_run(cfg, classifiers={"classifier": cfg.classifier}, generators={"generator": cfg.generator})


def _refusal(*overrides: str) -> str:
    with pytest.raises((ValueError, OSError)) as err:
        _check(*overrides)
    return str(err.value)


def _nothing_built(monkeypatch, module) -> None:
    """Fail the test if the command builds any component (the checks must stop it first)."""

    def build(*args, **kwargs):
        raise AssertionError("a component was built before the cheap checks refused the run")

    monkeypatch.setattr(module, "build", build)
    monkeypatch.setattr(module, "build_data", build, raising=False)


def _run(command: str, overrides: list[str], capsys, config: str) -> str:
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose(config, overrides=overrides)
    with pytest.raises(SystemExit) as stop:
        REGISTRY[command][1](cfg)
    assert stop.value.code == 2
    return capsys.readouterr().err


def _wnid_folders(root):
    for wnid in ("n01440764", "n01443537"):
        (root / wnid).mkdir(parents=True)
    return root


# ------------------------------------------------------------------------------------------- the tested model
def test_the_digits_cnn_on_cifar10_is_refused_naming_the_cifar_resnet(monkeypatch, capsys):
    asset("cifar10/test-jpg")
    _nothing_built(monkeypatch, evaluate_command)
    err = _run("evaluate", ["data=cifar10_jpg", "classifier=digits_cnn"], capsys, "config")
    assert "geneval: error: classifier digits_classifier was trained on the 10 digit classes [0, 1," in err
    assert "has the 10 classes [airplane, automobile," in err
    assert "Test a classifier trained on these classes: classifier=cifar_resnet20 (or cifar_resnet32" in err
    # with a preset name where Hydra recorded the choice
    assert "classifier digits_cnn was trained on" in _refusal("data=cifar10_jpg", "classifier=digits_cnn")
    _check("data=cifar10_jpg")  # the matching default, cifar_resnet20, fits


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (  # a 10-way model on ImageNet: the count differs; an ImageNet model is named
            ("classifier=timm", "classifier.name=resnet18", "classifier.pretrained=false", "classifier.num_classes=10"),
            [
                "it has 10 classes and the data 1000",
                "classifier=resnet50_imagenet",
                "classifier=timm classifier.name=resnet50.a1_in1k",
            ],
        ),
        (  # the digits CNN: another label space
            ("classifier=digits_cnn",),
            ["the 10 digit classes", "the 1000 ImageNet-1k classes [tench, goldfish,", "different label spaces"],
        ),
    ],
)
def test_imagenet_refuses_other_models_naming_an_imagenet_classifier(tmp_path, overrides, expected):
    root = _wnid_folders(tmp_path / "val")
    text = _refusal("data=imagenet", f"data.root={root}", *overrides)
    assert all(e in text for e in expected), text
    assert "num_classes or data.class_names" not in text


def test_a_1000_way_model_on_the_nine_superclasses_is_refused_naming_imagenet9(tmp_path):
    root = _wnid_folders(tmp_path / "val")
    text = _refusal("data=imagenet9", f"data.root={root}", "classifier=resnet50_imagenet", "classifier.weights=null")
    assert "it has 1000 classes and the data 9" in text and "classifier=imagenet9" in text


def test_folders_map_onto_the_model_s_classes_or_are_refused(tmp_path):
    for name in ("ship", "dog"):
        (tmp_path / "ok" / name).mkdir(parents=True)
    asset("weights/cifar10-resnet")
    _check("data=imagefolder", f"data.root={tmp_path / 'ok'}", "classifier=cifar_resnet20", "oracle=cifar_resnet_zoo")
    (tmp_path / "ok" / "spaceship").mkdir()
    text = _refusal("data=imagefolder", f"data.root={tmp_path / 'ok'}", "classifier=cifar_resnet20")
    assert "it has no class for the folders [spaceship]" in text


def test_the_matching_default_of_imagenet_is_torchvisions_resnet50_and_loads_offline_when_cached(tmp_path, monkeypatch):
    """Offline, with the weights in torch's cache, the checks pass (torchvision reads that file without a request);
    without them, the refusal names the exact override for a local copy."""
    root = _wnid_folders(tmp_path / "val")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv("GENEVAL_OFFLINE", "1")
    cfg = _cfg("data=imagenet", f"data.root={root}")
    assert cfg.classifier._target_.endswith("torchvision_classifier") and cfg.classifier.name == "resnet50"
    assert cfg.classifier.weights == "IMAGENET1K_V1"
    text = _refusal("data=imagenet", f"data.root={root}")
    assert f"classifier.weights=null classifier.checkpoint=/path/to/{RESNET50}" in text
    assert str(tmp_path / "torch" / "hub" / "checkpoints" / RESNET50) in text
    cached = tmp_path / "torch" / "hub" / "checkpoints" / RESNET50
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"cached")  # only its presence is checked before building
    _check("data=imagenet", f"data.root={root}")


def test_the_imagenet_default_is_refused_before_the_clip_oracle_prepares(tmp_path, monkeypatch, capsys):
    root = _wnid_folders(tmp_path / "val")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv("GENEVAL_OFFLINE", "1")
    calls = []

    def spy(name):
        def record(self, *args, **kwargs):
            calls.append(name)
            raise AssertionError(f"CLIPOracle.{name} called before the refusal")

        return record

    monkeypatch.setattr(CLIPOracle, "prepare", spy("prepare"))
    monkeypatch.setattr(CLIPOracle, "__init__", spy("__init__"))
    err = _run("evaluate", ["data=imagenet", f"data.root={root}"], capsys, "config")
    assert "geneval: error: the IMAGENET1K_V1 weights of torchvision's resnet50 (classifier)" in err
    assert f"classifier.weights=null classifier.checkpoint=/path/to/{RESNET50}" in err
    assert calls == []


# ------------------------------------------------------------------------------------------- the oracle
def test_an_oracle_of_other_classes_is_refused_naming_the_one_that_fits():
    asset("cifar10/test-jpg")
    text = _refusal("data=cifar10_jpg", "oracle=digits_zoo")
    assert "oracle digits_zoo (oracle.members.0.classifier) was trained on the 10 digit classes" in text
    assert "Use oracle=cifar_resnet_zoo (or classifier), whose judges were trained on these classes" in text


# ------------------------------------------------------------------------------------------- images and latents
def test_channels_and_sizes_against_the_generator():
    asset("cifar10/test-jpg")
    text = _refusal("data=cifar10_jpg", "generator=digits_vq")
    assert "generator digits_vq takes 1-channel images but data cifar10_jpg gives 3-channel images" in text
    assert "generator=identity" in text and "taef2" in text
    text = _refusal("data=digits", "generator=taef2")
    assert "takes 3-channel images but data digits gives 1-channel images" in text and "digits_vq" in text
    text = _refusal("data=cifar10_jpg", "data.image_size=36", "generator.image_size=null")
    assert "down-samples by 8, so image sides must be multiples of 8, but data cifar10_jpg gives 36x36 px" in text
    assert "generator.image_size=32" in text


def _mask(path, shape):
    from genEval.style_mask import fit_style_mask

    g = torch.Generator().manual_seed(0)
    start = torch.randn(40, *shape, generator=g)
    final = start.clone()
    final[:, 0, 0, 0] += 3.0
    return fit_style_mask(start, final, generator="identity", dataset="toy").save(path)


def test_a_mask_of_another_latent_shape_is_refused(tmp_path):
    asset("cifar10/test-jpg")
    pixels = ("data=cifar10_jpg", "generator=identity", "generator.channels=3", "generator.image_size=2")
    fits = _mask(tmp_path / "fits.safetensors", (3, 2, 2))
    _check(*pixels, "mask=sparse", f"mask.path={fits}")
    other = _mask(tmp_path / "other.safetensors", (2, 2, 2))
    text = _refusal(*pixels, "mask=sparse", f"mask.path={other}")
    assert f"mask.path={other} was fitted for latents of shape (2, 2, 2)" in text
    assert "makes latents of shape (3, 2, 2)" in text and "geneval fit-mask" in text


# ------------------------------------------------------------------------------------------- assets
def test_a_missing_asset_is_refused_before_anything_is_built(monkeypatch, capsys):
    import genEval.assets

    monkeypatch.setattr(genEval.assets, "asset_folders", lambda: [])
    monkeypatch.setenv("GENEVAL_OFFLINE", "1")
    _nothing_built(monkeypatch, evaluate_command)
    err = _run("evaluate", ["data=cifar10_jpg"], capsys, "config")
    assert "geneval: error: asset folder 'cifar10/test-jpg'" in err and "GENEVAL_ASSETS" in err


# ------------------------------------------------------------------------------------------- compare
def test_compare_checks_every_model_before_anything_is_built(monkeypatch, capsys):
    asset("cifar10/test-jpg")
    _nothing_built(monkeypatch, compare_command)
    err = _run("compare", ["data=cifar10_jpg"], capsys, "compare")  # the digits intervention zoo on CIFAR-10
    assert "geneval compare: error: zoo.classifiers.erm_s0, zoo.classifiers.erm_s1" in err
    assert "were trained on the 10 digit classes" in err
    assert "'classifiers=[cifar_resnet20,cifar_resnet32,cifar_resnet56]'" in err


# ------------------------------------------------------------------------------------------- the engine's own check
def test_the_engine_names_an_imagenet_classifier_for_1000_classes():
    data = ListDataset(torch.rand(2, 3, 2, 2), [0, 1], [f"class {i}" for i in range(1000)])
    with pytest.raises(ValueError, match=r"has 1000 classes .*Test an ImageNet classifier, e\.g\. classifier="):
        evaluate(
            LinearClassifier(num_classes=10),
            data,
            SigmoidGenerator(),
            AcceptAllOracle(),
            SearchConfig(budget=1),
            seed=0,
            execution=Execution(batch_size=2),
            output=RunOutput(progress=False),
        )
