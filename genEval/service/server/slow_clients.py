"""Read timeouts for slow clients: uvicorn's HTTP/1.1 protocol (h11) with a deadline on every read.

uvicorn times out an idle keep-alive connection (``timeout_keep_alive``) but nothing else: a client that connects
and sends nothing, or sends its request head a byte at a time, or stops halfway through a body, holds its connection
(and a slot of ``limit_concurrency``) forever (docs/service.md: both were still open after 90 s). :func:`timed_h11`
makes the protocol class ``geneval serve`` runs, h11's with two deadlines:

* ``header_timeout_s``: the whole request head (request line and headers) must arrive within this many seconds of
  the connection opening, or of the first byte of a request on a kept-alive connection; otherwise the answer is
  ``408 Request Timeout`` and the connection is closed;
* ``body_timeout_s``: while a request body is being read, each piece must follow the one before within this many
  seconds; otherwise the connection is closed (the route sees the client disconnect, and an upload's temp file is
  removed).

No deadline runs while the application works on a request or writes its answer.
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the read deadlines of the module docstring (set by :func:`timed_h11`)."""

    header_timeout_s = 10.0
    body_timeout_s = 30.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._arm(self.header_timeout_s)

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._timed_out)

    def _disarm(self) -> None:
        if getattr(self, "_deadline", None) is not None:
            self._deadline.cancel()
            self._deadline = None

    def data_received(self, data: bytes) -> None:
        waiting_for_head = self.conn.their_state is h11.IDLE
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            self._arm(self.body_timeout_s)  # a deadline per piece of the body
        elif state is h11.IDLE:
            if not waiting_for_head or self._deadline is None:  # the first bytes of a head: its deadline starts
                self._arm(self.header_timeout_s)
        else:  # the request is in: the application's turn, no deadline
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _timed_out(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.flow.read_paused:  # the server is not reading (the application has not taken the last piece yet)
            self._arm(self.body_timeout_s)
            return
        if self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE:
            body = b"request head not received in time\n"
            head = (
                b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(body)
            )
            self.transport.write(head + body)
        self.transport.close()


def timed_h11(header_timeout_s: float, body_timeout_s: float) -> type[TimedH11Protocol]:
    """The protocol class with these deadlines (uvicorn's ``http=`` setting)."""
    for name, value in (("header_timeout_s", header_timeout_s), ("body_timeout_s", body_timeout_s)):
        if not float(value) > 0:
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}.")
    return type(
        "TimedH11Protocol",
        (TimedH11Protocol,),
        {"header_timeout_s": float(header_timeout_s), "body_timeout_s": float(body_timeout_s)},
    )
