"""Clean accuracy of a comparison's models on further image sets: the second ID test sets of multi-ID effective
robustness (:mod:`genEval.campaigns.id_sets`) and the fixed corruptions of the search's sources
(:mod:`genEval.campaigns.fixed_shift`).

No search runs here: each model classifies the images once, ``f(x) == y`` per image. Every model gets the same
images in the same order. :func:`predict_correct` is that one pass; :func:`per_model` builds each model from its
factory in turn (one in memory at a time, as the comparison's own runs do) and hands it to a scoring function.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from genEval.interfaces import build_entry, hook
from genEval.search.execution import Execution, resolve_device

log = logging.getLogger(__name__)


def image_batches(data: Any, batch_size: int) -> Iterable[tuple[Tensor, Tensor, list[str]]]:
    """``data`` in order as batches of (images (B, C, H, W) in [0, 1], labels (B,), source ids)."""
    for start in range(0, len(data), batch_size):
        items = [data[i] for i in range(start, min(start + batch_size, len(data)))]
        yield torch.stack([x for x, _, _ in items]), torch.tensor([int(y) for _, y, _ in items]), [s for *_, s in items]


@torch.no_grad()
def predict_correct(classifier: Any, images: Tensor, labels: Tensor, device: torch.device) -> np.ndarray:
    """(B,) bool: the classifier's top class equals the label, for images (B, C, H, W) in [0, 1]."""
    logits = classifier(images.to(device))
    return (logits.argmax(1).cpu() == labels).numpy()


def check_classes(name: str, classifier: Any, class_names: list[str], what: str) -> None:
    """Refuse a model whose logits do not cover the image set's classes (naming both)."""
    n = hook(classifier, "num_classes")
    if n is not None and int(n) != len(class_names):
        raise ValueError(
            f"{name} returns {n} logits but {what} has {len(class_names)} classes ({', '.join(class_names[:5])}...); "
            "score the models on image sets with their classes."
        )


def per_model(
    classifiers: Mapping[str, Any], score: Callable[[str, Any, torch.device], Any], execution: Execution | None
) -> dict[str, Any]:
    """``score(name, classifier, device)`` for every model, each built from its entry (a classifier or a factory)
    and released before the next."""
    device = resolve_device((execution or Execution()).device)
    out = {}
    for name, entry in classifiers.items():
        clf = build_entry(entry)
        if isinstance(clf, torch.nn.Module):
            clf = clf.to(device).eval()
        out[name] = score(name, clf, device)
        del clf
    return out
