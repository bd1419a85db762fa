"""ImageNet robustness interventions by the names users know: RobustBench's model zoo and the original releases of
the paper's Table 2 models, loaded from local checkpoint files into torchvision ResNets
(docs/comparing.md, "Where the ImageNet checkpoints come from").

The ``robustbench`` package is not a dependency (its 1.1.1 release pins an old timm and fails to import with the
autoattack it installs), so this module reads the files itself. Every layout below holds plain torchvision
``resnet50`` (or ``wide_resnet50_2``) weights around different wrappers; :func:`robust_state_dict` unwraps them:

* RobustBench ImageNet models: ``Sequential(normalize=ImageNormalizer(ImageNet mean/std), model=resnet50())`` on
  ``[0, 1]`` inputs; its loader takes ``ckpt['state_dict']`` when present (else the whole file) and strips
  ``module.`` then ``model.``; the normaliser's mean/std are not stored. RobustBench writes the file to
  ``<model_dir>/imagenet/<threat model>/<name>.pt`` (``robustbench.utils.load_model``), which is where
  :func:`robustbench_classifier` looks.
* Robustness-library adversarial checkpoints (Engstrom2019Robustness, Salman2020Do_*): ``module.model.*`` with
  ``module.attacker.*`` and ``module.normalizer.*`` copies, dropped here.
* Stylized-ImageNet (SIN) ``.pth.tar``: ``state_dict`` with ``module.``. Game-of-noise (ANT):
  ``model_state_dict``, no prefix. ImageNet-R (DeepAugment): ``{'arch', 'state_dict'}`` with ``module.``.
  Discrete adversarial training (DAT): a bare state dict, or ``0.mean``/``0.std`` (the normaliser) and ``1.*``.

Rule: take the first of ``state_dict``, ``model_state_dict``, ``model`` (else the file itself); strip a leading
``module.``; drop ``attacker.*``, ``normalizer.*``, ``normalize.*`` and ``0.*`` (normalisers and the attacker's
copy); strip leading ``model.`` and ``1.``; load strictly. Normalisation (ImageNet mean/std) happens outside the
network in :class:`~genEval.classifiers.base.ImageClassifier`, at the model's input size (genEval resizes straight
to it, without RobustBench's resize-256-then-crop-224: genEval's images are already framed).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from genEval.checkpoints import load_checkpoint, load_state_dict_into
from genEval.classifiers.base import IMAGENET_MEAN, IMAGENET_STD, ImageClassifier, closest, freeze
from genEval.classifiers.loaders import counted
from genEval.declared import Declaration, declared_by

log = logging.getLogger(__name__)

_WRAPPERS = ("state_dict", "model_state_dict", "model")
_DROPPED = ("attacker.", "normalizer.", "normalize.", "0.")
_STRIPPED = ("model.", "1.")


@dataclass(frozen=True)
class RobustBenchModel:
    """One RobustBench ImageNet model: threat model (its folder), torchvision architecture, input side, the
    paper's Table 2 row it stands for (None: not a Table 2 row) and the clean / robust accuracy RobustBench reports
    (None where it is not recorded)."""

    threat_model: str
    arch: str
    input_size: int
    table2: str | None
    clean: float | None = None
    robust: float | None = None


#: RobustBench's ImageNet ResNet models (``model_zoo/imagenet.py``): corruption-robust and L-inf adversarial.
ROBUSTBENCH_IMAGENET: dict[str, RobustBenchModel] = {
    "Standard_R50": RobustBenchModel("corruptions", "resnet50", 224, "ResNet50 (vanilla)"),
    "Geirhos2018_SIN": RobustBenchModel("corruptions", "resnet50", 224, None, 60.08, 39.92),
    "Geirhos2018_SIN_IN": RobustBenchModel("corruptions", "resnet50", 224, "SIN (the SIN+IN model)", 74.98, 45.76),
    "Geirhos2018_SIN_IN_IN": RobustBenchModel("corruptions", "resnet50", 224, None, 77.56, 42.0),
    "Hendrycks2020AugMix": RobustBenchModel("corruptions", "resnet50", 224, "AugMix", 77.34, 49.33),
    "Hendrycks2020Many": RobustBenchModel("corruptions", "resnet50", 224, "DeepAugment+AugMix", 76.86, 52.9),
    "Erichson2022NoisyMix": RobustBenchModel("corruptions", "resnet50", 224, None),
    "Salman2020Do_50_2_Linf": RobustBenchModel("corruptions", "wide_resnet50_2", 224, None),
    "Salman2020Do_R50": RobustBenchModel("Linf", "resnet50", 224, None, 64.02, 34.96),
    "Engstrom2019Robustness": RobustBenchModel("Linf", "resnet50", 224, None, 62.56, 29.22),
    "Wong2020Fast": RobustBenchModel("Linf", "resnet50", 288, None, 55.62, 26.24),
}


def robust_state_dict(obj: object) -> dict[str, torch.Tensor]:
    """The torchvision state dict inside a robustness checkpoint, whatever its release layout (module docstring)."""
    sd = obj
    if isinstance(obj, Mapping):
        for key in _WRAPPERS:
            if isinstance(obj.get(key), Mapping):
                sd = obj[key]
                break
    if not isinstance(sd, Mapping):
        raise ValueError(f"checkpoint holds a {type(sd).__name__}, not a state dict")
    out: dict[str, torch.Tensor] = {}
    for key, value in sd.items():
        k = key[len("module.") :] if key.startswith("module.") else key
        if k.startswith(_DROPPED) or not isinstance(value, torch.Tensor):
            continue
        while k.startswith(_STRIPPED):
            k = k.split(".", 1)[1]
        out[k] = value
    return out


def _declare_imagenet(num_classes: int = 1000, **_: object) -> Declaration:
    return counted(num_classes)


@declared_by(_declare_imagenet)
def checkpoint_classifier(
    checkpoint: str | Path,
    arch: str = "resnet50",
    name: str | None = None,
    source: str = "",
    input_size: int = 224,
    num_classes: int = 1000,
    allow_pickle: bool = False,
) -> ImageClassifier:
    """A torchvision ``arch`` (``torchvision.models.get_model``) with the weights of a robustness checkpoint in any
    of the release layouts (:func:`robust_state_dict`), ImageNet mean/std outside the network, ``input_size`` px.

    ``source`` says where the file comes from; a missing file raises FileNotFoundError naming the path and it.
    """
    from torchvision.models import get_model, list_models

    if arch not in list_models():
        raise ValueError(f"unknown torchvision architecture {arch!r}. Close names: {closest(arch, list_models())}.")
    path = Path(checkpoint).expanduser()
    label = name or path.stem
    if not path.is_file():
        raise FileNotFoundError(
            f"checkpoint of {label} not found: '{path}'."
            + (f" It comes from {source}." if source else "")
            + " Download it on a machine with internet access and point the config at it (checkpoint=...)."
        )
    net = get_model(arch, weights=None, num_classes=int(num_classes))
    obj = load_checkpoint(path, what=f"{label} checkpoint", allow_pickle=allow_pickle)
    load_state_dict_into(net, robust_state_dict(obj), what=f"{label} checkpoint '{path}' ({arch})")
    log.info("loaded %s (%s) from %s", label, arch, path)
    return freeze(ImageClassifier(net, int(num_classes), IMAGENET_MEAN, IMAGENET_STD, int(input_size), name=label))


def robustbench_path(name: str, model_dir: str | Path = "models", threat_model: str | None = None) -> Path:
    """Where RobustBench keeps ``name``'s checkpoint: ``<model_dir>/imagenet/<threat model>/<name>.pt``."""
    entry = robustbench_entry(name)
    return Path(model_dir).expanduser() / "imagenet" / (threat_model or entry.threat_model) / f"{name}.pt"


def robustbench_entry(name: str) -> RobustBenchModel:
    if name not in ROBUSTBENCH_IMAGENET:
        raise ValueError(
            f"unknown RobustBench ImageNet model {name!r}; known: {', '.join(ROBUSTBENCH_IMAGENET)} "
            "(other checkpoints of a torchvision architecture load with genEval.classifiers.checkpoint_classifier)."
        )
    return ROBUSTBENCH_IMAGENET[name]


@declared_by(_declare_imagenet)
def robustbench_classifier(
    name: str,
    model_dir: str | Path = "models",
    checkpoint: str | Path | None = None,
    threat_model: str | None = None,
    allow_pickle: bool = False,
) -> ImageClassifier:
    """RobustBench's ImageNet model ``name`` (:data:`ROBUSTBENCH_IMAGENET`) from a local checkpoint file:
    ``checkpoint``, else RobustBench's own location ``<model_dir>/imagenet/<threat model>/<name>.pt``. A missing
    file raises FileNotFoundError saying how to get it (``robustbench.utils.load_model`` on a machine with internet
    writes it there; copy the ``models/`` folder over)."""
    entry = robustbench_entry(name)
    threat = threat_model or entry.threat_model
    path = Path(checkpoint) if checkpoint is not None else robustbench_path(name, model_dir, threat)
    source = (
        f"RobustBench's model zoo (ImageNet, threat model {threat}): on a machine with internet, "
        f"`pip install git+https://github.com/RobustBench/robustbench` and run robustbench.utils.load_model("
        f"model_name='{name}', dataset='imagenet', threat_model='{threat}', model_dir='models'), which writes "
        f"models/imagenet/{threat}/{name}.pt; copy it here (or set model_dir / checkpoint)"
    )
    return checkpoint_classifier(
        path, entry.arch, f"robustbench:{name}", source, entry.input_size, allow_pickle=allow_pickle
    )
