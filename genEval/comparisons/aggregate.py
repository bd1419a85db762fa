"""Compare robustness interventions: aggregate runs of several models into a leaderboard, and its stability.

The paper compares models by FMR (Table 2: ANT, SIN, AugMix, DeepAug, DAT on ResNet50; App. N leaderboards).
A dynamic benchmark draws new samples every run, so a ranking is only worth as much as its stability across
fresh runs (``../seeds/digest.md`` 5.3.5, S0 App. A.2). :func:`aggregate` turns finished run directories
(read by :mod:`genEval.comparisons.loading`) into a :class:`~genEval.comparisons.leaderboard.Comparison`:

* the leaderboard rows (:mod:`genEval.comparisons.rows`): per model, every score as the **mean over
  repetitions** with a 95% interval (the run's own with one repetition, so the leaderboard repeats
  ``results.json`` exactly; else the bootstrap over source images, all repetitions resampled together), ranks by
  FMR and by SA, effective robustness fitted on the **named baseline models only** (S0; never on the
  interventions it judges) with a bootstrap interval, run cost and the label-free SoftmaxCorr (S1);
* pairwise differences a - b, **paired** when repetition r of both models saw the same source images
  (:func:`genEval.scores.rankings.pairwise_differences`);
* stability (:mod:`genEval.comparisons.stability`): Kendall tau-b between the FMR rankings of every pair of
  repetitions, its bootstrap distribution over source images, FMR-vs-SA tau and FMR order flips;
* the per-class table of every model, the settings that made the comparison, and its warnings.

:func:`compare` first runs the models (:func:`genEval.comparisons.repetitions.evaluate_repetitions`), then
aggregates. With ``out_dir`` the comparison's files are written there
(:func:`genEval.comparisons.leaderboard.write_comparison`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from genEval.comparisons.leaderboard import (
    Comparison,
    LabelFree,
    LeaderboardRow,
    Settings,
    write_comparison,
)
from genEval.comparisons.loading import LoadedRun, load_runs
from genEval.comparisons.repetitions import check_model_names, evaluate_repetitions, repetition_seeds
from genEval.comparisons.rows import (
    baseline_set,
    effective_robustness,
    leaderboard_rows,
    order_models,
    score_entries,
)
from genEval.comparisons.stability import identical_repetitions, sources_resampled, stability, stability_warnings
from genEval.scores.intervals import model_draws
from genEval.scores.outcomes import Outcomes
from genEval.scores.rankings import (
    pairwise_differences,
    rank_stability,
    spearman,
)
from genEval.scores.run_scores import per_class_table

log = logging.getLogger(__name__)


def _check_same_classes(runs: Mapping[str, list[LoadedRun]]) -> list[str]:
    """The class names all runs share; a run on other classes is an error."""
    first = next(iter(runs.values()))[0]
    class_names = list(first.results.get("class_names") or [])
    for name, reps in runs.items():
        for run in reps:
            if list(run.results.get("class_names") or []) != class_names:
                raise ValueError(
                    f"run {run.run_dir} ({name}) has classes {run.results.get('class_names')} but "
                    f"{first.run_dir} has {class_names}; compare runs on the same data."
                )
    return class_names


def _component_warnings(runs: Mapping[str, list[LoadedRun]]) -> list[str]:
    out = []
    for role in ("data", "generator", "oracle"):
        ids = {str((r.results.get("components") or {}).get(role)) for reps in runs.values() for r in reps}
        if len(ids) > 1:
            out.append(
                f"the runs use different {role}s ({', '.join(sorted(ids))}); differences then mix the "
                f"{role} with the model."
            )
    return out


def _comparison_record(runs: Mapping[str, list[LoadedRun]]) -> list[dict]:
    """``config.comparison`` of the first model's runs (what compare() recorded), one per repetition."""
    first = next(iter(runs.values()))
    return [(r.results.get("config") or {}).get("comparison") or {} for r in first]


def _settings(
    runs: Mapping[str, list[LoadedRun]],
    num_classes: int,
    n_boot: int,
    seed: int,
    level: float,
    er_min_r2: float,
    repetition_seeds: list[int] | None,
    baselines: set[str],
) -> Settings:
    first_reps = next(iter(runs.values()))
    first = first_reps[0].results
    n_reps = sorted({len(v) for v in runs.values()})
    note = (
        "single run's interval (Wilson for proportions, bootstrap over source images for FMR)"
        if n_reps == [1]
        else "bootstrap over source images, all repetitions resampled together (one repetition: the run's own)"
    )
    recorded = _comparison_record(runs)
    return Settings(
        repetitions=n_reps[0] if len(n_reps) == 1 else n_reps,
        n_boot=n_boot,
        level=level,
        bootstrap_seed=seed,
        er_min_r2=er_min_r2,
        interval_note=note,
        repetition_seeds=repetition_seeds or [r.results.get("seed") for r in first_reps],
        num_classes=num_classes,
        created=time.strftime("%Y-%m-%d %H:%M:%S"),
        components={k: (first.get("components") or {}).get(k) for k in ("data", "generator", "oracle", "mask")},
        search=(first.get("config") or {}).get("search"),
        baselines=sorted(baselines) or None,
        mask=recorded[0].get("mask"),
        data_seeds=[c.get("data_seed") for c in recorded],
    )


def _label_free(rows: Sequence[LeaderboardRow]) -> LabelFree:
    rho = spearman([r.softmax_corr for r in rows], [r["pa"].value for r in rows])
    n = sum(r.softmax_corr is not None and r["pa"].value is not None for r in rows)
    return LabelFree(
        rho,
        n,
        "hard decisions: P one-hot from the model's class for each validated perturbed image, "
        "q the histogram of the oracle's accepted class; the records hold no softmax vectors",
        "" if rho is not None else "needs at least 3 models with SoftmaxCorr and PA defined and not all equal",
    )


def build_comparison(
    runs: Mapping[str, list[LoadedRun]],
    *,
    baselines: Sequence[str] | None = None,
    er_min_r2: float = 0.8,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    repetition_seeds: list[int] | None = None,
) -> Comparison:
    """Aggregate loaded runs (model -> repetitions, see :func:`load_runs`) into a Comparison; no I/O."""
    if not runs:
        raise ValueError("no runs to compare.")
    class_names = _check_same_classes(runs)
    num_classes = int(next(iter(runs.values()))[0].results["scores"]["num_classes"])
    base = baseline_set(list(runs), baselines)
    entries = {m: score_entries(reps, num_classes, n_boot, seed, level) for m, reps in runs.items()}
    order, fmr_ranks, sa_ranks = order_models(entries)
    outcomes = {m: [r.outcomes for r in runs[m]] for m in order}
    point, draws, g = model_draws([outcomes[m] for m in order], num_classes, ("sa", "pa", "fmr"), n_boot, seed)
    er = effective_robustness(order, entries, base, er_min_r2, draws, g)
    rows = leaderboard_rows(runs, entries, order, (fmr_ranks, sa_ranks), base, er, num_classes)
    diffs = pairwise_differences(order, outcomes, num_classes, n_boot, seed, level)
    stab = stability(
        rows,
        diffs,
        identical_repetitions(runs),
        rank_stability(point[:, 2], draws[:, :, 2], score="fmr", n_sources=g, level=level),
        sources_resampled(runs),
    )
    warnings = [
        *_component_warnings(runs),
        *(f"{r.model}: {w}" for r in rows for w in r.warnings),
        *stability_warnings(stab),
    ]
    per_class = {
        m: per_class_table(Outcomes.from_records([x for r in runs[m] for x in r.records]), class_names) for m in order
    }
    return Comparison(
        leaderboard=rows,
        differences=diffs,
        stability=stab,
        effective_robustness=er,
        runs={m: [r.run_dir for r in runs[m]] for m in order},
        seeds={m: [r.results.get("seed") for r in runs[m]] for m in order},
        class_names=class_names,
        per_class=per_class,
        settings=_settings(runs, num_classes, n_boot, seed, level, er_min_r2, repetition_seeds, base),
        warnings=warnings,
        label_free=_label_free(rows),
    )


def aggregate(
    run_dirs: Sequence[str | Path] | Mapping[str, Sequence[str | Path]],
    *,
    out_dir: str | Path | None = None,
    baselines: Sequence[str] | None = None,
    er_min_r2: float = 0.8,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    repetition_seeds: list[int] | None = None,
) -> Comparison:
    """Build a :class:`~genEval.comparisons.leaderboard.Comparison` from finished run directories.

    ``run_dirs``: run directories or folders containing them (e.g. a comparison's ``runs/``), or a mapping
    model name -> its run directories (one per repetition). Names and repetitions otherwise come from what
    compare() recorded, the ``<model>/rep<r>`` layout, or the classifier id. ``seed`` seeds the bootstraps.
    ``baselines``: the models effective robustness is fitted on (None: ER is left out, with a note).
    With ``out_dir`` the comparison files are written there (not the report: genEval.reports.report.write_report).
    """
    comp = build_comparison(
        load_runs(run_dirs),
        baselines=baselines,
        er_min_r2=er_min_r2,
        n_boot=n_boot,
        seed=seed,
        level=level,
        repetition_seeds=repetition_seeds,
    )
    if out_dir is not None:
        comp = write_comparison(comp, out_dir)
    log.info(
        "compared %d models (%s); leaderboard by FMR: %s",
        len(comp.models),
        comp.settings.interval_note,
        ", ".join(comp.models),
    )
    return comp


def compare(
    classifiers: Mapping[str, Any],
    data: Any,
    generator: Any,
    oracle: Any,
    search: Any = None,
    *,
    repetitions: int = 1,
    seeds: Sequence[int] | int | None = None,
    out_dir: str | Path,
    baselines: Sequence[str] | None = None,
    progress: bool | None = True,
    er_min_r2: float = 0.8,
    n_boot: int = 1000,
    level: float = 0.95,
    run_configs: Mapping[str, dict] | None = None,
    mask: Any = None,
    mask_reference: str | None = None,
    **evaluate_kwargs: Any,
) -> Comparison:
    """Evaluate every classifier ``repetitions`` times and compare them (see the module docstring).

    ``classifiers``: name -> classifier, or name -> zero-argument factory. ``data``: a data set; one with a
    ``with_seed(seed)`` method (or a factory ``seed -> data``) is re-drawn per repetition with the repetition's
    seed, shared by every model of that repetition (:func:`genEval.comparisons.repetitions.data_for_seed`). ``seeds``:
    one per repetition (the same for every model within a repetition), an int to derive them, or None for fresh seeds;
    they are recorded. ``baselines``: the models effective robustness is fitted on (None: ER is left out). ``mask``: a
    mask for every run; ``AutoMask`` (``mask=auto``) is fitted once with the model named by
    ``mask_reference`` and reused for every model. ``run_configs``: per model, the config recorded in its
    results.json. Other keyword arguments go to ``genEval.evaluate`` (batch_size, device, save_images, ...).
    Writes the runs and the comparison files into ``out_dir``.
    """
    check_model_names(list(classifiers))
    seeds_used = repetition_seeds(seeds, repetitions)
    if baselines is not None:
        unknown = set(map(str, baselines)) - set(map(str, classifiers))
        if unknown:
            raise ValueError(
                f"baselines {sorted(unknown)} are not among the classifiers ({', '.join(map(str, classifiers))})."
            )
    dirs = evaluate_repetitions(
        classifiers,
        data,
        generator,
        oracle,
        search,
        seeds_used,
        out_dir,
        progress=progress,
        run_configs=run_configs,
        n_boot=n_boot,
        mask=mask,
        mask_reference=mask_reference,
        **evaluate_kwargs,
    )
    return aggregate(
        dirs,
        out_dir=out_dir,
        baselines=baselines,
        er_min_r2=er_min_r2,
        n_boot=n_boot,
        level=level,
        repetition_seeds=seeds_used,
    )
