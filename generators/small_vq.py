"""A small taming-architecture VQ autoencoder trained on the user's own images (a generator backend).

The paper lets the generator be any model with an encoder and a decoder, including one trained on
the evaluated domain (Zhang et al., ICLR 2024, Sec. 3.2 and Table 3, MNIST with its own generator).
This backend trains taming-transformers' VQ autoencoder (Esser et al., CVPR 2021: ``Encoder``,
``VectorQuantizer``, ``Decoder``, built by :class:`generators.vqgan.VQGANGenerator`) without the
adversarial and perceptual terms, which need pretrained LPIPS weights and much longer training:

    loss = |x - D(q(E(x)))|_1   (or squared error)   +   ||sg[E(x)] - e||^2 + beta ||E(x) - sg[e]||^2

with the straight-through estimator through the quantiser ``q`` (van den Oord et al., 2017) and
Adam. The VQ term is exactly what taming's quantiser returns (beta = 0.25).

A checkpoint ``last.ckpt`` holding only tensors and plain Python (loadable with
``torch.load(weights_only=True)``) is written atomically after every epoch; training resumes from it.

Reached through config only (``_target_``): ``conf/generator/trained_vq.yaml`` (:func:`load_trained_vq`),
``conf/generator/digits_vq.yaml`` (:func:`digits_vq`, the offline default: trained once on scikit-learn's
digits and cached) and the ``trainer`` node of ``conf/train_generator.yaml`` (:func:`train_vq_generator`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm.auto import tqdm

from generators.common import state_dict_digest
from generators.vqgan import VQGANGenerator, check_ddconfig
from genEval.checkpoints import cache_dir, load_checkpoint
from genEval.data.standard import DigitsData
from genEval.declared import Declaration, declared_by, square
from genEval.fileio import atomic_write, atomic_write_json
from genEval.interfaces import ImageDataset, check_batch_size, resize_images

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "last.ckpt"
LOSSES = ("l1", "mse")
LR_SCHEDULES = ("cosine", "constant")

# Small taming ddconfig for 16-32 px images: two levels (down-sampling 2), one residual block per
# level, no attention outside the middle block. in_channels / out_ch / resolution come from the data.
DEFAULT_DDCONFIG: dict = {
    "ch": 32,
    "ch_mult": [1, 2],
    "num_res_blocks": 1,
    "attn_resolutions": [],
    "z_channels": 16,
    "dropout": 0.0,
    "double_z": False,
}
DEFAULT_N_EMBED = 256
DEFAULT_EMBED_DIM = 16

# digits_vq settings, chosen by measurement (see digits_vq's docstring).
DIGITS_DDCONFIG: dict = dict(DEFAULT_DDCONFIG)
DIGITS_EPOCHS = 8
DIGITS_BATCH_SIZE = 32
DIGITS_LR = 3e-3
DIGITS_N_EMBED = 256
DIGITS_EMBED_DIM = 16


@dataclasses.dataclass(frozen=True)
class TrainReport:
    """Outcome of :func:`train_vq_generator`.

    checkpoint: path of ``last.ckpt``; epochs: epochs completed in total; start_epoch: the epoch this
    call resumed from (0 for a fresh run); train_loss: mean training loss of the last epoch (NaN when
    this call trained nothing and the checkpoint did not record it); psnr: held-out reconstruction
    PSNR in dB of the continuous latent decoded directly (the search's default); psnr_quantized: the
    same with straight-through quantisation; seconds: wall time of this call.
    """

    checkpoint: str
    epochs: int
    start_epoch: int
    train_loss: float
    psnr: float
    psnr_quantized: float
    seconds: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _stack(data: ImageDataset, indices: list[int] | range) -> Tensor:
    return torch.stack([data[i][0] for i in indices]).float()


class _Images:
    """Indexable image source: an in-memory tensor for small data sets, else the dataset itself."""

    def __init__(self, data: ImageDataset, indices: list[int] | None = None) -> None:
        self.data = data
        self.indices = list(range(len(data))) if indices is None else list(indices)
        self.tensor: Tensor | None = None
        if self.indices and len(self.indices) * data[self.indices[0]][0].numel() <= (1 << 26):
            self.tensor = _stack(data, self.indices)

    def __len__(self) -> int:
        return len(self.indices)

    def batch(self, positions: Tensor | list[int]) -> Tensor:
        pos = positions.tolist() if isinstance(positions, Tensor) else list(positions)
        if self.tensor is not None:
            return self.tensor[pos]
        return _stack(self.data, [self.indices[p] for p in pos])

    def sample_shape(self) -> tuple[int, ...]:
        return tuple(self.batch([0]).shape[1:])


@torch.no_grad()
def reconstruction_psnr(
    generator: VQGANGenerator | torch.nn.Module,
    data: ImageDataset | _Images,
    batch_size: int = 128,
    max_images: int | None = 1024,
    quantize: bool | None = None,
) -> float:
    """Mean per-image PSNR (dB, peak 1) of ``decode(encode(x))`` against ``x`` over ``data``.

    ``quantize`` overrides a VQGAN's quantize mode for this measurement (True: straight-through).
    Images are compared at the generator's working size (after its optional resize).
    """
    images = data if isinstance(data, _Images) else _Images(data)
    n = len(images) if max_images is None else min(len(images), int(max_images))
    if n == 0:
        raise ValueError("reconstruction_psnr needs at least one image.")
    mode = getattr(generator, "quantize_mode", None)
    if quantize is not None and mode is not None:
        generator.quantize_mode = "straight_through" if quantize else "none"
    try:
        total = 0.0
        for start in range(0, n, batch_size):
            x = images.batch(list(range(start, min(n, start + batch_size))))
            x = resize_images(x.to(next(generator.parameters()).device), getattr(generator, "image_size", None))
            rec = generator.decode(generator.encode(x)).float()
            mse = (rec - x).pow(2).flatten(1).mean(1).clamp_min(1e-10)
            total += float((-10 * torch.log10(mse)).sum())
        return total / n
    finally:
        if mode is not None:
            generator.quantize_mode = mode


def _complete_ddconfig(ddconfig: Mapping | None, shape: tuple[int, ...]) -> dict:
    """Fill ``in_channels``/``out_ch``/``resolution`` from the data and validate the result."""
    c, h, w = shape
    cfg = dict(ddconfig if ddconfig is not None else DEFAULT_DDCONFIG)
    for key in ("in_channels", "out_ch"):
        if int(cfg.get(key, c)) != c:
            raise ValueError(
                f"ddconfig.{key}={cfg[key]} but the training images have {c} channels; "
                f"set ddconfig.{key}={c} or leave it out to take it from the data."
            )
        cfg[key] = c
    cfg.setdefault("resolution", int(h))
    cfg = check_ddconfig(cfg)
    down = 2 ** (len(cfg["ch_mult"]) - 1)
    if h % down or w % down:
        raise ValueError(
            f"training images are {h}x{w} but ddconfig.ch_mult={cfg['ch_mult']} down-samples by "
            f"{down}; use images whose sides are multiples of {down} (e.g. data.image_size="
            f"{max(down, (h // down) * down)}) or fewer ch_mult levels."
        )
    return cfg


@contextlib.contextmanager
def cpu_threads(device: torch.device, threads: int | None) -> Iterator[None]:
    """Run the block with torch's intra-op pool at ``threads`` on a CPU (restored afterwards); a no-op on another
    device or for ``threads=None``.

    Why training defaults to one thread: the demo's batches are tiny (32 images of 16 px), so splitting each op over
    threads costs more in hand-offs than it saves, and on a busy machine the waiting threads spin. Measured on 2
    shared cores under load (``python benchmarks/demo_training.py --threads 1 2 --epochs 1``; benchmarks/RESULTS.md,
    "The first hour"), one epoch of the digits VQ costs several times more CPU on two threads than on one.
    """
    if device.type != "cpu" or threads is None:
        yield
        return
    if int(threads) < 1:
        raise ValueError(f"threads={threads} must be a whole number >= 1 (or null: torch's own setting).")
    before = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _epoch_order(n: int, seed: int, epoch: int) -> Tensor:
    # Seeded per epoch, so a resumed run visits the same batches as an uninterrupted one.
    g = torch.Generator().manual_seed((int(seed) * 1_000_003 + int(epoch)) % (1 << 62))
    return torch.randperm(n, generator=g)


def _split_images(
    train_data: ImageDataset, held_out_data: ImageDataset | None, held_out_fraction: float, seed: int
) -> tuple[_Images, _Images]:
    """(train, held-out) images: ``held_out_data`` as given, or a seeded ``held_out_fraction`` of the train data."""
    if held_out_data is not None:
        train, held = _Images(train_data), _Images(held_out_data)
        if len(train) == 0 or len(held) == 0:
            raise ValueError("train_data and held_out_data must each hold at least one image.")
        return train, held
    if not 0.0 < held_out_fraction < 1.0:
        raise ValueError(f"held_out_fraction={held_out_fraction} must lie strictly between 0 and 1.")
    n = len(train_data)
    order = _epoch_order(n, seed, -1).tolist()
    n_hold = max(1, int(round(n * held_out_fraction)))
    if n - n_hold < 1:
        raise ValueError(
            f"dataset '{getattr(train_data, 'name', train_data)}' has {n} images: too few to hold "
            "some out; pass held_out_data explicitly (or raise data.limit)."
        )
    return _Images(train_data, sorted(order[n_hold:])), _Images(train_data, sorted(order[:n_hold]))


def _resume(
    ckpt_path: Path, config: dict, model: VQGANGenerator, opt: torch.optim.Optimizer, epochs: int
) -> tuple[int, float]:
    """Load ``last.ckpt`` into ``model``/``opt``; returns (epoch reached, its training loss)."""
    state = load_checkpoint(ckpt_path, what="VQ training checkpoint")
    if state.get("config") != config:
        raise ValueError(
            f"'{ckpt_path}' was trained with config {state.get('config')} but this run asks for "
            f"{config}; use another out_dir, or resume=false to start over (overwrites the "
            "checkpoint)."
        )
    model.load_state_dict(state["state_dict"])
    opt.load_state_dict(state["optimizer"])
    log.info("resuming VQ training from %s at epoch %d/%d", ckpt_path, int(state["epoch"]), epochs)
    return int(state["epoch"]), float(state.get("train_loss", float("nan")))


def _log_epoch(epoch: int, epochs: int, start: int, loss: float, psnr: float, psnr_q: float, spent: float) -> None:
    """The line per epoch the first run shows (docs/getting-started.md): loss, held-out PSNR, seconds so far and about
    how many are left (the mean epoch of this call times the epochs to go)."""
    left = spent / (epoch + 1 - start) * (epochs - epoch - 1)
    log.info(
        "VQ epoch %d/%d: train loss %.4f, held-out PSNR %.2f dB (quantized %.2f dB); %.0f s so far, about %.0f s to go",
        *(epoch + 1, epochs, loss, psnr, psnr_q, spent, left),
    )


@dataclasses.dataclass
class VQTrainer:
    """Trains a taming-architecture VQ autoencoder and saves ``out_dir/last.ckpt`` (:meth:`fit`); the settings are
    checked when the trainer is made (the error names the bad value and what is allowed).

    Fields:
        ddconfig: taming ddconfig; ``None`` uses :data:`DEFAULT_DDCONFIG`. ``in_channels``, ``out_ch``
            and ``resolution`` are taken from the data when absent.
        n_embed, embed_dim: codebook size and vector length.
        epochs: total epochs; with ``resume`` a run continues from the epoch saved in ``last.ckpt``.
        lr_schedule: ``"cosine"`` (per step from ``lr`` down to ``lr / 20`` at the last step of
            ``epochs``; steadies the codebook at the end) or ``"constant"``.
        seed: seeds the initial weights, the held-out split and every epoch's batch order (a resumed run visits
            the same batches as an uninterrupted one).
        progress: a progress bar; ``None`` shows one only on a terminal.
        loss: reconstruction term, ``"l1"`` or ``"mse"``; the VQ term is always added.
        device: where to train (``None``/``"auto"``: CUDA when available, else CPU).
        held_out_fraction, max_held_out: the seeded share of the training data held out for the PSNR report
            when no held-out data is given, and how many held-out images the PSNR reads at most.
        threads: torch's intra-op threads while training on a CPU (``None``: as torch is set); see
            :func:`cpu_threads` for why one.
    """

    out_dir: str | Path = "vq-generator"
    ddconfig: Mapping | None = None
    n_embed: int = DEFAULT_N_EMBED
    embed_dim: int = DEFAULT_EMBED_DIM
    epochs: int = 10
    batch_size: int = 32
    lr: float = 3e-3
    lr_schedule: str = "cosine"
    seed: int = 0
    resume: bool = True
    progress: bool | None = None
    loss: str = "l1"
    device: str | torch.device | None = None
    held_out_fraction: float = 0.1
    max_held_out: int | None = 1024
    threads: int | None = 1

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"loss={self.loss!r} is not a reconstruction loss; allowed: {list(LOSSES)}.")
        if int(self.epochs) < 0:
            raise ValueError(f"epochs={self.epochs} must be >= 0.")
        check_batch_size(self.batch_size, nullable=False)
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule={self.lr_schedule!r} is not known; allowed: {list(LR_SCHEDULES)}.")
        if not float(self.lr) > 0:
            raise ValueError(f"lr={self.lr} must be a positive learning rate (e.g. 2e-3).")
        self.epochs, self.batch_size, self.lr = int(self.epochs), int(self.batch_size), float(self.lr)
        auto = self.device is None or str(self.device) == "auto"
        self.device = (
            torch.device("cuda" if torch.cuda.is_available() else "cpu") if auto else torch.device(self.device)
        )

    def fit(self, train_data: ImageDataset, held_out_data: ImageDataset | None = None) -> TrainReport:
        """Train on ``train_data`` (any :class:`~genEval.interfaces.ImageDataset`: images ``(C, H, W)`` in
        ``[0, 1]``, all the same size) and report the PSNR on ``held_out_data`` (``None``: a seeded
        ``held_out_fraction`` of ``train_data``). The checkpoint holds ``state_dict``, ``config`` (``ddconfig``,
        ``n_embed``, ``embed_dim``), ``epoch``, ``optimizer``, ``psnr``, ``psnr_quantized``, ``train_loss``,
        ``seed`` and ``data`` - tensors and plain Python only - and is written atomically after every epoch."""
        t0 = time.perf_counter()
        train, held = _split_images(train_data, held_out_data, self.held_out_fraction, self.seed)
        shape = train.sample_shape()
        if len(shape) != 3:
            raise ValueError(f"dataset images must be (C, H, W); got {shape}.")
        config = {"ddconfig": _complete_ddconfig(self.ddconfig, shape), "n_embed": int(self.n_embed)}
        config["embed_dim"] = int(self.embed_dim)
        out = Path(self.out_dir).expanduser()
        out.mkdir(parents=True, exist_ok=True)
        ckpt_path = out / CHECKPOINT_NAME
        torch.manual_seed(self.seed)
        model = VQGANGenerator(
            config["ddconfig"],
            n_embed=self.n_embed,
            embed_dim=self.embed_dim,
            quantize="straight_through",
            name="vq:training",
        ).to(self.device)
        opt = torch.optim.Adam(model.parameters(), lr=self.lr, betas=(0.5, 0.9))
        start_epoch, last_loss = 0, float("nan")
        if self.resume and ckpt_path.is_file():
            start_epoch, last_loss = _resume(ckpt_path, config, model, opt, self.epochs)
        elif ckpt_path.is_file():
            log.info("resume=false: starting over, %s will be overwritten", ckpt_path)
        model.train()
        model.requires_grad_(True)
        psnr = psnr_q = float("nan")
        data_name = str(getattr(train_data, "name", type(train_data).__name__))

        def save(epoch_done: int) -> None:
            # tensors and plain Python only, so torch.load(weights_only=True) reads it back
            state = {
                "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                **{"config": config, "epoch": epoch_done, "optimizer": opt.state_dict()},
                **{"psnr": float(psnr), "psnr_quantized": float(psnr_q), "train_loss": float(last_loss)},
                **{"seed": int(self.seed), "data": data_name},
            }
            atomic_write(ckpt_path, lambda fh: torch.save(state, fh))

        with cpu_threads(self.device, self.threads):  # tiny batches: one thread unless asked (cpu_threads)
            for epoch in range(start_epoch, self.epochs):
                last_loss = self._epoch(model, opt, train, epoch)
                psnr, psnr_q = self._psnr(model, held)
                model.train()
                _log_epoch(epoch, self.epochs, start_epoch, last_loss, psnr, psnr_q, time.perf_counter() - t0)
                save(epoch + 1)
        model.eval()
        model.requires_grad_(False)
        if math.isnan(psnr):  # nothing trained in this call: measure what the checkpoint holds
            psnr, psnr_q = self._psnr(model, held)
        if not ckpt_path.is_file():  # epochs=0 on a fresh run: still leave a loadable checkpoint
            save(0)
        return TrainReport(
            checkpoint=str(ckpt_path),
            epochs=max(self.epochs, start_epoch),
            start_epoch=start_epoch,
            train_loss=float(last_loss),
            psnr=float(psnr),
            psnr_quantized=float(psnr_q),
            seconds=time.perf_counter() - t0,
        )

    def _psnr(self, model: VQGANGenerator, held: _Images) -> tuple[float, float]:
        """The held-out PSNR of the continuous and the quantised latents (the model left in eval mode)."""
        model.eval()
        return tuple(reconstruction_psnr(model, held, max_images=self.max_held_out, quantize=q) for q in (False, True))

    def _epoch(self, model: VQGANGenerator, opt: torch.optim.Optimizer, train: _Images, epoch: int) -> float:
        """One pass over ``train`` in the epoch's seeded order; returns the mean loss per image."""
        order = _epoch_order(len(train), self.seed, epoch)
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        running, count = 0.0, 0
        bar = tqdm(batches, desc=f"train VQ epoch {epoch + 1}/{self.epochs}", disable=not self._show(), leave=False)
        for step, idx in enumerate(bar):
            if self.lr_schedule == "cosine":  # per step from lr down to lr/20 at the last step of `epochs`
                t = (epoch * len(batches) + step) / max(1, self.epochs * len(batches) - 1)
                for group in opt.param_groups:
                    group["lr"] = self.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))
            x = train.batch(idx).to(self.device) * 2 - 1
            z_q, vq_loss = model.quantize_latents(model.quant_conv(model.encoder(x)))
            rec = model.decoder(model.post_quant_conv(z_q))
            total = (F.l1_loss(rec, x) if self.loss == "l1" else F.mse_loss(rec, x)) + vq_loss
            if not torch.isfinite(total):
                raise FloatingPointError(
                    f"VQ training diverged at epoch {epoch + 1} (loss {float(total)}); lower lr (now {self.lr})."
                )
            opt.zero_grad(set_to_none=True)
            total.backward()
            opt.step()
            running += float(total.detach()) * len(idx)
            count += len(idx)
            bar.set_postfix(loss=f"{running / count:.4f}")
        return running / max(count, 1)

    def _show(self) -> bool:
        return (self.progress is None or bool(self.progress)) and sys.stderr.isatty()


def train_vq_generator(
    train_data: ImageDataset,
    held_out_data: ImageDataset | None = None,
    out_dir: str | Path = "vq-generator",
    ddconfig: Mapping | None = None,
    n_embed: int = DEFAULT_N_EMBED,
    embed_dim: int = DEFAULT_EMBED_DIM,
    epochs: int = 10,
    batch_size: int = 32,
    lr: float = 3e-3,
    lr_schedule: str = "cosine",
    seed: int = 0,
    resume: bool = True,
    progress: bool | None = None,
    loss: str = "l1",
    device: str | torch.device | None = None,
    held_out_fraction: float = 0.1,
    max_held_out: int | None = 1024,
    threads: int | None = 1,
) -> TrainReport:
    """Train a taming-architecture VQ autoencoder on ``train_data`` and save ``out_dir/last.ckpt``: the
    :class:`VQTrainer` with these settings, fitted (:meth:`VQTrainer.fit`). The ``trainer`` node of
    ``conf/train_generator.yaml`` and :func:`digits_vq` call it. Returns a :class:`TrainReport`."""
    trainer = VQTrainer(
        out_dir, ddconfig, n_embed, embed_dim, epochs, batch_size, lr, lr_schedule, seed, resume, progress, loss,
        device, held_out_fraction, max_held_out, threads,
    )  # fmt: skip
    return trainer.fit(train_data, held_out_data)


def load_trained_vq(checkpoint_path: str | Path, name: str | None = None, prefix: str = "vq", **kw) -> VQGANGenerator:
    """Rebuild the generator saved by :func:`train_vq_generator` (config read from the checkpoint).

    ``kw`` go to :class:`~generators.vqgan.VQGANGenerator` (``quantize``, ``image_size``). The default
    name is ``"<prefix>:<data name>:<first 8 hex of a SHA-256 over the weights>"``.
    """
    state = load_checkpoint(
        checkpoint_path,
        what="trained VQ checkpoint",
        hint="Train one with `geneval train-generator` or train_vq_generator().",
    )
    if not isinstance(state, Mapping) or "config" not in state or "state_dict" not in state:
        raise ValueError(
            f"'{checkpoint_path}' is not a checkpoint written by train_vq_generator (it lacks "
            "'config'/'state_dict'); for taming checkpoints use generator=vqgan "
            "(generators.vqgan.from_taming_config)."
        )
    cfg = state["config"]
    if name is None:
        data = str(state.get("data", "data")).split(":")[0]
        name = f"{prefix}:{data}:{state_dict_digest(state['state_dict'], n=8)}"
    return VQGANGenerator(
        cfg["ddconfig"], n_embed=cfg["n_embed"], embed_dim=cfg["embed_dim"], checkpoint=checkpoint_path, name=name, **kw
    )


def _declare_digits_vq(
    image_size: int = 16, embed_dim: int = DIGITS_EMBED_DIM, ddconfig: Mapping | None = None, **_
) -> Declaration:
    """Grey ``image_size``-px images -> ``(embed_dim, H/d, W/d)`` latents, ``d`` from the ddconfig's ``ch_mult``."""
    dd = dict(ddconfig if ddconfig is not None else DIGITS_DDCONFIG)
    return Declaration(
        channels=int(dd.get("in_channels", 1)),
        size=square(image_size),
        downsample=2 ** (len(dd["ch_mult"]) - 1),
        latent_channels=int(embed_dim),
    )


@declared_by(_declare_digits_vq)
def digits_vq(
    image_size: int = 16,
    epochs: int = DIGITS_EPOCHS,
    seed: int = 0,
    quantize: str = "none",
    batch_size: int = DIGITS_BATCH_SIZE,
    lr: float = DIGITS_LR,
    n_embed: int = DIGITS_N_EMBED,
    embed_dim: int = DIGITS_EMBED_DIM,
    ddconfig: Mapping | None = None,
    progress: bool | None = None,
    train_if_missing: bool = True,
) -> VQGANGenerator:
    """Offline default generator: a small VQ autoencoder trained on scikit-learn's digits, cached.

    Loads ``cache_dir("digits_vq")/<key>/last.ckpt`` where ``key`` hashes every training setting;
    when absent (and ``train_if_missing``) trains on ``DigitsData(split="train")`` with the digits
    test split as held-out set, then caches. Images are 1-channel, ``image_size`` px (default 16),
    latents ``(B, embed_dim, image_size/2, image_size/2)``.

    Settings chosen by measurement on 2 shared CPU cores (1,257 train / 540 held-out images, 16 px):
    ddconfig :data:`DIGITS_DDCONFIG` (ch 32, ch_mult [1, 2], one res block, z 16), 256 codes of 16
    dims, batch 32, Adam lr 3e-3 with a cosine schedule: about 6 s per epoch when the cores are free.
    Held-out PSNR of the continuous latent: 22.9 dB after 4 epochs, 27.2 after 6, 29.3 after 9
    (9-epoch run); a constant lr of 2e-3 reached only 22.1 / 26.2 / 28.5 dB after 4 / 8 / 12 epochs
    and fluctuated by 2 dB between epochs, batch 64 was worse per second. 8 epochs is the default. Training runs
    on one thread (:func:`cpu_threads`): on 2 shared cores (load average 15) one epoch cost 9.4 s of CPU on one
    thread and 167.5 s on two, and the 8 epochs 67 s of CPU on one, reaching 28.4 dB (``python
    benchmarks/demo_training.py``, benchmarks/RESULTS.md, "The first hour").
    """
    dd = dict(ddconfig if ddconfig is not None else DIGITS_DDCONFIG)
    settings = {
        "ddconfig": dd,
        "image_size": int(image_size),
        "epochs": int(epochs),
        "seed": int(seed),
        "batch_size": int(batch_size),
        "lr": float(lr),
        "n_embed": int(n_embed),
        "embed_dim": int(embed_dim),
        "lr_schedule": "cosine",
        "recipe": 2,
    }
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    folder = cache_dir("digits_vq") / key
    ckpt = folder / CHECKPOINT_NAME
    done = False
    if ckpt.is_file():
        cached = load_checkpoint(ckpt, what="cached digits VQ checkpoint")
        done = int(cached.get("epoch", 0)) >= int(epochs)
    if not done:
        if not train_if_missing:
            raise FileNotFoundError(
                f"no trained digits VQ generator cached at '{ckpt}'; call digits_vq with "
                "train_if_missing=true to train it (about a minute on a CPU)."
            )
        log.info(
            "training the offline demo's generator once (then cached at %s): a small VQ autoencoder, %d epochs over "
            "the 1,257 digits of the train split; about 70 s of CPU time on one core (measured: benchmarks/"
            "demo_training.py), a line per epoch with the time left",
            folder,
            epochs,
        )
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(folder / "settings.json", settings)
        report = train_vq_generator(
            DigitsData(split="train", image_size=image_size, channels=1),
            DigitsData(split="test", image_size=image_size, channels=1),
            out_dir=folder,
            ddconfig=dd,
            n_embed=n_embed,
            embed_dim=embed_dim,
            epochs=epochs,
            batch_size=batch_size,
            lr=lr,
            seed=seed,
            resume=True,
            progress=progress,
        )
        log.info(
            "digits VQ generator: held-out PSNR %.2f dB (quantized %.2f dB), %.1f s",
            report.psnr,
            report.psnr_quantized,
            report.seconds,
        )
    return load_trained_vq(ckpt, quantize=quantize, image_size=image_size)
