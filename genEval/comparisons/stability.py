"""How stable a comparison's ranking is (docs/method.md, "Rank stability"; Shi et al. 2023, App. A.2).

Kendall tau-b between the rankings of every pair of repetitions by the ranking score (``rank_by``,
:mod:`genEval.comparisons.ranking`), its bootstrap distribution over source images
(:func:`genEval.scores.rankings.rank_stability`), Kendall tau between the FMR and SA rankings and between the
ranking score's and FMR's, and every pair of models whose order flips between repetitions, with the warnings
they call for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations

import numpy as np

from genEval.comparisons.leaderboard import (
    Flip,
    LeaderboardRow,
    Stability,
    TauPair,
    score_label,
)
from genEval.runs.reader import RunDir
from genEval.scores.rankings import (
    Difference,
    TauDistribution,
    kendall_tau,
)


def identical_repetitions(runs: Mapping[str, list[RunDir]]) -> bool:
    """True when some model has >= 2 repetitions and all of every model's repetitions are identical."""
    keys = ("source_id", "clean_pred", "recon_pred", "validated", "accepted_steps", "final_pred", "first_fooled")
    multi = [reps for reps in runs.values() if len(reps) > 1]
    if not multi:
        return False

    def sig(run: RunDir) -> list[tuple]:
        return [tuple(getattr(rec, k) for k in keys) for rec in run.samples]

    return all(sig(r) == sig(reps[0]) for reps in multi for r in reps[1:])


def _flips(models: list[str], per_rep: np.ndarray, diffs: Sequence[Difference], score: str) -> list[Flip]:
    """Pairs of models whose order by ``score`` differs between repetitions; per_rep: (models, repetitions), NaN =
    undefined."""
    separated = {(d.a, d.b): d.excludes_zero for d in diffs if d.metric == score}
    out = []
    for i, j in combinations(range(len(models)), 2):
        d = per_rep[i] - per_rep[j]
        hi_a, hi_b = [int(r) for r in np.nonzero(d > 0)[0]], [int(r) for r in np.nonzero(d < 0)[0]]
        if hi_a and hi_b:
            a, b = models[i], models[j]
            out.append(Flip(a, b, hi_a, hi_b, separated.get((a, b), separated.get((b, a)))))
    return out


def sources_resampled(runs: Mapping[str, list[RunDir]]) -> bool | None:
    """Whether some model's repetitions evaluated different source images; None below 2 repetitions."""
    multi = [reps for reps in runs.values() if len(reps) > 1]
    if not multi:
        return None
    return any(len({frozenset(r.outcomes.ids.tolist()) for r in reps}) > 1 for reps in multi)


def stability(
    rows: Sequence[LeaderboardRow],
    diffs: Sequence[Difference],
    identical: bool = False,
    tau_bootstrap: TauDistribution | None = None,
    resampled: bool | None = None,
    *,
    score: str = "fmr",
    per_rep: np.ndarray | None = None,
) -> Stability:
    """Kendall tau between repetitions' rankings by ``score``, its bootstrap distribution (``tau_bootstrap``),
    FMR-vs-SA tau, ranking-score-vs-FMR tau, and order flips. ``per_rep``: (models, repetitions) values of
    ``score`` in the order of ``rows`` (NaN = undefined); default: the rows' own per-repetition values of it."""
    models = [r.model for r in rows]
    n_reps = min(len(r["fmr"].per_rep) for r in rows)
    if per_rep is None:
        per_rep = np.array([[np.nan if v is None else v for v in r[score].per_rep[:n_reps]] for r in rows], dtype=float)
    taus = []
    for r1, r2 in combinations(range(n_reps), 2):
        ok = ~np.isnan(per_rep[:, r1]) & ~np.isnan(per_rep[:, r2])
        tau = kendall_tau(per_rep[ok, r1], per_rep[ok, r2]) if ok.sum() >= 2 else None
        taus.append(TauPair([r1, r2], tau, int(ok.sum())))
    defined = [t.tau for t in taus if t.tau is not None]
    both = [r for r in rows if r["fmr"].value is not None and r["sa"].value is not None]
    ranked = [r for r in rows if r.rank is not None and r.rank_fmr is not None]
    note = (
        "needs at least 2 repetitions"
        if n_reps < 2
        else f"needs at least 2 models with {score} defined in two repetitions"
        if not defined
        else ""
    )
    return Stability(
        repetitions=n_reps,
        tau_reps=taus,
        tau_reps_mean=float(np.mean(defined)) if defined else None,
        tau_reps_min=float(np.min(defined)) if defined else None,
        tau_reps_note=note,
        tau_fmr_sa=kendall_tau([r["fmr"].value for r in both], [r["sa"].value for r in both])
        if len(both) >= 2
        else None,
        flips=_flips(models, per_rep, diffs, score),
        identical_repetitions=identical,
        tau_bootstrap=tau_bootstrap,
        sources_resampled=resampled,
        score=score,
        # ranks, not values: -rank orders like the score (competition ranks share ties)
        tau_rank_fmr=kendall_tau([-r.rank for r in ranked], [-r.rank_fmr for r in ranked])
        if len(ranked) >= 2
        else None,
    )


def stability_warnings(stab: Stability) -> list[str]:
    out = []
    if stab.identical_repetitions:
        out.append(
            "every repetition produced the same per-sample outcomes (the search has no randomness, e.g. "
            "search.start_noise=0, and the data are the same), so rank stability is trivially perfect; set "
            "search.start_noise > 0 for repetitions that differ, or use repetitions=1."
        )
    elif stab.sources_resampled is False:
        out.append(
            "every repetition evaluated the same source images (the data were not re-drawn: use "
            "data.subset=random with data.limit, or data with a with_seed(seed) hook), so tau between "
            "repetitions reflects the start noise only; the bootstrap distribution over source images "
            "measures the sampling of sources."
        )
    if stab.flips:
        out.append(
            f"{len(stab.flips)} pair(s) of models change {score_label(stab.score)} order between repetitions; their "
            "ranking is not stable (see stability.flips and the paired differences)."
        )
    return out
