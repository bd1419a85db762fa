"""Requests cannot exhaust the server (genEval/service/limits.py): bodies are bounded before they are read, parsed or
authenticated (413, JSON at ``max_request_kb``, uploads at their own limit, streamed bodies counted as they come),
422s never echo what was sent, and a 200 MiB unauthenticated body sent to the real `geneval serve` leaves its
memory flat."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from genEval.service.server.app import create_app
from genEval.service.server.database import Database, sqlite_url
from genEval.service.server.facade import MiB, Service, Settings
from tests.support.assets import ROOT
from tests.support.service import free_port

JOB = {"benchmark": "digits_smoke", "name": "cnn", "model": {"kind": "config", "name": "digits_cnn"}}


@pytest.fixture
def svc(tmp_path, presets):
    db = Database(sqlite_url(tmp_path / "geneval.db"))
    settings = Settings(home=tmp_path, max_upload_mb=0.25, default_benchmark="digits_smoke", max_request_kb=8)
    yield Service(db, settings, *presets)
    db.close()


def test_an_oversized_body_is_refused_before_authentication(svc):
    client = TestClient(create_app(svc))
    big = json.dumps({**JOB, "name": "x" * 20_000})
    refused = client.post("/api/jobs", content=big, headers={"content-type": "application/json"})  # no token
    assert refused.status_code == 413  # not 401: the body was never read, the token never looked up
    assert "the limit for /api/jobs is 8192 bytes (server setting max_request_kb)" in refused.json()["detail"]
    assert refused.headers["connection"] == "close"
    streamed = client.post("/api/jobs", content=iter([big[:5000].encode(), big[5000:].encode()]))  # chunked
    assert streamed.status_code == 413 and "streamed" in streamed.json()["detail"]
    assert client.post("/api/jobs", json=JOB).status_code == 401  # a small body goes on to authentication
    token = {"Authorization": f"Bearer {svc.db.tokens.create('alice', 'submitter')[0]}"}
    assert client.post("/api/jobs", json=JOB, headers=token).status_code == 201
    # uploads have their own limit: above the JSON one is fine, above theirs is 413 before authentication
    ok = client.post("/api/uploads", files={"file": ("w.bin", b"\0" * 20_000)}, headers=token)
    assert ok.status_code == 415  # read and identified (not a model), so it passed the size check
    huge = client.post("/api/uploads", files={"file": ("w.bin", b"\0" * 400_000)})
    assert huge.status_code == 413 and "max_upload_mb" in huge.json()["detail"]


def test_validation_errors_do_not_echo_the_request(tmp_path, presets):
    db = Database(sqlite_url(tmp_path / "geneval.db"))
    svc = Service(db, Settings(home=tmp_path, default_benchmark="digits_smoke"), *presets)  # 1 MiB JSON limit
    client = TestClient(create_app(svc))
    token = {"Authorization": f"Bearer {svc.db.tokens.create('alice', 'submitter')[0]}"}
    secret = "S3CR3T" * 50_000  # 300 kB of a value that must not come back
    cases = [
        {**JOB, "name": secret},  # pydantic: pattern and length
        {**JOB, "overrides": {"batch_size": secret}},  # the benchmark's override rules
        {**JOB, "overrides": {secret: 1}},  # a key that is not allowed
        {**JOB, "model": {"kind": secret}},
    ]
    for body in cases:
        r = client.post("/api/jobs", json=body, headers=token)
        assert r.status_code == 422, r.text[:300]
        assert len(r.content) < 4000 and "S3CR3TS3CR3TS3CR3T" not in r.text
    db.close()


# ------------------------------------------------------------------------------------- the real server
def _rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for process {pid}")


def _send(port: int, head: bytes, total: int, chunked: bool) -> tuple[bytes, int, float]:
    """Send a request of ``total`` body bytes (zeros, 1 MiB at a time) without a token; returns the start of the
    answer, the bytes the server took before it closed the connection, and the seconds to the answer."""
    chunk = b"\0" * MiB
    sent, answer = 0, b""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(head)
        s.settimeout(10)  # a loaded machine's server may take a while to drain a MiB; a closed one answers at once
        try:
            while sent < total:
                piece = (b"%x\r\n" % len(chunk) + chunk + b"\r\n") if chunked else chunk
                s.sendall(piece)
                sent += len(chunk)
                if select.select([s], [], [], 0)[0]:  # the server answered (or closed): read it, send no more
                    answer += s.recv(65536)
                    break
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass
        s.settimeout(30)
        while b"\r\n\r\n" not in answer:
            try:
                got = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not got:
                break
            answer += got
    return answer, sent, time.monotonic() - t0


def test_a_200_mib_unauthenticated_body_leaves_the_server_memory_flat(tmp_path):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "genEval.cli",
                "serve",
                f"home={tmp_path / 'home'}",
                f"port={port}",
                "host=127.0.0.1",
                "workers=0",
                "benchmarks=[digits_smoke]",
                "default_benchmark=digits_smoke",
                "log_level=warning",
            ],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            assert server.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(f"{base}/api/health", timeout=5).status_code in (200, 503):  # 503: up, with no worker
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        for _ in range(3):  # warm up: every code path of a refusal has run once
            httpx.post(f"{base}/api/jobs", json=JOB, timeout=30)
            _send(port, b"POST /api/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n", 2 * MiB, False)
        time.sleep(0.5)
        idle = _rss_kib(server.pid)
        peak, stop = [idle], threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak.append(_rss_kib(server.pid))
                time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        size = 200 * MiB
        fixed, taken_fixed, t_fixed = _send(
            port,
            b"POST /api/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % size,
            size,
            chunked=False,
        )
        streamed, taken_streamed, t_streamed = _send(
            port,
            b"POST /api/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n",
            size,
            chunked=True,
        )
        time.sleep(0.3)
        stop.set()
        sampler.join()
        after = _rss_kib(server.pid)
        assert fixed.startswith(b"HTTP/1.1 413") and streamed.startswith(b"HTTP/1.1 413"), (fixed[:200], streamed[:200])
        growth_mib = (max(peak) - idle) / 1024
        print(
            f"\nserver RSS idle {idle / 1024:.1f} MiB, peak while receiving 2 x 200 MiB {max(peak) / 1024:.1f} MiB "
            f"(+{growth_mib:.1f}), after {after / 1024:.1f} MiB; the server took {taken_fixed / MiB:.0f} MiB "
            f"(Content-Length, answer in {t_fixed:.2f}s) and {taken_streamed / MiB:.0f} MiB (chunked, answer in "
            f"{t_streamed:.2f}s) before it answered 413 and closed"
        )
        assert growth_mib < 50
        assert taken_fixed < size and taken_streamed < size  # it stopped reading: the rest was never taken
        assert httpx.get(f"{base}/api/health", timeout=10).json()["status"] == "degraded"  # it serves on (no worker)
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
