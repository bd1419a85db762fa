"""Input checks and precision handling shared by the generator backends (one backend per file; this is
the small shared helper they all import)."""

from __future__ import annotations

import hashlib
import logging
import warnings
from collections.abc import Mapping

import torch
from torch import Tensor

from genEval.interfaces import precision_name, resize_images

log = logging.getLogger(__name__)

#: Latents smaller than this (per side) keep too little of the image for a meaningful latent walk.
MIN_LATENT_SIDE = 4

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def resolve_dtype(precision: str | torch.dtype, key: str = "generator.precision") -> torch.dtype:
    """``"fp32" | "bf16" | "fp16"`` (genEval's one precision vocabulary) -> torch dtype; the older spellings
    ``float32 | bfloat16 | float16`` and torch dtypes are accepted with a deprecation note
    (:func:`genEval.interfaces.precision_name`); anything else is a SettingError naming ``key``."""
    return _DTYPES[precision_name(precision, key)]


def run_dtype(precision: str, dtype: str | torch.dtype | None) -> torch.dtype:
    """The dtype a generator's networks run in: ``precision`` (``generator.precision``), or the deprecated
    ``generator.dtype`` when a config still sets it (with a note naming the key to use instead)."""
    if dtype is None:
        return resolve_dtype(precision)
    new = precision_name(dtype, "generator.dtype")
    warnings.warn(
        f"generator.dtype is deprecated: write generator.precision={new} (fp32 | bf16 | fp16).",
        FutureWarning,
        stacklevel=3,
    )
    return _DTYPES[new]


def _valid_sides(side: int, multiple: int) -> str:
    lower = (side // multiple) * multiple
    upper = lower + multiple
    near = [s for s in (lower, upper) if s > 0]
    return " or ".join(str(s) for s in near)


def prepare_generator_input(
    images: Tensor, *, name: str, channels: int, downsample: int, image_size: int | None
) -> Tensor:
    """Resize (when ``image_size`` is set) and validate images for ``encode``.

    Raises ValueError naming the problem and the fix when the tensor is not ``(B, C, H, W)``, has
    the wrong channel count, or has sides that are not multiples of ``downsample``.
    """
    if images.ndim != 4:
        raise ValueError(
            f"generator '{name}': expected images shaped (B, C, H, W), got "
            f"{tuple(images.shape)}. Add a batch dimension with images.unsqueeze(0)."
        )
    c = images.shape[1]
    if c != channels:
        if c == 1 and channels == 3:
            fix = (
                "set data.channels=3 so grey images are repeated to RGB, or use a generator trained on grey "
                "images (generator=digits_vq for 16-px digits; your own: geneval train-generator data=<data>)"
            )
        elif c == 3 and channels == 1:
            fix = (
                "colour images need a generator trained on RGB images: generator=taef2 (offline; it up-samples "
                "32-px CIFAR-10 to 64 px), or generator=vqgan_imagenet_f16_16384 (the paper's; weights from the "
                "hub). Convert to grey (data.channels=1) only for data that are grey"
            )
        else:
            fix = f"give the generator {channels}-channel images"
        raise ValueError(
            f"generator '{name}' expects {channels}-channel images but got {c} channels "
            f"(shape {tuple(images.shape)}); {fix}."
        )
    images = resize_images(images, image_size)
    h, w = images.shape[-2:]
    if h % downsample or w % downsample:
        raise ValueError(
            f"generator '{name}' down-samples by {downsample}, so image height and width must be "
            f"multiples of {downsample}, but got {h}x{w}. Sizes that work: {downsample}, "
            f"{2 * downsample}, {3 * downsample}, ... (nearest: height {_valid_sides(h, downsample)}, "
            f"width {_valid_sides(w, downsample)}). Set generator.image_size=<multiple of {downsample}> "
            "to resize the images inside the generator."
        )
    return images


def state_dict_digest(state_dict: Mapping[str, Tensor], n: int = 12) -> str:
    """First ``n`` hex digits of a SHA-256 over a state dict's keys and tensor bytes (sorted by key).

    The id of a generator's *weights*, whatever file format they came in: results and style masks record
    it, so a mask fitted for one set of weights is refused for another (``StyleMask.check_compatible``).
    """
    h = hashlib.sha256()
    for key in sorted(state_dict):
        h.update(key.encode())
        # raw bytes of any dtype (bfloat16 has no numpy twin); reshape(-1) also covers 0-dim buffers
        h.update(state_dict[key].detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:n]


def warn_small_latent(
    name: str, image_hw: tuple[int, int], latent_hw: tuple[int, int], downsample: int, warned: set
) -> None:
    """Warn (once per image size, tracked in ``warned``) when a latent is smaller than 4x4.

    A 32-px CIFAR image through a 16x down-sampling VQGAN gives a 2x2 latent: the decoder then draws the image
    from four codes, the reconstruction loses the picture, and PA measures the generator. The fix is to
    up-sample the images inside the generator (``generator.image_size``).
    """
    h, w = (int(v) for v in latent_hw)
    if min(h, w) >= MIN_LATENT_SIDE or tuple(image_hw) in warned:
        return
    warned.add(tuple(image_hw))
    side = MIN_LATENT_SIDE * downsample
    log.warning(
        "generator '%s': %dx%d images give %dx%d latents (down-sampling %d), smaller than %dx%d; the "
        "reconstructions lose most of the image. Set generator.image_size=%d or larger (e.g. %d) to "
        "up-sample the images inside the generator.",
        name,
        image_hw[0],
        image_hw[1],
        h,
        w,
        downsample,
        MIN_LATENT_SIDE,
        MIN_LATENT_SIDE,
        side,
        max(side, 256),
    )
