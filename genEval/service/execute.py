"""One job's evaluation: every repetition through the same ``genEval.evaluate`` the CLI uses.

Runs inside a worker's child process (:mod:`genEval.service.server.worker`). Repetition ``r`` of a job uses the
seed recorded at submission (``job.seeds[r]``) and writes a normal run directory
``<home>/<job.run_dir>/rep<r>/`` (results.json, samples.jsonl, grid.png, images.safetensors for the
snapshot export) plus its ``report.html`` (genEval.reports.report). A re-queued job calls ``evaluate`` again with
the same seed and directory, so it reproduces the same results (and resumes where the engine can).

The job's config resolves once into the library's typed objects: the roles its builder makes
(:class:`Components`), the :class:`~genEval.campaigns.plan.EvaluationPlan` every repetition is evaluated with
(:meth:`~genEval.campaigns.plan.EvaluationPlan.from_config`: the preset's batch size, precision, scoring and grid
size on top of the worker's execution and the service's output) and a settled benchmark's
:class:`~genEval.comparisons.settings.StopRule` (:meth:`~genEval.comparisons.settings.StopRule.carried_by`: the
config's ``comparison.sequential``, or the ``stop`` of a job stored before that spelling).

A job of a settled benchmark is one round of its model: its one seed is the round's (which also draws the round's
sources, ``data.subset=random``), and its run records the round as the comparison's repetition and the benchmark's
stop rule (``config.comparison.sequential``), as ``geneval compare stop=settled`` records its rounds, so that its runs
re-rank with ``geneval compare 'runs=[...]'`` under the same rule.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from genEval.campaigns.plan import EvaluationPlan
from genEval.comparisons.settings import StopRule
from genEval.reports.report import write_report
from genEval.runs.recording import RunOutput
from genEval.search.driver import evaluate
from genEval.search.execution import Execution
from genEval.service.models import UPLOAD_KEY
from genEval.service.records import JobInfo

#: What a job's runs keep: their images (the snapshot export, the job page's grid), no per-run progress bar (the worker
#: reports a job's progress); the preset's ``grid_size`` on top (:meth:`EvaluationPlan.from_config`).
JOB_OUTPUT = RunOutput(save_images=True, progress=False)


@dataclass(frozen=True)
class Components:
    """The built roles of one evaluation (what the command layer's builder returns for a job config)."""

    classifier: Any
    data: Any
    generator: Any
    oracle: Any
    search: Any
    mask: Any


def job_config(job: JobInfo, home: Path) -> dict:
    """The job's evaluation config (its roles and the preset's run settings; the stop rule is :func:`job_rule`'s)
    with its uploaded file's path made absolute under ``home``."""
    config = {k: v for k, v in copy.deepcopy(job.config).items() if k not in ("comparison", "stop")}
    if job.upload_path is not None:
        kind = job.model.get("kind")
        config["classifier"][UPLOAD_KEY[kind]] = str(Path(home) / job.upload_path)
    return config


def job_rule(job: JobInfo) -> StopRule | None:
    """A settled benchmark's job's stop rule (None: a fixed benchmark's job), as its config carries it."""
    return StopRule.carried_by(job.config)


def run_job(
    job: JobInfo,
    home: Path,
    report: Callable[[str, Any], None],
    *,
    build: Callable[[dict], Components],
    execution: Execution | None = None,
) -> dict:
    """Evaluate ``job`` (all repetitions); returns the summary stored with the finished job.

    ``execution``: the worker's device, precision, compile...; what the benchmark (or the submission) fixes of
    them (batch size, loader workers, precision) takes the place of the worker's own.

    ``report("total", n_images)`` once the data is built, ``report("rep", r)`` as each repetition starts
    (the worker's progress).
    """
    config, rule = job_config(job, home), job_rule(job)
    parts = build(config)
    report("total", len(parts.data) * len(job.seeds))
    plan = EvaluationPlan.from_config(
        config, search=parts.search, mask=parts.mask, execution=execution, output=JOB_OUTPUT
    )
    reps = []
    classifier_id = None
    for r, seed in enumerate(job.seeds):
        report("rep", r)
        out = job.rep_dir(home, r)
        result = evaluate(
            classifier=parts.classifier,
            data=parts.data,
            generator=parts.generator,
            oracle=parts.oracle,
            search=plan.search,
            mask=plan.mask,
            seed=int(seed),
            execution=plan.execution,
            output=replace(plan.output, dir=out),
            scoring=plan.scoring,
            reference=plan.reference,
            config=_record(job, config, plan, rule, r, int(seed)),
        )
        write_report(out)
        classifier_id = result.components.get("classifier")
        reps.append(
            {
                "repetition": r,
                "seed": int(seed),
                "run_dir": str(Path(job.run_dir) / f"rep{r}"),
                "n": result.scores.n,
                "metrics": result.metrics,
            }
        )
    return {"repetitions": reps, "classifier": classifier_id}


def _record(job: JobInfo, config: dict, plan: EvaluationPlan, rule: StopRule | None, r: int, seed: int) -> dict:
    """The config repetition ``r`` records in its ``results.json``: the job's config, the execution it ran with, the
    service's ids, and the comparison it is part of (a settled job: its round, seed and stop rule, the fields its rule
    sets; a rule stored before a field existed records it as not recorded, so a re-rank reads it as it ran)."""
    comparison = (
        {"model": job.name, "repetition": r}
        if rule is None
        else {
            "model": job.name,
            "repetition": job.round,
            "seed": seed,
            "data_seed": seed,
            "sequential": {k: v for k, v in rule.to_dict().items() if v is not None},
        }
    )
    service = {
        "job": job.id,
        "benchmark": job.benchmark,
        "benchmark_version": job.benchmark_version,
        "model": job.model,
        "overrides": job.overrides,
    }
    return {**config, **plan.execution.to_dict(), "service": service, "comparison": comparison}
