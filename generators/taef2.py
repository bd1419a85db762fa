"""TAEF2: the tiny autoencoder of the FLUX.2 VAE latent space as a genEval generator.

Implements the TAEF2 architecture (madebyollin/taesd, "tiny autoencoder" family) from its published description
(madebyollin/taesd); the code is written here, not copied. It
serves as a small, real, pretrained latent space for the paper's search (Zhang et al., ICLR 2024,
Sec. 3.2: walk the latent ``z`` of ``x = D(z)``; Table 3 ablates the generator).

* Encoder ``E``: images ``(B, 3, H, W)`` in ``[0, 1]`` -> latents ``(B, 32, H/8, W/8)``.
* Decoder ``D``: latents -> images in ``[0, 1]`` (clamped), differentiable in the latents.
* ``name``: ``"taef2:<first 12 hex of a SHA-256 over the loaded weights>"``, so results and style masks
  name the weights, not just the architecture (a mask fitted for one set of weights is refused for another).

Images enter the network directly in ``[0, 1]`` (no ``[-1, 1]`` shift): measured on the 20 lossless
CIFAR-10 PNGs up-sampled to 64 px this gives ~32 dB reconstruction PSNR, while feeding ``[-1, 1]``
does not reconstruct at all.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import Tensor, nn

from generators.common import prepare_generator_input, run_dtype, state_dict_digest
from genEval.checkpoints import extract_state_dict, load_checkpoint, load_state_dict_into
from genEval.declared import Declaration, square
from genEval.kernels import like_weight, repeated_blocks

log = logging.getLogger(__name__)

LATENT_CHANNELS = 32
WIDTH = 64


def _conv(n_in: int, n_out: int, **kw) -> nn.Conv2d:
    return nn.Conv2d(n_in, n_out, 3, padding=1, **kw)


class Clamp(nn.Module):
    """Soft clamp ``tanh(x / 3) * 3``: keeps decoder inputs in (-3, 3) without killing gradients."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(x / 3) * 3


class Block(nn.Module):
    """``out = ReLU(conv(x) + x)``; a *pooled* block first adds a channel-mixing 1x1 branch.

    ``conv`` = conv3x3, ReLU, conv3x3, ReLU, conv3x3 (state-dict keys ``conv.{0,2,4}``);
    ``pool`` = 1x1 conv 64->256 (no bias), GroupNorm(4, 256), ReLU, 1x1 conv 256->64 (no bias)
    (keys ``pool.{0,1,3}``).
    """

    def __init__(self, channels: int = WIDTH, pooled: bool = False) -> None:
        super().__init__()
        self.pooled = pooled
        if pooled:
            self.pool = nn.Sequential(
                nn.Conv2d(channels, 4 * channels, 1, bias=False),
                nn.GroupNorm(4, 4 * channels),
                nn.ReLU(),
                nn.Conv2d(4 * channels, channels, 1, bias=False),
            )
        self.conv = nn.Sequential(
            _conv(channels, channels), nn.ReLU(), _conv(channels, channels), nn.ReLU(), _conv(channels, channels)
        )
        self.fuse = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        if self.pooled:
            x = x + self.pool(x)
        return self.fuse(self.conv(x) + x)

    def extra_repr(self) -> str:
        return f"pooled={self.pooled}"


def build_encoder() -> nn.Sequential:
    """TAEF2 encoder, indices 0..14 as in the released state dict."""
    w = WIDTH
    return nn.Sequential(
        _conv(3, w),
        Block(w),  # 0, 1
        _conv(w, w, stride=2, bias=False),
        Block(w),
        Block(w),
        Block(w),  # 2, 3-5
        _conv(w, w, stride=2, bias=False),
        Block(w),
        Block(w),
        Block(w),  # 6, 7-9
        _conv(w, w, stride=2, bias=False),  # 10
        Block(w, pooled=True),
        Block(w, pooled=True),
        Block(w, pooled=True),  # 11-13
        _conv(w, LATENT_CHANNELS),  # 14
    )


def build_decoder() -> nn.Sequential:
    """TAEF2 decoder, indices 0..19 as in the released state dict."""
    w = WIDTH
    return nn.Sequential(
        Clamp(),
        _conv(LATENT_CHANNELS, w),
        nn.ReLU(),  # 0, 1, 2
        Block(w, pooled=True),
        Block(w, pooled=True),
        Block(w, pooled=True),  # 3-5
        nn.Upsample(scale_factor=2),
        _conv(w, w, bias=False),  # 6, 7
        Block(w),
        Block(w),
        Block(w),  # 8-10
        nn.Upsample(scale_factor=2),
        _conv(w, w, bias=False),  # 11, 12
        Block(w),
        Block(w),
        Block(w),  # 13-15
        nn.Upsample(scale_factor=2),
        _conv(w, w, bias=False),  # 16, 17
        Block(w),
        _conv(w, 3),  # 18, 19
    )


class TAEF2Generator(nn.Module):
    """TAEF2 latent space: ``encode`` ``[0,1]`` images -> ``(B, 32, H/8, W/8)``; ``decode`` back.

    Args:
        encoder_path / decoder_path: the fp16 state dicts ``taef2_{encoder,decoder}.pth``
            (``.pth`` loaded with ``weights_only``, or ``.safetensors``); ``None`` keeps the random
            initialisation (tests only).
        image_size: when set, ``encode`` first resizes images to ``image_size`` px (e.g. 64 for
            32-px CIFAR), and ``decode`` returns images of that size.
        The id ``name`` hashes the weights as loaded (before the cast to ``precision``): ``"taef2:<12 hex>"``.
        precision: ``"fp32" | "bf16" | "fp16"``: the precision the networks run in; inputs are cast to it and
            outputs cast back to the caller's dtype. ``dtype`` (``float32 | bfloat16 | float16``): its old name,
            deprecated.
    """

    downsample = 8
    channels = 3
    latent_channels = LATENT_CHANNELS

    def __init__(
        self,
        encoder_path: str | Path | None = None,
        decoder_path: str | Path | None = None,
        image_size: int | None = None,
        precision: str = "fp32",
        dtype: str | torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if image_size is not None and (int(image_size) <= 0 or int(image_size) % self.downsample):
            raise ValueError(
                f"TAEF2Generator: image_size={image_size} must be a positive multiple of "
                f"{self.downsample} (e.g. 32, 64, 256), or null to keep the input size."
            )
        self.image_size = None if image_size is None else int(image_size)
        self.encoder = build_encoder()
        self.decoder = build_decoder()
        self.encoder_path = None if encoder_path is None else str(encoder_path)
        self.decoder_path = None if decoder_path is None else str(decoder_path)
        hint = (
            "The TAEF2 weights come from madebyollin/taesd (taef2_encoder.pth, taef2_decoder.pth); "
            "set generator.encoder_path / generator.decoder_path to their location."
        )
        for part, path in (("encoder", encoder_path), ("decoder", decoder_path)):
            if path is None:
                continue
            sd = extract_state_dict(load_checkpoint(path, what=f"TAEF2 {part} weights", hint=hint))
            load_state_dict_into(getattr(self, part), sd, what=f"TAEF2 {part} weights '{path}'")
            log.info("loaded TAEF2 %s from %s", part, path)
        if encoder_path is None or decoder_path is None:
            log.warning(
                "TAEF2Generator built with random weights for %s (no path given)",
                " and ".join(p for p, q in (("encoder", encoder_path), ("decoder", decoder_path)) if q is None),
            )
        self.name = f"taef2:{state_dict_digest(self.state_dict())}"
        self.to(run_dtype(precision, dtype))
        self.eval()
        self.requires_grad_(False)

    @classmethod
    def declare(cls, image_size: int | None = None, **_) -> Declaration:
        """RGB images (resized to ``image_size`` when set) -> ``(32, H/8, W/8)`` latents (:mod:`genEval.declared`)."""
        return Declaration(
            channels=cls.channels, size=square(image_size), downsample=cls.downsample, latent_channels=LATENT_CHANNELS
        )

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def encode(self, images: Tensor) -> Tensor:
        """``(B, 3, H, W)`` in ``[0, 1]`` -> latents ``(B, 32, H/8, W/8)`` (after optional resize)."""
        images = prepare_generator_input(
            images, name=self.name, channels=self.channels, downsample=self.downsample, image_size=self.image_size
        )
        out_dtype = images.dtype
        z = self.encoder(images.to(device=self.device, dtype=self.dtype))
        return z.to(out_dtype)

    def decode(self, latents: Tensor) -> Tensor:
        """Latents ``(B, 32, h, w)`` -> images ``(B, 3, 8h, 8w)`` in ``[0, 1]``; differentiable."""
        if latents.ndim != 4 or latents.shape[1] != self.latent_channels:
            raise ValueError(
                f"TAEF2 decode expects latents shaped (B, {self.latent_channels}, h, w), got "
                f"{tuple(latents.shape)}. Pass the output of encode()."
            )
        out_dtype = latents.dtype if torch.is_floating_point(latents) else torch.float32
        z = like_weight(latents.to(device=self.device, dtype=self.dtype), self.decoder[1].weight)  # NHWC in, if its
        x = self.decoder(z)  # weights are (memory_format=channels_last)
        return x.clamp(0, 1).to(out_dtype)

    def forward(self, images: Tensor) -> Tensor:
        """Reconstruction ``D(E(x))``."""
        return self.decode(self.encode(images))

    def compile_regions(self) -> list[nn.Module]:
        """The decoder's repeated ``Block``s (hook of ``compile_scope=regional``)."""
        return repeated_blocks(self.decoder)

    def extra_repr(self) -> str:
        return (
            f"name={self.name!r}, image_size={self.image_size}, downsample={self.downsample}, "
            f"latent_channels={self.latent_channels}, dtype={str(self.dtype).removeprefix('torch.')}, "
            f"encoder_path={self.encoder_path!r}, decoder_path={self.decoder_path!r}"
        )
