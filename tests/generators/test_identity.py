"""The pixel baseline: identity encode/decode, identity gradient, and the loop as a sign pixel attack."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from generators.identity import IdentityGenerator, straight_through_clamp
from genEval import evaluate
from genEval.interfaces import Generator
from genEval.runs import RunDir
from genEval.runs.recording import RunOutput
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from tests.support.assets import ROOT
from tests.support.toys import LinearClassifier, ModelOracle, toy_data


def test_round_trip_is_exact_and_satisfies_the_protocol():
    gen = IdentityGenerator()
    assert isinstance(gen, Generator) and gen.name == "identity" and gen.downsample == 1
    x = torch.rand(3, 3, 5, 7)
    x[0, 0, 0, 0], x[0, 0, 0, 1] = 0.0, 1.0
    z = gen.encode(x)
    assert torch.equal(z, x) and z.data_ptr() != x.data_ptr()  # a copy: the loop may not alias the data
    assert torch.equal(gen.decode(z), x) and torch.equal(gen(x), x)
    assert "image_size=None" in repr(gen)


def test_decode_clamps_and_the_gradient_is_the_identity():
    gen = IdentityGenerator()
    z = torch.tensor([[[[-0.5, 0.0, 0.3, 1.0, 1.7, 1e9]]]], requires_grad=True)
    out = gen.decode(z)
    assert torch.equal(out, torch.tensor([[[[0.0, 0.0, 0.3, 1.0, 1.0, 1.0]]]]))  # bit-exact clamp
    w = torch.randn(z.shape)
    (g,) = torch.autograd.grad((out * w).sum(), z)
    assert torch.equal(g, w)  # also outside [0, 1], so a pixel pushed past a border can come back
    y = torch.rand(4, requires_grad=True)
    (gy,) = torch.autograd.grad(straight_through_clamp(y).sum(), y)
    assert torch.equal(gy, torch.ones(4))


def test_image_size_and_channels_options_and_errors():
    gen = IdentityGenerator(image_size=8, channels=3)
    assert gen.encode(torch.rand(2, 3, 4, 4)).shape == (2, 3, 8, 8)
    with pytest.raises(ValueError, match=r"expects 3-channel images but got 1 channels.*data.channels=3"):
        gen.encode(torch.rand(2, 1, 4, 4))
    with pytest.raises(ValueError, match=r"image_size=0 must be a positive number of pixels"):
        IdentityGenerator(image_size=0)
    with pytest.raises(ValueError, match=r"channels=-1 must be a positive channel count"):
        IdentityGenerator(channels=-1)
    with pytest.raises(ValueError, match=r"expected images shaped \(B, C, H, W\), got \(3, 4, 4\)"):
        IdentityGenerator().encode(torch.rand(3, 4, 4))
    with pytest.raises(ValueError, match=r"decode expects latents shaped \(B, C, H, W\), got \(4,\)"):
        IdentityGenerator().decode(torch.rand(4))


def test_sign_search_in_pixel_space_moves_every_pixel_by_step_size_times_steps(tmp_path):
    # Two classes: grad_x CE = p_other * (w_other - w_label), whose sign per pixel never changes, so
    # every accepted sign step moves each pixel by exactly +-a (until the image clamps at 0 or 1).
    a, budget = 0.05, 6
    clf = LinearClassifier(in_features=12, num_classes=2, seed=0)
    oracle = ModelOracle(LinearClassifier(in_features=12, num_classes=2, seed=3))
    data = toy_data(40, seed=1, classes=2)
    res = evaluate(
        classifier=clf,
        data=data,
        generator=IdentityGenerator(),
        oracle=oracle,
        search=SearchConfig(budget=budget, step_size=a, update="sign", start_noise=0),
        seed=0,
        execution=Execution(batch_size=16, device="cpu"),
        output=RunOutput(tmp_path, save_latents=True, progress=False),
    )
    lat = RunDir(Path(tmp_path)).tensors("latents")
    assert lat["generator"] == "identity"
    w = clf.l.weight.detach()
    steps = torch.tensor([r.accepted_steps for r in res.samples])
    validated = torch.tensor([r.validated for r in res.samples])
    assert bool(validated.any()) and int(steps.max()) == budget and bool((steps[validated] < budget).any())
    checked = 0
    for i, r in enumerate(res.samples):
        x = data.x[i]
        assert torch.equal(lat["start"][i], x)  # E(x) = x
        direction = (w[1 - r.label] - w[r.label]).sign().view_as(x)  # ascent on CE
        expected_z = x + a * r.accepted_steps * direction
        assert torch.allclose(lat["final"][i], expected_z, atol=1e-6), r.source_id
        expected_x = expected_z.clamp(0, 1)
        assert r.image_linf == pytest.approx(float((expected_x - x).abs().max()), abs=1e-6)
        if r.validated:
            moved = (expected_x - x).abs()
            unclamped = (expected_z >= 0) & (expected_z <= 1)
            assert torch.allclose(moved[unclamped], torch.full_like(moved[unclamped], a * r.accepted_steps), atol=1e-6)
            checked += 1
    assert checked == int(validated.sum()) > 0


def test_config_instantiates_the_pixel_baseline():
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(ROOT / "conf" / "generator" / "identity.yaml")
    gen = instantiate(cfg)
    assert isinstance(gen, IdentityGenerator) and gen.image_size is None and gen.channels is None
