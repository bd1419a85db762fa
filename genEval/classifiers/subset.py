"""An ImageNet-1k classifier read over a subset of its classes: the 200-class protocol of ImageNet-A (Hendrycks et
al. 2021; ``protocol=imagenet_a_200``, conf/protocol/imagenet_a_200.yaml).

ImageNet-A's evaluation (and its filtration: "200 of its 1000 logits") restricts a 1000-way classifier's logits to
the 200 ImageNet-A classes, so the model answers among them only. :class:`SubsetClassifier` keeps the logits of the
given 1k indices, in their order; :func:`imagenet_subset` reads the wnids and 1k indices of a subset from the
metadata timm ships (``timm/data/_info/imagenet_a_synsets.txt`` and ``imagenet_a_indices.txt``, also
``imagenet_r``) and checks each index against the wnid's position in the 1k order
(:func:`genEval.data.imagenet.imagenet_wnids`). :class:`LogitProtocol` is what the command layer applies to every
classifier a snapshot command builds (surrogates, targets).
"""

from __future__ import annotations

import functools
import pkgutil
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from genEval.data.imagenet import NUM_CLASSES, imagenet_wnids

#: The subsets timm ships metadata for (name -> file stem under timm/data/_info).
SUBSETS = {"imagenet_a": "imagenet_a", "imagenet_r": "imagenet_r"}


@functools.cache
def imagenet_subset(name: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The wnids of subset ``name`` (``imagenet_a``: 200 classes) and their indices in the 1k order, from timm's
    metadata; a wnid whose listed index is not its 1k position is refused (a broken metadata file)."""
    if name not in SUBSETS:
        raise ValueError(f"unknown ImageNet subset {name!r}; known: {', '.join(SUBSETS)}.")
    stem = SUBSETS[name]

    def lines(kind: str) -> list[str]:
        data = pkgutil.get_data("timm.data", f"_info/{stem}_{kind}.txt")
        if data is None:  # pragma: no cover - a timm without the file
            raise FileNotFoundError(f"timm ships no _info/{stem}_{kind}.txt; upgrade timm (pip install -U timm).")
        return [s.strip() for s in data.decode("utf-8").splitlines() if s.strip()]

    wnids, indices = tuple(lines("synsets")), tuple(int(i) for i in lines("indices"))
    order = imagenet_wnids()
    wrong = [(w, i) for w, i in zip(wnids, indices) if i >= NUM_CLASSES or order[i] != w]
    if len(wnids) != len(indices) or wrong:
        raise RuntimeError(f"timm's {stem} metadata disagrees with the 1k order: {wrong[:3]}.")
    return wnids, indices


class SubsetClassifier(nn.Module):
    """A classifier's logits at ``indices`` only: images ``(B, C, H, W)`` in [0, 1] -> ``(B, len(indices))``;
    ``class_names`` names the kept classes (the inner classifier's names at the indices, else the given ones)."""

    def __init__(self, classifier: nn.Module, indices: tuple[int, ...], class_names: tuple[str, ...], tag: str) -> None:
        super().__init__()
        inner = int(getattr(classifier, "num_classes", 0) or 0)
        if inner != NUM_CLASSES:
            raise ValueError(
                f"protocol {tag} restricts a 1000-class ImageNet classifier's logits, but "
                f"{getattr(classifier, 'name', type(classifier).__name__)} has num_classes={inner}; use an ImageNet-1k "
                "classifier (e.g. classifier=resnet50_imagenet) or drop protocol=."
            )
        self.classifier = classifier
        self.register_buffer("keep", torch.tensor(indices, dtype=torch.long), persistent=False)
        names = getattr(classifier, "class_names", None)
        self.class_names = [str(names[i]) for i in indices] if names else list(class_names)
        self.num_classes = len(indices)
        self.name = f"{getattr(classifier, 'name', type(classifier).__name__)}>{tag}"

    def forward(self, images: Tensor) -> Tensor:
        return self.classifier(images).index_select(1, self.keep)

    def train(self, mode: bool = True) -> SubsetClassifier:
        return super().train(False)  # a tested classifier is a fixed function (see ImageClassifier.train)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, num_classes={self.num_classes}"


@dataclass(frozen=True)
class LogitProtocol:
    """An evaluation protocol over a subset of the 1k classes (``protocol=imagenet_a_200``): :meth:`wrap` restricts
    a classifier's logits to it."""

    name: str
    wnids: tuple[str, ...]
    indices: tuple[int, ...]

    def wrap(self, classifier: nn.Module) -> SubsetClassifier:
        return SubsetClassifier(classifier, self.indices, self.wnids, self.name)


def logit_protocol(subset: str = "imagenet_a", name: str | None = None) -> LogitProtocol:
    """Hydra target of ``conf/protocol/*.yaml``: the protocol of a timm-listed ImageNet subset."""
    wnids, indices = imagenet_subset(subset)
    return LogitProtocol(name or f"{subset}_{len(wnids)}", wnids, indices)
