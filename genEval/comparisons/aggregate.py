"""Compare robustness interventions: aggregate runs of several models into a leaderboard, and its stability.

The paper compares models by FMR (Table 2: ANT, SIN, AugMix, DeepAug, DAT on ResNet50; App. N leaderboards).
A dynamic benchmark draws new samples every run, so a ranking is only worth as much as its stability across
fresh runs (docs/method.md, "Rank stability"; Shi et al. 2023, App. A.2). :func:`aggregate` turns finished run
directories (read by :mod:`genEval.comparisons.loading`) into a :class:`~genEval.comparisons.leaderboard.Comparison`:

* the leaderboard rows (:mod:`genEval.comparisons.rows`): per model, every score as the **mean over
  repetitions** with a 95% interval (the run's own with one repetition, so the leaderboard repeats
  ``results.json`` exactly; else the bootstrap over source images, all repetitions resampled together), ranks by
  the ranking score ``rank_by`` (:mod:`genEval.comparisons.ranking`; default FMR_v), by FMR and by SA, effective
  robustness fitted on the **named baseline models only** (S0; never on the
  interventions it judges) with a bootstrap interval, run cost and the label-free SoftmaxCorr (S1);
* pairwise differences a - b, **paired** when repetition r of both models saw the same source images
  (:func:`genEval.scores.rankings.pairwise_differences`);
* stability (:mod:`genEval.comparisons.stability`): Kendall tau-b between the rankings (by ``rank_by``) of every
  pair of repetitions, its bootstrap distribution over source images, FMR-vs-SA tau and order flips;
* the per-class table of every model, the settings that made the comparison, and its warnings;
* whether the ranking is settled (:mod:`genEval.comparisons.settled`): anytime-valid verdicts on the adjacent pairs
  from the rounds (repetitions) so far, tied ranks, and the sources that would settle an open pair.

:func:`aggregate` reads finished runs and writes the comparison's files into ``out_dir``
(:func:`genEval.comparisons.leaderboard.write_comparison`); running them is :func:`genEval.campaigns.run.run_campaign`'s
job.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from genEval.comparisons.confidence import label_free_section
from genEval.comparisons.leaderboard import (
    Comparison,
    Settings,
    write_comparison,
)
from genEval.comparisons.loading import load_runs
from genEval.comparisons.ranking import (
    DEFAULT_RANK_BY,
    rank_draws,
    rank_per_rep,
    rank_reason,
    rank_values,
)
from genEval.comparisons.rows import (
    baseline_set,
    effective_robustness,
    leaderboard_rows,
    order_models,
    score_entries,
)
from genEval.comparisons.settings import ComparisonSettings
from genEval.comparisons.settled import settle_comparison
from genEval.comparisons.stability import identical_repetitions, sources_resampled, stability, stability_warnings
from genEval.runs.reader import RunDir
from genEval.runs.results import ComparisonRecord
from genEval.scores.class_differences import class_differences, per_class_ratio_intervals, with_ratio_intervals
from genEval.scores.intervals import model_draws
from genEval.scores.outcomes import Outcomes
from genEval.scores.rankings import (
    pairwise_differences,
    rank_stability,
)
from genEval.scores.run_scores import per_class_table

log = logging.getLogger(__name__)


def _check_same_classes(runs: Mapping[str, list[RunDir]]) -> list[str]:
    """The class names all runs share; a run on other classes is an error."""
    first = next(iter(runs.values()))[0]
    class_names = list(first.results.class_names)
    for name, reps in runs.items():
        for run in reps:
            if list(run.results.class_names) != class_names:
                raise ValueError(
                    f"run {run} ({name}) has classes {run.results.class_names} but "
                    f"{first} has {class_names}; compare runs on the same data."
                )
    return class_names


def _component_warnings(runs: Mapping[str, list[RunDir]]) -> list[str]:
    out = []
    for role in ("data", "generator", "oracle"):
        ids = {str(r.results.components.get(role)) for reps in runs.values() for r in reps}
        if len(ids) > 1:
            out.append(
                f"the runs use different {role}s ({', '.join(sorted(ids))}); differences then mix the "
                f"{role} with the model."
            )
    return out


def _self_judged_warnings(runs: Mapping[str, list[RunDir]]) -> list[str]:
    """A warning naming the compared models that were members of the oracle (recorded by compare())."""
    records = [r.results.config.comparison or ComparisonRecord() for reps in runs.values() for r in reps]
    judged = sorted({m for record in records for m in record.self_judged} & set(runs))
    if not judged:
        return []
    return [
        f"{', '.join(judged)} {'is a member' if len(judged) == 1 else 'are members'} of the oracle that judged "
        "them (allow_self_judging): the oracle keeps only images its members still classify correctly, so their PA "
        "is 100 by construction and their FMR and rank say nothing about robustness; compare them under another "
        "oracle (e.g. oracle=clip_vit_b32)."
    ]


def _comparison_record(runs: Mapping[str, list[RunDir]]) -> list[ComparisonRecord]:
    """``config.comparison`` of the first model's runs (what compare() recorded), one per repetition."""
    first = next(iter(runs.values()))
    return [r.results.config.comparison or ComparisonRecord() for r in first]


def recorded_baselines(runs: Mapping[str, list[RunDir]]) -> list[str] | None:
    """The baselines the comparison that made ``runs`` fitted ER on (``config.comparison.baselines``), when every
    run records the same ones and all of them are among ``runs``; else None."""
    found = {(r.results.config.comparison or ComparisonRecord()).baselines for reps in runs.values() for r in reps}
    if len(found) != 1 or not (names := list(next(iter(found)))) or not set(names) <= set(runs):
        return None
    return names


def recorded_rule(runs: Mapping[str, list[RunDir]]) -> Mapping | None:
    """The stop rule the comparison that made ``runs`` ran with (``config.comparison.sequential``), if recorded."""
    return _comparison_record(runs)[0].sequential


def _settings(
    runs: Mapping[str, list[RunDir]], num_classes: int, settings: ComparisonSettings, baselines: set[str]
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
    seeds = settings.repetition_seeds
    return Settings(
        repetitions=n_reps[0] if len(n_reps) == 1 else n_reps,
        n_boot=settings.n_boot,
        level=settings.level,
        bootstrap_seed=settings.seed,
        er_min_r2=settings.er_min_r2,
        interval_note=note,
        repetition_seeds=list(seeds) if seeds else [r.results.seed for r in first_reps],
        num_classes=num_classes,
        created=time.strftime("%Y-%m-%d %H:%M:%S"),
        components={k: first.components.get(k) for k in ("data", "generator", "oracle", "mask")},
        search=None if first.config.search is None else first.config.search.to_dict(),
        baselines=sorted(baselines) or None,
        mask=recorded[0].mask,
        data_seeds=[c.data_seed for c in recorded],
        rank_by=settings.rank_by,
        rank_reason=rank_reason(settings.rank_by),
    )


def build_comparison(runs: Mapping[str, list[RunDir]], settings: ComparisonSettings | None = None) -> Comparison:
    """Aggregate loaded runs (model -> repetitions, see :func:`load_runs`) into a Comparison ordered by
    ``settings.rank_by`` (:mod:`genEval.comparisons.ranking`); no I/O."""
    if not runs:
        raise ValueError("no runs to compare.")
    settings = ComparisonSettings.coerce(settings)
    rank_by, n_boot, seed, level = settings.rank_by, settings.n_boot, settings.seed, settings.level
    class_names = _check_same_classes(runs)
    num_classes = int(next(iter(runs.values()))[0].results.scores.num_classes)
    models = list(runs)
    baselines = settings.baseline_list
    if baselines is None and (baselines := recorded_baselines(runs)) is not None:
        log.info("effective robustness on the baselines the runs record: %s", ", ".join(baselines))
    base = baseline_set(models, baselines)
    if rank_by == "er" and not base:
        raise ValueError(
            "rank_by=er ranks by effective robustness, which is fitted on baseline models: name them with "
            "baselines=[...] (standard ERM models among the compared ones), or rank by another score "
            f"(e.g. rank_by={DEFAULT_RANK_BY})."
        )
    entries = {m: score_entries(reps, num_classes, settings) for m, reps in runs.items()}
    outcomes = {m: [r.outcomes for r in runs[m]] for m in models}
    keys = ("sa", "pa", "fmr", *((rank_by,) if rank_by not in ("sa", "pa", "fmr", "er") else ()))
    point, draws, g = model_draws([outcomes[m] for m in models], num_classes, keys, n_boot, seed)
    er = effective_robustness(models, entries, base, settings.er_min_r2, draws, g, settings.er_scale, settings.er_floor)
    if rank_by == "er" and not er.trusted:
        raise ValueError(
            f"rank_by=er, but effective robustness is not reported here: {er.reason} Rank by another score "
            f"(e.g. rank_by={DEFAULT_RANK_BY}), name other baselines, or lower er_min_r2; existing runs re-rank "
            "with geneval compare 'runs=[<dir>/runs]' rank_by=..."
        )
    values = rank_values(rank_by, models, entries, er)
    score_draws = rank_draws(rank_by, keys, draws, er)  # (B, M), models in the order of `models`
    order, ranks = order_models(dict(zip(models, values)), entries)
    idx = [models.index(m) for m in order]
    er = er.select(idx)
    recorded = recorded_rule(runs)
    rule, note = settings.sequential.filled(recorded), settings.sequential.against(recorded)  # re-ranks keep the rule
    settled = settle_comparison(
        runs, rank_by, num_classes, rule.test(), rule.to_dict(), sources_resampled(runs), rule_note=note
    )
    rows = [
        replace(row, tied_rank=settled.tied_ranks.get(row.model))
        for row in leaderboard_rows(runs, entries, order, ranks, base, er, num_classes)
    ]
    diffs = pairwise_differences(order, outcomes, num_classes, n_boot, seed, level)
    score_point = np.array([np.nan if v is None else v for v in values], dtype=float)[idx]
    stab = stability(
        rows,
        diffs,
        identical_repetitions(runs),
        rank_stability(score_point, score_draws[:, idx], score=rank_by, n_sources=g, level=level),
        sources_resampled(runs),
        score=rank_by,
        per_rep=rank_per_rep(rank_by, order, entries, er),
    )
    warnings = [
        *_component_warnings(runs),
        *_self_judged_warnings(runs),
        *(f"{r.model}: {w}" for r in rows for w in r.warnings),
        *stability_warnings(stab),
    ]
    per_class = {
        m: with_ratio_intervals(
            per_class_table(Outcomes.from_records([x for r in runs[m] for x in r.samples]), class_names),
            per_class_ratio_intervals(outcomes[m], class_names, num_classes, n_boot, seed, level),
        )
        for m in order
    }
    return Comparison(
        leaderboard=rows,
        differences=diffs,
        stability=stab,
        effective_robustness=er,
        runs={m: [str(r) for r in runs[m]] for m in order},
        seeds={m: [r.results.seed for r in runs[m]] for m in order},
        class_names=class_names,
        per_class=per_class,
        settings=_settings(runs, num_classes, settings, base),
        warnings=warnings,
        label_free=label_free_section(
            runs, rows, num_classes, with_sensitivity=settings.label_free_sensitivity, seed=settings.seed
        ),
        settled=settled,
        class_differences=class_differences(order, outcomes, class_names, num_classes, n_boot, seed, level)
        if len(order) > 1
        else None,
    )


def aggregate(
    run_dirs: Sequence[str | Path] | Mapping[str, Sequence[str | Path]],
    settings: ComparisonSettings | None = None,
    *,
    out_dir: str | Path | None = None,
) -> Comparison:
    """Build a :class:`~genEval.comparisons.leaderboard.Comparison` from finished run directories.

    ``run_dirs``: run directories or folders containing them (e.g. a comparison's ``runs/``), or a mapping
    model name -> its run directories (one per repetition). Names and repetitions otherwise come from what
    compare() recorded, the ``<model>/rep<r>`` layout, or the classifier id. ``settings``: how to aggregate
    (:class:`~genEval.comparisons.settings.ComparisonSettings`: baselines, ER gate, bootstrap, ``rank_by``):
    without ``baselines`` ER is fitted on those the runs record (see
    :func:`recorded_baselines`), else left out, with a note. With ``out_dir`` the comparison files are written there
    (not the report: genEval.reports.report.write_report).
    """
    comp = build_comparison(load_runs(run_dirs), ComparisonSettings.coerce(settings))
    if out_dir is not None:
        comp = write_comparison(comp, out_dir)
    log.info(
        "compared %d models (%s); leaderboard by %s: %s",
        len(comp.models),
        comp.settings.interval_note,
        comp.rank_by,
        ", ".join(comp.models),
    )
    return comp
