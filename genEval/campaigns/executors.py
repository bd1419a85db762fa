"""Where the evaluations of a comparison run: in this process, as Ray tasks, or as Slurm jobs (``executor=``).

A comparison is a set of independent evaluations, one per (model, repetition) (:class:`EvalTask`), each writing its
own run directory. Pairing is settled before any of them runs: every task carries its repetition's seed, the same
for every model (:mod:`genEval.campaigns.repetitions`), and the worker re-draws the repetition's sources from it,
so where a task runs changes nothing it computes, and the comparison aggregates the runs as if they had run one
after the other. An executor calls ``evaluate(task)`` for every task, through the engine's own API (this module
schedules nothing itself):

* :class:`LocalExecutor` (``executor=local``, the default): one after the other in this process, in the order
  given (model by model, so one model is in memory at a time); the first error stops the comparison, raised as is.
* :class:`RayExecutor` (``executor=ray``): one ``ray.remote`` task per evaluation on a running Ray cluster, with
  ``num_gpus`` GPUs and ``num_cpus`` CPUs each, in a fresh worker process (``max_calls=1``: GPU memory is returned
  between tasks). Ray reruns a task whose worker process died (``max_retries``); the rerun resumes the run directory.
* :class:`SlurmExecutor` (``executor=slurm``): one job per evaluation through submitit's ``AutoExecutor`` (a Slurm
  job array; ``cluster=local`` runs them as local processes, ``cluster=debug`` in this process). A job that runs
  into its time limit or is preempted is requeued (``max_num_timeout``) and resumes its run directory.

``evaluate`` must pickle (the remote executors ship it once, then one small task per evaluation): it holds the
classifiers as factories, built on the worker, and the data, re-drawn there. The remote executors submit only the
tasks that are not finished (:meth:`EvalTask.finished`), wait for all of them, and raise :class:`EvaluationsFailed`
naming every (model, repetition) that failed; the finished runs stay, and the same command run again evaluates only
the missing ones (an interrupted run also keeps its finished samples: :mod:`genEval.runs.recording`). Workers get
this process's ``GENEVAL_*`` environment (model cache, assets); every node must see the comparison's ``out_dir``.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import pickle
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from tqdm.auto import tqdm

from genEval.fileio import atomic_write_bytes, ensure_writable_dir, to_json
from genEval.interfaces import SettingError, is_whole
from genEval.runs.rundir import RESULTS, RUN, read_run_identity
from genEval.search.driver import identity_config

log = logging.getLogger(__name__)

#: Environment variables a worker gets from the process that submits its task (model cache, assets folder, lease).
FORWARDED_ENV = "GENEVAL_"


@dataclass(frozen=True)
class EvalTask:
    """One evaluation of a comparison: model ``model``, repetition ``repetition`` with its ``seed``, into ``run_dir``,
    recording ``config`` in its results.json."""

    model: str
    repetition: int
    seed: int
    run_dir: str
    config: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def label(self) -> str:
        return f"{self.model} repetition {self.repetition}"

    def finished(self) -> bool:
        """Whether ``run_dir`` holds this evaluation finished: a ``results.json``, and a ``run.json`` of the same seed
        and config (execution settings such as the device aside, as for a resume). Anything else is (re)submitted,
        and the evaluation resumes the directory or refuses it, naming the keys that differ."""
        d = Path(self.run_dir)
        if not (d / RESULTS).is_file() or not (d / RUN).is_file():
            return False
        try:
            ident = read_run_identity(d)
        except (OSError, ValueError, KeyError):
            return False
        want = json.loads(to_json(identity_config(self.config)))
        return ident.seed == self.seed and json.loads(to_json(dict(ident.config))) == want


class Executor(Protocol):
    """Runs ``evaluate(task)`` for every task and returns when all are done (see the module docstring).
    ``workdir``: a folder every worker sees, for the engine's own files; ``progress``: a bar over the tasks."""

    def run(
        self, evaluate: Callable[[EvalTask], Any], tasks: Sequence[EvalTask], *, workdir: str | Path, progress: bool
    ) -> None: ...


class EvaluationsFailed(RuntimeError):
    """Evaluations of a comparison failed on their workers; ``failures``: task -> why (one line each)."""

    def __init__(self, failures: Mapping[EvalTask, str], tasks: Sequence[EvalTask]) -> None:
        self.failures = dict(failures)
        seeds = [s for _, s in sorted({t.repetition: t.seed for t in tasks}.items())]
        listed = "; ".join(f"{t.label} ({t.run_dir}): {why}" for t, why in self.failures.items())
        super().__init__(
            f"{len(self.failures)} of {len(tasks)} evaluations failed: {listed}. The finished runs are kept: run the "
            f"same command again with the same out_dir and seeds=[{','.join(map(str, seeds))}] to evaluate only the "
            "missing ones (an interrupted run resumes its finished samples)."
        )


def _bar(total: int, show: bool, done: int = 0) -> tqdm:
    return tqdm(total=total, initial=done, desc="compare", unit="run", disable=not show, dynamic_ncols=True)


@dataclass(frozen=True)
class LocalExecutor:
    """``executor=local``: every task in this process, one after the other, in the order given; an error stops the
    comparison and is raised as is."""

    def run(
        self,
        evaluate: Callable[[EvalTask], Any],
        tasks: Sequence[EvalTask],
        *,
        workdir: str | Path | None = None,
        progress: bool = False,
    ) -> None:
        with _bar(len(tasks), progress) as bar:
            for task in tasks:
                bar.set_postfix(model=task.model, rep=task.repetition)
                evaluate(task)
                bar.update(1)


#: What an engine yields as its tasks end: the task and None, or the task and why it failed (one line).
Outcomes = Iterator[tuple[EvalTask, str | None]]


class ClusterExecutor(ABC):
    """What the cluster executors share: :meth:`run` submits the unfinished tasks through the engine (``_outcomes``:
    submit, then yield each task as it ends, with why when it failed), follows them, and raises
    :class:`EvaluationsFailed` listing the failed ones once all have ended."""

    @abstractmethod
    def _outcomes(self, evaluate: Callable[[EvalTask], Any], todo: list[EvalTask], workdir: Path) -> Outcomes:
        """Submit ``todo`` to the engine (Ray, Slurm), then yield each task as it ends, with why when it failed."""

    def run(
        self,
        evaluate: Callable[[EvalTask], Any],
        tasks: Sequence[EvalTask],
        *,
        workdir: str | Path,
        progress: bool = False,
    ) -> None:
        name = f"executor={type(self).__name__.removesuffix('Executor').lower()}"
        todo = [t for t in tasks if not t.finished()]
        if len(todo) < len(tasks):
            log.info(
                "%s: %d of %d evaluations are finished in their run directories; running the other %d",
                name,
                len(tasks) - len(todo),
                len(tasks),
                len(todo),
            )
        failures: dict[EvalTask, str] = {}
        with _bar(len(tasks), progress, len(tasks) - len(todo)) as bar:
            if todo:
                log.info("%s: submitting %d evaluations", name, len(todo))
                for task, why in self._outcomes(evaluate, todo, Path(workdir)):
                    if why is None:
                        log.info("%s: %s finished (%s)", name, task.label, task.run_dir)
                    else:
                        failures[task] = why
                        log.error("%s: %s failed: %s", name, task.label, why)
                    bar.update(1)
        if failures:
            raise EvaluationsFailed(failures, tasks)


def _engine(module: str, extra: str) -> ModuleType:
    """The engine's package, or an ImportError naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f'executor={extra} needs the {module} package ({err}); install it with pip install "geneval-fmr[{extra}]".'
        ) from err


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


#: The last line of a Python traceback: ``pkg.module.SomeError: message`` (not indented, a dotted name).
_RAISED = re.compile(r"^([A-Za-z_][\w.]*): (.+)$", re.MULTILINE)


def _reason(err: BaseException) -> str:
    """One line for a failed task: the exception the task raised, where the engine wraps it."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException):  # Ray's RayTaskError: the task's own exception
        err = cause
    text = str(err)
    raised = _RAISED.findall(text) if "Traceback (most recent call last)" in text else []
    if raised:  # submitit's FailedJobError: the job's traceback as text, ending with the exception it raised
        name, message = raised[-1]
        return f"{name.rsplit('.', 1)[-1]}: {message.strip()}"
    return f"{type(err).__name__}: {_last_line(text) or 'no message'}"


def _call(evaluate: Callable[[EvalTask], Any], task: EvalTask) -> Any:
    """What a Ray task runs (a module-level function: pickled by reference)."""
    return evaluate(task)


def _forwarded_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV)}


def _check_count(key: str, value: Any, low: float, example: str, whole: bool = False) -> None:
    ok = is_whole(value, low) if whole else isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or value < low:
        kind = "a whole number" if whole else "a number"
        raise SettingError(key, value, f"{kind} >= {low:g}", example)


@dataclass(frozen=True)
class RayExecutor(ClusterExecutor):
    """``executor=ray``: one Ray task per evaluation (see the module docstring).

    ``address``: the cluster to join (``auto``: the one ``ray start`` started on this machine, or ``RAY_ADDRESS``;
    ``<head ip>:6379``; None starts a local one in this process). ``num_gpus``: GPUs per task (None: 1 when the
    cluster has GPUs, else 0). ``num_cpus``: CPUs per task. ``max_retries``: reruns of a task whose worker process
    died (-1: without limit). A task that asks for more GPUs or CPUs than any node of the cluster has is refused
    before anything is submitted (it would wait forever).
    """

    address: str | None = "auto"
    num_gpus: float | None = None
    num_cpus: float = 1
    max_retries: int = 3

    def __post_init__(self) -> None:
        if self.num_gpus is not None:
            _check_count("num_gpus", self.num_gpus, 0, "1")
        _check_count("num_cpus", self.num_cpus, 0, "8")
        _check_count("max_retries", self.max_retries, -1, "3", whole=True)

    def _outcomes(self, evaluate: Callable[[EvalTask], Any], todo: list[EvalTask], workdir: Path) -> Outcomes:
        ray = _engine("ray", "ray")
        joined = not ray.is_initialized()
        if joined:
            self._connect(ray)
        try:
            remote = ray.remote(  # max_calls=1: a fresh worker process per task (GPU memory is returned between tasks)
                num_cpus=self.num_cpus, num_gpus=self._gpus(ray), max_retries=int(self.max_retries), max_calls=1
            )(_call)
            shared = ray.put(evaluate)  # shipped once; every task gets it by reference
            pending = {remote.options(name=f"geneval {t.model} rep{t.repetition}").remote(shared, t): t for t in todo}
            try:
                while pending:
                    ready, _ = ray.wait(list(pending), num_returns=1)
                    task = pending.pop(ready[0])
                    try:
                        ray.get(ready[0])
                    except ray.exceptions.RayError as err:
                        yield task, _reason(err)
                    else:
                        yield task, None
            finally:
                for ref in pending:  # stopped early (Ctrl-C): the run directories keep what their tasks flushed
                    ray.cancel(ref, force=True)
        finally:
            if joined:
                ray.shutdown()

    def _connect(self, ray: ModuleType) -> None:
        env = _forwarded_env()
        try:
            ray.init(address=self.address, runtime_env={"env_vars": env} if env else None, log_to_driver=True)
        except ConnectionError as err:
            raise ConnectionError(
                f"executor=ray found no Ray cluster at executor.address={self.address!r} ({_last_line(str(err))}). "
                "Start one (ray start --head) or join one (ray start --address=<head ip>:6379) first, set "
                "executor.address=<head ip>:6379, or executor.address=null to start one in this process."
            ) from err

    def _gpus(self, ray: ModuleType) -> float:
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        most = {k: max((r.get(k, 0) for r in nodes), default=0) for k in ("GPU", "CPU")}
        gpus = (1 if most["GPU"] >= 1 else 0) if self.num_gpus is None else self.num_gpus
        for key, want, have in (("num_gpus", gpus, most["GPU"]), ("num_cpus", self.num_cpus, most["CPU"])):
            if want > have:
                raise ValueError(
                    f"executor.{key}={want:g}, but no node of the Ray cluster has more than {have:g}; every task "
                    f"would wait forever. Set executor.{key}={have:g} (executor.num_gpus=0 runs on CPUs) or add nodes."
                )
        log.info("executor=ray: %d nodes; every task gets %g GPU(s) and %g CPU(s)", len(nodes), gpus, self.num_cpus)
        return gpus


@dataclass(frozen=True)
class _SubmititJob:
    """One submitit job: the comparison's ``evaluate`` read from ``path`` (written once for all jobs), then run on
    one task. ``checkpoint`` makes submitit requeue the job after a time-out or preemption; the evaluation then
    resumes its run directory."""

    path: str

    def __call__(self, task: EvalTask) -> Any:
        with open(self.path, "rb") as fh:
            evaluate = pickle.load(fh)  # noqa: S301 - written by this comparison, in its own folder
        return evaluate(task)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args, **kwargs)


@dataclass(frozen=True)
class SlurmExecutor(ClusterExecutor):
    """``executor=slurm``: one job per evaluation through submitit's ``AutoExecutor`` (see the module docstring).

    ``cluster``: ``slurm``, or submitit's ``local`` (local processes) or ``debug`` (in this process) to try the
    plumbing without Slurm. ``folder``: submitit's job files and logs (None: ``<out_dir>/submitit``; on storage every
    node sees). ``partition``, ``gpus_per_node``, ``cpus_per_task``, ``mem_gb``, ``timeout_min``: per job;
    ``max_num_timeout``: requeues after a time-out; ``array_parallelism``: jobs of the array running at once;
    ``additional_parameters``: other sbatch options (``{account: ..., qos: ...}``). ``poll_s``: seconds between
    status checks.
    """

    cluster: str = "slurm"
    folder: str | None = None
    partition: str | None = None
    gpus_per_node: int = 1
    cpus_per_task: int = 8
    mem_gb: float = 64
    timeout_min: int = 720
    max_num_timeout: int = 3
    array_parallelism: int = 64
    additional_parameters: Mapping[str, Any] | None = None
    poll_s: float = 15

    def __post_init__(self) -> None:
        if self.cluster not in ("slurm", "local", "debug"):
            raise SettingError("cluster", self.cluster, "one of slurm, local, debug", "slurm")
        for key, low in (("gpus_per_node", 0), ("cpus_per_task", 1), ("timeout_min", 1), ("max_num_timeout", 0)):
            _check_count(key, getattr(self, key), low, "1", whole=True)
        _check_count("array_parallelism", self.array_parallelism, 1, "64", whole=True)
        _check_count("mem_gb", self.mem_gb, 0, "64")
        _check_count("poll_s", self.poll_s, 0, "15")

    def engine(self, folder: str | Path) -> Any:
        """submitit's ``AutoExecutor`` for these settings, writing its job files into ``folder``."""
        submitit = _engine("submitit", "slurm")
        try:
            executor = submitit.AutoExecutor(
                folder=folder, cluster=self.cluster, slurm_max_num_timeout=self.max_num_timeout
            )
        except RuntimeError as err:  # no srun on this machine
            raise OSError(
                f"executor=slurm found no Slurm here ({err}). Run geneval compare on a machine that submits to Slurm "
                "(a login node), or set executor.cluster=local to run the jobs as processes on this machine."
            ) from err
        executor.update_parameters(
            name="geneval-compare",
            timeout_min=self.timeout_min,
            gpus_per_node=self.gpus_per_node,
            cpus_per_task=self.cpus_per_task,
            mem_gb=self.mem_gb,
            slurm_partition=self.partition,
            slurm_array_parallelism=self.array_parallelism,
            slurm_additional_parameters=dict(self.additional_parameters or {}),
        )
        return executor

    def _outcomes(self, evaluate: Callable[[EvalTask], Any], todo: list[EvalTask], workdir: Path) -> Outcomes:
        submitit = _engine("submitit", "slurm")
        folder = Path(self.folder).expanduser() if self.folder else workdir / "submitit"
        executor = self.engine(folder)
        shared = ensure_writable_dir(folder) / f"evaluate-{secrets.token_hex(4)}.pkl"  # pickled once, read by every job
        atomic_write_bytes(shared, _engine("cloudpickle", "slurm").dumps(evaluate))
        job = _SubmititJob(str(shared))
        with executor.batch():
            submitted = [executor.submit(job, task) for task in todo]
        log.info("executor=slurm: submitted %d jobs (%s); their logs: %s", len(todo), submitted[0].job_id, folder)
        by_job = {id(j): t for j, t in zip(submitted, todo)}
        for done in submitit.helpers.as_completed(submitted, poll_frequency=self.poll_s):
            err = done.exception()
            yield (
                by_job[id(done)],
                None if err is None else f"{_reason(err)} (job {done.job_id}, log {done.paths.stderr})",
            )
