"""The service database on SQLite and on a real PostgreSQL: tokens, atomic claims, leases, restarts."""
# ruff: noqa: F811  (pytest fixtures imported from service_support are redefined as test arguments)

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import Counter

import pytest
from sqlalchemy import event, text

from genEval.comparisons.standing import Score, Standing
from genEval.service.records import NameTaken, SettledInfo, StandingInfo
from genEval.service.server.database import Database
from genEval.service.server.worker import Worker
from tests.support.service import (  # noqa: F401  (fixtures)
    crashing_runner,
    db,
    db_url,
    failing_runner,
    pg_url,
    postgres_cluster,
    postgres_server,
    record_runner,
    slow_runner,
    worker_settings,
)


def _submit(db: Database, n: int, owner=None, name: str = "m", benchmark: str = "b"):
    owner = owner or db.tokens.create("alice", "submitter")[1]
    return [
        db.jobs.submit(
            benchmark=benchmark,
            benchmark_version="v1",
            name=f"{name}{i}",
            owner=owner,
            model={"kind": "config", "name": "x"},
            config={},
            overrides={},
            seeds=[i],
            upload_path=None,
        )
        for i in range(n)
    ]


def test_tokens_are_stored_as_sha256_only(db):
    secret, info = db.tokens.create("alice", "admin")
    with db.engine.connect() as conn:
        rows = conn.execute(text("SELECT * FROM tokens")).mappings().all()
    dump = repr([dict(r) for r in rows])
    assert secret not in dump
    assert rows[0]["token_sha256"] == hashlib.sha256(secret.encode()).hexdigest()
    assert db.tokens.find(secret).role == "admin"
    assert db.tokens.find(secret + "x") is None
    assert db.tokens.revoke(info.id)
    assert db.tokens.find(secret) is None
    with pytest.raises(ValueError, match="unknown role 'root'"):
        db.tokens.create("bob", "root")


def test_two_workers_six_jobs_each_run_exactly_once(db, tmp_path):
    jobs = _submit(db, 6)
    workers = [
        Worker(
            db, tmp_path, record_runner, worker_settings(heartbeat_s=0.5, lease_s=30, poll_s=0.1, exit_when_idle=True)
        )
        for _ in range(2)
    ]
    threads = [threading.Thread(target=w.run) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    runs = Counter(line.split()[0] for line in (tmp_path / "executions.log").read_text().splitlines())
    assert runs == Counter({j.id: 1 for j in jobs})
    assert {j.status for j in db.jobs.list()} == {"done"}
    assert sum(w.jobs_run for w in workers) == 6
    assert all(w.jobs_run >= 1 for w in workers), "both workers should have taken jobs"
    assert {j.worker_id for j in db.jobs.list()} == {w.id for w in workers}


def test_concurrent_claims_never_hand_out_a_job_twice(db):
    jobs = _submit(db, 20)
    got: list[str] = []
    lock = threading.Lock()

    def claimer(k: int) -> None:
        while (job := db.queue.claim(f"w{k}", lease_s=60)) is not None:
            with lock:
                got.append(job.id)

    threads = [threading.Thread(target=claimer, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(got) == sorted(j.id for j in jobs)
    assert db.jobs.count()["running"] == 20


def test_postgres_claim_uses_skip_locked(pg_url):
    database = Database(pg_url)
    statements: list[str] = []
    event.listen(database.engine, "before_cursor_execute", lambda conn, cur, stmt, *a: statements.append(stmt))
    _submit(database, 1)
    assert database.queue.claim("w", 60) is not None
    assert any("FOR UPDATE SKIP LOCKED" in s for s in statements)
    database.close()


def test_expired_lease_is_requeued_then_failed_after_max_attempts(db):
    (job,) = _submit(db, 1)
    assert db.queue.claim("dead-worker", lease_s=0.05).id == job.id
    time.sleep(0.2)
    assert db.queue.requeue_expired(max_attempts=2) == [(job.id, "queued")]
    again = db.jobs.get(job.id)
    assert again.status == "queued" and again.worker_id is None and "lease" in again.error
    assert "dead-worker" in again.error_detail and "dead-worker" not in again.error  # admins see the worker
    assert db.queue.heartbeat(job.id, "dead-worker", 60) is False  # the dead worker lost it
    assert db.queue.claim("w2", lease_s=0.05).attempts == 2
    time.sleep(0.2)
    assert db.queue.requeue_expired(max_attempts=2) == [(job.id, "failed")]
    assert "stopped responding 2 times" in db.jobs.get(job.id).error


def test_cancel_and_requeue(db):
    a, b = _submit(db, 2)
    assert db.jobs.cancel(a.id).status == "cancelled"
    claimed = db.queue.claim("w", 60)
    assert claimed.id == b.id  # the cancelled job is never claimed
    assert db.jobs.cancel(b.id).status == "cancelled"
    assert db.queue.heartbeat(b.id, "w", 60) is False  # the worker learns at its next heartbeat
    assert db.queue.finish(b.id, "w", {}) is False  # and cannot overwrite the cancellation
    assert db.jobs.get(b.id).status == "cancelled"
    assert db.jobs.requeue(a.id).status == "queued"
    assert db.queue.claim("w", 60).id == a.id


def test_names_are_unique_per_benchmark_version(db):
    owner = db.tokens.create("alice", "submitter")[1]
    _submit(db, 1, owner=owner)
    with pytest.raises(NameTaken, match="m0"):
        _submit(db, 1, owner=owner)
    _submit(db, 1, owner=owner, benchmark="other")  # another benchmark: fine


def test_jobs_survive_a_restart(db_url):
    first = Database(db_url)
    jobs = _submit(first, 3)
    first.queue.claim("w", lease_s=60)
    first.close()
    second = Database(db_url)  # a new server process on the same database
    assert {j.id for j in second.jobs.list()} == {j.id for j in jobs}
    assert second.jobs.count()["queued"] == 2 and second.jobs.count()["running"] == 1
    second.close()


def test_worker_records_errors_and_crashes_and_keeps_going(db, tmp_path):
    _submit(db, 1, name="bad")
    Worker(db, tmp_path, failing_runner, worker_settings(heartbeat_s=0.5, poll_s=0.1, exit_when_idle=True)).run()
    (bad,) = db.jobs.list()
    assert bad.status == "failed"
    assert bad.error.startswith("classifier returned 7 logits but the dataset has 10 classes")  # the reason only
    assert bad.error_detail.startswith("ValueError: classifier returned 7 logits") and "Traceback" in bad.error_detail
    _submit(db, 1, name="crash")
    w = Worker(db, tmp_path, crashing_runner, worker_settings(heartbeat_s=0.5, poll_s=0.1, exit_when_idle=True))
    assert w.run() == 1
    crashed = next(j for j in db.jobs.list() if j.name == "crash0")
    assert crashed.status == "failed" and "killed by signal SIGKILL" in crashed.error


def test_cancelling_a_running_job_stops_its_process(db, tmp_path):
    (job,) = _submit(db, 1)
    w = Worker(db, tmp_path, slow_runner, worker_settings(heartbeat_s=0.3, lease_s=30, poll_s=0.1, exit_when_idle=True))
    t = threading.Thread(target=w.run)
    t.start()
    marker = tmp_path / f"started-{job.id}"
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    pid = int(marker.read_text())
    db.jobs.cancel(job.id)
    t.join(timeout=60)
    assert not t.is_alive()
    assert db.jobs.get(job.id).status == "cancelled"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_stopping_a_worker_puts_its_job_back(db, tmp_path):
    (job,) = _submit(db, 1)
    w = Worker(db, tmp_path, slow_runner, worker_settings(heartbeat_s=0.3, lease_s=30, poll_s=0.1))
    t = threading.Thread(target=w.run)
    t.start()
    deadline = time.monotonic() + 120
    while not (tmp_path / f"started-{job.id}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    w.stop()
    t.join(timeout=60)
    back = db.jobs.get(job.id)
    assert back.status == "queued" and back.attempts == 0


def _standing(job, name: str = "m0") -> StandingInfo:
    standing = Standing(name, 1, {"fmr": Score(5.0, 1.0, 9.0)})
    return StandingInfo(job.id, job.benchmark, job.benchmark_version, standing, None, ["r/rep0"])


def test_finishing_a_job_stores_its_row_in_the_same_transaction_and_a_lost_job_stores_none(db):
    a, b = _submit(db, 2)
    claimed = db.queue.claim("w", 60)
    assert db.endings.finish(claimed.id, "w", {"ok": 1}, standing=_standing(a)) is True
    (row,) = db.standings.rows("b", "v1")
    assert (row.job_id, row.finished_at) == (a.id, db.jobs.get(a.id).finished_at)  # on the job's own clock
    lost = db.queue.claim("w", 60)
    db.jobs.cancel(lost.id)
    assert db.endings.finish(lost.id, "w", {}, standing=_standing(b, "m1")) is False
    assert [r.job_id for r in db.standings.rows("b", "v1")] == [a.id] and db.jobs.get(b.id).status == "cancelled"
    assert db.endings.unranked() == [] and db.endings.count_unranked("b", "v1") == 0


def test_withdrawing_cancels_the_rounds_and_marks_the_row_withdrawn_at_once(db):
    (a,) = _submit(db, 1)
    db.endings.finish(db.queue.claim("w", 60).id, "w", {}, standing=_standing(a))
    later = db.jobs.queue_round(db.jobs.get(a.id), 1, 7)
    assert db.endings.withdraw(a.id).id == a.id and db.jobs.get(later.id).status == "cancelled"
    assert db.standings.rows("b", "v1")[0].settled == SettledInfo(withdrawn=True)
    assert db.endings.withdraw("no-such-job") is None


def test_the_jobs_slice_imports_neither_the_standings_slice_nor_the_whole_database():
    """Finishing and withdrawing are use cases above both slices (genEval/service/server/finishing.py): the jobs
    slice's modules import no standings module and no Database, and the standings store reads no jobs table."""
    import ast
    from pathlib import Path

    import genEval.service.server as server

    def imports(path: Path) -> set[str]:
        tree = ast.parse(path.read_text())
        return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | {
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
        }

    home = Path(server.__file__).parent
    for path in sorted((home / "jobs").glob("*.py")):
        bad = {
            m for m in imports(path) if m.startswith((f"{server.__name__}.standings", f"{server.__name__}.database"))
        }
        assert not bad, f"{path.name} imports {sorted(bad)}"
    assert f"{server.__name__}.jobs.rows" not in imports(home / "standings" / "store.py")
