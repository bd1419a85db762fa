"""The summary of a finished run, from its records alone: scores, per-class table, warnings, and the
:class:`~genEval.runs.rundir.EvalResult` that ``results.json`` holds (paper Sec. 3.3; METHOD.md "Scores").

The driver (:func:`genEval.search.driver.evaluate`) and the merge of shards
(:func:`genEval.runs.shards.merge_runs`) both call :func:`summarize`, so a merged run equals the unsharded one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from genEval.data.base import limit_warning
from genEval.runs.rundir import EvalResult, SampleRecord, Shard, environment, package_versions
from genEval.scores.outcomes import Outcomes
from genEval.scores.run_scores import compute_scores, per_class_table, score_warnings


def summarize(
    records: Sequence[SampleRecord],
    class_names: list[str],
    *,
    seed: int,
    seed_drawn: bool,
    interval: str,
    n_boot: int,
    gap_warn_points: float,
    components: dict,
    config: dict,
    device: str,
    run_dir: str | None,
    timings: dict,
    shard: Shard,
    identity: dict,
    kernels: dict | None = None,
    execution: dict | None = None,
    batch: dict | None = None,
    image_shapes: dict | None = None,
    skipped: list[dict] | None = None,
) -> EvalResult:
    """Scores, per-class table and warnings of a finished run, from its records alone (in data-set order).

    The driver and ``genEval.runs.shards`` both call this, so a merged run equals the unsharded one.
    ``skipped``: the sources left out because they could not be read (``data.skip_unreadable``; position,
    source id, path, reason), or None when the run did not skip (then results hold no ``skipped`` list).
    """
    outcomes = Outcomes.from_records([asdict(r) for r in records])
    search = config.get("search") or {}  # the budget tells "budget 0" apart in the reason for an undefined PA
    scores = compute_scores(
        outcomes, len(class_names), interval=interval, n_boot=n_boot, seed=seed, budget=search.get("budget")
    )
    per_class = per_class_table(outcomes, class_names, interval)
    warnings = []
    if (
        scores.sa.value is not None
        and scores.ra.value is not None
        and scores.sa.value - scores.ra.value > gap_warn_points
    ):
        warnings.append(
            f"generator gap: the classifier loses {scores.sa.value - scores.ra.value:.1f} points on the "
            f"generator's reconstructions alone (SA {scores.sa.value:.1f} -> RA {scores.ra.value:.1f}); PA then "
            "measures the generator as much as the classifier's robustness. Use a generator that fits the data."
        )
    if scores.n_validatable < scores.n / 2:
        warnings.append(
            f"the oracle rejected {scores.n - scores.n_validatable}/{scores.n} reconstructions at "
            "the start check; VR is low because the oracle or generator does not fit this data."
        )
    warnings += score_warnings(scores, oracle_warn_accuracy=config.get("oracle_warn_accuracy", 70.0), search=search)
    selection = (identity.get("sources") or {}).get("selection") or {}
    if (
        selection.get("limit") is not None
        and selection.get("pool") is not None
        and selection["limit"] > selection["pool"]
    ):
        warnings.append(
            limit_warning(selection["limit"], selection["pool"], identity["sources"].get("data", "the data"))
        )
    if skipped:
        shown = ", ".join(f"'{s['path']}'" for s in skipped[:3]) + (", ..." if len(skipped) > 3 else "")
        warnings.append(
            f"{len(skipped)} unreadable source file(s) were skipped (data.skip_unreadable=true) and are not in the "
            f"scores: {shown}; results.json lists each under 'skipped' with the reason."
        )
    return EvalResult(
        scores=scores,
        per_class=per_class,
        seed=seed,
        seed_drawn=seed_drawn,
        components=components,
        class_names=class_names,
        config=config,
        versions=package_versions(),
        environment=environment(device),
        timings=timings,
        warnings=warnings,
        run_dir=run_dir,
        samples=list(records),
        extra={
            "shard": {"index": shard.index, "count": shard.count},
            "identity": identity,
            **({"kernels": kernels} if kernels else {}),
            **({"execution": execution} if execution else {}),
            **({"batch": batch} if batch else {}),
            **({"image_shapes": image_shapes} if image_shapes else {}),
            **({"skipped": list(skipped)} if skipped is not None else {}),
        },
    )
