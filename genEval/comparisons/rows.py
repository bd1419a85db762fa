"""The leaderboard rows of a comparison: every score per model, ranks, effective robustness, run cost.

Per model, every score is the **mean over repetitions** with a 95% interval (the run's own with one
repetition, else the bootstrap over source images of :func:`genEval.scores.intervals.bootstrap_scores`); ER is
fitted on the named baselines only (:mod:`genEval.scores.effective_robustness`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from genEval.comparisons.leaderboard import (
    LeaderboardRow,
    MetricEntry,
)
from genEval.comparisons.settings import ComparisonSettings
from genEval.runs.reader import RunDir
from genEval.scores.definitions import LEADERBOARD_SCORES, score_values
from genEval.scores.effective_robustness import ACCURACY_FLOOR, ERFit, er_intervals, fit_effective_robustness
from genEval.scores.intervals import MIN_BOOTSTRAP_SOURCES, bootstrap_scores, few_sources
from genEval.scores.label_free import hard_softmax_corr
from genEval.scores.outcomes import Outcomes
from genEval.scores.rankings import (
    rank,
)

NO_BASELINES = (
    "left out: effective robustness is fitted on baseline models only, never on the interventions it "
    "judges; name them with baselines=[...] (standard models, e.g. ERM-trained) to get it"
)


def baseline_set(models: list[str], baselines: Sequence[str] | None) -> set[str]:
    base = set() if baselines is None else set(map(str, baselines))
    unknown = base - set(models)
    if unknown:
        raise ValueError(
            f"baselines {sorted(unknown)} are not among the compared models ({', '.join(models)}); "
            "set baselines to a subset of the model names, or null to leave ER out."
        )
    return base


def score_entries(reps: list[RunDir], num_classes: int, settings: ComparisonSettings) -> dict[str, MetricEntry]:
    """Every leaderboard score of one model: the run's own estimate (one repetition) or the bootstrap mean (the
    bootstrap of ``settings``)."""
    per_rep = {
        k: [None if np.isnan(v) else float(v) for v in vals]
        for k, vals in score_values(
            np.stack([r.outcomes.totals() for r in reps]), num_classes, LEADERBOARD_SCORES
        ).items()
    }
    own = reps[0].results.scores.estimates
    if len(reps) == 1 and all(k in own for k in LEADERBOARD_SCORES):
        estimates: Mapping[str, Any] = own
    else:
        estimates = bootstrap_scores(
            [r.outcomes for r in reps],
            num_classes,
            LEADERBOARD_SCORES,
            n_boot=settings.n_boot,
            seed=settings.seed,
            level=settings.level,
            context={"budget": reps[0].results.config.budget},
        )
    out = {}
    for k in LEADERBOARD_SCORES:
        defined = [v for v in per_rep[k] if v is not None]
        std = float(np.std(defined, ddof=1)) if len(defined) > 1 else None
        out[k] = MetricEntry.of(estimates[k], per_rep[k], std)
    return out


def _mean(values: Sequence[float | None]) -> float | None:
    defined = [v for v in values if v is not None]
    return float(np.mean(defined)) if defined else None


def _cost_and_label_free(reps: list[RunDir], num_classes: int) -> dict[str, float | None]:
    """Run cost (rejections and steps per sample, run time) and hard-label SoftmaxCorr, means over repetitions."""

    def steps(run: RunDir) -> float | None:
        judged = [r.accepted_steps + (r.rejected_at > 0) for r in run.samples]
        return float(np.mean(judged)) if judged else None

    def corr(o: Outcomes) -> float | None:
        v = o.validated
        return hard_softmax_corr(o.predictions[v], o.references[v], num_classes)

    timings = [r.results.timings for r in reps]
    return {
        "rejected_per_sample": _mean([float(r.outcomes.rejected.mean()) if len(r.outcomes) else None for r in reps]),
        "steps_per_sample": _mean([steps(r) for r in reps]),
        "time_s": _mean([t.get("total_s") for t in timings]),
        "time_per_sample_s": _mean([t.get("per_sample_s") for t in timings]),
        "softmax_corr": _mean([corr(r.outcomes) for r in reps]),
    }


@dataclass(frozen=True)
class Ranks:
    """Competition ranks per model: by the comparison's ranking score (``rank_by``), by FMR and by SA."""

    by: dict[str, int | None]
    fmr: dict[str, int | None]
    sa: dict[str, int | None]


def order_models(
    values: Mapping[str, float | None], entries: Mapping[str, Mapping[str, MetricEntry]]
) -> tuple[list[str], Ranks]:
    """Models sorted by the rank of ``values`` (the ranking score; ties and undefined by name), with that rank
    and the FMR and SA ranks."""
    models = list(entries)
    ranks = Ranks(
        dict(zip(models, rank([values[m] for m in models]))),
        dict(zip(models, rank([entries[m]["fmr"].value for m in models]))),
        dict(zip(models, rank([entries[m]["sa"].value for m in models]))),
    )
    order = sorted(models, key=lambda m: (ranks.by[m] is None, ranks.by[m] or 0, m))
    return order, ranks


def effective_robustness(
    models: list[str],
    entries: Mapping[str, Mapping[str, MetricEntry]],
    base: set[str],
    er_min_r2: float,
    draws: np.ndarray,
    n_sources: int,
    scale: str = "logit",
    floor: float = ACCURACY_FLOOR,
) -> ERFit:
    """ER over the named baselines (none named: left out), with its bootstrap interval over the sources; per model
    in the order of ``models`` (``draws`` (B, M, S) holds SA and PA as its first two scores, same order). ``scale``:
    the axes of the line (logit | probit); baselines with SA below ``floor`` percent are left out with a note."""
    if not base:
        return ERFit.unfitted(len(models), NO_BASELINES, min_r2=er_min_r2, space=scale, floor=floor)
    er = fit_effective_robustness(
        [entries[m]["sa"].value for m in models],
        [entries[m]["pa"].value for m in models],
        [m in base for m in models],
        min_r2=er_min_r2,
        scale=scale,
        floor=floor,
        names=models,
    )
    if n_sources < MIN_BOOTSTRAP_SOURCES:
        return er_intervals(er, draws[:0, :, 0], draws[:0, :, 1], how=few_sources(n_sources))
    return er_intervals(er, draws[:, :, 0], draws[:, :, 1])


def leaderboard_rows(
    runs: Mapping[str, list[RunDir]],
    entries: Mapping[str, dict[str, MetricEntry]],
    order: list[str],
    ranks: Ranks,
    base: set[str],
    er: ERFit,
    num_classes: int,
) -> list[LeaderboardRow]:
    """Leaderboard rows in ``order`` with ranks, ER (and its interval; ``er`` in ``order``), run cost and the
    label-free score."""
    rows = []
    for i, m in enumerate(order):
        reps = runs[m]
        rf, rs = ranks.fmr[m], ranks.sa[m]
        pa = entries[m]["pa"]
        n_validated = float(np.mean([r.outcomes.validated.sum() for r in reps]))
        warnings = (
            [
                "PA is 100: every accepted image is still correct for this model; it may be (part of) the "
                "oracle, which makes its PA and FMR meaningless."
            ]
            if pa.value == 100.0 and n_validated
            else []
        )
        rows.append(
            LeaderboardRow(
                model=m,
                scores=entries[m],
                rank_fmr=rf,
                rank_sa=rs,
                rank_diff=None if rf is None or rs is None else rs - rf,
                baseline=m in base,
                repetitions=len(reps),
                n=float(np.mean([len(r.outcomes) for r in reps])),
                n_validated=n_validated,
                er=er.er[i],
                er_predicted_pa=er.predicted[i],
                er_low=er.er_low[i] if er.er_low else None,
                er_high=er.er_high[i] if er.er_high else None,
                **_cost_and_label_free(reps, num_classes),
                components=reps[0].results.components,
                seeds=[r.results.seed for r in reps],
                run_dirs=[str(r) for r in reps],
                warnings=warnings,
                rank=ranks.by[m],
            )
        )
    return rows
