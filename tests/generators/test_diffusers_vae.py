"""diffusers VAEs behind the generator contract: tiny random-init models written with save_pretrained."""

from __future__ import annotations

import json

import pytest
import torch

from tests.support.assets import ROOT

diffusers = pytest.importorskip("diffusers")

from generators.diffusers_vae import DiffusersVAEGenerator  # noqa: E402
from tests.support.stand_ins import KL_KW, TINY_KW  # noqa: E402

# huggingface_hub's own deprecation noise when diffusers looks a hub id up offline
pytestmark = pytest.mark.filterwarnings("ignore:The `local_dir_use_symlinks` argument:UserWarning")


def _kl_dir(tmp_path, seed=0, **over):
    torch.manual_seed(seed)
    vae = diffusers.AutoencoderKL(**{**KL_KW, **over}).eval()
    d = tmp_path / "kl"
    vae.save_pretrained(d)
    return d, vae


def _tiny_dir(tmp_path, seed=0):
    torch.manual_seed(seed)
    vae = diffusers.AutoencoderTiny(**TINY_KW).eval()
    d = tmp_path / "tiny"
    vae.save_pretrained(d)
    return d, vae


@pytest.fixture(scope="module")
def kl(tmp_path_factory):
    d, vae = _kl_dir(tmp_path_factory.mktemp("vae"), scaling_factor=0.5, shift_factor=0.1)
    return d, vae, DiffusersVAEGenerator(pretrained=str(d))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d, vae = _tiny_dir(tmp_path_factory.mktemp("vae"))
    return d, vae, DiffusersVAEGenerator(pretrained=str(d))


def images(b=2, size=16, seed=0):
    return torch.rand(b, 3, size, size, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("which", ["kl", "tiny"])
def test_shapes_range_gradient_and_frozen(which, request):
    _, _, gen = request.getfixturevalue(which)
    assert gen.kind == which and gen.downsample == (2 if which == "kl" else 4) and gen.latent_channels == 4
    assert not gen.training and not any(p.requires_grad for p in gen.parameters())
    x = images(size=16)
    with torch.no_grad():
        z = gen.encode(x)
    assert z.shape == (2, 4, 16 // gen.downsample, 16 // gen.downsample) and z.dtype == torch.float32
    z = z.clone().requires_grad_(True)
    out = gen.decode(z)
    assert out.shape == x.shape and out.dtype == torch.float32
    assert float(out.detach().min()) >= 0 and float(out.detach().max()) <= 1
    (g,) = torch.autograd.grad(out.sum(), z)
    assert g.shape == z.shape and bool(g.abs().sum() > 0) and bool(torch.isfinite(g).all())
    assert which in gen.name and "downsample=" in repr(gen)


@pytest.mark.parametrize("which", ["kl", "tiny"])
def test_encode_is_deterministic(which, request):
    _, _, gen = request.getfixturevalue(which)
    x = images(seed=3)
    with torch.no_grad():
        assert torch.equal(gen.encode(x), gen.encode(x))


def test_kl_latent_is_scaled_shifted_posterior_mode_and_round_trip_matches_diffusers(kl):
    _, vae, gen = kl
    x = images(seed=1)
    with torch.no_grad():
        post = vae.encode(x * 2 - 1).latent_dist
        z = gen.encode(x)
        assert torch.allclose(z, (post.mode() - 0.1) * 0.5, atol=1e-6)
        assert not torch.allclose(z, (post.sample() - 0.1) * 0.5, atol=1e-6)  # the mode, not a sample
        direct = ((vae.decode(post.mode()).sample + 1) / 2).clamp(0, 1)
        assert torch.allclose(gen.decode(z), direct, atol=1e-5)
    assert gen.scaling_factor == 0.5 and gen.shift_factor == pytest.approx(0.1)


def test_scale_latents_false_walks_the_raw_mode(kl):
    d, vae, _ = kl
    raw = DiffusersVAEGenerator(pretrained=str(d), kind="kl", scale_latents=False)
    x = images(seed=2)
    with torch.no_grad():
        assert torch.allclose(raw.encode(x), vae.encode(x * 2 - 1).latent_dist.mode(), atol=1e-6)


def test_tiny_round_trip_matches_diffusers_in_unit_range(tiny):
    _, vae, gen = tiny
    x = images(seed=4)
    with torch.no_grad():
        lat = vae.encode(x * 2 - 1).latents  # diffusers' AutoencoderTiny takes [-1, 1] images
        assert torch.allclose(gen.encode(x), lat, atol=1e-6)  # scaling_factor 1.0, shift 0.0
        direct = ((vae.decode(lat).sample + 1) / 2).clamp(0, 1)
        assert torch.allclose(gen(x), direct, atol=1e-5)


def test_auto_kind_reads_class_name_and_explicit_kind_is_checked(kl, tiny):
    assert DiffusersVAEGenerator(pretrained=str(tiny[0]), kind="tiny").kind == "tiny"
    with pytest.raises(
        ValueError,
        match=r"kind='tiny' but .* describes an AutoencoderKL .*"
        r"generator.kind=kl",
    ):
        DiffusersVAEGenerator(pretrained=str(kl[0]), kind="tiny")
    with pytest.raises(
        ValueError,
        match=r"kind='vq' is not a diffusers VAE kind; "
        r"allowed: \['auto', 'kl', 'tiny'\]",
    ):
        DiffusersVAEGenerator(pretrained=str(kl[0]), kind="vq")


def test_image_size_resizes_and_is_checked(kl):
    d = kl[0]
    gen = DiffusersVAEGenerator(pretrained=str(d), image_size=8)
    with torch.no_grad():
        assert gen.encode(images(size=16)).shape == (2, 4, 4, 4)
    with pytest.raises(ValueError, match=r"image_size=7 must be a positive multiple of 2"):
        DiffusersVAEGenerator(pretrained=str(d), image_size=7)


def test_non_divisible_size_and_grey_input_are_rejected(tiny):
    gen = tiny[2]
    with pytest.raises(
        ValueError,
        match=r"down-samples by 4, so image height and width must be multiples of "
        r"4, but got 18x18.*generator.image_size",
    ):
        gen.encode(images(size=18))
    with pytest.raises(ValueError, match=r"expects 3-channel images but got 1 channels.*data.channels=3"):
        gen.encode(torch.rand(2, 1, 16, 16))
    with pytest.raises(ValueError, match=r"decode expects latents shaped \(B, 4, h, w\), got \(2, 3, 4, 4\)"):
        gen.decode(torch.zeros(2, 3, 4, 4))


def test_missing_config_json_is_named(tmp_path):
    d = tmp_path / "vae_dir"
    d.mkdir()
    (d / "diffusion_pytorch_model.safetensors").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"has no config.json \(found: \['diffusion_pytorch_model"):
        DiffusersVAEGenerator(pretrained=str(d))
    with pytest.raises(FileNotFoundError, match=r"does not exist"):
        DiffusersVAEGenerator(pretrained=str(tmp_path / "nowhere"))


def test_missing_weights_in_local_dir(tmp_path):
    d, _ = _kl_dir(tmp_path)
    (d / "diffusion_pytorch_model.safetensors").unlink()
    with pytest.raises(OSError, match=r"could not load the AutoencoderKL weights from .*needs config.json"):
        DiffusersVAEGenerator(pretrained=str(d))


def test_unsupported_class_name(tmp_path):
    d = tmp_path / "other"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"_class_name": "VQModel"}))
    with pytest.raises(
        ValueError,
        match=r"describes a diffusers VQModel, "
        r"but DiffusersVAEGenerator supports",
    ):
        DiffusersVAEGenerator(pretrained=str(d))


def test_offline_hub_id_explains_how_to_point_at_a_local_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(
        OSError,
        match=r"model hub cannot be reached for 'nonexistent-org/nonexistent-vae'.*"
        r"generator.pretrained=/path/to/local/vae_dir",
    ):
        DiffusersVAEGenerator(pretrained="nonexistent-org/nonexistent-vae")


def test_local_name_is_stable_and_content_sensitive(tmp_path):
    a, _ = _kl_dir(tmp_path / "a")
    b, _ = _kl_dir(tmp_path / "b", scaling_factor=0.3)
    na = DiffusersVAEGenerator(pretrained=str(a)).name
    assert na == DiffusersVAEGenerator(pretrained=str(a)).name and na.startswith("diffusers-kl:kl-")
    assert na != DiffusersVAEGenerator(pretrained=str(b)).name
    assert DiffusersVAEGenerator(pretrained=str(a), name="mine").name == "mine"


def test_low_precision_keeps_fp32_latents_and_images(kl):
    d = kl[0]
    gen = DiffusersVAEGenerator(pretrained=str(d), precision="bf16")
    assert gen.dtype == torch.bfloat16
    with torch.no_grad():
        z = gen.encode(images())
    assert z.dtype == torch.float32
    z = z.requires_grad_(True)
    out = gen.decode(z)
    (g,) = torch.autograd.grad(out.sum(), z)
    assert out.dtype == torch.float32 and g.dtype == torch.float32 and bool(torch.isfinite(g).all())
    with pytest.raises(ValueError, match=r"generator.precision must be one of fp32, bf16, fp16, got 'float8'"):
        DiffusersVAEGenerator(pretrained=str(d), precision="float8")
    with pytest.warns(FutureWarning, match=r"generator.dtype is deprecated: write generator.precision=bf16"):
        assert DiffusersVAEGenerator(pretrained=str(d), dtype="bfloat16").dtype == torch.bfloat16  # the old spelling


def test_search_loop_runs_in_the_vae_latent_space(tiny):
    from genEval.search.perturb import SearchConfig
    from tests.support.toys import LinearClassifier, ModelOracle, search_batch

    gen = tiny[2]
    clf = LinearClassifier(in_features=3 * 16 * 16, num_classes=3, seed=0)
    x = images(b=3, seed=5)
    y = torch.tensor([0, 1, 2])
    out = search_batch(x, y, clf, gen, ModelOracle(clf), SearchConfig(budget=2, step_size=0.05, update="sign"))
    assert out.latents.shape == (3, 4, 4, 4) and out.images.shape == x.shape


def test_configs_instantiate_the_generator(tmp_path):

    from omegaconf import OmegaConf

    conf = ROOT / "conf" / "generator"
    for name, target in (("sd_vae_ft_mse", "stabilityai/sd-vae-ft-mse"), ("taesd", "madebyollin/taesd")):
        cfg = OmegaConf.load(conf / f"{name}.yaml")
        assert cfg._target_ == "generators.diffusers_vae.DiffusersVAEGenerator" and cfg.pretrained == target
    d, _ = _tiny_dir(tmp_path)
    from hydra.utils import instantiate

    cfg = OmegaConf.load(conf / "diffusers_vae.yaml")
    assert OmegaConf.is_missing(cfg, "pretrained")
    cfg.pretrained = str(d)
    gen = instantiate(cfg)
    assert isinstance(gen, DiffusersVAEGenerator) and gen.kind == "tiny"


def test_real_hub_configs_fail_offline_with_the_local_directory_hint(monkeypatch, tmp_path):

    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    conf = ROOT / "conf" / "generator"
    for name in ("sd_vae_ft_mse", "taesd"):
        with pytest.raises(Exception, match=r"model hub cannot be reached.*generator.pretrained="):
            instantiate(OmegaConf.load(conf / f"{name}.yaml"))


def test_an_in_memory_model_is_used_as_is(kl):
    _, vae, gen = kl
    mem = DiffusersVAEGenerator(pretrained=vae)
    assert mem.vae is vae and mem.kind == "kl" and mem.name.startswith("diffusers-kl:memory-")
    x = images(seed=6)
    with torch.no_grad():
        assert torch.allclose(mem.encode(x), gen.encode(x), atol=1e-6)
    with pytest.raises(ValueError, match=r"kind='tiny' but the given AutoencoderKL describes"):
        DiffusersVAEGenerator(pretrained=vae, kind="tiny")
