"""Multi-ID effective robustness (Shi et al. 2023, S0 section 4, eq. 3; docs/scores.md, "Multi-ID effective
robustness").

With models trained on different data, one ID test set favours the models trained on its distribution: a model
whose training data do not match it gets a low SA, hence a low predicted PA, and looks robust (S0 Fig. 1). The
multi-ID baseline is a plane over ``k`` ID test sets that together cover the models' training distributions:

    T(PA) = sum_j w_j T(SA_j) + b         (T = logit, S0 eq. 3; or probit, Miller's thesis ch. 4)

fitted by least squares over the baseline models (:func:`genEval.scores.effective_robustness.fit_trend`), and
``ER(f) = PA(f) - T^-1(sum_j w_j T(SA_j(f)) + b)`` in points. Fit quality as S0 reports it: R^2 (in the stated
space) and MAE (points) **in-fit** over the baselines, and **held-out**: leave-one-baseline-out (each baseline
predicted by the plane fitted on the others: predictive R^2 = 1 - PRESS / SS_tot, and MAE) and the MAE over the
models not used in the fit (S0 Table 4). A plane over ``k`` sets has ``k + 1`` coefficients; fitting it with a
residual (an R^2 that can fail) and a leave-one-out check needs at least ``k + 2`` baselines above the accuracy
floor, and :func:`fit_plane` refuses fewer, naming how many it needs. The single-ID line of the same models on the
first ID set is fitted beside it (``k = 1``), so the two ER rankings can be compared: Kendall tau between them
over all models and within each training-data family (S0 Tables 5-7), and ER mean +- std per family (S0 Tables 1b,
3a-b). ER gets a bootstrap interval (:func:`plane_intervals`): the plane is refitted on every resample of the
source images (SA_1, PA) and of each further ID set's images (SA_j).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from genEval.scores.effective_robustness import (
    ACCURACY_FLOOR,
    check_scale,
    fit_trend,
    floor_notes,
    from_scale,
    to_scale,
)
from genEval.scores.intervals import percentile
from genEval.scores.rankings import kendall_tau


@dataclass(frozen=True)
class PlaneQuality:
    """Fit quality of one baseline function (S0 Tables 1a, 2): ``r2`` / ``mae`` in-fit over the baselines fitted
    on, ``r2_loo`` / ``mae_loo`` leave-one-baseline-out, ``mae_held_out`` over the models not used in the fit
    (``n_held_out`` of them). R^2 in the function's space, MAE in points; None where undefined."""

    weights: list[float] | None
    b: float | None
    r2: float | None
    mae: float | None
    r2_loo: float | None
    mae_loo: float | None
    mae_held_out: float | None
    n_held_out: int


@dataclass(frozen=True)
class FamilyER:
    """ER of one training-data family (S0 Table 1b): ``n`` models, mean and std (ddof 1; None for one model) of the
    single-ID and the multi-ID ER, and Kendall tau between the two rankings within the family (None below 2)."""

    family: str
    n: int
    single_mean: float | None
    single_std: float | None
    multi_mean: float | None
    multi_std: float | None
    tau: float | None


@dataclass(frozen=True)
class MultiIDFit:
    """Single- and multi-ID effective robustness of every model (lists in the order of ``models``).

    ``id_sets``: the names of the ID test sets (the first is the one the search used); ``sa``: per model its SA on
    each set (percent); ``pa``: its PA. ``single`` / ``multi``: the fit quality of the line over the first set and
    of the plane over all. ``er_single`` / ``er_multi`` (points) with the multi-ID bootstrap interval
    ``er_low`` / ``er_high``; ``families`` the training-data family of each model (None: none given) and
    ``family_er`` the per-family summary; ``tau`` Kendall tau between the single- and multi-ID ER rankings over every
    model with both. ``trusted``: the plane's in-fit R^2 reaches ``min_r2``; else ``reason`` says why (the values are
    kept, for inspection)."""

    id_sets: list[str]
    space: str
    models: list[str]
    families: list[str | None]
    baselines: list[bool]
    fitted_on: list[bool]
    sa: list[list[float | None]]
    pa: list[float | None]
    single: PlaneQuality
    multi: PlaneQuality
    er_single: list[float | None]
    er_multi: list[float | None]
    family_er: list[FamilyER]
    tau: float | None
    min_r2: float
    floor: float
    trusted: bool
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    er_low: list[float | None] = field(default_factory=list)
    er_high: list[float | None] = field(default_factory=list)
    interval: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> MultiIDFit:
        fields = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        fields["single"], fields["multi"] = PlaneQuality(**d["single"]), PlaneQuality(**d["multi"])
        fields["family_er"] = [FamilyER(**f) for f in d.get("family_er") or []]
        return cls(**fields)

    def equation(self) -> str:
        """The fitted plane as text, e.g. ``logit(PA) = 0.812 logit(SA[digits]) + 0.104 logit(SA[x]) - 0.2``."""
        t, q = self.space, self.multi
        if q.weights is None:
            return "no plane"
        terms = "".join(
            f"{'' if i == 0 else (' + ' if w >= 0 else ' - ')}{w if i == 0 else abs(w):.3f} {t}(SA[{name}])"
            for i, (w, name) in enumerate(zip(q.weights, self.id_sets))
        )
        return f"{t}(PA) = {terms} {'+' if q.b >= 0 else '-'} {abs(q.b):.3f}"

    def notes_text(self) -> list[str]:
        """Sentences for the comparison's notes."""
        out = [
            f"multi-ID effective robustness over {len(self.id_sets)} ID sets ({', '.join(self.id_sets)}), "
            f"{sum(self.fitted_on)} baselines, {self.space} space: {self.equation()}; in-fit R^2 "
            f"{_num(self.multi.r2, 3)} (single-ID {_num(self.single.r2, 3)}), MAE {_num(self.multi.mae)} points "
            f"(single-ID {_num(self.single.mae)}); leave-one-baseline-out R^2 {_num(self.multi.r2_loo, 3)}, MAE "
            f"{_num(self.multi.mae_loo)}; MAE over the {self.multi.n_held_out} models not in the fit "
            f"{_num(self.multi.mae_held_out)} (single-ID {_num(self.single.mae_held_out)})"
            + ("" if self.trusted else f" -> {self.reason}"),
            "Kendall tau(single-ID ER ranking, multi-ID ER ranking): " + _num(self.tau, 3, "undefined"),
        ]
        return out + self.notes

    def markdown_lines(self) -> list[str]:
        """The leaderboard.md section: per-model and per-family tables and the fit quality."""
        sets = " | ".join(f"SA[{s}]" for s in self.id_sets)
        lines = [
            f"## Multi-ID effective robustness ({self.space} space; Shi et al. 2023, eq. 3)",
            "",
            f"Plane: {self.equation()}. " + ("" if self.trusted else f"Not trusted: {self.reason} "),
            "",
            "| fit | R^2 in-fit | MAE in-fit | R^2 leave-one-out | MAE leave-one-out | MAE not in fit |",
            "|---|---|---|---|---|---|",
        ]
        for name, q in (("single-ID (line)", self.single), ("multi-ID (plane)", self.multi)):
            lines.append(
                f"| {name} | {_num(q.r2, 3)} | {_num(q.mae)} | {_num(q.r2_loo, 3)} | {_num(q.mae_loo)} | "
                f"{_num(q.mae_held_out)} ({q.n_held_out}) |"
            )
        head = f"| model | family | baseline | {sets} | PA | ER single | ER multi [95%] |"
        lines += ["", head, "|" + "---|" * (6 + len(self.id_sets))]
        for i, m in enumerate(self.models):
            base = "yes" if self.fitted_on[i] else ("below floor" if self.baselines[i] else "no")
            cells = " | ".join(_num(v) for v in self.sa[i])
            lines.append(
                f"| {m} | {self.families[i] or '-'} | {base} | {cells} | {_num(self.pa[i])} | "
                f"{_signed(self.er_single[i])} | {self.er_cell(i)} |"
            )
        if self.family_er:
            lines += [
                "",
                "| family | models | ER single (mean ± std) | ER multi (mean ± std) | Kendall tau single vs multi |",
                "|---|---|---|---|---|",
            ]
            for f in self.family_er:
                lines.append(
                    f"| {f.family} | {f.n} | {_pm(f.single_mean, f.single_std)} | {_pm(f.multi_mean, f.multi_std)} | "
                    f"{_num(f.tau, 3, '-')} |"
                )
        lines += ["", "Kendall tau(single-ID, multi-ID ER ranking), all models: " + _num(self.tau, 3, "undefined")]
        return lines + [f"- {n}" for n in self.notes] + [""]

    def er_cell(self, i: int) -> str:
        v = self.er_multi[i]
        if v is None:
            return ""
        lo, hi = (self.er_low[i], self.er_high[i]) if self.er_low else (None, None)
        return _signed(v) + (f" [{lo:+.2f}, {hi:+.2f}]" if lo is not None else "")


def _num(v: float | None, digits: int = 2, missing: str = "-") -> str:
    return missing if v is None else f"{v:.{digits}f}"


def _signed(v: float | None) -> str:
    return "" if v is None else f"{v:+.2f}"


def _pm(mean: float | None, std: float | None) -> str:
    if mean is None:
        return "-"
    return f"{mean:+.2f}" + (f" ± {std:.2f}" if std is not None else "")


# ------------------------------------------------------------------------------------------ fitting
def needed_baselines(k: int) -> int:
    """Baselines a plane over ``k`` ID sets needs: its ``k + 1`` coefficients plus one residual degree of freedom
    (so R^2 can fail and each leave-one-out fit is still determined)."""
    return k + 2


def _quality(x: np.ndarray, y: np.ndarray, fit_mask: np.ndarray, held: np.ndarray, scale: str) -> PlaneQuality:
    """In-fit, leave-one-out and held-out quality of the trend of ``y`` on ``x`` (n, k) over ``fit_mask``."""
    xs, ys = x[fit_mask], y[fit_mask]
    trend = fit_trend(xs, ys, scale)
    loo_pred = []
    for i in range(len(ys)):
        keep = np.arange(len(ys)) != i
        t = fit_trend(xs[keep], ys[keep], scale)
        loo_pred.append(float(xs[i] @ t.weights + t.b))
    loo = np.asarray(loo_pred)
    ss_tot = float(((ys - ys.mean()) ** 2).sum())
    r2_loo = None if ss_tot < 1e-24 else 1.0 - float(((ys - loo) ** 2).sum()) / ss_tot
    mae_loo = float(np.mean(np.abs(from_scale(ys, scale) - from_scale(loo, scale))))
    pred = from_scale(x @ trend.weights + trend.b, scale)
    mae_out = float(np.mean(np.abs(from_scale(y[held], scale) - pred[held]))) if held.any() else None
    return PlaneQuality(
        [float(w) for w in trend.weights], trend.b, trend.r2, trend.mae, r2_loo, mae_loo, mae_out, int(held.sum())
    )


def _er(x: np.ndarray, pa: np.ndarray, q: PlaneQuality, scale: str) -> np.ndarray:
    return pa - from_scale(x @ np.asarray(q.weights) + q.b, scale)


def _family_er(
    families: Sequence[str | None], single: np.ndarray, multi: np.ndarray
) -> tuple[list[FamilyER], float | None]:
    def stats(v: np.ndarray) -> tuple[float | None, float | None]:
        v = v[np.isfinite(v)]
        return (float(v.mean()) if len(v) else None, float(v.std(ddof=1)) if len(v) > 1 else None)

    ok = np.isfinite(single) & np.isfinite(multi)
    tau = kendall_tau(single[ok], multi[ok]) if ok.sum() >= 2 else None
    out = []
    for fam in dict.fromkeys(f for f in families if f is not None):
        sel = np.asarray([f == fam for f in families]) & ok
        s_mean, s_std = stats(single[sel])
        m_mean, m_std = stats(multi[sel])
        t = kendall_tau(single[sel], multi[sel]) if sel.sum() >= 2 else None
        out.append(FamilyER(str(fam), int(sel.sum()), s_mean, s_std, m_mean, m_std, t))
    return out, tau


def fit_plane(
    models: Sequence[str],
    id_sets: Sequence[str],
    sa: Sequence[Sequence[float | None]],
    pa: Sequence[float | None],
    baselines: Sequence[bool],
    families: Sequence[str | None] | None = None,
    *,
    scale: str = "logit",
    min_r2: float = 0.8,
    floor: float = ACCURACY_FLOOR,
    clip: float = 1e-3,
) -> MultiIDFit:
    """Fit the single-ID line (first ID set) and the multi-ID plane (all sets) over the ``baselines`` and return
    every model's ER under both (see the module docstring).

    ``sa``: per model, its SA (percent) on each of the ``id_sets`` (at least 2); ``pa``: per model, its PA.
    Baselines with an SA below ``floor`` on any ID set are left out, with a note. Raises a ValueError naming the
    count needed when fewer than ``k + 2`` baselines remain (:func:`needed_baselines`), or when an input is
    malformed."""
    check_scale(scale)
    n, k = len(models), len(id_sets)
    if k < 2:
        raise ValueError(
            f"multi-ID effective robustness needs at least 2 ID sets, got {list(id_sets)}; with one, the ER of the "
            "leaderboard is the single-ID one (id_data=[<search data>, <second ID set>])."
        )
    if len(sa) != n or len(pa) != n or len(baselines) != n or any(len(row) != k for row in sa):
        raise ValueError(
            f"fit_plane needs, per each of the {n} models, SA on the {k} ID sets, a PA and a baseline flag; got "
            f"{len(sa)} SA rows, {len(pa)} PA values, {len(baselines)} flags."
        )
    families = [None] * n if families is None else [None if f is None else str(f) for f in families]
    sa_arr = np.asarray([[np.nan if v is None else v for v in row] for row in sa], dtype=float)
    pa_arr = np.asarray([np.nan if v is None else v for v in pa], dtype=float)
    defined = np.isfinite(sa_arr).all(1) & np.isfinite(pa_arr)
    base = np.asarray(baselines, dtype=bool)
    low = base & defined & (sa_arr < floor).any(1)
    fit_mask = base & defined & ~low
    need = needed_baselines(k)
    if fit_mask.sum() < need:
        raise ValueError(
            f"a multi-ID plane over {k} ID sets ({', '.join(id_sets)}) has {k + 1} coefficients and needs at least "
            f"{need} baselines with SA on every set above the {floor:g}% floor, but has {int(fit_mask.sum())} "
            f"({', '.join(m for m, f in zip(models, fit_mask) if f) or 'none'}). Name {need - int(fit_mask.sum())} "
            "more baselines (baselines=[...]), or use fewer ID sets."
        )
    x = to_scale(np.nan_to_num(sa_arr), scale, clip)
    y = to_scale(np.nan_to_num(pa_arr), scale, clip)
    if np.linalg.matrix_rank(np.column_stack([x[fit_mask], np.ones(int(fit_mask.sum()))])) < k + 1:
        raise ValueError(
            "the baselines' SA values do not span the ID sets (two sets rank every baseline alike, or one set gives "
            "every baseline the same SA), so the plane's coefficients are not determined; add baselines that differ "
            "in how they do on the ID sets (e.g. trained on each set's distribution, S0 section 4)."
        )
    held = defined & ~base
    single = _quality(x[:, :1], y, fit_mask, held, scale)
    multi = _quality(x, y, fit_mask, held, scale)
    er_s, er_m = _er(x[:, :1], pa_arr, single, scale), _er(x, pa_arr, multi, scale)
    er_s[~defined], er_m[~defined] = np.nan, np.nan
    family_er, tau = _family_er(families, er_s, er_m)
    reasons = []
    if multi.r2 is None:
        reasons.append("PA is identical across the baselines, so R^2 is undefined")
    elif multi.r2 < min_r2:
        reasons.append(f"the plane's R^2 = {multi.r2:.3f} ({scale} space) is below the threshold {min_r2}")
    return MultiIDFit(
        id_sets=list(id_sets),
        space=scale,
        models=list(models),
        families=families,
        baselines=[bool(b) for b in base],
        fitted_on=[bool(f) for f in fit_mask],
        sa=[[None if np.isnan(v) else float(v) for v in row] for row in sa_arr],
        pa=[None if np.isnan(v) else float(v) for v in pa_arr],
        single=single,
        multi=multi,
        er_single=[None if np.isnan(v) else float(v) for v in er_s],
        er_multi=[None if np.isnan(v) else float(v) for v in er_m],
        family_er=family_er,
        tau=tau,
        min_r2=min_r2,
        floor=floor,
        trusted=not reasons,
        reason="; ".join(reasons),
        notes=floor_notes(models, low, floor, "SA on some ID set"),
    )


def plane_draws(
    fit_mask: Sequence[bool], sa_draws: np.ndarray, pa_draws: np.ndarray, scale: str, clip: float = 1e-3
) -> np.ndarray:
    """Multi-ID ER (points) of every model in every draw, the plane refitted on the ``fit_mask`` baselines of each.

    ``sa_draws``: (B, M, k) SA per draw, model and ID set; ``pa_draws``: (B, M). Returns (B, M), NaN where a draw's
    baselines do not determine the plane or a value is undefined."""
    base = np.asarray(fit_mask, dtype=bool)
    k = sa_draws.shape[2]
    x, y = to_scale(sa_draws, scale, clip), to_scale(pa_draws, scale, clip)
    out = np.full(pa_draws.shape, np.nan)
    for i in range(len(pa_draws)):
        ok = base & np.isfinite(x[i]).all(1) & np.isfinite(y[i])
        design = np.column_stack([x[i, ok], np.ones(int(ok.sum()))])
        if ok.sum() < needed_baselines(k) or np.linalg.matrix_rank(design) < k + 1:
            continue
        t = fit_trend(x[i, ok], y[i, ok], scale)
        out[i] = pa_draws[i] - from_scale(x[i] @ t.weights + t.b, scale)
    return out


def plane_intervals(
    fit: MultiIDFit, sa_draws: np.ndarray, pa_draws: np.ndarray, level: float = 0.95, how: str = ""
) -> MultiIDFit:
    """``fit`` with a percentile bootstrap interval for every model's multi-ID ER (:func:`plane_draws`; draws in the
    model order of ``fit``)."""
    er = plane_draws(fit.fitted_on, sa_draws, pa_draws, fit.space)
    bounds = [percentile(er[:, j], level) if fit.er_multi[j] is not None else (None, None) for j in range(len(er.T))]
    return replace(
        fit,
        er_low=[lo for lo, _ in bounds],
        er_high=[hi for _, hi in bounds],
        interval=how or f"bootstrap({len(pa_draws)}) over source images and ID-set images, plane refitted per resample",
    )
