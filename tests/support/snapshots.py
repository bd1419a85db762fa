"""A toy run with known outcomes, and snapshots of it, shared by test_snapshot.py and test_snapshot_eval.py.

The run is made with known components: a classifier that predicts the brightest channel, a sigmoid
latent space that decodes at twice the resolution (8 px originals, 16 px perturbed images), and an
oracle that rejects dark images, so which samples are validated and fooled is known.
"""

from __future__ import annotations

from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from genEval import evaluate
from genEval.commands import CONF_DIR
from genEval.interfaces import Judgement
from genEval.runs import RunDir, read_samples
from genEval.runs.recording import RunOutput
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from genEval.snapshots.export import export_snapshot
from tests.support.toys import ListDataset

CLASSES = ["cat", "dog", "originals"]  # a class named like the originals/ folder must not collide with it


class UpsampleGenerator(torch.nn.Module):
    """x = upsample2(sigmoid(z)): perturbed images come out at twice the originals' size."""

    name = "up2"
    downsample = 1

    def encode(self, x):
        return torch.logit(x.clamp(1e-3, 1 - 1e-3))

    def decode(self, z):
        return torch.nn.functional.interpolate(torch.sigmoid(z), scale_factor=2, mode="nearest")


class ChannelClassifier(torch.nn.Module):
    """Predicts the brightest channel (any image size)."""

    def __init__(self, num_classes: int = 3, name: str = "channel"):
        super().__init__()
        self.num_classes, self.name = num_classes, name

    def forward(self, x):
        m = 10.0 * x.mean((2, 3))
        return torch.cat([m, m.new_zeros(len(x), self.num_classes - 3)], 1) if self.num_classes > 3 else m


class ConstClassifier(torch.nn.Module):
    """Always the same logits: predicts ``cls`` with softmax probability e^2/(e^2+2) = 0.787."""

    def __init__(self, cls: int):
        super().__init__()
        self.cls, self.num_classes, self.name = cls, 3, f"const{cls}"

    def forward(self, x):
        out = torch.zeros(len(x), 3)
        out[:, self.cls] = 2.0
        return out


class BrightOracle(torch.nn.Module):
    name = "bright"

    def prepare(self, class_names):
        pass

    def judge(self, x, y):
        m = x.mean((1, 2, 3))
        return Judgement(m > 0.2, m, y)


def toy_images(n: int = 30, seed: int = 0) -> ListDataset:
    g = torch.Generator().manual_seed(seed)
    y = [i % 3 for i in range(n)]
    x = 0.3 + 0.15 * torch.rand(n, 3, 8, 8, generator=g)
    for i, c in enumerate(y):
        x[i, c] = 0.4 + 0.35 * torch.rand(1, generator=g) + 0.1 * torch.rand(8, 8, generator=g)
        if i % 10 == 9:
            x[i] *= 0.3  # dark: the oracle rejects it at the start check -> not validated
    return ListDataset((x * 255).round() / 255, y, CLASSES)


def compose_config(name: str, overrides: list[str]):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(name, overrides=overrides)


def make_run(out: Path) -> Path:
    """The toy run (27 of 30 samples validated, some fooled), with images and latents saved, in ``out``."""
    evaluate(
        ChannelClassifier(),
        toy_images(),
        UpsampleGenerator(),
        BrightOracle(),
        SearchConfig(budget=2, step_size=0.2, update="sign"),
        seed=0,
        execution=Execution(batch_size=16),
        output=RunOutput(out, save_latents=True, save_images=True),
    )
    return out


def expected_content(run_dir: Path) -> dict:
    """The validated samples of the run as the run directory stores them (the expected snapshot content)."""
    imgs = RunDir(run_dir).tensors("images")
    v = imgs["validated"]
    return {
        "perturbed": imgs["perturbed"][v],
        "original": imgs["original"][v],
        "labels": imgs["labels"][v],
        "ids": [i for i, ok in zip(imgs["source_ids"], v.tolist(), strict=True) if ok],
        "records": [r.to_dict() for r in read_samples(run_dir) if r.validated],
    }


def export_both(run_dir: Path, parent: Path) -> tuple[Path, Path]:
    """An imagefolder snapshot with latents, and a webdataset one in shards of 10 (10, 10, 7 samples)."""
    return (
        export_snapshot(run_dir, parent / "imagefolder", include_latents=True),
        export_snapshot(run_dir, parent / "wds", format="webdataset", shard_size=10),
    )
