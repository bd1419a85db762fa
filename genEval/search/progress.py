"""Progress of a run: a tqdm bar on a terminal, otherwise one log line every ``log_interval`` seconds (cluster
logs). The loop itself shows nothing (docs/architecture.md, "Habits"); the driver reports every finished and
every skipped source here."""

from __future__ import annotations

import logging
import sys
import time

from tqdm.auto import tqdm

from genEval.runs.identity import Shard

log = logging.getLogger(__name__)


class Progress:
    """How far a run is: ``total`` sources, ``done`` of them finished before (a resume); ``show`` a bar (True), log
    lines every ``interval`` seconds (False) or a bar on a terminal only (None).

    The logged rate (and the ETA from it) counts from the end of the first finished batch, once a second has passed
    and more samples finished since: a compiled step's start-up (a minute or more) would otherwise hide the rate the
    run keeps. Until then a line says ``ETA unknown`` and shows no rate (a rate counted from the start, through the
    start-up, read "0.01 img/s, ETA 02:29:21" on a two-minute run). The samples of one batch finish together (within
    ``BATCH_S`` of the first)."""

    BATCH_S = 0.05

    def __init__(self, total: int, done: int, shard: Shard, show: bool | None, interval: float) -> None:
        self.total, self.done, self.shard, self.interval = total, done, shard, float(interval)
        self.validated = self.fooled = self.computed = 0
        self.t0 = self.last = time.perf_counter()
        self.first: tuple[float, int] | None = None  # (time, samples computed) at the end of the first batch
        tty = sys.stderr.isatty() if show is None else bool(show)
        self.bar = tqdm(total=total, initial=done, desc="genEval", unit="img", disable=not tty, dynamic_ncols=True)
        self.log_lines = not tty

    def update(self, out) -> None:
        """One finished sample (an :class:`~genEval.search.perturb.Outcome`)."""
        self.done, self.computed = self.done + 1, self.computed + 1
        self.validated += out.validated
        self.fooled += out.validated and out.final_pred != out.label
        self.bar.update(1)
        self.bar.set_postfix(validated=self.validated, fooled=self.fooled, refresh=False)
        now = time.perf_counter()
        if self.first is None or now - self.first[0] < self.BATCH_S:  # still the first batch: its end moves on
            self.first = (self.first[0] if self.first else now, self.computed)
        if self.log_lines and (now - self.last >= self.interval or self.done == self.total):
            self.last = now
            log.info(
                "%s: %d/%d images (%.1f%%), validated %d, fooled %d, %s",
                self.shard.name,
                self.done,
                self.total,
                100 * self.done / max(1, self.total),
                self.validated,
                self.fooled,
                self.pace(now),
            )

    def rate(self, now: float) -> float | None:
        """Samples per second since the first batch finished (see the class docstring); None while unknown."""
        if self.first is None:
            return None
        t1, n1 = self.first
        return (self.computed - n1) / (now - t1) if self.computed > n1 and now - t1 >= 1.0 else None

    def pace(self, now: float) -> str:
        """``"2.00 img/s, ETA 01:02:03"`` (hours past 24 go on counting), or ``"ETA unknown"`` while the rate is
        unknown (``"ETA 00:00:00"`` once nothing is left)."""
        rate, left = self.rate(now), self.total - self.done
        if rate is None:
            return "ETA 00:00:00" if left <= 0 else "ETA unknown"
        minutes, seconds = divmod(round(left / rate), 60)
        return f"{rate:.2f} img/s, ETA {minutes // 60:02d}:{minutes % 60:02d}:{seconds:02d}"

    def skip(self) -> None:
        """A source that was skipped (unreadable) counts as done."""
        self.done += 1
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()
