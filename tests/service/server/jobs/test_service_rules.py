# ruff: noqa: F811  (pytest fixtures imported from service_support are redefined as test arguments)
"""Jobs cannot be doubled, renamed twice or read for secrets: the unique name is the database's (20 concurrent
submits of one name on PostgreSQL: one accepted, 19 answered 409), re-queues keep it, workers not seen within their
lease are listed as gone and dropped after the retention, an unknown leaderboard version is a 404, and a failed
job's error shows its submitter the reason only (paths, hosts, pids and tracebacks go to admins)."""

from __future__ import annotations

import re
import socket
import threading
import time

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from genEval.commands.serve import load_benchmarks, registered_classifiers
from genEval.runs.recording import RunOutput
from genEval.scores.run_scores import Scoring
from genEval.service.records import NameTaken
from genEval.service.server.app import create_app
from genEval.service.server.database import Database, sqlite_url
from genEval.service.server.facade import Service, Settings
from genEval.service.server.worker import Worker
from tests.support.service import (  # noqa: F401 (fixtures)
    db,
    db_url,
    free_port,
    leaky_runner,
    pg_url,
    postgres_cluster,
    postgres_server,
    worker_settings,
)

JOB = {"benchmark": "digits_smoke", "name": "cnn", "model": {"kind": "config", "name": "digits_cnn"}}


@pytest.fixture(scope="module")
def presets():
    return load_benchmarks(["digits_smoke"]), registered_classifiers(None)


def _service(db: Database, home, presets, **settings) -> Service:
    return Service(db, Settings(home=home, default_benchmark="digits_smoke", **settings), *presets)


def _auth(db: Database, role: str = "submitter", name: str = "alice") -> dict:
    return {"Authorization": f"Bearer {db.tokens.create(name, role)[0]}"}


def _submit(db: Database, name: str = "m", benchmark: str = "b"):
    owner = db.tokens.create("alice", "submitter")[1]
    return db.jobs.submit(
        benchmark=benchmark,
        benchmark_version="v1",
        name=name,
        owner=owner,
        model={"kind": "config", "name": "x"},
        config={},
        overrides={},
        seeds=[1],
        upload_path=None,
    )


class _Server:
    """The app served by uvicorn on 127.0.0.1 in a thread (real concurrent HTTP requests)."""

    def __init__(self, app) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def _post(base: str, name: str, headers: dict, barrier: threading.Barrier, codes: list) -> None:
    """One submitter: wait for the others, then submit ``name``."""
    with httpx.Client(timeout=60) as client:
        barrier.wait()
        r = client.post(f"{base}/api/jobs", json={**JOB, "name": name}, headers=headers)
    codes.append((r.status_code, r.json()))


def test_twenty_concurrent_submits_of_one_name_on_postgresql_accept_exactly_one(pg_url, tmp_path, presets):
    database = Database(pg_url)
    service = _service(database, tmp_path, presets)
    headers = [_auth(database, name=f"user{k}") for k in range(20)]
    with _Server(create_app(service)) as base:
        for round_ in range(5):  # five names, as in the report of the race
            barrier, codes = threading.Barrier(20), []
            threads = [
                threading.Thread(target=_post, args=(base, f"model-{round_}", headers[k], barrier, codes))
                for k in range(20)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            statuses = sorted(c for c, _ in codes)
            assert statuses == [201] + [409] * 19, statuses
            assert all(body["key"] == "name" for c, body in codes if c == 409)
    assert database.jobs.count()["queued"] == 5
    with database.engine.connect() as conn:  # the rule is the database's own, not only the server's check
        cols = list(conn.execute(text("SELECT * FROM jobs LIMIT 1")).keys())
        picked = ", ".join("'" + "0" * 32 + "'" if c == "id" else c for c in cols)
        with pytest.raises(IntegrityError):
            conn.execute(text(f"INSERT INTO jobs ({', '.join(cols)}) SELECT {picked} FROM jobs LIMIT 1"))
    database.close()


def test_a_requeue_keeps_the_unique_name_rule(db, tmp_path, presets):
    first = _submit(db)
    assert db.jobs.cancel(first.id).status == "cancelled"
    second = _submit(db)  # the name is free again once its job is cancelled
    with pytest.raises(NameTaken, match=rf"already has a model named 'm' \(job {second.id}\)"):
        db.jobs.requeue(first.id)
    assert db.jobs.get(first.id).status == "cancelled"
    # through the API: 409 naming the key, the job unchanged
    service = _service(db, tmp_path, presets)
    client = TestClient(create_app(service))
    admin = _auth(db, "admin", "root")
    a = client.post("/api/jobs", json=JOB, headers=admin).json()
    client.post(f"/api/jobs/{a['id']}/cancel", headers=admin)
    b = client.post("/api/jobs", json=JOB, headers=admin)
    assert b.status_code == 201
    refused = client.post(f"/api/jobs/{a['id']}/requeue", headers=admin)
    assert refused.status_code == 409 and refused.json()["key"] == "name" and b.json()["id"] in refused.json()["detail"]
    client.post(f"/api/jobs/{b.json()['id']}/cancel", headers=admin)
    assert client.post(f"/api/jobs/{a['id']}/requeue", headers=admin).json()["status"] == "queued"
    # an automatic re-queue (lease expired) keeps the name the job already holds
    claimed = db.queue.claim("w", lease_s=0.05)
    time.sleep(0.2)
    assert (claimed.id, "queued") in db.queue.requeue_expired(max_attempts=3)


def test_workers_not_seen_within_their_lease_are_gone_and_dropped_after_the_retention(db, tmp_path, presets):
    db.workers.register("node-a:11:aaaaaaaa", "node-a", 11, "cpu", lease_s=0.3)
    db.workers.register("node-b:12:bbbbbbbb", "node-b", 12, "cpu", lease_s=60)
    db.workers.register("node-c:13:cccccccc", "node-c", 13, "cpu", lease_s=60)
    db.workers.stopped("node-c:13:cccccccc")
    service = _service(db, tmp_path, presets, worker_retention_s=1.5)
    client = TestClient(create_app(service))
    viewer = _auth(db, "viewer", "v")
    time.sleep(0.5)  # node-a was killed: it no longer renews its lease
    states = {w["host"]: w["state"] for w in client.get("/api/workers", headers=viewer).json()}
    assert states == {"node-a": "gone", "node-b": "idle", "node-c": "stopped"}
    assert client.get("/api/health").json()["workers"] == 1
    time.sleep(1.5)
    db.workers.seen("node-b:12:bbbbbbbb", None)
    listed = client.get("/api/workers", headers=viewer).json()
    assert [w["host"] for w in listed] == ["node-b"]  # gone and stopped ones dropped after the retention
    assert len(db.workers.list(retention_s=1e9)) == 1  # deleted, not only hidden


def test_an_unknown_leaderboard_version_is_not_found(db, tmp_path, presets):
    client = TestClient(create_app(_service(db, tmp_path, presets)))
    current = presets[0]["digits_smoke"].version
    assert client.get(f"/api/leaderboard/digits_smoke?version={current}").status_code == 200
    missing = client.get("/api/leaderboard/digits_smoke?version=nope")
    assert missing.status_code == 404 and "no version 'nope'" in missing.json()["detail"]
    assert current in missing.json()["detail"]  # the versions there are
    assert client.get("/leaderboard/digits_smoke?version=nope").status_code == 404
    assert client.get("/?version=nope").status_code == 404


def test_a_failed_jobs_error_shows_the_reason_only_and_admins_the_detail(tmp_path, presets):
    db = Database(sqlite_url(tmp_path / "geneval.db"))
    job = _submit(db, name="leaky", benchmark="digits_smoke")
    worker = Worker(
        db, tmp_path, leaky_runner, worker_settings(heartbeat_s=0.5, poll_s=0.1, exit_when_idle=True, host="node-a")
    )
    assert worker.run() == 1
    service = _service(db, tmp_path, presets)
    client = TestClient(create_app(service))
    public = client.get(f"/api/jobs/{job.id}").json()
    shown = repr(public)
    assert public["status"] == "failed" and "does not match the model architecture" in public["error"]
    for secret in (str(tmp_path), "/uploads/", socket.gethostname(), "node-a", "Traceback"):
        assert secret not in shown, secret
    assert not re.search(r"process \d+|pid \d+", shown)
    assert "worker_id" not in public and "error_detail" not in public
    page = client.get(f"/jobs/{job.id}").text
    assert str(tmp_path) not in page and "node-a" not in page and "does not match the model" in page
    admin = client.get(f"/api/jobs/{job.id}", headers=_auth(db, "admin", "root")).json()
    assert str(tmp_path) in admin["error_detail"] and "Traceback" in admin["error_detail"]
    assert admin["worker_id"] == worker.id
    db.close()


def test_the_leaderboard_tells_jobs_apart_by_id_not_by_name(tmp_path):
    """Two finished jobs of one name (an older genEval accepted them twice) stay two models: marks name job ids."""
    import torch

    import genEval
    from genEval.service.server.standings.compute import StandingsBuilder, significance_marks
    from tests.support.toys import LinearClassifier, ListDataset, ModelOracle, SigmoidGenerator

    truth = LinearClassifier(seed=0)
    x = torch.rand(60, 3, 2, 2, generator=torch.Generator().manual_seed(7))
    data = ListDataset(x, truth(x).argmax(1).tolist(), ["a", "b", "c"], name="toy")
    for job_id, seed in (("a" * 32, 0), ("b" * 32, 5)):  # the true model and a much worse one
        genEval.evaluate(
            classifier=LinearClassifier(seed=seed),
            data=data,
            generator=SigmoidGenerator(),
            oracle=ModelOracle(LinearClassifier(seed=0)),
            search={"budget": 2, "step_size": 0.05, "start_noise": 0.0},
            seed=11,
            output=RunOutput(tmp_path / job_id, progress=False),
            scoring=Scoring(n_boot=50),
        )
    db = Database(sqlite_url(tmp_path / "geneval.db"))
    builder = StandingsBuilder(db.leaderboard, tmp_path, n_boot=200)
    good, bad = (builder._load(j, "same-name", [j]) for j in ("a" * 32, "b" * 32))
    marks = significance_marks(good, bad, 200)
    assert ("sa", "a" * 32) in marks and all(winner == "a" * 32 for _, winner in marks)
    db.close()


def test_an_older_database_is_upgraded_and_duplicate_names_are_reported_not_fatal(tmp_path, caplog):
    url = sqlite_url(tmp_path / "old.db")
    first = Database(url)
    _submit(first, name="twin")
    first.close()
    from sqlalchemy import create_engine

    engine = create_engine(url)  # an earlier genEval's tables: no error_detail, lease_s, rounds, stop or unique index
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE alembic_version"))  # a database from before Alembic
        conn.execute(text("ALTER TABLE benchmarks DROP COLUMN stop"))
        conn.execute(text("DROP INDEX uq_jobs_active_name_round"))
        conn.execute(text("DROP INDEX ix_jobs_parent_id"))
        conn.execute(text("ALTER TABLE jobs DROP COLUMN round"))
        conn.execute(text("ALTER TABLE jobs DROP COLUMN parent_id"))
        conn.execute(text("ALTER TABLE jobs DROP COLUMN error_detail"))
        conn.execute(text("ALTER TABLE workers DROP COLUMN lease_s"))
        cols = list(conn.execute(text("SELECT * FROM jobs LIMIT 1")).keys())
        picked = ", ".join("'" + "0" * 32 + "'" if c == "id" else c for c in cols)
        conn.execute(text(f"INSERT INTO jobs ({', '.join(cols)}) SELECT {picked} FROM jobs LIMIT 1"))  # a 2nd twin
    engine.dispose()
    again = Database(url)  # starts, with an error naming the duplicates instead of the index
    assert "several active jobs share a name (b v1 'twin' x2)" in caplog.text
    assert again.jobs.get("0" * 32).error_detail is None
    again.workers.register("w", "h", 1, "cpu", lease_s=5)
    assert again.workers.list()[0].lease_s == 5
    again.jobs.cancel("0" * 32)
    again.close()
    fixed = Database(url)  # once the admin cancelled one, the next start makes the index
    with pytest.raises(NameTaken):
        _submit(fixed, name="twin")
    with fixed.engine.connect() as conn:
        cols = list(conn.execute(text("SELECT * FROM jobs LIMIT 1")).keys())
        picked = ", ".join("'" + "1" * 32 + "'" if c == "id" else c for c in cols)
        with pytest.raises(IntegrityError):
            conn.execute(
                text(f"INSERT INTO jobs ({', '.join(cols)}) SELECT {picked} FROM jobs WHERE status = 'queued'")
            )
    fixed.close()
