"""A classifier read in another label space: a 1k ImageNet classifier over super-classes (the paper's 9-class
ImageNet; the CIFAR-10 classes ImageNet-1k shares, :mod:`genEval.data.class_maps`), and any classifier restricted to a
subset of its classes (a CIFAR-10 model on the classes it shares with ImageNet: Shi et al. 2023, section 5.1)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from genEval.data.class_maps import SHARED_CIFAR10
from genEval.data.imagenet import superclass_members, superclass_table
from genEval.declared import ClassSet, Declaration, declared_by

POOLS = ("logsumexp", "max", "mean")


class SuperclassClassifier(nn.Module):
    """A 1k ImageNet classifier read as a classifier over super-classes (the paper's 9-class ImageNet).

    ``forward`` pools the 1k logits of each super-class (:func:`genEval.data.imagenet.superclass_table` ranges)
    into one logit: ``logsumexp`` (default: softmax over the pooled logits is the 1k probability mass of each
    super-class, renormalised over the super-classes), ``max`` or ``mean``. Logits of classes outside every
    super-class are dropped. Images ``(B, C, H, W)`` in ``[0, 1]`` -> ``(B, len(superclasses))``.
    """

    def __init__(
        self, classifier: nn.Module, superclasses: str | dict, pool: str = "logsumexp", name: str | None = None
    ) -> None:
        super().__init__()
        if pool not in POOLS:
            raise ValueError(f"unknown pool {pool!r}; choose one of {', '.join(POOLS)}.")
        table = superclass_table(superclasses)
        inner = int(getattr(classifier, "num_classes", 0) or 0)
        if inner != 1000:
            raise ValueError(
                f"classifier.classifier must be a 1000-class ImageNet classifier to pool into "
                f"super-classes, got num_classes={inner}."
            )
        self.classifier = classifier
        self.pool = pool
        self.superclasses = table
        self.class_names = list(table)
        self.num_classes = len(table)
        members = superclass_members(table)
        self.register_buffer("members", torch.tensor([k for m in members for k in m]), persistent=False)
        self.sizes = [len(m) for m in members]
        self.name = name or f"{getattr(classifier, 'name', type(classifier).__name__)}>{len(table)}-superclass"

    def forward(self, images: Tensor) -> Tensor:
        logits = self.classifier(images)[:, self.members]  # (B, K) logits of the super-classes' members
        parts = torch.split(logits, self.sizes, dim=1)
        if self.pool == "logsumexp":
            return torch.stack([p.logsumexp(1) for p in parts], 1)
        if self.pool == "max":
            return torch.stack([p.amax(1) for p in parts], 1)
        return torch.stack([p.mean(1) for p in parts], 1)

    def train(self, mode: bool = True) -> SuperclassClassifier:
        return super().train(False)  # a tested classifier is a fixed function (see ImageClassifier.train)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, num_classes={self.num_classes}, pool={self.pool!r}"


def _declare_superclasses(superclasses: str | dict | None = "restricted_imagenet9", **_: object) -> Declaration:
    """The super-class names, in the order of the pooled logits."""
    if superclasses is None:
        return Declaration()
    return Declaration(classes=ClassSet(list(superclass_table(superclasses))))


@declared_by(_declare_superclasses)
def superclass_classifier(
    classifier: nn.Module,
    superclasses: str | dict | None = "restricted_imagenet9",
    pool: str = "logsumexp",
    name: str | None = None,
) -> SuperclassClassifier:
    """Hydra target of ``conf/classifier/imagenet9.yaml``: pool a 1k classifier's logits into super-classes."""
    if superclasses is None:
        raise ValueError(
            "classifier.superclasses is not set: name a set (restricted_imagenet9) or give a mapping "
            "name -> [first, last] 1k indices, as data=imagenet9 does."
        )
    clf = SuperclassClassifier(classifier, superclasses, pool, name)
    clf.eval().requires_grad_(False)
    return clf


class ClassSubsetClassifier(nn.Module):
    """``classifier`` restricted to the named ``classes`` (a subset of its own ``class_names``): the logits of those
    classes only, in the order given, so its prediction is the best of them (Miller et al. 2021 restrict models to
    the classes two test sets share). Images ``(B, C, H, W)`` in ``[0, 1]`` -> ``(B, len(classes))``."""

    def __init__(self, classifier: nn.Module, classes: Sequence[str], name: str | None = None) -> None:
        super().__init__()
        own = list(getattr(classifier, "class_names", None) or [])
        if not own:
            raise ValueError(
                "class_subset needs a classifier that names its classes (class_names); give the classifier's "
                "class_names, e.g. the CIFAR ResNets carry CIFAR-10's."
            )
        classes = [str(c) for c in classes]
        missing = [c for c in classes if c not in own]
        if missing or not classes:
            raise ValueError(
                f"class_subset: classes {missing or classes} are not classes of the classifier ({', '.join(own)})."
            )
        self.classifier = classifier
        self.class_names = classes
        self.num_classes = len(classes)
        self.register_buffer("keep", torch.tensor([own.index(c) for c in classes]), persistent=False)
        self.name = name or f"{getattr(classifier, 'name', type(classifier).__name__)}>{len(classes)}-class-subset"

    def forward(self, images: Tensor) -> Tensor:
        return self.classifier(images)[:, self.keep]

    def train(self, mode: bool = True) -> ClassSubsetClassifier:
        return super().train(False)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, classes={self.class_names}"


def _subset_classes(classes: str | Sequence[str]) -> list[str]:
    if classes == "shared_cifar10":
        return list(SHARED_CIFAR10)
    if isinstance(classes, str):
        raise ValueError(f"unknown class subset {classes!r}; give shared_cifar10 or a list of class names.")
    return [str(c) for c in classes]


def _declare_subset(classes: str | Sequence[str] = "shared_cifar10", **_: object) -> Declaration:
    return Declaration(classes=ClassSet(_subset_classes(classes)))


@declared_by(_declare_subset)
def class_subset(
    classifier: nn.Module, classes: str | Sequence[str] = "shared_cifar10", name: str | None = None
) -> ClassSubsetClassifier:
    """Hydra target: ``classifier`` restricted to ``classes`` (``shared_cifar10``: the 9 CIFAR-10 classes ImageNet-1k
    shares, :data:`genEval.data.class_maps.SHARED_CIFAR10`, or a list of its class names)."""
    clf = ClassSubsetClassifier(classifier, _subset_classes(classes), name)
    clf.eval().requires_grad_(False)
    return clf
