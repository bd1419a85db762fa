"""Faults a reviewer injected into the engine that no test caught (issue 13): each test here fails if the
behaviour it names breaks. Written against ``genEval.evaluate`` and the run directory, with exact toy
components whose answers are computed independently in the test."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from generators.identity import IdentityGenerator
from genEval import evaluate
from genEval.classifiers.loaders import cifar_resnet
from genEval.data.folders import ImageFolderData
from genEval.data.standard import CIFAR10_CLASSES
from genEval.runs import RunDir
from genEval.runs.recording import RunOutput
from genEval.scores.run_scores import Scoring
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from tests.support.assets import asset
from tests.support.toys import (
    AcceptAllOracle,
    ConstantGenerator,
    LinearClassifier,
    ListDataset,
    SigmoidGenerator,
    toy_data,
)


def _latents(run_dir):
    lat = RunDir(run_dir).tensors("latents")
    return lat["start"], lat["final"], lat["source_ids"]


def test_fgsm_start_begins_from_the_fgsm_image(tmp_path):
    """Paper App. E: z0 = E(clip(x + eps * sign(grad_x CE(f(x), y)))). The linear classifier's input
    gradient is W^T (softmax(f(x)) - onehot(y)), computed here by hand."""
    data = toy_data(12)
    clf = LinearClassifier(seed=0)
    eps = 0.1
    evaluate(
        clf,
        data,
        SigmoidGenerator(),
        AcceptAllOracle(),
        SearchConfig(budget=0, start_noise=0, fgsm_start=eps),
        seed=0,
        output=RunOutput(tmp_path, save_latents=True),
    )
    start, _, ids = _latents(tmp_path)
    assert ids == [data[i][2] for i in range(len(data))]
    x, y = data.x, torch.tensor(data.y)
    with torch.no_grad():
        p = clf(x).softmax(1)
        grad = (p - F.one_hot(y, 3).float()) @ clf.l.weight  # d CE / d x, (N, 12)
    expected = (x.flatten(1) + eps * grad.sign()).clamp(0, 1).view_as(x)
    torch.testing.assert_close(torch.sigmoid(start), expected.clamp(1e-4, 1 - 1e-4), rtol=0, atol=1e-5)
    assert (expected - x).abs().amax() > 0.05  # the start really moved


def test_adam_first_step_is_bias_corrected(tmp_path):
    """One Adam step with bias correction moves every latent with a clear gradient by exactly the step size
    (m_hat / sqrt(v_hat) = g / |g|); without the correction it would move by 0.1 / sqrt(0.001) = 3.16 steps."""
    a = 0.01
    evaluate(
        LinearClassifier(seed=0),
        toy_data(10),
        SigmoidGenerator(),
        AcceptAllOracle(),
        SearchConfig(budget=1, step_size=a, start_noise=0, update="adam"),
        seed=0,
        output=RunOutput(tmp_path, save_latents=True),
    )
    start, final, _ = _latents(tmp_path)
    moved = (final - start).abs()
    assert float(moved.max()) == pytest.approx(a, rel=1e-3)
    assert float((moved > 0.999 * a).float().mean()) > 0.9  # all but coordinates with |g| ~ eps


def test_start_noise_is_measured_in_steps_not_in_latent_std(tmp_path):
    """Start noise = start_noise x step_size x N(0, 1) per dim, whatever the spread of the sample's latent."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 3, 16, 16, generator=g) * 0.98 + 0.01
    x[:3] = 0.5 + (x[:3] - 0.5) * 0.1  # three samples with a small latent std, three with a large one
    data = ListDataset(x, [0, 1, 2, 0, 1, 2], ["a", "b", "c"])
    clf = LinearClassifier(in_features=3 * 16 * 16, seed=0)
    evaluate(
        clf,
        data,
        SigmoidGenerator(),
        AcceptAllOracle(),
        SearchConfig(budget=0, start_noise=4.0, step_size=0.05),
        seed=3,
        output=RunOutput(tmp_path, save_latents=True),
    )
    start, final, _ = _latents(tmp_path)
    noise = (final - start).flatten(1)
    torch.testing.assert_close(noise.std(dim=1), torch.full((6,), 4.0 * 0.05), rtol=0.1, atol=0)
    assert float(start[:3].flatten(1).std(1).max()) < 0.5 * float(start[3:].flatten(1).std(1).min())


def test_ra_measures_the_generator_gap_and_warns():
    """RA = accuracy on D(E(x)). A generator that maps everything to grey makes the classifier predict one
    class k on every reconstruction, so RA = share of labels equal to k, and SA - RA > gap_warn_points warns."""
    x = toy_data(30).x
    clf = LinearClassifier(seed=0)
    with torch.no_grad():
        labels = clf(x).argmax(1).tolist()  # the classifier is right on every clean image: SA = 100
        k = int(clf(torch.full((1, 3, 2, 2), 0.5)).argmax())
    data = ListDataset(x, labels, ["c0", "c1", "c2"])
    sa = 100.0
    expected_ra = 100 * sum(y == k for y in labels) / len(labels)
    lossy = evaluate(
        clf,
        data,
        ConstantGenerator(),
        AcceptAllOracle(),
        SearchConfig(budget=2),
        seed=0,
        scoring=Scoring(gap_warn_points=10),
    )
    assert lossy.scores.ra.value == pytest.approx(expected_ra)
    assert lossy.scores.sa.value == pytest.approx(sa)
    assert sa - expected_ra > 10
    assert any(w.startswith("generator gap") for w in lossy.warnings)
    exact = evaluate(
        clf,
        data,
        SigmoidGenerator(),
        AcceptAllOracle(),
        SearchConfig(budget=2, start_noise=0),
        seed=0,
        scoring=Scoring(gap_warn_points=10),
    )
    assert exact.scores.ra.value == pytest.approx(sa)
    assert not any(w.startswith("generator gap") for w in exact.warnings)


@pytest.mark.weights
def test_resnet20_known_answer_through_evaluate():
    """SA of the shared ResNet-20 on the 10,000 shared CIFAR-10 JPEGs is 81.03% (assets README), measured
    through genEval.evaluate itself (identity generator, no search)."""
    data = ImageFolderData(asset("cifar10/test-jpg"), class_names=CIFAR10_CLASSES)
    clf = cifar_resnet(20, checkpoint=asset("weights/cifar10-resnet/resnet20-12fca82f.th"))
    r = evaluate(
        clf,
        data,
        IdentityGenerator(),
        AcceptAllOracle(),
        SearchConfig(budget=0, start_noise=0),
        seed=0,
        execution=Execution(batch_size=500, num_workers=2, device="cpu"),
    )
    assert (r.scores.n, r.scores.sa.k) == (10000, 8103)
    assert r.scores.sa.value == pytest.approx(81.03)
    assert r.scores.ra.k == 8103  # the identity generator reconstructs exactly
