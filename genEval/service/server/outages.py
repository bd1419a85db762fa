"""Living through database outages: retry with backoff, and say so once per outage.

A database restart, a lost connection or an unreachable host makes every call fail for a while (SQLAlchemy's
``OperationalError`` and friends). Nothing a worker or the server does is lost meanwhile: jobs, leases and results
are in the database, and a call that failed changed nothing. So the worker loop and the server's upkeep retry
(:meth:`Outage.call`: waits of ``first_s``, doubling up to ``max_s``) instead of dying (docs/service.md: one heartbeat
during a 10-second PostgreSQL restart killed every worker), and log one warning when an outage starts and one line
when it ends, not one per retry.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

log = logging.getLogger(__name__)
T = TypeVar("T")
#: What a database call raises while the database is unreachable (a pool that cannot connect times out).
UNREACHABLE = (OperationalError, InterfaceError, PoolTimeout)


class Stopped(Exception):
    """Raised by :meth:`Outage.call` when its loop was asked to stop while the database was unreachable."""


def unreachable(err: BaseException) -> bool:
    """Whether ``err`` means the database cannot be reached now (not a bad query)."""
    return isinstance(err, UNREACHABLE) or (isinstance(err, DBAPIError) and bool(err.connection_invalidated))


def short(err: BaseException) -> str:
    """The first line of an error's message (a driver's message runs over several lines and names the query)."""
    text = str(err.orig if isinstance(err, DBAPIError) and err.orig is not None else err)
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), type(err).__name__)[:200]


class Outage:
    """The database outages one loop (``who``: a worker, the server's upkeep) lives through. ``stop``: the loop's stop
    event (a retry wait ends when it is set); waits start at ``first_s`` and double up to ``max_s``."""

    def __init__(self, who: str, stop: threading.Event, first_s: float = 0.5, max_s: float = 10.0) -> None:
        self.who, self.stop = who, stop
        self.first_s, self.max_s = float(first_s), max(float(first_s), float(max_s))
        self.since: float | None = None  # monotonic start of the outage going on, if any
        self.retries = 0
        self._lock = threading.Lock()

    def failed(self, err: BaseException) -> None:
        """Note a call that failed because the database is unreachable (one warning per outage)."""
        with self._lock:
            self.retries += 1
            if self.since is not None:
                return
            self.since = time.monotonic()
        log.warning(
            "%s: the database is unreachable (%s); retrying with backoff (up to every %gs) until it is back",
            self.who,
            short(err),
            self.max_s,
        )

    def recovered(self) -> None:
        """Note a call that worked (ends an outage going on, with one line saying how long it lasted)."""
        with self._lock:
            if self.since is None:
                return
            lasted, retries = time.monotonic() - self.since, self.retries
            self.since, self.retries = None, 0
        log.info("%s: the database is back after %.1fs (%d failed calls)", self.who, lasted, retries)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``, retried while the database is unreachable; raises :class:`Stopped` when the stop
        event is set meanwhile. Any other error is raised at once."""
        wait = self.first_s
        while True:
            try:
                result = fn(*args, **kwargs)
            except DBAPIError as err:
                if not unreachable(err):
                    raise
                self.failed(err)
            except PoolTimeout as err:
                self.failed(err)
            else:
                self.recovered()
                return result
            if self.stop.wait(wait):
                raise Stopped(f"{self.who} was stopped while the database was unreachable")
            wait = min(2 * wait, self.max_s)
