"""Training a small taming-architecture VQ generator: checkpoints, resume, atomic saves, PSNR."""

from __future__ import annotations

import math

import pytest
import torch

import generators.small_vq as small_vq
from generators.small_vq import (
    TrainReport,
    VQTrainer,
    digits_vq,
    load_trained_vq,
    reconstruction_psnr,
    train_vq_generator,
)
from generators.vqgan import VQGANGenerator
from genEval.data.standard import DigitsData
from genEval.interfaces import Generator

TINY_DD = dict(ch=32, ch_mult=[1, 2], num_res_blocks=1, attn_resolutions=[], z_channels=8)
KW = dict(ddconfig=TINY_DD, n_embed=32, embed_dim=8, batch_size=8, lr=3e-3, progress=False)


class BarsData:
    """Tiny ImageDataset: 1-channel 8x8 images of a bright bar (row or column) on a dark background."""

    def __init__(self, n: int = 32, offset: int = 0, name: str = "bars") -> None:
        self.name = name
        self.class_names = ["row", "column"]
        self.images, self.labels = [], []
        for i in range(offset, offset + n):
            img = torch.full((1, 8, 8), 0.1)
            k = i % 2
            pos = (i // 2) % 8
            if k == 0:
                img[0, pos, :] = 0.9
            else:
                img[0, :, pos] = 0.9
            self.images.append(img)
            self.labels.append(k)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int, str]:
        return self.images[i], self.labels[i], f"{self.name}/{i:03d}"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("vq")
    report = train_vq_generator(BarsData(32), BarsData(16, offset=5), out_dir=out, epochs=2, **KW)
    return out, report


def test_training_writes_a_weights_only_checkpoint(trained):
    out, report = trained
    assert isinstance(report, TrainReport)
    assert report.epochs == 2 and report.start_epoch == 0 and report.seconds > 0
    assert all(math.isfinite(v) for v in (report.psnr, report.psnr_quantized, report.train_loss))
    ckpt = out / "last.ckpt"
    assert report.checkpoint == str(ckpt) and ckpt.is_file()
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    assert {"state_dict", "config", "epoch", "optimizer", "psnr"} <= set(state)
    assert state["epoch"] == 2 and state["psnr"] == pytest.approx(report.psnr)
    assert state["config"]["n_embed"] == 32 and state["config"]["ddconfig"]["in_channels"] == 1
    assert not list(out.glob(".*tmp*"))  # no temporary file left behind
    assert report.to_dict()["epochs"] == 2


def test_trained_generator_loads_and_beats_an_untrained_one(trained):
    out, report = trained
    g = load_trained_vq(out / "last.ckpt")
    assert isinstance(g, Generator) and isinstance(g, VQGANGenerator)
    assert g.name.startswith("vq:bars:") and g.downsample == 2
    assert not any(p.requires_grad for p in g.parameters())
    held = BarsData(16, offset=5)
    assert reconstruction_psnr(g, held) == pytest.approx(report.psnr, abs=1e-3)
    torch.manual_seed(0)
    untrained = VQGANGenerator({**TINY_DD, "in_channels": 1, "out_ch": 1, "resolution": 8}, 32, 8)
    assert report.psnr > reconstruction_psnr(untrained, held) + 3
    z = g.encode(torch.rand(2, 1, 8, 8)).requires_grad_(True)
    (grad,) = torch.autograd.grad(g.decode(z).sum(), z)
    assert float(grad.abs().sum()) > 0
    assert load_trained_vq(out / "last.ckpt", quantize="straight_through").quantize_mode == "straight_through"


def test_resume_continues_from_the_saved_epoch(trained, tmp_path):
    src, _ = trained
    out = tmp_path / "resume"
    out.mkdir()
    (out / "last.ckpt").write_bytes((src / "last.ckpt").read_bytes())
    report = train_vq_generator(BarsData(32), BarsData(16, offset=5), out_dir=out, epochs=3, **KW)
    assert report.start_epoch == 2 and report.epochs == 3
    assert torch.load(out / "last.ckpt", weights_only=True)["epoch"] == 3
    # already done: nothing trained, the report still measures the checkpoint
    again = train_vq_generator(BarsData(32), BarsData(16, offset=5), out_dir=out, epochs=3, **KW)
    assert again.start_epoch == 3 and again.psnr == pytest.approx(report.psnr, abs=1e-3)
    with pytest.raises(ValueError, match=r"trained with config .* resume=false"):
        train_vq_generator(BarsData(32), None, out_dir=out, epochs=4, **{**KW, "n_embed": 64})


def test_interrupted_save_never_leaves_a_complete_looking_checkpoint(tmp_path, monkeypatch):
    out = tmp_path / "crash"
    train_vq_generator(BarsData(16), BarsData(8), out_dir=out, epochs=1, **KW)
    before = (out / "last.ckpt").read_bytes()
    real_save = torch.save

    def crashing_save(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", crashing_save)
    with pytest.raises(KeyboardInterrupt):
        train_vq_generator(BarsData(16), BarsData(8), out_dir=out, epochs=2, **KW)
    monkeypatch.setattr(torch, "save", real_save)
    assert (out / "last.ckpt").read_bytes() == before  # the previous epoch's checkpoint is intact
    assert torch.load(out / "last.ckpt", weights_only=True)["epoch"] == 1
    assert sorted(p.name for p in out.iterdir()) == ["last.ckpt"]

    fresh = tmp_path / "fresh"
    monkeypatch.setattr(torch, "save", crashing_save)
    with pytest.raises(KeyboardInterrupt):
        train_vq_generator(BarsData(16), BarsData(8), out_dir=fresh, epochs=1, **KW)
    assert not (fresh / "last.ckpt").exists() and not list(fresh.iterdir())


def test_the_trainer_checks_its_settings_when_made_before_it_reads_or_writes_anything(tmp_path):
    """VQTrainer refuses a bad setting at construction (no data read, no out_dir made); good ones are coerced."""
    out = tmp_path / "never"
    for bad, match in (
        ({"loss": "huber"}, r"loss='huber'.*\['l1', 'mse'\]"),
        ({"epochs": -1}, r"epochs=-1 must be >= 0"),
        ({"lr": 0}, r"lr=0 must be a positive"),
        ({"lr_schedule": "step"}, r"lr_schedule=.step. is not known"),
        ({"batch_size": 0}, r"batch_size"),
    ):
        with pytest.raises(ValueError, match=match):
            VQTrainer(out_dir=out, **bad)
    assert not out.exists()
    trainer = VQTrainer(out_dir=out, epochs="2", batch_size=8.0, lr="1e-3", device="auto")
    assert (trainer.epochs, trainer.batch_size, trainer.lr) == (2, 8, 1e-3) and isinstance(trainer.device, torch.device)
    assert not out.exists()


def test_training_errors_teach(tmp_path):
    with pytest.raises(ValueError, match=r"loss='huber'.*\['l1', 'mse'\]"):
        train_vq_generator(BarsData(8), out_dir=tmp_path, loss="huber", **KW)
    with pytest.raises(ValueError, match=r"ddconfig\.in_channels=3 but the training images have 1 channels"):
        train_vq_generator(BarsData(8), out_dir=tmp_path, **{**KW, "ddconfig": {**TINY_DD, "in_channels": 3}})
    deep = {**TINY_DD, "ch_mult": [1, 1, 1, 1, 2]}
    with pytest.raises(ValueError, match=r"8x8 but ddconfig\.ch_mult=\[1, 1, 1, 1, 2\] down-samples by 16"):
        train_vq_generator(BarsData(8), out_dir=tmp_path, **{**KW, "ddconfig": deep})
    with pytest.raises(ValueError, match=r"lr=0 must be a positive"):
        train_vq_generator(BarsData(8), out_dir=tmp_path, **{**KW, "lr": 0})
    with pytest.raises(ValueError, match=r"lr_schedule=.step. is not known"):
        train_vq_generator(BarsData(8), out_dir=tmp_path, lr_schedule="step", **KW)
    with pytest.raises(ValueError, match=r"not a checkpoint written by train_vq_generator"):
        bad = tmp_path / "bad.ckpt"
        torch.save({"weights": torch.zeros(1)}, bad)
        load_trained_vq(bad)


def test_digits_vq_trains_once_then_loads_from_the_cache(monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"no trained digits VQ generator.*train_if_missing=true"):
        digits_vq(image_size=8, epochs=1, seed=7, train_if_missing=False)
    g = digits_vq(image_size=8, epochs=1, seed=7, progress=False)  # 8 px: fast
    assert g.name.startswith("vq:digits:") and g.channels == 1 and g.image_size == 8
    test = DigitsData(split="test", image_size=8)
    x = torch.stack([test[i][0] for i in range(4)])
    assert g.encode(x).shape == (4, small_vq.DIGITS_EMBED_DIM, 4, 4)
    assert g.decode(g.encode(x)).shape == x.shape

    def no_training(*args, **kwargs):
        raise AssertionError("digits_vq retrained although a cached checkpoint exists")

    monkeypatch.setattr(small_vq, "train_vq_generator", no_training)
    again = digits_vq(image_size=8, epochs=1, seed=7, quantize="straight_through")
    assert again.name == g.name and again.quantize_mode == "straight_through"


@pytest.mark.slow
def test_digits_vq_default_reaches_a_useful_psnr():
    g = digits_vq(progress=False)
    assert reconstruction_psnr(g, DigitsData(split="test", image_size=16)) > 22.0
