"""Effective robustness (S0 eq. 1-2, after Taori et al. 2020; docs/method.md, "Effective robustness").

Fit ``T(PA) = w * T(SA) + b`` over *baseline* models (``scipy.stats.linregress``), then
``ER(f) = PA(f) - T^-1(w * T(SA(f)) + b)`` in points, where ``T`` is the axis scale ``space``: ``logit`` (S0, Taori
et al.) or ``probit`` (``Phi^-1``, Miller's thesis ch. 4 "accuracy on the line"; :data:`SCALES`). R^2 is computed
**in that space** (the space of the regression), MAE in points; ER is reported only when R^2 >= ``min_r2`` with >=
``min_baselines`` baselines (S0 section 8: a fit-quality gate). A baseline whose SA is below ``floor`` percent
(S0 section 5.1 discards models under 5% ImageNet accuracy: near chance the transformed axis is dominated by noise)
is left out of the fit, and ``notes`` say which. ER gets a bootstrap interval over source images
(:func:`er_intervals`), the line refitted on every resample. The transforms (:func:`to_scale`, :func:`from_scale`)
and the least-squares fit in any number of ID axes (:func:`fit_trend`) are shared with the multi-ID plane
(:mod:`genEval.scores.multi_id`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np
from scipy import special

from genEval.scores.intervals import percentile

#: The axis scales of the baseline trend: logit (S0 eq. 1) or probit (Miller's thesis, Table 4.1).
SCALES = ("logit", "probit")
#: Baselines whose ID accuracy (percent) is below this are left out of the fit (S0 section 5.1: < 5% discarded).
ACCURACY_FLOOR = 5.0


def check_scale(scale: str) -> str:
    """``scale`` if it names an axis scale of :data:`SCALES`, else a ValueError listing them."""
    if scale not in SCALES:
        raise ValueError(
            f"unknown er.scale={scale!r}; choose one of {', '.join(SCALES)} (logit: Shi et al. 2023 / Taori et al. "
            "2020; probit: Miller's accuracy-on-the-line, Phi^-1 of the accuracy)."
        )
    return scale


def to_scale(acc: np.ndarray | Sequence[float], scale: str, clip: float = 1e-3) -> np.ndarray:
    """Accuracies in percent -> the ``scale`` axis (logit or probit of the fraction clipped to [clip, 1-clip],
    so 0% and 100% stay finite). NaN stays NaN."""
    x = np.clip(np.asarray(acc, dtype=float) / 100.0, clip, 1 - clip)
    return special.logit(x) if check_scale(scale) == "logit" else special.ndtri(x)


def from_scale(v: np.ndarray | Sequence[float], scale: str) -> np.ndarray:
    """The inverse of :func:`to_scale`: a value on the ``scale`` axis -> accuracy in percent."""
    v = np.asarray(v, dtype=float)
    return 100.0 * (special.expit(v) if check_scale(scale) == "logit" else special.ndtr(v))


@dataclass(frozen=True)
class Trend:
    """Least squares ``y = x @ weights + b`` (in the transformed space) with its in-fit R^2 (None when ``y`` is
    constant) and MAE in accuracy points."""

    weights: np.ndarray
    b: float
    r2: float | None
    mae: float


def fit_trend(x: np.ndarray, y: np.ndarray, scale: str) -> Trend:
    """Ordinary least squares of ``y`` (n,) on the columns of ``x`` (n, k) plus an intercept (``numpy.linalg.lstsq``;
    S0 eq. 3 for k >= 2, the line of eq. 1 for k = 1). R^2 = 1 - SS_res / SS_tot in the fitted space; MAE is
    measured back in percent (``from_scale``). The caller ensures n > k + 1 and x of full column rank."""
    x, y = np.atleast_2d(np.asarray(x, dtype=float).T).T, np.asarray(y, dtype=float)
    design = np.column_stack([x, np.ones(len(y))])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    fitted = design @ coef
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = None if ss_tot < 1e-24 else 1.0 - float(((y - fitted) ** 2).sum()) / ss_tot
    mae = float(np.mean(np.abs(from_scale(y, scale) - from_scale(fitted, scale))))
    return Trend(coef[:-1], float(coef[-1]), r2, mae)


@dataclass(frozen=True)
class ERFit:
    """The baseline fit ``logit(PA) = w*logit(SA) + b`` and the effective robustness of every model.

    ``r2`` is the coefficient of determination in **logit** space over the baselines; ``mae`` the mean
    absolute error in accuracy **points** over the baselines. ``er`` (points) is None for every model when
    the fit is not ``trusted``; ``er_untrusted`` keeps the values for inspection (never for ranking).
    ``er_low`` / ``er_high``: the bootstrap interval of each model's ER (:func:`er_intervals`; empty until
    computed, None where unavailable), ``interval`` how it was made. Lists are per model, in the order the
    models were given.
    """

    w: float | None
    b: float | None
    r2: float | None
    mae: float | None
    n_baselines: int
    baselines: list[bool]
    predicted: list[float | None]
    er: list[float | None]
    er_untrusted: list[float | None]
    trusted: bool
    min_r2: float
    min_baselines: int
    clip: float
    space: str = "logit"
    reason: str = ""
    er_low: list[float | None] = field(default_factory=list)
    er_high: list[float | None] = field(default_factory=list)
    interval: str = ""
    floor: float = ACCURACY_FLOOR
    below_floor: list[bool] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def fitted_on(self) -> list[bool]:
        """Per model: a baseline the line was fitted on (a named baseline not below the accuracy floor)."""
        low = self.below_floor or [False] * len(self.baselines)
        return [bool(b and not f) for b, f in zip(self.baselines, low)]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def unfitted(
        cls,
        n: int,
        reason: str,
        baselines: Sequence[bool] | None = None,
        *,
        min_r2: float = 0.8,
        min_baselines: int = 3,
        clip: float = 1e-3,
        space: str = "logit",
        floor: float = ACCURACY_FLOOR,
        below_floor: Sequence[bool] = (),
        notes: Sequence[str] = (),
    ) -> ERFit:
        """No line: every model's ER is None and ``reason`` says why."""
        none = [None] * n
        base = [False] * n if baselines is None else [bool(b) for b in baselines]
        return cls(
            None,
            None,
            None,
            None,
            n_baselines=sum(base),
            baselines=base,
            predicted=none,
            er=none,
            er_untrusted=none,
            trusted=False,
            min_r2=min_r2,
            min_baselines=min_baselines,
            clip=clip,
            space=space,
            reason=reason,
            floor=floor,
            below_floor=list(below_floor),
            notes=list(notes),
        )

    @classmethod
    def from_dict(cls, d: Mapping) -> ERFit:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def select(self, order: Sequence[int]) -> ERFit:
        """The same fit with its per-model lists in the model order ``order`` (indices into the current order)."""
        pick = [int(i) for i in order]

        def take(values: list) -> list:
            return [values[i] for i in pick] if values else values

        return replace(
            self,
            **{
                k: take(getattr(self, k))
                for k in ("baselines", "predicted", "er", "er_untrusted", "er_low", "er_high", "below_floor")
            },
        )

    def curve(self, sa: np.ndarray) -> np.ndarray:
        """Predicted PA (percent) for clean accuracies ``sa`` (percent) on the fitted line."""
        if self.w is None or self.b is None:
            raise ValueError("no baseline fit to evaluate; see ERFit.reason.")
        return from_scale(self.w * to_scale(sa, self.space, self.clip) + self.b, self.space)


def floor_notes(names: Sequence[str], low: Sequence[bool], floor: float, what: str = "SA") -> list[str]:
    """One note per baseline left out for an ID accuracy below ``floor`` (S0 section 5.1)."""
    return [
        f"baseline {n} left out of the fit: its {what} is below the {floor:g}% accuracy floor (Shi et al. 2023 "
        "discard such models; near chance the transformed axis is dominated by noise)"
        for n, f in zip(names, low)
        if f
    ]


def fit_effective_robustness(
    sa: Sequence[float | None],
    pa: Sequence[float | None],
    baseline_mask: Sequence[bool] | None = None,
    *,
    min_r2: float = 0.8,
    min_baselines: int = 3,
    clip: float = 1e-3,
    scale: str = "logit",
    floor: float = ACCURACY_FLOOR,
    names: Sequence[str] | None = None,
) -> ERFit:
    """Fit the baseline trend over the models where ``baseline_mask`` is True (default: all) and return ER.

    ``sa``, ``pa``: accuracies in percent per model (None = undefined, left out of the fit, ER None).
    Accuracies are turned into fractions and clipped to ``[clip, 1 - clip]`` before the ``scale`` transform
    (logit or probit), so 0% and 100% stay finite. Baselines with SA below ``floor`` percent are left out, with a
    note naming them (``names``, default ``model <i>``). ``trusted`` = R^2 (in the ``scale`` space) >= ``min_r2``
    and >= ``min_baselines`` baselines fitted on.
    """
    check_scale(scale)
    if not 0.0 < clip < 0.5:
        raise ValueError(f"clip={clip} must lie in (0, 0.5): accuracies are clipped to [clip, 1-clip].")
    if not 0.0 <= min_r2 <= 1.0:
        raise ValueError(f"er_min_r2={min_r2} must lie in [0, 1] (an R^2 threshold; S0 suggests a high one).")
    if not 0.0 <= floor < 100.0:
        raise ValueError(
            f"er.floor={floor} must lie in [0, 100): the ID accuracy (percent) below which a baseline is left out."
        )
    n = len(sa)
    if len(pa) != n:
        raise ValueError(f"fit_effective_robustness got {n} SA values but {len(pa)} PA values.")
    mask = [True] * n if baseline_mask is None else [bool(m) for m in baseline_mask]
    if len(mask) != n:
        raise ValueError(f"baseline_mask has {len(mask)} entries for {n} models.")
    names = [f"model {i}" for i in range(n)] if names is None else [str(m) for m in names]
    defined = np.asarray([s is not None and p is not None for s, p in zip(sa, pa)], dtype=bool)
    low = [bool(m and s is not None and s < floor) for m, s in zip(mask, sa)]
    notes = floor_notes(names, low, floor)
    sel = np.asarray(mask, dtype=bool) & defined & ~np.asarray(low, dtype=bool)
    k = int(sel.sum())
    common = dict(
        n_baselines=k, baselines=mask, min_r2=min_r2, min_baselines=min_baselines, clip=clip, space=scale, floor=floor
    )
    unfit = dict(min_r2=min_r2, min_baselines=min_baselines, clip=clip, space=scale, floor=floor, below_floor=low)
    if k < 2:
        return ERFit.unfitted(
            n,
            f"{k} baseline model(s) with defined SA and PA; a line needs at least 2 "
            f"(and {min_baselines} to be trusted).",
            mask,
            notes=notes,
            **unfit,
        )
    sa_arr, pa_arr = (np.asarray([np.nan if v is None else v for v in vals], dtype=float) for vals in (sa, pa))
    x, y = (to_scale(np.nan_to_num(v), scale, clip) for v in (sa_arr, pa_arr))
    if np.ptp(x[sel]) < 1e-12:
        return ERFit.unfitted(
            n, "all baselines have the same SA, so the slope of the line is undefined.", mask, notes=notes, **unfit
        )
    from scipy import stats as sps  # slow import (about 0.8 s): kept out of the command line's start

    line = sps.linregress(x[sel], y[sel])
    w, b = float(line.slope), float(line.intercept)
    constant = float(((y[sel] - y[sel].mean()) ** 2).sum()) < 1e-24
    r2 = None if constant else float(line.rvalue) ** 2
    pred = from_scale(w * x + b, scale)
    mae = float(np.mean(np.abs(pa_arr[sel] - pred[sel])))
    raw = [float(pa_arr[i] - pred[i]) if defined[i] else None for i in range(n)]
    reasons = []
    if r2 is None:
        reasons.append("PA is identical across the baselines, so R^2 is undefined")
    elif r2 < min_r2:
        reasons.append(f"R^2 = {r2:.3f} ({scale} space) is below the threshold {min_r2}")
    if k < min_baselines:
        reasons.append(f"only {k} baselines (need {min_baselines})")
    trusted = not reasons
    return ERFit(
        w,
        b,
        r2,
        mae,
        predicted=[float(p) if d else None for p, d in zip(pred, defined)],
        er=raw if trusted else [None] * n,
        er_untrusted=raw,
        trusted=trusted,
        reason="" if trusted else "ER not reported: " + "; ".join(reasons) + ".",
        below_floor=low,
        notes=notes,
        **common,
    )


def er_draws(
    baselines: Sequence[bool], sa_draws: np.ndarray, pa_draws: np.ndarray, clip: float = 1e-3, scale: str = "logit"
) -> np.ndarray:
    """ER (points) of every model in every bootstrap draw, the line refitted (in ``scale`` space) on the
    ``baselines`` of each draw (pass :attr:`ERFit.fitted_on`: the named baselines above the floor).

    ``sa_draws`` / ``pa_draws``: (B, M) accuracies in percent (NaN = undefined in that draw). Returns (B, M), NaN
    where a draw has fewer than 2 baselines with distinct SA (no line) or the model is undefined."""
    base = np.asarray(baselines, dtype=bool)
    x, y = (to_scale(d, scale, clip) for d in (sa_draws, pa_draws))
    er = np.full(sa_draws.shape, np.nan)
    for i in range(len(sa_draws)):
        ok = base & np.isfinite(x[i]) & np.isfinite(y[i])
        if ok.sum() < 2 or np.ptp(x[i, ok]) < 1e-12:
            continue
        w, b = np.polyfit(x[i, ok], y[i, ok], 1)
        er[i] = pa_draws[i] - from_scale(w * x[i] + b, scale)
    return er


def er_intervals(fit: ERFit, sa_draws: np.ndarray, pa_draws: np.ndarray, level: float = 0.95, how: str = "") -> ERFit:
    """``fit`` with a bootstrap interval for every model's ER: the line is refitted on the baselines of each
    draw and ER recomputed (:func:`er_draws`). ``sa_draws`` / ``pa_draws``: (B, M) accuracies in percent (NaN =
    undefined in that draw) from one shared resample of the source images per draw (:func:`model_draws`), models
    in the order of ``fit``. Only a trusted fit gets intervals (an untrusted ER is not reported, nor is its
    interval)."""
    n = len(fit.baselines)
    if not fit.trusted:
        return replace(fit, er_low=[None] * n, er_high=[None] * n, interval="")
    er = er_draws(fit.fitted_on, sa_draws, pa_draws, fit.clip, fit.space)
    bounds = [percentile(er[:, j], level) if fit.er[j] is not None else (None, None) for j in range(n)]
    return replace(
        fit,
        er_low=[lo for lo, _ in bounds],
        er_high=[hi for _, hi in bounds],
        interval=how or f"bootstrap({len(sa_draws)}) over source images, line refitted per resample",
    )
