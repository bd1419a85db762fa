"""Fitting the sparse style mask (paper Sec. 3.2.1 and Appendix I): which latent dims the search may move.

The paper observes that perturbing every latent dim sometimes changes what an image depicts, so the oracle rejects
the step and the work is wasted. It therefore fits a sparse linear classifier that tells the encoder's latents
``E(x)`` (label 0) from the final perturbed latents (label 1) of a previous run. The dims with a non-zero weight are
the *style dims*; the loop then updates only those (``z <- z + a * step(g) * M`` in :mod:`genEval.search.perturb`).

Paper, Appendix I: a balanced two-class data set of flattened latents, a held-out split, an L1-regularised logistic
regression ("LASSO", solver saga). Reported sparsity (percent of zero weights) / held-out score: MNIST 97.99 / 78.5,
CIFAR-10 98.45 / 78.0, 9-class ImageNet 99.31 / 72.0, ImageNet 99.32 / 69.0.

Choices the paper leaves open (recorded in every mask file):

* Features are standardised (a ``StandardScaler`` fitted on the training split) so that ``C`` means the same for
  every generator regardless of the scale of its latents.
* The held-out split is by *source sample*: both latents of a sample land on the same side, so the test score never
  rewards recognising a sample seen in training.
* ``C`` is scikit-learn's inverse regularisation strength (the loss is summed over the training rows); how it is
  chosen (given, searched for a target, or ``"auto"``) is :mod:`genEval.masks.regularisation`.
"""

from __future__ import annotations

import logging
import math
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from genEval.masks.format import StyleMask
from genEval.masks.regularisation import AUTO, SOLVERS, auto_C, fit_once, search_C, sklearn_version
from genEval.runs.parts import LATENTS
from genEval.runs.reader import PARTIAL, RunDir

log = logging.getLogger(__name__)

MIN_SAMPLES = 10


def _as_float_array(x: Any, name: str) -> np.ndarray:
    if isinstance(x, Tensor):
        x = x.detach().cpu().float().numpy()
    try:
        arr = np.asarray(x, dtype=np.float32)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} latents must be a tensor or array of numbers, got {type(x).__name__}.") from err
    return arr


def _split_groups(groups: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Train / test sample indices (sorted) with every group (source sample) wholly on one side.

    ``round(test_fraction * groups)`` groups, at least one and at most all but one, are held out
    (``GroupShuffleSplit`` with that count, seeded by ``seed``).
    """
    from sklearn.model_selection import GroupShuffleSplit  # slow import, see the module docstring

    n_groups = len(np.unique(groups))
    if n_groups < 2:
        raise ValueError(
            f"all {len(groups)} samples come from one source image, so no held-out split by source "
            "is possible; fit on samples of at least two source images (raise data.limit)."
        )
    n_test = min(n_groups - 1, max(1, int(round(test_fraction * n_groups))))
    split = GroupShuffleSplit(n_splits=1, test_size=n_test, random_state=int(seed))
    train, test = next(split.split(np.zeros(len(groups)), groups=groups))
    return np.sort(train), np.sort(test)


def _check_fit_options(C, solver, target_sparsity, target_score, test_fraction, max_iter) -> None:
    """Teaching errors for the fit settings of :func:`fit_style_mask`."""
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r}; choose one of {', '.join(SOLVERS)} (paper: saga).")
    if C == AUTO:
        if target_sparsity is not None or target_score is not None:
            raise ValueError(
                f"C=auto was given together with a target (target_sparsity={target_sparsity}, "
                f"target_score={target_score}); set C=null to search C for the target, or drop the target."
            )
    elif C is not None:
        if isinstance(C, bool) or not isinstance(C, (int, float)) or not C > 0 or not math.isfinite(C):
            raise ValueError(
                f"C must be a positive finite number (inverse L1 strength), 'auto' (C=1 unless that selects "
                f"no dim), or None with target_sparsity / target_score to search it; got {C!r}."
            )
        if target_sparsity is not None or target_score is not None:
            raise ValueError(
                f"C={C} was given together with a target (target_sparsity={target_sparsity}, "
                f"target_score={target_score}); set C=None (mask.C=null) to search C for the "
                "target, or drop the target to use C as given."
            )
    else:
        if (target_sparsity is None) == (target_score is None):
            raise ValueError(
                "C=None searches C and needs exactly one target: target_sparsity (fraction of "
                "zero weights, e.g. 0.98) or target_score (held-out accuracy in percent, e.g. "
                f"78); got target_sparsity={target_sparsity}, target_score={target_score}."
            )
        if target_sparsity is not None and not 0 < target_sparsity < 1:
            raise ValueError(
                "target_sparsity is a fraction of zero weights in (0, 1), e.g. 0.98 for the "
                f"paper's 98% sparse masks; got {target_sparsity!r}."
            )
        if target_score is not None and not 50 < target_score <= 100:
            raise ValueError(
                "target_score is a held-out accuracy in percent above chance (50 < t <= 100), "
                f"e.g. 78 as for the paper's CIFAR-10 mask; got {target_score!r}."
            )
    if not 0 < test_fraction < 1:
        raise ValueError(
            f"test_fraction must lie in (0, 1), e.g. 0.2 (the paper's held-out split); got {test_fraction!r}."
        )
    if isinstance(max_iter, bool) or int(max_iter) != max_iter or max_iter < 1:
        raise ValueError(f"max_iter must be a whole number >= 1, got {max_iter!r}.")


def _fit_samples(start, final, validated, source_ids, only_changed: bool):
    """Flattened ``(start, final, groups)`` of the samples the fit uses, and the latent shape.

    Returns ``s2, f2`` ``(n_used, D)`` float32, ``groups`` ``(n_used,)`` str and ``latent_shape``.
    """
    s, f = _as_float_array(start, "start"), _as_float_array(final, "final")
    if s.shape != f.shape:
        raise ValueError(
            f"start latents have shape {s.shape} but final latents {f.shape}; both must be (N, "
            "*latent_shape) for the same N samples in the same order (as in "
            "latents.safetensors)."
        )
    if s.ndim < 2:
        raise ValueError(f"latents must be shaped (N, *latent_shape) with N samples, got shape {s.shape}.")
    n, latent_shape = s.shape[0], tuple(int(d) for d in s.shape[1:])
    if not (np.isfinite(s).all() and np.isfinite(f).all()):
        raise ValueError("start/final latents contain NaN or inf; refit from a run whose search stayed finite.")
    s2, f2 = s.reshape(n, -1), f.reshape(n, -1)
    changed = (s2 != f2).any(axis=1)
    if validated is not None:
        v = validated.cpu().numpy() if isinstance(validated, Tensor) else np.asarray(validated)
        v = v.astype(bool).reshape(-1)
        if len(v) != n:
            raise ValueError(f"validated has {len(v)} entries but there are {n} samples.")
        changed &= v
    groups = np.asarray([str(i) for i in source_ids] if source_ids is not None else np.arange(n))
    if len(groups) != n:
        raise ValueError(f"source_ids has {len(groups)} entries but there are {n} samples.")
    n_changed = int(changed.sum())
    if n_changed == 0:
        raise ValueError(
            f"no latent changed: every final latent equals its start in all {n} samples, so both classes are "
            "identical and there is nothing to fit. This happens with search.budget=0 or when the oracle "
            "rejected every first step (VR = 0). Run the search with search.budget > 0 and a step size the "
            "oracle accepts (lower search.step_size), then fit again."
        )
    keep = changed if only_changed else np.ones(n, dtype=bool)
    if int(keep.sum()) < MIN_SAMPLES:
        raise ValueError(
            f"too few samples to fit a style mask: at least {MIN_SAMPLES} changed samples are needed, got "
            f"{int(keep.sum())} (of {n}; {n - n_changed} unchanged). Evaluate more images (raise data.limit, or "
            "mask.fit_fraction for mask=auto) or let more samples move (raise search.budget / fit_budget)."
        )
    return s2[keep], f2[keep], groups[keep], latent_shape


def _standardised_split(s2: np.ndarray, f2: np.ndarray, train: np.ndarray, test: np.ndarray) -> dict:
    """Rows ``start`` (label 0) and ``final`` (label 1) of the train / test samples, standardised with a
    ``StandardScaler`` fitted on the training rows (so ``C`` does not depend on the latents' scale)."""
    from sklearn.preprocessing import StandardScaler  # slow import, see the module docstring

    def rows(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = np.concatenate([s2[idx], f2[idx]])
        y = np.concatenate([np.zeros(len(idx), dtype=np.int64), np.ones(len(idx), dtype=np.int64)])
        return x, y

    (x_tr, y_tr), (x_te, y_te) = rows(train), rows(test)
    scaler = StandardScaler().fit(x_tr)
    return {"x_train": scaler.transform(x_tr), "y_train": y_tr, "x_test": scaler.transform(x_te), "y_test": y_te}


def fit_style_mask(
    start: Tensor | np.ndarray,
    final: Tensor | np.ndarray,
    *,
    generator: str,
    dataset: str,
    C: float | str | None = AUTO,
    solver: str = "saga",
    target_sparsity: float | None = None,
    target_score: float | None = None,
    test_fraction: float = 0.2,
    seed: int = 0,
    max_iter: int = 2000,
    tol: float = 1e-4,
    only_changed: bool = True,
    validated: Tensor | np.ndarray | None = None,
    source_ids: list[str] | None = None,
    source: str = "",
) -> StyleMask:
    """Fit the sparse style mask of paper Sec. 3.2.1 / Appendix I from start and final latents.

    ``start``: ``(N, *latent_shape)`` encoder latents ``E(x)`` (label 0); ``final``: the same samples' final
    perturbed latents (label 1). Both are flattened; a ``StandardScaler`` fitted on the training split
    standardises every dim, so ``C`` (scikit-learn's inverse L1 strength; the loss is summed over training
    rows) means the same for every generator whatever the scale of its latents. ``coef`` is stored in that
    standardised space.

    The held-out split (``test_fraction`` of the source samples, seeded by ``seed``) is by source sample: both
    latents of a sample, and all samples sharing a ``source_ids`` entry, go to the same side. Accuracies are
    percent. ``only_changed``: use only samples whose final latent differs from the start (and that are
    ``validated`` when given); unchanged samples would add identical rows with opposite labels.

    ``C=None`` searches C (log grid 1e-4..1e2, then bisection in log C), recording every fit in
    ``search_path``: give ``target_sparsity`` (fraction of zero weights, e.g. 0.98) for the least regularised
    fit that is at least that sparse, or ``target_score`` (held-out percent, e.g. 78) for the sparsest fit
    that scores at least that. ``C="auto"`` (default) fits ``C=1`` and keeps it when it selects a dim; when it
    selects none, it searches as ``target_sparsity=AUTO_SPARSITY`` would (both fits are in ``search_path``).
    ``solver``: ``saga`` (paper) or ``liblinear``. Returns a :class:`StyleMask` with mask = 1 on dims with a
    non-zero weight.
    """
    _check_fit_options(C, solver, target_sparsity, target_score, test_fraction, max_iter)
    s2, f2, groups, latent_shape = _fit_samples(start, final, validated, source_ids, only_changed)
    tr, te = _split_groups(groups, test_fraction, seed)
    data = _standardised_split(s2, f2, tr, te)

    t0 = time.perf_counter()
    if C == AUTO:
        clf, info, path = auto_C(data, solver=solver, seed=seed, max_iter=int(max_iter), tol=tol)
    elif C is None:
        clf, info, path = search_C(
            data,
            solver=solver,
            seed=seed,
            max_iter=int(max_iter),
            tol=tol,
            target_sparsity=target_sparsity,
            target_score=target_score,
        )
    else:
        clf, info = fit_once(data, float(C), solver, seed, int(max_iter), tol)
        path = []
    if not info["converged"]:
        log.warning(
            "the %s solver did not converge in max_iter=%d at C=%.4g; the mask may be noisier than "
            "it should be. Raise max_iter (mask.max_iter) or try solver=liblinear.",
            solver,
            max_iter,
            info["C"],
        )
    coef = clf.coef_[0]
    selected = coef != 0
    if not selected.any():
        raise ValueError(
            f"C={info['C']:.4g} regularises so strongly that every weight is zero: no style "
            "dims selected, so the masked search could move nothing. Raise C (e.g. 10x), set C=auto "
            "(C=1 unless that selects nothing, then the paper's 98% sparsity), or C=None with target_sparsity=0.98."
        )
    result = StyleMask(
        mask=torch.from_numpy(selected.reshape(latent_shape)),
        coef=torch.from_numpy(coef.astype(np.float32).reshape(latent_shape)),
        intercept=float(clf.intercept_[0]),
        sparsity=info["sparsity"],
        heldout_accuracy=info["heldout_accuracy"],
        train_accuracy=info["train_accuracy"],
        C=info["C"],
        solver=solver,
        generator=str(generator),
        latent_shape=latent_shape,
        dataset=str(dataset),
        n_samples=len(s2),
        n_train=len(tr),
        n_test=len(te),
        seed=int(seed),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        sklearn_version=sklearn_version(),
        test_fraction=test_fraction,
        max_iter=int(max_iter),
        converged=info["converged"],
        source=str(source),
        search_path=tuple(path),
    )
    log.info(
        "fitted %r in %.2fs (%d fit%s)",
        result,
        time.perf_counter() - t0,
        max(1, len(path)),
        "s" if len(path) != 1 else "",
    )
    return result


def fit_mask_from_run(run_dir: RunDir | str | Path, *, dataset: str | None = None, **fit_kwargs: Any) -> StyleMask:
    """Fit a style mask from a finished run directory written with ``save_latents=True``.

    Reads the run's latents (start and final latents, validated flags, source ids, generator id) and
    ``results.json`` (the data set id, ``components.data``, unless ``dataset`` is given) through
    :class:`~genEval.runs.reader.RunDir`. ``fit_kwargs`` go to :func:`fit_style_mask` (``C``, ``solver``,
    ``target_sparsity``, ``seed``, ...). Only validated samples that moved are used; with
    ``search.start_noise > 0`` the start noise is part of every difference (``start`` is the noiseless
    ``E(x)``), which the L1 fit mostly ignores because it is symmetric.
    """
    run = RunDir.of(run_dir)
    d = run.path
    if not d.is_dir():
        raise FileNotFoundError(f"run directory '{d}' does not exist; pass the directory of a finished geneval run.")
    if not run.finished:
        partial = f" ({PARTIAL} is there: the run was interrupted)" if (d / PARTIAL).exists() else ""
        raise FileNotFoundError(
            f"'{d}' has no results.json{partial}: it is not a complete run. Let the run "
            "finish (or rerun it with save_latents=true) before fitting a mask from it."
        )
    if not run.has(LATENTS):
        raise FileNotFoundError(
            f"run '{d}' has no latents (latents/part-*.safetensors): it was run without saving "
            "latents. Rerun it with save_latents=true (CLI: geneval ... save_latents=true), "
            "then fit the mask."
        )
    components = run.results.components
    lat = run.tensors(LATENTS)
    generator = lat["generator"] or str(components.get("generator", ""))
    if components.get("generator") and lat["generator"] and components["generator"] != lat["generator"]:
        raise ValueError(
            f"run '{d}' is inconsistent: results.json names generator "
            f"{components['generator']!r} but its latents {lat['generator']!r}; rerun "
            "the evaluation."
        )
    ds = dataset if dataset is not None else str(components.get("data", ""))
    if not ds:
        raise ValueError(f"results.json in '{d}' names no data set (components.data); pass dataset=... explicitly.")
    return fit_style_mask(
        lat["start"],
        lat["final"],
        generator=generator,
        dataset=ds,
        validated=lat["validated"],
        source_ids=lat["source_ids"],
        source=str(fit_kwargs.pop("source", d)),
        **fit_kwargs,
    )
