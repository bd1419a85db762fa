"""Scale-out and crash safety (issue 9): batch-size invariance, exact shards and merge, resume, locks.

In-process tests use the exact toy components of tests/toys.py; the launcher tests (kill -9 + resume, the
joblib launcher, torchrun) run the real command line in subprocesses on the offline digits default.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from toys import (
    LinearClassifier,
    ListDataset,
    ModelOracle,
    SigmoidGenerator,
    interrupted_run,
    records,
    same_records,
    toy_data,
)

from benchmarks.harness.run_equality import decisions, scores
from genEval import evaluate
from genEval.commands.evaluate import shard_from
from genEval.runs import RunDir, Shard
from genEval.runs.identity import RunMismatch
from genEval.runs.lock import RunDirectoryBusy
from genEval.runs.recording import RunOutput
from genEval.runs.shards import merge_runs
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig

ROOT = Path(__file__).resolve().parents[1]
CFG = SearchConfig(budget=8, step_size=0.3, start_noise=0.1)


def roles():
    return dict(
        classifier=LinearClassifier(seed=0), generator=SigmoidGenerator(), oracle=ModelOracle(LinearClassifier(seed=1))
    )


# ------------------------------------------------------------------------------------------- batching
def test_same_seed_same_records_whatever_the_batch_size(tmp_path):
    """Start noise is drawn per sample from (seed, source id): batch 1, 17 and 128 decide identically. The
    latents differ only by float batch effects in the last bits, bounded here by 1e-5."""
    data = toy_data(60)
    for b in (1, 17, 128):
        evaluate(
            data=data,
            search=CFG,
            seed=11,
            execution=Execution(batch_size=b),
            output=RunOutput(tmp_path / f"b{b}", save_latents=True),
            **roles(),
        )
    assert decisions(tmp_path / "b1") == decisions(tmp_path / "b17") == decisions(tmp_path / "b128")
    assert scores(tmp_path / "b1") == scores(tmp_path / "b17") == scores(tmp_path / "b128")
    assert 0 < sum(r["validated"] for r in records(tmp_path / "b1")) < 60  # mixed outcomes: a real check
    lat = [RunDir(tmp_path / f"b{b}").tensors("latents") for b in (1, 17, 128)]
    for other in lat[1:]:
        assert other["source_ids"] == lat[0]["source_ids"]
        torch.testing.assert_close(other["final"], lat[0]["final"], rtol=0, atol=1e-5)


def test_refilled_rows_do_not_depend_on_their_neighbours():
    """The refill keeps the batch full with the next sources: a sample's result is the same whichever
    samples share its batch (here: the same sources in reversed order, batch 7)."""
    from toys import search_batch

    d = toy_data(30, seed=4)
    x, y = d.x, torch.tensor(d.y)
    clf, gen, orc = LinearClassifier(seed=0), SigmoidGenerator(), ModelOracle(LinearClassifier(seed=1))
    fwd = search_batch(x, y, clf, gen, orc, CFG, batch_size=7)
    rev = search_batch(
        x.flip(0),
        y.flip(0),
        clf,
        gen,
        orc,
        CFG,
        batch_size=7,
        seeds=list(range(30))[::-1],
        ids=[f"s{i}" for i in range(30)][::-1],
    )
    for k in ("start_ok", "accepted_steps", "rejected_at", "first_fooled", "final_pred"):
        assert torch.equal(getattr(fwd, k), getattr(rev, k).flip(0)), k
    torch.testing.assert_close(fwd.latents, rev.latents.flip(0), rtol=0, atol=1e-5)


# ------------------------------------------------------------------------------------ shards and merge
def test_three_shards_merged_equal_the_unsharded_run(tmp_path):
    data = toy_data(50)
    kw = dict(data=data, search=CFG, seed=5)

    def out(d: Path) -> RunOutput:
        return RunOutput(d, save_latents=True, save_images=True)

    evaluate(execution=Execution(batch_size=16), output=out(tmp_path / "whole"), **kw, **roles())
    for i in range(3):
        evaluate(execution=Execution(batch_size=5), shard=Shard(i, 3), output=out(tmp_path / "shards" / f"s{i}"), **kw,
                 **roles())  # fmt: skip
    assert len(records(tmp_path / "shards" / "s1")) == 17  # positions 1, 4, ..., 49
    merged = merge_runs([tmp_path / "shards"], tmp_path / "merged")
    assert scores(tmp_path / "merged") == scores(tmp_path / "whole")
    assert decisions(tmp_path / "merged") == decisions(tmp_path / "whole")
    assert merged.scores.n == 50
    a, b = RunDir(tmp_path / "merged").tensors("latents"), RunDir(tmp_path / "whole").tensors("latents")
    assert a["source_ids"] == b["source_ids"]
    torch.testing.assert_close(a["final"], b["final"], rtol=0, atol=1e-5)
    assert (tmp_path / "merged" / "grid.png").is_file()


def test_merge_refuses_incomplete_duplicated_or_foreign_shards(tmp_path):
    data = toy_data(20)
    for i in range(2):
        evaluate(data=data, search=CFG, seed=5, shard=Shard(i, 2), output=tmp_path / f"s{i}", **roles())
    evaluate(data=data, search=CFG, seed=6, shard=Shard(1, 2), output=tmp_path / "other-seed", **roles())
    with pytest.raises(ValueError, match=r"shard\(s\) \[1\] of 2 are missing"):
        merge_runs([tmp_path / "s0"], tmp_path / "m1")
    with pytest.raises(ValueError, match=r"shard\(s\) given more than once: \{0: "):
        merge_runs([tmp_path / "s0", tmp_path / "s0", tmp_path / "s1"], tmp_path / "m2")
    with pytest.raises(ValueError, match=r"not a shard of the same evaluation.*seed: 5 -> 6"):
        merge_runs([tmp_path / "s0", tmp_path / "other-seed"], tmp_path / "m3")
    assert not (tmp_path / "m1").exists() and not (tmp_path / "m3").exists()


@pytest.mark.parametrize(
    "index,count,msg",
    [
        (2, 2, r"shard.index=2 must lie in 0..1 \(shard.count=2\)"),
        (0, 0, r"shard.count must be >= 1, got 0"),
    ],
)
def test_bad_shard_settings_are_refused(index, count, msg):
    with pytest.raises(ValueError, match=msg):
        Shard(index, count)


def test_shard_and_device_come_from_the_launchers_environment():
    cfg = OmegaConf.create({"shard": {"index": None, "count": None}})
    assert shard_from(cfg, {}) == (Shard(0, 1), None)
    assert shard_from(cfg, {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == (Shard(1, 4), 1)
    assert shard_from(cfg, {"SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_LOCALID": "3"}) == (Shard(3, 8), 3)
    explicit = OmegaConf.create({"shard": {"index": 0, "count": 2}})
    assert shard_from(explicit, {"RANK": "1", "WORLD_SIZE": "4"})[0] == Shard(0, 2)  # the config wins
    with pytest.raises(ValueError, match="give both shard.index and shard.count"):
        shard_from(OmegaConf.create({"shard": {"index": 1, "count": None}}), {})


# ---------------------------------------------------------------------------------------------- resume
def _interrupted(run_dir: Path, n: int = 40, save_latents: bool = False) -> ListDataset:
    d = toy_data(n)
    out = RunOutput(run_dir, save_latents=save_latents)
    interrupted_run(d, 33, search=CFG, seed=0, execution=Execution(batch_size=8), output=out, **roles())
    return d


def test_a_cut_record_line_is_dropped_and_the_resumed_run_equals_an_uninterrupted_one(tmp_path, caplog):
    d = _interrupted(tmp_path / "run", save_latents=True)
    partial = tmp_path / "run" / "samples.partial.jsonl"
    kept = len(partial.read_text().splitlines())
    with open(partial, "a") as fh:
        fh.write('{"source_id": "toy/0039", "index": 39, "lab')  # what a kill -9 mid-write leaves
    resumed = evaluate(
        data=d,
        search=CFG,
        seed=0,
        execution=Execution(batch_size=8),
        output=RunOutput(tmp_path / "run", save_latents=True),
        **roles(),
    )
    assert "dropping an incomplete last record" in caplog.text
    assert resumed.timings["samples_computed"] == 40 - kept
    evaluate(
        data=d,
        search=CFG,
        seed=0,
        execution=Execution(batch_size=8),
        output=RunOutput(tmp_path / "fresh", save_latents=True),
        **roles(),
    )
    assert decisions(tmp_path / "run") == decisions(tmp_path / "fresh")
    assert scores(tmp_path / "run") == scores(tmp_path / "fresh")
    assert (
        RunDir(tmp_path / "run").tensors("latents")["source_ids"]
        == RunDir(tmp_path / "fresh").tensors("latents")["source_ids"]
    )


def test_a_corrupt_record_in_the_middle_is_refused(tmp_path):
    d = _interrupted(tmp_path / "run")
    partial = tmp_path / "run" / "samples.partial.jsonl"
    lines = partial.read_text().splitlines()
    lines[1] = lines[1][:-5] + "#####"
    partial.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"samples.partial.jsonl line 2 is corrupt"):
        evaluate(data=d, search=CFG, seed=0, execution=Execution(batch_size=8), output=tmp_path / "run", **roles())


def test_resume_with_another_config_or_changed_data_is_refused_naming_the_keys(tmp_path):
    d = _interrupted(tmp_path / "run")
    with pytest.raises(RunMismatch, match=r"differing keys: config.search.budget: 8 -> 9"):
        evaluate(
            data=d,
            search=SearchConfig(budget=9, step_size=0.3, start_noise=0.1),
            seed=0,
            execution=Execution(batch_size=8),
            output=tmp_path / "run",
            **roles(),
        )
    with pytest.raises(RunMismatch, match=r"seed: 0 -> 1"):
        evaluate(data=d, search=CFG, seed=1, output=tmp_path / "run", **roles())
    renamed = ListDataset(d.x, d.y, d.class_names, name="toy2")
    with pytest.raises(RunMismatch, match=r"sources.sha256: '[0-9a-f]+' -> '[0-9a-f]+'"):
        evaluate(data=renamed, search=CFG, seed=0, output=tmp_path / "run", **roles())
    # execution settings may change: another batch size resumes
    evaluate(data=d, search=CFG, seed=0, execution=Execution(batch_size=3), output=tmp_path / "run", **roles())
    assert (tmp_path / "run" / "results.json").is_file()


def test_an_unseeded_run_keeps_its_drawn_seed_when_resumed(tmp_path):
    d = toy_data(40)
    interrupted_run(d, 33, search=CFG, execution=Execution(batch_size=8), output=tmp_path, **roles())
    first = json.loads((tmp_path / "run.json").read_text())["identity"]["seed"]
    resumed = evaluate(data=d, search=CFG, execution=Execution(batch_size=8), output=tmp_path, **roles())
    assert resumed.seed == first and resumed.seed_drawn


def test_a_live_lock_stops_a_second_writer_and_a_stale_one_is_taken_over(tmp_path, caplog):
    import socket

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        tmp_path.mkdir(exist_ok=True)
        (tmp_path / "run.lock").write_text(json.dumps({"pid": sleeper.pid, "host": socket.gethostname()}))
        with pytest.raises(RunDirectoryBusy, match=rf"being written by process {sleeper.pid} on host"):
            evaluate(data=toy_data(8), search=CFG, seed=0, output=tmp_path, **roles())
    finally:
        sleeper.kill()
        sleeper.wait()
    evaluate(data=toy_data(8), search=CFG, seed=0, output=tmp_path, **roles())  # the owner is dead now
    assert "taking over the stale lock" in caplog.text
    assert not (tmp_path / "run.lock").exists() and (tmp_path / "results.json").is_file()


# --------------------------------------------------------------------------------- the real command line
def geneval(*args: str, cwd: Path = ROOT, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "genEval.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=900, **kw
    )


DIGITS = ("seed=0", "data.limit=60", "search.budget=12", "batch_size=8", "progress=false")


def test_kill_9_mid_run_then_resume_gives_the_uninterrupted_result(tmp_path, digits_cache):
    run = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "genEval.cli", *DIGITS, f"hydra.run.dir={run}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    partial = run / "samples.partial.jsonl"
    deadline = time.time() + 900
    while time.time() < deadline and proc.poll() is None:
        if partial.exists() and len(partial.read_text().splitlines()) >= 16:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed; make it longer"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run / "results.json").exists() and (run / "run.lock").exists()  # killed: the lock is left
    done_before = len(partial.read_text().splitlines())
    resumed = geneval(*DIGITS, f"hydra.run.dir={run}")
    assert resumed.returncode == 0, resumed.stderr
    whole = geneval(*DIGITS, f"hydra.run.dir={tmp_path / 'whole'}")
    assert whole.returncode == 0, whole.stderr
    same_records(run, tmp_path / "whole")
    assert scores(run) == scores(tmp_path / "whole")
    computed = json.loads((run / "results.json").read_text())["timings"]["samples_computed"]
    assert computed <= 60 - done_before < 60


def test_joblib_launcher_two_shards_merged_equal_one_process(tmp_path, digits_cache):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    sweep = geneval(
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "shard.count=2",
        "shard.index=0,1",
        *DIGITS,
        f"hydra.sweep.dir={tmp_path / 'multirun'}",
    )
    assert sweep.returncode == 0, sweep.stderr
    merged = geneval("merge", f"runs={tmp_path / 'multirun'}", f"out={tmp_path / 'merged'}")
    assert merged.returncode == 0, merged.stderr
    single = geneval(*DIGITS, f"hydra.run.dir={tmp_path / 'single'}")
    assert single.returncode == 0, single.stderr
    assert scores(tmp_path / "merged") == scores(tmp_path / "single")
    assert decisions(tmp_path / "merged") == decisions(tmp_path / "single")


def test_torchrun_two_cpu_processes_then_merge_equal_one_process(tmp_path, digits_cache):
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node=2",
            "-m",
            "genEval.cli",
            *DIGITS,
            f"hydra.run.dir={tmp_path / 'tr'}",
            "device=cpu",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "tr").glob("shard-*")) == ["shard-0-of-2", "shard-1-of-2"]
    merged = geneval("merge", f"runs={tmp_path / 'tr'}", f"out={tmp_path / 'merged'}")
    assert merged.returncode == 0, merged.stderr
    single = geneval(*DIGITS, f"hydra.run.dir={tmp_path / 'single'}")
    assert single.returncode == 0, single.stderr
    assert scores(tmp_path / "merged") == scores(tmp_path / "single")


def joins_a_cluster(c) -> bool:
    """The preset joins a running cluster and sets object_store_memory (the plugin's default of 75 MB is refused by
    current Ray when joining a cluster; tests/test_ray_cluster.py runs the preset on one)."""
    return (
        c.ray.init.address == "auto" and "object_store_memory" in c.ray.init and c.ray.init.object_store_memory is None
    )


@pytest.mark.parametrize(
    "launcher,plugin,check",
    [
        (
            "slurm_gpus",
            "hydra_plugins.hydra_submitit_launcher",
            lambda c: c.gpus_per_node == 1 and c.max_num_timeout == 3 and c._target_.endswith("SlurmLauncher"),
        ),
        (
            "ray_gpus",
            "hydra_plugins.hydra_ray_launcher",
            lambda c: c.ray.remote.num_gpus == 1 and c._target_.endswith("RayLauncher") and joins_a_cluster(c),
        ),
        (
            "ray_cpus",
            "hydra_plugins.hydra_ray_launcher",
            lambda c: c.ray.remote.num_gpus == 0 and c.ray.remote.max_retries == 3 and joins_a_cluster(c),
        ),
    ],
)
def test_cluster_launcher_presets_compose_with_their_plugins(launcher, plugin, check):
    from hydra import compose, initialize_config_dir

    from genEval.commands import CONF_DIR

    pytest.importorskip(plugin, reason=f"{plugin} is not installed (pip install 'geneval-fmr[slurm]' / '[ray]')")
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
    assert check(cfg.hydra.launcher)


# ------------------------------------------------------------------------------------------- progress
def test_off_a_terminal_progress_is_a_log_line_per_interval_with_the_counts(tmp_path, caplog):
    caplog.set_level("INFO", logger="genEval.search")

    def lines(name: str, interval: float) -> tuple[list[str], object]:
        caplog.clear()
        out = RunOutput(tmp_path / name, progress=False, log_interval=interval)
        res = evaluate(data=toy_data(6), search=CFG, seed=0, execution=Execution(batch_size=2), output=out, **roles())
        progress = [r.getMessage() for r in caplog.records if r.name == "genEval.search.progress"]
        return [m for m in progress if " images (" in m], res

    every, res = lines("every", 0)
    assert [ln.split(":")[1].split(" images")[0].strip() for ln in every] == [f"{i}/6" for i in range(1, 7)]
    fooled = sum(r["validated"] and r["final_pred"] != r["label"] for r in records(tmp_path / "every"))
    validated = res.scores.n_validated
    assert every[-1].startswith(f"shard-0-of-1: 6/6 images (100.0%), validated {validated}, fooled {fooled}, ")
    assert every[-1].endswith(", ETA 00:00:00")  # a rate only once measured after the first batch (issue 37)
    rare, _ = lines("rare", 3600)
    assert [ln.split(" images")[0] for ln in rare] == ["shard-0-of-1: 6/6"]  # only the last line within the hour
