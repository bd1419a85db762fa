"""Label-free ranking (S1: Tu et al., *What Does Softmax Probability Tell Us about Classifiers Ranking Across Diverse
Test Conditions?*, TMLR 2024; docs/method.md, "Label-free ranking"; docs/scores.md, "Label-free").

A label-free measure scores a model from its softmax outputs ``P`` (N, K) on unlabelled test images; the paper
ranks models by it and checks the ranking against their true accuracy. genEval's test images are a model's
validated perturbed images (the population of PA), the measures are computed from the probabilities the records
hold (:data:`genEval.scores.outcomes.TOP_K` and, for K <= 100, the whole vector), and none of them reads a label:

* :func:`softmax_corr`: SoftmaxCorr = cos(C, diag(q)) with C = P^T P / N (Sec. 4.3), q the class prior estimated
  from the reference model on the same images. The paper's q is a VLM's mean softmax; genEval's reference is the
  oracle, whose records keep its class for each image (``oracle_final_pred``), so q is the histogram of the
  oracle's predictions (:func:`oracle_prior`); never the labels.
* :func:`max_pred` (mean top-1 probability), :func:`soft_gap` (mean top-1 minus top-2), :func:`atc_mc` (Garg et al.
  2022: the threshold t of the model's clean, labelled source images at which as many of them fall below t as it
  gets wrong; the predicted accuracy on the target is the share at or above t) and :func:`oracle_agreement` (the
  share of images where the model's class is the oracle's; the paper's "disagreement with the VLM" negated).

On a validated image the oracle sees the reference class (that is what validated means), so under the default
``oracle.reference=label`` its classes are the labels of those images: q is then their label histogram and agreement
with the oracle equals PA, by construction rather than by reading a label (docs/scores.md, "Label-free").

:func:`rank_agreement` is the paper's evaluation of a measure over M models: Spearman rho and the weighted Kendall
tau_w (``scipy.stats.weightedtau``, the hyperbolic weigher, which weighs the top of the ranking most) against a
ground truth (PA, FMR_v). :func:`sensitivity` is its protocol (Sec. 5.3 and App. A.2): recompute the measures on
random 1/5/10/30% of the sources (3 seeded runs each), and the rank agreement after keeping 20/50/70% of the models.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from genEval.scores.confidence import Confidences

#: The label-free measures, in the order of the tables (name -> what it is).
MEASURES = {
    "softmax_corr": "SoftmaxCorr: cos(P^T P / N, diag(q)), q the oracle's class histogram",
    "max_pred": "MaxPred: mean top-1 softmax probability",
    "soft_gap": "SoftGap: mean top-1 minus top-2 probability",
    "atc_mc": "ATC-MC: share at or above the clean images' error-matching threshold",
    "oracle_agreement": "agreement with the oracle: share of images where the model's class is the oracle's",
}
#: Ground truths a measure's ranking is checked against (leaderboard score keys).
TRUTHS = ("pa", "fmr_validated")
#: The paper's subsample fractions of the test set (Table 3) and kept fractions of the models (Tables 5-6).
SUBSAMPLES = (0.01, 0.05, 0.10, 0.30)
KEPT_MODELS = (0.20, 0.50, 0.70)
#: Seeded runs per fraction (the paper's three).
RUNS = 3


# ------------------------------------------------------------------------------------------ the measures
def softmax_corr(probs: np.ndarray, prior: np.ndarray) -> float | None:
    """SoftmaxCorr (S1, Sec. 4.3): cos(C, diag(q)) with C = P^T P / N.

    ``probs``: (N, K) softmax outputs of a model (rows on the simplex); ``prior``: (K,) the estimated class
    marginal q. Equals ``sum_k C_kk q_k / (||C||_F ||q||_2)`` in [0, 1]: 1 when every prediction is one-hot and the
    predicted class proportions match q. None without samples or with a zero prior.
    """
    p = np.asarray(probs, dtype=float)
    q = np.asarray(prior, dtype=float).reshape(-1)
    if p.ndim != 2 or p.shape[1] != len(q):
        raise ValueError(f"softmax_corr needs probs (N, K) and prior (K,), got {p.shape} and {q.shape}.")
    if len(p) == 0 or not np.any(q):
        return None
    c = p.T @ p / len(p)
    return float(np.dot(np.diag(c), q) / (np.linalg.norm(c) * np.linalg.norm(q)))


def hard_softmax_corr(predictions: Sequence[int], references: Sequence[int], num_classes: int) -> float | None:
    """SoftmaxCorr from hard decisions: ``P`` = one-hot rows of the model's predicted classes and ``q`` = the
    class histogram of ``references`` (e.g. the oracle's verdicts on the same images). It reduces to the
    cosine between the predicted-class and the reference-class distributions (the certainty term is 1)."""
    pred = np.asarray(predictions, dtype=np.int64)
    if len(pred) == 0:
        return None
    return softmax_corr(np.eye(num_classes)[pred], oracle_prior(references, num_classes))


def oracle_prior(oracle_predictions: Sequence[int], num_classes: int) -> np.ndarray:
    """q: the share of the images the reference model (the oracle) assigns to each class, (K,) (unknown entries,
    -1, are left out)."""
    pred = np.asarray(oracle_predictions, dtype=np.int64)
    pred = pred[(pred >= 0) & (pred < num_classes)]
    return np.bincount(pred, minlength=num_classes) / max(1, len(pred))


def probability_rows(
    top_probs: Sequence[Sequence[float]], top_classes: Sequence[Sequence[int]], num_classes: int
) -> np.ndarray:
    """Softmax rows (N, K) from each record's top-k: the top-k probabilities at their classes and the rest of the
    row's mass spread evenly over the other classes (exact when k = K; for K > 100, where a record keeps only its
    top-k, SoftmaxCorr is then approximate by at most the tail mass)."""
    out = np.zeros((len(top_probs), num_classes))
    for i, (p, c) in enumerate(zip(top_probs, top_classes)):
        rest, others = max(0.0, 1.0 - float(np.sum(p))), num_classes - len(c)
        if others:
            out[i] = rest / others
        out[i, list(c)] = p
    return out


def max_pred(msp: np.ndarray) -> float | None:
    """MaxPred: the mean top-1 softmax probability, in [0, 1]."""
    return float(np.mean(msp)) if len(msp) else None


def soft_gap(msp: np.ndarray, second: np.ndarray) -> float | None:
    """SoftGap: the mean gap between the top-1 and the top-2 softmax probability, in [0, 1]."""
    return float(np.mean(np.asarray(msp) - np.asarray(second))) if len(msp) else None


def atc_threshold(source_msp: np.ndarray, source_correct: np.ndarray) -> float:
    """ATC-MC's threshold t (Garg et al. 2022): on labelled source images, as many have a top-1 probability below t
    as the model gets wrong (t = the (e+1)-th smallest confidence for e errors; +inf when every one is wrong)."""
    conf = np.sort(np.asarray(source_msp, dtype=float))
    errors = int(len(conf) - np.sum(source_correct))
    return float("inf") if errors >= len(conf) else float(conf[errors])


def atc_mc(target_msp: np.ndarray, threshold: float) -> float | None:
    """ATC-MC's predicted accuracy on the target images: the share whose top-1 probability is at least ``threshold``
    (1 - ATC, ATC = E[1{max P < t}]), in [0, 1]."""
    return float(np.mean(np.asarray(target_msp) >= threshold)) if len(target_msp) else None


def oracle_agreement(predictions: np.ndarray, oracle_predictions: np.ndarray) -> float | None:
    """The share of images on which the model's class equals the oracle's, in [0, 1]."""
    return float(np.mean(np.asarray(predictions) == np.asarray(oracle_predictions))) if len(predictions) else None


def label_free_scores(c: Confidences, num_classes: int, keep: np.ndarray | None = None) -> dict[str, float | None]:
    """Every measure of :data:`MEASURES` for one run, on its validated perturbed images (those of ``keep`` too,
    when given: a subsample of the sources). ATC-MC's threshold comes from all the run's clean images."""
    v = c.validated if keep is None else c.validated & keep
    if c.final_probs is not None:
        probs = c.final_probs[v]
    else:
        idx = np.flatnonzero(v)
        probs = probability_rows(
            [c.final_top_probs[i] for i in idx], [c.final_top_classes[i] for i in idx], num_classes
        )
    return {
        "softmax_corr": softmax_corr(probs, oracle_prior(c.oracle_final_pred[v], num_classes)) if v.any() else None,
        "max_pred": max_pred(c.final_msp[v]),
        "soft_gap": soft_gap(c.final_msp[v], c.final_second[v]),
        "atc_mc": atc_mc(c.final_msp[v], atc_threshold(c.clean_msp, c.clean_correct)) if len(c) else None,
        "oracle_agreement": oracle_agreement(c.final_pred[v], c.oracle_final_pred[v]),
    }


# ------------------------------------------------------------------------------------------ evaluation
@dataclass(frozen=True)
class Agreement:
    """How well a measure ranks ``n_models`` models against a ground truth: Spearman ``rho`` and the weighted
    Kendall ``tau_w`` (None, with ``reason``, when undefined)."""

    rho: float | None
    tau_w: float | None
    n_models: int
    reason: str = ""


def rank_agreement(scores: Sequence[float | None], truth: Sequence[float | None]) -> Agreement:
    """Spearman rho (``scipy.stats.spearmanr``) and weighted tau_w (``scipy.stats.weightedtau``, its defaults) of
    ``scores`` against ``truth`` over the models where both are defined; rho needs 3 of them, tau_w 2, and neither
    is defined when one side is constant."""
    pairs = [(float(s), float(t)) for s, t in zip(scores, truth) if s is not None and t is not None]
    pairs = [(s, t) for s, t in pairs if math.isfinite(s) and math.isfinite(t)]
    n = len(pairs)
    if n < 2:
        return Agreement(None, None, n, f"needs at least 2 models with the measure and the truth defined, got {n}")
    x, y = (np.array(v) for v in zip(*pairs))
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return Agreement(None, None, n, "the measure or the truth is the same for every model")
    from scipy.stats import spearmanr, weightedtau  # slow import (about 0.8 s)

    tau = float(weightedtau(x, y).statistic)
    rho = float(spearmanr(x, y).statistic) if n >= 3 else None
    return Agreement(rho, tau, n, "" if rho is not None else "Spearman rho needs at least 3 models")


@dataclass(frozen=True)
class Sensitivity:
    """The paper's sensitivity protocol for one measure and one truth: ``subsample`` fraction -> mean rho and
    tau_w over the seeded runs (the measure recomputed on that share of the sources), ``kept_models`` fraction ->
    mean rho and tau_w over the runs (that share of the models kept); None where undefined in every run."""

    subsample: dict[str, dict[str, float | None]]
    kept_models: dict[str, dict[str, float | None]]


def _mean(values: Sequence[float | None]) -> float | None:
    defined = [v for v in values if v is not None]
    return float(np.mean(defined)) if defined else None


def _summary(agreements: Sequence[Agreement]) -> dict[str, float | None]:
    return {"rho": _mean([a.rho for a in agreements]), "tau_w": _mean([a.tau_w for a in agreements])}


def sensitivity(
    measure_of: Callable[[np.ndarray | None], Mapping[str, Sequence[float | None]]],
    source_ids: Sequence[str],
    truths: Mapping[str, Sequence[float | None]],
    *,
    seed: int = 0,
    subsamples: Sequence[float] = SUBSAMPLES,
    kept_models: Sequence[float] = KEPT_MODELS,
    runs: int = RUNS,
) -> dict[str, dict[str, Sensitivity]]:
    """The sensitivity protocol (S1 Sec. 5.3, App. A.2) of every measure against every truth.

    ``measure_of(sources)``: measure -> its value per model computed on the sources in ``sources`` (an array of
    source ids; None: all of them). ``source_ids``: every source of the comparison (the subsamples draw from them,
    at least one each); ``truths``: truth -> its value per model (full data). Draws are seeded by ``seed`` (run r of
    a fraction uses ``default_rng([seed, r, round(1000 * fraction)])``). Returns measure -> truth -> Sensitivity."""
    ids = np.asarray(sorted(set(map(str, source_ids))), dtype=object)
    full = measure_of(None)
    m = len(next(iter(truths.values()))) if truths else 0
    sub: dict[str, dict[str, dict[str, list[Agreement]]]] = {}
    for frac in subsamples:
        for r in range(runs):
            rng = np.random.default_rng([seed, r, round(1000 * frac)])
            take = rng.choice(ids, size=max(1, round(frac * len(ids))), replace=False) if len(ids) else ids
            values = measure_of(take)
            for name, vals in values.items():
                for t, truth in truths.items():
                    sub.setdefault(name, {}).setdefault(t, {}).setdefault(f"{frac:g}", []).append(
                        rank_agreement(vals, truth)
                    )
    kept: dict[str, dict[str, dict[str, list[Agreement]]]] = {}
    for frac in kept_models:
        k = int(frac * m + 0.5)
        for r in range(runs):
            rng = np.random.default_rng([seed, r, round(1000 * frac), 1])
            pick = np.sort(rng.choice(m, size=k, replace=False)) if 0 < k <= m else np.array([], dtype=int)
            for name, vals in full.items():
                for t, truth in truths.items():
                    kept.setdefault(name, {}).setdefault(t, {}).setdefault(f"{frac:g}", []).append(
                        rank_agreement([vals[i] for i in pick], [truth[i] for i in pick])
                    )
    return {
        name: {
            t: Sensitivity(
                {f: _summary(a) for f, a in sub.get(name, {}).get(t, {}).items()},
                {f: _summary(a) for f, a in kept.get(name, {}).get(t, {}).items()},
            )
            for t in truths
        }
        for name in full
    }


@dataclass(frozen=True)
class LabelFreeRanking:
    """The label-free measures of a comparison (comparison.json ``label_free``): ``agreement`` measure -> truth ->
    :class:`Agreement` (as dicts), ``sensitivity`` measure -> truth -> :class:`Sensitivity` (None unless asked for:
    ``label_free.sensitivity=true``), what the measures are computed on (``method``) and the models that recorded
    no confidence (``not_recorded``)."""

    agreement: dict[str, dict[str, dict[str, Any]]]
    method: str
    sensitivity: dict[str, dict[str, dict[str, Any]]] | None = None
    not_recorded: list[str] = field(default_factory=list)
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def label_free_ranking(
    values: Mapping[str, Sequence[float | None]],
    truths: Mapping[str, Sequence[float | None]],
    *,
    method: str,
    not_recorded: Sequence[str] = (),
    sens: Mapping[str, Mapping[str, Sensitivity]] | None = None,
    seed: int = 0,
) -> LabelFreeRanking:
    """The rank agreement of every measure (``values``: measure -> per model) with every truth (per model, same
    order), with the sensitivity protocol's results when computed."""
    agreement = {
        name: {t: asdict(rank_agreement(vals, truth)) for t, truth in truths.items()} for name, vals in values.items()
    }
    sensitivity_table = (
        None if sens is None else {n: {t: asdict(s) for t, s in by_truth.items()} for n, by_truth in sens.items()}
    )
    return LabelFreeRanking(agreement, method, sensitivity_table, list(not_recorded), seed)
