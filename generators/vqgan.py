"""VQGAN (taming-transformers) latent space as a genEval generator.

The paper's default generator is taming-transformers' ``vqgan_imagenet_f16_16384`` (Zhang et al.,
ICLR 2024, Sec. 4 "Generator"; Esser et al., CVPR 2021). The search walks the latent ``z`` of
``x = D(z)`` (Sec. 3.2); this class's default latent is the *continuous* encoder output decoded
directly (``quantize="none"``; docs/method.md, "Choices the paper leaves open");
``quantize="straight_through"`` re-quantises every latent to its nearest codebook vector in the forward pass with
an identity gradient (``z + (z_q - z).detach()``, van den Oord et al. 2017). The paper decodes quantised final
latents, so the ``vqgan_imagenet_f16_16384`` preset quantises (``quantize: straight_through``);
:meth:`VQGANGenerator.decoded_latents` gives the latents the decoder actually sees (for a style mask fitted on
quantised latents). A latent smaller than 4x4 (a 32-px image at f=16) is warned about: set ``image_size``.

The model is assembled from taming's own building blocks (``Encoder``, ``Decoder``,
``VectorQuantizer2``) plus the 1x1 ``quant_conv`` / ``post_quant_conv``, so official checkpoints
load key for key (``encoder.*``, ``decoder.*``, ``quantize.*``, ``quant_conv.*``,
``post_quant_conv.*``; ``loss.*`` is ignored). ``taming.models.vqgan`` is *not* imported: it pulls in
pytorch-lightning and the LPIPS loss, which downloads weights. All taming quirks (its ``print`` on
construction, the ``VectorQuantizer``/``VectorQuantizer2`` naming) are fenced in this file.

Images: ``[0, 1]`` in, mapped to ``[-1, 1]`` inside ``encode``; ``decode`` maps back and clamps.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import logging
import pickle
import sys
import types
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from generators.common import prepare_generator_input, warn_small_latent
from genEval.checkpoints import cache_dir, extract_state_dict, load_checkpoint, load_state_dict_into
from genEval.declared import Declaration, declared_by, square
from genEval.kernels import in_nhwc_graph, is_channels_last, like_weight, nhwc_upsample_nearest, repeated_blocks

log = logging.getLogger(__name__)

QUANTIZE_MODES = ("none", "straight_through")

# Official files of "VQGAN ImageNet (f=16), 16384" (README of CompVis/taming-transformers).
IMAGENET_F16_16384_CKPT_URL = "https://heibox.uni-heidelberg.de/f/867b05fc8c4841768640/?dl=1"
IMAGENET_F16_16384_YAML_URL = "https://heibox.uni-heidelberg.de/f/274fb24ed38341bfa753/?dl=1"
IMAGENET_F16_16384_DDCONFIG: dict = {
    "double_z": False,
    "z_channels": 256,
    "resolution": 256,
    "in_channels": 3,
    "out_ch": 3,
    "ch": 128,
    "ch_mult": [1, 1, 2, 2, 4],
    "num_res_blocks": 2,
    "attn_resolutions": [16],
    "dropout": 0.0,
}
IMAGENET_F16_16384_N_EMBED = 16384
IMAGENET_F16_16384_EMBED_DIM = 256

_REQUIRED_DDCONFIG = (
    "ch",
    "out_ch",
    "ch_mult",
    "num_res_blocks",
    "attn_resolutions",
    "in_channels",
    "resolution",
    "z_channels",
)


def _taming_modules() -> tuple[type, type, type]:
    """Import taming's Encoder, Decoder and vector quantiser without its training stack."""
    try:
        from taming.modules.diffusionmodules.model import Decoder, Encoder
        from taming.modules.vqvae.quantize import VectorQuantizer2
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "VQGANGenerator needs taming-transformers' modules; install them with "
            "`pip install taming-transformers-rom1504` "
            f"({type(err).__name__}: {err})."
        ) from err
    return Encoder, Decoder, VectorQuantizer2


def _nhwc_attention(block: nn.Module, x: Tensor) -> Tensor:
    """taming's ``AttnBlock`` on NHWC input, NHWC out: the same single-head attention over the ``h*w`` positions,
    with the products ordered so that every operand is a view of the NHWC memory (taming's own order returns
    ``(b, c, hw)``, NCHW, and the 1x1 projection after it would transpose)."""
    h = block.norm(x)
    q, k, v = (conv(h).permute(0, 2, 3, 1).flatten(1, 2) for conv in (block.q, block.k, block.v))  # (b, hw, c)
    _, c, hh, ww = x.shape
    attn = torch.softmax(torch.bmm(q, k.transpose(1, 2)) * (int(c) ** (-0.5)), dim=2)  # w[b, i, j] = q_i . k_j
    out = torch.bmm(attn, v).unflatten(1, (hh, ww)).permute(0, 3, 1, 2)  # sum_j w[b, i, j] v_j: NHWC memory
    return x + block.proj_out(out)


@functools.cache
def nhwc_classes() -> dict[type, type]:
    """taming's modules that return NCHW from NHWC input, and their NHWC subclasses (``nhwc_classes`` hook)."""
    from taming.modules.diffusionmodules.model import AttnBlock, Upsample

    class NHWCAttnBlock(AttnBlock):
        """``AttnBlock`` that keeps NHWC input NHWC (:func:`_nhwc_attention`); NCHW input runs taming's code."""

        def forward(self, x: Tensor) -> Tensor:
            return _nhwc_attention(self, x) if is_channels_last(x) else super().forward(x)

    class NHWCUpsample(Upsample):
        """taming's ``Upsample`` (nearest 2x, then a conv) NHWC both ways inside a compiled graph
        (:func:`genEval.kernels.nhwc_upsample_nearest`); elsewhere taming's code."""

        def forward(self, x: Tensor) -> Tensor:
            if not in_nhwc_graph(x):
                return super().forward(x)
            x = nhwc_upsample_nearest(x, 2)
            return self.conv(x) if self.with_conv else x

    return {AttnBlock: NHWCAttnBlock, Upsample: NHWCUpsample}


def _plain(obj: object) -> object:
    """OmegaConf containers / tuples -> plain dicts and lists (so configs hash and pickle cleanly)."""
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, Sequence) and not isinstance(obj, (str, bytes)):
        return [_plain(v) for v in obj]
    return obj


def check_ddconfig(ddconfig: Mapping) -> dict:
    """Validate a taming ``ddconfig`` and return it as a plain dict with defaults filled in."""
    cfg = _plain(ddconfig)
    if not isinstance(cfg, dict):
        raise ValueError(
            f"ddconfig must be a mapping like taming's model.params.ddconfig, got {type(ddconfig).__name__}."
        )
    missing = [k for k in _REQUIRED_DDCONFIG if k not in cfg]
    if missing:
        raise ValueError(
            f"ddconfig lacks {missing}; a taming ddconfig needs {list(_REQUIRED_DDCONFIG)} "
            f"(e.g. {IMAGENET_F16_16384_DDCONFIG})."
        )
    cfg.setdefault("dropout", 0.0)
    cfg.setdefault("double_z", False)
    if cfg["double_z"]:
        raise ValueError(
            "ddconfig.double_z=true describes a KL autoencoder (two moments per latent), not a "
            "VQGAN; set double_z: false."
        )
    if not cfg["ch_mult"]:
        raise ValueError("ddconfig.ch_mult must list at least one channel multiplier, e.g. [1, 2].")
    widths = [int(cfg["ch"]) * int(m) for m in cfg["ch_mult"]]
    if any(w % 32 for w in widths):
        raise ValueError(
            f"ddconfig ch={cfg['ch']} with ch_mult={cfg['ch_mult']} gives widths {widths}, but "
            "taming's GroupNorm uses 32 groups, so every ch*ch_mult must be a multiple of 32 "
            "(e.g. ch: 32 or 64)."
        )
    return cfg


def _short_hash(data: bytes | str, n: int = 8) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:n]


def file_hash(path: str | Path, n: int = 8) -> str:
    """First ``n`` hex digits of the SHA-256 of a file (streamed: official checkpoints are ~1 GB)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:n]


class _LenientUnpickler(pickle.Unpickler):
    """Unpickler that replaces classes from missing modules by inert stand-ins.

    Official taming checkpoints store pytorch-lightning callback objects next to the weights. With
    ``allow_pickle=True`` they must unpickle even where pytorch-lightning (or that exact version) is
    absent; only ``state_dict`` is used, so the stand-ins are never touched.
    """

    def find_class(self, module: str, name: str):  # noqa: D401 - pickle API
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError):
            log.debug("checkpoint references missing %s.%s; using a stand-in", module, name)
            return type(name, (_Missing,), {"__module__": module})


class _Missing:
    """Stand-in for a class that cannot be imported; accepts any construction or state."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __setstate__(self, state) -> None:
        self.__dict__["_state"] = state


_lenient_pickle = types.SimpleNamespace(Unpickler=_LenientUnpickler, load=pickle.load, __name__="pickle")


def _load_vq_checkpoint(path: str | Path, allow_pickle: bool, hint: str) -> object:
    """``load_checkpoint`` (weights_only first), falling back to a lenient unpickle when allowed."""
    try:
        return load_checkpoint(path, what="VQGAN checkpoint", allow_pickle=allow_pickle, hint=hint)
    except (ModuleNotFoundError, AttributeError) as err:
        if not allow_pickle:
            raise
        log.warning(
            "VQGAN checkpoint '%s' references code that is not installed (%s); unpickling with "
            "stand-ins for the missing classes",
            path,
            err,
        )
        return torch.load(path, map_location="cpu", weights_only=False, pickle_module=_lenient_pickle)


class VQGANGenerator(nn.Module):
    """taming-transformers VQGAN: ``encode`` -> continuous latent ``quant_conv(E(x))``, ``decode`` -> image.

    Args:
        ddconfig: taming's ``model.params.ddconfig`` (``ch``, ``ch_mult``, ``num_res_blocks``,
            ``attn_resolutions``, ``in_channels``, ``out_ch``, ``resolution``, ``z_channels``, ...).
        n_embed: codebook size; embed_dim: codebook vector length (latent channels).
        checkpoint: a taming ``.ckpt`` (``{"state_dict": ...}``) or a genEval-trained ``last.ckpt``;
            ``None`` keeps the random initialisation.
        allow_pickle: unpickle checkpoints that hold Python objects (official taming checkpoints hold
            pytorch-lightning state) - only for files you trust.
        quantize: ``"none"`` decodes the continuous latent; ``"straight_through"`` snaps it to the
            nearest codebook vector first (identity gradient).
        image_size: resize images to this side inside ``encode`` (``None``: keep their size).
        name: id recorded in results; default ``vqgan:<checkpoint hash>`` (``vqgan:random-<config hash>``
            without a checkpoint).

    Shapes: images ``(B, in_channels, H, W)`` in ``[0, 1]`` with ``H, W`` multiples of ``downsample``
    -> latents ``(B, embed_dim, H/downsample, W/downsample)`` -> images ``(B, out_ch, H, W)`` in ``[0, 1]``.
    """

    def __init__(
        self,
        ddconfig: Mapping,
        n_embed: int,
        embed_dim: int,
        checkpoint: str | Path | None = None,
        allow_pickle: bool = False,
        quantize: str = "none",
        image_size: int | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__()
        if quantize not in QUANTIZE_MODES:
            raise ValueError(
                f"quantize={quantize!r} is not a VQGAN latent mode; allowed: "
                f"{list(QUANTIZE_MODES)} "
                "('none' decodes the continuous encoder output, 'straight_through' snaps each "
                "latent to its nearest codebook vector with an identity gradient)."
            )
        for key, val in (("n_embed", n_embed), ("embed_dim", embed_dim)):
            if int(val) <= 0:
                raise ValueError(f"VQGANGenerator: {key}={val} must be a positive integer.")
        self.ddconfig = check_ddconfig(ddconfig)
        self.n_embed, self.embed_dim = int(n_embed), int(embed_dim)
        self.quantize_mode = quantize
        self.downsample = 2 ** (len(self.ddconfig["ch_mult"]) - 1)
        self.channels = int(self.ddconfig["in_channels"])
        if image_size is not None and (int(image_size) <= 0 or int(image_size) % self.downsample):
            raise ValueError(
                f"VQGANGenerator: image_size={image_size} must be a positive multiple of "
                f"{self.downsample} (the down-sampling factor 2**(len(ch_mult)-1)), or null."
            )
        self.image_size = None if image_size is None else int(image_size)
        self._small_latent_warned: set = set()

        Encoder, Decoder, VectorQuantizer = _taming_modules()
        z_channels = int(self.ddconfig["z_channels"])
        with contextlib.redirect_stdout(io.StringIO()):  # taming's Decoder prints the z shape
            self.encoder = Encoder(**self.ddconfig)
            self.decoder = Decoder(**self.ddconfig)
        # beta=0.25 and legacy loss weighting as in taming's VQModel, so training matches the original.
        self.quantize = VectorQuantizer(self.n_embed, self.embed_dim, beta=0.25)
        self.quant_conv = nn.Conv2d(z_channels, self.embed_dim, 1)
        self.post_quant_conv = nn.Conv2d(self.embed_dim, z_channels, 1)

        self.checkpoint = None if checkpoint is None else str(checkpoint)
        if checkpoint is not None:
            hint = "Pass the path of a taming .ckpt (or a genEval-trained last.ckpt) as generator.checkpoint."
            obj = _load_vq_checkpoint(checkpoint, allow_pickle, hint)
            sd = extract_state_dict(obj, prefixes=())
            load_state_dict_into(
                self, sd, what=f"VQGAN checkpoint '{checkpoint}'", ignore_prefixes=("loss.",)
            )  # taming also saves its loss modules
            log.info("loaded VQGAN weights from %s", checkpoint)
        if name is None:
            name = (
                f"vqgan:{file_hash(checkpoint)}"
                if checkpoint is not None
                else f"vqgan:random-{_short_hash(repr((self.ddconfig, self.n_embed, self.embed_dim)))}"
            )
        self.name = str(name)
        self.eval()
        self.requires_grad_(False)

    @property
    def dtype(self) -> torch.dtype:
        return self.quant_conv.weight.dtype

    @property
    def nhwc_classes(self) -> dict[type, type]:
        """The NHWC versions of taming's modules (hook: ``memory_format=channels_last``)."""
        return nhwc_classes()

    def compile_regions(self) -> list[nn.Module]:
        """The decoder's repeated blocks (``ResnetBlock``, ``AttnBlock``, ``Upsample``): ``compile_scope=regional``."""
        return repeated_blocks(self.decoder)

    @property
    def device(self) -> torch.device:
        return self.quant_conv.weight.device

    def encode(self, images: Tensor) -> Tensor:
        """``[0, 1]`` images -> continuous latents ``quant_conv(E(2x - 1))``, ``(B, embed_dim, h, w)``."""
        images = prepare_generator_input(
            images, name=self.name, channels=self.channels, downsample=self.downsample, image_size=self.image_size
        )
        out_dtype = images.dtype
        x = images.to(device=self.device, dtype=self.dtype) * 2 - 1
        z = self.quant_conv(self.encoder(x)).to(out_dtype)
        warn_small_latent(
            self.name, tuple(images.shape[-2:]), tuple(z.shape[-2:]), self.downsample, self._small_latent_warned
        )
        return z

    def quantize_latents(self, latents: Tensor) -> tuple[Tensor, Tensor]:
        """Nearest-codebook latents with a straight-through gradient, and taming's VQ loss.

        Returns ``(z + (z_q - z).detach(), codebook + beta * commitment loss)``.
        """
        z_q, vq_loss, _ = self.quantize(latents)
        return z_q, vq_loss

    def snap(self, latents: Tensor) -> Tensor:
        """Each latent vector snapped to its nearest codebook vector, with the identity gradient (straight
        through), as :meth:`quantize_latents` does without the training loss. The distances are computed in fp32
        whatever the weights' precision: with bf16 weights (``precision=bf16``) a bf16 argmin over 16,384 codes
        would pick near neighbours instead of the nearest. ``(B, embed_dim, h, w)`` -> same shape and dtype."""
        codebook = self.quantize.embedding.weight  # (n_embed, embed_dim)
        z = latents.permute(0, 2, 3, 1)
        flat, book = z.reshape(-1, self.embed_dim).float(), codebook.float()
        dist = flat.pow(2).sum(1, keepdim=True) + book.pow(2).sum(1) - 2 * flat @ book.T
        z_q = codebook[dist.argmin(1)].view(z.shape).permute(0, 3, 1, 2).to(latents.dtype)
        return latents + (z_q - latents).detach()

    @torch.no_grad()
    def decoded_latents(self, latents: Tensor) -> Tensor:
        """The latents the decoder sees: snapped to the codebook under ``straight_through``, else unchanged.

        ``(B, embed_dim, h, w)`` -> same shape and dtype. A run that quantises should store these as its final
        latents, so that ``fit-mask`` fits the style mask on the quantised latents the paper decodes.
        """
        if self.quantize_mode != "straight_through":
            return latents
        z = latents.to(device=self.device, dtype=self.dtype)
        return self.snap(z).to(device=latents.device, dtype=latents.dtype)

    def decode(self, latents: Tensor) -> Tensor:
        """Latents ``(B, embed_dim, h, w)`` -> images in ``[0, 1]``; differentiable in the latents."""
        if latents.ndim != 4 or latents.shape[1] != self.embed_dim:
            raise ValueError(
                f"VQGAN decode expects latents shaped (B, {self.embed_dim}, h, w), got "
                f"{tuple(latents.shape)}. Pass the output of encode()."
            )
        out_dtype = latents.dtype if torch.is_floating_point(latents) else torch.float32
        z = like_weight(latents.to(device=self.device, dtype=self.dtype), self.post_quant_conv.weight)  # NHWC in
        if self.quantize_mode == "straight_through":
            z = self.snap(z)
        x = self.decoder(self.post_quant_conv(z))
        return ((x + 1) / 2).clamp(0, 1).to(out_dtype)

    def forward(self, images: Tensor) -> Tensor:
        """Reconstruction ``D(E(x))`` in the configured quantize mode."""
        return self.decode(self.encode(images))

    def extra_repr(self) -> str:
        dd = self.ddconfig
        return (
            f"name={self.name!r}, quantize={self.quantize_mode!r}, downsample={self.downsample}, "
            f"image_size={self.image_size}, n_embed={self.n_embed}, embed_dim={self.embed_dim}, "
            f"ch={dd['ch']}, ch_mult={dd['ch_mult']}, in_channels={dd['in_channels']}, "
            f"checkpoint={self.checkpoint!r}"
        )

    @classmethod
    def from_taming_config(
        cls, config: str | Path | Mapping, checkpoint: str | Path | None = None, **kwargs
    ) -> VQGANGenerator:
        """Build from a taming yaml (``model.params.{ddconfig, n_embed, embed_dim}``) and a checkpoint."""
        params = read_taming_config(config)
        return cls(
            ddconfig=params["ddconfig"],
            n_embed=params["n_embed"],
            embed_dim=params["embed_dim"],
            checkpoint=checkpoint,
            **kwargs,
        )


def read_taming_config(config: str | Path | Mapping) -> dict:
    """Read ``ddconfig``, ``n_embed``, ``embed_dim`` from a taming config (yaml path or mapping)."""
    where = "config mapping"
    if not isinstance(config, Mapping):
        import yaml

        path = Path(config).expanduser()
        if not path.is_file():
            raise FileNotFoundError(
                f"taming config not found: '{path}'. Pass the model yaml that came "
                "with the checkpoint (e.g. configs/model.yaml of the release)."
            )
        where = f"taming config '{path}'"
        config = yaml.safe_load(path.read_text())
    config = _plain(config)
    model = config.get("model", config) if isinstance(config, dict) else None
    if not isinstance(model, dict):
        raise ValueError(f"{where} is not a taming model config (expected a 'model:' mapping).")
    target = str(model.get("target", ""))
    if "Gumbel" in target or "EMA" in target:
        raise ValueError(
            f"{where} targets {target}; VQGANGenerator supports taming's VQModel (plain "
            "VectorQuantizer) checkpoints only."
        )
    params = model.get("params", model)
    missing = [k for k in ("ddconfig", "n_embed", "embed_dim") if k not in params]
    if missing:
        raise ValueError(
            f"{where} lacks model.params.{missing}; a taming VQModel config holds "
            "model.params.ddconfig, model.params.n_embed and model.params.embed_dim."
        )
    if params.get("remap") is not None:
        raise ValueError(
            f"{where} uses a codebook remap ({params['remap']}), which VQGANGenerator does not "
            "support; use a config without model.params.remap."
        )
    return {"ddconfig": params["ddconfig"], "n_embed": int(params["n_embed"]), "embed_dim": int(params["embed_dim"])}


def from_taming_config(config: str | Path | Mapping, checkpoint: str | Path | None = None, **kwargs) -> VQGANGenerator:
    """Any taming VQModel: yaml path + checkpoint path (Hydra target of ``conf/generator/vqgan.yaml``)."""
    return VQGANGenerator.from_taming_config(config, checkpoint, **kwargs)


def _resolve_file(explicit: str | Path | None, cached: Path, url: str, download: bool, what: str) -> Path | None:
    if explicit is not None:
        return Path(explicit).expanduser()
    if cached.is_file():
        return cached
    if download:
        log.info("downloading %s from %s to %s", what, url, cached)
        tmp = cached.with_name(cached.name + ".part")
        torch.hub.download_url_to_file(url, str(tmp), progress=sys.stderr.isatty())
        tmp.replace(cached)
        return cached
    return None


def _declare_f16_16384(image_size: int | None = None, **_) -> Declaration:
    """RGB images -> ``(256, H/16, W/16)`` latents (:mod:`genEval.declared`; checked before the checkpoint loads)."""
    return Declaration(channels=3, size=square(image_size), downsample=16, latent_channels=IMAGENET_F16_16384_EMBED_DIM)


@declared_by(_declare_f16_16384)
def vqgan_imagenet_f16_16384(
    checkpoint: str | Path | None = None,
    config: str | Path | None = None,
    download: bool = False,
    allow_pickle: bool = False,
    quantize: str = "straight_through",
    image_size: int | None = None,
) -> VQGANGenerator:
    """The paper's default generator, taming's ``vqgan_imagenet_f16_16384`` (f=16, 16384 codes), decoding
    quantised latents as the paper does (``quantize="straight_through"``; ``"none"`` decodes the continuous
    encoder output).

    Files are taken from the explicit paths, else from ``cache_dir("vqgan_imagenet_f16_16384")``
    (``last.ckpt``, ``model.yaml``), else downloaded there when ``download=True``. Without a yaml the
    release's ddconfig is used. The official checkpoint holds pytorch-lightning objects, so it needs
    ``allow_pickle=True`` (only for a file you trust).
    """
    folder = cache_dir("vqgan_imagenet_f16_16384")
    ckpt = _resolve_file(checkpoint, folder / "last.ckpt", IMAGENET_F16_16384_CKPT_URL, download, "checkpoint")
    if ckpt is None or not ckpt.is_file():
        looked = ckpt if ckpt is not None else folder / "last.ckpt"
        raise FileNotFoundError(
            f"vqgan_imagenet_f16_16384 checkpoint not found (looked at '{looked}'). Either set "
            "generator.download=true to fetch it into that cache, or download it yourself from "
            f"{IMAGENET_F16_16384_CKPT_URL} (checkpoint, save as last.ckpt) and "
            f"{IMAGENET_F16_16384_YAML_URL} (config, save as model.yaml) into '{folder}', or pass a local "
            "file with generator.checkpoint=/path/to/last.ckpt (and generator.config=/path/to/model.yaml)."
        )
    yaml_path = _resolve_file(config, folder / "model.yaml", IMAGENET_F16_16384_YAML_URL, download, "config")
    if yaml_path is not None:
        params = read_taming_config(yaml_path)
    else:
        log.info("no model.yaml for vqgan_imagenet_f16_16384; using the release's built-in ddconfig")
        params = {
            "ddconfig": IMAGENET_F16_16384_DDCONFIG,
            "n_embed": IMAGENET_F16_16384_N_EMBED,
            "embed_dim": IMAGENET_F16_16384_EMBED_DIM,
        }
    return VQGANGenerator(
        **params,
        checkpoint=ckpt,
        allow_pickle=allow_pickle,
        quantize=quantize,
        image_size=image_size,
        name="vqgan_imagenet_f16_16384",
    )
