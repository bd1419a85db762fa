"""The ``mask`` config group (``conf/mask/<name>.yaml`` instantiates these): what a run does about style masks.

Each config resolves itself into the mask a run searches with (:meth:`resolve` -> :class:`ResolvedMask`: the 0/1
tensor or None, the id recorded in the results, and the data the run scores):

* :class:`NoMask` (``mask=none``): every latent dim may move (paper Algorithm 1 as written);
* :class:`SparseMask` (``mask=sparse mask.path=...``): the style dims of a mask fitted earlier, refused unless it was
  fitted for this generator and latent shape;
* :class:`AutoMask` (``mask=auto``): a dense pass over a held-apart share of the data (the driver's ``dense_pass``),
  a mask fitted on it (:func:`genEval.masks.fit.fit_mask_from_run`), the rest scored with it, so no scored image
  helped choose its own mask (paper 3.2.1: fit per data set and generator);
* :class:`FixedMask`: a mask given as a tensor or a fitted :class:`~genEval.masks.format.StyleMask`
  (:func:`mask_config` wraps those).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from genEval.data.base import SubsetData
from genEval.declared import Declaration
from genEval.interfaces import hook
from genEval.masks.figure import plot_style_mask
from genEval.masks.fit import fit_mask_from_run
from genEval.masks.format import StyleMask
from genEval.masks.regularisation import AUTO, SOLVERS

log = logging.getLogger(__name__)

#: The driver's dense pass of ``mask=auto``: search ``data`` without a mask (budget ``budget``; None = the run's
#: search budget) into the run directory ``run_dir``, saving latents.
DensePass = Callable[[Any, "int | None", Path], Any]


@dataclass(frozen=True)
class ResolvedMask:
    """What a run searches with: ``tensor`` (0/1, broadcastable to one latent; None = every dim), ``id`` (recorded
    as ``components.mask``) and ``data``, the data the run scores (``mask=auto``: the part not used for the fit)."""

    tensor: Tensor | None
    id: str
    data: Any = field(repr=False, default=None)


@dataclass(frozen=True)
class NoMask:
    """``mask=none``: the search may move every latent dim (paper Algorithm 1 as written)."""

    def describe(self) -> str:
        return "none"

    def resolve(self, generator: Any, data: Any, **_: Any) -> ResolvedMask:
        return ResolvedMask(None, "none", data)


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
            str(hook(generator, "name") or ""), latent_shape(generator, data), dataset=hook(data, "name")
        )
        return m

    def resolve(self, generator: Any, data: Any, **_: Any) -> ResolvedMask:
        loaded = self.load(generator, data)
        return ResolvedMask(loaded.as_tensor(), f"{self.path}#{loaded.sha256[:16]}", data)


@dataclass(frozen=True)
class FixedMask:
    """A mask given as it is: a 0/1 tensor broadcastable to one latent, recorded under ``id``."""

    tensor: Tensor
    id: str

    def resolve(self, generator: Any, data: Any, **_: Any) -> ResolvedMask:
        return ResolvedMask(self.tensor, self.id, data)


@dataclass(frozen=True)
class AutoMask:
    """``mask=auto``: fit a mask on a dense pass over ``fit_fraction`` of the data, score the rest with it.

    ``fit_budget``: search budget of the dense pass (None = the search budget). The other fields go to
    :func:`~genEval.masks.fit.fit_style_mask`. :meth:`resolve` runs the fit with the driver's dense pass.
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

    def resolve(
        self, generator: Any, data: Any, *, seed: int, dense_pass: DensePass, workdir: str | Path | None = None
    ) -> ResolvedMask:
        """Split ``data`` (:func:`split_for_auto`), search the fit part densely into ``<workdir>/mask_fit`` (a
        temporary folder without one), fit the mask there (saved as ``style_mask.safetensors`` with its plot
        ``style_mask.png``) and return it with the part to score."""
        fit_idx, eval_idx = split_for_auto(len(data), self.fit_fraction, seed, hook(data, "labels"))
        base = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="geneval-mask-"))
        log.info("mask=auto: dense pass over %d fit samples, then %d scored with the mask", len(fit_idx), len(eval_idx))
        dense_pass(SubsetData(data, fit_idx, "mask-fit"), self.fit_budget, base / "mask_fit")
        fitted = fit_mask_from_run(base / "mask_fit", dataset=hook(data, "name"), **self.fit_kwargs())
        fitted.save(base / "style_mask.safetensors")
        plot_style_mask(fitted, base / "style_mask.png")
        return ResolvedMask(fitted.as_tensor(), f"auto:{fitted.sha256[:16]}", SubsetData(data, eval_idx, "mask-scored"))


def mask_config(mask: Any, mask_id: str | None = None) -> Any:
    """``evaluate``'s ``mask`` as a config that resolves itself: None -> :class:`NoMask`; a fitted
    :class:`StyleMask` or a 0/1 tensor -> :class:`FixedMask` (recorded as ``mask_id``, else by its hash or shape);
    a config (anything with ``resolve``) as it is."""
    if mask is None:
        return NoMask()
    if isinstance(mask, StyleMask):
        return FixedMask(mask.as_tensor(), mask_id or f"mask#{mask.sha256[:16]}")
    if isinstance(mask, Tensor):
        return FixedMask(mask, mask_id or f"tensor{tuple(mask.shape)}")
    if not callable(getattr(mask, "resolve", None)):
        raise ValueError(
            f"mask must be None, a 0/1 tensor, a StyleMask or a mask config (NoMask, SparseMask, AutoMask), got "
            f"{type(mask).__name__}; e.g. mask=genEval.masks.SparseMask(path='mask.safetensors')."
        )
    return mask


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


def latent_shape(generator, data) -> tuple[int, ...]:
    """Shape of one latent of ``generator`` for the images of ``data`` (encodes the first image)."""
    x = data[0][0][None]
    p = next(iter(generator.parameters()), None) if isinstance(generator, torch.nn.Module) else None
    with torch.no_grad():
        z = generator.encode(x.to(p.device) if p is not None else x)
    return tuple(z.shape[1:])
