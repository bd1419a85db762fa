"""The role stand-ins the speed studies share (throughput, roofline, compile_time, generator_step): random-weight
builds of the paper's generators, a small classifier, oracles that pay a judge's cost but accept by script, and
throughput's ResNet-50 + CLIP pair. Random weights cost the same time as trained ones; only TAEF2 loads the shared
weights when present (``../shared/assets``)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from genEval.classifiers.loaders import torchvision_classifier
from genEval.interfaces import Judgement
from oracles.clip import CLIPOracle

ASSETS = Path(__file__).resolve().parents[2].parent / "shared" / "assets"
#: The generators :func:`build_generator` builds.
GENERATOR_KINDS = ("identity", "taef2", "taesd", "sd-vae", "vqgan-f16")
NUM_CLASSES = 1000  # ResNet-50's logits; labels double as sample ids in the refill comparison (< 1000)


class SmallCNN(nn.Module):
    """A deliberately small classifier (~5k params), so the timings measure the generator."""

    num_classes = 10

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(32, self.num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class AcceptAllOracle(nn.Module):
    """Runs a classifier forward (the cost of a cheap oracle) and accepts every image."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def prepare(self, class_names: list[str]) -> None:
        pass

    def judge(self, images: torch.Tensor, labels: torch.Tensor) -> Judgement:
        p = self.model(images).softmax(1)
        ones = torch.ones(len(labels), dtype=torch.bool, device=labels.device)
        return Judgement(ones, p.gather(1, labels[:, None])[:, 0], p.argmax(1))


class AcceptAll(nn.Module):
    """Runs a real oracle's judgement (its cost and its checks) but accepts every image, so every row runs the whole
    budget, the batch stays full and the number of steps is known."""

    def __init__(self, oracle: nn.Module) -> None:
        super().__init__()
        self.oracle = oracle

    def prepare(self, class_names: list[str]) -> None:
        self.oracle.prepare(class_names)

    def judge(self, images: torch.Tensor, labels: torch.Tensor) -> Judgement:
        j = self.oracle.judge(images, labels)
        return Judgement(torch.ones_like(j.accept, dtype=torch.bool), j.scores, j.predictions)


def build_generator(kind: str) -> tuple[nn.Module, str]:
    """The generator named ``kind`` (float32, CPU) and a note on its weights."""
    if kind == "identity":
        from generators.identity import IdentityGenerator

        return IdentityGenerator(), "-"
    if kind == "taef2":
        from generators.taef2 import TAEF2Generator

        enc, dec = ASSETS / "weights/taef2/taef2_encoder.pth", ASSETS / "weights/taef2/taef2_decoder.pth"
        if enc.is_file() and dec.is_file():
            return TAEF2Generator(encoder_path=enc, decoder_path=dec), "real"
        return TAEF2Generator(), "random"
    if kind == "taesd":
        from diffusers import AutoencoderTiny

        from generators.diffusers_vae import DiffusersVAEGenerator

        return DiffusersVAEGenerator(pretrained=AutoencoderTiny(), name="taesd-random"), "random"
    if kind == "sd-vae":
        from diffusers import AutoencoderKL

        from generators.diffusers_vae import DiffusersVAEGenerator

        vae = AutoencoderKL(
            block_out_channels=(128, 256, 512, 512),
            down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4,
            layers_per_block=2,
            latent_channels=4,
            norm_num_groups=32,
            sample_size=256,
            scaling_factor=0.18215,
        )
        return DiffusersVAEGenerator(pretrained=vae, name="sd-vae-random"), "random"
    if kind == "vqgan-f16":
        from generators.vqgan import (
            IMAGENET_F16_16384_DDCONFIG,
            IMAGENET_F16_16384_EMBED_DIM,
            IMAGENET_F16_16384_N_EMBED,
            VQGANGenerator,
        )

        return VQGANGenerator(
            ddconfig=IMAGENET_F16_16384_DDCONFIG,
            n_embed=IMAGENET_F16_16384_N_EMBED,
            embed_dim=IMAGENET_F16_16384_EMBED_DIM,
        ), "random"
    raise ValueError(f"unknown generator {kind!r}; choose from {list(GENERATOR_KINDS)}")


class ScriptedOracle:
    """Runs the real oracle on every image (its cost is paid) but decides by script.

    ``accept_prob = 1`` accepts everything, so the batch stays full. Below 1, every sample gets a rejection
    step ``r ~ Geometric(1 - accept_prob)``, drawn once per label from a generator seeded with ``seed``: its
    clean-image verdict and start check pass, steps ``t < r`` are accepted and step ``r`` is rejected. Labels
    are sample ids here (unique within a run), so a sample does the same work however the sources are batched;
    the step count is kept per label on the device (no host sync, and no graph break when the step is
    compiled with the oracle inside it).
    """

    def __init__(self, oracle: Any, oracle_classes: int, accept_prob: float = 1.0, seed: int = 0) -> None:
        self.oracle, self.oracle_classes, self.accept_prob = oracle, oracle_classes, accept_prob
        g = torch.Generator().manual_seed(seed)
        u = torch.rand(NUM_CLASSES, generator=g, dtype=torch.float64).clamp_min(1e-12)
        steps = torch.ceil(torch.log(u) / math.log(accept_prob)) if accept_prob < 1 else torch.full_like(u, 1e9)
        self.reject_at = steps.clamp_min(1).long()
        self.calls: torch.Tensor | None = None

    def prepare(self, class_names: list[str]) -> None:
        self.oracle.prepare(class_names)

    def judge(self, images: torch.Tensor, labels: torch.Tensor) -> Judgement:
        j = self.oracle.judge(images, labels % self.oracle_classes)
        if self.accept_prob >= 1:
            return Judgement(torch.ones_like(j.accept, dtype=torch.bool), j.scores, j.predictions)
        if self.calls is None:
            self.calls = torch.zeros(NUM_CLASSES, dtype=torch.long, device=labels.device)
            self.reject_at = self.reject_at.to(labels.device)
        self.calls.index_add_(0, labels, torch.ones_like(labels))
        t = self.calls[labels] - 2  # call 1: the clean image, call 2: the start check (t = 0)
        return Judgement(t < self.reject_at[labels], j.scores, j.predictions)


@dataclass
class Roles:
    """The three roles as built (fp32, eager); settings wrap them afresh with :func:`apply_setting`."""

    classifier: Any
    generator: Any
    oracle: Any
    oracle_classes: int


def build_judges(args: argparse.Namespace, dev: torch.device) -> tuple[Any, Any, int]:
    """ResNet-50 (weights=None) and the CLIP zero-shot oracle (pretrained=None) prepared with class names."""
    from genEval.data.imagenet import imagenet_class_names  # the names data=imagenet uses (distinct)

    clf = torchvision_classifier("resnet50", weights=None, input_size=min(224, args.size)).to(dev)
    oracle = CLIPOracle(args.oracle_model, pretrained=None).to(dev)
    names = imagenet_class_names()[: args.classes]
    oracle.prepare(names)
    return clf, oracle, len(names)
