"""A local server's network, for studies and tests: a free port on 127.0.0.1 and a slow client that sends a request a
piece at a time (issue 37's slow-client attack; ``tests/support/service.py`` takes both from here)."""

from __future__ import annotations

import socket
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hold_connection(port: int, pieces: list[bytes], every_s: float, cap_s: float = 15.0) -> tuple[float, bytes]:
    """A slow client of the server on ``port``: sends ``pieces`` one every ``every_s`` seconds (then nothing). Returns
    how long until the server closed the connection (``cap_s`` when it kept it that long) and what it answered."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(0.05)
        got, sent = b"", 0
        while time.monotonic() - t0 < cap_s:
            if sent < len(pieces) and time.monotonic() - t0 >= sent * every_s:
                try:
                    sock.sendall(pieces[sent])
                except OSError:
                    break
                sent += 1
            try:
                chunk = sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                return time.monotonic() - t0, got
            got += chunk
    return cap_s, got
