"""Effective robustness (S0 eq. 1-2, after Taori et al. 2020; docs/method.md, "Effective robustness").

Fit ``logit(PA) = w * logit(SA) + b`` over *baseline* models (``scipy.stats.linregress``), then
``ER(f) = PA(f) - expit(w * logit(SA(f)) + b)`` in points. R^2 is computed **in logit space** (the space of the
regression), MAE in points; ER is reported only when R^2 >= ``min_r2`` with >= ``min_baselines`` baselines
(S0 section 8: a fit-quality gate). ER gets a bootstrap interval over source images (:func:`er_intervals`),
the line refitted on every resample.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np
from scipy import special

from genEval.scores.intervals import percentile


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
            reason=reason,
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
                k: take(getattr(self, k)) for k in ("baselines", "predicted", "er", "er_untrusted", "er_low", "er_high")
            },
        )

    def curve(self, sa: np.ndarray) -> np.ndarray:
        """Predicted PA (percent) for clean accuracies ``sa`` (percent) on the fitted line."""
        if self.w is None or self.b is None:
            raise ValueError("no baseline fit to evaluate; see ERFit.reason.")
        x = np.clip(np.asarray(sa, dtype=float) / 100.0, self.clip, 1 - self.clip)
        return 100.0 * special.expit(self.w * special.logit(x) + self.b)


def fit_effective_robustness(
    sa: Sequence[float | None],
    pa: Sequence[float | None],
    baseline_mask: Sequence[bool] | None = None,
    *,
    min_r2: float = 0.8,
    min_baselines: int = 3,
    clip: float = 1e-3,
) -> ERFit:
    """Fit the baseline trend over the models where ``baseline_mask`` is True (default: all) and return ER.

    ``sa``, ``pa``: accuracies in percent per model (None = undefined, left out of the fit, ER None).
    Accuracies are turned into fractions and clipped to ``[clip, 1 - clip]`` before the logit, so 0% and
    100% stay finite. ``trusted`` = R^2 (logit space) >= ``min_r2`` and >= ``min_baselines`` baselines.
    """
    if not 0.0 < clip < 0.5:
        raise ValueError(f"clip={clip} must lie in (0, 0.5): accuracies are clipped to [clip, 1-clip].")
    if not 0.0 <= min_r2 <= 1.0:
        raise ValueError(f"er_min_r2={min_r2} must lie in [0, 1] (an R^2 threshold; S0 suggests a high one).")
    n = len(sa)
    if len(pa) != n:
        raise ValueError(f"fit_effective_robustness got {n} SA values but {len(pa)} PA values.")
    mask = [True] * n if baseline_mask is None else [bool(m) for m in baseline_mask]
    if len(mask) != n:
        raise ValueError(f"baseline_mask has {len(mask)} entries for {n} models.")
    defined = np.asarray([s is not None and p is not None for s, p in zip(sa, pa)], dtype=bool)
    sel = np.asarray(mask, dtype=bool) & defined
    k = int(sel.sum())
    common = dict(n_baselines=k, baselines=mask, min_r2=min_r2, min_baselines=min_baselines, clip=clip)
    if k < 2:
        return ERFit.unfitted(
            n,
            f"{k} baseline model(s) with defined SA and PA; a line needs at least 2 "
            f"(and {min_baselines} to be trusted).",
            mask,
            min_r2=min_r2,
            min_baselines=min_baselines,
            clip=clip,
        )
    sa_arr, pa_arr = (np.asarray([np.nan if v is None else v for v in vals], dtype=float) for vals in (sa, pa))
    x, y = (special.logit(np.clip(np.nan_to_num(v) / 100.0, clip, 1 - clip)) for v in (sa_arr, pa_arr))
    if np.ptp(x[sel]) < 1e-12:
        return ERFit.unfitted(
            n,
            "all baselines have the same SA, so the slope of the line is undefined.",
            mask,
            min_r2=min_r2,
            min_baselines=min_baselines,
            clip=clip,
        )
    from scipy import stats as sps  # slow import (about 0.8 s): kept out of the command line's start

    line = sps.linregress(x[sel], y[sel])
    w, b = float(line.slope), float(line.intercept)
    constant = float(((y[sel] - y[sel].mean()) ** 2).sum()) < 1e-24
    r2 = None if constant else float(line.rvalue) ** 2
    pred = 100.0 * special.expit(w * x + b)
    mae = float(np.mean(np.abs(pa_arr[sel] - pred[sel])))
    raw = [float(pa_arr[i] - pred[i]) if defined[i] else None for i in range(n)]
    reasons = []
    if r2 is None:
        reasons.append("PA is identical across the baselines, so R^2 is undefined")
    elif r2 < min_r2:
        reasons.append(f"R^2 = {r2:.3f} (logit space) is below the threshold {min_r2}")
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
        **common,
    )


def er_draws(baselines: Sequence[bool], sa_draws: np.ndarray, pa_draws: np.ndarray, clip: float = 1e-3) -> np.ndarray:
    """ER (points) of every model in every bootstrap draw, the line refitted on the ``baselines`` of each draw.

    ``sa_draws`` / ``pa_draws``: (B, M) accuracies in percent (NaN = undefined in that draw). Returns (B, M), NaN
    where a draw has fewer than 2 baselines with distinct SA (no line) or the model is undefined."""
    base = np.asarray(baselines, dtype=bool)
    x, y = (special.logit(np.clip(d / 100.0, clip, 1 - clip)) for d in (sa_draws, pa_draws))
    er = np.full(sa_draws.shape, np.nan)
    for i in range(len(sa_draws)):
        ok = base & np.isfinite(x[i]) & np.isfinite(y[i])
        if ok.sum() < 2 or np.ptp(x[i, ok]) < 1e-12:
            continue
        w, b = np.polyfit(x[i, ok], y[i, ok], 1)
        er[i] = pa_draws[i] - 100.0 * special.expit(w * x[i] + b)
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
    er = er_draws(fit.baselines, sa_draws, pa_draws, fit.clip)
    bounds = [percentile(er[:, j], level) if fit.er[j] is not None else (None, None) for j in range(n)]
    return replace(
        fit,
        er_low=[lo for lo, _ in bounds],
        er_high=[hi for _, hi in bounds],
        interval=how or f"bootstrap({len(sa_draws)}) over source images, line refitted per resample",
    )
