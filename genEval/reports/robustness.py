"""The report's sections across training data (docs/comparing.md): multi-ID effective robustness, the fixed shift beside
FMR_v, and the per-class differences of every pair of models (paper Table 2 and App. J; Shi et al. 2023 eq. 3).

:func:`robustness_context` gives the template partial ``templates/robustness.html.j2`` its tables and figures
(base64 PNGs drawn with the helpers of :mod:`genEval.reports.figures`): a heatmap of the per-class FMR_v
differences (pairs x classes, a dot where the paired interval excludes 0), FMR_v against corruption accuracy (one
point per model, with Kendall tau), and the multi-ID against the single-ID ER of every model.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from genEval.comparisons.leaderboard import Comparison
from genEval.reports.figures import MAX_CLASSES, PNG, _color, _new, _png
from genEval.scores.class_differences import ClassDifferences
from genEval.scores.fixed_shift import FixedShift
from genEval.scores.multi_id import MultiIDFit

#: Section id -> title, in page order (after the report's own sections).
ROBUSTNESS_SECTIONS = {
    "multi-id": "Multi-ID effective robustness",
    "fixed-shift": "Fixed shift beside FMR_v",
    "class-differences": "Per-class differences",
}
MAX_PAIRS = 45  # rows of the difference heatmap (10 models); more pairs: those with the largest overall difference


def difference_heatmap(d: ClassDifferences) -> PNG:
    """Per-class FMR_v difference a - b (points) of every pair of models, diverging around 0; a dot marks a class
    whose paired interval excludes 0."""
    labels, mat, sep = d.matrix()
    rows = np.arange(len(labels))
    if len(rows) > MAX_PAIRS:
        size = [abs(p.value or 0.0) for p in d.pairs]
        rows = np.sort(np.argsort(size)[::-1][:MAX_PAIRS])
    cols = np.arange(min(len(d.class_names), MAX_CLASSES))
    sub, dots = mat[np.ix_(rows, cols)], sep[np.ix_(rows, cols)]
    fig = _new(min(14.0, max(5.5, 3.0 + 0.55 * len(cols))), 1.6 + 0.36 * len(rows))
    ax = fig.add_subplot()
    vmax = float(np.nanmax(np.abs(sub))) if np.isfinite(sub).any() else 1.0
    im = ax.imshow(np.ma.masked_invalid(sub), cmap="RdBu", vmin=-max(vmax, 1e-6), vmax=max(vmax, 1e-6), aspect="auto")
    ys, xs = np.nonzero(dots)
    ax.scatter(xs, ys, s=10, color="black", marker="o")
    ax.set_xticks(np.arange(len(cols)), [d.class_names[c][:14] for c in cols], rotation=45, ha="right", fontsize=8)
    ax.set_yticks(np.arange(len(rows)), [labels[r] for r in rows], fontsize=8)
    fig.colorbar(im, ax=ax, label="FMR_v(a) - FMR_v(b) (points)")
    ax.set_title("per-class FMR_v difference (dot: paired 95% interval excludes 0; blank: undefined)", fontsize=9)
    return _png(fig, "heatmap of per-class FMR_v differences between every pair of models")


def shift_scatter(fs: FixedShift) -> PNG:
    """FMR_v against corruption accuracy, one point per model (the paper's Table 2 contrast as a picture)."""
    fig = _new(6.0, 4.4)
    ax = fig.add_subplot()
    for i, r in enumerate(fs.rows):
        if r.fmr_validated.value is None or r.overall.value is None:
            continue
        ax.errorbar(
            [r.overall.value],
            [r.fmr_validated.value],
            xerr=_err(r.overall),
            yerr=_err(r.fmr_validated),
            fmt="o",
            color=_color(i),
            capsize=2,
        )
        ax.annotate(
            r.model, (r.overall.value, r.fmr_validated.value), textcoords="offset points", xytext=(5, 4), fontsize=8
        )
    ax.set_xlabel("corruption accuracy (%, mean over corruptions and severities)")
    ax.set_ylabel("FMR_v (%)")
    ax.grid(alpha=0.3)
    ax.set_title(f"FMR_v against corruption accuracy; Kendall tau = {fs.tau.fmt(3)}", fontsize=9)
    return _png(fig, "FMR_v against corruption accuracy, one point per model")


def er_single_multi(m: MultiIDFit) -> PNG:
    """Multi-ID against single-ID ER per model (filled: baselines fitted on); the diagonal is no change."""
    fig = _new(5.6, 4.4)
    ax = fig.add_subplot()
    pts = [(i, s, v) for i, (s, v) in enumerate(zip(m.er_single, m.er_multi)) if s is not None and v is not None]
    for i, s, v in pts:
        c = _color(i)
        ax.scatter([s], [v], color=c, edgecolors=c, facecolors=c if m.fitted_on[i] else "none", s=45, zorder=3)
        ax.annotate(m.models[i], (s, v), textcoords="offset points", xytext=(5, 4), fontsize=8)
    if pts:
        lo = min(min(s, v) for _, s, v in pts) - 1
        hi = max(max(s, v) for _, s, v in pts) + 1
        ax.plot([lo, hi], [lo, hi], color="#888", lw=1, ls="--")
    ax.axhline(0, color="#bbb", lw=0.8)
    ax.axvline(0, color="#bbb", lw=0.8)
    ax.set_xlabel(f"single-ID ER (points, line over {m.id_sets[0]})")
    ax.set_ylabel("multi-ID ER (points, plane)")
    ax.grid(alpha=0.3)
    tau = "undefined" if m.tau is None else f"{m.tau:.3f}"
    ax.set_title(f"single- vs multi-ID effective robustness ({m.space}); Kendall tau = {tau}", fontsize=9)
    return _png(fig, "multi-ID against single-ID effective robustness, one point per model")


def _err(v: Any) -> list[list[float]] | None:
    """Error-bar lengths of an interval around its value (a percentile interval may not contain the point value:
    the bar then stops at the value)."""
    if v.low is None:
        return None
    return [[max(0.0, v.value - v.low)], [max(0.0, v.high - v.value)]]


def _iv(v: Any) -> dict[str, Any]:
    return {"value": v.value, "low": v.low, "high": v.high}


def robustness_context(comp: Comparison) -> dict[str, Any]:
    """What ``robustness.html.j2`` renders: per present part, its figure and table rows (None: part absent)."""
    out: dict[str, Any] = {"sections": ROBUSTNESS_SECTIONS, "multi": None, "shift": None, "diffs": None}
    if (m := comp.multi_id) is not None:
        out["multi"] = {
            "fit": m,
            "figure": er_single_multi(m),
            "head": [
                "model",
                "family",
                "baseline",
                *(f"SA [{s}]" for s in m.id_sets),
                "PA",
                "ER single",
                "ER multi [95%]",
            ],
            "rows": [
                [
                    name,
                    m.families[i] or "-",
                    "yes" if m.fitted_on[i] else ("below floor" if m.baselines[i] else "no"),
                    *("" if v is None else f"{v:.2f}" for v in m.sa[i]),
                    "" if m.pa[i] is None else f"{m.pa[i]:.2f}",
                    "" if m.er_single[i] is None else f"{m.er_single[i]:+.2f}",
                    m.er_cell(i),
                ]
                for i, name in enumerate(m.models)
            ],
            "quality": [
                [
                    name,
                    *(("-" if v is None else f"{v:.3f}") for v in (q.r2, q.mae, q.r2_loo, q.mae_loo, q.mae_held_out)),
                ]
                for name, q in (("single-ID line", m.single), ("multi-ID plane", m.multi))
            ],
            "families": [
                [f.family, f.n, _pm(f.single_mean, f.single_std), _pm(f.multi_mean, f.multi_std), _f(f.tau)]
                for f in m.family_er
            ],
        }
    if (fs := comp.fixed_shift) is not None:
        fams = list(fs.families)
        out["shift"] = {
            "fit": fs,
            "figure": shift_scatter(fs),
            "head": ["model", "FMR_v", "rank FMR_v", "corruption accuracy", "rank corruptions", *fams],
            "rows": [
                [r.model, _iv(r.fmr_validated), r.rank_fmr_validated or "-", _iv(r.overall), r.rank_shift or "-"]
                + [_iv(r.families[f]) for f in fams]
                for r in fs.rows
            ],
            "corr_head": ["model", *fs.corruptions],
            "corr_rows": [[r.model, *(f"{r.corruptions[c]:.1f}" for c in fs.corruptions)] for r in fs.rows],
        }
    if (d := comp.class_differences) is not None and d.pairs:
        out["diffs"] = {
            "fit": d,
            "figure": difference_heatmap(d),
            "rows": [
                [
                    p.a,
                    p.b,
                    "-"
                    if p.value is None
                    else f"{p.value:+.2f}" + (f" [{p.low:+.2f}, {p.high:+.2f}]" if p.low is not None else ""),
                    ", ".join(p.drivers) or "-",
                ]
                for p in d.pairs
            ],
        }
    return out


def figure_count(ctx: dict[str, Any]) -> int:
    """The number of figures the partial shows."""
    return sum(1 for k in ("multi", "shift", "diffs") if ctx.get(k))


def _pm(mean: float | None, std: float | None) -> str:
    return "-" if mean is None else f"{mean:+.2f}" + ("" if std is None else f" ± {std:.2f}")


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"
