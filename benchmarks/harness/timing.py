"""Wall-clock timing of device work: the device synchronised before and after, so that queued GPU kernels are
counted where they ran (on a CPU the synchronisation is a no-op)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch


def sync(dev: torch.device) -> None:
    """Wait for the work queued on ``dev`` (CUDA only)."""
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed_call(fn: Callable[[], Any], dev: torch.device) -> tuple[Any, float]:
    """``fn()`` and its wall-clock seconds, the device synchronised before and after."""
    sync(dev)
    t0 = time.perf_counter()
    out = fn()
    sync(dev)
    return out, time.perf_counter() - t0


def timed(fn: Callable[[], Any], dev: torch.device) -> float:
    return timed_call(fn, dev)[1]
