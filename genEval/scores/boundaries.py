"""Two-sided boundaries for looking at a paired difference after every round (docs/comparing.md): how far, in standard
errors, an estimate must lie from 0 before a look may call it.

* **The confidence sequence** (open-ended runs): the Robbins normal-mixture boundary of Waudby-Smith, Arbour, Sinha,
  Kennedy & Ramdas, "Time-uniform central limit theory and asymptotic confidence sequences" (Annals of Statistics
  2024; arXiv 2103.06476, Theorem 2.2, eq. 13): half-width ``sd * w(n)`` per unit standard deviation, with
  ``w(n) = sqrt(2 (n eta^2 + 1) / (n^2 eta^2) log(sqrt(n eta^2 + 1) / alpha))``, valid at every ``n`` however
  many looks are taken (:func:`mixture_width`).
* **Alpha spending** (a planned maximum ``max_sources``): the Lan & DeMets (Biometrika 1983) group-sequential
  boundary, which spends ``alpha / 2`` on each side over the information fraction ``t = n / max_sources`` with the
  O'Brien-Fleming type ``a(t) = 2 - 2 Phi(z_{1-alpha/4} / sqrt t)`` or the Pocock type
  ``a(t) = alpha / 2 log(1 + (e - 1) t)`` (gsDesign's ``sfLDOF`` / ``sfLDPocock`` at one-sided ``alpha / 2``, a
  symmetric two-sided test), and at each look finds the critical value ``c_k`` whose crossing probability, given
  no earlier crossing, is the alpha spent since the last look (:func:`spending_bounds`; the repeated confidence
  intervals ``d_k +- c_k sd_k / sqrt(n_k)`` of Jennison & Turnbull, "Group Sequential Methods", 2000, ch. 9, cover
  at every planned look at once). The crossing probabilities come from the recursive numerical integration of Armitage,
  McPherson & Rowe (1969) as gsDesign implements it (``gsdesign``: its ``h1``/``hupdate`` grid, the one third-party
  library this module uses, fenced here); the search for ``c_k`` is scipy's ``brentq``. A look is free to come at any
  information fraction (the boundary is computed from the fractions actually seen), and looks past ``t = 1`` spend
  nothing more.

Known answers (tests/scores/test_sequential.py): five equally spaced looks at alpha 0.05 give 4.877, 3.357, 2.680,
2.290, 2.031 with the O'Brien-Fleming type, gsDesign's published values; the Pocock type's are checked against scipy's
multivariate normal.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

SPENDING = ("obrien-fleming", "pocock")
#: The grid of the recursive integration (gsDesign's default ``r``: 6 r - 1 points per look, error ~1e-6).
GRID_R = 18


def mixture_eta2(alpha: float, t_star: float) -> float:
    """The normal mixture's variance on the standardised scale, tightest at ``t_star`` units (their eq. 13)."""
    la = -2.0 * math.log(alpha)
    return (la + math.log(la + 1.0)) / t_star


def mixture_width(n: np.ndarray | float, alpha: float, eta2: float) -> np.ndarray:
    """Half-width of the confidence sequence per unit standard deviation after ``n`` units (0 < w, decreasing for
    large n): the Robbins normal-mixture boundary of Theorem 2.2."""
    n = np.asarray(n, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(2.0 * (n * eta2 + 1.0) / (n * n * eta2) * np.log(np.sqrt(n * eta2 + 1.0) / alpha))


def spent(t: np.ndarray | float, alpha: float, kind: str) -> np.ndarray:
    """The (two-sided) alpha spent by information fraction ``t`` (clipped to [0, 1]), ``alpha / 2`` per side:
    Lan-DeMets O'Brien-Fleming or Pocock type; ``alpha`` at ``t = 1``."""
    from scipy.stats import norm  # slow import, kept off the command line's start

    t = np.clip(np.asarray(t, dtype=float), 0.0, 1.0)
    if kind == "pocock":
        return alpha * np.log1p((math.e - 1.0) * t)
    if kind == "obrien-fleming":
        root = np.sqrt(np.maximum(t, 1e-300))
        return np.where(t > 0, 2.0 * (2.0 - 2.0 * norm.cdf(norm.isf(alpha / 4.0) / root)), 0.0)
    raise ValueError(f"unknown spending function {kind!r}; choose one of {', '.join(SPENDING)}.")


def spending_bounds(fractions: Sequence[float], alpha: float, kind: str = "obrien-fleming") -> np.ndarray:
    """Critical values ``c_k`` (K,) of a two-sided symmetric group-sequential test at looks with information
    fractions ``fractions`` (K,) (increasing; a look at or past 1 after one at 1, or one that spends nothing, gets
    ``inf``): ``P(|Z_1| < c_1, ..., |Z_{k-1}| < c_{k-1}, |Z_k| >= c_k) = alpha(t_k) - alpha(t_{k-1})`` under 0."""
    key = tuple(round(float(t), 9) for t in fractions)
    return np.array(_state(key, float(alpha), kind)[0])


@functools.lru_cache(maxsize=65536)
def _state(fractions: tuple[float, ...], alpha: float, kind: str) -> tuple[tuple[float, ...], Any, float, float]:
    """(boundaries, the continuation region's grid at the last look, its fraction, the alpha spent) after the looks
    ``fractions``: each look extends its prefix's state, so a comparison that looks once more computes one boundary
    (the prefixes are cached)."""
    if not fractions:
        return (), None, 0.0, 0.0
    from gsdesign import h1, hupdate  # the recursive integration of gsDesign (see the module docstring)
    from scipy.optimize import brentq
    from scipy.stats import norm

    bounds, grid, t_prev, spent_prev = _state(fractions[:-1], alpha, kind)
    t = min(fractions[-1], 1.0)
    target = float(spent(t, alpha, kind)) - spent_prev
    if t <= t_prev or target <= 1e-15:  # no new information, or nothing left to spend: this look cannot call
        return (*bounds, math.inf), grid, t_prev, spent_prev
    if grid is None:
        c = float(norm.isf(target / 2.0))
        return (*bounds, c), h1(GRID_R, 0.0, t, -c, c), t, spent_prev + target
    mass = float(grid[2].sum())

    def excess(c: float) -> float:
        return mass - float(hupdate(GRID_R, 0.0, t, -c, c, 0.0, t_prev, grid)[2].sum()) - target

    if excess(40.0) > 0:
        return (*bounds, math.inf), grid, t_prev, spent_prev
    c = float(brentq(excess, 1e-9, 40.0, xtol=1e-7))
    return (*bounds, c), hupdate(GRID_R, 0.0, t, -c, c, 0.0, t_prev, grid), t, spent_prev + target
