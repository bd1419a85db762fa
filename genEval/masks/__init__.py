"""Sparse style masks (paper Sec. 3.2.1 and Appendix I): which latent dims the search may move.

One module a job, mirroring ``conf/mask/``:

* :mod:`~genEval.masks.fit` fits a mask from start and final latents (:func:`fit_style_mask`, or from a run
  directory saved with ``save_latents=true``: :func:`fit_mask_from_run`); :mod:`~genEval.masks.regularisation`
  fits one L1 logistic regression and chooses its strength ``C``;
* :mod:`~genEval.masks.format` is the mask file (:class:`StyleMask`: save, load, hash, compatibility);
* :mod:`~genEval.masks.configs` is the ``mask`` config group (:class:`NoMask`, :class:`SparseMask`,
  :class:`AutoMask`), each resolving itself into what a run searches with;
* :mod:`~genEval.masks.figure` draws a mask (:func:`plot_style_mask`).

``genEval.style_mask`` keeps the names older configs (``_target_: genEval.style_mask.AutoMask``) and notebooks use.
"""

from genEval.masks.configs import (
    AutoMask,
    FixedMask,
    NoMask,
    ResolvedMask,
    SparseMask,
    latent_shape,
    mask_config,
    split_for_auto,
)
from genEval.masks.figure import plot_style_mask
from genEval.masks.fit import MIN_SAMPLES, fit_mask_from_run, fit_style_mask
from genEval.masks.format import FORMAT, FORMAT_VERSION, StyleMask
from genEval.masks.regularisation import AUTO, AUTO_C, AUTO_SPARSITY, SOLVERS

__all__ = [
    "AUTO",
    "AUTO_C",
    "AUTO_SPARSITY",
    "FORMAT",
    "FORMAT_VERSION",
    "MIN_SAMPLES",
    "SOLVERS",
    "AutoMask",
    "FixedMask",
    "NoMask",
    "ResolvedMask",
    "SparseMask",
    "StyleMask",
    "fit_mask_from_run",
    "fit_style_mask",
    "latent_shape",
    "mask_config",
    "plot_style_mask",
    "split_for_auto",
]
