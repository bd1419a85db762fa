"""End to end: the real `geneval serve` as a subprocess on 127.0.0.1, a token from `geneval token`, a small
digits job submitted with `geneval submit` over HTTP, and the leaderboard checked in a real headless
Chromium (Playwright driving the system Chromium)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from genEval.commands.serve import build_components, load_benchmarks, registered_classifiers
from tests.support.assets import ROOT
from tests.support.service import CHROMIUM_FLAGS, chromium, free_port


def _chromium() -> str:
    return chromium() or pytest.skip("no Chromium installed (Debian: apt-get install chromium)")


def _geneval(*args: str, env: dict, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "genEval.cli", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def _wait_healthy(base: str, server: subprocess.Popen, log: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"geneval serve exited with {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{base}/api/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"geneval serve did not become healthy in {timeout}s:\n{log.read_text()[-3000:]}")


def _check_in_browser(base: str, profile: Path, model: str) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (uses the system Chromium)")
    executable = _chromium()
    with sync_api.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(profile), executable_path=executable, headless=True, args=CHROMIUM_FLAGS
        )
        try:
            page = ctx.new_page()
            requested: list[str] = []
            page.on("request", lambda r: requested.append(r.url))
            page.goto(f"{base}/leaderboard/digits_smoke")
            assert "leaderboard" in page.title().lower()
            row = page.locator(f'tr[data-model="{model}"]')
            assert row.count() == 1
            cells = row.locator("td").all_inner_texts()
            assert cells[1] == model and float(cells[2].split()[0]) >= 0  # SA with its interval below
            page.click("th >> text=SA")
            assert "sort=sa" in page.url and page.locator(f'tr[data-model="{model}"]').count() == 1
            with page.expect_navigation():
                row = page.locator(f'tr[data-model="{model}"]')
                row.locator("a", has_text="report").first.click()
            assert "/report" in page.url and page.locator("img").count() >= 1
            assert all(u.startswith(base) or u.startswith("data:") for u in requested), requested
        finally:
            ctx.close()


def test_serve_submit_and_see_it_on_the_leaderboard(tmp_path):
    # Train (or load) the digits models into this session's GENEVAL_CACHE first, which the server inherits:
    # the job then measures the service, not first-use training.
    config = {
        **load_benchmarks(["digits_smoke"])["digits_smoke"].config,
        "classifier": registered_classifiers(None)["digits_cnn"],
    }
    build_components(config)
    home, elsewhere = tmp_path / "service-home", tmp_path / "cwd"
    elsewhere.mkdir()
    env = {**os.environ, "GENEVAL_SERVICE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "genEval.cli", "serve", "host=127.0.0.1", f"port={port}"],
            env=env,
            cwd=elsewhere,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_healthy(base, server, log)
        printed = log.read_text()
        assert str(home) in printed and "geneval token" in printed
        assert (home / "geneval.db").is_file() and not any(elsewhere.iterdir())
        page = httpx.get(f"{base}/")
        assert page.status_code == 200 and "leaderboard" in page.text.lower()
        assert httpx.post(f"{base}/api/jobs").status_code == 401

        made = _geneval("token", "name=e2e", "role=submitter", env=env, cwd=elsewhere)
        assert made.returncode == 0, made.stderr
        token = made.stdout.strip().splitlines()[-1]
        assert token.startswith("gev_")
        sub = _geneval(
            "submit",
            f"url={base}",
            f"token={token}",
            "bench=digits_smoke",
            "name=e2e-cnn",
            "model.kind=config",
            "model.name=digits_cnn",
            "wait=true",
            "timeout_s=1200",
            env=env,
            cwd=elsewhere,
            timeout=1300,
        )
        assert sub.returncode == 0, sub.stdout + sub.stderr
        assert "queued" in sub.stdout
        # it ends as `geneval` does: the headline of each repetition, then its table of scores (issue 42)
        assert "e2e-cnn on digits_smoke, repetition 0 (seed " in sub.stdout and ": FMR_v " in sub.stdout
        assert any(line.split()[:1] == ["SA"] for line in sub.stdout.splitlines())
        counts = [int(m) for m in re.findall(r"running: (\d+)/\d+ images", sub.stdout)]
        assert counts == sorted(counts), sub.stdout  # the progress only grows

        _check_in_browser(base, tmp_path / "chromium-profile", "e2e-cnn")
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
