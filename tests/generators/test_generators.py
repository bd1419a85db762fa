"""Generators: TAEF2 (real weights + random init) and taming VQGAN (tiny random configs, own checkpoints)."""

from __future__ import annotations

import re
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from generators.taef2 import TAEF2Generator
from generators.vqgan import (
    IMAGENET_F16_16384_CKPT_URL,
    VQGANGenerator,
    from_taming_config,
    read_taming_config,
    vqgan_imagenet_f16_16384,
)
from genEval.interfaces import Generator, precision_name, resize_images
from genEval.runs.recording import RunOutput
from genEval.search.execution import Execution
from genEval.style_mask import SparseMask, fit_style_mask
from tests.support.assets import ASSETS, ROOT, asset
from tests.support.toys import ListDataset, tiny_ddconfig

TINY_DD = tiny_ddconfig(8)
N_EMBED, EMBED_DIM = 32, 8
EXACT = "donot_use_mm_for_euclid_dist"


def tiny_vq(**kw) -> VQGANGenerator:
    torch.manual_seed(0)
    return VQGANGenerator(TINY_DD, n_embed=N_EMBED, embed_dim=EMBED_DIM, **kw)


def psnr(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return -10 * torch.log10((a - b).pow(2).flatten(1).mean(1))


# ---------------------------------------------------------------- TAEF2


@pytest.fixture(scope="module")
def random_taef2() -> TAEF2Generator:
    torch.manual_seed(0)
    return TAEF2Generator()


def test_taef2_random_init_shapes_range_and_gradient(random_taef2):
    g = random_taef2
    assert isinstance(g, Generator) and re.fullmatch(r"taef2:[0-9a-f]{12}", g.name) and g.downsample == 8
    assert not g.training and not any(p.requires_grad for p in g.parameters())
    x = torch.rand(2, 3, 16, 24)
    z = g.encode(x)
    assert z.shape == (2, 32, 2, 3)
    z = z.detach().requires_grad_(True)
    y = g.decode(z * 5)
    assert y.shape == (2, 3, 16, 24)
    assert float(y.detach().min()) >= 0 and float(y.detach().max()) <= 1
    (grad,) = torch.autograd.grad(y.square().sum(), z)
    assert grad.shape == z.shape and float(grad.abs().sum()) > 0


def test_taef2_image_size_resizes_inside_encode():
    torch.manual_seed(0)
    g = TAEF2Generator(image_size=16)
    z = g.encode(torch.rand(1, 3, 8, 8))
    assert z.shape == (1, 32, 2, 2) and g.decode(z).shape == (1, 3, 16, 16)
    assert "image_size=16" in repr(g)


def test_taef2_state_dict_round_trip(tmp_path, random_taef2):
    enc, dec = tmp_path / "enc.pth", tmp_path / "dec.pth"
    # the release stores fp16 tensors: loading must cast them to the module's float32
    torch.save({k: v.half() for k, v in random_taef2.encoder.state_dict().items()}, enc)
    torch.save({k: v.half() for k, v in random_taef2.decoder.state_dict().items()}, dec)
    g = TAEF2Generator(enc, dec)
    assert all(p.dtype == torch.float32 for p in g.parameters())
    for a, b in zip(g.state_dict().values(), random_taef2.state_dict().values(), strict=True):
        assert torch.equal(a, b.half().float())
    x = torch.rand(1, 3, 16, 16)
    assert g(x).shape == x.shape


def test_taef2_id_names_the_weights_so_a_mask_for_one_is_refused_for_another(tmp_path, random_taef2):
    enc_a, enc_b, dec = tmp_path / "enc_a.pth", tmp_path / "enc_b.pth", tmp_path / "dec.pth"
    torch.save(random_taef2.encoder.state_dict(), enc_a)
    torch.save(random_taef2.decoder.state_dict(), dec)
    changed = dict(random_taef2.encoder.state_dict())
    changed["0.weight"] = changed["0.weight"].clone()
    changed["0.weight"][0, 0, 0, 0] += 1e-3  # one weight differs
    torch.save(changed, enc_b)
    a, b = TAEF2Generator(enc_a, dec), TAEF2Generator(enc_b, dec)
    same = TAEF2Generator(enc_a, dec, precision="bf16")  # same weights, other run precision
    assert a.name == same.name == random_taef2.name  # the id follows the weights, not the file or dtype
    assert a.name != b.name and re.fullmatch(r"taef2:[0-9a-f]{12}", b.name)

    data = ListDataset(torch.rand(2, 3, 16, 16), [0, 1], ["a", "b"])
    start = torch.randn(40, 32, 2, 2, generator=torch.Generator().manual_seed(0))
    final = start.clone()
    final[:, 0, 0, 0] += 3.0
    path = fit_style_mask(start, final, generator=a.name, dataset="toy", C=0.5).save(tmp_path / "m.safetensors")
    assert SparseMask(str(path)).load(same, data).generator == a.name  # accepted for the same weights
    with pytest.raises(ValueError, match=rf"fitted for generator '{a.name}' .* this run uses generator '{b.name}'"):
        SparseMask(str(path)).load(b, data)


def test_taef2_wrong_keys_named(tmp_path, random_taef2):
    sd = dict(random_taef2.encoder.state_dict())
    sd.pop("11.pool.0.weight")
    sd["99.weight"] = torch.zeros(1)
    bad = tmp_path / "enc.pth"
    torch.save(sd, bad)
    with pytest.raises(ValueError, match=r"missing keys: 11\.pool\.0\.weight.*unexpected keys: 99\.weight"):
        TAEF2Generator(encoder_path=bad)
    with pytest.raises(FileNotFoundError, match="TAEF2 decoder weights not found"):
        TAEF2Generator(decoder_path=tmp_path / "nope.pth")


def test_taef2_input_errors_teach(random_taef2):
    with pytest.raises(
        ValueError,
        match=r"multiples of 8, but got 20x16.*nearest: height 16 or 24.*"
        r"generator\.image_size=",
    ):
        random_taef2.encode(torch.rand(1, 3, 20, 16))
    with pytest.raises(ValueError, match=r"expects 3-channel images but got 1.*data\.channels=3"):
        random_taef2.encode(torch.rand(1, 1, 16, 16))
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        random_taef2.encode(torch.rand(3, 16, 16))
    with pytest.raises(ValueError, match=r"decode expects latents shaped \(B, 32, h, w\)"):
        random_taef2.decode(torch.rand(1, 4, 2, 2))
    with pytest.raises(ValueError, match=r"image_size=30 must be a positive multiple of 8"):
        TAEF2Generator(image_size=30)
    with pytest.raises(ValueError, match=r"generator.precision must be one of fp32, bf16, fp16, got 'float8'"):
        TAEF2Generator(precision="float8")


def test_taef2_low_precision_keeps_caller_dtype():
    torch.manual_seed(0)
    g = TAEF2Generator(precision="bf16")
    z = g.encode(torch.rand(1, 3, 8, 8))
    assert z.dtype == torch.float32 and g.decode(z).dtype == torch.float32


def test_one_precision_vocabulary_and_the_old_spellings_with_a_note():
    """generator.precision takes fp32 | bf16 | fp16 like precision= and oracle.precision=; generator.dtype and the
    float32 | bfloat16 | float16 spellings still work, each with a FutureWarning naming what to write instead."""
    assert next(TAEF2Generator(precision="bf16").parameters()).dtype == torch.bfloat16
    with pytest.warns(FutureWarning, match=r"generator.dtype is deprecated: write generator.precision=bf16"):
        old = TAEF2Generator(dtype="bfloat16")
    assert next(old.parameters()).dtype == torch.bfloat16
    with pytest.warns(
        FutureWarning, match=r"generator.precision=float16 is deprecated: .* write generator.precision=fp16"
    ):
        assert next(TAEF2Generator(precision="float16").parameters()).dtype == torch.float16
    with pytest.warns(FutureWarning, match=r"precision=bfloat16 is deprecated"):
        ex = Execution(precision="bfloat16", role_precision={"oracle": "float32"})
    assert ex.precision == "bf16" and ex.role_precision == {"oracle": "fp32"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spellings say nothing
        assert Execution(precision="fp16").precision == "fp16" and precision_name("bf16") == "bf16"
    for name in ("taef2", "taesd", "sd_vae_ft_mse", "diffusers_vae"):  # the shipped configs use the new key
        text = (ROOT / "conf" / "generator" / f"{name}.yaml").read_text()
        assert "\nprecision: fp32" in text and "dtype:" not in text, name


def _cifar_pngs() -> torch.Tensor:
    folder = asset("samples/foolbox")
    files = sorted(folder.glob("cifar10_*.png"))
    assert len(files) == 20
    arrays = [np.asarray(Image.open(f).convert("RGB"), dtype=np.float32) / 255 for f in files]
    return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2)


@pytest.mark.weights
def test_taef2_real_weights_reconstruct_cifar_at_known_psnr():
    enc = asset("weights/taef2/taef2_encoder.pth")
    dec = asset("weights/taef2/taef2_decoder.pth")
    g = TAEF2Generator(enc, dec, image_size=64)
    x = _cifar_pngs()
    with torch.no_grad():
        z = g.encode(x)
        rec = g.decode(z)
    assert z.shape == (20, 32, 8, 8)
    value = float(psnr(rec, resize_images(x, 64)).mean())
    assert 30.0 <= value <= 34.0, value  # measured 31.3 dB (bilinear up-sampling to 64 px)


@pytest.mark.weights
def test_taef2_hydra_config_instantiates():
    asset("weights/taef2/taef2_encoder.pth")
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(ROOT / "conf" / "generator" / "taef2.yaml")
    root = OmegaConf.create({"assets": str(ASSETS), "generator": cfg})
    g = instantiate(root.generator)
    assert isinstance(g, TAEF2Generator) and g.image_size == 64


# ---------------------------------------------------------------- VQGAN


@pytest.mark.parametrize("quantize", ["none", "straight_through"])
def test_vqgan_shapes_range_and_gradient(quantize):
    g = tiny_vq(quantize=quantize)
    assert isinstance(g, Generator) and g.downsample == 2 and g.name.startswith("vqgan:random-")
    assert not g.training and not any(p.requires_grad for p in g.parameters())
    z = g.encode(torch.rand(2, 3, 16, 12))
    assert z.shape == (2, EMBED_DIM, 8, 6)
    z = z.detach().requires_grad_(True)
    y = g.decode(z)
    assert y.shape == (2, 3, 16, 12) and float(y.detach().min()) >= 0 and float(y.detach().max()) <= 1
    (grad,) = torch.autograd.grad(y.sum(), z)
    assert float(grad.abs().sum()) > 0


def test_vqgan_straight_through_lands_on_codebook():
    g = tiny_vq(quantize="straight_through")
    z = g.encode(torch.rand(2, 3, 16, 16)).requires_grad_(True)
    zq, vq_loss = g.quantize_latents(z)
    book = g.quantize.embedding.weight  # (n_embed, embed_dim)
    flat = zq.detach().permute(0, 2, 3, 1).reshape(-1, EMBED_DIM)
    assert float(torch.cdist(flat, book, compute_mode=EXACT).min(1).values.max()) < 1e-5
    nearest = book[
        torch.cdist(z.detach().permute(0, 2, 3, 1).reshape(-1, EMBED_DIM), book, compute_mode=EXACT).argmin(1)
    ]
    assert torch.allclose(flat, nearest, atol=1e-5)
    (grad,) = torch.autograd.grad(zq.sum(), z)  # identity gradient
    assert torch.allclose(grad, torch.ones_like(grad))
    assert float(vq_loss.detach()) > 0
    # decode in straight_through mode == decode of the snapped latent in "none" mode
    plain = tiny_vq()
    assert torch.allclose(g.decode(z.detach()), plain.decode(zq.detach()), atol=1e-5)


def test_vqgan_quantize_mode_validated():
    with pytest.raises(ValueError, match=r"quantize='nearest'.*allowed: \['none', 'straight_through'\]"):
        tiny_vq(quantize="nearest")


def test_vqgan_ddconfig_errors_teach():
    with pytest.raises(ValueError, match=r"multiple of 32"):
        VQGANGenerator({**TINY_DD, "ch": 16}, N_EMBED, EMBED_DIM)
    with pytest.raises(ValueError, match=r"lacks \['z_channels'\]"):
        VQGANGenerator({k: v for k, v in TINY_DD.items() if k != "z_channels"}, N_EMBED, EMBED_DIM)
    with pytest.raises(ValueError, match=r"double_z=true.*KL autoencoder"):
        VQGANGenerator({**TINY_DD, "double_z": True}, N_EMBED, EMBED_DIM)


def _lightning_like(g: VQGANGenerator, **extra) -> dict:
    sd = dict(g.state_dict())
    sd["loss.discriminator.main.0.weight"] = torch.zeros(3)  # taming stores its loss modules too
    return {"state_dict": sd, "epoch": 3, "global_step": 10, **extra}


def test_vqgan_checkpoint_round_trip(tmp_path):
    src = tiny_vq()
    with torch.no_grad():
        for p in src.parameters():  # make sure it is not the same random init by accident
            p.add_(0.01 * torch.randn_like(p))
    ckpt = tmp_path / "last.ckpt"
    torch.save(_lightning_like(src), ckpt)
    torch.manual_seed(123)
    g = VQGANGenerator(TINY_DD, N_EMBED, EMBED_DIM, checkpoint=ckpt)
    z = torch.randn(2, EMBED_DIM, 4, 4)
    assert torch.equal(g.decode(z), src.decode(z))
    x = torch.rand(1, 3, 8, 8)
    assert torch.equal(g.encode(x), src.encode(x))
    assert g.name.startswith("vqgan:") and len(g.name) == len("vqgan:") + 8
    assert g.name == VQGANGenerator(TINY_DD, N_EMBED, EMBED_DIM, checkpoint=ckpt).name  # stable id


class CustomCallbackState:
    """Stands in for the pytorch-lightning objects inside official taming checkpoints."""

    def __init__(self, best: float = 0.5) -> None:
        self.best = best


def test_vqgan_pickled_checkpoint_needs_allow_pickle(tmp_path):
    src = tiny_vq()
    ckpt = tmp_path / "official.ckpt"
    torch.save(_lightning_like(src, callbacks={"cb": CustomCallbackState()}), ckpt)
    with pytest.raises(ValueError, match=r"pickled Python objects.*allow_pickle=true"):
        VQGANGenerator(TINY_DD, N_EMBED, EMBED_DIM, checkpoint=ckpt)
    g = VQGANGenerator(TINY_DD, N_EMBED, EMBED_DIM, checkpoint=ckpt, allow_pickle=True)
    z = torch.randn(1, EMBED_DIM, 2, 2)
    assert torch.equal(g.decode(z), src.decode(z))


def test_vqgan_pickled_classes_from_missing_modules_get_stand_ins(tmp_path, monkeypatch):
    """Official checkpoints reference pytorch-lightning classes that may not be importable."""
    mod_dir = tmp_path / "mods"
    mod_dir.mkdir()
    (mod_dir / "vanishing_lightning.py").write_text(
        "class ModelCheckpoint:\n    def __init__(self):\n        self.best = 1.0\n"
    )
    monkeypatch.syspath_prepend(str(mod_dir))
    import vanishing_lightning

    src = tiny_vq()
    ckpt = tmp_path / "official.ckpt"
    torch.save(
        _lightning_like(
            src,
            callbacks={
                vanishing_lightning.ModelCheckpoint: {"best": 1.0},
                "obj": vanishing_lightning.ModelCheckpoint(),
            },
        ),
        ckpt,
    )
    monkeypatch.delitem(sys.modules, "vanishing_lightning")
    (mod_dir / "vanishing_lightning.py").unlink()
    with pytest.raises(ValueError, match="allow_pickle=true"):
        VQGANGenerator(TINY_DD, N_EMBED, EMBED_DIM, checkpoint=ckpt)
    g = VQGANGenerator(TINY_DD, N_EMBED, EMBED_DIM, checkpoint=ckpt, allow_pickle=True)
    z = torch.randn(1, EMBED_DIM, 2, 2)
    assert torch.equal(g.decode(z), src.decode(z))


def test_vqgan_checkpoint_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"VQGAN checkpoint not found: .*missing\.ckpt.*generator\.checkpoint"):
        VQGANGenerator(TINY_DD, N_EMBED, EMBED_DIM, checkpoint=tmp_path / "missing.ckpt")
    sd = dict(tiny_vq().state_dict())
    sd.pop("quant_conv.bias")
    sd["extra.weight"] = torch.zeros(1)
    bad = tmp_path / "bad.ckpt"
    torch.save({"state_dict": sd}, bad)
    with pytest.raises(ValueError, match=r"missing keys: quant_conv\.bias; unexpected keys: extra\.weight"):
        VQGANGenerator(TINY_DD, N_EMBED, EMBED_DIM, checkpoint=bad)
    other = tmp_path / "other.ckpt"
    torch.save({"state_dict": tiny_vq().state_dict()}, other)
    with pytest.raises(ValueError, match=r"shape mismatches: quantize\.embedding\.weight"):
        VQGANGenerator(TINY_DD, 2 * N_EMBED, EMBED_DIM, checkpoint=other)


def test_vqgan_size_and_channel_errors():
    g = tiny_vq()
    with pytest.raises(ValueError, match=r"down-samples by 2.*got 15x16.*image_size"):
        g.encode(torch.rand(1, 3, 15, 16))
    with pytest.raises(ValueError, match=r"data\.channels=3"):
        g.encode(torch.rand(1, 1, 16, 16))
    with pytest.raises(ValueError, match=r"image_size=15 must be a positive multiple of 2"):
        tiny_vq(image_size=15)
    resized = tiny_vq(image_size=8)
    assert resized.encode(torch.rand(1, 3, 16, 16)).shape == (1, EMBED_DIM, 4, 4)


def _taming_yaml(tmp_path: Path, **params) -> Path:
    dd = "\n".join(f"      {k}: {v}" for k, v in TINY_DD.items())
    extra = "\n".join(f"    {k}: {v}" for k, v in params.items())
    text = (
        textwrap.dedent("""\
        model:
          base_learning_rate: 4.5e-06
          target: taming.models.vqgan.VQModel
          params:
            embed_dim: {e}
            n_embed: {n}
        """).format(e=EMBED_DIM, n=N_EMBED)
        + "    ddconfig:\n"
        + dd.replace("False", "false")
        + "\n"
        + "    lossconfig:\n      target: taming.modules.losses.vqperceptual.VQLPIPSWithDiscriminator\n"
        + (extra + "\n" if extra else "")
    )
    path = tmp_path / "model.yaml"
    path.write_text(text)
    return path


def test_from_taming_config(tmp_path):
    yaml_path = _taming_yaml(tmp_path)
    params = read_taming_config(yaml_path)
    assert params["n_embed"] == N_EMBED and params["ddconfig"]["ch_mult"] == [1, 2]
    src = tiny_vq()
    with torch.no_grad():
        for p in src.parameters():  # not the random init a fresh model would draw
            p.add_(0.01 * torch.randn_like(p))
    ckpt = tmp_path / "last.ckpt"
    torch.save(_lightning_like(src), ckpt)
    g = from_taming_config(yaml_path, ckpt, quantize="straight_through", name="my-vq")
    assert g.name == "my-vq" and g.quantize_mode == "straight_through"
    # the yaml's architecture and the checkpoint's weights arrive: g is the saved model, snapped to the codebook
    assert (g.n_embed, g.embed_dim, g.ddconfig["ch_mult"], g.ddconfig["z_channels"]) == (N_EMBED, EMBED_DIM, [1, 2], 8)
    for key, value in src.state_dict().items():
        assert torch.equal(g.state_dict()[key], value), key
    src.quantize_mode = "straight_through"
    z = torch.randn(1, EMBED_DIM, 2, 2)
    assert torch.equal(g.decode(z), src.decode(z))
    with pytest.raises(ValueError, match=r"codebook remap"):
        read_taming_config(_taming_yaml(tmp_path, remap="used.npy"))
    with pytest.raises(FileNotFoundError, match="taming config not found"):
        read_taming_config(tmp_path / "nope.yaml")
    with pytest.raises(ValueError, match=r"lacks model\.params\.\['ddconfig'\]"):
        read_taming_config({"model": {"params": {"n_embed": 1, "embed_dim": 1}}})


def test_vqgan_imagenet_missing_files_error_says_how_to_get_them():
    with pytest.raises(FileNotFoundError) as info:
        vqgan_imagenet_f16_16384()
    msg = str(info.value)
    assert "vqgan_imagenet_f16_16384" in msg and "download=true" in msg
    assert IMAGENET_F16_16384_CKPT_URL in msg and "generator.checkpoint=" in msg
    with pytest.raises(FileNotFoundError, match=r"looked at '.*elsewhere\.ckpt'"):
        vqgan_imagenet_f16_16384(checkpoint="/elsewhere.ckpt")


def test_vqgan_imagenet_uses_cached_files(tmp_path, monkeypatch):
    """Files in cache_dir('vqgan_imagenet_f16_16384') are found; the yaml there wins over the built-in."""
    from genEval.checkpoints import cache_dir

    folder = cache_dir("vqgan_imagenet_f16_16384")
    yaml_path = _taming_yaml(tmp_path)
    (folder / "model.yaml").write_text(yaml_path.read_text())
    torch.save(_lightning_like(tiny_vq()), folder / "last.ckpt")
    try:
        g = vqgan_imagenet_f16_16384(quantize="straight_through")
        assert g.name == "vqgan_imagenet_f16_16384" and g.n_embed == N_EMBED
    finally:
        (folder / "model.yaml").unlink()
        (folder / "last.ckpt").unlink()


def test_generator_configs_point_at_real_callables():
    import importlib

    from omegaconf import OmegaConf

    for path in sorted((ROOT / "conf" / "generator").glob("*.yaml")):
        cfg = OmegaConf.load(path)
        while "_target_" not in cfg:  # a preset that extends another (defaults: [taef2, _self_])
            base = next(d for d in cfg.defaults if isinstance(d, str) and d != "_self_")
            cfg = OmegaConf.load(path.parent / f"{base}.yaml")
        target = cfg["_target_"]
        module, _, attr = target.rpartition(".")
        assert callable(getattr(importlib.import_module(module), attr)), path.name


def test_vqgan_warns_once_when_the_latent_is_smaller_than_4x4(caplog):
    g = tiny_vq()  # down-samples by 2
    caplog.set_level("WARNING", logger="generators.common")
    assert g.encode(torch.rand(1, 3, 6, 8)).shape[-2:] == (3, 4)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "6x8 images give 3x4 latents (down-sampling 2), smaller than 4x4" in warned[0]
    assert "generator.image_size=8 or larger" in warned[0]
    g.encode(torch.rand(2, 3, 6, 8))
    assert len(caplog.records) == 1  # once per image size
    g.encode(torch.rand(1, 3, 8, 8))  # 4x4: enough
    assert len(caplog.records) == 1
    sized = tiny_vq(image_size=8)
    sized.encode(torch.rand(1, 3, 4, 4))  # resized to 8 inside the generator: no warning
    assert len(caplog.records) == 1


def test_vqgan_decoded_latents_are_the_quantised_ones():
    z = tiny_vq().encode(torch.rand(2, 3, 16, 16))
    assert torch.equal(tiny_vq().decoded_latents(z), z)  # quantize=none decodes z itself
    st = tiny_vq(quantize="straight_through")
    zq = st.decoded_latents(z)
    assert torch.equal(zq, st.quantize_latents(z)[0]) and not torch.equal(zq, z)
    assert torch.allclose(st.decode(z), tiny_vq().decode(zq), atol=1e-5)  # what the decoder sees


def test_a_quantising_run_stores_the_latents_its_decoder_sees(tmp_path):
    """With quantize=straight_through the saved start and final latents are codebook vectors (what fit-mask reads)."""
    from genEval import evaluate
    from genEval.runs import RunDir
    from genEval.search.perturb import SearchConfig
    from tests.support.toys import AcceptAllOracle, LinearClassifier

    st = tiny_vq(quantize="straight_through")
    x = torch.rand(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    evaluate(
        LinearClassifier(3 * 16 * 16, 3, seed=0),
        ListDataset(x, [0, 1, 2, 0], ["a", "b", "c"]),
        st,
        AcceptAllOracle(),
        SearchConfig(budget=2, step_size=0.05),
        seed=0,
        output=RunOutput(tmp_path, save_latents=True, progress=False),
    )
    saved = RunDir(tmp_path).tensors("latents")
    codebook = st.quantize.embedding.weight.detach()
    for key in ("start", "final"):
        vectors = saved[key].permute(0, 2, 3, 1).reshape(-1, EMBED_DIM)
        nearest = torch.cdist(vectors, codebook).min(dim=1).values
        assert float(nearest.max()) < 1e-4, key  # every saved vector is a codebook entry (up to float noise)
    assert not torch.equal(saved["start"], st.encode(x))  # not the continuous encoder output


def test_vqgan_paper_preset_quantises():
    import inspect

    from omegaconf import OmegaConf

    preset = OmegaConf.load(ROOT / "conf" / "generator" / "vqgan_imagenet_f16_16384.yaml")
    assert preset.quantize == "straight_through"
    assert inspect.signature(vqgan_imagenet_f16_16384).parameters["quantize"].default == "straight_through"
    assert OmegaConf.load(ROOT / "conf" / "generator" / "vqgan.yaml").quantize == "none"  # still an option
