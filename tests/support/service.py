"""Shared pieces of the service tests: a real PostgreSQL server, free ports, stand-in job runners.

The runners here are module-level functions because a worker sends its runner to a spawned child
process (pickled by reference); the child imports this module from the tests directory.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from benchmarks.harness.centroids import CENTROIDS, CentroidClassifier, centroid_build  # noqa: F401 - tests take them
from benchmarks.harness.net import free_port, hold_connection  # noqa: F401 - the tests take them from here
from benchmarks.harness.pages import CHROMIUM_FLAGS, chromium, claim_smoke_job  # noqa: F401 - the tests take them
from benchmarks.harness.postgres import PgCluster
from genEval.runs.recording import RunOutput
from genEval.scores.run_scores import Scoring
from genEval.service.records import JobInfo
from genEval.service.server.database import Database, sqlite_url
from genEval.service.worker_settings import WorkerSettings

ROOT = Path(__file__).resolve().parents[2]
#: What a test's worker changes of WorkerSettings' defaults (conf/worker: every job sandboxed and limited): no sandbox
#: and no job limits, so that a stand-in runner runs as it is; a test of the sandbox or a limit sets its own.
UNLIMITED = {"isolation": "none", "allow_unsandboxed_models": True, "max_job_s": 0, "stall_heartbeats": 0,
             "job_memory_mb": 0}  # fmt: skip


# ------------------------------------------------------------------------------------------ a digits_smoke service
def smoke_service(home: Path, presets, url: str | None = None, **settings):
    """A :class:`~genEval.service.server.facade.Service` offering the ``digits_smoke`` preset (``presets``: the
    answers of ``load_benchmarks`` and ``registered_classifiers``) on its database (``url``; None: SQLite under
    ``home``), with ``settings`` on top of the server's defaults (``max_upload_mb=0.25``, ``max_checks=2`` ...)."""
    from genEval.service.server.facade import Service, Settings

    Path(home).mkdir(parents=True, exist_ok=True)
    db = Database(url or sqlite_url(Path(home) / "geneval.db"))
    return Service(db, Settings(home=home, default_benchmark="digits_smoke", **settings), *presets)


def smoke_client(home: Path, presets, url: str | None = None, **settings):
    """(FastAPI's TestClient of :func:`smoke_service`'s app, that service)."""
    from fastapi.testclient import TestClient

    from genEval.service.server.app import create_app

    service = smoke_service(home, presets, url, **settings)
    return TestClient(create_app(service)), service


def bearer(db: Database, role: str = "submitter", name: str = "alice") -> dict:
    """The Authorization header of a new API token of ``role`` for ``name`` in ``db``."""
    return {"Authorization": f"Bearer {db.tokens.create(name, role)[0]}"}


def worker_settings(**changes) -> WorkerSettings:
    """The settings of a test's worker: :data:`UNLIMITED`, then ``changes`` (``heartbeat_s=0.5, poll_s=0.1``)."""
    return WorkerSettings(**{**UNLIMITED, **changes})


def worker_process(home: Path, *overrides: str, env: dict | None = None, **popen) -> subprocess.Popen:
    """`geneval worker` on ``home`` (CPU, polling and renewing every 0.2 s, logs under ``home/logs``) in a
    subprocess, with ``overrides`` (``lease_s=3``, ``db=...``) added."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "genEval.cli",
            "worker",
            f"home={home}",
            "device=cpu",
            "heartbeat_s=0.2",
            "poll_s=0.2",
            f"hydra.run.dir={home / 'logs'}",
            *overrides,
        ],
        cwd=home,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        **popen,
    )


def submit_job(db: Database, name: str, model: dict | None = None, overrides: dict | None = None) -> str:
    """A queued job of a fresh submitter ``name`` on benchmark ``b`` version ``v`` (one seed); its id."""
    owner = db.tokens.create(name, "submitter")[1]
    return db.jobs.submit(
        benchmark="b", benchmark_version="v", name=name, owner=owner, model=model or {}, config={},
        overrides=overrides or {}, seeds=[1], upload_path=None,
    ).id  # fmt: skip


def wait_for(predicate, timeout: float, what: str, every: float = 0.05):
    """``predicate()``'s first true value, polled every ``every`` seconds; the test fails naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got := predicate():
            return got
        time.sleep(every)
    pytest.fail(f"{what} did not happen within {timeout:.0f}s")


def _cluster() -> PgCluster:
    try:
        return PgCluster()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    except KeyError:
        pytest.skip("running as root and there is no postgres user to own the test cluster")


@pytest.fixture(scope="session")
def postgres_cluster():
    """The session's PostgreSQL cluster (:class:`PgCluster`), started by the tests and removed after."""
    cluster = _cluster().start()
    try:
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture(scope="session")
def postgres_server(postgres_cluster):
    """The URL of the session's PostgreSQL server."""
    return postgres_cluster.url


@pytest.fixture
def own_postgres():
    """A PostgreSQL cluster of this test alone (a test that stops and restarts it: a database outage)."""
    cluster = _cluster().start()
    try:
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture
def pg_url(postgres_cluster):
    """A fresh, empty database on the test cluster."""
    return postgres_cluster.create_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """Each database test runs on SQLite and on a real PostgreSQL."""
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "geneval.db")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def db(db_url):
    database = Database(db_url)
    yield database
    database.close()


@pytest.fixture(scope="module")
def smoke_config():
    """The digits_smoke benchmark (20 images, 5 steps) in batches of one image: 20 batches, so a kill or a stop
    lands mid-job."""
    from genEval.commands.serve import load_benchmarks, registered_classifiers  # heavy: only where it is used

    config = dict(load_benchmarks(["digits_smoke"])["digits_smoke"].config)
    config["batch_size"] = 1
    config["classifier"] = registered_classifiers(None)["digits_cnn"]
    return config


# ------------------------------------------------------------------------------------ stand-in runners
def record_runner(job: JobInfo, home: Path, report) -> dict:
    """Appends the job id to ``home/executions.log`` (one line per execution) and takes a moment."""
    report("total", 1)
    with open(home / "executions.log", "a", encoding="utf-8") as fh:
        fh.write(f"{job.id} {os.getpid()}\n")
    time.sleep(0.3)
    return {"ran": job.id}


def napping_runner(job: JobInfo, home: Path, report) -> dict:
    """Takes 5 s (long enough for a database to be stopped and started under it)."""
    report("total", 1)
    time.sleep(5)
    return {"napped": job.id}


def slow_runner(job: JobInfo, home: Path, report) -> dict:
    """Runs for a long time (to be cancelled or stopped)."""
    report("total", 1)
    (home / f"started-{job.id}").write_text(str(os.getpid()))
    time.sleep(600)
    return {}


def failing_runner(job: JobInfo, home: Path, report) -> dict:
    raise ValueError(f"classifier returned 7 logits but the dataset has 10 classes (job {job.name})")


def crashing_runner(job: JobInfo, home: Path, report) -> dict:
    os.kill(os.getpid(), 9)
    return {}


def toy_eval_runner(job: JobInfo, home: Path, report) -> dict:
    """A real (tiny) evaluation of a linear classifier seeded by the job's name length, into the job's run
    directory (``job.seeds[0]`` seeds it), as the production runner does with a benchmark's components."""

    from genEval.search.driver import evaluate
    from tests.support.toys import LinearClassifier, ModelOracle, SigmoidGenerator, toy_data

    data = toy_data(30, seed=3)
    report("total", len(data))
    report("rep", 0)
    res = evaluate(
        classifier=LinearClassifier(seed=len(job.name)),
        data=data,
        generator=SigmoidGenerator(),
        oracle=ModelOracle(LinearClassifier(seed=1)),
        search={"budget": 3, "step_size": 0.3, "start_noise": 0.0},
        seed=int(job.seeds[0]),
        config={"comparison": {"model": job.name}},
        output=RunOutput(job.rep_dir(home, 0), progress=False),
        scoring=Scoring(n_boot=100),
    )
    torch.set_num_threads(1)
    return {"repetitions": [{"repetition": 0, "seed": int(job.seeds[0]), "metrics": res.metrics}]}


def leaky_runner(job: JobInfo, home: Path, report) -> dict:
    """Fails with the kind of message that names the server's paths, host and process (a checkpoint that does not
    fit, raised deep inside an evaluation)."""
    raise ValueError(
        f"while building classifier: checkpoint '{home}/uploads/{job.id}.safetensors' does not match the model "
        f"architecture; missing keys: fc.weight (run directory '{home}/runs/{job.id}' on host "
        f"'{socket.gethostname()}', process {os.getpid()})"
    )


def centroid_runner(job: JobInfo, home: Path, report) -> dict:
    """The production job runner (genEval.service.execute.run_job) with :func:`centroid_build`."""
    from genEval.service.execute import run_job

    return run_job(job, home, report, build=centroid_build)


# ------------------------------------------------------------------------- a database of main's schema (pre-Alembic)
def main_schema_database(url: str, benchmarks: dict) -> dict:
    """Make the database at ``url`` as genEval made it before Alembic: main's DDL for the URL's dialect
    (``tests/support/service_main_schema.<dialect>.sql``, compiled once from main's tables) and rows written with plain
    INSERTs: the versions of ``benchmarks`` (name -> Benchmark, each with its ``record()`` as config), one done job
    per benchmark with its standings row, and on a settled one a second model and the verdict on the pair. Returns
    the job ids by name (``<benchmark>/<model>``)."""
    from sqlalchemy import MetaData, create_engine, text

    engine = create_engine(url)
    ddl = (Path(__file__).parent / f"service_main_schema.{engine.dialect.name}.sql").read_text()
    body = "\n".join(line for line in ddl.splitlines() if not line.startswith("--"))
    ids: dict[str, str] = {}
    with engine.begin() as conn:
        for statement in filter(str.strip, body.split(";")):
            conn.execute(text(statement))
        tables = MetaData()
        tables.reflect(conn)
        t = tables.tables
        conn.execute(t["tokens"].insert(), [dict(id="t" * 32, name="alice", role="submitter", token_sha256="0" * 64,
                                                  created_at=1.0e9, revoked_at=None)])  # fmt: skip
        for b, bench in benchmarks.items():
            row = dict(name=b, version=bench.version, title=bench.title, config=bench.record(), registered_at=1.0e9)
            conn.execute(t["benchmarks"].insert(), [row | {"round_base": 7}])
            models = ("first", "second") if bench.rule else ("first",)
            for i, model in enumerate(models):
                job_id = f"{i}{b}".ljust(32, "x")[:32]
                ids[f"{b}/{model}"] = job_id
                conn.execute(t["jobs"].insert(), [dict(
                    id=job_id, benchmark=b, benchmark_version=bench.version, name=model, owner_id="t" * 32,
                    owner_name="alice", model={"kind": "config", "name": "digits_cnn"}, config={}, overrides={},
                    seeds=[i], run_dir=f"runs/{b}/{job_id}", upload_path=None, status="done", created_at=1.0e9 + i,
                    started_at=1.0e9 + i, finished_at=1.0e9 + 10 + i, worker_id="w", lease_expires_at=None,
                    heartbeat_at=None, attempts=1, images_done=40, images_total=40, eta_s=0.0, error=None,
                    result={"repetitions": []}, error_detail=None, round=0, parent_id=None)])  # fmt: skip
                scores = {"fmr": {"value": 10.0 + i, "low": 5.0 + i, "high": 15.0 + i},
                          "fmr_validated": {"value": 20.0 - i, "low": 12.0, "high": 28.0}}  # fmt: skip
                better = {"fmr": [], "sa": ["second"] if i == 0 and bench.rule else [], "pa": []}
                conn.execute(t["standings"].insert(), [dict(
                    job_id=job_id, benchmark=b, version=bench.version, name=model, finished_at=1.0e9 + 10 + i,
                    run_dirs=[f"runs/{b}/{job_id}/rep0"], repetitions=1, scores=scores, better_than=better,
                    warnings=[], interval_note="95% bootstrap intervals", computed_at=1.0e9 + 11,
                    marks={m: {"count": len(v), "first": v} for m, v in better.items()},
                    settled={"pooled": 20.0 - i, "sources": 8, "rounds": 1} if bench.rule else None)])  # fmt: skip
        settled = [b for b, bench in benchmarks.items() if bench.rule]
        for b in settled:
            upper, lower = ids[f"{b}/first"], ids[f"{b}/second"]
            verdict = {"a": "first", "b": "second", "metric": "fmr_validated", "value": 1.0, "low": -2.0,
                       "high": 4.0, "n_sources": 8, "looks": 1, "sd": 1.0, "verdict": "open", "confidence": 0.95,
                       "margin": 1.0, "more_sources": 120, "more_kind": "order", "run_low": -2.0,
                       "run_high": 4.0}  # fmt: skip
            first, second = sorted((upper, lower))
            row = dict(first=first, second=second, benchmark=b, version=benchmarks[b].version, upper=upper)
            conn.execute(t["verdicts"].insert(), [row | dict(rounds=1, verdict=verdict, computed_at=1.0e9)])
    engine.dispose()
    return ids
