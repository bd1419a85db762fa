"""Automatic batch size from the memory one search step needs, and the out-of-memory message (issue 14)."""

from __future__ import annotations

import json
import os
import stat

import pytest
import torch

from generators.identity import IdentityGenerator
from genEval import evaluate
from genEval.runs.recording import RunOutput
from genEval.search import batching
from genEval.search.batching import BatchTooLarge, auto_batch_size, step_bytes_per_sample
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from tests.support.toys import AcceptAllOracle, LinearClassifier, SigmoidGenerator, toy_data


class ConvClassifier(torch.nn.Module):
    num_classes, name = 3, "conv"

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(16, 16, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(16, 3),
        )

    def forward(self, x):
        return self.net(x)


def test_step_memory_grows_with_the_pixels():
    """Activations saved for the backward pass scale with the image area: 4x the pixels, ~4x the bytes."""
    clf, gen = ConvClassifier(), IdentityGenerator()
    small = step_bytes_per_sample(torch.rand(3, 32, 32), 0, clf, gen)
    large = step_bytes_per_sample(torch.rand(3, 64, 64), 0, clf, gen)
    assert large / small == pytest.approx(4.0, rel=0.05)
    # two 16-channel float32 feature maps (and their ReLUs) dominate: at least 2 x 16 x 64 x 64 x 4 bytes
    assert large > 2 * 16 * 64 * 64 * 4


def test_auto_batch_size_divides_a_share_of_the_free_memory(monkeypatch):
    clf, gen = ConvClassifier(), IdentityGenerator()
    per = step_bytes_per_sample(torch.rand(3, 32, 32), 0, clf, gen)
    monkeypatch.setattr(batching, "free_memory_bytes", lambda device: 100 * per)
    choice = auto_batch_size(torch.rand(3, 32, 32), 0, clf, gen, torch.device("cpu"))
    assert choice.batch_size == 60  # 0.6 x 100 samples
    monkeypatch.setattr(batching, "free_memory_bytes", lambda device: 10**15)
    assert auto_batch_size(torch.rand(3, 32, 32), 0, clf, gen, torch.device("cpu")).batch_size == batching.MAX_BATCH
    monkeypatch.setattr(batching, "free_memory_bytes", lambda device: per // 10)
    assert auto_batch_size(torch.rand(3, 32, 32), 0, clf, gen, torch.device("cpu")).batch_size == 1


def test_the_automatic_choice_is_recorded(tmp_path):
    r = evaluate(
        LinearClassifier(seed=0),
        toy_data(10),
        SigmoidGenerator(),
        AcceptAllOracle(),
        SearchConfig(budget=1),
        seed=0,
        output=tmp_path,
    )
    rec = json.loads((tmp_path / "results.json").read_text())["batch"]
    assert rec["batch_size"] == r.extra["batch"]["batch_size"] >= 1
    assert rec["auto"]["per_sample_mib"] > 0 and rec["auto"]["free_mib"] > 0


class Hungry(SigmoidGenerator):
    """Runs out of memory whenever more than 4 latents are decoded at once."""

    def decode(self, z):
        if len(z) > 4:
            raise RuntimeError(
                "[enforce fail at alloc_cpu.cpp:116] DefaultCPUAllocator: can't allocate memory: "
                "you tried to allocate 123456789 bytes."
            )
        return super().decode(z)


def test_out_of_memory_names_batch_size_and_a_size_that_fits(tmp_path, monkeypatch):
    clf = LinearClassifier(seed=0)
    per = step_bytes_per_sample(toy_data(1)[0][0], 0, clf, Hungry())
    monkeypatch.setattr(batching, "free_memory_bytes", lambda device: int(4 * per / batching.MEMORY_SHARE))
    with pytest.raises(
        BatchTooLarge,
        match=r"out of memory at batch_size=16 on cpu .*so batch_size=4 would fit.*"
        r"Set batch_size=",
    ):
        evaluate(
            clf,
            toy_data(20),
            Hungry(),
            AcceptAllOracle(),
            SearchConfig(budget=2),
            seed=0,
            execution=Execution(batch_size=16),
            output=tmp_path,
        )
    assert not (tmp_path / "results.json").exists()
    # the suggested size works, and the run resumes
    evaluate(
        clf,
        toy_data(20),
        Hungry(),
        AcceptAllOracle(),
        SearchConfig(budget=2),
        seed=0,
        execution=Execution(batch_size=4),
        output=tmp_path,
    )
    assert (tmp_path / "results.json").is_file()


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o002, 0o664)])
def test_every_output_respects_the_umask(tmp_path, umask, mode):
    """Atomic writes must not leave mkstemp's 0600 on results a colleague needs to read."""
    old = os.umask(umask)
    try:
        evaluate(
            LinearClassifier(seed=0),
            toy_data(10),
            SigmoidGenerator(),
            AcceptAllOracle(),
            SearchConfig(budget=1),
            seed=0,
            output=RunOutput(tmp_path / "run", save_latents=True, save_images=True),
        )
    finally:
        os.umask(old)
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"results.json", "samples.jsonl", "run.json", "grid.png", "part-000000.safetensors"} <= names
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {p.name: oct(mode) for p in files}
