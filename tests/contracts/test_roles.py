"""Each role's tensors (genEval.interfaces): a generator's latents decode into ``[0, 1]`` images, differentiably in
the latent (paper Sec. 3.2: the search walks ``z`` of ``x = D(z)`` by gradient ascent); an oracle's Judgement has
the documented shapes, dtypes and ranges; a classifier's logits are ``(B, num_classes)`` and differentiable in the
images (the search's gradient flows through the classifier into the latent)."""

from __future__ import annotations

import pytest
import torch

from genEval.interfaces import hook
from tests.support.options import options

# ------------------------------------------------------------------------------------------------ generators


@pytest.mark.parametrize("option", options("generator"))
def test_latents_decode_to_images_of_the_input_with_the_downsampling(option, plugin):
    g, x = plugin.obj, plugin.images()
    z = g.encode(x)
    assert torch.is_floating_point(z) and z.ndim == 4 and z.shape[0] == x.shape[0]
    out = g.decode(z)
    assert torch.is_floating_point(out) and out.shape[:2] == x.shape[:2], f"{tuple(x.shape)} -> {tuple(out.shape)}"
    assert tuple(out.shape[-2:]) == tuple(s * g.downsample for s in z.shape[-2:]), "latent sides x downsample"


@pytest.mark.parametrize("option", options("generator"))
def test_decode_is_differentiable_in_the_latent_and_stays_in_unit_range(option, plugin):
    """Gradient ascent in ``z`` needs a gradient that reaches every latent's batch row, finite and not all zero; the
    images stay in ``[0, 1]`` for any latent the search may reach, not only for the encoder's outputs."""
    g, x = plugin.obj, plugin.images()
    with torch.no_grad():
        z0 = g.encode(x)
    far = z0 + 3 * z0.std() * torch.randn(z0.shape, generator=torch.Generator().manual_seed(1))
    for z in (z0, far):
        z = z.detach().clone().requires_grad_(True)
        out = g.decode(z)
        lo, hi = float(out.detach().min()), float(out.detach().max())
        assert lo >= 0.0 and hi <= 1.0, f"decode left [0, 1]: [{lo:.4g}, {hi:.4g}]"
        weights = torch.rand(out.shape, generator=torch.Generator().manual_seed(2))
        (grad,) = torch.autograd.grad((out * weights).sum(), z)
        assert torch.isfinite(grad).all(), "non-finite gradient in the latent"
        assert (grad.flatten(1).abs().sum(1) > 0).all(), "no gradient reaches the latent of some image"


@pytest.mark.parametrize("option", options("generator"))
def test_decoded_latents_are_what_the_decoder_decodes(option, plugin):
    """The ``decoded_latents`` hook (a codebook's snapping) gives latents of the same shape that decode to the same
    images, and are their own decoded latents: saved latents and style masks use it as the decoder's view."""
    g = plugin.obj
    decoded_latents = hook(g, "decoded_latents")
    if decoded_latents is None:
        pytest.skip(f"{option} decodes its latents as they are")
    with torch.no_grad():
        z = g.encode(plugin.images())
        snapped = decoded_latents(z)
        assert snapped.shape == z.shape
        torch.testing.assert_close(decoded_latents(snapped), snapped)
        torch.testing.assert_close(g.decode(snapped), g.decode(z), atol=1e-5, rtol=1e-4)


# --------------------------------------------------------------------------------------------------- oracles


@pytest.mark.parametrize("option", options("oracle"))
def test_a_judgement_has_the_documented_shapes_dtypes_and_ranges(option, plugin):
    oracle, names = plugin.obj, plugin.option.class_names
    oracle.prepare(names)
    x, y = plugin.images(batch=4), torch.arange(4) % len(names)
    j = oracle.judge(x, y)
    assert j.accept.shape == j.scores.shape == j.predictions.shape == (4,)
    assert j.accept.dtype == torch.bool and j.predictions.dtype == torch.long and j.scores.is_floating_point()
    assert float(j.scores.min()) >= 0 and float(j.scores.max()) <= 1, "scores are probabilities"
    assert ((j.predictions >= 0) & (j.predictions < len(names))).all(), "a prediction is a class index"
    assert (j.predictions[j.accept] == y[j.accept]).all(), "an accepted image is predicted as its label"


@pytest.mark.parametrize("option", options("oracle"))
def test_judging_an_image_that_requires_grad_builds_no_graph(option, plugin):
    oracle, names = plugin.obj, plugin.option.class_names
    oracle.prepare(names)
    x = plugin.images().requires_grad_(True)
    j = oracle.judge(x, torch.zeros(len(x), dtype=torch.long))
    assert not (j.accept.requires_grad or j.scores.requires_grad or j.predictions.requires_grad)


# ----------------------------------------------------------------------------------------------- classifiers


@pytest.mark.parametrize("option", options("classifier"))
def test_logits_are_finite_floats_of_one_row_per_image_and_one_column_per_class(option, plugin):
    f = plugin.obj
    logits = f(plugin.images())
    assert logits.shape == (2, f.num_classes) and logits.is_floating_point()
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("option", options("classifier"))
def test_logits_are_differentiable_in_the_images(option, plugin):
    """The search's loss ``CE(f(D(z)), y)`` is differentiated through the classifier into the latent."""
    f = plugin.obj
    x = plugin.images().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(f(x), torch.zeros(len(x), dtype=torch.long))
    (grad,) = torch.autograd.grad(loss, x)
    assert torch.isfinite(grad).all() and (grad.flatten(1).abs().sum(1) > 0).all()
