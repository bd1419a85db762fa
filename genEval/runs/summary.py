"""The summary of a finished run, from its records alone: scores, per-class table, warnings, and the
:class:`~genEval.runs.results.EvalResult` that ``results.json`` holds (paper Sec. 3.3; docs/method.md, "The scores").

The driver (:func:`genEval.search.driver.evaluate`) and the merge of shards
(:func:`genEval.runs.shards.merge_runs`) both call :func:`summarize`, so a merged run equals the unsharded one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from genEval.data.base import limit_warning
from genEval.runs.identity import RunIdentity, environment, package_versions
from genEval.runs.results import EvalResult, RunConfig
from genEval.scores.confidence import run_confidence
from genEval.scores.outcomes import Outcomes, SampleRecord
from genEval.scores.run_scores import compute_scores, per_class_table, score_warnings


def summarize(
    records: Sequence[SampleRecord],
    class_names: list[str],
    *,
    config: RunConfig,
    identity: RunIdentity,
    seed_drawn: bool,
    device: str,
    run_dir: str | None,
    timings: dict,
    details: Mapping[str, Any] | None = None,
) -> EvalResult:
    """Scores, per-class table and warnings of a finished run, from its records alone (in data-set order).

    The driver and ``genEval.runs.shards`` both call this, so a merged run equals the unsharded one. ``config``: the
    configuration the run records, with the search and scoring it ran with (:meth:`RunConfig.of`; the intervals,
    bootstrap and warning thresholds come from ``config.scoring``, the budget from ``config.search``); ``identity``:
    the run's identity (``run.json``: its seed, components and shard come from there). ``details``: further entries
    of results.json (``kernels``, ``execution``, ``batch``, ``image_shapes``, ``skipped``; None values are left
    out). ``skipped``: the sources left out because they could not be read (``data.skip_unreadable``; position,
    source id, path, reason), or None when the run did not skip (then results hold no ``skipped`` list).
    ``ood_data``: the classifier's maximum softmax probability on the images of an OOD set (``ood_data=<folder>``:
    ``{"data", "n", "sha256", "msp"}``), scored against the clean images in the run's ``confidence``
    (:func:`genEval.scores.confidence.run_confidence`, docs/scores.md).
    """
    scoring, search = config.scoring, config.search
    outcomes = Outcomes.from_records(records)
    seed = identity.seed
    scores = compute_scores(  # the budget tells "budget 0" apart in the reason for an undefined PA
        outcomes, len(class_names), interval=scoring.interval, n_boot=scoring.n_boot, seed=seed, budget=config.budget
    )
    per_class = per_class_table(outcomes, class_names, scoring.interval)
    gap = scoring.gap_warn_points
    warnings = []
    if scores.sa.value is not None and scores.ra.value is not None and scores.sa.value - scores.ra.value > gap:
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
    warnings += score_warnings(
        scores, oracle_warn_accuracy=scoring.oracle_warn_accuracy, search=None if search is None else search.to_dict()
    )
    beyond = identity.sources.limit_beyond_pool
    if beyond is not None:
        warnings.append(limit_warning(*beyond, identity.sources.data or "the data"))
    details = {k: v for k, v in (details or {}).items() if v is not None}
    ood = details.get("ood_data")
    details["confidence"] = run_confidence(
        records,
        None if ood is None else ood["msp"],
        ood_name=f"OOD images ({ood['data']})" if ood else "OOD images",
        n_boot=scoring.n_boot,
        seed=seed,
    ).to_dict()
    skipped = details.get("skipped")
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
        components=dict(identity.components),
        class_names=class_names,
        config=config,
        versions=package_versions(),
        environment=environment(device),
        timings=timings,
        warnings=warnings,
        run_dir=run_dir,
        samples=list(records),
        extra={"shard": identity.shard.to_dict(), "identity": identity.to_dict(), **details},
    )
