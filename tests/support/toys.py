"""Tiny, fully known components for testing the engine without any real model (the ones the studies share live in
:mod:`benchmarks.harness.toys`), and the helpers built on them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks.harness.toys import (  # noqa: F401 - the tests take them from here
    LinearClassifier,
    ListDataset,
    ModelOracle,
    SigmoidGenerator,
    toy_data,
)
from genEval.interfaces import Judgement


class FailsAt(ListDataset):
    """``data`` whose source ``at`` cannot be read (``OSError: disk unplugged``): a run that stops there."""

    def __init__(self, data: ListDataset, at: int):
        super().__init__(data.x, data.y, data.class_names, data.name)
        self.at = at

    def __getitem__(self, i):
        if i == self.at:
            raise OSError("disk unplugged")
        return super().__getitem__(i)


def interrupted_run(data: ListDataset, at: int, **evaluate_kwargs) -> None:
    """``genEval.evaluate(data=..., **evaluate_kwargs)`` stopped by an unreadable source ``at`` (it must stop there),
    leaving what it finished in ``output_dir``'s samples.partial.jsonl."""

    from genEval import evaluate

    with pytest.raises(OSError, match="disk unplugged"):
        evaluate(data=FailsAt(data, at), **evaluate_kwargs)


class AcceptAllOracle:
    """Accepts every image (predicts the label itself); isolates the classifier and generator in a test."""

    name = "accept-all"

    def prepare(self, class_names):
        pass

    def judge(self, x, y):
        return Judgement(torch.ones(len(y), dtype=torch.bool), torch.ones(len(y)), y.clone())


class ConstantGenerator(SigmoidGenerator):
    """A generator that loses everything: D(z) = 0.5 everywhere (differentiable, zero gradient); the sigmoid's
    encoder."""

    name = "constant"

    def decode(self, z):
        return torch.sigmoid(z) * 0 + 0.5


def search_batch(x, y, classifier, generator, oracle, cfg, mask=None, batch_size=None, seeds=None, ids=None):
    """Run :func:`genEval.search.perturb.perturb` on a batch of tensors and stack the outcomes in input order.

    Returns a namespace with (N,)-tensors ``start_ok, accepted_steps, rejected_at, first_fooled, final_pred,
    recon_pred, clean_pred, validated`` and stacked ``images, start_images, latents, start_latents``.
    """
    from types import SimpleNamespace

    from genEval.search.perturb import Sample, perturb

    n = len(x)
    seeds = list(range(n)) if seeds is None else seeds
    ids = [f"s{i}" for i in range(n)] if ids is None else ids
    samples = [Sample(x[i], int(y[i]), ids[i], seed=seeds[i], index=i) for i in range(n)]
    outs = sorted(
        perturb(samples, classifier, generator, oracle, cfg, batch_size=batch_size or n, mask=mask),
        key=lambda o: o.index,
    )
    ints = (
        "start_ok",
        "accepted_steps",
        "rejected_at",
        "first_fooled",
        "final_pred",
        "recon_pred",
        "clean_pred",
        "validated",
    )
    ns = SimpleNamespace(**{k: torch.tensor([getattr(o, k) for o in outs]) for k in ints})
    for name, attr in (
        ("images", "image"),
        ("start_images", "start_image"),
        ("latents", "latent"),
        ("start_latents", "start_latent"),
    ):
        setattr(ns, name, torch.stack([getattr(o, attr) for o in outs]))
    ns.final_step = ns.accepted_steps
    return ns


def tiny_ddconfig(z_channels: int) -> dict:
    """A tiny taming Encoder/Decoder config (16 px, one down-sampling, ``z_channels`` latent channels)."""
    return dict(
        ch=32, out_ch=3, ch_mult=[1, 2], num_res_blocks=1, attn_resolutions=[], in_channels=3, resolution=16,
        z_channels=z_channels, dropout=0.0, double_z=False,
    )  # fmt: skip


def linear_roles() -> dict:
    """The linear toy classifier (seed 0), the sigmoid generator and an oracle of another linear toy (seed 1), as
    ``genEval.evaluate``'s keywords."""
    return dict(
        classifier=LinearClassifier(seed=0), generator=SigmoidGenerator(), oracle=ModelOracle(LinearClassifier(seed=1))
    )


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def same_records(a: Path, b: Path) -> None:
    """Every field of every record equal; the measured distances and confidences (floats) equal up to float noise,
    because a resumed run refills its batch with other neighbours than the uninterrupted one (docs/scale-out.md,
    "Crashes cost nothing")."""
    ra, rb = records(a), records(b)
    assert [r["source_id"] for r in ra] == [r["source_id"] for r in rb]
    for x, y in zip(ra, rb):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], float) or (isinstance(x[k], list) and any(isinstance(v, float) for v in x[k])):
                assert x[k] == pytest.approx(y[k], rel=1e-5, abs=1e-6), (x["source_id"], k)  # lists: confidences
            else:
                assert x[k] == y[k], (x["source_id"], k)
