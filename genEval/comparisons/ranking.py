"""Which score orders a comparison (``rank_by``), why, and its values per model, per repetition and per resample.

The paper ranks interventions by FMR = 100 PA / SA (Tables 2-3). PA counts only the samples the oracle
vouched for while SA counts all of them, and the oracle removes exactly the hard images, so FMR rewards a
model that is wrong on the images the oracle cannot vouch for: measured on CIFAR-10 (three models none of which
is in the oracle, docs/comparing.md), a small CNN with SA 56.0 ranked first by FMR (113.95) above two ResNets with SA
81.5 and 83.0 (FMR 106.8 and 105.7), while FMR_v = 100 PA / SA_v, with SA_v over the same validated samples as PA,
put the three within a point. The default therefore ranks by FMR_v, a score over comparable populations; the
paper's FMR stays in every table (and its rank in ``rank_fmr``), and any leaderboard score or effective
robustness can order the leaderboard instead (``rank_by=``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from genEval.comparisons.leaderboard import MetricEntry, score_label
from genEval.scores.definitions import LEADERBOARD_SCORES
from genEval.scores.effective_robustness import ERFit, er_draws, fit_effective_robustness

DEFAULT_RANK_BY = "fmr_validated"
#: Why a score orders a leaderboard (stated in the leaderboard, the report and the service).
_WHY = {
    "fmr_validated": (
        "FMR_v = 100 PA / SA_v compares like with like: PA and SA_v are measured on the same validated samples, "
        "so a model gains nothing from the images the oracle removed (the paper's FMR divides by SA over all "
        "samples and can rank a weaker model first)"
    ),
    "fmr": (
        "the paper's FMR = 100 PA / SA (Tables 2-3); PA counts only the samples the oracle vouched for and SA all "
        "of them, so FMR can favour a model that is wrong on the images the oracle removes (FMR_v does not)"
    ),
    "fmr_chance_corrected": "FMR with chance accuracy (100/C) taken off PA and SA, so guessing earns nothing",
    "pa": "PA, the accuracy on the validated perturbed images, regardless of clean accuracy",
    "sa": "SA, the clean accuracy (not a robustness score)",
    "sa_validated": "SA_v, the clean accuracy on the validated samples (not a robustness score)",
    "er": (
        "effective robustness: PA above what the baseline models' logit(SA)-logit(PA) line predicts from the "
        "model's SA, so accuracy alone earns nothing"
    ),
}
RANK_SCORES = (*LEADERBOARD_SCORES, "er")


def check_rank_by(rank_by: str) -> str:
    """``rank_by`` if it names a score a leaderboard can be ordered by, else a ValueError listing them."""
    if rank_by not in RANK_SCORES:
        raise ValueError(
            f"unknown rank_by={rank_by!r}; rank by one of {', '.join(RANK_SCORES)} "
            f"(default {DEFAULT_RANK_BY}: a score over comparable populations)."
        )
    return rank_by


def rank_reason(rank_by: str) -> str:
    """One sentence: why this score orders the leaderboard (what it rewards)."""
    return _WHY.get(rank_by, f"{score_label(rank_by)}, higher first")


def rank_values(
    rank_by: str, models: Sequence[str], entries: Mapping[str, Mapping[str, MetricEntry]], er: ERFit
) -> list[float | None]:
    """The point value of the ranking score per model (``models`` in the order of ``er``)."""
    if rank_by == "er":
        return list(er.er)
    return [entries[m][rank_by].value for m in models]


def rank_draws(rank_by: str, keys: Sequence[str], draws: np.ndarray, er: ERFit) -> np.ndarray:
    """The ranking score in every bootstrap draw, (B, M): a column of ``draws`` (B, M, len(keys)) from
    :func:`genEval.scores.intervals.model_draws`, or ER with the line refitted per draw (``keys`` then holds
    ``sa`` and ``pa``)."""
    if rank_by == "er":
        sa, pa = draws[:, :, list(keys).index("sa")], draws[:, :, list(keys).index("pa")]
        return er_draws(er.fitted_on, sa, pa, er.clip, er.space)
    return draws[:, :, list(keys).index(rank_by)]


def rank_per_rep(
    rank_by: str, models: Sequence[str], entries: Mapping[str, Mapping[str, MetricEntry]], er: ERFit
) -> np.ndarray:
    """(M, R) values of the ranking score per repetition (NaN = undefined), for the stability across repetitions.

    ER per repetition refits the baseline line on that repetition's SA and PA (its values are compared between
    repetitions only, so the fit-quality gate of the reported ER does not apply)."""
    n_reps = min(len(entries[m]["sa"].per_rep) for m in models)

    def arr(values: Sequence[float | None]) -> np.ndarray:
        return np.array([np.nan if v is None else v for v in values], dtype=float)

    if rank_by != "er":
        return np.stack([arr(entries[m][rank_by].per_rep[:n_reps]) for m in models]) if models else np.zeros((0, 0))
    out = np.full((len(models), n_reps), np.nan)
    for r in range(n_reps):
        fit = fit_effective_robustness(
            [entries[m]["sa"].per_rep[r] for m in models],
            [entries[m]["pa"].per_rep[r] for m in models],
            er.baselines,
            min_r2=0.0,
            min_baselines=er.min_baselines,
            clip=er.clip,
            scale=er.space,
            floor=er.floor,
        )
        out[:, r] = arr(fit.er_untrusted)
    return out
