"""Files with small random weights that stand in for real ones no test can download: taming VQ checkpoints and
their yaml, diffusers VAE folders, a TorchScript classifier, RobustBench's model folder, a tiny open_clip model.

Each stand-in has the layout and the latent space of what it replaces, only narrower, so that a declaration made
from the settings (``genEval.declared``) still describes the built object: the f16 VQGAN stand-in keeps the
release's 16x down-sampling, 256 latent channels and 16,384 codes, with 32 base channels instead of 128.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import torch

from tests.support.toys import tiny_ddconfig

#: The open_clip architecture :func:`tiny_clip` registers (random weights, 32-px images, 32-d embeddings).
TINY_CLIP = "genEval-contract-tiny-clip"


def _taming_yaml(path: Path, ddconfig: dict, n_embed: int, embed_dim: int) -> Path:
    def value(v):
        return str(v).lower() if isinstance(v, bool) else v

    dd = "\n".join(f"      {k}: {value(v)}" for k, v in ddconfig.items())
    head = f"""\
        model:
          target: taming.models.vqgan.VQModel
          params:
            embed_dim: {embed_dim}
            n_embed: {n_embed}
            ddconfig:
        """
    path.write_text(textwrap.dedent(head) + dd + "\n")
    return path


def _vq(ddconfig: dict, n_embed: int, embed_dim: int):
    """A random taming VQ model whose codes are spread like encoder outputs (taming initialises them within
    +-1/n_embed, where every latent snaps to nearly the same image and a wrong snap would go unseen)."""
    from generators.vqgan import VQGANGenerator

    g = VQGANGenerator(ddconfig, n_embed=n_embed, embed_dim=embed_dim)
    with torch.no_grad():
        g.quantize.embedding.weight.normal_()
    return g


def taming_files(root: Path) -> dict[str, Path]:
    """A tiny taming VQModel (yaml, checkpoint in taming's key layout, and the checkpoint `geneval train-generator`
    writes), and a narrow model with the latent space of VQGAN ImageNet f16-16384 (yaml and checkpoint)."""
    from generators.vqgan import IMAGENET_F16_16384_DDCONFIG, IMAGENET_F16_16384_EMBED_DIM

    torch.manual_seed(0)
    tiny_dd = tiny_ddconfig(4)
    g = _vq(tiny_dd, 16, 4)
    torch.save({"state_dict": g.state_dict()}, root / "vq.ckpt")
    trained = {"ddconfig": tiny_dd, "n_embed": 16, "embed_dim": 4}
    torch.save({"state_dict": g.state_dict(), "config": trained, "data": "toy", "epoch": 1}, root / "trained.ckpt")
    f16_dd = {**IMAGENET_F16_16384_DDCONFIG, "ch": 32, "num_res_blocks": 1}
    f16 = _vq(f16_dd, 16384, IMAGENET_F16_16384_EMBED_DIM)
    torch.save({"state_dict": f16.state_dict()}, root / "f16.ckpt")
    return {
        "vq_yaml": _taming_yaml(root / "vq.yaml", tiny_dd, 16, 4),
        "vq_ckpt": root / "vq.ckpt",
        "trained": root / "trained.ckpt",
        "f16_yaml": _taming_yaml(root / "f16.yaml", f16_dd, 16384, IMAGENET_F16_16384_EMBED_DIM),
        "f16_ckpt": root / "f16.ckpt",
    }


#: A tiny diffusers AutoencoderKL (2x down-sampling, 4 latent channels) and AutoencoderTiny (8x, 4 channels).
KL_KW = dict(
    block_out_channels=(8, 16),
    down_block_types=("DownEncoderBlock2D",) * 2,
    up_block_types=("UpDecoderBlock2D",) * 2,
    latent_channels=4,
    layers_per_block=1,
    norm_num_groups=8,
    sample_size=16,
)
TINY_KW = dict(
    encoder_block_out_channels=(8, 8, 8),
    decoder_block_out_channels=(8, 8, 8),
    num_encoder_blocks=(1, 1, 1),
    num_decoder_blocks=(1, 1, 1),
    latent_channels=4,
)


def diffusers_dirs(root: Path) -> dict[str, Path]:
    """Two diffusers folders (``config.json`` and safetensors): an AutoencoderKL and an AutoencoderTiny."""
    import diffusers

    torch.manual_seed(0)
    diffusers.AutoencoderKL(**KL_KW).save_pretrained(root / "kl")
    diffusers.AutoencoderTiny(**TINY_KW).save_pretrained(root / "tiny")
    return {"kl": root / "kl", "tiny": root / "tiny"}


def torchscript_file(root: Path) -> dict[str, Path]:
    """A traced 10-way RGB classifier."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 10, 1), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    path = root / "model.pt"
    torch.jit.save(torch.jit.trace(model, torch.rand(1, 3, 8, 8)), path)
    return {"torchscript": path}


def robustbench_models(root: Path) -> dict[str, Path]:
    """RobustBench's ``model_dir`` layout with a random ResNet-50 under the default name (Hendrycks2020AugMix), its
    keys prefixed ``model.`` as RobustBench saves them."""
    from torchvision.models import resnet50

    path = root / "robustbench" / "imagenet" / "corruptions" / "Hendrycks2020AugMix.pt"
    path.parent.mkdir(parents=True)
    torch.manual_seed(0)
    torch.save({"state_dict": {f"model.{k}": v for k, v in resnet50().state_dict().items()}}, path)
    return {"robustbench": root / "robustbench"}


def tiny_clip(root: Path) -> dict[str, str]:
    """Register :data:`TINY_CLIP` with open_clip (a 2-layer ViT and text tower, random weights, no download)."""
    import open_clip

    cfg = {
        "embed_dim": 32,
        "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "patch_size": 8},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 4, "layers": 2},
    }
    path = root / f"{TINY_CLIP}.json"
    path.write_text(json.dumps(cfg))
    open_clip.add_model_config(path)
    return {"tiny_clip": TINY_CLIP}


#: Every stand-in, by the key option overrides name it with (``{vq_yaml}``, ``{kl}``, ...).
BUILDERS = (taming_files, diffusers_dirs, torchscript_file, robustbench_models, tiny_clip)


def write_stand_ins(root: Path) -> dict[str, str]:
    """Write every stand-in under ``root``; their paths (and the tiny CLIP's name) by key."""
    paths: dict[str, str] = {}
    for build in BUILDERS:
        paths.update({k: str(v) for k, v in build(root).items()})
    return paths
