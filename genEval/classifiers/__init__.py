"""Tested classifiers ``f`` (docs/method.md, "The actors"): models wrapped to obey genEval's image contract.

Every factory returns an :class:`ImageClassifier`: an ``nn.Module`` that takes float images
``(B, C, H, W)`` in ``[0, 1]`` of any size, resizes them to the model's input size, normalises them
with the model's mean/std (torchattacks' rule: a model takes ``[0, 1]`` images) and returns
``(B, num_classes)`` logits. Classifiers are fixed functions under test: they are in eval mode and their
parameters are frozen (``requires_grad=False``); gradients with respect to the *input* still flow, which
is what the latent search (paper Sec. 3.2) needs.

Factories (the Hydra ``_target_`` of ``conf/classifier/*.yaml``, spelled ``genEval.classifiers.<name>``):

* :func:`cifar_resnet` - option-A CIFAR ResNet-20/32/44/56 (:mod:`genEval.classifiers.architectures`).
* :func:`timm_classifier`, :func:`torchvision_classifier` - library models by name.
* :func:`torchscript_classifier` - a scripted (``torch.jit.save``) model file.
* :func:`module_classifier` - any ``nn.Module`` built by Hydra, plus an optional state dict.
* :func:`digits_classifier` - small models trained on scikit-learn's digits on first use and cached:
  the offline default that needs no downloaded weights.
* :func:`digits_intervention` - the digits CNN trained with a robustness intervention (ERM, Gaussian noise,
  PGD adversarial training, AugMix; :mod:`genEval.classifiers.interventions`): the offline intervention zoo.
* :func:`robustbench_classifier`, :func:`checkpoint_classifier` - ImageNet robustness interventions from local
  checkpoint files (RobustBench's names and layouts, the paper's Table 2 releases; :mod:`genEval.classifiers.robust`).
* :func:`superclass_classifier` - a 1k ImageNet classifier read as a super-class classifier (the paper's
  9-class ImageNet): the 1k logits of each super-class are pooled (log-sum-exp by default); ``superclasses:
  cifar10`` reads it in the CIFAR-10 classes ImageNet-1k shares (:mod:`genEval.data.class_maps`).
* :func:`class_subset` - any classifier restricted to a subset of its classes (a CIFAR-10 model on those 9).

A classifier trained on known classes carries them in ``class_names`` (CIFAR ResNets: the CIFAR-10 names,
digits models: ``"0"..."9"``, a super-class classifier: the super-class names); an oracle built from it
refuses data with other classes (:mod:`oracles.classifier`).

Resizing goes straight to the model's input size (no centre crop): genEval's images are already framed,
and a crop would hide part of the perturbation from the tested model.

Modules: ``base`` (the wrapper and its weight loading), ``loaders`` (files and libraries), ``digits``,
``superclass``, ``architectures`` (networks defined here: the option-A CIFAR ResNet).
"""

from genEval.classifiers.architectures import CifarResNet
from genEval.classifiers.base import IMAGENET_MEAN, IMAGENET_STD, ImageClassifier
from genEval.classifiers.digits import DIGITS_ARCHS, digits_classifier
from genEval.classifiers.interventions import RECIPES, digits_intervention
from genEval.classifiers.loaders import (
    cifar_resnet,
    module_classifier,
    timm_classifier,
    torchscript_classifier,
    torchvision_classifier,
)
from genEval.classifiers.robust import ROBUSTBENCH_IMAGENET, checkpoint_classifier, robustbench_classifier
from genEval.classifiers.superclass import (
    POOLS,
    ClassSubsetClassifier,
    SuperclassClassifier,
    class_subset,
    superclass_classifier,
)

__all__ = [
    "DIGITS_ARCHS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "POOLS",
    "RECIPES",
    "ROBUSTBENCH_IMAGENET",
    "CifarResNet",
    "ClassSubsetClassifier",
    "ImageClassifier",
    "SuperclassClassifier",
    "checkpoint_classifier",
    "class_subset",
    "cifar_resnet",
    "digits_classifier",
    "digits_intervention",
    "module_classifier",
    "robustbench_classifier",
    "superclass_classifier",
    "timm_classifier",
    "torchscript_classifier",
    "torchvision_classifier",
]
