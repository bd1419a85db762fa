"""Defaults that match (issue 20): a data preset picks a generator that fits its images, the channel-mismatch error
names the generator that would, the summary states the image size the search ran at, and the offline default and
the CIFAR-10 recipe compose as before."""

from __future__ import annotations

import json

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from generators.common import prepare_generator_input
from genEval import evaluate
from genEval.commands import CONF_DIR
from genEval.data.standard import DigitsData
from genEval.runs.recording import RunOutput
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from tests.support.assets import asset
from tests.support.cli import geneval
from tests.support.toys import AcceptAllOracle, LinearClassifier, SigmoidGenerator


def _generator(*overrides: str) -> dict:
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    return OmegaConf.to_container(cfg.generator, resolve=True)


@pytest.mark.parametrize(
    "overrides,target,image_size",
    [
        ((), "generators.small_vq.digits_vq", 16),  # the offline default is unchanged
        (("experiment=cifar10_taef2",), "generators.taef2.TAEF2Generator", 64),  # so is the recipe
        (("data=cifar10_jpg", "classifier=cifar_resnet20"), "generators.taef2.TAEF2Generator", 64),
        (("data=cifar10",), "generators.taef2.TAEF2Generator", 64),
        (("data=imagenet", "data.root=/x"), "generators.taef2.TAEF2Generator", 224),  # the data's resolution
        (("data=imagenet", "data.root=/x", "data.image_size=256"), "generators.taef2.TAEF2Generator", 256),
        (("data=imagenet9", "data.root=/x"), "generators.taef2.TAEF2Generator", 224),
        (("data=imagefolder", "data.root=/x", "data.image_size=128"), "generators.taef2.TAEF2Generator", 128),
        (("data=imagefolder", "data.root=/x"), "generators.taef2.TAEF2Generator", None),  # each file's size
        # an explicit generator (or its size) still wins over the data preset's pick
        (("data=cifar10_jpg", "generator=digits_vq"), "generators.small_vq.digits_vq", 16),
        (("data=imagenet", "data.root=/x", "generator=taef2"), "generators.taef2.TAEF2Generator", 64),
        (("data=imagenet", "data.root=/x", "generator.image_size=64"), "generators.taef2.TAEF2Generator", 64),
        (("data=imagenet", "data.root=/x", "generator=vqgan_imagenet_f16_16384"), "generators.vqgan.", None),
    ],
)
def test_data_presets_pick_a_generator_that_fits_and_an_explicit_one_wins(overrides, target, image_size):
    g = _generator(*overrides)
    assert g["_target_"].startswith(target) and g.get("image_size") == image_size


def test_channel_mismatch_names_the_generator_that_fits():
    rgb, grey = torch.rand(2, 3, 16, 16), torch.rand(2, 1, 16, 16)
    with pytest.raises(ValueError, match=r"expects 1-channel images but got 3 .*generator=taef2 \(offline") as err:
        prepare_generator_input(rgb, name="vq:digits", channels=1, downsample=2, image_size=None)
    assert "convert to grey" not in str(err.value).split("generator=taef2")[0]  # the RGB generator comes first
    with pytest.raises(ValueError, match=r"set data.channels=3 so grey images are repeated .*generator=digits_vq"):
        prepare_generator_input(grey, name="taef2", channels=3, downsample=8, image_size=None)


class _Upsampling(SigmoidGenerator):
    """The toy generator, decoding at twice the data's side (as TAEF2 with image_size=64 on 32-px CIFAR)."""

    def decode(self, z):
        return torch.nn.functional.interpolate(super().decode(z), scale_factor=2, mode="nearest")


class _Pooled(LinearClassifier):
    """The toy classifier on any image size: it owns its resize (pooled to 2x2 first), as classifiers do."""

    def forward(self, x):
        return super().forward(torch.nn.functional.adaptive_avg_pool2d(x, 2))


@pytest.mark.parametrize("generator,line", [(SigmoidGenerator, "2x2 px (data and generator)"), (_Upsampling, None)])
def test_summary_states_the_image_size_the_search_ran_at(generator, line):
    r = evaluate(
        _Pooled(in_features=12, num_classes=10),
        DigitsData(limit=10, image_size=2, channels=3),
        generator(),
        AcceptAllOracle(),
        SearchConfig(budget=1, step_size=0.1, start_noise=0),
        seed=0,
        execution=Execution(batch_size=10),
        output=RunOutput(progress=False),
    )
    text = r.summary()
    if line is not None:
        assert f"  image size: {line}" in text
    else:
        assert "  image size: data 2x2 px, searched and scored at 4x4 px (generator.image_size)" in text


def test_cifar10_jpg_with_the_cifar_resnet_runs_out_of_the_box(tmp_path):
    """`geneval data=cifar10_jpg classifier=cifar_resnet20 data.limit=20` (a small budget keeps the test short)."""
    asset("cifar10/test-jpg")
    r = geneval(
        "data=cifar10_jpg",
        "classifier=cifar_resnet20",
        "data.limit=20",
        "search.budget=2",
        "seed=0",
        f"hydra.run.dir={tmp_path}",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["components"]["generator"].startswith("taef2:") and results["scores"]["sa"]["n"] == 20
    assert "image size: data 32x32 px, searched and scored at 64x64 px (generator.image_size)" in r.stdout


# ------------------------------------------------------------------------------------------- every command (issue 29)
#: What every conf/data option brings as matching defaults: (tested classifier, oracle, generator and its image_size).
MATCHING = {
    "digits": ("genEval.classifiers.digits_classifier", "oracles.zoo.ZooOracle", "generators.small_vq.digits_vq", 16),
    "digits_train": (
        "genEval.classifiers.digits_classifier",
        "oracles.zoo.ZooOracle",
        "generators.small_vq.digits_vq",
        16,
    ),
    "mnist": ("genEval.classifiers.digits_classifier", "oracles.zoo.ZooOracle", "generators.small_vq.digits_vq", 16),
    "cifar10": ("genEval.classifiers.cifar_resnet", "oracles.zoo.ZooOracle", "generators.taef2.TAEF2Generator", 64),
    "cifar10_jpg": ("genEval.classifiers.cifar_resnet", "oracles.zoo.ZooOracle", "generators.taef2.TAEF2Generator", 64),
    "imagefolder": (
        "genEval.classifiers.digits_classifier",
        "oracles.zoo.ZooOracle",
        "generators.taef2.TAEF2Generator",
        None,
    ),
    "imagenet": (
        "genEval.classifiers.torchvision_classifier",
        "oracles.clip.CLIPOracle",
        "generators.taef2.TAEF2Generator",
        224,
    ),
    "imagenet9": (
        "genEval.classifiers.superclass_classifier",
        "oracles.clip.CLIPOracle",
        "generators.taef2.TAEF2Generator",
        224,
    ),
    "imagenet_cifar10": (  # issue 43: ImageNet images in the CIFAR-10 classes ImageNet-1k shares
        "genEval.classifiers.superclass_classifier",
        "oracles.clip.CLIPOracle",
        "generators.taef2.TAEF2Generator",
        224,
    ),
    "digits_noisy": (  # issue 43: a second ID set of the digits zoo (the test split under Gaussian noise)
        "genEval.classifiers.digits_classifier",
        "oracles.zoo.ZooOracle",
        "generators.small_vq.digits_vq",
        16,
    ),
}


def _roles(cfg) -> tuple:
    classifier = cfg.get("classifier")
    return (
        None if classifier is None else classifier._target_,
        cfg.oracle._target_,
        cfg.generator._target_,
        OmegaConf.to_container(cfg.generator, resolve=True).get("image_size"),
    )


def test_every_data_preset_lists_its_matching_defaults():
    assert set(MATCHING) == {p.stem for p in (CONF_DIR / "data").glob("*.yaml")}, "list new data presets in MATCHING"


@pytest.mark.parametrize("data", sorted(MATCHING))
def test_every_data_preset_brings_its_roles_under_every_command(data):
    """`geneval data=X` and `geneval compare data=X`, with no other override, get the same matching roles (compare
    lists the roles before data, as config.yaml does; it tests its classifiers= or zoo, not `classifier`), and
    `geneval train-generator data=X` composes."""
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        main = compose("config", overrides=[f"data={data}"])
        comparison = compose("compare", overrides=[f"data={data}"])
        training = compose("train_generator", overrides=[f"data={data}"])  # composes data, uses none of the roles
    assert _roles(main) == MATCHING[data]
    assert training.data == main.data
    cifar = data.startswith("cifar10")
    assert _roles(comparison) == (
        MATCHING[data][0] if cifar or data.startswith("imagenet") else None,
        *MATCHING[data][1:],
    )
    if cifar:
        assert main.classifier.depth == 20 and [m.classifier.depth for m in main.oracle.members] == [32, 56]
    if data == "imagenet":
        assert main.classifier.name == "resnet50" and main.classifier.weights == "IMAGENET1K_V1"
        assert main.oracle.model_name == "ViT-B-32"


def test_the_compare_header_example_composes_with_the_cifar_defaults():
    header = (CONF_DIR / "compare.yaml").read_text()
    assert (
        "geneval compare data=cifar10_jpg 'classifiers=[cifar_resnet20,cifar_resnet32]' allow_self_judging=true"
        in header
    )
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            "compare",
            overrides=["data=cifar10_jpg", "classifiers=[cifar_resnet20,cifar_resnet32]", "allow_self_judging=true"],
        )
    assert _roles(cfg)[1:] == MATCHING["cifar10_jpg"][1:] and list(cfg.classifiers) == [
        "cifar_resnet20",
        "cifar_resnet32",
    ]


@pytest.mark.parametrize(
    "overrides, target",
    [
        (("data=cifar10_jpg", "classifier=digits_cnn"), "genEval.classifiers.digits_classifier"),
        (
            ("data=imagenet", "data.root=/x", "classifier=timm", "classifier.name=resnet18"),
            "genEval.classifiers.timm_classifier",
        ),
        (("experiment=cifar10_taef2",), "genEval.classifiers.cifar_resnet"),
    ],
)
def test_an_explicit_classifier_still_wins(overrides, target):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        assert compose("config", overrides=list(overrides)).classifier._target_ == target


def test_service_benchmarks_get_their_data_presets_roles():
    """A benchmark that composes a data preset gets its matching oracle and generator; the preset's matching
    classifier is dropped (the submission is the classifier)."""
    from genEval.commands.serve import _compose

    for name, data in (("cifar10", "cifar10_jpg"), ("imagenet", "imagenet"), ("digits", "digits")):
        cfg = _compose(f"benchmark/{name}")
        assert _roles(cfg)[1:] == MATCHING[data][1:], name
