"""Request bodies are bounded before anything reads, parses or authenticates them; requests are counted per token
and per client address (:class:`RateLimit`).

:class:`BodyLimit` is a plain ASGI middleware in front of every route (FastAPI reads and parses a JSON body before
it checks the request's token, so a limit inside a route comes too late). A request whose ``Content-Length`` is
above its limit is answered ``413`` at once, without reading a byte of the body; one without a length (chunked)
is counted as it streams in and answered ``413`` as soon as it passes the limit. Either way the connection is
closed after the answer (``Connection: close``), so the server never holds more than one chunk of an oversized
body: memory stays flat whatever a client sends.

Limits: uploads (``POST /api/uploads``) their own (``max_upload_mb`` plus room for the multipart envelope), every
other request ``max_request_kb`` (JSON; 1 MiB by default).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class _TooLarge(BaseException):
    """Raised from ``receive`` when a streamed body passes its limit. A BaseException, so that no route or
    framework layer turns it into another answer (FastAPI reports body read errors as 400)."""

    def __init__(self, received: int) -> None:
        super().__init__(received)
        self.received = received


class BodyLimit:
    """ASGI middleware refusing request bodies above ``limit_for(path, method)`` bytes with 413 (see the module
    docstring); ``setting(path)`` names the setting that raises the limit, for the message."""

    def __init__(self, app: Any, limit_for: Callable[[str, str], int], setting: Callable[[str], str]) -> None:
        self.app, self.limit_for, self.setting = app, limit_for, setting

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, limit = scope.get("path", ""), self.limit_for(scope.get("path", ""), scope.get("method", "GET"))
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.strip().isdigit() or int(length) > limit):
            shown = length.decode("latin-1")[:20]
            await self._refuse(send, f"request body too large: {shown} bytes", limit, path)
            return
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _TooLarge(received)
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooLarge as err:
            if started:  # too late to answer; the server closes the connection
                raise RuntimeError(
                    f"request body passed its limit ({err.received} bytes) after the answer began"
                ) from None
            await self._refuse(send, f"request body too large: more than {limit} bytes (streamed)", limit, path)

    async def _refuse(self, send: Send, what: str, limit: int, path: str) -> None:
        body = json.dumps(
            {"detail": f"{what}; the limit for {path} is {limit} bytes (server setting {self.setting(path)})."}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class RateLimit:
    """At most ``limit`` events per key (a token's uploads, a client address's failed authentications) in any
    ``window_s`` seconds, counted in this process (a sliding window; monotonic clock). ``limit`` 0: no limit. At
    most ``max_keys`` keys are remembered (the least recently seen are forgotten first), so a flood of addresses
    cannot grow it without bound."""

    def __init__(self, limit: int, window_s: float, max_keys: int = 10_000) -> None:
        if int(limit) < 0 or not float(window_s) > 0:
            raise ValueError(f"a rate limit needs limit >= 0 and window_s > 0, got {limit!r} and {window_s!r}.")
        self.limit, self.window_s, self.max_keys = int(limit), float(window_s), int(max_keys)
        self._events: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> deque[float]:
        events = self._events.setdefault(key, deque())
        self._events.move_to_end(key)
        while events and events[0] <= now - self.window_s:
            events.popleft()
        while len(self._events) > self.max_keys:
            self._events.popitem(last=False)
        return events

    def retry_after(self, key: str) -> float | None:
        """Seconds until ``key`` may have one more event (None: now)."""
        if not self.limit:
            return None
        now = time.monotonic()
        with self._lock:
            events = self._recent(key, now)
            return None if len(events) < self.limit else events[0] + self.window_s - now

    def add(self, key: str) -> None:
        """Count one event of ``key``."""
        if self.limit:
            now = time.monotonic()
            with self._lock:
                self._recent(key, now).append(now)
