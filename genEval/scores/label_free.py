"""Label-free ranking (S1, Tu et al., TMLR 2024; docs/method.md, "Label-free ranking").

:func:`softmax_corr` is SoftmaxCorr = cos(P^T P / N, diag(q)) of a model's softmax outputs ``P`` against an
estimated class prior ``q``; :func:`hard_softmax_corr` the same from hard decisions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def softmax_corr(probs: np.ndarray, prior: np.ndarray) -> float | None:
    """SoftmaxCorr (S1, Tu et al. 2024, Sec. 4.3): cos(C, diag(q)) with C = P^T P / N.

    ``probs``: (N, K) softmax outputs of a model (rows on the simplex); ``prior``: (K,) the estimated class
    marginal q (S1: the average softmax of a zero-shot VLM on the same images). Equals
    ``sum_k C_kk q_k / (||C||_F ||q||_2)`` in [0, 1]: 1 when every prediction is one-hot and the predicted
    class proportions match q. None without samples or with a zero prior.
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
    probs = np.eye(num_classes)[pred]
    prior = np.bincount(np.asarray(references, dtype=np.int64), minlength=num_classes) / len(pred)
    return softmax_corr(probs, prior)
