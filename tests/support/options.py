"""The catalogue: every option of the config groups whose options build an object, with what it takes to build one
offline and cheaply (and, for the plug-in groups, the images it is probed with).

The ``generator``, ``oracle`` and ``classifier`` groups (:data:`GROUPS`) are the plug-ins the conformance suite
(``tests/contracts``) checks against their protocols; the ``data``, ``mask``, ``search``, ``tracking`` and ``protocol``
groups (:data:`OTHER_GROUPS`) are composed and instantiated by ``tests/commands/test_configs.py``. An option is built
from its own config file, composed as ``geneval <group>=<name>`` composes it, plus the overrides listed here: stand-in
files (:mod:`tests.support.stand_ins`, ``{key}`` templates) where the real ones cannot be had in a test. The digits
classifiers keep their settings, so the models they train on first use are the ones the offline demo's tests train
too (one cache per session); the digits generator trains one epoch. A new option in one of the groups must be listed
here (``test_every_option_of_the_plugin_groups_is_catalogued`` and ``test_every_option_is_catalogued`` fail
otherwise), so no option ships without being built by a test.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from genEval.data.standard import CIFAR10_CLASSES, DIGIT_CLASSES

#: The config groups whose every option the suite checks, and the protocol each option's object must follow.
GROUPS = ("generator", "oracle", "classifier")
#: The other groups whose every option composes and instantiates (tests/commands/test_configs.py).
OTHER_GROUPS = ("data", "mask", "search", "tracking", "protocol")
#: Class names an oracle is prepared with when it is not tied to a label space (CLIP takes any).
ANY_CLASSES = ("cat", "dog", "ship")
CLASSES = {"digits": tuple(DIGIT_CLASSES), "cifar10": tuple(CIFAR10_CLASSES), "any": ANY_CLASSES}


@dataclass(frozen=True)
class Option:
    """One option: ``conf/<group>/<name>.yaml`` with ``overrides`` (its own keys; ``{key}`` names a stand-in).

    The object is probed with float images ``(2, channels, size, size)`` in ``[0, 1]``; an oracle is prepared with
    the class names of ``classes`` (a key of :data:`CLASSES`). ``assets``: it reads ``../shared/assets`` (skipped
    with a reason where that is absent); ``slow``: it takes more than a few seconds on a shared CPU; ``composed_in``:
    the command config the group's node is composed in (``conf/<composed_in>.yaml``; the main job's by default).
    """

    group: str
    name: str
    overrides: dict[str, str] = field(default_factory=dict)
    channels: int = 3
    size: int = 16
    classes: str = "any"
    assets: bool = False
    slow: bool = False
    composed_in: str = "config"

    def __str__(self) -> str:
        return f"{self.group}={self.name}"

    @property
    def class_names(self) -> list[str]:
        return list(CLASSES[self.classes])

    def command_line(self, stand_ins: dict[str, str]) -> list[str]:
        """The overrides ``geneval`` would be given: ``<group>=<name>`` and ``<group>.<key>=<value>``."""
        keys = [f"{self.group}.{k}={v.format(**stand_ins)}" for k, v in self.overrides.items()]
        return [f"{self.group}={self.name}", *keys]


DIGITS = {"channels": 1, "size": 16, "classes": "digits"}
CIFAR = {"channels": 3, "size": 32, "classes": "cifar10"}
TINY_CLIP = {"model_name": "{tiny_clip}", "pretrained": "null"}
TINY_KL, TINY_AE = {"pretrained": "{kl}"}, {"pretrained": "{tiny}"}

OPTIONS: tuple[Option, ...] = (
    # ---------------------------------------------------------------------------------------------- generators
    Option("generator", "diffusers_vae", TINY_KL),
    # trained on first use; one epoch, not the demo's eight (minutes on a shared CPU): the contract is the same
    Option("generator", "digits_vq", {"epochs": "1"}, channels=1),
    Option("generator", "identity"),
    Option("generator", "sd_vae_ft_mse", TINY_KL),
    Option("generator", "taef2", assets=True),
    Option("generator", "taef2_data_size", assets=True),  # image_size follows data.image_size (16)
    Option("generator", "taesd", TINY_AE),
    Option("generator", "trained_vq", {"checkpoint_path": "{trained}"}),
    Option("generator", "vqgan", {"config": "{vq_yaml}", "checkpoint": "{vq_ckpt}"}),
    Option("generator", "vqgan_imagenet_f16_16384", {"config": "{f16_yaml}", "checkpoint": "{f16_ckpt}"}, size=64),
    # ------------------------------------------------------------------------------------------------- oracles
    Option("oracle", "cifar_resnet_zoo", assets=True, **CIFAR),
    Option("oracle", "classifier", assets=True, **CIFAR),
    Option("oracle", "clip", TINY_CLIP),
    Option("oracle", "clip_imagenet", TINY_CLIP),
    Option("oracle", "clip_vit_b32", TINY_CLIP),
    Option("oracle", "digits_zoo", **DIGITS),  # its two members train themselves on first use
    # --------------------------------------------------------------------------------------------- classifiers
    *(Option("classifier", f"cifar_resnet{d}", assets=True, **CIFAR) for d in (20, 32, 56)),
    Option("classifier", "cifar_resnet44", {"checkpoint": "null"}, **CIFAR),  # no ResNet-44 weights: random
    *(Option("classifier", f"digits_{a}", **DIGITS) for a in ("cnn", "mlp", "wide_cnn")),  # as the demo's
    Option("classifier", "digits_intervention", {"recipe": "gaussian_noise", "epochs": "1"}, **DIGITS),
    Option("classifier", "imagenet9", {"classifier.weights": "null"}),
    Option("classifier", "imagenet_cifar10", {"classifier.weights": "null"}),
    Option(
        "classifier",
        "module",
        {"module": "{{_target_: genEval.classifiers.CifarResNet, depth: 20}}", "num_classes": "10"},
        **CIFAR,
    ),
    Option("classifier", "resnet50_imagenet", {"weights": "null"}),  # a ResNet-50 at 224 px: seconds
    Option("classifier", "robustbench", {"model_dir": "{robustbench}"}),  # a ResNet-50 at 224 px: seconds
    Option("classifier", "timm", {"name": "resnet18", "pretrained": "false", "num_classes": "10"}),
    Option("classifier", "torchscript", {"path": "{torchscript}", "num_classes": "10"}),
    Option("classifier", "torchvision", {"name": "resnet18", "weights": "null", "num_classes": "10"}),
    # ---------------------------------------------------------------- data (stand-ins: tests.support.stand_ins)
    Option("data", "cifar10", {"root": "{cifar10}"}),
    Option("data", "cifar10_jpg", {"limit": "20"}, assets=True),
    Option("data", "digits"),
    Option("data", "digits_noisy"),
    Option("data", "digits_train"),
    Option("data", "imagefolder", {"root": "{folder}"}),
    Option("data", "imagenet", {"root": "{wnids}"}),
    Option("data", "imagenet9", {"root": "{wnids}"}),
    Option("data", "imagenet_cifar10", {"root": "{wnids_cifar}"}),
    Option("data", "mnist", {"root": "{mnist}"}),
    # ------------------------------------------------------------------------------- masks, search, tracking
    Option("mask", "auto"),
    Option("mask", "none"),
    Option("mask", "sparse", {"path": "{mask}"}),
    Option("search", "default"),
    Option("tracking", "mlflow"),  # built, not connected: nothing is written
    # the snapshot commands' logit protocols (conf/filter.yaml, conf/transfer.yaml)
    Option("protocol", "imagenet_a_200", composed_in="filter"),
)


def options(*groups: str) -> list:
    """The catalogued options of ``groups`` (all three when none is named) as pytest parameters, ``slow`` ones
    marked so, each with its id ``<group>=<name>``."""
    return [
        pytest.param(o, id=str(o), marks=[pytest.mark.slow] if o.slow else [])
        for o in OPTIONS
        if o.group in (groups or GROUPS)
    ]
