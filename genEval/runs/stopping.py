"""Stopping cleanly on SIGTERM and SIGINT: Slurm's time-limit signal, how a worker or container is stopped, and
Ctrl-C.

By default Python dies at once on SIGTERM (the run's ``run.lock`` stays behind, its last samples are lost) and raises
``KeyboardInterrupt`` on SIGINT. Inside :func:`stop_on_signals` both raise :class:`Interrupted` in the main thread
instead (a ``KeyboardInterrupt``, so code that cleans up after Ctrl-C cleans up after SIGTERM too): the run writer
flushes the samples finished so far and releases its lock on the way out
(:meth:`genEval.runs.writer.RunWriter.close`), and the command layer exits with the shell's code for the signal
(``128 + signal``: 130 for SIGINT, 143 for SIGTERM). A second signal while the first is being handled is ignored, so
the cleanup is not cut short; SIGKILL is the way to stop at once.

A loop that should finish its current step first (the service worker) passes ``on_signal``, which is called instead
of raising.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(KeyboardInterrupt):
    """The process was asked to stop by signal ``signum``; :attr:`exit_code` is the shell's code for it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = int(signum)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@contextmanager
def stop_on_signals(on_signal: Callable[[int], None] | None = None) -> Iterator[None]:
    """While inside, SIGTERM and SIGINT raise :class:`Interrupted` in the main thread (or call ``on_signal(signum)``);
    the handlers in place before are restored on the way out. Outside the main thread (where Python cannot set
    handlers) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    state = {"stopping": False}

    def handle(signum: int, _frame) -> None:
        if state["stopping"]:
            return  # the first signal's cleanup is running: let it finish
        state["stopping"] = True
        if on_signal is not None:
            state["stopping"] = False  # a loop that stops by itself may be signalled again
            on_signal(signum)
            return
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handle) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
