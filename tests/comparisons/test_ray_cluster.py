"""On a real Ray cluster (issue 35): a local head node (tests/support/ray_cluster.py: 2 CPUs, 127.0.0.1, its own
temporary directory, stopped after), the offline digits default, the real command line.

* A Hydra multirun of 2 shards through ``hydra/launcher=ray_cpus`` merges itself into the unsharded run; with one
  shard's Ray worker killed (by its pid, from the shard's run.lock) mid-run, Ray retries the task (``max_retries``),
  the retry resumes the shard, and the merge still equals the unsharded run.
* ``geneval compare executor=ray`` (a Ray task per model and repetition) gives the comparison of ``executor=local``;
  with a task's worker killed and no retries, the comparison fails naming that model and repetition, and the same
  command again evaluates only that one and gives the same comparison.

Slow (minutes on 2 busy cores); CI runs it with the other slow tests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.assets import ROOT
from tests.support.cli import decisions, geneval, scores
from tests.support.comparisons import assert_same_verdicts
from tests.support.ray_cluster import COMPARE, SHARDS, TINY, kill_mid_run, local_ray_cluster, start

pytest.importorskip("ray", reason="ray is not installed (pip install 'geneval-fmr[ray]'): no Ray cluster to test on")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(digits_cache):
    """The cluster's workers import this checkout and use the session's trained digits models."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    with local_ray_cluster(num_cpus=2, env={"GENEVAL_CACHE": str(digits_cache), "PYTHONPATH": path}) as c:
        yield c


@pytest.fixture(scope="module")
def local_env(digits_cache) -> dict[str, str]:
    return {**os.environ, "GENEVAL_CACHE": str(digits_cache)}


@pytest.fixture(scope="module")
def unsharded(local_env, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("whole")
    r = geneval(*TINY, f"hydra.run.dir={run}", env=local_env)
    assert r.returncode == 0, r.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def compared_locally(local_env, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("compare-local")
    r = geneval(*COMPARE, f"out_dir={out}", env=local_env)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


# ------------------------------------------------------------------------------------------- shards
def test_two_shards_on_the_cluster_merge_into_the_unsharded_run(cluster, unsharded, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="hydra-ray-launcher is not installed")
    sweep = tmp_path / "sweep"
    r = geneval(*SHARDS, f"hydra.sweep.dir={sweep}", env=cluster.env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Ray Launcher is launching 2 jobs" in r.stdout + r.stderr
    assert scores(sweep / "merged") == scores(unsharded)
    assert decisions(sweep / "merged") == decisions(unsharded)


def test_a_killed_shard_worker_is_retried_and_the_merge_still_equals_the_unsharded_run(cluster, unsharded, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="hydra-ray-launcher is not installed")
    sweep = tmp_path / "sweep"
    proc = start([*SHARDS, "batch_size=2", f"hydra.sweep.dir={sweep}"], cluster.env, tmp_path / "sweep")
    killed = kill_mid_run("*/shard-1-of-2", sweep, proc, samples=2)
    assert proc.wait(timeout=900) == 0, (tmp_path / "sweep.err").read_text()[-3000:]
    shard = next(sweep.glob("*/shard-1-of-2"))
    retried = json.loads((shard / "results.json").read_text())
    assert retried["timings"]["samples_computed"] <= 8  # the retry resumed: the samples flushed before the kill stay
    logs = [tmp_path / "sweep.err", tmp_path / "sweep.out", *sweep.rglob("*.log")]  # the driver's and the jobs' logs
    assert f"taking over the stale lock of process {killed} " in "".join(p.read_text() for p in logs)
    assert scores(sweep / "merged") == scores(unsharded)
    assert decisions(sweep / "merged") == decisions(unsharded)


# ------------------------------------------------------------------------------------------- compare
def test_compare_with_a_ray_task_per_evaluation_equals_the_local_comparison(cluster, compared_locally, tmp_path):
    out = tmp_path / "cmp"
    r = geneval(*COMPARE, "executor=ray", f"out_dir={out}", env=cluster.env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "executor=ray: submitting 6 evaluations" in r.stderr + r.stdout
    assert_same_verdicts(out, compared_locally)


def test_a_failed_ray_task_is_named_and_the_rerun_evaluates_only_it(cluster, compared_locally, tmp_path):
    out = tmp_path / "cmp"
    proc = start([*COMPARE, "executor=ray", "executor.max_retries=0", "batch_size=2", f"out_dir={out}"],
                 cluster.env, tmp_path / "cmp")  # fmt: skip
    kill_mid_run("runs/digits_mlp/rep1", out, proc, samples=2)
    assert proc.wait(timeout=900) == 2
    err = (tmp_path / "cmp.err").read_text()
    target = out / "runs" / "digits_mlp" / "rep1"
    assert f"geneval compare: error: 1 of 6 evaluations failed: digits_mlp repetition 1 ({target}): " in err
    assert "WorkerCrashedError" in err
    finished = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("results.json")}
    assert len(finished) == 5 and not (target / "results.json").exists()
    again = geneval(*COMPARE, "executor=ray", f"out_dir={out}", env=cluster.env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (
        "5 of 6 evaluations are finished in their run directories; running the other 1" in again.stdout + again.stderr
    )
    assert {p: p.stat().st_mtime_ns for p in finished} == finished  # the finished runs were left alone
    assert json.loads((target / "results.json").read_text())["timings"]["samples_computed"] <= 10  # resumed
    assert_same_verdicts(out, compared_locally)
