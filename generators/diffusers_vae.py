"""diffusers autoencoders (Stable Diffusion VAEs, TAESD tiny autoencoders) as genEval generators.

The paper's search walks the latent ``z`` of ``x = D(z)`` (Zhang et al., ICLR 2024, Sec. 3.2) and its
generator ablation (Table 3) swaps the latent space; this module plugs in any autoencoder diffusers
can load with ``from_pretrained``:

* ``AutoencoderKL`` (Stable Diffusion VAEs such as ``stabilityai/sd-vae-ft-mse``, FLUX VAEs, ...):
  ``encode`` takes the *mode* of the posterior (deterministic, so the same image always starts from
  the same latent) and returns ``(mode - shift_factor) * scaling_factor``; ``decode`` undoes that.
* ``AutoencoderTiny`` (TAESD family, e.g. ``madebyollin/taesd``): its encoder output is the latent;
  the same ``scaling_factor`` / ``shift_factor`` handling applies (TAESD ships 1.0 / 0.0).

Both diffusers classes take and return images in ``[-1, 1]`` (``AutoencoderTiny`` maps ``[-1, 1]`` to
the ``[0, 1]`` TAESD convention inside its ``EncoderTiny`` and back inside ``DecoderTiny``), so the
adapter maps genEval's ``[0, 1]`` images to ``[-1, 1]`` before encoding and back (clamped) after decoding.

Why scale the latents: the scaling factor makes the latent roughly unit-variance, so a search step
size means about the same thing across VAEs (and matches the latent space diffusion models use).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from pathlib import Path

import torch
from torch import Tensor, nn

from generators.common import prepare_generator_input, run_dtype
from genEval.declared import Declaration, square
from genEval.kernels import in_nhwc_graph, like_weight, nhwc_upsample_nearest, repeated_blocks

log = logging.getLogger(__name__)

KINDS = ("auto", "kl", "tiny")
_CLASS_KIND = {"AutoencoderKL": "kl", "AutoencoderTiny": "tiny"}
_WEIGHT_FILES = (
    "diffusion_pytorch_model.safetensors",
    "diffusion_pytorch_model.bin",
    "diffusion_pytorch_model.fp16.safetensors",
    "diffusion_pytorch_model.fp16.bin",
)
_TRUTHY = ("1", "true", "yes", "on")


@functools.cache
def nhwc_classes() -> dict[type, type]:
    """diffusers' modules that return NCHW from NHWC input, and their NHWC subclasses (``nhwc_classes`` hook)."""
    from diffusers.models.upsampling import Upsample2D

    class NHWCUpsample2D(Upsample2D):
        """``Upsample2D`` NHWC both ways inside a compiled graph: nearest 2x on the NHWC memory
        (:func:`genEval.kernels.nhwc_upsample_nearest`), without diffusers' ``.contiguous()`` at batch >= 64 (a
        work-around for an eager CUDA NHWC up-sampling bug, diffusers#984, that turns NHWC into NCHW; inside a
        graph inductor writes the kernel). Eager runs, and up-samplers with a norm, a transposed conv or an output
        size, run diffusers' code."""

        def forward(self, hidden_states: Tensor, output_size: int | None = None, *args, **kwargs) -> Tensor:
            plain = self.interpolate and self.norm is None and not self.use_conv_transpose and output_size is None
            if not (plain and in_nhwc_graph(hidden_states)) or args or kwargs:
                return super().forward(hidden_states, output_size, *args, **kwargs)
            x = nhwc_upsample_nearest(hidden_states, 2)
            if not self.use_conv:
                return x
            return self.conv(x) if self.name == "conv" else self.Conv2d_0(x)

    return {Upsample2D: NHWCUpsample2D}


def _looks_like_path(pretrained: str) -> bool:
    """A local path rather than a hub id ``org/name``: exists, or is spelled like a path."""
    if Path(pretrained).expanduser().exists():
        return True
    spelled_as_path = pretrained.startswith(("/", "./", "../", "~", ".\\")) or "\\" in pretrained
    return spelled_as_path or pretrained.count("/") > 1


def _offline_hint(pretrained: str) -> str:
    return (
        f"The model hub cannot be reached for '{pretrained}' (offline, HF_HUB_OFFLINE=1, or the id does "
        "not exist) and it is not in the local Hugging Face cache. Download the VAE on a machine with "
        "internet access (e.g. `huggingface-cli download stabilityai/sd-vae-ft-mse --local-dir "
        "/path/to/local/vae_dir`) and point generator.pretrained=/path/to/local/vae_dir (a directory "
        "holding config.json and diffusion_pytorch_model.safetensors)."
    )


def _read_local_config(folder: Path) -> dict:
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
        present = names[:6] + ([f"... +{len(names) - 6} more"] if len(names) > 6 else [])
        raise FileNotFoundError(
            f"the diffusers VAE directory '{folder}' has no config.json (found: {present or 'nothing'}). "
            "A diffusers model directory holds config.json next to diffusion_pytorch_model.safetensors, as "
            "written by `vae.save_pretrained(dir)` or `huggingface-cli download <id> --local-dir dir`; "
            "if the VAE sits in a sub-folder of a pipeline (e.g. 'vae/'), set generator.subfolder=vae."
        )
    try:
        return json.loads(cfg_path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"'{cfg_path}' is not valid JSON ({err}); re-download the model directory.") from err


def _kind_from_config(config: dict, where: str) -> str:
    cls = config.get("_class_name")
    if cls in _CLASS_KIND:
        return _CLASS_KIND[cls]
    if cls is None:  # hand-written configs: tell the two apart by their fields
        return "tiny" if "encoder_block_out_channels" in config else "kl"
    raise ValueError(
        f"{where} describes a diffusers {cls}, but DiffusersVAEGenerator supports "
        f"{sorted(_CLASS_KIND)} (kind='kl' or 'tiny'). Use another generator for this model."
    )


def _directory_fingerprint(folder: Path) -> str:
    """8 hex digits from config.json and the weight files' names and sizes (cheap, content-sensitive)."""
    h = hashlib.sha256((folder / "config.json").read_bytes())
    for name in _WEIGHT_FILES:
        p = folder / name
        if p.is_file():
            h.update(f"{name}:{p.stat().st_size}".encode())
    return h.hexdigest()[:8]


class DiffusersVAEGenerator(nn.Module):
    """A diffusers ``AutoencoderKL`` / ``AutoencoderTiny`` latent space behind genEval's generator contract.

    Args:
        pretrained: a hub id (``"stabilityai/sd-vae-ft-mse"``, ``"madebyollin/taesd"``), a local
            directory with ``config.json`` and the weights (``save_pretrained`` layout), or an already
            built ``AutoencoderKL`` / ``AutoencoderTiny`` instance (used as is, e.g. random-init in
            benchmarks; its default name is ``diffusers-<kind>:memory-<config hash>``).
        subfolder: folder inside ``pretrained`` holding the VAE (``"vae"`` for a full pipeline repo).
        kind: ``"kl"`` (AutoencoderKL), ``"tiny"`` (AutoencoderTiny) or ``"auto"`` (read ``_class_name``
            from ``config.json``).
        image_size: when set, ``encode`` first resizes images to this side (multiple of ``downsample``).
        precision: ``"fp32" | "bf16" | "fp16"``: the precision the VAE runs in (low precision is meant for
            CUDA). Latents in and out of ``encode``/``decode`` and decoded images stay float32, so the search's
            update arithmetic is always fp32. ``dtype`` (``float32 | bfloat16 | float16``): its old name,
            deprecated.
        scale_latents: apply the model's ``(z - shift_factor) * scaling_factor`` (default); ``False``
            walks the raw posterior mode.
        local_files_only: never contact the hub; ``None`` follows ``HF_HUB_OFFLINE``.
        name: id recorded in results; default ``diffusers-<kind>:<hub id>`` or, for a local directory,
            ``diffusers-<kind>:<dir name>-<hash of config and weight sizes>``.

    Shapes: images ``(B, 3, H, W)`` in ``[0, 1]`` -> latents ``(B, latent_channels, H/d, W/d)`` (``d =
    downsample``, 8 for Stable Diffusion VAEs and TAESD) -> images ``(B, 3, H, W)`` in ``[0, 1]``.
    """

    def __init__(
        self,
        pretrained: str | Path | nn.Module,
        subfolder: str | None = None,
        kind: str = "auto",
        image_size: int | None = None,
        precision: str = "fp32",
        dtype: str | torch.dtype | None = None,
        scale_latents: bool = True,
        local_files_only: bool | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(
                f"kind={kind!r} is not a diffusers VAE kind; allowed: {list(KINDS)} ('kl' for "
                "AutoencoderKL / Stable Diffusion VAEs, 'tiny' for AutoencoderTiny / TAESD, "
                "'auto' to read config.json)."
            )
        dtype_run = run_dtype(precision, dtype)
        self.subfolder = subfolder or None
        if local_files_only is None:
            local_files_only = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUTHY
        self.local_files_only = bool(local_files_only)
        is_local = in_memory = False
        if isinstance(pretrained, nn.Module):  # an already built diffusers model (notebooks, benchmarks)
            in_memory = True
            config = dict(getattr(pretrained, "config", None) or {})
            config.setdefault("_class_name", type(pretrained).__name__)
            where = f"the given {type(pretrained).__name__}"
            self.pretrained = f"<in-memory {type(pretrained).__name__}>"
        else:
            if pretrained is None or str(pretrained).strip() in ("", "???"):
                raise ValueError(
                    "DiffusersVAEGenerator needs pretrained=<hub id or local directory>, e.g. "
                    "generator.pretrained=stabilityai/sd-vae-ft-mse or =/path/to/local/vae_dir."
                )
            self.pretrained = str(pretrained)
            is_local = _looks_like_path(self.pretrained)
            if is_local:
                root = Path(self.pretrained).expanduser()
                if not root.is_dir():
                    raise FileNotFoundError(
                        f"the diffusers VAE directory '{root}' does not exist. Set generator.pretrained to a "
                        "directory holding config.json and the weights, or to a hub id such as "
                        "stabilityai/sd-vae-ft-mse."
                    )
                folder = root / self.subfolder if self.subfolder else root
                if not folder.is_dir():
                    raise FileNotFoundError(
                        f"'{root}' has no sub-folder '{self.subfolder}' (subfolder="
                        f"{self.subfolder!r}); set generator.subfolder=null or to the "
                        "VAE's folder."
                    )
                config = _read_local_config(folder)
                where = f"'{folder / 'config.json'}'"
            else:
                config = self._load_hub_config()
                where = f"the config of '{self.pretrained}'"
        found = _kind_from_config(config, where)
        if kind != "auto" and kind != found:
            raise ValueError(
                f"kind={kind!r} but {where} describes an {config.get('_class_name', found)} "
                f"(kind={found!r}); set generator.kind={found} or kind=auto."
            )
        self.kind = found
        self.vae = pretrained if in_memory else self._load_model(is_local)
        if next(self.vae.parameters()).dtype != dtype_run:  # (diffusers warns on every .to(dtype) call)
            self.vae.to(dtype_run)

        cfg = self.vae.config
        if self.kind == "kl":
            self.downsample = 2 ** (len(cfg.block_out_channels) - 1)
        else:
            self.downsample = 2 ** (len(cfg.encoder_block_out_channels) - 1)
            up = int(cfg.upsampling_scaling_factor) ** (len(cfg.num_decoder_blocks) - 1)
            if up != self.downsample:
                raise ValueError(
                    f"{where}: the AutoencoderTiny encoder down-samples by {self.downsample} "
                    f"but its decoder up-samples by {up}; decoded images would not match the "
                    "input size."
                )
        self.channels = int(cfg.in_channels)
        self.out_channels = int(cfg.out_channels)
        self.latent_channels = int(cfg.latent_channels)
        self.scale_latents = bool(scale_latents)
        scaling, shift = getattr(cfg, "scaling_factor", None), getattr(cfg, "shift_factor", None)
        self.scaling_factor = float(scaling or 1.0) if self.scale_latents else 1.0
        self.shift_factor = float(shift or 0.0) if self.scale_latents else 0.0

        if image_size is not None and (int(image_size) <= 0 or int(image_size) % self.downsample):
            raise ValueError(
                f"DiffusersVAEGenerator: image_size={image_size} must be a positive multiple of "
                f"{self.downsample} (this VAE's down-sampling factor), or null to keep the "
                "size."
            )
        self.image_size = None if image_size is None else int(image_size)
        if name is None:
            tag = self.pretrained + (f"/{self.subfolder}" if self.subfolder else "")
            if is_local:
                tag = f"{folder.resolve().name}-{_directory_fingerprint(folder)}"
            elif in_memory:
                cfg_json = json.dumps(
                    {k: v for k, v in dict(cfg).items() if not k.startswith("_")}, sort_keys=True, default=str
                )
                tag = f"memory-{hashlib.sha256(cfg_json.encode()).hexdigest()[:8]}"
            name = f"diffusers-{self.kind}:{tag}"
        self.name = str(name)
        self.eval()
        self.requires_grad_(False)
        log.info(
            "loaded %s (%s, %d latent channels, %dx down-sampling, scaling %.5g, shift %.5g)",
            self.name,
            type(self.vae).__name__,
            self.latent_channels,
            self.downsample,
            self.scaling_factor,
            self.shift_factor,
        )

    # -- loading ---------------------------------------------------------------------------------
    @classmethod
    def declare(cls, image_size: int | None = None, **_) -> Declaration:
        """RGB images (resized to ``image_size`` when set); the latent space is only known from the VAE's config."""
        return Declaration(channels=3, size=square(image_size))

    def _hub_kwargs(self) -> dict:
        kw: dict = {"local_files_only": self.local_files_only}
        if self.subfolder:
            kw["subfolder"] = self.subfolder
        return kw

    def _load_hub_config(self) -> dict:
        from diffusers import AutoencoderKL

        try:
            return dict(AutoencoderKL.load_config(self.pretrained, **self._hub_kwargs()))
        except OSError as err:
            raise OSError(
                f"{_offline_hint(self.pretrained)} (diffusers said: {str(err).splitlines()[0][:300]})"
            ) from err

    def _load_model(self, is_local: bool) -> nn.Module:
        from diffusers import AutoencoderKL, AutoencoderTiny

        cls = AutoencoderKL if self.kind == "kl" else AutoencoderTiny
        source = str(Path(self.pretrained).expanduser()) if is_local else self.pretrained
        try:
            return cls.from_pretrained(source, **self._hub_kwargs())
        except OSError as err:
            if is_local:
                where = source + (f"/{self.subfolder}" if self.subfolder else "")
                raise OSError(
                    f"could not load the {cls.__name__} weights from '{where}': "
                    f"{str(err).splitlines()[0][:300]} The directory needs config.json plus one of "
                    f"{list(_WEIGHT_FILES[:2])}."
                ) from err
            raise OSError(
                f"{_offline_hint(self.pretrained)} (diffusers said: {str(err).splitlines()[0][:300]})"
            ) from err

    # -- contract --------------------------------------------------------------------------------
    @property
    def dtype(self) -> torch.dtype:
        return next(self.vae.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.vae.parameters()).device

    @property
    def nhwc_classes(self) -> dict[type, type]:
        """The NHWC versions of diffusers' modules (hook: ``memory_format=channels_last``)."""
        return nhwc_classes()

    def compile_regions(self) -> list[nn.Module]:
        """The decoder's repeated blocks (``ResnetBlock2D``, ``Upsample2D``...): ``compile_scope=regional``."""
        return repeated_blocks(self.vae.decoder)

    def encode(self, images: Tensor) -> Tensor:
        """``(B, 3, H, W)`` in ``[0, 1]`` -> float32 latents ``(B, latent_channels, H/d, W/d)``."""
        images = prepare_generator_input(
            images, name=self.name, channels=self.channels, downsample=self.downsample, image_size=self.image_size
        )
        x = images.to(device=self.device, dtype=self.dtype) * 2 - 1
        if self.kind == "kl":
            z = self.vae.encode(x).latent_dist.mode()  # the mean: deterministic, no sampling noise
        else:
            z = self.vae.encode(x).latents
        return (z.float() - self.shift_factor) * self.scaling_factor

    def decode(self, latents: Tensor) -> Tensor:
        """Latents ``(B, latent_channels, h, w)`` -> float32 images ``(B, 3, d*h, d*w)`` in ``[0, 1]``."""
        if latents.ndim != 4 or latents.shape[1] != self.latent_channels:
            raise ValueError(
                f"{self.name} decode expects latents shaped (B, {self.latent_channels}, h, w), "
                f"got {tuple(latents.shape)}. Pass the output of encode()."
            )
        first_conv = next(p for p in self.vae.decoder.parameters() if p.dim() == 4)
        z = like_weight(latents.float(), first_conv) / self.scaling_factor + self.shift_factor  # NHWC in when the
        x = self.vae.decode(z.to(device=self.device, dtype=self.dtype)).sample  # weights are (memory_format)
        return ((x.float() + 1) / 2).clamp(0, 1)

    def forward(self, images: Tensor) -> Tensor:
        """Reconstruction ``D(E(x))``."""
        return self.decode(self.encode(images))

    def extra_repr(self) -> str:
        return (
            f"name={self.name!r}, pretrained={self.pretrained!r}, subfolder={self.subfolder!r}, "
            f"kind={self.kind!r}, image_size={self.image_size}, downsample={self.downsample}, "
            f"latent_channels={self.latent_channels}, dtype={str(self.dtype).removeprefix('torch.')}, "
            f"scaling_factor={self.scaling_factor:.6g}, shift_factor={self.shift_factor:.6g}"
        )
