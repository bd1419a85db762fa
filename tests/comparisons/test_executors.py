"""Comparisons fanned out over executors (issue 35): the same runs and verdicts wherever the evaluations ran, failures
named by model and repetition, and a rerun that evaluates only what is missing.

Here submitit's own executors stand in for Slurm (``cluster=debug``: in this process; ``cluster=local``: one process
per job) on the toy roles; tests/comparisons/test_ray_cluster.py runs the digits default on a real local Ray cluster.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from genEval import evaluate
from genEval.campaigns import Design, EvaluationPlan, Setup, run_campaign
from genEval.campaigns.executors import EvalTask, EvaluationsFailed, LocalExecutor, RayExecutor, SlurmExecutor
from genEval.commands import CONF_DIR, build, config_options
from genEval.commands.compare import run_compare
from genEval.comparisons.settings import ComparisonSettings
from genEval.interfaces import SettingError
from genEval.runs.recording import RunOutput
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from tests.support.assets import ROOT
from tests.support.comparisons import ToyPool, verdicts
from tests.support.toys import AcceptAllOracle, LinearClassifier, SigmoidGenerator

pytest.importorskip("submitit", reason="submitit is not installed (pip install 'geneval-fmr[slurm]')")

SEARCH = SearchConfig(budget=3, step_size=0.3, update="sign", start_noise=0.1)
MODELS = ("lin0", "lin1")
SEEDS = [5, 6]


def factories() -> dict:
    """Zero-argument factories: what a worker builds its classifier from (module-level, so they pickle)."""
    return {m: functools.partial(LinearClassifier, 12, 3, seed=i) for i, m in enumerate(MODELS)}


def run(out: Path, executor=None):
    return run_campaign(
        EvaluationPlan(SEARCH, progress=False, execution=Execution(batch_size=6)),
        Design(factories(), out, 2, SEEDS, ComparisonSettings(n_boot=60), executor=executor),
        Setup(ToyPool(limit=12), SigmoidGenerator(), AcceptAllOracle()),  # re-drawn per repetition, on the worker
    )


def run_files(out: Path) -> dict[str, int]:
    """results.json of every run -> the time it was written (ns)."""
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in sorted((out / "runs").rglob("results.json"))}


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    return run(out), out


def test_submitit_jobs_give_the_comparison_of_the_local_run_and_a_rerun_only_fills_gaps(local, tmp_path):
    _, local_out = local
    out = tmp_path / "slurm"
    remote = run(out, SlurmExecutor(cluster="debug", poll_s=0))
    assert verdicts(out) == verdicts(local_out)
    assert remote.settings.data_seeds == SEEDS  # the data were re-drawn per repetition on the workers
    jobs = sorted((out / "submitit").glob("*_log.out"))
    assert len(jobs) == 4 and len(list((out / "submitit").glob("evaluate-*.pkl"))) == 1  # pickled once for all
    before = run_files(out)
    gone = out / "runs" / "lin1" / "rep0" / "results.json"
    gone.unlink()  # as if that job had died after its samples
    run(out, SlurmExecutor(cluster="debug", poll_s=0))
    after = run_files(out)
    assert len(list((out / "submitit").glob("*_log.out"))) == 5  # one more job: the missing evaluation
    assert {k: v for k, v in after.items() if k != "runs/lin1/rep0/results.json"} == {
        k: v for k, v in before.items() if k != "runs/lin1/rep0/results.json"
    }  # the finished runs were not touched
    assert gone.is_file() and verdicts(out) == verdicts(local_out)


@pytest.mark.slow  # about a minute: every job is a new process that imports torch
def test_failed_jobs_are_named_by_model_and_repetition_then_the_rerun_completes(local, tmp_path, monkeypatch):
    """Real job processes (submitit's local cluster); one evaluation fails because its run directory holds another
    run. The others finish, the error names the failed one, and after the clash is removed the same command runs only
    that one and gives the local comparison."""
    _, local_out = local
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "cmp"
    clash = out / "runs" / "lin0" / "rep1"
    evaluate(LinearClassifier(12, 3, seed=0), ToyPool(limit=12), SigmoidGenerator(), AcceptAllOracle(), SEARCH, seed=99,
             output=RunOutput(clash, progress=False))  # fmt: skip
    executor = SlurmExecutor(cluster="local", gpus_per_node=0, cpus_per_task=1, timeout_min=10, poll_s=0.5)
    with pytest.raises(EvaluationsFailed) as info:
        run(out, executor)
    msg = str(info.value)
    assert msg.startswith(f"1 of 4 evaluations failed: lin0 repetition 1 ({clash}): RunMismatch: ")
    assert (
        "holds a run of another configuration" in msg
        and "(job " in msg
        and msg.endswith(
            "run the same command again with the same out_dir and seeds=[5,6] to evaluate only the missing ones (an "
            "interrupted run resumes its finished samples)."
        )
    )
    assert [(t.model, t.repetition) for t in info.value.failures] == [("lin0", 1)]
    assert all(
        (out / "runs" / m / f"rep{r}" / "results.json").is_file() for m, r in [("lin0", 0), ("lin1", 0), ("lin1", 1)]
    )
    done = run_files(out)
    shutil.rmtree(clash)
    run(out, executor)
    assert verdicts(out) == verdicts(local_out)
    assert {k: v for k, v in run_files(out).items() if k in done and "lin0/rep1" not in k} == {
        k: v for k, v in done.items() if "lin0/rep1" not in k
    }


def test_a_task_is_finished_only_with_the_same_seed_and_config(local):
    _, out = local
    run_dir = str(out / "runs" / "lin0" / "rep0")
    recorded = json.loads((Path(run_dir) / "results.json").read_text())["config"]  # what compare recorded
    assert EvalTask("lin0", 0, 5, run_dir, recorded).finished()
    assert EvalTask("lin0", 0, 5, run_dir, {**recorded, "batch_size": 3}).finished()  # an execution setting
    assert not EvalTask("lin0", 0, 6, run_dir, recorded).finished()  # another seed
    assert not EvalTask("lin0", 0, 5, run_dir, {**recorded, "interval": "clopper-pearson"}).finished()
    assert not EvalTask("lin0", 0, 5, str(out / "runs" / "nowhere"), recorded).finished()


@pytest.mark.parametrize(
    "make,msg",
    [
        (lambda: RayExecutor(num_gpus=-1), "num_gpus must be a number >= 0, got -1; e.g. num_gpus=1"),
        (lambda: RayExecutor(max_retries=1.5), "max_retries must be a whole number >= -1, got 1.5"),
        (lambda: SlurmExecutor(cluster="pbs"), "cluster must be one of slurm, local, debug, got 'pbs'"),
        (lambda: SlurmExecutor(timeout_min=0), "timeout_min must be a whole number >= 1, got 0"),
    ],
)
def test_bad_executor_settings_are_refused_by_name(make, msg):
    with pytest.raises(SettingError, match=msg.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        make()


@pytest.mark.parametrize(
    "name,kind,overrides,want",
    [
        ("local", LocalExecutor, [], {}),
        ("ray", RayExecutor, ["executor.num_gpus=0", "executor.address=10.0.0.1:6379"],
         {"num_gpus": 0, "address": "10.0.0.1:6379", "max_retries": 3}),
        ("slurm", SlurmExecutor, ["executor.partition=gpu", "executor.additional_parameters={account: proj}"],
         {"partition": "gpu", "additional_parameters": {"account": "proj"}, "gpus_per_node": 1, "cluster": "slurm"}),
    ],
)  # fmt: skip
def test_every_executor_option_composes_and_builds_with_its_overrides(name, kind, overrides, want):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("compare", overrides=[f"executor={name}", *overrides])
    built = build(cfg.executor, "executor")
    assert type(built) is kind and {k: getattr(built, k) for k in want} == want
    assert set(config_options("executor")) == {"local", "ray", "slurm"}


def test_a_misspelt_executor_setting_is_refused_with_the_right_name():
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("compare", overrides=["executor=slurm", "+executor.partiton=gpu"])
    with pytest.raises(
        ValueError, match=r"executor.partiton is not a setting of .*SlurmExecutor.*Did you mean executor.partition\?"
    ):
        build(cfg.executor, "executor")


def test_the_slurm_jobs_ask_for_what_the_settings_say(tmp_path, monkeypatch):
    """The sbatch script submitit would submit (no Slurm here: without srun the error says so; a stand-in srun on PATH
    lets submitit write the script, which is all that is checked)."""
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(
        OSError, match=r'executor=slurm found no Slurm here \(Could not detect "srun".*executor.cluster=local'
    ):
        SlurmExecutor().engine(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    settings = SlurmExecutor(
        partition="gpu", cpus_per_task=4, mem_gb=32, timeout_min=60, additional_parameters={"account": "proj"}
    )
    text = settings.engine(tmp_path / "jobs")._executor._make_submission_file_text("python -m job", "uid")
    lines = set(text.splitlines())
    for want in ("--partition=gpu", "--gpus-per-node=1", "--cpus-per-task=4", "--mem=32GB", "--time=60",
                 "--account=proj", "--signal=USR2@90", "--job-name=geneval-compare"):  # fmt: skip
        assert f"#SBATCH {want}" in lines, want


def test_geneval_compare_ships_what_the_command_line_built_to_its_jobs(digits_cache, tmp_path, monkeypatch):
    """The command's classifier factories (over config nodes), data, generator and oracle pickle into the jobs
    (submitit's debug cluster: each job reads them back from the one pickle), and the comparison equals
    executor=local's."""
    monkeypatch.setenv("GENEVAL_CACHE", str(digits_cache))
    common = ["classifiers=[digits_cnn,digits_mlp]", "allow_self_judging=true", "data.limit=6", "search.budget=1",
              "repetitions=1", "seed=0", "n_boot=20", "report=false", "progress=false"]  # fmt: skip
    for name, executor in (("local", []), ("jobs", ["executor=slurm", "executor.cluster=debug", "executor.poll_s=0"])):
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            cfg = compose("compare", overrides=[*common, *executor, f"out_dir={tmp_path / name}"])
        run_compare(cfg)
    assert verdicts(tmp_path / "jobs") == verdicts(tmp_path / "local")
    assert len(list((tmp_path / "jobs" / "submitit").glob("*_log.out"))) == 2
