"""Issue 41's attacks on the service, kept as regressions: an evaluation child that would see the service's home
(E1/E4), a forward that never returns, a cancel it ignores and a job that stalls (E4), a finished job lost while its
child exits (E14), a valid token locked out by others' failures and proxy headers from anyone (E7). Each failed on the
code before issue 41. (tests/service/server/uploads/ has the upload ones: a file that reads a server file, the quotas
and check slots; tests/foundation/test_sandbox.py the file-level ones: the sandbox itself, the .pth drop, the op
checks; tests/service/server/standings/test_service_settled.py the cancelled and the truncated round.)"""
# ruff: noqa: F811  (pytest fixtures imported from service_support are redefined as test arguments)

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from genEval.commands.serve import load_benchmarks, registered_classifiers
from genEval.service.server.app import create_app
from genEval.service.server.database import Database, sqlite_url
from genEval.service.server.worker import Worker, run_worker_in_thread
from tests.support.assets import ROOT
from tests.support.sandbox import ReadsAFile, hanging_runner, script, slow_exit_runner, snooping_runner
from tests.support.service import free_port, slow_runner, smoke_service, submit_job, wait_for, worker_settings


@pytest.fixture(scope="module")
def presets():
    return load_benchmarks(["digits_smoke"]), registered_classifiers(None)


def _auth(secret: str) -> dict:
    return {"Authorization": f"Bearer {secret}"}


def _needs_sandbox() -> None:
    from genEval.sandbox import isolation_problem

    problem = isolation_problem()
    if problem is not None:
        pytest.skip(f"no sandbox here: {problem}")


# ------------------------------------------------------------------------------------ an evaluation's sandbox
def test_an_evaluation_child_sees_its_run_directory_and_nothing_else_of_thesmoke_service(tmp_path):
    """Issue 41: the evaluation child loaded the model again outside any sandbox, as the service's user, in its home.
    Now it sees its own run directory (writable) and no database, no other file of the home, no site-packages to
    write to and no network, as uid 65534."""
    _needs_sandbox()
    db = Database(sqlite_url(tmp_path / "geneval.db"))
    (tmp_path / "uploads").mkdir()
    (tmp_path / "uploads" / "someone-else.pt").write_bytes(b"theirs")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.2)
        job = submit_job(db, "snoop", overrides={"port": listener.getsockname()[1]})
        worker = Worker(
            db,
            tmp_path,
            snooping_runner,
            worker_settings(isolation="bwrap", heartbeat_s=0.3, poll_s=0.1, exit_when_idle=True),
        )
        assert worker.run() == 1
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing connected
    done = db.jobs.get(job)
    assert done.status == "done", done.error_detail
    got = done.result
    assert got["read_db"] == got["read_upload"] == "FileNotFoundError"
    assert got["home"] == ["runs"] and got["write_run_dir"] == "ok" and got["uid"] == "65534"
    assert not (tmp_path / "dropped.txt").exists()
    assert got["write_home"] in ("PermissionError", "OSError") and got["write_site"] in ("OSError", "PermissionError")
    assert got["connect"] != "ok"
    assert (tmp_path / done.run_dir / "rep0" / "probe.txt").read_text() == "mine"
    db.close()


def test_a_torchscript_job_runs_only_where_it_can_be_sandboxed_unless_the_admin_allows(tmp_path):
    db = Database(sqlite_url(tmp_path / "geneval.db"))
    job = submit_job(db, "ts", model={"kind": "torchscript"})
    worker = Worker(
        db,
        tmp_path,
        slow_runner,
        worker_settings(
            isolation="none", allow_unsandboxed_models=False, heartbeat_s=0.3, poll_s=0.1, exit_when_idle=True
        ),
    )
    assert worker.run() == 1
    failed = db.jobs.get(job)
    assert failed.status == "failed" and "cannot run model code in a sandbox" in failed.error
    assert "allow_unsandboxed_models=true" in failed.error and not (tmp_path / f"started-{job}").exists()
    db.close()


# ------------------------------------------------------------------------------------ E4: jobs that end
def test_a_forward_that_never_returns_ends_failed_at_max_job_s(tmp_path):
    """Issue 41 (E4): a model whose forward never returns held its job `running` for ever. The interface line:
    ``geneval serve max_job_s=600``: a job past its limit ends failed, with the reason."""
    db = Database(sqlite_url(tmp_path / "geneval.db"))
    job = submit_job(db, "hangs")
    worker = Worker(
        db,
        tmp_path,
        hanging_runner,
        worker_settings(max_job_s=4, cancel_grace_s=1, heartbeat_s=0.3, poll_s=0.1, exit_when_idle=True),
    )
    assert worker.run() == 1
    failed = db.jobs.get(job)
    assert failed.status == "failed"
    assert failed.error == "the evaluation was stopped: it ran past its time limit of 4 s (server setting max_job_s)"
    db.close()


def test_a_job_whose_progress_stops_moving_is_stopped_as_stalled(tmp_path):
    db = Database(sqlite_url(tmp_path / "geneval.db"))
    job = submit_job(db, "stuck")
    worker = Worker(
        db,
        tmp_path,
        hanging_runner,
        worker_settings(stall_heartbeats=5, cancel_grace_s=1, heartbeat_s=0.3, poll_s=0.1, exit_when_idle=True),
    )
    assert worker.run() == 1
    failed = db.jobs.get(job)
    assert failed.status == "failed" and "stalled: its progress did not move for 5 heartbeats" in failed.error
    assert "stall_heartbeats" in failed.error
    db.close()


def test_a_cancel_stops_a_job_that_ignores_sigterm_within_its_grace(tmp_path):
    """Issue 41 (E4): a cancel took 35 s (SIGTERM ignored while TorchScript holds the GIL; the worker waited its
    stop_timeout_s). Now a cancelled job's child gets cancel_grace_s, then SIGKILL."""
    db = Database(sqlite_url(tmp_path / "geneval.db"))
    job = submit_job(db, "hangs")
    worker = Worker(
        db, tmp_path, hanging_runner, worker_settings(cancel_grace_s=1, stop_timeout_s=120, heartbeat_s=0.3, poll_s=0.1)
    )
    thread = run_worker_in_thread(worker)
    try:
        started = tmp_path / f"started-{job}"
        pid = int(wait_for(lambda: started.is_file() and started.read_text(), 120, "the job's start"))
        time.sleep(2)  # into its forward
        db.jobs.cancel(job)
        t0 = time.monotonic()
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), 60, "the end of the job's child")
        assert time.monotonic() - t0 < 30  # the heartbeat that sees it, the grace, the kill; not stop_timeout_s
    finally:
        worker.stop()
        thread.join(timeout=60)
    assert db.jobs.get(job).status == "cancelled"
    db.close()


# ------------------------------------------------------------------------------------ E14: no finished job lost
def test_a_finished_job_is_not_lost_while_its_child_takes_its_time_to_exit(tmp_path):
    """Issue 41 (E14): after the child answered, the worker waited for it to exit without renewing the lease, and the
    server's re-queue of expired leases took the job in that gap (the finished work was thrown away). Here the child
    takes 3 s to exit, the lease is 1 s, and the server re-queues every 0.1 s: the job is done at attempt 1, run
    once."""
    db = Database(sqlite_url(tmp_path / "geneval.db"))
    job = submit_job(db, "slow-exit")
    stop = threading.Event()

    def server_requeue() -> None:  # what geneval serve does every lease_s / 4
        while not stop.is_set():
            db.queue.requeue_expired(3)
            time.sleep(0.1)

    requeuer = threading.Thread(target=server_requeue, daemon=True)
    requeuer.start()
    try:
        worker = Worker(
            db,
            tmp_path,
            slow_exit_runner,
            worker_settings(lease_s=1.0, heartbeat_s=0.2, poll_s=0.1, exit_when_idle=True, n_boot=50),
        )
        worker.run()
    finally:
        stop.set()
        requeuer.join()
    done = db.jobs.get(job)
    assert (done.status, done.attempts) == ("done", 1), (done.status, done.attempts, done.error)
    assert (tmp_path / "executions.log").read_text().split() == [job]
    db.close()


# ------------------------------------------------------------------------------------ E7: auth
def test_a_valid_token_is_never_refused_for_other_clients_failures(tmp_path, presets):
    """Issue 41 (E7): 20 bad tokens from one address locked the admin's valid token out (429). Now the token is
    checked first; unknown tokens from that address still get 429 once it failed max_auth_failures times."""
    svc = smoke_service(tmp_path, presets, max_auth_failures=5, auth_window_s=60)
    client = TestClient(create_app(svc))
    admin = svc.db.tokens.create("root", "admin")[0]
    codes = [client.get("/api/jobs", headers=_auth(f"gev_guess{i}")).status_code for i in range(7)]
    assert codes == [401] * 5 + [429] * 2
    assert client.get("/api/jobs", headers=_auth(admin)).status_code == 200


def _live(app, **proxy) -> tuple[uvicorn.Server, threading.Thread, str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **proxy))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 60, "the server's start")
    return server, thread, f"http://127.0.0.1:{port}"


def _guesses(base: str, n: int, local: str = "127.0.0.1", forwarded: bool = True) -> list[int]:
    with httpx.Client(transport=httpx.HTTPTransport(local_address=local), timeout=30) as http:
        return [
            http.get(f"{base}/api/jobs", headers={**_auth(f"gev_guess{i}"),
                     **({"X-Forwarded-For": f"10.9.{i // 250}.{i % 250}"} if forwarded else {})}).status_code
            for i in range(n)
        ]  # fmt: skip


def test_proxy_headers_are_trusted_only_from_forwarded_allow_ips(tmp_path, presets):
    """Issue 41 (E7): uvicorn trusted X-Forwarded-For from 127.0.0.1 by default, so a rotating header escaped the
    failure limit (400 times 401, never a 429). The interface line: ``geneval serve forwarded_allow_ips=127.0.0.2``:
    by default no proxy is trusted; with it, only that address's header names the client."""
    from genEval.service.server.app import proxy_options

    for trusted, runs in ((None, [("127.0.0.1", [401] * 5 + [429] * 3)]),
                          ("127.0.0.2", [("127.0.0.2", [401] * 8), ("127.0.0.1", [401] * 5 + [429] * 3)])):  # fmt: skip
        svc = smoke_service(tmp_path / str(trusted), presets, max_auth_failures=5, auth_window_s=60)
        server, thread, base = _live(create_app(svc), **proxy_options(trusted))
        try:
            for local, codes in runs:  # ignored header: one address, limited; a trusted proxy's: a count per client
                assert _guesses(base, 8, local=local) == codes, (trusted, local)
        finally:
            server.should_exit = True
            thread.join(timeout=30)
        svc.db.close()


# ------------------------------------------------------------------------------------ the interface lines, for real
def test_serve_hands_its_job_limits_to_its_workers(tmp_path):
    """``geneval serve max_job_s=600``: the value reaches the in-process workers' evaluation limit (the worker's
    behaviour past it: test_a_forward_that_never_returns_ends_failed_at_max_job_s)."""
    from hydra import compose, initialize_config_dir

    from genEval.commands import CONF_DIR
    from genEval.commands import server as server_commands

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("serve", overrides=[f"home={tmp_path}", "max_job_s=600", "cancel_grace_s=2"])
        default = compose("serve", overrides=[f"home={tmp_path}"])
    home, db = server_commands.open_db(cfg)
    worker = server_commands._worker(cfg, db, home)
    assert (worker.settings.max_job_s, worker.settings.cancel_grace_s) == (600.0, 2.0)
    assert server_commands._worker(default, db, home).settings.max_job_s == 14400.0  # conf/_shortcuts/worker.yaml's 4 h
    db.close()


@pytest.mark.slow
def test_the_interface_lines_through_geneval_serve(tmp_path):
    """Issue 41's interface lines against a real ``geneval serve max_job_s=600 forwarded_allow_ips=127.0.0.2``:
    ``curl -F file=@reads_a_file.pt`` is refused naming the op and nothing is kept; a rotating X-Forwarded-For from
    127.0.0.1 (not trusted) is one client, limited; from 127.0.0.2 (trusted) each forwarded address counts alone."""
    import os
    import subprocess
    import sys

    secret = tmp_path / "secret.txt"
    secret.write_text("db-password=hunter2-0123456789")
    model = script(ReadsAFile(str(secret)), tmp_path / "reads_a_file.pt")
    home, port = tmp_path / "home", free_port()
    log = tmp_path / "serve.log"
    cmd = [sys.executable, "-m", "genEval.cli", "serve", f"home={home}", f"port={port}", "host=127.0.0.1",
           "workers=0", "benchmarks=[digits_smoke]", "default_benchmark=digits_smoke", "log_level=warning",
           "max_job_s=600", "forwarded_allow_ips=127.0.0.2", "max_auth_failures=3"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "w") as out:
        server = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            assert server.poll() is None, log.read_text()[-3000:]
            try:
                return httpx.get(f"{base}/api/health", timeout=5).status_code in (200, 503)
            except httpx.HTTPError:
                return False

        wait_for(up, 600, "the server's start")
        db = Database(sqlite_url(home / "geneval.db"))
        token = db.tokens.create("alice", "submitter")[0]
        db.close()
        curl = subprocess.run(
            ["curl", "-s", "-w", "\n%{http_code}", "-F", f"file=@{model}", "-H", f"Authorization: Bearer {token}",
             f"{base}/api/uploads"],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )  # fmt: skip
        body, code = curl.stdout.rsplit("\n", 1)
        assert code == "422" and "aten::from_file" in body and "hunter2" not in body, curl.stdout
        assert not [p for p in (home / "uploads").rglob("*") if p.is_file()]  # nothing kept, no temp file left
        assert _guesses(base, 5) == [401] * 3 + [429] * 2  # 127.0.0.1's header ignored: one client
        assert _guesses(base, 5, local="127.0.0.2") == [401] * 5  # the trusted proxy's: five clients
        from genEval.sandbox import isolation_problem

        said = "sandbox: bubblewrap" if isolation_problem() is None else "sandbox: none"
        assert said in log.read_text()  # what serve says at start about its sandbox
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_a_run_directorys_links_are_never_served(tmp_path):
    """Issue 41 (E1): a run directory is written by the job's sandboxed child, which may leave a link there; the
    server, outside the sandbox, must not follow it: a results.json, report.html or grid.png that links to the
    database is not served (the job page still renders, saying the results cannot be read)."""

    from tests.support.pages import toy_service

    home = tmp_path / "home"
    home.mkdir()
    svc, ids = toy_service(home, names=("lin0",))
    job = svc.db.jobs.get(ids["lin0"])
    client = TestClient(create_app(svc))
    assert client.get(f"/jobs/{job.id}/grid.png").status_code == 200  # the plain files are served
    run = job.rep_dir(home, 0)
    for name in ("grid.png", "results.json", "report.html"):
        (run / name).unlink(missing_ok=True)
        (run / name).symlink_to(home / "geneval.db")
    for url in (f"/jobs/{job.id}/grid.png", f"/api/jobs/{job.id}/results.json", f"/jobs/{job.id}/report"):
        answer = client.get(url)
        assert answer.status_code == 409 and b"SQLite format" not in answer.content, (url, answer.status_code)
    page = client.get(f"/jobs/{job.id}")
    assert page.status_code == 200 and "cannot be read" in page.text and "grid.png" not in page.text
    svc.db.close()
