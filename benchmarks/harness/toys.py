"""Tiny, fully known components (a studies' and the tests' shared toys): an exact sigmoid latent space, seeded linear
classifiers, an oracle that accepts while a model still predicts the label, and an in-memory dataset. Images are
``(N, C, H, W)`` floats in [0, 1]; the tests take them from here through ``tests/support/toys.py``."""

from __future__ import annotations

import torch
from torch import nn

from genEval.interfaces import Judgement


class SigmoidGenerator(nn.Module):
    """x = sigmoid(z), z = logit(x): an exact, differentiable latent space for [0,1] images."""

    name = "sigmoid"
    downsample = 1

    def encode(self, x):
        return torch.logit(x.clamp(1e-4, 1 - 1e-4))

    def decode(self, z):
        return torch.sigmoid(z)


class LinearClassifier(nn.Module):
    def __init__(self, in_features: int = 12, num_classes: int = 3, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.l = nn.Linear(in_features, num_classes)
        with torch.no_grad():
            self.l.weight.copy_(torch.randn(self.l.weight.shape, generator=g))
            self.l.bias.copy_(torch.randn(self.l.bias.shape, generator=g))
        self.num_classes = num_classes
        self.name = f"linear{seed}"

    def forward(self, x):
        return self.l(x.flatten(1))


class ModelOracle(nn.Module):
    """Accepts when ``model`` still predicts the label."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.name = f"oracle({getattr(model, 'name', 'model')})"

    def prepare(self, class_names):
        pass

    def judge(self, x, y):
        p = self.model(x).softmax(1)
        pred = p.argmax(1)
        return Judgement(pred == y, p.gather(1, y[:, None])[:, 0], pred)


class ListDataset:
    """In-memory ImageDataset for tests."""

    def __init__(self, x, y, class_names, name="toy"):
        self.x, self.y, self.class_names, self.name = x, list(y), list(class_names), name

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], int(self.y[i]), self.source_id(i)

    def source_id(self, i):
        return f"{self.name}/{i:04d}"


def toy_data(n: int = 40, seed: int = 0, classes: int = 3) -> ListDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, 2, 2, generator=g)
    return ListDataset(x, [i % classes for i in range(n)], [f"c{i}" for i in range(classes)])
