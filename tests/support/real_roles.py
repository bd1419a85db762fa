"""The library's own backends, tiny: a taming VQGAN that quantises, a CNN under test and a zoo of classifier
oracles, for tests (and benchmarks) that count what the search step does on real modules rather than toys."""

from __future__ import annotations

import torch

from benchmarks.harness.roles import AcceptAll  # noqa: F401 - the tests take it from here
from generators.vqgan import VQGANGenerator
from genEval.classifiers import ImageClassifier
from genEval.search.perturb import Sample
from oracles.classifier import ClassifierOracle
from oracles.zoo import ZooOracle
from tests.support.toys import tiny_ddconfig


def cnn(seed: int, classes: int = 3) -> ImageClassifier:
    """A small random CNN under test (``(B, 3, H, W)`` in [0, 1] -> ``(B, classes)``), seeded."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.GroupNorm(2, 8),
        torch.nn.SiLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, classes),
    )
    return ImageClassifier(net, classes, [0.5] * 3, [0.25] * 3, None, name=f"cnn{seed}")


def real_roles() -> tuple:
    """A taming VQGAN (tiny, quantising), a CNN under test and a zoo of two classifier oracles: the library's own
    backends, with the checks they make on every call."""
    gen = VQGANGenerator(tiny_ddconfig(4), n_embed=16, embed_dim=4, quantize="straight_through")
    oracle = ZooOracle([ClassifierOracle(cnn(1)), ClassifierOracle(cnn(2))], rule="majority")
    return cnn(0), gen, oracle


def images(n: int, seed: int = 0) -> list[Sample]:
    """``n`` seeded random 16-px RGB sources, labels cycling over three classes."""
    g = torch.Generator().manual_seed(seed)
    return [Sample(torch.rand(3, 16, 16, generator=g), i % 3, f"s{i}", seed=i, index=i) for i in range(n)]
