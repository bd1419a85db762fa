"""Issue 37's attacks on the genEval service (a measurement, not a test): for each, the answer's status, its time and
the server's memory (RSS), against any checkout of the code, so that one script measures before and after.

    python -m benchmarks.service_attacks --code /path/to/checkout --out before.json   # e.g. an export of main
    python -m benchmarks.service_attacks --out after.json                           # this checkout
    python -m benchmarks.service_attacks --only bomb,skew                           # some of them

Each attack starts the real ``geneval serve`` of ``--code`` (``python -m genEval.cli serve``, PYTHONPATH set to the
checkout) in a temporary service directory on 127.0.0.1, and measures the server process's RSS from
``/proc/<pid>/status`` (``VmRSS`` now, ``VmHWM`` its peak). Attacks (the numbers of issue 37's list):

* ``loop`` (1): a 2 KB TorchScript archive whose ``__setstate__`` never returns, uploaded; ``/api/health`` asked
  meanwhile; then SIGINT: does the server stop, and is a ``.incoming-*`` file left?
* ``bomb`` (3): a safetensors file whose header lists 1.15 M zero-size tensors (69 MB), uploaded; health meanwhile.
* ``outage`` (2): a real PostgreSQL stopped for 10 s under ``geneval serve workers=1`` running a digits_smoke job;
  health during the outage; do the running and the queued job finish afterwards?
* ``skew`` (4): a worker whose clock runs 30 s ahead starts while another worker runs a job (lease 10 s): does it
  take the live job (attempts 1 -> 2)? And a run.lock whose heartbeat is 1 h in the future (lease 2 s): how long
  until another process takes it over?
* ``quota`` (5): one token queues 500 jobs; 2,000 wrong tokens from one address; a client that sends its request
  head one byte every 2 s, and one that sends nothing: how long does the server keep each?
* ``echo`` (6): a 422 for a request with a 1 MB key, and for one with 60,000 keys (840 KB): the answer's size.

Traffic goes only to 127.0.0.1; every wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import traceback
from pathlib import Path

import httpx

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/service_attacks.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

from benchmarks.harness import results
from benchmarks.harness.checkout import ROOT, pythonpath
from benchmarks.harness.net import free_port


def rss_mb(pid: int) -> dict[str, float]:
    """The process's resident memory now and at its peak (MiB), from /proc."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


class Server:
    """``geneval serve`` of checkout ``code`` in a temporary home, with ``overrides``."""

    def __init__(self, code: Path, *overrides: str, python: str = sys.executable, home: Path | None = None) -> None:
        self.code, self.python = code, python
        self.home = home or Path(tempfile.mkdtemp(prefix="geneval-attack-"))
        self.env = {**os.environ, "PYTHONPATH": str(code), "GENEVAL_SERVICE_HOME": str(self.home)}
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(self.home / "serve.log", "a")
        cmd = [python, "-m", "genEval.cli", "serve", f"port={self.port}", "log_level=warning", *overrides]
        self.proc = subprocess.Popen(cmd, env=self.env, cwd=self.home, stdout=self.log, stderr=subprocess.STDOUT)
        self.overrides = overrides
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                said = (self.home / "serve.log").read_text()[-3000:]
                raise RuntimeError(f"serve exited {self.proc.returncode}: {said}")
            try:
                httpx.get(f"{self.base}/api/health", timeout=5)
                break
            except httpx.HTTPError:
                time.sleep(0.5)

    def token(self, role: str = "submitter", name: str = "attacker") -> str:
        db = [o for o in self.overrides if o.startswith("db=")]
        out = subprocess.run(
            [self.python, "-m", "genEval.cli", "token", f"home={self.home}", f"name={name}", f"role={role}", *db],
            env=self.env,
            cwd=self.home,
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip().splitlines()[-1]

    def rss(self) -> dict[str, float]:
        return rss_mb(self.proc.pid)

    def health(self, timeout: float = 10.0) -> dict:
        t0 = time.perf_counter()
        try:
            r = httpx.get(f"{self.base}/api/health", timeout=timeout)
            said = r.json().get("status") if r.headers.get("content-type", "").startswith("application/json") else None
            return {"status": r.status_code, "s": round(time.perf_counter() - t0, 3), "said": said or r.text[:40]}
        except httpx.HTTPError as err:
            return {"status": f"no answer ({type(err).__name__})", "s": round(time.perf_counter() - t0, 3)}

    def stop(self, wait_s: float = 20.0) -> dict:
        """SIGINT, then SIGKILL if it has not exited within ``wait_s``."""
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(wait_s)
            how = f"exited {self.proc.returncode} after SIGINT"
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            how = f"ignored SIGINT for {wait_s:.0f}s: SIGKILL"
        self.log.close()
        return {"stop": how, "stop_s": round(time.perf_counter() - t0, 2)}


def _upload(server: Server, token: str, path: Path, timeout: float) -> dict:
    t0 = time.perf_counter()
    try:
        with open(path, "rb") as fh:
            r = httpx.post(
                f"{server.base}/api/uploads",
                files={"file": (path.name, fh)},
                headers={"Authorization": f"Bearer {token}"},
                timeout=timeout,
            )
        said = r.text[:160]
        return {"status": r.status_code, "s": round(time.perf_counter() - t0, 2), "answer": said}
    except httpx.HTTPError as err:
        status = f"no answer in {timeout:.0f}s ({type(err).__name__})"
        return {"status": status, "s": round(time.perf_counter() - t0, 2)}


def _upload_attack(code: Path, path: Path, timeout: float) -> dict:
    server = Server(code, "workers=0")
    try:
        token = server.token()
        before = server.rss()
        box: dict = {}
        thread = threading.Thread(target=lambda: box.update(_upload(server, token, path, timeout)))
        thread.start()
        time.sleep(3.0)
        health = server.health()
        thread.join()
        out = {"upload": box, "health_during": health, "rss_before": before, "rss_after": server.rss()}
    finally:
        out_stop = server.stop()
    left = sorted(p.name for p in (server.home / "uploads").glob(".incoming-*"))
    return {**out, **out_stop, "incoming_left": left}


LOOPING = textwrap.dedent(
    """
    import sys
    from typing import Tuple
    import torch

    class Loop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.n = 0

        def forward(self, x):
            return x

        @torch.jit.export
        def __getstate__(self) -> Tuple[int, bool]:
            return (self.n, self.training)

        @torch.jit.export
        def __setstate__(self, state: Tuple[int, bool]) -> None:
            self.training = state[1]
            n = state[0]
            while n >= 0:
                n = n + 1
            self.n = n

    torch.jit.save(torch.jit.script(Loop()), sys.argv[1])
    """
)


def attack_loop(code: Path, work: Path) -> dict:
    path, source = work / "looping.pt", work / "make_looping.py"
    source.write_text(LOOPING)  # torch.jit.script reads the class's source from its file
    subprocess.run([sys.executable, str(source), str(path)], check=True, capture_output=True)
    return {"file_bytes": path.stat().st_size, **_upload_attack(code, path, timeout=90)}


def header_bomb(path: Path, tensors: int = 1_150_000) -> Path:
    """A safetensors file of ``tensors`` zero-size tensors (a header of about 60 bytes per tensor, no data)."""
    entry = '"t{}":{{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}'
    header = ("{" + ",".join(entry.format(i) for i in range(tensors)) + "}").encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return path


def attack_bomb(code: Path, work: Path) -> dict:
    path = header_bomb(work / "bomb.safetensors")
    return {"file_bytes": path.stat().st_size, **_upload_attack(code, path, timeout=120)}


def _job(server: Server, token: str, name: str) -> str:
    body = {"benchmark": "digits_smoke", "name": name, "model": {"kind": "config", "name": "digits_cnn"}}
    r = httpx.post(f"{server.base}/api/jobs", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    r.raise_for_status()
    return r.json()["id"]


def _status(server: Server, job: str) -> dict:
    try:
        r = httpx.get(f"{server.base}/api/jobs/{job}", timeout=30)
        return r.json() if r.status_code == 200 else {"status": f"HTTP {r.status_code}", "attempts": None}
    except (httpx.HTTPError, ValueError) as err:
        return {"status": f"no answer ({type(err).__name__})", "attempts": None}


def attack_outage(code: Path, work: Path) -> dict:
    from benchmarks.harness.postgres import PgCluster

    cluster = PgCluster().start()
    try:
        url = cluster.create_database()
        server = Server(code, f"db={url}", "workers=1", "lease_s=10", "heartbeat_s=1", "poll_s=1", "n_boot=100")
        out: dict = {}
        try:
            token = server.token()
            first, second = _job(server, token, "first"), _job(server, token, "second")
            deadline = time.monotonic() + 600
            while _status(server, first)["status"] != "running" and time.monotonic() < deadline:
                time.sleep(0.5)
            cluster.stop()
            t0 = time.monotonic()
            during = []
            while time.monotonic() - t0 < 10:
                during.append(server.health(timeout=5))
                time.sleep(2)
            cluster.start()
            back = time.monotonic()
            states = {}
            while time.monotonic() - back < 240:
                states = {n: _status(server, j)["status"] for n, j in (("first", first), ("second", second))}
                if all(s in ("done", "failed", "cancelled") for s in states.values()):
                    break
                time.sleep(2)
            out |= {
                "health_during_outage": sorted({f"{h['status']} {h.get('said')}" for h in during}),
                "after_s": round(time.monotonic() - back, 1),
                "jobs_after": states,
                "attempts": {n: _status(server, j)["attempts"] for n, j in (("first", first), ("second", second))},
                "health_after": server.health(),
                "rss_after": server.rss(),
            }
        finally:
            out.update(server.stop())
        return out
    finally:
        cluster.remove()


def make_worker(worker_class, db, home, runner, **settings):
    """A ``Worker`` of the checkout's API with the ``settings`` it knows: its keywords (before its settings became one
    ``WorkerSettings``), or that object (after). Run in the attacks' worker children."""
    import dataclasses
    import inspect

    try:
        from genEval.service.worker_settings import WorkerSettings
    except ImportError:  # a checkout from before: the settings are the Worker's keywords
        known = inspect.signature(worker_class).parameters
        return worker_class(db, home, runner, **{k: v for k, v in settings.items() if k in known})
    known = {f.name for f in dataclasses.fields(WorkerSettings)}
    settings = {"isolation": "none", **settings}  # the Worker's own default before (the sandbox is the command's)
    return worker_class(db, home, runner, WorkerSettings(**{k: v for k, v in settings.items() if k in known}))


WORKER = textwrap.dedent(
    """
    import sys, time
    if float(sys.argv[3]):
        skew = float(sys.argv[3])
        real, real_ns = time.time, time.time_ns
        time.time = lambda: real() + skew
        time.time_ns = lambda: real_ns() + int(skew * 1e9)
    try:  # the server's package since the service was cut into slices
        from genEval.service.server.database import Database
        from genEval.service.server.worker import Worker
    except ImportError:  # a checkout from before
        from genEval.service.db import Database
        from genEval.service.worker import Worker
    from benchmarks.service_attacks import make_worker, sleeping_runner
    w = make_worker(Worker, Database(sys.argv[1]), sys.argv[2], sleeping_runner, lease_s=10, heartbeat_s=1, poll_s=0.5)
    w.run()
    """
)


def sleeping_runner(job, home, report) -> dict:
    """A job that takes 40 s (the skew attack's live job)."""
    report("total", 1)
    time.sleep(40)
    return {"slept": 40}


#: Opens the database of ``sys.argv[1]`` as ``db`` with the code of either layout (before or after the slices).
OPEN_DB = (
    "import importlib.util as u; m = 'genEval.service.server.database' if u.find_spec('genEval.service.server') "
    "else 'genEval.service.db'; db = __import__(m, fromlist=['Database']).Database(sys.argv[1])"
)


def attack_skew(code: Path, work: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": pythonpath(code)}  # code's genEval, this checkout's sleeping_runner
    home = Path(tempfile.mkdtemp(prefix="geneval-skew-"))
    url = f"sqlite:///{home / 'geneval.db'}"
    code_check = (
        f"import sys; {OPEN_DB}; from genEval.service.records import TokenInfo;"
        "t = TokenInfo('o', 'o', 'submitter', 0.0, None);"
        "submit = db.jobs.submit if hasattr(db, 'jobs') else db.submit_job;"
        "print(submit(benchmark='b', benchmark_version='v', name='live', owner=t, model={}, config={},"
        " overrides={}, seeds=[1], upload_path=None).id)"
    )
    job = subprocess.run([sys.executable, "-c", code_check, url], env=env, capture_output=True, text=True, check=True)
    job_id = job.stdout.strip().splitlines()[-1]
    read = f"import sys; {OPEN_DB}; j = (db.jobs.get if hasattr(db, 'jobs') else db.get_job)(sys.argv[2]);" + (
        "print(j.status, j.attempts, j.worker_id)"
    )

    def state() -> str:
        return subprocess.run(
            [sys.executable, "-c", read, url, job_id], env=env, capture_output=True, text=True
        ).stdout.strip()

    logs = [open(home / f"w{i}.log", "w") for i in range(2)]
    fair = subprocess.Popen(
        [sys.executable, "-P", "-c", WORKER, url, str(home), "0"],
        env=env,
        stdout=logs[0],
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while not state().startswith("running") and time.monotonic() < deadline:
        time.sleep(0.5)
    first = state()
    ahead = subprocess.Popen(
        [sys.executable, "-P", "-c", WORKER, url, str(home), "30"],
        env=env,
        stdout=logs[1],
        stderr=subprocess.STDOUT,
    )
    time.sleep(15)
    second = state()
    for p in (fair, ahead):
        p.kill()
        p.wait()
    lock = _lock_attack(code, home)
    return {"job_with_fair_worker": first, "job_15s_after_skewed_worker_started": second, "run_lock": lock}


LOCK_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from genEval.runs.lock import LOCK, RunDirectoryBusy, RunLock
    d = Path(sys.argv[1]); d.mkdir(parents=True, exist_ok=True)
    now = time.time()
    (d / LOCK).write_text(json.dumps({"version": 1, "host": "elsewhere", "pid": 12345, "token": "t" * 32,
        "started": now, "heartbeat": now + 3600, "lease_s": 2.0}))
    t0 = time.monotonic()
    try:
        RunLock(d, lease_s=2, wait_s=60).acquire()
        print(json.dumps({"taken_over_after_s": round(time.monotonic() - t0, 1)}))
    except RunDirectoryBusy as err:
        print(json.dumps({"refused_after_s": round(time.monotonic() - t0, 1), "said": str(err)[-160:]}))
    """
)


def _lock_attack(code: Path, home: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code)}
    cmd = [sys.executable, "-c", LOCK_SCRIPT, str(home / "run")]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {"error": out.stderr[-300:]}


def attack_quota(code: Path, work: Path) -> dict:
    server = Server(code, "workers=0")
    out: dict = {}
    try:
        token = server.token()
        head = {"Authorization": f"Bearer {token}"}
        codes: dict[int, int] = {}
        t0 = time.perf_counter()
        with httpx.Client(base_url=server.base, timeout=30) as http:
            for i in range(500):
                body = {"benchmark": "digits_smoke", "name": f"m{i}", "model": {"kind": "config", "name": "digits_cnn"}}
                r = http.post("/api/jobs", json=body, headers=head)
                codes[r.status_code] = codes.get(r.status_code, 0) + 1
                if r.status_code == 429 and "retry_after" not in out:
                    out["retry_after"] = r.headers.get("retry-after")
            out["500_submits"] = {"answers": codes, "s": round(time.perf_counter() - t0, 2)}
            codes = {}
            t0 = time.perf_counter()
            for i in range(2000):
                r = http.get("/api/jobs", headers={"Authorization": f"Bearer gev_guess{i}"})
                codes[r.status_code] = codes.get(r.status_code, 0) + 1
            wall = time.perf_counter() - t0
            out["2000_guesses"] = {
                "answers": codes,
                "s": round(wall, 2),
                "guesses_checked_per_s": round(codes.get(401, 0) / wall, 1),
            }
        out["slow_head"] = _slow_client(server, b"GET /api/health HTTP/1.1\r\nHost: x\r\n", 2.0, 90)
        out["silent"] = _slow_client(server, b"", 0.0, 90)
        out["rss_after"] = server.rss()
    finally:
        out.update(server.stop())
    return out


def _slow_client(server: Server, head: bytes, every_s: float, cap_s: float) -> dict:
    """Send ``head`` one byte every ``every_s`` seconds (nothing when empty): how long the server keeps the connection
    (capped at ``cap_s``) and what it answered."""
    from benchmarks.harness.net import hold_connection

    held, said = hold_connection(server.port, [head[i : i + 1] for i in range(len(head))], every_s, cap_s)
    if held >= cap_s:
        return {"held_s": f">= {cap_s:.0f}", "bytes_sent": min(len(head), int(cap_s / every_s) + 1 if every_s else 0)}
    return {"closed_after_s": round(held, 1), "answer": said[:40].decode("latin-1")}


def attack_echo(code: Path, work: Path) -> dict:
    server = Server(code, "workers=0")
    out: dict = {}
    try:
        head = {"Authorization": f"Bearer {server.token()}", "content-type": "application/json"}
        job = {"benchmark": "digits_smoke", "name": "x", "model": {"kind": "config", "name": "digits_cnn"}}
        bodies = {
            "1MB_key": json.dumps({**job, "k" * 1_000_000: 1}),
            "60k_keys": json.dumps({**job, **{f"k{i:05d}": 1 for i in range(60_000)}}),
            "1MB_override_key": json.dumps({**job, "overrides": {"o" * 1_000_000: 1}}),
        }
        for name, body in bodies.items():
            t0 = time.perf_counter()
            r = httpx.post(f"{server.base}/api/jobs", content=body.encode(), headers=head, timeout=60)
            out[name] = {
                "sent_bytes": len(body),
                "status": r.status_code,
                "answer_bytes": len(r.content),
                "s": round(time.perf_counter() - t0, 2),
            }
        out["rss_after"] = server.rss()
    finally:
        out.update(server.stop())
    return out


# ------------------------------------------------------------------------------------ issue 41
def _hostile():
    """The hostile files and runners of issue 41 (benchmarks/harness/hostile.py of this checkout: model files are
    data, whichever checkout is attacked)."""
    from benchmarks.harness import hostile

    return hostile


def _knows(code: Path, setting: str) -> bool:
    """Whether ``code``'s geneval serve has ``setting`` (a checkout from before issue 41 has not)."""
    return f"\n{setting}:" in (code / "genEval" / "conf" / "serve.yaml").read_text()


def _new(code: Path, *overrides: str) -> list[str]:
    """The ``overrides`` of issue 41's settings that ``code`` knows."""
    return [o for o in overrides if _knows(code, o.split("=")[0])]


def attack_reads(code: Path, work: Path) -> dict:
    """E1: an upload whose __setstate__ maps a file of the server's (``torch.from_file``). Accepted means it loaded,
    which it does only when the file was there to map: the server's file was read."""
    secret = work / "server-secret.txt"
    secret.write_text("db-password=hunter2-0123456789\n")
    model = _hostile().script(_hostile().ReadsAFile(str(secret)), work / "reads_a_file.pt")
    out = _upload_attack(code, model, timeout=120)
    return {**out, "server_file_read": out["upload"].get("status") == 201}


def _throwaway_venv(work: Path) -> tuple[Path, Path]:
    """A virtual environment of its own (its site-packages the attack's target) that imports this one's packages
    through a path-only .pth file (no code): (its python, its site-packages)."""
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    paths = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    (site / "imports.pth").write_text("\n".join(paths) + "\n")
    return venv / "bin" / "python", site


def attack_pth(code: Path, work: Path) -> dict:
    """E2: an upload whose __setstate__ writes a .pth file into the server's site-packages (a throwaway venv's), which
    every later interpreter of that environment runs: does the file appear, and does the next interpreter run it?"""
    python, site = _throwaway_venv(work)
    marker = work / "pth-ran.txt"
    payload = f"import os; open({str(marker)!r}, 'w').write('ran')\n".encode()
    model = _hostile().script(_hostile().WritesAFile(str(site / "evil.pth"), payload), work / "writes.pt")
    server = Server(code, "workers=0", python=str(python))
    try:
        token = server.token()
        before = server.rss()
        answer = _upload(server, token, model, timeout=120)
        out = {"upload": answer, "rss_before": before, "rss_after": server.rss()}
    finally:
        out.update(server.stop())
    subprocess.run([str(python), "-c", "pass"], check=False)
    return {**out, "pth_written": (site / "evil.pth").exists(), "next_interpreter_ran_it": marker.exists()}


WORKER_41 = textwrap.dedent(
    """
    import json, sys
    from genEval.service.server.database import Database
    from genEval.service.server.worker import Worker
    from benchmarks.harness import hostile
    from benchmarks.service_attacks import make_worker
    runner = getattr(hostile, sys.argv[3])
    settings = {k: json.loads(v) for k, v in (a.split("=") for a in sys.argv[4:])}
    make_worker(Worker, Database(sys.argv[1]), sys.argv[2], runner, poll_s=0.2, **settings).run()
    """
)
_SUBMIT = (
    "import sys; from genEval.service.server.database import Database; db = Database(sys.argv[1]);"
    "o = db.tokens.create('t', 'submitter')[1];"
    "print(db.jobs.submit(benchmark='b', benchmark_version='v', name=sys.argv[2], owner=o, model={}, config={},"
    " overrides={}, seeds=[1], upload_path=None).id)"
)


class _Queue:
    """A database and home for worker attacks, driven from subprocesses with ``code`` (any checkout)."""

    def __init__(self, code: Path) -> None:
        self.code, self.home = code, Path(tempfile.mkdtemp(prefix="geneval-worker-attack-"))
        self.url = f"sqlite:///{self.home / 'geneval.db'}"
        self.env = {**os.environ, "PYTHONPATH": pythonpath(code)}  # code's genEval, this checkout's hostile runners
        self.procs: list[subprocess.Popen] = []

    def submit(self, name: str) -> str:
        done = subprocess.run([sys.executable, "-c", _SUBMIT, self.url, name], env=self.env, capture_output=True,
                              text=True, check=True)  # fmt: skip
        return done.stdout.strip().splitlines()[-1]

    def state(self, job: str) -> dict:
        read = ("import sys, json; from genEval.service.server.database import Database; "
                "j = Database(sys.argv[1]).jobs.get(sys.argv[2]); ran = j.finished_at and j.started_at and "
                "round(j.finished_at - j.started_at, 1); print(json.dumps({'status': j.status, 'attempts': "
                "j.attempts, 'ran_s': ran, 'error': j.error}))")  # fmt: skip
        done = subprocess.run([sys.executable, "-c", read, self.url, job], env=self.env, capture_output=True,
                              text=True)  # fmt: skip
        return json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {"error": done.stderr}

    def worker(self, runner: str, **settings: float) -> subprocess.Popen:
        args = [f"{k}={v}" for k, v in settings.items()]
        log = open(self.home / f"worker-{len(self.procs)}.log", "w")
        cmd = [sys.executable, "-P", "-c", WORKER_41, self.url, str(self.home), runner]
        proc = subprocess.Popen(cmd + args, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def cancel(self, job: str) -> None:
        """Cancel ``job`` from this process (an UPDATE of its row, the same in every checkout; a subprocess would
        take seconds to start on a loaded machine, blurring when the cancel was stored)."""
        from genEval.service.server.database import Database

        db = Database(self.url)
        db.jobs.cancel(job)
        db.close()

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def _wait_for(predicate, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got := predicate():
            return got
        time.sleep(every)
    return None


def attack_hang(code: Path, work: Path) -> dict:
    """E4: a model whose forward never returns (scripted, holding the GIL), in a worker (lease 10 s, heartbeat 1 s,
    max_job_s=20 where the code knows it): the job's status after 60 s and how long it ran; then, in a worker without
    a time limit (stop_timeout_s=30), one cancelled 3 s into its forward: how long until its child is gone."""
    out: dict = {}
    q = _Queue(code)
    try:
        job = q.submit("hangs")
        proc = q.worker("hanging_runner", lease_s=10, heartbeat_s=1, max_job_s=20, cancel_grace_s=3)
        ended = _wait_for(lambda: q.state(job)["status"] in ("failed", "done"), 60)
        out["hanging_job"] = {**q.state(job), "ended_within_60s": bool(ended)}
        out["worker_rss"] = rss_mb(proc.pid) if proc.poll() is None else "exited"
    finally:
        q.close()
    q = _Queue(code)
    try:
        job = q.submit("cancelled")
        q.worker("hanging_runner", lease_s=10, heartbeat_s=1, cancel_grace_s=3, stop_timeout_s=30)
        started = q.home / f"started-{job}"
        pid = _wait_for(lambda: started.is_file() and int(started.read_text() or 0), 180, 0.2)
        time.sleep(3)
        watch = {}

        def watcher() -> None:  # the child's end, seen every 0.05 s while the cancel is being sent
            _wait_for(lambda: not Path(f"/proc/{pid}").exists(), 120, 0.05)
            watch["gone"] = time.monotonic()

        thread = threading.Thread(target=watcher, daemon=True)
        thread.start()
        t0 = time.monotonic()
        q.cancel(job)
        stored = time.monotonic()
        thread.join(120)
        out["cancel"] = {
            "cancel_stored_in_s": round(stored - t0, 2),
            "child_gone_after_s": round(watch["gone"] - stored, 1) if "gone" in watch else ">= 120",
            "status": q.state(job)["status"],
        }
    finally:
        q.close()
    return out


def attack_lost(code: Path, work: Path) -> dict:
    """E14: three jobs whose child takes 3 s to exit after answering, a lease of 2 s, and the server's re-queue of
    expired leases every 0.2 s: are they done at attempt 1, run once each?"""
    q = _Queue(code)
    requeue = ("import sys, time; from genEval.service.server.database import Database; db = Database(sys.argv[1])\n"
               "while True:\n    db.queue.requeue_expired(3); time.sleep(0.2)")  # fmt: skip
    server = subprocess.Popen([sys.executable, "-c", requeue, q.url], env=q.env)
    try:
        jobs = [q.submit(f"job{i}") for i in range(3)]
        proc = q.worker("slow_exit_runner", lease_s=2, heartbeat_s=0.3, n_boot=50)
        t0 = time.monotonic()
        _wait_for(lambda: all(q.state(j)["status"] in ("done", "failed") for j in jobs), 180)
        log = q.home / "executions.log"
        runs = log.read_text().split() if log.is_file() else []
        return {
            "jobs": [q.state(j) for j in jobs],
            "executions": {j[:8]: runs.count(j) for j in jobs},
            "s": round(time.monotonic() - t0, 1),
            "worker_rss": rss_mb(proc.pid) if proc.poll() is None else "exited",
        }
    finally:
        server.kill()
        q.close()


def attack_lockout(code: Path, work: Path) -> dict:
    """E7: 25 wrong tokens from 127.0.0.1, then the admin's valid token; 100 wrong tokens with a rotating
    X-Forwarded-For from 127.0.0.1; 25 wrong tokens forging X-Forwarded-For: 10.0.0.99 (a victim's address), then the
    victim's valid token sent through that header."""
    server = Server(code, "workers=0", "max_auth_failures=20")
    out: dict = {}
    try:
        admin = server.token("admin", "root")
        with httpx.Client(base_url=server.base, timeout=30) as http:

            def codes(n: int, headers) -> dict:
                got: dict[int, int] = {}
                for i in range(n):
                    r = http.get("/api/jobs", headers=headers(i))
                    got[r.status_code] = got.get(r.status_code, 0) + 1
                return got

            out["25_wrong"] = codes(25, lambda i: {"Authorization": f"Bearer gev_wrong{i}"})
            out["admin_after"] = http.get("/api/jobs", headers={"Authorization": f"Bearer {admin}"}).status_code
            time.sleep(61)  # the window passes
            rotating = lambda i: {"Authorization": f"Bearer gev_w{i}", "X-Forwarded-For": f"10.1.0.{i % 250}"}  # noqa: E731
            out["100_rotating_xff"] = codes(100, rotating)
            time.sleep(61)
            victim = {"X-Forwarded-For": "10.0.0.99"}
            out["25_forged_victim"] = codes(25, lambda i: {"Authorization": f"Bearer gev_v{i}", **victim})
            out["victim_valid_token"] = http.get("/api/jobs", headers={"Authorization": f"Bearer {admin}",
                                                                       **victim}).status_code  # fmt: skip
        out["rss_after"] = server.rss()
    finally:
        out.update(server.stop())
    return out


def _tiny_safetensors(path: Path) -> Path:
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(4)}, str(path))
    return path


def attack_quota_db(code: Path, work: Path) -> dict:
    """E6: max_uploads_per_hour=3: three uploads, a fourth; the server restarted on the same home; a fifth."""
    weights = _tiny_safetensors(work / "w.safetensors")
    home = Path(tempfile.mkdtemp(prefix="geneval-quota-"))
    server = Server(code, "workers=0", "max_uploads_per_hour=3", home=home)
    out: dict = {}
    try:
        token = server.token()
        out["4_uploads"] = [_upload(server, token, weights, 60)["status"] for _ in range(4)]
    finally:
        out.update({f"first_{k}": v for k, v in server.stop().items()})
    server = Server(code, "workers=0", "max_uploads_per_hour=3", home=home)
    try:
        out["after_restart"] = _upload(server, token, weights, 60)["status"]
        out["rss_after"] = server.rss()
    finally:
        out.update(server.stop())
    return out


def _big_module():
    import torch

    class Big(torch.nn.Module):
        """A plain model holding 400 MB of float32 (its file is that large, its loading takes that much)."""

        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("blob", torch.ones(100 * 1024 * 1024))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.blob[:1]

    return Big()


def attack_memory(code: Path, work: Path) -> dict:
    """E3: a TorchScript archive holding a 400 MB buffer, checked with check_memory_mb=1100 (importing torch takes
    ~800 MiB of it): does the refusal name the setting? Two small uploads of one token at once: is the second checked
    while the first is?"""
    import torch

    path = work / "big.pt"
    torch.jit.save(torch.jit.script(_big_module()), str(path))
    server = Server(code, "workers=0", "check_memory_mb=1100", "check_timeout_s=120")
    out: dict = {"file_mb": round(path.stat().st_size / 2**20)}
    try:
        token = server.token()
        out["upload"] = _upload(server, token, path, 180)
        small = work / "small.pt"
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(small))
        boxes: list[dict] = [{}, {}]  # a check takes seconds (the child imports torch): the second arrives during it
        threads = [threading.Thread(target=lambda b=b: b.update(_upload(server, token, small, 180))) for b in boxes]
        for t in threads:
            t.start()
            time.sleep(0.5)
        for t in threads:
            t.join()
        out["two_at_once"] = [b.get("status") for b in boxes]
        out["rss_after"] = server.rss()
    finally:
        out.update(server.stop())
    return out


def attack_guard(code: Path, work: Path) -> dict:
    """Found while fixing issue 41: a torch.export program whose guards_code is Python (torch compiles it into the
    module and runs it on every call). Uploaded; then the command line's classifier=torchscript path on it (load,
    one forward): does the guard run?"""
    marker = work / "guard-ran.txt"
    model = _hostile().export_with_guard(work / "guarded.pt2", f"__import__('os').system('touch {marker}') == 0")
    out = _upload_attack(code, model, timeout=120)
    cli = (
        "import sys, torch; from genEval.classifiers import torchscript_classifier\n"
        "m = torchscript_classifier(sys.argv[1], num_classes=10, check_timeout_s=120)\n"
        "m(torch.rand(2, 3, 8, 8))"
    )
    done = subprocess.run([sys.executable, "-c", cli, str(model)], env={**os.environ, "PYTHONPATH": str(code)},
                          capture_output=True, text=True)  # fmt: skip
    said = (done.stderr.strip().splitlines() or [""])[-1][:200]
    return {**out, "cli": {"exit": done.returncode, "said": said}, "guard_ran": marker.exists()}


IN_PROCESS = textwrap.dedent(
    """
    import json, sys
    from benchmarks.service_attack_scenarios import SCENARIOS
    print(json.dumps(SCENARIOS[sys.argv[1]]()))
    """
)


def _scenario(code: Path, name: str) -> dict:
    """One of the library-level scenarios (benchmarks/service_attack_scenarios.py) run with ``code``'s genEval."""
    env = {**os.environ, "PYTHONPATH": pythonpath(code)}  # code's genEval, this checkout's scenarios and toys
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-P", "-c", IN_PROCESS, name],
                          env=env, capture_output=True, text=True, cwd=tempfile.mkdtemp())  # fmt: skip
    if done.returncode != 0 or not done.stdout.strip():
        return {"error": done.stderr.strip()[-600:], "s": round(time.perf_counter() - t0, 1)}
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "s": round(time.perf_counter() - t0, 1)}


ATTACKS = {
    "loop": attack_loop,
    "bomb": attack_bomb,
    "outage": attack_outage,
    "skew": attack_skew,
    "quota": attack_quota,
    "echo": attack_echo,
    # issue 41
    "reads": attack_reads,
    "pth": attack_pth,
    "hang": attack_hang,
    "lost": attack_lost,
    "lockout": attack_lockout,
    "quota_db": attack_quota_db,
    "memory": attack_memory,
    "guard": attack_guard,
    "round": lambda code, work: _scenario(code, "round"),
    "truncate": lambda code, work: _scenario(code, "truncate"),
    "lock": lambda code, work: _scenario(code, "lock"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout whose server is attacked")
    ap.add_argument("--only", default=",".join(ATTACKS), help=f"comma-separated, of {', '.join(ATTACKS)}")
    ap.add_argument("--out", type=Path, help="write the results as JSON here too")
    args = ap.parse_args()
    out = args.out.resolve() if args.out else None
    work = Path(tempfile.mkdtemp(prefix="geneval-attacks-"))
    os.chdir(work)  # a `python -c` child imports from its working folder first: never this checkout's genEval
    results = {}
    for name in args.only.split(","):
        t0 = time.perf_counter()
        try:
            results[name] = ATTACKS[name](args.code.resolve(), work)
        except Exception as err:  # noqa: BLE001 - a measurement reports what broke and goes on
            results[name] = {"error": f"{type(err).__name__}: {err}"[:2000], "where": traceback.format_exc()[-1500:]}
        results[name]["attack_s"] = round(time.perf_counter() - t0, 1)
        print(f"== {name}\n{json.dumps(results[name], indent=1)}", flush=True)
    if out:
        out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
