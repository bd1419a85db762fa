"""Real jobs on the digits smoke benchmark: a worker killed with SIGKILL mid-job on one host loses nothing (the job
is re-queued, and a worker on another host takes over the run's lock once its lease has expired and resumes it into
the same run directory with the same seed, giving the uninterrupted result), and a model whose output size does
not fit the benchmark fails its job with the engine's error, not the worker.
"""
# ruff: noqa: F811  (pytest fixtures imported from service_support are redefined as test arguments)

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from genEval.commands.serve import build_components, job_runner
from genEval.search.execution import Execution
from genEval.service.execute import run_job
from genEval.service.models import classifier_config
from genEval.service.records import JobInfo
from genEval.service.server.database import Database, sqlite_url
from genEval.service.server.worker import Worker
from tests.support.service import (  # noqa: F401 (fixtures)
    pg_url,
    postgres_cluster,
    postgres_server,
    smoke_config,
    worker_process,
    worker_settings,
)


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _submit(
    db: Database, name: str, config: dict, seed: int, upload_path: str | None = None, model: dict | None = None
) -> JobInfo:
    owner = db.tokens.create(name, "submitter")[1]
    return db.jobs.submit(
        benchmark="digits_smoke",
        benchmark_version="test",
        name=name,
        owner=owner,
        model=model or {"kind": "config", "name": "digits_cnn"},
        config=config,
        overrides={},
        seeds=[seed],
        upload_path=upload_path,
    )


def _samples(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]


def _same_samples(a: list[dict], b: list[dict]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        for k, v in x.items():
            if isinstance(v, float) and not math.isclose(v, y[k], rel_tol=1e-5, abs_tol=1e-6):
                return False
            if not isinstance(v, float) and v != y[k]:
                return False
    return True


@pytest.mark.parametrize("database", ["postgresql", pytest.param("sqlite", marks=pytest.mark.slow)])
def test_killed_worker_job_is_taken_over_on_another_host_with_the_same_result(
    tmp_path, smoke_config, database, request, capfd
):
    home, seed = tmp_path, 1234
    url = request.getfixturevalue("pg_url") if database == "postgresql" else sqlite_url(home / "geneval.db")
    db = Database(url)
    job = _submit(db, "cnn", smoke_config, seed)
    # The uninterrupted reference: the same config and seed, in another directory (this also trains and
    # caches the digits models, so the workers below start evaluating at once).
    reference = dataclasses.replace(job, run_dir="reference")
    run_job(reference, home, lambda *a: None, build=build_components, execution=Execution(device="cpu"))

    # another host than worker B's: its run.lock's pid cannot be checked here, only its lease
    worker_a = worker_process(
        home, f"db={url}", "host=node-a", "lease_s=3", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    partial = job.rep_dir(home, 0) / "samples.partial.jsonl"
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            if partial.is_file() and partial.read_text().count("\n") >= 3 and db.jobs.get(job.id).images_done:
                break
            assert worker_a.poll() is None, "worker A exited before the job got going"
            time.sleep(0.05)
        children = _children(worker_a.pid)
        running = db.jobs.get(job.id)
        os.kill(worker_a.pid, signal.SIGKILL)
        worker_a.wait(timeout=30)
    finally:
        if worker_a.poll() is None:
            worker_a.kill()
    assert running.status == "running" and running.images_total == 20 and 0 < running.images_done < 20
    assert running.eta_s is not None and running.eta_s > 0
    assert children, "the job should run in a child process of the worker"
    lock = json.loads((job.rep_dir(home, 0) / "run.lock").read_text())
    assert lock["host"] == "node-a" and lock["lease_s"] == 3  # the run's lock has the job's lease
    end = time.monotonic() + 30
    while any(_alive(c) for c in children) and time.monotonic() < end:
        time.sleep(0.1)
    assert not any(_alive(c) for c in children), "the evaluation must die with its worker"
    killed = db.jobs.get(job.id)
    assert killed.status == "running" and not (job.rep_dir(home, 0) / "results.json").exists()

    time.sleep(max(0.0, killed.lease_expires_at - time.time()) + 0.2)
    worker_b = Worker(
        db,
        home,
        job_runner(Execution(device="cpu")),
        worker_settings(device="cpu", lease_s=3, heartbeat_s=0.2, poll_s=0.1, exit_when_idle=True, host="node-b"),
    )
    assert worker_b.run() == 1
    done = db.jobs.get(job.id)
    assert done.status == "done" and done.attempts == 2 and done.worker_id == worker_b.id, done.error_detail
    err = capfd.readouterr().err
    assert "taking over the stale lock of process" in err and "on host 'node-a'" in err  # naming the old owner
    assert not (job.rep_dir(home, 0) / "run.lock").exists()
    assert done.images_done == done.images_total == 20
    got = json.loads((job.rep_dir(home, 0) / "results.json").read_text())
    want = json.loads((reference.rep_dir(home, 0) / "results.json").read_text())
    assert got["seed"] == want["seed"] == seed
    assert got["scores"] == want["scores"] and got["per_class"] == want["per_class"]
    assert _same_samples(_samples(job.rep_dir(home, 0)), _samples(reference.rep_dir(home, 0)))
    assert (job.rep_dir(home, 0) / "report.html").is_file()
    assert done.result["repetitions"][0]["metrics"] == {
        k: got["scores"][k]["value"] for k in done.result["repetitions"][0]["metrics"]
    }
    db.close()


class SevenLogits(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)[:, :7]


def test_wrong_output_size_fails_the_job_not_the_worker(tmp_path, smoke_config):
    db = Database(sqlite_url(tmp_path / "geneval.db"))
    (tmp_path / "uploads").mkdir()
    torch.jit.save(torch.jit.script(SevenLogits()), tmp_path / "uploads" / "seven.pt")
    spec = {"kind": "torchscript", "num_classes": 7}
    config = {**smoke_config, "classifier": classifier_config(spec, {}, "torchscript", "uploads/seven.pt")}
    bad = _submit(db, "seven", config, 1, upload_path="uploads/seven.pt", model=spec)
    good = _submit(db, "cnn", {**smoke_config, "batch_size": 20}, 2)
    worker = Worker(
        db,
        tmp_path,
        job_runner(Execution(device="cpu")),
        worker_settings(device="cpu", heartbeat_s=0.5, poll_s=0.1, exit_when_idle=True),
    )
    assert worker.run() == 2
    failed = db.jobs.get(bad.id)
    assert failed.status == "failed"
    assert "it has 7 classes and the data 10" in failed.error  # refused by the cheap checks, before the search
    assert db.jobs.get(good.id).status == "done"
    db.close()


def test_a_job_runs_with_the_workers_execution_settings_and_the_precision_its_benchmark_fixes(tmp_path, smoke_config):
    """The worker's settings reach every evaluation of a job (and are recorded); a benchmark that fixes its precision
    keeps every row of its leaderboard at that precision, whatever the worker was started with."""
    db = Database(sqlite_url(tmp_path / "geneval.db"))
    config = {**smoke_config, "batch_size": 20, "data": {**smoke_config["data"], "limit": 6}}
    worker = Execution(device="cpu", precision="bf16", compile=True)
    for name, cfg, expected in (("free", config, "bf16"), ("pinned", {**config, "precision": "fp32"}, "fp32")):
        job = _submit(db, name, cfg, seed=3)
        run_job(job, tmp_path, lambda *a: None, build=build_components, execution=worker)
        rec = json.loads((job.rep_dir(tmp_path, 0) / "results.json").read_text())
        assert rec["execution"]["precision"] == expected and rec["execution"]["compile"] is True
        assert rec["execution"]["batch_size"] == 20  # the benchmark's batch size, not the worker's (null)
        assert rec["kernels"]["classifier"]["precision"] == expected
    db.close()
