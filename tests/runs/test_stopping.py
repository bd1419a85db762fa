# ruff: noqa: F811  (pytest fixtures imported from service_support are redefined as test arguments)
"""Stopping is clean (genEval/runs/stopping.py): `geneval` stopped with SIGTERM (Slurm's time limit) or SIGINT (Ctrl-C)
keeps the samples it finished, releases run.lock and exits 143 / 130, and the same command resumes the run to the
uninterrupted result; a `geneval worker` stopped with SIGTERM hands its job back (queued, the attempt not counted),
releases the run's lock and is marked stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from genEval import evaluate
from genEval.runs.stopping import Interrupted, stop_on_signals
from genEval.search.execution import Execution
from genEval.service.server.database import Database, sqlite_url
from tests.support.assets import ROOT
from tests.support.service import smoke_config, worker_process  # noqa: F401 (a fixture)
from tests.support.toys import LinearClassifier, ListDataset, ModelOracle, SigmoidGenerator, toy_data

DIGITS = ("seed=0", "data.limit=16", "search.budget=6", "batch_size=2", "progress=false")


def _geneval(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "genEval.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=900
    )


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0


class SignalledAt(ListDataset):
    """A data set during whose reading of source 25 the process receives SIGTERM (as from Slurm or `kill`)."""

    def __getitem__(self, i):
        if i == 25:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().__getitem__(i)


def test_a_signal_mid_run_flushes_the_finished_samples_and_releases_the_lock(tmp_path):
    roles = dict(
        classifier=LinearClassifier(seed=0), generator=SigmoidGenerator(), oracle=ModelOracle(LinearClassifier(seed=1))
    )
    d, run = toy_data(40), tmp_path / "run"
    with pytest.raises(Interrupted) as stop, stop_on_signals():
        evaluate(
            data=SignalledAt(d.x, d.y, d.class_names),
            search={"budget": 4},
            seed=0,
            execution=Execution(batch_size=10),
            output=run,
            **roles,
        )
    assert stop.value.exit_code == 143
    kept = _lines(run / "samples.partial.jsonl")
    assert kept % 10 != 0  # the finished samples of the batch being filled were written too, not only whole flushes
    assert not (run / "run.lock").exists()
    resumed = evaluate(data=d, search={"budget": 4}, seed=0, execution=Execution(batch_size=10), output=run, **roles)
    fresh = evaluate(
        data=d, search={"budget": 4}, seed=0, execution=Execution(batch_size=10), output=tmp_path / "fresh", **roles
    )
    assert resumed.timings["samples_computed"] == 40 - kept
    assert resumed.scores.to_dict() == fresh.scores.to_dict()
    assert signal.getsignal(signal.SIGTERM) is not None  # the handler in place before is back


def _stop_mid_run(run: Path, sig: signal.Signals, after: int = 4) -> tuple[subprocess.Popen, str, int]:
    """Start `geneval` on ``run``, send ``sig`` once ``after`` samples are on disk; returns the process, its stderr
    and how many samples were on disk when the signal was sent."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "genEval.cli", *DIGITS, f"hydra.run.dir={run}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    partial = run / "samples.partial.jsonl"
    deadline = time.time() + 900
    while time.time() < deadline and proc.poll() is None and _lines(partial) < after:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be stopped; make it longer"
    seen = _lines(partial)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    return proc, err, seen


def _scores(run: Path) -> tuple[dict, list]:
    res = json.loads((run / "results.json").read_text())
    return res["scores"], res["per_class"]


@pytest.mark.slow
def test_sigterm_keeps_the_samples_releases_the_lock_exits_143_and_the_rerun_resumes(tmp_path, digits_cache):
    run = tmp_path / "run"
    proc, err, seen = _stop_mid_run(run, signal.SIGTERM)
    assert proc.returncode == 143, err
    assert "stopped by SIGTERM" in err and "resume" in err and "Traceback" not in err
    assert not (run / "run.lock").exists()  # released: a resume on any host goes ahead at once
    assert not (run / "results.json").exists()
    kept = _lines(run / "samples.partial.jsonl")
    assert kept >= seen  # what was finished is on disk (pending samples flushed on the way out)
    resumed = _geneval(*DIGITS, f"hydra.run.dir={run}")
    assert resumed.returncode == 0, resumed.stderr
    assert "taking over" not in resumed.stderr  # nothing stale was left
    whole = _geneval(*DIGITS, f"hydra.run.dir={tmp_path / 'whole'}")
    assert whole.returncode == 0, whole.stderr
    assert _scores(run) == _scores(tmp_path / "whole")
    assert json.loads((run / "results.json").read_text())["timings"]["samples_computed"] == 16 - kept


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stopped_run_exits_143_or_130_with_the_samples_kept_and_the_lock_released(tmp_path, digits_cache, sig, code):
    run = tmp_path / "run"
    proc, err, seen = _stop_mid_run(run, sig)
    assert proc.returncode == code, err
    assert f"stopped by {sig.name}" in err and "Traceback" not in err
    assert not (run / "run.lock").exists() and not (run / "results.json").exists()
    assert _lines(run / "samples.partial.jsonl") >= seen  # resumable (the slow test above resumes one)


def test_a_worker_stopped_with_sigterm_hands_its_job_back_and_is_marked_stopped(tmp_path, smoke_config, digits_cache):
    home = tmp_path
    db = Database(sqlite_url(home / "geneval.db"))
    owner = db.tokens.create("alice", "submitter")[1]
    job = db.jobs.submit(
        benchmark="digits_smoke",
        benchmark_version="test",
        name="cnn",
        owner=owner,
        model={"kind": "config", "name": "digits_cnn"},
        config=smoke_config,
        overrides={},
        seeds=[7],
        upload_path=None,
    )
    worker = worker_process(
        home,
        "lease_s=30",
        "stop_timeout_s=20",
        env={"GENEVAL_CACHE": str(digits_cache)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    partial = job.rep_dir(home, 0) / "samples.partial.jsonl"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and _lines(partial) < 3:
        assert worker.poll() is None, worker.communicate()
        time.sleep(0.05)
    lock = job.rep_dir(home, 0) / "run.lock"
    assert lock.is_file() and db.jobs.get(job.id).status == "running"
    t0 = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=120)
    stopped_in = time.monotonic() - t0
    assert worker.returncode == 143, err
    assert stopped_in < 20 + 10  # within stop_timeout_s (and the database writes)
    back = db.jobs.get(job.id)
    assert back.status == "queued" and back.attempts == 0 and back.worker_id is None  # not a failed attempt
    assert not lock.exists()  # the evaluation released its lock
    assert _lines(partial) >= 3  # and kept its samples for the next worker
    (record,) = db.workers.list()
    assert record.stopped_at is not None and record.state(time.time()) == "stopped"
    db.close()
