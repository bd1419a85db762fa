"""A 1k ImageNet classifier read as a classifier over super-classes (the paper's 9-class ImageNet)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

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
