"""The tested-classifier wrapper (docs/method.md, "The actors"): :class:`ImageClassifier` makes any model obey genEval's
image contract: it takes float images ``(B, C, H, W)`` in ``[0, 1]`` of any size, resizes them to the model's input
size (no centre crop: genEval's images are already framed, and a crop would hide part of the perturbation),
normalises them with the model's mean/std (torchattacks' rule) and returns ``(B, num_classes)`` logits. Classifiers
are fixed functions under test (:func:`freeze`: eval mode, parameters frozen; gradients with respect to the *input*
still flow, which the latent search of paper Sec. 3.2 needs).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from genEval.checkpoints import (
    extract_state_dict,
    load_checkpoint,
    load_state_dict_into,
)
from genEval.interfaces import SettingError, is_whole, resize_images

log = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_LUMA = (0.299, 0.587, 0.114)


def as_size(size: int | Sequence[int] | None) -> int | tuple[int, int] | None:
    if size is None:
        return None
    if isinstance(size, int) and not isinstance(size, bool):
        if size < 1:
            raise SettingError("input_size", size, "a whole number >= 1, [H, W] or null", "224")
        return size
    if not isinstance(size, Sequence) or isinstance(size, str) or not all(is_whole(s) for s in size):
        raise SettingError("input_size", size, "a whole number >= 1, [H, W] or null", "224")
    seq = [int(s) for s in size]
    if len(seq) == 3:  # (C, H, W) as timm writes it
        seq = seq[1:]
    if len(seq) == 1:
        return seq[0]
    if len(seq) != 2 or min(seq) < 1:
        raise SettingError("input_size", size, "a whole number >= 1, [H, W] or null", "224")
    return (seq[0], seq[1])


class ImageClassifier(nn.Module):
    """Wrap ``model`` so that it takes ``[0, 1]`` images: resize -> channel match -> normalise -> model.

    Args:
        model: maps normalised ``(B, C, H', W')`` images to ``(B, num_classes)`` logits.
        num_classes: number of logits.
        mean, std: per-channel normalisation; their length is the model's channel count (1 or 3).
            1-channel images are repeated for a 3-channel model; 3-channel images become luma for a
            1-channel model.
        input_size: side (int) or ``(H, W)`` the model expects; ``None`` passes images at any size.
        name: id recorded in results and logs.
        class_names: the classes the model was trained on, in logit order, when known (else ``None``).
    """

    def __init__(
        self,
        model: nn.Module,
        num_classes: int,
        mean: Sequence[float],
        std: Sequence[float],
        input_size: int | Sequence[int] | None = None,
        name: str = "classifier",
        class_names: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        mean_t = torch.tensor([float(m) for m in mean], dtype=torch.float32)
        std_t = torch.tensor([float(s) for s in std], dtype=torch.float32)
        if mean_t.numel() != std_t.numel() or mean_t.numel() not in (1, 3):
            raise ValueError(
                f"mean and std must both have 1 or 3 entries (one per channel), got mean "
                f"{list(mean)} and std {list(std)}."
            )
        if bool((std_t <= 0).any()):
            raise ValueError(f"std must be positive, got {list(std)}.")
        if not is_whole(num_classes, 1):
            raise SettingError("num_classes", num_classes, "a whole number >= 1 (the number of logits)", "10")
        if class_names is not None and len(class_names) != int(num_classes):
            raise ValueError(f"{name}: class_names has {len(class_names)} entries but num_classes is {num_classes}.")
        self.model = model
        self.num_classes = int(num_classes)
        self.class_names = None if class_names is None else [str(c) for c in class_names]
        self.input_size = as_size(input_size)
        self.name = str(name)
        self.in_channels = mean_t.numel()
        self.register_buffer("mean", mean_t.view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", std_t.view(1, -1, 1, 1), persistent=False)

    def preprocess(self, images: Tensor) -> Tensor:
        """``[0, 1]`` images -> the model's input (resized, channel-matched, normalised)."""
        if images.ndim != 4:
            raise ValueError(f"{self.name}: expected images shaped (B, C, H, W), got {tuple(images.shape)}.")
        c = images.shape[1]
        if c != self.in_channels:
            if c == 1 and self.in_channels == 3:
                images = images.expand(-1, 3, -1, -1)
            elif c == 3 and self.in_channels == 1:
                w = torch.tensor(_LUMA, dtype=images.dtype, device=images.device).view(1, 3, 1, 1)
                images = (images * w).sum(1, keepdim=True)
            else:
                raise ValueError(
                    f"{self.name} takes {self.in_channels}-channel images but got {c} channels "
                    f"(shape {tuple(images.shape)}). Set data.channels={self.in_channels}."
                )
        images = resize_images(images, self.input_size)
        return (images - self.mean.to(images.dtype)) / self.std.to(images.dtype)

    def forward(self, images: Tensor) -> Tensor:
        logits = self.model(self.preprocess(images))
        if logits.ndim != 2 or logits.shape[1] != self.num_classes:
            raise ValueError(
                f"{self.name} returned logits shaped {tuple(logits.shape)} but num_classes is "
                f"{self.num_classes}; expected ({images.shape[0]}, {self.num_classes}). Set "
                "classifier.num_classes to the model's output size."
            )
        return logits

    def train(self, mode: bool = True) -> ImageClassifier:
        # A tested classifier is a fixed function: BatchNorm/dropout always run in inference mode.
        return super().train(False)

    def extra_repr(self) -> str:
        mean = tuple(round(float(m), 4) for m in self.mean.flatten())
        std = tuple(round(float(s), 4) for s in self.std.flatten())
        return (
            f"name={self.name!r}, num_classes={self.num_classes}, input_size={self.input_size}, mean={mean}, std={std}"
        )


def freeze(clf: ImageClassifier) -> ImageClassifier:
    clf.eval()
    clf.requires_grad_(False)
    log.info("classifier ready: %s (%d parameters)", clf.extra_repr(), sum(p.numel() for p in clf.parameters()))
    return clf


def load_weights(
    model: nn.Module, checkpoint: str | Path, what: str, allow_pickle: bool = False, hint: str = ""
) -> None:
    obj = load_checkpoint(checkpoint, what=what, allow_pickle=allow_pickle, hint=hint)
    if isinstance(obj, nn.Module):  # a whole pickled module (only reachable with allow_pickle)
        obj = obj.state_dict()
    sd = extract_state_dict(obj)
    # Checkpoints saved before PyTorch 0.4.1 (e.g. the shared CIFAR ResNets) lack BatchNorm's
    # num_batches_tracked counters; torch fills them too, and they do not affect inference.
    for key, value in model.state_dict().items():
        if key.endswith("num_batches_tracked") and key not in sd:
            sd[key] = value
    load_state_dict_into(model, sd, what=f"{what} '{checkpoint}'")


def closest(name: str, options: Sequence[str], n: int = 8) -> list[str]:
    close = difflib.get_close_matches(name, options, n=n, cutoff=0.5)
    return close or [o for o in options if name.lower() in o.lower()][:n]
