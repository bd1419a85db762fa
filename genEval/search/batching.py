"""Choosing the batch size from the memory one search step needs, and saying so when it does not fit.

The setting: docs/configuration.md, "Execution settings".

A search step keeps, per sample, the tensors autograd saves for the backward pass through classifier and
decoder (the dominant cost: a VQGAN decoder at 256 px saves hundreds of MB per image), plus the latent, the
images and the Adam moments. :func:`step_bytes_per_sample` measures exactly that on one real step of one
sample (``torch.autograd.graph.saved_tensors_hooks`` adds up the bytes autograd saves), and
:func:`auto_batch_size` divides a share of the free memory (CUDA: ``torch.cuda.mem_get_info``; CPU: the
kernel's ``MemAvailable``) by it. Measuring beats a formula: it covers any generator and classifier, at any
resolution and precision, with no table to keep up to date.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

#: Share of the free memory a batch may use (the rest: allocator slack, data loading, other processes).
MEMORY_SHARE = 0.6
#: The largest batch chosen automatically (larger batches stop paying off on one device).
MAX_BATCH = 256


@dataclass(frozen=True)
class BatchChoice:
    """What was chosen and why (recorded in results.json as ``batch_size_auto``)."""

    batch_size: int
    per_sample_mib: float
    free_mib: float
    share: float

    def to_dict(self) -> dict:
        return asdict(self)


def free_memory_bytes(device: torch.device) -> int:
    """Memory available to this process on ``device``: CUDA free memory, or the kernel's MemAvailable."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 4 << 30  # unknown platform: assume 4 GiB rather than guessing large


def step_bytes_per_sample(x: torch.Tensor, label: int, classifier, generator) -> int:
    """Bytes one sample costs in a search step: what autograd saves for the backward pass of
    ``CE(f(D(z)), y)`` w.r.t. ``z``, plus the step's own tensors (latent, image, gradient, Adam moments)."""
    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += t.numel() * t.element_size()
        return t

    with torch.no_grad():
        z0 = generator.encode(x[None])
    z = z0.detach().clone().requires_grad_(True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        img = generator.decode(z)
        loss = F.cross_entropy(classifier(img), torch.tensor([label], device=img.device))
    torch.autograd.grad(loss, z)  # run the backward once, as the search does
    own = 6 * z.numel() * 4 + 4 * img.numel() * 4  # z, proposal, grad, m, v, start; images kept per row
    return int(saved + own)


def auto_batch_size(x: torch.Tensor, label: int, classifier, generator, device: torch.device) -> BatchChoice:
    """The largest batch (at most :data:`MAX_BATCH`) whose search step fits in ``MEMORY_SHARE`` of free memory."""
    per = step_bytes_per_sample(x.to(device), label, classifier, generator)
    free = free_memory_bytes(device)
    batch = int(max(1, min(MAX_BATCH, MEMORY_SHARE * free // max(per, 1))))
    choice = BatchChoice(batch, per / 2**20, free / 2**20, MEMORY_SHARE)
    log.info(
        "batch_size=auto: %d (one sample's step needs %.1f MiB; %.0f MiB free on %s, using %.0f%%)",
        batch,
        choice.per_sample_mib,
        choice.free_mib,
        device,
        100 * MEMORY_SHARE,
    )
    return choice


class BatchTooLarge(ValueError):
    """A search step ran out of memory; the message names the batch size that would fit."""


def is_out_of_memory(err: BaseException) -> bool:
    """torch's CUDA OOM, or the CPU allocator's failure (a RuntimeError), or Python's MemoryError."""
    if isinstance(err, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(err, RuntimeError) and "can't allocate memory" in str(err)


def too_large(
    batch_size: int, x: torch.Tensor, label: int, classifier, generator, device: torch.device, err: BaseException
) -> BatchTooLarge:
    """A teaching error for an out-of-memory step: what was asked, what one sample needs, what would fit."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
    try:
        fit = auto_batch_size(x, label, classifier, generator, device)
        hint = (
            f"one sample's step needs about {fit.per_sample_mib:.0f} MiB and {fit.free_mib:.0f} MiB are free, "
            f"so batch_size={fit.batch_size} would fit"
        )
    except Exception:  # noqa: BLE001  (even one sample may not fit: say so rather than fail again)
        hint = "even batch_size=1 may not fit; use a smaller data.image_size or a lighter generator"
    return BatchTooLarge(
        f"out of memory at batch_size={batch_size} on {device} ({type(err).__name__}); {hint}. "
        "Set batch_size= to that or smaller (or batch_size=null to choose it automatically); "
        "the run resumes where it stopped."
    )
