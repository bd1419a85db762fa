"""The sparse style mask: which latent dims the search may move (paper Sec. 3.2.1 and Appendix I).

The paper observes that perturbing every latent dim sometimes changes what an image depicts, so the
oracle rejects the step and the work is wasted. It therefore fits a sparse linear classifier that
tells the encoder's latents ``E(x)`` (label 0) from the final perturbed latents (label 1) of a
previous run. The dims with a non-zero weight are the *style dims*; the loop then updates only those
(``z <- z + a * step(g) * M`` in :mod:`genEval.search.perturb`, with ``M = 1`` on style dims, 0 elsewhere).

Paper, Appendix I: a balanced two-class data set of flattened latents, a held-out split, an
L1-regularised logistic regression ("LASSO", solver saga). Reported sparsity (percent of zero
weights) / held-out score: MNIST 97.99 / 78.5, CIFAR-10 98.45 / 78.0, 9-class ImageNet 99.31 / 72.0,
ImageNet 99.32 / 69.0. Masks do not transfer between data sets, so every mask records the generator,
latent shape and data set it was fitted on (:meth:`StyleMask.check_compatible` refuses a mismatch).

Choices the paper leaves open (recorded in every mask file):

* Features are standardised (a ``StandardScaler`` fitted on the training split) so that ``C`` means
  the same for every generator regardless of the scale of its latents.
* The held-out split is by *source sample*: both latents of a sample land on the same side, so the
  test score never rewards recognising a sample seen in training.
* ``C`` is scikit-learn's inverse regularisation strength (the loss is summed over the training rows);
  with ``C=None`` it is searched to reach a target sparsity or held-out score. The default ``C="auto"`` is
  ``C=1`` unless that selects no dim at all (the L1 term outweighs a loss summed over few samples: a 60-sample
  run), and then the least regularised C whose mask is at least :data:`AUTO_SPARSITY` zeros, the paper's
  sparsity (Appendix I: 97.99% to 99.32% of dims are zero).

scikit-learn API churn is fenced here: 1.8 deprecated ``penalty=`` (removed in 1.10); a pure L1
penalty is spelled ``l1_ratio=1`` from 1.8 on, ``penalty="l1"`` before. scikit-learn (about two seconds to
import) and matplotlib are imported inside the functions that fit or draw, so that a run without a mask
does not pay for them.

``mask=auto`` is orchestrated by the driver (``genEval.search.driver.evaluate``) with :func:`split_for_auto`,
:func:`fit_mask_from_run` and :class:`AutoMask`; this module only fits, stores and draws masks.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import re
import time
import warnings
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save as safetensors_bytes
from torch import Tensor

from genEval.declared import Declaration
from genEval.fileio import atomic_write_bytes
from genEval.runs.rundir import has_tensors, load_latent_file, read_results

log = logging.getLogger(__name__)

SOLVERS = ("saga", "liblinear")
MIN_SAMPLES = 10
FORMAT = "geneval-style-mask"
FORMAT_VERSION = 1
_C_GRID = tuple(float(c) for c in np.logspace(-4, 2, 13))  # half-decade steps from 1e-4 to 1e2
_BISECT_STEPS = 8
AUTO = "auto"
AUTO_C = 1.0  # what C="auto" tries first: the fit it keeps whenever it selects a dim
AUTO_SPARSITY = 0.98  # C="auto"'s target when C=1 selects nothing: the paper's masks are 98-99% zeros


# --------------------------------------------------------------------------------------------------------
# scikit-learn version fence
# --------------------------------------------------------------------------------------------------------
def _sklearn_version() -> str:
    import sklearn  # slow import, see the module docstring

    return sklearn.__version__


def _version_tuple(v: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", v)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _l1_penalty_kwargs(version: str | None = None) -> dict[str, Any]:
    """The keyword(s) that ask ``LogisticRegression`` for a pure L1 penalty in this scikit-learn version."""
    if _version_tuple(version or _sklearn_version()) >= (1, 8):
        return {"l1_ratio": 1.0}  # 1.8 deprecated `penalty`; l1_ratio=1 is pure L1
    return {"penalty": "l1"}


def _make_logreg(C: float, solver: str, seed: int, max_iter: int, tol: float):
    from sklearn.linear_model import LogisticRegression  # slow import, see the module docstring

    return LogisticRegression(C=C, solver=solver, max_iter=max_iter, tol=tol, random_state=seed, **_l1_penalty_kwargs())


# --------------------------------------------------------------------------------------------------------
# The mask
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class StyleMask:
    """A fitted style mask and its provenance.

    ``mask``: bool tensor of the latent shape, True on style dims (non-zero weight).
    ``coef``: float32 tensor of the latent shape, the logistic-regression weights on *standardised* latents.
    ``sparsity``, ``heldout_accuracy``, ``train_accuracy``: percent. ``C``, ``solver``: the fit that made the
    mask; ``search_path``: every ``C`` tried when ``C`` was searched (empty when given).
    ``sha256``: hash of the mask and coefficient bytes plus all metadata; computed when empty, verified
    otherwise (so :meth:`load` detects an edited file). Use ``dataclasses.replace(m, ..., sha256="")`` to
    derive a modified mask.
    """

    mask: Tensor
    coef: Tensor
    intercept: float
    sparsity: float
    heldout_accuracy: float
    train_accuracy: float
    C: float
    solver: str
    generator: str
    latent_shape: tuple[int, ...]
    dataset: str
    n_samples: int
    n_train: int
    n_test: int
    seed: int
    created: str
    sklearn_version: str
    test_fraction: float = 0.2
    max_iter: int = 0
    converged: bool = True
    source: str = ""
    search_path: tuple[dict[str, Any], ...] = ()
    sha256: str = ""

    def __post_init__(self) -> None:
        mask = torch.as_tensor(self.mask).detach().cpu().bool().contiguous()
        coef = torch.as_tensor(self.coef).detach().cpu().to(torch.float32).contiguous()
        shape = tuple(int(s) for s in self.latent_shape)
        if tuple(mask.shape) != shape or tuple(coef.shape) != shape:
            raise ValueError(
                f"style mask tensors do not match latent_shape {shape}: mask "
                f"{tuple(mask.shape)}, coef {tuple(coef.shape)}."
            )
        object.__setattr__(self, "mask", mask)
        object.__setattr__(self, "coef", coef)
        object.__setattr__(self, "latent_shape", shape)
        object.__setattr__(self, "search_path", tuple(dict(p) for p in self.search_path))
        for key in ("intercept", "sparsity", "heldout_accuracy", "train_accuracy", "C", "test_fraction"):
            object.__setattr__(self, key, float(getattr(self, key)))
        for key in ("n_samples", "n_train", "n_test", "seed", "max_iter"):
            object.__setattr__(self, key, int(getattr(self, key)))
        object.__setattr__(self, "converged", bool(self.converged))
        digest = self._digest()
        if not self.sha256:
            object.__setattr__(self, "sha256", digest)
        elif self.sha256 != digest:
            raise ValueError(
                f"style mask hash mismatch: stored sha256 {self.sha256[:16]}... but the content "
                f"hashes to {digest[:16]}...; the mask or its metadata was modified or "
                "corrupted. Refit it with geneval fit-mask."
            )

    # ---- identity -------------------------------------------------------------------------------------
    def metadata(self) -> dict[str, Any]:
        """Every field but the tensors and the hash, as JSON-ready values."""
        out = {}
        for f in fields(self):
            if f.name in ("mask", "coef", "sha256"):
                continue
            v = getattr(self, f.name)
            out[f.name] = list(v) if isinstance(v, tuple) and f.name == "latent_shape" else v
        out["search_path"] = [dict(p) for p in self.search_path]
        return out

    def _digest(self) -> str:
        h = hashlib.sha256()
        h.update(f"{FORMAT}/{FORMAT_VERSION}".encode())
        h.update(self.mask.to(torch.uint8).numpy().tobytes())
        h.update(self.coef.numpy().tobytes())
        h.update(_canonical_json(self.metadata()).encode())
        return h.hexdigest()

    @property
    def n_selected(self) -> int:
        return int(self.mask.sum())

    @property
    def n_dims(self) -> int:
        return int(self.mask.numel())

    def __repr__(self) -> str:
        return (
            f"StyleMask(generator={self.generator!r}, dataset={self.dataset!r}, "
            f"latent_shape={self.latent_shape}, selected={self.n_selected}/{self.n_dims}, "
            f"sparsity={self.sparsity:.2f}%, heldout_accuracy={self.heldout_accuracy:.1f}%, "
            f"C={self.C:.4g}, solver={self.solver!r}, n_samples={self.n_samples}, "
            f"sha256={self.sha256[:12]})"
        )

    # ---- use ------------------------------------------------------------------------------------------
    def as_tensor(self) -> Tensor:
        """Float 0/1 tensor of the latent shape, for ``evaluate(..., mask=...)`` / ``perturb(mask=...)``."""
        return self.mask.to(torch.float32)

    def check_compatible(self, generator: str, latent_shape, dataset: str | None = None) -> None:
        """Refuse a run whose generator id or latent shape differs from the ones the mask was fitted for.

        A different ``dataset`` only logs a warning: the paper finds masks transfer poorly between data sets,
        but a mask fitted on one split of a data set legitimately serves another split of it.
        """
        shape = tuple(int(s) for s in latent_shape)
        if str(generator) != self.generator or shape != self.latent_shape:
            raise ValueError(
                f"mask was fitted for generator '{self.generator}' with latent shape {self.latent_shape}, "
                f"but this run uses generator '{generator}' with latent shape {shape}. A style mask only "
                "fits the generator and image size it was made for. Refit with geneval fit-mask on a run of "
                "this generator (or use mask=auto)."
            )
        if dataset is not None and str(dataset) != self.dataset:
            log.warning(
                "style mask %s was fitted on data set %r but this run uses %r; the paper (App. I) "
                "finds style dims differ between data sets, consider refitting.",
                self.sha256[:12],
                self.dataset,
                dataset,
            )

    # ---- storage --------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write one ``.safetensors`` file (``mask`` uint8, ``coef`` float32, metadata as JSON strings),
        atomically (temp file + rename). Returns the path."""
        p = Path(path).expanduser()
        p.parent.mkdir(parents=True, exist_ok=True)
        meta = {k: json.dumps(v, allow_nan=False) for k, v in self.metadata().items()}
        meta.update({"format": FORMAT, "format_version": str(FORMAT_VERSION), "sha256": self.sha256})
        data = safetensors_bytes({"mask": self.mask.to(torch.uint8), "coef": self.coef}, metadata=meta)
        atomic_write_bytes(p, data)
        log.info("saved %r to %s", self, p)
        return p

    @classmethod
    def load(cls, path: str | Path) -> StyleMask:
        """Read a mask written by :meth:`save` and verify its hash (an edited file raises ``ValueError``)."""
        p = Path(path).expanduser()
        if not p.is_file():
            raise FileNotFoundError(
                f"no style mask file at '{p}'. Fit one with geneval fit-mask (or "
                "genEval.style_mask.fit_mask_from_run) and pass its path as "
                "mask.path=..."
            )
        try:
            with safe_open(str(p), framework="pt") as fh:
                meta = dict(fh.metadata() or {})
                tensors = {k: fh.get_tensor(k) for k in fh.keys()}
        except Exception as err:  # safetensors raises its own error types for damaged headers
            raise ValueError(
                f"'{p}' is not a readable safetensors file ({err}); it is not a genEval style "
                "mask or it is damaged. Refit it with geneval fit-mask."
            ) from err
        if meta.get("format") != FORMAT or set(tensors) != {"mask", "coef"}:
            raise ValueError(
                f"'{p}' is not a genEval style mask (format={meta.get('format')!r}, tensors "
                f"{sorted(tensors)}); expected format {FORMAT!r} with tensors mask and coef."
            )
        version = int(meta.get("format_version", "0"))
        if version > FORMAT_VERSION:
            raise ValueError(
                f"'{p}' has style mask format version {version}, newer than this genEval reads "
                f"({FORMAT_VERSION}); upgrade genEval."
            )
        known = {f.name for f in fields(cls)} - {"mask", "coef", "sha256"}
        try:
            kwargs = {k: json.loads(v) for k, v in meta.items() if k in known}
        except json.JSONDecodeError as err:
            raise ValueError(f"style mask '{p}' has damaged metadata ({err}); refit it with geneval fit-mask.") from err
        kwargs["latent_shape"] = tuple(kwargs.get("latent_shape", tensors["mask"].shape))
        kwargs["search_path"] = tuple(kwargs.get("search_path", ()))
        try:
            return cls(
                mask=tensors["mask"].bool(), coef=tensors["coef"], sha256=meta.get("sha256", "") or "-", **kwargs
            )
        except (TypeError, ValueError) as err:
            raise ValueError(f"style mask '{p}' failed verification: {err}") from err


def _canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


# --------------------------------------------------------------------------------------------------------
# Fitting
# --------------------------------------------------------------------------------------------------------
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


def _fit_once(data: dict[str, np.ndarray], C: float, solver: str, seed: int, max_iter: int, tol: float):
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


def _search_C(data, *, solver, seed, max_iter, tol, target_sparsity, target_score):
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
            fits[c] = _fit_once(data, c, solver, seed, max_iter, tol)
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


def _auto_C(data, *, solver, seed, max_iter, tol):
    """``C="auto"``: ``C=1`` when it selects a dim, else the least regularised C whose mask is at least
    ``AUTO_SPARSITY`` zeros and keeps a dim. Returns (model, info, path) with every fit in the path.

    Above C=1 the grid of :func:`_search_C` is walked upwards and stops at the first fit that is too dense (L1 fits
    only get denser as C grows), then bisection in log C refines the boundary: the dense fits at large C, which
    are the slow ones, are never made.
    """
    fits = {AUTO_C: _fit_once(data, AUTO_C, solver, seed, max_iter, tol)}
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
            fits[c] = _fit_once(data, c, solver, seed, max_iter, tol)
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
        clf, info, path = _auto_C(data, solver=solver, seed=seed, max_iter=int(max_iter), tol=tol)
    elif C is None:
        clf, info, path = _search_C(
            data,
            solver=solver,
            seed=seed,
            max_iter=int(max_iter),
            tol=tol,
            target_sparsity=target_sparsity,
            target_score=target_score,
        )
    else:
        clf, info = _fit_once(data, float(C), solver, seed, int(max_iter), tol)
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
        sklearn_version=_sklearn_version(),
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


def fit_mask_from_run(run_dir: str | Path, *, dataset: str | None = None, **fit_kwargs: Any) -> StyleMask:
    """Fit a style mask from a finished run directory written with ``save_latents=True``.

    Reads the run's latents (start and final latents, validated flags, source ids, generator id) and
    ``results.json`` (the data set id, ``components.data``, unless ``dataset`` is given) through
    :mod:`genEval.runs.rundir`. ``fit_kwargs`` go to :func:`fit_style_mask` (``C``, ``solver``,
    ``target_sparsity``, ``seed``, ...). Only validated samples that moved are used; with
    ``search.start_noise > 0`` the start noise is part of every difference (``start`` is the noiseless
    ``E(x)``), which the L1 fit mostly ignores because it is symmetric.
    """
    d = Path(run_dir).expanduser()
    if not d.is_dir():
        raise FileNotFoundError(f"run directory '{d}' does not exist; pass the directory of a finished geneval run.")
    if not (d / "results.json").is_file():
        partial = (
            " (samples.partial.jsonl is there: the run was interrupted)"
            if (d / "samples.partial.jsonl").exists()
            else ""
        )
        raise FileNotFoundError(
            f"'{d}' has no results.json{partial}: it is not a complete run. Let the run "
            "finish (or rerun it with save_latents=true) before fitting a mask from it."
        )
    if not has_tensors(d, "latents"):
        raise FileNotFoundError(
            f"run '{d}' has no latents (latents/part-*.safetensors): it was run without saving "
            "latents. Rerun it with save_latents=true (CLI: geneval ... save_latents=true), "
            "then fit the mask."
        )
    components = read_results(d).get("components", {})
    lat = load_latent_file(d)
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


# --------------------------------------------------------------------------------------------------------
# mask=auto: which samples fit the mask, which are scored
# --------------------------------------------------------------------------------------------------------
def split_for_auto(n: int, fit_fraction: float, seed: int, labels=None) -> tuple[list[int], list[int]]:
    """Split ``n`` sample indices into (fit, eval) for ``mask=auto``, deterministically from ``seed``.

    ``mask=auto`` first searches ``fit_fraction`` of the samples without a mask to fit one, then scores the
    remaining samples with it, so no scored image helped choose its own mask. Without ``labels`` the split is
    a seeded permutation (class-agnostic); with ``labels`` (length ``n``) it is stratified: every class puts
    ``round(fit_fraction * n_class)`` of its samples in the fit part. Both parts are non-empty and sorted;
    the same ``(n, fit_fraction, seed, labels)`` always gives the same split.
    """
    if isinstance(n, bool) or int(n) != n or n < 2:
        raise ValueError(
            f"split_for_auto needs at least 2 samples (one to fit, one to score), got n={n!r}; raise data.limit."
        )
    if not 0 < fit_fraction < 1:
        raise ValueError(f"mask.fit_fraction must lie in (0, 1), e.g. 0.2, got {fit_fraction!r}.")
    n = int(n)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x6D61736B]))
    if labels is None:
        perm = rng.permutation(n)
        k = min(n - 1, max(1, int(round(fit_fraction * n))))
        fit = perm[:k]
    else:
        lab = np.asarray(labels.cpu() if isinstance(labels, Tensor) else labels).reshape(-1)
        if len(lab) != n:
            raise ValueError(f"labels has {len(lab)} entries but n={n}.")
        parts = []
        for c in np.unique(lab):
            idx = np.flatnonzero(lab == c)
            parts.append(rng.permutation(idx)[: int(round(fit_fraction * len(idx)))])
        fit = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        if len(fit) == 0:  # every class too small to contribute: fall back to one sample
            fit = rng.permutation(n)[:1]
        elif len(fit) == n:
            fit = fit[:-1]
    in_fit = np.zeros(n, dtype=bool)
    in_fit[fit] = True
    return np.flatnonzero(in_fit).tolist(), np.flatnonzero(~in_fit).tolist()


# --------------------------------------------------------------------------------------------------------
# Picture
# --------------------------------------------------------------------------------------------------------
def plot_style_mask(mask: StyleMask, path: str | Path) -> Path:
    """PNG summary of a mask, written atomically: (a) selected dims per latent channel, (b) a heat map of the
    number of selected channels at each spatial position, (c) a histogram of the non-zero coefficients."""
    # slow imports, see the module docstring
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    m = mask.mask.numpy()
    if m.ndim == 1:
        m = m.reshape(-1, 1, 1)
    elif m.ndim == 2:
        m = m[:, None, :]
    elif m.ndim > 3:
        m = m.reshape(m.shape[0], m.shape[1], -1)
    per_channel = m.sum(axis=(1, 2))
    spatial = m.sum(axis=0)
    nz = mask.coef.numpy()[mask.mask.numpy()]

    fig = Figure(figsize=(13, 4), dpi=100)
    FigureCanvasAgg(fig)  # attaches an Agg canvas: no pyplot, no global backend switch
    ax_a, ax_b, ax_c = fig.subplots(1, 3)
    ax_a.bar(np.arange(len(per_channel)), per_channel, color="tab:blue")
    ax_a.set_xlabel("latent channel")
    ax_a.set_ylabel("selected dims")
    ax_a.set_title(f"(a) style dims per channel ({mask.n_selected}/{mask.n_dims})")
    im = ax_b.imshow(spatial, cmap="viridis", interpolation="nearest", vmin=0)
    fig.colorbar(im, ax=ax_b, label="selected channels", ticks=MaxNLocator(integer=True))
    ax_b.set_title("(b) selected channels per position")
    ax_b.set_xlabel("x")
    ax_b.set_ylabel("y")
    if nz.size:
        ax_c.hist(nz, bins=min(50, max(5, nz.size // 2)), color="tab:orange")
    else:
        ax_c.text(0.5, 0.5, "no non-zero coefficients", ha="center", va="center", transform=ax_c.transAxes)
    ax_c.set_xlabel("coefficient (standardised latents)")
    ax_c.set_ylabel("count")
    ax_c.set_title("(c) non-zero coefficients")
    fig.suptitle(
        f"style mask: {mask.generator} on {mask.dataset}, sparsity {mask.sparsity:.2f}%, held-out "
        f"{mask.heldout_accuracy:.1f}%, C={mask.C:.3g} ({mask.solver})",
        fontsize=10,
    )
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    p = Path(path).expanduser()
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(p, buf.getvalue())
    return p


__all__ = [
    "MIN_SAMPLES",
    "SOLVERS",
    "AutoMask",
    "NoMask",
    "SparseMask",
    "StyleMask",
    "fit_mask_from_run",
    "fit_style_mask",
    "plot_style_mask",
    "split_for_auto",
]


# --------------------------------------------------------------------------------------------------------
# The ``mask`` config group: what a run does about masks (conf/mask/*.yaml instantiate these)
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NoMask:
    """``mask=none``: the search may move every latent dim (paper Algorithm 1 as written)."""

    def describe(self) -> str:
        return "none"


@dataclass(frozen=True)
class SparseMask:
    """``mask=sparse mask.path=...``: move only the style dims of a mask fitted earlier."""

    path: str

    @classmethod
    def declare(cls, path: str, **_: Any) -> Declaration:
        """The latent shape the mask was fitted for, read before any component is built (:mod:`genEval.declared`)."""
        return Declaration(latents=StyleMask.load(path).latent_shape)

    def load(self, generator: Any, data: Any) -> StyleMask:
        """Load the mask and refuse it unless it was fitted for this generator and latent shape."""
        m = StyleMask.load(self.path)
        m.check_compatible(
            str(getattr(generator, "name", "")), latent_shape(generator, data), dataset=getattr(data, "name", None)
        )
        return m


@dataclass(frozen=True)
class AutoMask:
    """``mask=auto``: fit a mask on a dense pass over ``fit_fraction`` of the data, score the rest with it.

    ``fit_budget``: search budget of the dense pass (None = the search budget). The other fields go to
    :func:`fit_style_mask`. The driver orchestrates the two passes (``genEval.search.driver.evaluate``).
    """

    fit_fraction: float = 0.2
    fit_budget: int | None = None
    C: float | str | None = AUTO
    solver: str = "saga"
    target_sparsity: float | None = None
    target_score: float | None = None
    test_fraction: float = 0.2
    max_iter: int = 2000

    def __post_init__(self) -> None:
        if not 0 < self.fit_fraction < 1:
            raise ValueError(f"mask.fit_fraction must lie in (0, 1), e.g. 0.2, got {self.fit_fraction!r}.")
        if self.solver not in SOLVERS:
            raise ValueError(f"unknown mask.solver={self.solver!r}; choose one of {', '.join(SOLVERS)}.")

    def fit_kwargs(self) -> dict[str, Any]:
        return {
            "C": self.C,
            "solver": self.solver,
            "target_sparsity": self.target_sparsity,
            "target_score": self.target_score,
            "test_fraction": self.test_fraction,
            "max_iter": self.max_iter,
        }


def latent_shape(generator, data) -> tuple[int, ...]:
    """Shape of one latent of ``generator`` for the images of ``data`` (encodes the first image)."""
    x = data[0][0][None]
    p = next(iter(generator.parameters()), None) if isinstance(generator, torch.nn.Module) else None
    with torch.no_grad():
        z = generator.encode(x.to(p.device) if p is not None else x)
    return tuple(z.shape[1:])
