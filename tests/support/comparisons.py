"""A toy data set that draws a seeded subset of a fixed pool, for comparisons with fresh sources per repetition.

:class:`ToyPool` has the data hook :mod:`genEval.campaigns.draws` looks for (``with_seed(seed)``) and a ``seed``
constructor argument, so it also stands in for a data config with a ``seed`` key (genEval.commands.compare).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.harness.run_equality import verdicts


class ToyPool:
    """``limit`` of ``pool`` fixed 3x2x2 images (3 classes, labels ``i % 3``), drawn with ``seed``."""

    def __init__(self, pool: int = 60, limit: int = 20, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(1234)  # the pool itself never changes
        self.pool_x = torch.rand(pool, 3, 2, 2, generator=g)
        self.pool, self.limit, self.seed = pool, limit, int(seed)
        self.indices = sorted(np.random.default_rng(self.seed).choice(pool, size=limit, replace=False).tolist())
        self.labels = [i % 3 for i in self.indices]
        self.class_names, self.name = ["c0", "c1", "c2"], "toypool"

    def with_seed(self, seed: int) -> ToyPool:
        return ToyPool(self.pool, self.limit, seed)

    def __len__(self) -> int:
        return self.limit

    def __getitem__(self, i: int):
        return self.pool_x[self.indices[i]], self.labels[i], self.source_id(i)

    def source_id(self, i: int) -> str:
        return f"pool/{self.indices[i]:03d}"


class PlainPool(ToyPool):
    """The same data without the hook: a comparison cannot re-draw it."""

    with_seed = None  # type: ignore[assignment]


def flat(tree, prefix: str = "") -> dict:
    """``tree`` (nested dicts and lists) as one ``{".a.b[0].c": leaf}`` dict that ``pytest.approx`` can compare (an
    empty list or dict is the leaf ``"[]"`` or ``"{}"``)."""
    if isinstance(tree, dict) and tree:
        return {k: v for key, sub in tree.items() for k, v in flat(sub, f"{prefix}.{key}").items()}
    if isinstance(tree, list) and tree:
        return {k: v for i, sub in enumerate(tree) for k, v in flat(sub, f"{prefix}[{i}]").items()}
    return {prefix: "[]" if tree == [] else "{}" if tree == {} else tree}


def assert_same_verdicts(out_dir: str | Path, reference: str | Path) -> None:
    """The comparisons in ``out_dir`` and ``reference`` agree: every key, string, count and decision exactly, floats
    to a relative 1e-6. Evaluations in processes with another number of torch threads (a Ray task gets one CPU, a
    local run all of them) sum the same softmax outputs in another order, so the softmax means (``max_pred``,
    ``soft_gap``, calibration errors) differ from the 7th digit on (a bootstrap bound
    by up to 2e-6 of itself); accuracies are ratios of counts and a changed decision
    moves them by at least 100/n, which no such tolerance hides."""
    got, want = flat(verdicts(out_dir)), flat(verdicts(reference))
    assert sorted(got) == sorted(want)
    floats = sorted(k for k, v in want.items() if isinstance(v, float))
    assert {k: v for k, v in got.items() if k not in floats} == {k: v for k, v in want.items() if k not in floats}
    assert [got[k] for k in floats] == pytest.approx([want[k] for k in floats], rel=1e-5, abs=1e-9, nan_ok=True)


class LabelPool(ToyPool):
    """A :class:`ToyPool` whose images carry their label in their first pixel (label / 2), so that
    :class:`PixelReader` is right on every clean image: comparisons with a known order."""

    def __getitem__(self, i: int):
        x, y, sid = super().__getitem__(i)
        x = x.clone()
        x[0, 0, 0] = y / 2
        return x, y, sid

    def with_seed(self, seed: int) -> LabelPool:
        return LabelPool(self.pool, self.limit, seed)


class PixelReader(torch.nn.Module):
    """Reads the class from the first pixel of a :class:`LabelPool` image (SA 100), differentiably."""

    num_classes = 3

    def __init__(self, name: str = "reader") -> None:
        super().__init__()
        self.name = name
        self.scale = torch.nn.Parameter(torch.tensor(20.0))

    def forward(self, x):
        v = 2 * x[:, 0, 0, 0:1]
        return -self.scale * (v - torch.arange(3.0)) ** 2


class ConstantClass(torch.nn.Module):
    """Always answers class ``k`` (SA 33.3 on class-balanced data)."""

    num_classes = 3

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k, self.name = k, f"always{k}"
        self.bias = torch.nn.Parameter(torch.nn.functional.one_hot(torch.tensor(k), 3).float() * 5)

    def forward(self, x):
        return self.bias.expand(len(x), 3) + 0 * x.flatten(1).sum(1, keepdim=True)
