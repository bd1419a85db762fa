"""The progress log of a run (genEval.search.progress): its rate counts from the first finished batch."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from genEval.runs import Shard
from genEval.search import progress as progress_module
from genEval.search.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _finish(p: Progress, clock: Clock, at: float, n: int) -> None:
    """``n`` samples of one batch finish at ``at`` seconds (a millisecond apart)."""
    for i in range(n):
        clock.now = at + 1e-3 * i
        p.update(SimpleNamespace(validated=True, final_pred=0, label=0))


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(progress_module.time, "perf_counter", c)
    return c


def test_the_rate_leaves_out_a_slow_first_batch(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    """A first batch that took 100 s (compilation) and batches of 4 every 2 s after it: 2 img/s, ETA from that."""
    p = Progress(total=20, done=0, shard=Shard(), show=False, interval=0)
    with caplog.at_level(logging.INFO, logger=progress_module.__name__):
        _finish(p, clock, 100.0, 4)
        for k in range(1, 4):
            _finish(p, clock, 100.0 + 2 * k, 4)
    last = caplog.messages[-1]
    assert "16/20 images" in last
    assert "2.00 img/s" in last, last  # (16 - 4) samples in 6 s; counted from the start it would be 0.15 img/s
    assert "ETA 00:00:02" in last, last


def test_before_a_second_batch_the_rate_counts_from_the_start(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    p = Progress(total=8, done=0, shard=Shard(), show=False, interval=0)
    with caplog.at_level(logging.INFO, logger=progress_module.__name__):
        _finish(p, clock, 10.0, 4)
    assert "0.40 img/s" in caplog.messages[-1], caplog.messages[-1]  # 4 samples in 10 s
