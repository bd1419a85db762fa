"""Files with small random weights that stand in for real ones no test can download: taming VQ checkpoints and
their yaml, diffusers VAE folders, a TorchScript classifier, RobustBench's model folder, a tiny open_clip model; and
small data files in the layouts the data readers parse (MNIST's idx files, a CIFAR-10 batch, image folders, ImageNet
validation folders by wnid) with a fitted style mask, for the data and mask options that cannot read real ones.

Each stand-in has the layout and the latent space of what it replaces, only narrower, so that a declaration made
from the settings (``genEval.declared``) still describes the built object: the f16 VQGAN stand-in keeps the
release's 16x down-sampling, 256 latent channels and 16,384 codes, with 32 base channels instead of 128.
"""

from __future__ import annotations

import json
import pickle
import textwrap
from pathlib import Path

import numpy as np
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


def mnist_files(root: Path) -> dict[str, Path]:
    """MNIST's test idx files (``t10k-*-ubyte``): 20 random 28-px digits, labels ``0..9`` twice."""

    def idx(path: Path, magic: int, arr: np.ndarray) -> None:
        header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
        path.write_bytes(header + arr.astype(np.uint8).tobytes())

    folder = root / "mnist"
    folder.mkdir()
    rng = np.random.default_rng(0)
    idx(folder / "t10k-images-idx3-ubyte", 2051, rng.integers(0, 256, (20, 28, 28)))
    idx(folder / "t10k-labels-idx1-ubyte", 2049, np.arange(20) % 10)
    return {"mnist": folder}


def cifar10_batch(root: Path) -> dict[str, Path]:
    """torchvision's CIFAR-10 layout (``cifar-10-batches-py/test_batch``, ``batches.meta``): 20 random images."""
    folder = root / "cifar" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    with open(folder / "test_batch", "wb") as fh:
        pickle.dump({"data": rng.integers(0, 256, (20, 3072), dtype=np.uint8), "labels": list(range(10)) * 2}, fh)
    with open(folder / "batches.meta", "wb") as fh:
        pickle.dump({"label_names": ["c"] * 10}, fh)
    return {"cifar10": root / "cifar"}


def image_folder(root: Path) -> dict[str, Path]:
    """An image folder of two classes (``cat``, ``dog``), two 16-px PNGs each."""
    from PIL import Image

    for c in ("cat", "dog"):
        (root / "folder" / c).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (16, 16), (40 * i, 100, 200)).save(root / "folder" / c / f"{i}.png")
    return {"folder": root / "folder"}


def _wnid_folder(root: Path, wnids: tuple[str, ...]) -> Path:
    from PIL import Image

    for i, wnid in enumerate(wnids):
        (root / wnid).mkdir(parents=True)
        Image.new("RGB", (20 + 4 * i, 16), (60 * i, 90, 180)).save(root / wnid / f"ILSVRC2012_val_{i:08d}.JPEG")
    return root


def wnid_folders(root: Path) -> dict[str, Path]:
    """ImageNet validation-layout folders: tench (1k class 0), goldfish (1) and Chihuahua (151, a dog) as
    ``wnids``; a frog and a dog (classes CIFAR-10 shares) as ``wnids_cifar``."""
    return {
        "wnids": _wnid_folder(root / "wnids", ("n01440764", "n01443537", "n02085620")),
        "wnids_cifar": _wnid_folder(root / "wnids_cifar", ("n01641577", "n02085782")),
    }


def style_mask(root: Path) -> dict[str, Path]:
    """A sparse style mask fitted on 40 toy latents ``(2, 2, 2)`` whose one moved coordinate is ``[0, 0, 0]``."""
    from genEval.style_mask import fit_style_mask

    g = torch.Generator().manual_seed(0)
    start = torch.randn(40, 2, 2, 2, generator=g)
    final = start.clone()
    final[:, 0, 0, 0] += 3.0
    return {"mask": fit_style_mask(start, final, generator="sigmoid", dataset="toy").save(root / "mask.safetensors")}


#: Every stand-in of the plug-in groups' options, by the key option overrides name it with (``{vq_yaml}``, ...).
BUILDERS = (taming_files, diffusers_dirs, torchscript_file, robustbench_models, tiny_clip)
#: The stand-ins of the data and mask options (``{mnist}``, ``{cifar10}``, ``{folder}``, ``{wnids}``, ``{mask}``).
DATA_BUILDERS = (mnist_files, cifar10_batch, image_folder, wnid_folders, style_mask)


def write_stand_ins(root: Path, builders: tuple = BUILDERS) -> dict[str, str]:
    """Write the stand-ins of ``builders`` under ``root``; their paths (and the tiny CLIP's name) by key."""
    paths: dict[str, str] = {}
    for build in builders:
        paths.update({k: str(v) for k, v in build(root).items()})
    return paths
