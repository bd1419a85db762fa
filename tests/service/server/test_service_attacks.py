"""Issue 37's attacks on the service, kept as regressions: a database stopped and started under a worker (real
PostgreSQL), a worker whose clock runs ahead, a dead in-process worker, the job quota and rate limits, an oversized
422 and slow clients (tests/service/server/uploads/ has the upload ones; genEval/sandbox.py has the file-level ones:
tests/foundation/test_sandbox.py). ``benchmarks/service_attacks.py`` measures the same attacks before and after."""
# ruff: noqa: F811  (pytest fixtures imported from service_support are redefined as test arguments)

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
import uvicorn

from genEval.commands.serve import load_benchmarks, registered_classifiers
from genEval.service.server.database import Database, sqlite_url
from genEval.service.server.slow_clients import timed_h11
from genEval.service.server.supervisor import Supervisor
from genEval.service.server.worker import Worker, run_worker_in_thread
from tests.support.service import (  # noqa: F401 (fixtures)
    bearer,
    db,
    db_url,
    free_port,
    hold_connection,
    napping_runner,
    own_postgres,
    pg_url,
    postgres_cluster,
    postgres_server,
    record_runner,
    smoke_client,
    submit_job,
    wait_for,
    worker_settings,
)

JOB = {"benchmark": "digits_smoke", "name": "cnn", "model": {"kind": "config", "name": "digits_cnn"}}


@pytest.fixture(scope="module")
def presets():
    return load_benchmarks(["digits_smoke"]), registered_classifiers(None)


# ------------------------------------------------------------------------------------ a database outage
@pytest.mark.slow
def test_a_worker_lives_through_a_postgresql_restart(own_postgres, tmp_path, presets, caplog):
    """Issue 37: a 10-second restart killed every worker at its first heartbeat, and the jobs stayed running or
    queued forever. Now the worker retries with backoff, logs the outage once, and both jobs finish, the running one
    without losing its attempt; meanwhile /api/health says degraded (503)."""
    url = own_postgres.create_database()
    client, svc = smoke_client(tmp_path, presets, url)
    db = svc.db
    jobs = [submit_job(db, f"model{i}") for i in range(2)]
    worker = Worker(db, tmp_path, napping_runner, worker_settings(lease_s=4, heartbeat_s=0.3, poll_s=0.2))
    thread = run_worker_in_thread(worker)
    try:
        wait_for(lambda: db.jobs.get(jobs[0]).status == "running", 120, "the first job's start")
        assert client.get("/api/health").json()["status"] == "ok"
        caplog.set_level(logging.INFO, logger="genEval.service.server.outages")
        own_postgres.stop()
        time.sleep(3)  # heartbeats fail meanwhile
        health = client.get("/api/health")
        assert health.status_code == 503 and health.json()["status"] == "degraded"
        assert health.json()["problems"][0].startswith("the database is unreachable")
        assert thread.is_alive()
        own_postgres.start()
        wait_for(lambda: all(db.jobs.get(j).status == "done" for j in jobs), 180, "both jobs' end")
        assert thread.is_alive() and [db.jobs.get(j).attempts for j in jobs] == [1, 1]
    finally:
        worker.stop()
        thread.join(timeout=60)
        db.close()
    said = [r for r in caplog.records if r.name == "genEval.service.server.outages"]
    assert [r.levelno for r in said] == [logging.WARNING, logging.INFO], [r.getMessage() for r in said]
    assert "the database is unreachable" in said[0].getMessage() and "is back after" in said[1].getMessage()


def test_the_server_requeues_expired_leases_and_restarts_a_dead_worker(tmp_path, caplog):
    db = Database(sqlite_url(tmp_path / "geneval.db"))
    job = submit_job(db, "lost")
    assert db.queue.claim("gone:1:deadbeef", lease_s=0.2).id == job  # a worker that then died
    time.sleep(0.5)
    made: list[Worker] = []

    class Broken(Worker):
        def run(self) -> int:
            raise RuntimeError("a bug in the worker loop")

    def make() -> Worker:
        kind = Broken if not made else Worker
        made.append(kind(db, tmp_path, record_runner, worker_settings(lease_s=2, heartbeat_s=0.5, poll_s=0.1)))
        return made[-1]

    upkeep = Supervisor(db.queue, make, workers=1, max_attempts=3, every_s=3600)  # ticks by hand here
    try:
        wait_for(lambda: not upkeep.threads[0].is_alive(), 30, "the broken worker's death")
        upkeep.tick()
        assert upkeep.restarts == 1 and upkeep.alive() == 1 and isinstance(upkeep.workers[0], Worker)
        assert "in-process worker" in caplog.text and "a bug in the worker loop" in caplog.text
        # no worker took the lost job back: the server did (the new worker may already be running it)
        assert db.jobs.get(job).status in ("queued", "running", "done")
        assert f"job {job} lost its worker" in caplog.text
        wait_for(lambda: db.jobs.get(job).status == "done", 60, "the lost job's end")
    finally:
        upkeep.stop()
        db.close()


# ------------------------------------------------------------------------------------ one clock
def test_a_worker_whose_clock_runs_ahead_takes_no_live_job(db, monkeypatch):
    """Issue 37: a worker 30 s ahead saw another's live lease as expired and took the job (attempts 1 -> 2). Leases
    are on the database's clock now, whatever the worker's says."""
    job = submit_job(db, "live")
    assert db.queue.claim("fair:1:aaaaaaaa", lease_s=10).id == job
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 30)  # this process's clock runs 30 s ahead
    assert db.queue.requeue_expired(3) == []
    assert db.queue.claim("ahead:2:bbbbbbbb", lease_s=10) is None
    assert db.queue.heartbeat(job, "fair:1:aaaaaaaa", 10)
    monkeypatch.undo()
    held = db.jobs.get(job)
    assert held.status == "running" and held.attempts == 1 and held.worker_id == "fair:1:aaaaaaaa"
    assert abs(held.lease_expires_at - (db.now() + 10)) < 5  # a lease on the database's clock, not ours + 30


# ------------------------------------------------------------------------------------ quotas and limits
def test_a_token_over_its_job_quota_is_answered_429_with_retry_after(tmp_path, presets):
    client, svc = smoke_client(tmp_path, presets, max_active_jobs=2)
    alice, admin = bearer(svc.db), bearer(svc.db, "admin", "root")
    for name in ("a", "b"):
        assert client.post("/api/jobs", json={**JOB, "name": name}, headers=alice).status_code == 201
    over = client.post("/api/jobs", json={**JOB, "name": "c"}, headers=alice)
    assert over.status_code == 429 and over.headers["retry-after"] == "60"
    assert "2 jobs queued or running, its limit (server setting max_active_jobs)" in over.json()["detail"]
    assert client.post("/api/jobs", json={**JOB, "name": "c"}, headers=bearer(svc.db, name="bob")).status_code == 201
    assert client.post("/api/jobs", json={**JOB, "name": "d"}, headers=admin).status_code == 201  # admins: no quota
    svc.jobs.cancel(svc.jobs.jobs(status="queued")[-1].id, by=svc.db.tokens.find(alice["Authorization"][7:]))
    assert client.post("/api/jobs", json={**JOB, "name": "c2"}, headers=alice).status_code == 201  # room again


def test_failed_authentications_are_rate_limited_per_client_address(tmp_path, presets):
    client, svc = smoke_client(tmp_path, presets, max_auth_failures=3, auth_window_s=30)
    good = bearer(svc.db, "viewer")
    answers = [client.get("/api/jobs", headers={"Authorization": f"Bearer gev_guess{i}"}) for i in range(5)]
    assert [a.status_code for a in answers] == [401, 401, 401, 429, 429]
    assert 25 <= int(answers[-1].headers["retry-after"]) <= 30
    assert "too many failed authentications" in answers[-1].json()["detail"]
    # a valid token is looked up first and never refused for others' failures from its address (issue 41, E7)
    assert client.get("/api/jobs", headers=good).status_code == 200


def test_a_422_never_echoes_a_large_request(tmp_path, presets):
    """Issue 37: a 1 MB key came back as a 1 MB answer, 60,000 keys (840 KB sent) as a 6 MB one."""
    client, svc = smoke_client(tmp_path, presets)
    alice = {**bearer(svc.db), "content-type": "application/json"}
    one_key = client.post("/api/jobs", content=json.dumps({**JOB, "k" * 1_000_000: 1}), headers=alice)
    assert one_key.status_code == 422 and len(one_key.content) < 2048
    assert one_key.json()["keys"] == ["k" * 61 + "..."]
    many = client.post(
        "/api/jobs", content=json.dumps({**JOB, **{f"k{i:05d}": 1 for i in range(60_000)}}), headers=alice
    )
    assert many.status_code == 422 and len(many.content) < 8192
    assert many.json()["count"] == 60_000 and len(many.json()["keys"]) == 20
    assert many.json()["message"].endswith("; and 59980 more")
    not_found = client.get("/api/jobs/" + "x" * 10_000)
    assert not_found.status_code == 404 and len(not_found.content) < 300


# ------------------------------------------------------------------------------------ slow clients
async def _echo_app(scope, receive, send) -> None:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def test_slow_clients_are_timed_out():
    """Issue 37: a client that sent nothing, or its request head a byte every 2 s, was still connected after 90 s."""
    port = free_port()
    config = uvicorn.Config(_echo_app, host="127.0.0.1", port=port, http=timed_h11(1.0, 1.0), log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 30, "the server's start")
    try:
        silent, said = hold_connection(port, [], 0)
        assert 0.8 < silent < 5 and said.startswith(b"HTTP/1.1 408 Request Timeout")
        head = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
        dribble, said = hold_connection(port, [bytes([b]) for b in head], 0.3)  # 8 s for the head, were it let through
        assert 0.8 < dribble < 5 and said.startswith(b"HTTP/1.1 408")
        post = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
        stalled, said = hold_connection(port, [post, b"x" * 10], 0.1)  # 10 bytes of 100, then nothing
        assert 0.8 < stalled < 5 and said == b""
        fine, said = hold_connection(
            port, [head, head], 0.5, cap_s=4
        )  # a kept-alive connection answers twice, then idles out
        assert said.count(b"HTTP/1.1 200") == 2
    finally:
        server.should_exit = True
        thread.join(timeout=30)
