"""Issue 37's attacks on uploads, kept as regressions: the upload quota, a safetensors header bomb, and a looping
TorchScript upload against the real server (tests/service/server/test_service_attacks.py has the others;
``benchmarks/service_attacks.py`` measures the same attacks before and after)."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import threading
import time

import httpx
import pytest
import torch
from safetensors.torch import save_file

from genEval.checkpoints import MAX_SAFETENSORS_TENSORS
from tests.support.assets import ROOT
from tests.support.sandbox import Looping
from tests.support.service import bearer, free_port, smoke_client, wait_for


def test_a_token_over_its_upload_quota_is_answered_429_before_its_file_is_read(tmp_path, presets):
    client, svc = smoke_client(tmp_path, presets, max_uploads_per_hour=1)
    alice = bearer(svc.db)
    save_file({"w": torch.zeros(3)}, tmp_path / "w.safetensors")
    first = client.post(
        "/api/uploads", files={"file": ("w.safetensors", (tmp_path / "w.safetensors").read_bytes())}, headers=alice
    )
    assert first.status_code == 201
    again = client.post("/api/uploads", files={"file": ("w.safetensors", b"x" * 1000)}, headers=alice)
    assert again.status_code == 429 and 3500 <= int(again.headers["retry-after"]) <= 3600
    assert "max_uploads_per_hour" in again.json()["detail"]
    assert not list((tmp_path / "uploads").glob(".incoming-*"))


def test_a_safetensors_header_bomb_upload_is_refused(tmp_path, presets):
    client, svc = smoke_client(tmp_path, presets)
    entry = '"t{}":{{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}'
    header = ("{" + ",".join(entry.format(i) for i in range(MAX_SAFETENSORS_TENSORS + 1)) + "}").encode()
    bomb = struct.pack("<Q", len(header)) + header
    answer = client.post("/api/uploads", files={"file": ("bomb.safetensors", bomb)}, headers=bearer(svc.db))
    assert answer.status_code == 415 and f"more than {MAX_SAFETENSORS_TENSORS} tensors" in answer.json()["detail"]
    assert not list((tmp_path / "uploads").iterdir())


# ------------------------------------------------------------------------------------ the real server
@pytest.mark.slow
def test_a_looping_torchscript_upload_neither_freezes_nor_outlives_the_server(tmp_path):
    """Issue 37: a 2 KB TorchScript upload froze `geneval serve`: /api/health timed out, SIGINT was ignored, and a
    .incoming-* file was left. Now the check runs in a child: the upload is refused (issue 41: for the __setstate__
    it would run, before loading it), the server answers others meanwhile, and SIGINT stops it at once, the check
    and its temp file included."""
    looping = tmp_path / "looping.pt"
    torch.jit.save(torch.jit.script(Looping()), str(looping))
    home, port = tmp_path / "home", free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(tmp_path / "serve.log", "w") as log:
        cmd = [sys.executable, "-m", "genEval.cli", "serve", f"home={home}", "log_level=warning", f"port={port}"]
        cmd += ["workers=0", "check_timeout_s=8"]
        server = subprocess.Popen(cmd + ["benchmarks=[digits_smoke]", "default_benchmark=digits_smoke"], env=env,
                                  stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(base), 600, "the server's start")
        token = [sys.executable, "-m", "genEval.cli", "token", f"home={home}", "name=a", "role=submitter"]
        made = subprocess.run(token, env=env, cwd=tmp_path, capture_output=True, text=True, check=True)
        auth = {"Authorization": f"Bearer {made.stdout.strip().splitlines()[-1]}"}
        box: dict = {}

        def upload() -> None:
            t0 = time.monotonic()
            box["answer"] = httpx.post(f"{base}/api/uploads", files={"file": ("looping.pt", looping.read_bytes())},
                                       headers=auth, timeout=120)  # fmt: skip
            box["s"] = time.monotonic() - t0

        sender = threading.Thread(target=upload)
        sender.start()
        time.sleep(2)
        t0 = time.monotonic()
        assert httpx.get(f"{base}/api/health", timeout=10).status_code == 503  # answered (no worker: degraded)
        assert time.monotonic() - t0 < 2
        sender.join()
        refused = box["answer"]  # issue 41: refused before it loads, for its __setstate__ (nothing of it runs)
        assert refused.status_code == 422 and "Looping.__setstate__" in refused.json()["detail"], refused.text
        assert box["s"] < 60
        sender = threading.Thread(target=lambda: box.update(late=_quietly(upload)))
        sender.start()
        time.sleep(3)  # the second check is running
        t0 = time.monotonic()
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
        assert time.monotonic() - t0 < 15
        sender.join()
    finally:
        if server.poll() is None:
            server.kill()
    assert not list((home / "uploads").glob(".incoming-*"))
    assert not list((home / "uploads").glob("*.pt"))


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/api/health", timeout=5).status_code in (200, 503)
    except httpx.HTTPError:
        return False


def _quietly(fn) -> None:
    try:
        fn()
    except httpx.HTTPError:
        pass
