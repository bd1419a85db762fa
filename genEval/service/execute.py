"""One job's evaluation: every repetition through the same ``genEval.evaluate`` the CLI uses.

Runs inside a worker's child process (:mod:`genEval.service.server.worker`). Repetition ``r`` of a job uses the
seed recorded at submission (``job.seeds[r]``) and writes a normal run directory
``<home>/<job.run_dir>/rep<r>/`` (results.json, samples.jsonl, grid.png, images.safetensors for the
snapshot export) plus its ``report.html`` (genEval.reports.report). A re-queued job calls ``evaluate`` again with
the same seed and directory, so it reproduces the same results (and resumes where the engine can).

A job of a settled benchmark is one round of its model: its one seed is the round's (which also draws the round's
sources, ``data.subset=random``), and its run records the round as the comparison's repetition and the benchmark's
stop rule (``config.comparison``), as ``geneval compare stop=settled`` records its rounds, so that its runs re-rank
with ``geneval compare 'runs=[...]'`` under the same rule.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from genEval.reports.report import write_report
from genEval.runs.recording import RunOutput
from genEval.scores.run_scores import Scoring
from genEval.search.driver import evaluate
from genEval.search.execution import Execution
from genEval.service.models import UPLOAD_KEY
from genEval.service.records import JobInfo


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
    """The job's evaluation config with its uploaded file's path made absolute under ``home``."""
    config = copy.deepcopy(job.config)
    if job.upload_path is not None:
        kind = job.model.get("kind")
        config["classifier"][UPLOAD_KEY[kind]] = str(Path(home) / job.upload_path)
    return config


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
    config = job_config(job, home)
    stop = config.pop("stop", None)  # a settled benchmark's rule (Benchmark.apply_overrides)
    parts = build(config)
    report("total", len(parts.data) * len(job.seeds))
    # what the preset fixes of Execution (batch size, loader workers, precision) takes the place of the worker's own;
    # its scoring keys are Scoring's (Benchmark.from_config admits only EVALUATE_KEYS beside the roles)
    fixed = {f.name: config[f.name] for f in fields(Execution) if config.get(f.name) is not None}
    execution = replace(Execution.coerce(execution), **fixed)
    reps = []
    classifier_id = None
    for r, seed in enumerate(job.seeds):
        report("rep", r)
        record = {
            **config,
            **execution.to_dict(),
            "service": {
                "job": job.id,
                "benchmark": job.benchmark,
                "benchmark_version": job.benchmark_version,
                "model": job.model,
                "overrides": job.overrides,
            },
            "comparison": {"model": job.name, "repetition": r}
            if stop is None
            else {
                "model": job.name,
                "repetition": job.round,
                "seed": int(seed),
                "data_seed": int(seed),
                "sequential": stop,
            },
        }
        out = job.rep_dir(home, r)
        result = evaluate(
            classifier=parts.classifier,
            data=parts.data,
            generator=parts.generator,
            oracle=parts.oracle,
            search=parts.search,
            mask=parts.mask,
            seed=int(seed),
            execution=execution,
            output=RunOutput(out, save_images=True, grid_size=config.get("grid_size", 8), progress=False),
            scoring=Scoring.coerce(config),
            config=record,
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
