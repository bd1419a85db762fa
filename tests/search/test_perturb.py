"""Invariants of the perturbation loop (docs/method.md, "One sample"), with exact toy components."""

from __future__ import annotations

import pytest
import torch

from genEval.interfaces import Judgement
from genEval.search.perturb import NonFiniteError, SearchConfig
from tests.support.toys import LinearClassifier, ModelOracle, SigmoidGenerator, search_batch, toy_data


def batch(n=24, seed=0):
    d = toy_data(n, seed)
    return d.x, torch.tensor(d.y)


def run(cfg, oracle_seed=1, mask=None, x=None, y=None, clf=None):
    if x is None:
        x, y = batch()
    clf = clf or LinearClassifier(seed=0)
    oracle = ModelOracle(LinearClassifier(seed=oracle_seed))
    return search_batch(x, y, clf, SigmoidGenerator(), oracle, cfg, mask=mask)


def test_oracle_equal_to_tested_model_gives_pa_100():
    x, y = batch(60)
    clf = LinearClassifier(seed=0)
    cfg = SearchConfig(start_noise=0, budget=15, step_size=0.2)
    out = search_batch(x, y, clf, SigmoidGenerator(), ModelOracle(clf), cfg)
    assert out.validated.sum() > 0
    assert bool((out.final_pred[out.validated] == y[out.validated]).all())


def test_budget_zero_perturbs_nothing():
    x, y = batch()
    out = run(SearchConfig(start_noise=0, budget=0), x=x, y=y)
    assert out.validated.sum() == 0
    assert torch.equal(out.images, out.start_images)
    assert bool((out.rejected_at == -1).all()) and bool((out.first_fooled == -1).all())
    assert torch.equal(out.final_pred, out.recon_pred)


def test_step_size_zero_leaves_the_reconstruction_unchanged():
    out = run(SearchConfig(start_noise=0, budget=7, step_size=0.0))
    assert torch.equal(out.latents, out.start_latents)
    torch.testing.assert_close(out.images, out.start_images, rtol=0, atol=1e-6)
    # every step re-proposes the start, which the oracle accepted: all start-valid samples validate
    assert torch.equal(out.validated, out.start_ok)
    assert bool((out.final_step[out.start_ok] == 7).all())


@pytest.mark.parametrize("update,step", [("adam", 0.3), ("sgd", 5.0), ("sign", 0.3)])
def test_batch_equals_one_sample_at_a_time(update, step):
    """Samples leaving the batch (rejected) must not change the others: per-row state is exact."""
    x, y = batch(16)
    cfg = SearchConfig(start_noise=0, budget=12, step_size=step, update=update)
    whole = run(cfg, x=x, y=y)
    assert (whole.rejected_at > 0).any() and (whole.rejected_at < 0).any(), "test needs mixed outcomes"
    for i in range(len(x)):
        one = run(cfg, x=x[i : i + 1], y=y[i : i + 1])
        for f in ("final_step", "rejected_at", "first_fooled", "final_pred", "recon_pred", "start_ok"):
            assert getattr(one, f)[0] == getattr(whole, f)[i], (f, i)
        torch.testing.assert_close(one.latents[0], whole.latents[i], rtol=1e-5, atol=1e-6)


def test_rejection_keeps_last_accepted_step():
    x, y = batch(30)
    oracle_clf = LinearClassifier(seed=1)
    out = run(SearchConfig(start_noise=0, budget=20, step_size=0.3), x=x, y=y)
    rej = out.rejected_at > 0
    assert rej.any()
    assert bool((out.final_step[rej] == out.rejected_at[rej] - 1).all())
    # the kept image is D(kept latent) and the oracle accepts it
    torch.testing.assert_close(out.images, torch.sigmoid(out.latents))
    v = out.validated
    assert bool((oracle_clf(out.images[v]).argmax(1) == y[v]).all())
    # samples failing the start check are never searched
    assert bool((out.final_step[~out.start_ok] == 0).all())


def test_sign_update_moves_each_latent_by_step_times_steps():
    x, y = batch(8)
    clf = LinearClassifier(seed=0)
    cfg = SearchConfig(start_noise=0, budget=5, step_size=0.01, update="sign")
    out = search_batch(x, y, clf, SigmoidGenerator(), ModelOracle(LinearClassifier(seed=0)), cfg)
    dz = (out.latents - out.start_latents)[out.final_step == 5]
    assert len(dz) > 0
    torch.testing.assert_close(dz.abs(), torch.full_like(dz, 0.05), rtol=1e-4, atol=1e-5)


def test_mask_restricts_the_update():
    mask = torch.zeros(3, 2, 2)
    mask[0, 0, 0] = 1
    mask[2, 1, 1] = 1
    out = run(SearchConfig(start_noise=0, budget=5, step_size=0.2, update="sign"), mask=mask)
    dz = out.latents - out.start_latents
    assert torch.equal(dz * (1 - mask), torch.zeros_like(dz))
    assert (dz[out.validated] * mask).abs().sum() > 0


def test_mask_of_wrong_shape_is_refused():
    with pytest.raises(ValueError, match=r"mask shape \(4, 2, 2\) does not match the latent shape \(3, 2, 2\)"):
        run(SearchConfig(start_noise=0, budget=2), mask=torch.ones(4, 2, 2))


def test_early_stop_stops_once_fooled_and_records_the_step():
    x, y = batch(40)
    full = run(SearchConfig(start_noise=0, budget=25, step_size=0.3), x=x, y=y)
    early = run(SearchConfig(start_noise=0, budget=25, step_size=0.3, early_stop=True), x=x, y=y)
    fooled = early.first_fooled > 0
    assert fooled.any()
    # with early stop the sample ends exactly at the first fooling step, with a wrong prediction
    assert torch.equal(early.final_step[fooled], early.first_fooled[fooled])
    assert bool((early.final_pred[fooled] != y[fooled]).all())
    # the first fooled step is the same with or without early stopping
    assert torch.equal(full.first_fooled, early.first_fooled)


def test_start_noise_is_seeded_per_sample():
    x, y = batch(8)
    cfg = SearchConfig(budget=3, step_size=0.1, start_noise=0.5)
    clf = LinearClassifier(seed=0)
    outs = [
        search_batch(x, y, clf, SigmoidGenerator(), ModelOracle(clf), cfg, seeds=seeds)
        for seeds in ([3] * 8, [3] * 8, [4] * 8, [4] + [3] * 7)
    ]
    assert torch.equal(outs[0].start_images, outs[1].start_images)
    assert not torch.equal(outs[0].start_images, outs[2].start_images)
    # a sample's noise depends on its own seed only, not on its neighbours'
    assert torch.equal(outs[3].start_images[1:], outs[0].start_images[1:])
    assert torch.equal(outs[3].start_images[0], outs[2].start_images[0])


class NaNClassifier(LinearClassifier):
    def forward(self, x):
        out = super().forward(x)
        return out * torch.where(torch.arange(len(x))[:, None] == 1, float("nan"), 1.0)


def test_non_finite_loss_names_the_samples():
    x, y = batch(4)
    clf = NaNClassifier(seed=0)
    ids = ["a", "b", "c", "d"]

    class Yes(ModelOracle):
        def judge(self, x, y):
            return Judgement(torch.ones(len(x), dtype=torch.bool), torch.ones(len(x)), y)

    with pytest.raises(NonFiniteError, match=r"non-finite loss for sample\(s\) \['b'\]"):
        search_batch(x, y, clf, SigmoidGenerator(), Yes(clf), SearchConfig(start_noise=0, budget=2), ids=ids)


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"budget": -1}, r"search.budget must be a whole number >= 0, got -1"),
        ({"step_size": -0.1}, r"search.step_size must be a number >= 0, got -0.1"),
        ({"update": "rmsprop"}, r"unknown search.update='rmsprop'; choose one of adam, sgd, sign"),
    ],
)
def test_bad_search_settings_are_refused(kw, msg):
    with pytest.raises(ValueError, match=msg):
        SearchConfig(**kw)


def test_start_noise_touches_only_the_masked_dims():
    mask = torch.zeros(3, 2, 2)
    mask[1] = 1
    x, y = batch(8)
    clf = LinearClassifier(seed=0)
    out = search_batch(
        x, y, clf, SigmoidGenerator(), ModelOracle(clf), SearchConfig(budget=2, start_noise=0.5), mask=mask
    )
    dz = out.latents - out.start_latents
    assert torch.equal(dz * (1 - mask), torch.zeros_like(dz))
    assert (dz * mask).abs().sum() > 0


def test_latent_and_image_distances_are_measured_from_the_same_start():
    """Both from the start of the search, z_0 = E(x) + noise and D(z_0): with nothing accepted both are 0."""
    x, y = batch(10)
    clf = LinearClassifier(seed=0)
    out = search_batch(x, y, clf, SigmoidGenerator(), ModelOracle(clf), SearchConfig(budget=0, start_noise=0.5))
    from genEval.search.perturb import Sample, perturb

    samples = [Sample(x[i], int(y[i]), f"s{i}", seed=i, index=i) for i in range(10)]
    outs = list(perturb(samples, clf, SigmoidGenerator(), ModelOracle(clf), SearchConfig(budget=0, start_noise=0.5)))
    assert all(o.latent_dist == 0.0 and o.image_dist == 0.0 and o.image_linf == 0.0 for o in outs)
    assert not torch.equal(out.latents, out.start_latents)  # the noise did move the start away from E(x)
    moved = list(
        perturb(
            samples,
            clf,
            SigmoidGenerator(),
            ModelOracle(clf),
            SearchConfig(budget=3, step_size=0.3, update="sign", start_noise=0.5),
        )
    )
    assert any(o.validated for o in moved)
    for o in moved:  # D = sigmoid, so the start latent z_0 = logit(D(z_0)) is known exactly
        z_start = torch.logit(o.start_image.double())
        assert o.latent_dist == pytest.approx(float((o.latent.double() - z_start).norm()), rel=1e-3, abs=1e-3)
        assert o.image_dist == pytest.approx(float((o.image - o.start_image).norm()), rel=1e-5, abs=1e-6)
