"""A comparison's confidence columns and its label-free ranking (docs/scores.md; S1 Tu et al. 2024, S2 Hendrycks et al.
2021; docs/scores.md, "Label-free" and "Confidence").

:func:`confidence_fields` gives a leaderboard row its label-free measures (:mod:`genEval.scores.label_free`:
SoftmaxCorr, MaxPred, SoftGap, ATC-MC, agreement with the oracle, each the mean over the model's repetitions of the
measure on its validated perturbed images) and its runs' selective prediction, calibration and -MSP detection
scores (:mod:`genEval.scores.confidence`, read from each run's results, means over repetitions). A run whose
records hold no confidence (written before confidence was recorded) gives None: "not recorded".

:func:`label_free_section` checks every measure's ranking against PA and FMR_v over the models (Spearman rho and
weighted tau_w) and, with ``label_free_sensitivity``, runs the paper's subsample and model-dropping protocol on the
comparison's sources (seeded by the comparison's bootstrap seed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from genEval.comparisons.leaderboard import LabelFree, LeaderboardRow
from genEval.runs.reader import RunDir
from genEval.scores.confidence import Confidences
from genEval.scores.label_free import MEASURES, TRUTHS, label_free_ranking, label_free_scores, sensitivity

#: The confidence columns of a leaderboard row read from each run's results.json ``confidence`` (part, score).
RUN_CONFIDENCE = {
    "aurra_clean": ("clean", "aurra"),
    "aurra_perturbed": ("perturbed", "aurra"),
    "calibration_error_clean": ("clean", "calibration_error"),
    "calibration_error_perturbed": ("perturbed", "calibration_error"),
    "shift_auroc": ("shift", "auroc"),
    "ood_aupr": ("ood", "aupr"),
    "ood_auroc": ("ood", "auroc"),
}
METHOD = (
    "each model's validated perturbed images; softmax rows from the records (the whole vector for <= 100 classes), "
    "q = the oracle's class histogram on the same images (no labels); ATC-MC's threshold from the model's clean "
    "images; mean over repetitions"
)


def _mean(values: Sequence[float | None]) -> float | None:
    defined = [v for v in values if v is not None]
    return float(np.mean(defined)) if defined else None


def _confidences(run: RunDir) -> Confidences:
    return Confidences.of(run.samples)


def confidence_fields(reps: Sequence[RunDir], num_classes: int) -> dict[str, float | None]:
    """A model's label-free measures and run confidence scores (means over ``reps``; None: not recorded)."""
    per_rep = [label_free_scores(c, num_classes) if len(c := _confidences(r)) else None for r in reps]
    out: dict[str, float | None] = {m: _mean([p[m] for p in per_rep if p is not None]) for m in MEASURES}
    for key, (part, score) in RUN_CONFIDENCE.items():
        values = []
        for r in reps:
            got = getattr(r.results.confidence, part)
            values.append(None if got is None else getattr(got, score).value)
        out[key] = _mean(values)
    return out


def label_free_section(
    runs: Mapping[str, Sequence[RunDir]],
    rows: Sequence[LeaderboardRow],
    num_classes: int,
    *,
    with_sensitivity: bool = False,
    seed: int = 0,
) -> LabelFree:
    """The comparison's label-free diagnostic: every measure's rank agreement with PA and FMR_v over the models (in
    leaderboard order), the sensitivity protocol when asked for, and SoftmaxCorr's Spearman rho with PA (kept)."""
    models = [r.model for r in rows]
    confs = {m: [_confidences(run) for run in runs[m]] for m in models}
    not_recorded = [m for m in models if not any(len(c) for c in confs[m])]
    values = {name: [getattr(r, name) for r in rows] for name in MEASURES}
    truths = {t: [r[t].value for r in rows] for t in TRUTHS}
    sens = None
    if with_sensitivity:

        def measure_of(sources: np.ndarray | None) -> dict[str, list[float | None]]:
            keep = None if sources is None else set(map(str, sources))
            per_model = []
            for m in models:
                per_rep = [
                    label_free_scores(c, num_classes, None if keep is None else np.isin(c.ids, list(keep)))
                    for c in confs[m]
                    if len(c)
                ]
                per_model.append({n: _mean([p[n] for p in per_rep]) for n in MEASURES})
            return {n: [p[n] for p in per_model] for n in MEASURES}

        ids = sorted({str(i) for cs in confs.values() for c in cs for i in c.ids})
        sens = sensitivity(measure_of, ids, truths, seed=seed)
    ranking = label_free_ranking(values, truths, method=METHOD, not_recorded=not_recorded, sens=sens, seed=seed)
    pa = ranking.agreement["softmax_corr"]["pa"]
    n = int(pa["n_models"])
    reason = pa["reason"] if pa["rho"] is None else ""
    if not_recorded:
        reason = (
            reason + "; " if reason else ""
        ) + f"not recorded for {', '.join(not_recorded)} (runs before confidence was recorded)"
    return LabelFree(
        pa["rho"],
        n,
        METHOD,
        reason,
        measures=ranking.agreement,
        sensitivity=ranking.sensitivity,
        not_recorded=not_recorded,
    )
