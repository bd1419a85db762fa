"""The L1 fit itself: one L1-regularised logistic regression, and how its strength ``C`` is chosen (paper App. I).

:func:`fit_once` fits one ``LogisticRegression`` with a pure L1 penalty (the paper's "LASSO", solver saga) on
standardised latents; :func:`search_C` chooses ``C`` for a target sparsity or held-out score (a log grid refined
by bisection in log C); :func:`auto_C` is ``C="auto"``: ``C=1`` unless that selects no dim, then the least
regularised C whose mask is at least :data:`AUTO_SPARSITY` zeros. :func:`genEval.masks.fit.fit_style_mask` uses them.

scikit-learn API churn is fenced here: 1.8 deprecated ``penalty=`` (removed in 1.10); a pure L1 penalty is spelled
``l1_ratio=1`` from 1.8 on, ``penalty="l1"`` before. scikit-learn (about two seconds to import) is imported inside
the functions that fit, so that a run without a mask does not pay for it.
"""

from __future__ import annotations

import logging
import math
import re
import time
import warnings
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

SOLVERS = ("saga", "liblinear")
_C_GRID = tuple(float(c) for c in np.logspace(-4, 2, 13))  # half-decade steps from 1e-4 to 1e2
_BISECT_STEPS = 8
AUTO = "auto"
AUTO_C = 1.0  # what C="auto" tries first: the fit it keeps whenever it selects a dim
AUTO_SPARSITY = 0.98  # C="auto"'s target when C=1 selects nothing: the paper's masks are 98-99% zeros


def sklearn_version() -> str:
    import sklearn  # slow import, see the module docstring

    return sklearn.__version__


def _version_tuple(v: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", v)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _l1_penalty_kwargs(version: str | None = None) -> dict[str, Any]:
    """The keyword(s) that ask ``LogisticRegression`` for a pure L1 penalty in this scikit-learn version."""
    if _version_tuple(version or sklearn_version()) >= (1, 8):
        return {"l1_ratio": 1.0}  # 1.8 deprecated `penalty`; l1_ratio=1 is pure L1
    return {"penalty": "l1"}


def _make_logreg(C: float, solver: str, seed: int, max_iter: int, tol: float):
    from sklearn.linear_model import LogisticRegression  # slow import, see the module docstring

    return LogisticRegression(C=C, solver=solver, max_iter=max_iter, tol=tol, random_state=seed, **_l1_penalty_kwargs())


def fit_once(data: dict[str, np.ndarray], C: float, solver: str, seed: int, max_iter: int, tol: float):
    """One L1 logistic regression; returns the model and a JSON-ready summary of it."""
    from sklearn.exceptions import ConvergenceWarning  # slow import, see the module docstring

    clf = _make_logreg(C, solver, seed, max_iter, tol)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.fit(data["x_train"], data["y_train"])
    converged = True
    for w in caught:
        if issubclass(w.category, ConvergenceWarning):
            converged = False  # reported once, in words, by the caller; recorded in the mask
        else:  # anything else is not ours to swallow
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    nz = int(np.count_nonzero(clf.coef_[0]))
    n_dims = clf.coef_.shape[1]
    info = {
        "C": float(C),
        "n_selected": nz,
        "sparsity": 100.0 * (n_dims - nz) / n_dims,
        "heldout_accuracy": 100.0 * float(clf.score(data["x_test"], data["y_test"])),
        "train_accuracy": 100.0 * float(clf.score(data["x_train"], data["y_train"])),
        "converged": converged,
        "seconds": round(time.perf_counter() - t0, 4),
    }
    log.debug("style mask fit %s", info)
    return clf, info


def search_C(data, *, solver, seed, max_iter, tol, target_sparsity, target_score):
    """Choose ``C`` on a log grid refined by bisection in log C; returns (model, info, path).

    ``target_sparsity`` (fraction): the largest C (least regularised) whose sparsity still reaches it and that
    keeps at least one dim. ``target_score`` (percent): the smallest C (sparsest) whose held-out score
    reaches it. The bisection runs on the bound alone (sparse enough / accurate enough), which holds on one
    side of a boundary in C; the pick is then the best fit tried that also keeps at least one dim.
    """
    path: list[dict[str, Any]] = []
    fits: dict[float, tuple[Any, dict]] = {}

    def run(c: float) -> dict:
        if c not in fits:
            fits[c] = fit_once(data, c, solver, seed, max_iter, tol)
            path.append(fits[c][1])
        return fits[c][1]

    by_sparsity = target_sparsity is not None
    if by_sparsity:

        def bound(info: dict) -> bool:  # holds for small C
            return info["sparsity"] >= 100.0 * target_sparsity
    else:

        def bound(info: dict) -> bool:  # holds for large C
            return info["heldout_accuracy"] >= target_score

    grid = [(c, run(c)) for c in _C_GRID]
    inside = [c for c, info in grid if bound(info)]
    if not inside and not by_sparsity:
        best_c, best = max(grid, key=lambda ci: (ci[1]["heldout_accuracy"], -ci[1]["n_selected"]))
        raise ValueError(
            f"no C in {_C_GRID[0]:g}..{_C_GRID[-1]:g} reaches target_score={target_score}% held-out "
            f"accuracy; the best was {best['heldout_accuracy']:.1f}% at C={best_c:.4g} ({best['n_selected']} "
            "dims). Lower target_score, give C directly, or fit on more samples (raise data.limit)."
        )
    if inside:
        good = max(inside) if by_sparsity else min(inside)
        across = [c for c in _C_GRID if (c > good if by_sparsity else c < good)]
        if across:
            bad = min(across) if by_sparsity else max(across)
            for _ in range(_BISECT_STEPS):
                mid = math.sqrt(good * bad)
                if bound(run(mid)):
                    good = mid
                else:
                    bad = mid
    usable = [c for c, (_, info) in fits.items() if bound(info) and info["n_selected"] >= 1]
    if not usable:
        dims = data["x_train"].shape[1]
        raise ValueError(
            f"no C in {_C_GRID[0]:g}..{_C_GRID[-1]:g} reaches target_sparsity={target_sparsity} while "
            f"keeping a style dim: the latent has {dims} dims, so at most "
            f"{math.floor(dims * (1 - target_sparsity))} may stay selected, and the fits jump from 0 to more "
            "dims. Lower target_sparsity or give C directly (see the search path in the log)."
        )
    chosen = max(usable) if by_sparsity else min(usable)
    clf, info = fits[chosen]
    return clf, info, path


def auto_C(data, *, solver, seed, max_iter, tol):
    """``C="auto"``: ``C=1`` when it selects a dim, else the least regularised C whose mask is at least
    ``AUTO_SPARSITY`` zeros and keeps a dim. Returns (model, info, path) with every fit in the path.

    Above C=1 the grid of :func:`search_C` is walked upwards and stops at the first fit that is too dense (L1 fits
    only get denser as C grows), then bisection in log C refines the boundary: the dense fits at large C, which
    are the slow ones, are never made.
    """
    fits = {AUTO_C: fit_once(data, AUTO_C, solver, seed, max_iter, tol)}
    path = [fits[AUTO_C][1]]
    if path[0]["n_selected"] > 0:
        return *fits[AUTO_C], path
    log.warning(
        "style mask: C=%g selects no latent dim on %d training samples (the L1 term outweighs a loss summed over "
        "so few); choosing C automatically: the least regularised C whose mask is at least %.0f%% zeros, the "
        "paper's sparsity. Give C=<number> to fix it, or fit on more samples (raise data.limit).",
        AUTO_C,
        len(data["y_train"]) // 2,
        100 * AUTO_SPARSITY,
    )

    def sparse_enough(c: float) -> bool:
        if c not in fits:
            fits[c] = fit_once(data, c, solver, seed, max_iter, tol)
            path.append(fits[c][1])
        return fits[c][1]["sparsity"] >= 100.0 * AUTO_SPARSITY

    good, bad = AUTO_C, None
    for c in (c for c in _C_GRID if c > AUTO_C):
        if not sparse_enough(c):
            bad = c
            break
        good = c
    if bad is not None:
        for _ in range(_BISECT_STEPS):
            mid = math.sqrt(good * bad)
            good, bad = (mid, bad) if sparse_enough(mid) else (good, mid)
    usable = [c for c, (_, info) in fits.items() if info["n_selected"] >= 1 and sparse_enough(c)]
    if not usable:
        dims = data["x_train"].shape[1]
        raise ValueError(
            f"C=auto: C={AUTO_C:g} selects no style dim and no C up to {_C_GRID[-1]:g} selects one while keeping "
            f"{100 * AUTO_SPARSITY:.0f}% of the {dims} dims zero (the fits jump from 0 to more dims). Give C "
            "directly (mask.C / C=<number>), or C=null with another target_sparsity, or fit on more samples."
        )
    return *fits[max(usable)], path
