"""Load test of the genEval service (a measurement, not a test): 1,000 requests to the leaderboard and
job-status endpoints from 50 concurrent clients while a job runs; prints p50/p95 latency and errors.

    python -m benchmarks.load_test                       # starts its own `geneval serve` on 127.0.0.1
    python -m benchmarks.load_test --requests 1000 --concurrency 50 --benchmark digits

It starts the real server in a temporary service directory (SQLite, one in-process worker), creates a token
with `geneval token`, finishes one small job on ``--board`` (so its leaderboard has a row), submits a job on
``--benchmark``, waits until it is running, and then fires the requests (round robin over ``/``,
``/leaderboard/<board>``, ``/api/leaderboard/<board>`` and ``/api/jobs/<running job>``).
Traffic goes only to 127.0.0.1; every loop is bounded in count and time.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/load_test.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.harness import results

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _geneval(args: list[str], env: dict) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "genEval.cli", *args], env=env, capture_output=True, text=True, timeout=600, check=True
    )
    return out.stdout


def _wait(predicate, timeout: float, what: str, poll: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(poll)
    raise TimeoutError(f"{what} did not happen within {timeout:.0f}s")


async def _fire(base: str, paths: list[str], n: int, concurrency: int, timeout: float) -> tuple[list[float], list[str]]:
    latencies: list[float] = []
    errors: list[str] = []
    queue: asyncio.Queue[str] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(paths[i % len(paths)])
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, timeout=timeout, limits=limits) as client:

        async def one_client() -> None:
            while not queue.empty():
                path = queue.get_nowait()
                t0 = time.perf_counter()
                try:
                    r = await client.get(path)
                    if r.status_code != 200:
                        errors.append(f"{path}: HTTP {r.status_code}")
                except httpx.HTTPError as err:
                    errors.append(f"{path}: {type(err).__name__}: {err}")
                latencies.append(time.perf_counter() - t0)

        await asyncio.gather(*(one_client() for _ in range(concurrency)))
    return latencies, errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--benchmark", default="digits", help="benchmark of the job that runs during the load")
    ap.add_argument("--board", default="digits_smoke", help="benchmark of the finished job whose leaderboard is read")
    ap.add_argument("--timeout", type=float, default=60.0, help="per-request timeout (s)")
    args = ap.parse_args()

    home = Path(tempfile.mkdtemp(prefix="geneval-load-"))
    env = {**os.environ, "GENEVAL_SERVICE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(home / "serve.log", "w")
    cmd = [
        sys.executable,
        "-m",
        "genEval.cli",
        "serve",
        "host=127.0.0.1",
        f"port={port}",
        "heartbeat_s=1",
        "log_level=warning",
        f"default_benchmark={args.board}",
    ]
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait(lambda: _healthy(base), 600, "server start")
        token = _geneval(["token", "name=load", "role=submitter"], env).strip().splitlines()[-1]
        http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        first = http.post(
            "/api/jobs",
            json={"benchmark": args.board, "name": "warm-up", "model": {"kind": "config", "name": "digits_mlp"}},
        ).json()["id"]
        _wait(lambda: http.get(f"/api/jobs/{first}").json()["status"] == "done", 3600, "the first job", poll=2)
        job = http.post(
            "/api/jobs",
            json={"benchmark": args.benchmark, "name": "under-load", "model": {"kind": "config", "name": "digits_cnn"}},
        ).json()["id"]
        _wait(
            lambda: http.get(f"/api/jobs/{job}").json()["images_done"] > 0, 3600, "the second job's progress", poll=0.5
        )
        paths = ["/", f"/leaderboard/{args.board}", f"/api/leaderboard/{args.board}", f"/api/jobs/{job}"]
        t0 = time.perf_counter()
        lat, errors = asyncio.run(_fire(base, paths, args.requests, args.concurrency, args.timeout))
        wall = time.perf_counter() - t0
        after = http.get(f"/api/jobs/{job}").json()
        q = statistics.quantiles(lat, n=100)
        print(f"{len(lat)} requests, {args.concurrency} concurrent clients, {wall:.1f}s ({len(lat) / wall:.0f} req/s)")
        print(f"latency p50 {q[49] * 1000:.0f} ms, p95 {q[94] * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms")
        print(f"errors: {len(errors)}" + "".join(f"\n  {e}" for e in errors[:10]))
        print(f"job during the load: {after['status']}, {after['images_done']}/{after['images_total']} images")
        http.post(f"/api/jobs/{job}/cancel")
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        print(f"service directory (logs, database): {home}")


def _healthy(base: str) -> bool:
    try:
        return httpx.get(f"{base}/api/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
