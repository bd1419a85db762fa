"""The pixel baseline: a "generator" whose latent is the image itself.

With ``E = D = identity`` the paper's latent search (Zhang et al., ICLR 2024, Sec. 3.2, Algorithm 1)
becomes an oracle-vetted pixel-space attack: the same loop, update rule, budget and oracle gating, but
the steps are taken on the pixels. Comparing a latent space against it under the same budget shows what
the generator adds (semantic, on-manifold changes) over a plain gradient attack (the ablation the
paper's Table 3 invites).

``decode`` clamps to ``[0, 1]`` with a straight-through gradient: the forward value is
``clamp(z, 0, 1)`` and the gradient is the identity everywhere. Inside ``[0, 1]`` this is exactly
``torch.clamp``; outside it keeps the gradient alive (``torch.clamp`` would give 0 there and a pixel
pushed past a border could never come back), so ``grad_z = grad_x`` at the image the classifier saw.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor, nn

from generators.common import prepare_generator_input
from genEval.declared import Declaration, square

log = logging.getLogger(__name__)


def straight_through_clamp(z: Tensor, lo: float = 0.0, hi: float = 1.0) -> Tensor:
    """``clamp(z, lo, hi)`` in the forward pass, identity gradient in the backward pass.

    Written as ``clamp(z).detach() + (z - z.detach())``: the second term is exactly 0 in the forward pass
    (so the value is the clamp bit for bit, even for huge ``z``) and has gradient 1.
    """
    return z.clamp(lo, hi).detach() + (z - z.detach())


class IdentityGenerator(nn.Module):
    """Pixel space as the latent space: ``encode(x) = x``, ``decode(z) = clamp(z, 0, 1)``.

    Args:
        image_size: when set, ``encode`` first resizes images to this side (bilinear), so the search
            runs at that resolution; ``None`` keeps the input size.
        channels: when set, ``encode`` checks the images have this many channels (3 for RGB data,
            1 for grey); ``None`` accepts any channel count.

    Shapes: images ``(B, C, H, W)`` in ``[0, 1]`` -> latents ``(B, C, H, W)`` (a copy) -> images.
    ``downsample`` is 1, so any size works.
    """

    name = "identity"
    downsample = 1

    def __init__(self, image_size: int | None = None, channels: int | None = None) -> None:
        super().__init__()
        if image_size is not None and int(image_size) <= 0:
            raise ValueError(
                f"IdentityGenerator: image_size={image_size} must be a positive number of "
                "pixels, or null to keep the input size."
            )
        if channels is not None and int(channels) <= 0:
            raise ValueError(
                f"IdentityGenerator: channels={channels} must be a positive channel count "
                "(3 for RGB, 1 for grey), or null to accept any."
            )
        self.image_size = None if image_size is None else int(image_size)
        self.channels = None if channels is None else int(channels)
        self.eval()

    @classmethod
    def declare(cls, image_size: int | None = None, channels: int | None = None, **_) -> Declaration:
        """Pixels as latents: ``(C, H, W)`` at ``image_size`` when set, any channel count unless ``channels``."""
        return Declaration(channels=channels, size=square(image_size), downsample=1, latent_channels=channels)

    def encode(self, images: Tensor) -> Tensor:
        """``(B, C, H, W)`` in ``[0, 1]`` -> a float copy of the (resized) images, the latent ``z``."""
        channels = self.channels
        if channels is None:  # accept any channel count: check against the input's own
            channels = images.shape[1] if images.ndim == 4 else 0
        images = prepare_generator_input(
            images, name=self.name, channels=channels, downsample=self.downsample, image_size=self.image_size
        )
        if not torch.is_floating_point(images):
            raise ValueError(
                f"IdentityGenerator: expected float images in [0, 1], got dtype {images.dtype}. "
                "Convert with images.float() / 255."
            )
        return images.clone()

    def decode(self, latents: Tensor) -> Tensor:
        """Latents (= pixels) -> images clamped to ``[0, 1]``; the gradient is the identity."""
        if latents.ndim != 4:
            raise ValueError(
                f"IdentityGenerator: decode expects latents shaped (B, C, H, W), got "
                f"{tuple(latents.shape)}. Pass the output of encode()."
            )
        return straight_through_clamp(latents)

    def forward(self, images: Tensor) -> Tensor:
        """Reconstruction ``D(E(x))`` (equal to ``x`` for images in ``[0, 1]``)."""
        return self.decode(self.encode(images))

    def extra_repr(self) -> str:
        return f"name={self.name!r}, image_size={self.image_size}, channels={self.channels}, downsample=1"
