"""The progress log of a run (genEval.search.progress): its rate counts from the first finished batch; before that a
line says "ETA unknown" and shows no rate (issue 37)."""

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


def test_the_first_line_says_eta_unknown_until_a_batch_has_finished(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 37's run: 100 s of start-up, batches of 4 every 2 s, a line every 30 s. The first line comes with the
    first sample, after the start-up; counted from the start it read "0.01 img/s, ETA 00:31:40"."""
    p = Progress(total=20, done=0, shard=Shard(), show=False, interval=30)
    with caplog.at_level(logging.INFO, logger=progress_module.__name__):
        for k in range(5):
            _finish(p, clock, 100.0 + 2 * k, 4)
    first, last = caplog.messages
    assert first.endswith("1/20 images (5.0%), validated 1, fooled 0, ETA unknown"), first
    assert last.endswith("20/20 images (100.0%), validated 20, fooled 0, 2.00 img/s, ETA 00:00:00"), last


def test_before_a_second_batch_and_a_second_the_eta_is_unknown(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    """Every line of the first batch, and of a second batch within a second of it, has no rate; a single batch that
    ends the run has nothing left."""
    p = Progress(total=12, done=0, shard=Shard(), show=False, interval=0)
    with caplog.at_level(logging.INFO, logger=progress_module.__name__):
        _finish(p, clock, 10.0, 4)
        _finish(p, clock, 10.5, 4)
        assert len(caplog.messages) == 8
        assert all(m.endswith("ETA unknown") and "img/s" not in m for m in caplog.messages), caplog.messages
        _finish(p, clock, 12.0, 4)
    assert caplog.messages[-1].endswith(
        "12/12 images (100.0%), validated 12, fooled 0, 3.99 img/s, ETA 00:00:00"
    )  # 8 in 2.003 s
    single = Progress(total=4, done=0, shard=Shard(), show=False, interval=0)
    with caplog.at_level(logging.INFO, logger=progress_module.__name__):
        _finish(single, clock, 20.0, 4)
    assert caplog.messages[-1].endswith("4/4 images (100.0%), validated 4, fooled 0, ETA 00:00:00")


def test_an_eta_past_a_day_counts_on_in_hours(clock: Clock) -> None:
    """1 img/s with 100,000 images left: 27 h 46 min 40 s (a clock format would wrap it to 03:46:40)."""
    p = Progress(total=100_008, done=0, shard=Shard(), show=False, interval=3600)
    _finish(p, clock, 5.0, 4)
    _finish(p, clock, 9.0, 4)  # 4 samples 4 s after the first batch
    assert p.pace(9.0) == "1.00 img/s, ETA 27:46:40"
