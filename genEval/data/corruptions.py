"""Fixed corruptions of the same source images: the ImageNet-C families and severities (Hendrycks & Dietterich,
ICLR 2019; the paper's Table 2 puts ImageNet-C accuracy beside FMR), applied by the ``imagecorruptions`` package.

The corruptions come from ``imagecorruptions-imaug`` (the imaug fork of bethgelab's ``imagecorruptions``, same
import name and functions), not from code written here. bethgelab's last release (1.1.2, 2020) no longer imports
on a current Python stack: it reads its frost images through ``pkg_resources``, which setuptools >= 81 no longer
ships (checked here with setuptools 84 and numpy 2.4); the imaug fork reads them with ``importlib`` and fixes the
scikit-image API breakages (bethgelab issues #23, #25, #27), and its functions are the same.

* :data:`FAMILIES`: the 15 ImageNet-C corruptions in their four groups (noise, blur, weather, digital), severities
  1-5.
* :func:`corrupt_image`: one ``(C, H, W)`` image in ``[0, 1]`` corrupted, **seeded**: the package draws from
  NumPy's global RNG (bethgelab issue #11), so the global state is seeded from ``seed`` for the call and restored
  after it, and the two corruptions with a ``seed`` argument (``glass_blur``, ``impulse_noise``) get it too. The
  same (image, corruption, severity, seed) gives the same image on every call and machine, so every model of a
  comparison sees the same corrupted images.
* Small images: the package refuses sides below 32 px. A smaller image (the 16-px digits) is up-sampled by the
  smallest whole factor ``f`` that reaches 32 px (nearest neighbour), corrupted, and averaged back over ``f x f``
  blocks, which returns an uncorrupted image exactly; the corruption is therefore defined at the 32-px scale
  (measured in benchmarks/RESULTS.md, "multi-ID effective robustness"). CIFAR-10 (32 px) is corrupted at its own size.
  Grayscale images are repeated to RGB (the package's own rule) and turned back into luma (ITU-R 601, as the data sets'
  ``channels: 1``), so colour corruptions (saturate) act on brightness only.
* :class:`CorruptedData`: a data set whose images are another's, corrupted; same labels, classes and source ids
  (per-image severity when given several: drawn from the seed and the source id), e.g. the digits test split
  through Gaussian noise as the ID test set of a noise-trained family (``conf/data/digits_noisy.yaml``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

#: The ImageNet-C corruptions by group (Hendrycks & Dietterich 2019, Fig. 1), in the package's order.
FAMILIES: dict[str, tuple[str, ...]] = {
    "noise": ("gaussian_noise", "shot_noise", "impulse_noise"),
    "blur": ("defocus_blur", "glass_blur", "motion_blur", "zoom_blur"),
    "weather": ("snow", "frost", "fog", "brightness"),
    "digital": ("contrast", "elastic_transform", "pixelate", "jpeg_compression"),
}
CORRUPTIONS: tuple[str, ...] = tuple(c for names in FAMILIES.values() for c in names)
SEVERITIES = (1, 2, 3, 4, 5)
#: The smallest side the package corrupts (its own check).
MIN_SIDE = 32
_SEEDED_BY_ARGUMENT = ("glass_blur", "impulse_noise")
_LUMA = np.array([0.299, 0.587, 0.114])


def _package() -> Any:
    try:
        import imagecorruptions
    except ImportError as err:  # pragma: no cover - the [corruptions] extra is part of [test]
        raise ImportError(
            "shift=corruptions needs the ImageNet-C corruptions of the imagecorruptions package: "
            'pip install "geneval-fmr[corruptions]" (imagecorruptions-imaug).'
        ) from err
    return imagecorruptions


def check_corruptions(names: Sequence[str] | None, severities: Sequence[int] | None) -> tuple[list[str], list[int]]:
    """The corruptions and severities to use (None: all 15 and 1-5), refused by name when unknown."""
    names = list(CORRUPTIONS) if names is None else [str(n) for n in names]
    unknown = [n for n in names if n not in CORRUPTIONS]
    if unknown or not names:
        raise ValueError(
            f"unknown corruption(s) {unknown or names}; choose from {', '.join(CORRUPTIONS)} (the ImageNet-C "
            f"families: {', '.join(FAMILIES)})."
        )
    sev = list(SEVERITIES) if severities is None else [int(s) for s in severities]
    if not sev or any(s not in SEVERITIES for s in sev):
        raise ValueError(f"corruption severities {sev} must be whole numbers in 1..5 (ImageNet-C's five levels).")
    return names, sev


def family_of(corruption: str) -> str:
    """The ImageNet-C group of a corruption (noise, blur, weather, digital)."""
    return next(f for f, names in FAMILIES.items() if corruption in names)


def image_seed(seed: int, source_id: str, corruption: str, severity: int) -> int:
    """A 32-bit seed for one corrupted image, from the run's seed and what the image is (stable across processes,
    unlike Python's salted ``hash``)."""
    digest = hashlib.sha256(f"{int(seed)}|{source_id}|{corruption}|{int(severity)}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def corrupt_image(image: Tensor, corruption: str, severity: int, seed: int) -> Tensor:
    """``image`` (C, H, W) float in [0, 1] (C = 1 or 3) under one ImageNet-C corruption at ``severity`` (1-5),
    seeded by ``seed`` (see the module docstring); returns the same shape, float in [0, 1]."""
    check_corruptions([corruption], [severity])
    if image.ndim != 3 or image.shape[0] not in (1, 3):
        raise ValueError(f"corrupt_image takes one (C, H, W) image with C = 1 or 3, got shape {tuple(image.shape)}.")
    c, h, w = image.shape
    u8 = (image.detach().float().clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).cpu().numpy()
    rgb = np.repeat(u8, 3, axis=2) if c == 1 else u8
    f = -(-MIN_SIDE // min(h, w)) if min(h, w) < MIN_SIDE else 1  # ceil(32 / side)
    if f > 1:
        rgb = rgb.repeat(f, axis=0).repeat(f, axis=1)
    kwargs = {"seed": seed} if corruption in _SEEDED_BY_ARGUMENT else {}
    state = np.random.get_state()
    try:
        np.random.seed(seed)
        out = np.asarray(_package().corrupt(rgb, severity=int(severity), corruption_name=corruption, **kwargs), float)
    finally:
        np.random.set_state(state)
    if f > 1:
        out = out.reshape(h, f, w, f, 3).mean(axis=(1, 3))
    if c == 1:
        out = (out @ _LUMA)[..., None]
    return torch.from_numpy(np.clip(out / 255.0, 0.0, 1.0)).float().permute(2, 0, 1).contiguous()


class CorruptedData:
    """The images of ``data`` under one corruption (see the module docstring): ``dataset[i] -> (corrupted image,
    label, source id)`` with the source ids, labels and classes of ``data``. ``severity``: one level, or several
    (each image gets one, drawn from ``seed`` and its source id). ``with_seed`` re-draws ``data``'s subset and
    keeps the corruption's own ``seed``, so a fixed corrupted test set stays fixed."""

    def __init__(self, data: Any, corruption: str, severity: int | Sequence[int] = 3, seed: int = 0) -> None:
        levels = [severity] if isinstance(severity, int) else list(severity)
        check_corruptions([corruption], levels)
        self.data, self.corruption, self.severities, self.seed = data, corruption, [int(s) for s in levels], int(seed)
        self.class_names = list(data.class_names)
        sev = self.severities[0] if len(self.severities) == 1 else "-".join(map(str, self.severities))
        self.name = f"{getattr(data, 'name', type(data).__name__)}+{corruption}@{sev}"

    def __len__(self) -> int:
        return len(self.data)

    def severity_of(self, source_id: str) -> int:
        if len(self.severities) == 1:
            return self.severities[0]
        return self.severities[image_seed(self.seed, source_id, self.corruption, 0) % len(self.severities)]

    def __getitem__(self, index: int) -> tuple[Tensor, int, str]:
        image, label, sid = self.data[index]
        sev = self.severity_of(sid)
        return corrupt_image(image, self.corruption, sev, image_seed(self.seed, sid, self.corruption, sev)), label, sid

    def source_id(self, index: int) -> str:
        return self.data.source_id(index) if hasattr(self.data, "source_id") else self.data[index][2]

    def with_seed(self, seed: int | None) -> CorruptedData:
        inner = self.data.with_seed(seed) if hasattr(self.data, "with_seed") else self.data
        return CorruptedData(inner, self.corruption, self.severities, self.seed)

    def with_limit(self, limit: int) -> CorruptedData:
        inner = self.data.with_limit(limit) if hasattr(self.data, "with_limit") else self.data
        return self if inner is self.data else CorruptedData(inner, self.corruption, self.severities, self.seed)

    def __repr__(self) -> str:
        return f"CorruptedData(name={self.name!r}, n={len(self)}, corruption={self.corruption!r}, seed={self.seed})"
