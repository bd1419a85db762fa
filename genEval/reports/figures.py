"""The report's figures: matplotlib (Agg canvas, no display) drawn into base64 PNG data URIs.

Each function takes the models of a report (:class:`ModelView`: a leaderboard row and its loaded runs) and
returns a :class:`PNG` the template inlines as ``<img src="data:image/png;base64,...">``, so the report stays
one self-contained file. PA against budget (:func:`pa_by_budget`) is computed from the per-sample records,
not by re-running; its approximations are stated in :mod:`genEval.reports.report`.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np

from genEval.comparisons.leaderboard import LeaderboardRow
from genEval.interfaces import resize_images
from genEval.runs.reader import RunDir
from genEval.scores.definitions import SCORE
from genEval.scores.effective_robustness import ERFit
from genEval.scores.outcomes import SampleRecord

if TYPE_CHECKING:
    from matplotlib.figure import Figure

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
MAX_CLASSES = 60  # columns of the per-class heatmap; more classes: the ones with the lowest mean FMR
_UNDEFINED = SimpleNamespace(value=None, low=None, high=None)  # a score a (older) row does not carry


@dataclass(frozen=True)
class PNG:
    """One figure as a data URI with its alt text; ``kind`` is ``plot`` or ``images`` (``data-kind``)."""

    src: str
    alt: str
    kind: str = "plot"


@dataclass
class ModelView:
    """What the report needs about one model: its leaderboard row and its loaded runs."""

    name: str
    row: LeaderboardRow
    runs: list[RunDir] = field(default_factory=list)

    @property
    def records(self) -> list[SampleRecord]:
        return [rec for r in self.runs for rec in r.samples]

    @property
    def budget(self) -> int:
        """The search budget recorded with the runs, else the most accepted steps of any sample."""
        for r in self.runs:
            if r.results.config.budget is not None:
                return int(r.results.config.budget)
        return max((rec.accepted_steps for rec in self.records), default=0)


def _new(w: float, h: float) -> Figure:
    from matplotlib.figure import Figure  # imported here: the command line starts without matplotlib (half a second)

    return Figure(figsize=(w, h), dpi=100, layout="constrained")


def _png(fig: Figure, alt: str, kind: str = "plot") -> PNG:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return PNG("data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii"), alt, kind)


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def pa_by_budget(records: list[SampleRecord], budget: int) -> tuple[np.ndarray, np.ndarray | None]:
    """PA (percent) at every budget ``t = 0..budget`` from per-sample records.

    At budget ``t >= 1`` a validated sample counts as wrong when ``1 <= first_fooled <= t``; ``t = 0`` is the
    accuracy on the reconstructions of the validated samples. Returns ``(t, pa)``; ``pa`` is None when no
    sample was validated.
    """
    val = [r for r in records if r.validated]
    ts = np.arange(0, max(0, int(budget)) + 1)
    if not val:
        return ts, None
    ff = np.asarray([int(r.first_fooled) for r in val])
    pa = np.empty(len(ts))
    pa[0] = 100.0 * np.mean([r.recon_pred == r.label for r in val])
    for i, t in enumerate(ts[1:], start=1):
        pa[i] = 100.0 * (1.0 - ((ff >= 1) & (ff <= t)).mean())
    return ts, pa


def _integer_ticks(axis) -> None:
    """Ticks at whole numbers only (steps and sample counts have no fractions)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


#: The bar chart's two axes: accuracies (percent of images, 0 to 100) and the FMR ratios (100 PA / SA, which can
#: pass 100), each on its own scale.
ACCURACIES, RATIOS = ("sa", "sa_validated", "pa"), ("fmr", "fmr_validated")


def _bars(ax, models: list[ModelView], keys: tuple[str, ...]) -> None:
    width = 0.8 / max(1, len(models))
    for i, m in enumerate(models):
        es = [m.row.scores.get(k) or _UNDEFINED for k in keys]
        vals = [np.nan if e.value is None else e.value for e in es]
        err = [
            [0 if e.value is None or e.low is None else max(0.0, e.value - e.low) for e in es],
            [0 if e.value is None or e.high is None else max(0.0, e.high - e.value) for e in es],
        ]
        x = np.arange(len(keys)) + (i - (len(models) - 1) / 2) * width
        ax.bar(x, vals, width * 0.92, yerr=err, capsize=3, label=m.name, color=_color(i))
    ax.set_xticks(np.arange(len(keys)), [SCORE[k].label for k in keys])
    ax.grid(axis="y", alpha=0.3)


def score_bars(models: list[ModelView]) -> PNG:
    """SA, SA_v and PA (accuracies, percent) on one axis, FMR and FMR_v (100 PA / SA, a ratio that can pass 100)
    on another, per model, with 95% interval error bars (no bar for an undefined score)."""
    fig = _new(min(12, 4 + 0.9 * len(models) * 5 / 2), 3.6)
    acc, ratio = fig.subplots(1, 2, gridspec_kw={"width_ratios": [len(ACCURACIES), len(RATIOS)]})
    _bars(acc, models, ACCURACIES)
    acc.set_ylabel("accuracy (% of images)")
    acc.set_ylim(0, 105)
    acc.set_title("accuracies", fontsize=10)
    _bars(ratio, models, RATIOS)
    ratio.set_ylabel("100 PA / SA (FMR), 100 PA / SA_v (FMR_v)", fontsize=9)
    ratio.set_ylim(bottom=0)
    ratio.set_title("robustness ratios (can pass 100)", fontsize=10)
    if len(models) > 1:
        fig.legend(*acc.get_legend_handles_labels(), loc="outside lower center", fontsize=8, ncols=min(4, len(models)))
    fig.suptitle("SA, SA_v, PA | FMR, FMR_v (error bars: 95% interval)", fontsize=10)
    return _png(fig, "bar charts of SA, SA_v and PA (accuracies) and of FMR and FMR_v (ratios) with 95% intervals")


def budget_curves(models: list[ModelView]) -> PNG:
    """PA had the search stopped at step t, per model, with the exact PA at the full budget marked."""
    fig = _new(8, 3.8)
    ax = fig.add_subplot()
    drawn = 0
    for i, m in enumerate(models):
        ts, pa = pa_by_budget(m.records, m.budget)
        if pa is None:
            continue
        ax.plot(ts, pa, color=_color(i), label=m.name, lw=1.6)
        if m.row["pa"].value is not None and len(ts):
            ax.scatter([ts[-1]], [m.row["pa"].value], color=_color(i), marker="x", s=50, zorder=3)
        drawn += 1
    ax.set_xlabel("budget t (steps)")
    _integer_ticks(ax.xaxis)
    ax.set_ylabel("PA at budget t (%)")
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
    ax.set_title("PA had the search stopped at step t (x: exact PA at the full budget)", fontsize=10)
    if drawn:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no validated samples", ha="center", transform=ax.transAxes)
    return _png(fig, "PA against budget")


def first_fooled(models: list[ModelView]) -> tuple[PNG, list[list]]:
    """Histogram of the first accepted step the model got wrong, and a table row per model
    (name, validated, wrong at some accepted step, median first-fooled step)."""
    fig = _new(8, 3.6)
    ax = fig.add_subplot()
    rows = []
    bins = np.arange(0.5, max(1, max((m.budget for m in models), default=1)) + 1.5, 1.0)
    for i, m in enumerate(models):
        val = [r for r in m.records if r.validated]
        ff = np.asarray([int(r.first_fooled) for r in val if int(r.first_fooled) >= 1])
        rows.append([m.name, len(val), len(ff), f"{np.median(ff):.0f}" if len(ff) else ""])
        if len(ff):
            ax.hist(ff, bins=bins, histtype="step", lw=1.6, color=_color(i), label=m.name)
    ax.set_xlabel("first accepted step whose image the model got wrong")
    ax.set_ylabel("validated samples")
    _integer_ticks(ax.xaxis)
    _integer_ticks(ax.yaxis)
    ax.grid(alpha=0.3)
    if any(r[2] for r in rows):
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no sample was fooled", ha="center", transform=ax.transAxes)
    return _png(fig, "histogram of first-fooled steps"), rows


def per_class_heatmap(names: list[str], per_class: dict[str, list[dict]], class_names: list[str]) -> PNG:
    """Per-class FMR of every model (paper App. J); at most :data:`MAX_CLASSES` columns, the lowest mean FMR."""
    mat = np.full((len(names), len(class_names)), np.nan)
    for i, n in enumerate(names):
        for r in per_class.get(n, []):
            if r.get("fmr") is not None:
                mat[i, int(r["class"])] = r["fmr"]
    cols = np.arange(len(class_names))
    if len(class_names) > MAX_CLASSES:
        ok = ~np.isnan(mat)
        mean = np.where(ok.any(0), np.where(ok, mat, 0.0).sum(0) / np.maximum(ok.sum(0), 1), np.inf)
        cols = np.sort(np.argsort(mean)[:MAX_CLASSES])
    sub = mat[:, cols]
    fig = _new(min(14.0, max(5.5, 2.5 + 0.55 * len(cols))), 1.6 + 0.42 * len(names))
    ax = fig.add_subplot()
    vmax = max(100.0, float(np.nanmax(sub)) if np.isfinite(sub).any() else 100.0)
    im = ax.imshow(np.ma.masked_invalid(sub), cmap="viridis", vmin=0, vmax=vmax, aspect="auto")
    ax.set_xticks(np.arange(len(cols)), [str(class_names[c])[:14] for c in cols], rotation=45, ha="right", fontsize=8)
    ax.set_yticks(np.arange(len(names)), names, fontsize=8)
    if sub.size <= 400:
        for (i, j), v in np.ndenumerate(sub):
            if np.isfinite(v):
                ax.text(
                    j, i, f"{v:.0f}", ha="center", va="center", fontsize=7, color="white" if v < 0.6 * vmax else "black"
                )
    fig.colorbar(im, ax=ax, label="FMR (%)")
    ax.set_title("per-class FMR (blank: undefined)", fontsize=10)
    return _png(fig, "per-class FMR heatmap")


def er_scatter(models: list[ModelView], er: ERFit) -> PNG:
    """PA against SA per model (filled: baselines) with the fitted baseline curve (S0)."""
    fig = _new(6.4, 4.6)
    ax = fig.add_subplot()
    pts = [
        (i, m.row["sa"].value, m.row["pa"].value)
        for i, m in enumerate(models)
        if m.row["sa"].value is not None and m.row["pa"].value is not None
    ]
    lo = max(0.5, min(s for _, s, _ in pts) - 5) if pts else 1
    hi = min(99.5, max(s for _, s, _ in pts) + 5) if pts else 99
    xs = np.linspace(lo, hi, 200)
    ax.plot(xs, er.curve(xs), color="#444", lw=1.2, label="baseline fit")
    for i, sa, pa in pts:
        c = _color(i)
        ax.scatter(
            [sa], [pa], s=50, color=c, edgecolors=c, facecolors=c if models[i].row.baseline else "none", zorder=3
        )
        ax.annotate(models[i].name, (sa, pa), textcoords="offset points", xytext=(5, 4), fontsize=8)
    r2 = "undefined" if er.r2 is None else f"{er.r2:.3f}"
    ax.set_title(
        f"{er.space}(PA) = {er.w:.2f} {er.space}(SA) + {er.b:.2f};  R^2 ({er.space}) = {r2},  MAE = {er.mae:.2f} pts",
        fontsize=9,
    )
    ax.set_xlabel("SA (%)")
    ax.set_ylabel("PA (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _png(fig, "effective robustness scatter with baseline fit")


def rankings_side_by_side(
    generators: list[str], models: list[str], ranks: list[dict[str, int | None]], label: str, what: str = "generator"
) -> PNG:
    """The paper's Table 3 as a picture: one column per generator, each model's rank (by ``label``) under it,
    joined across generators (rank 1 at the top; a crossing line is a model whose rank depends on the generator)."""
    n = max(len(models), 1)
    fig = _new(2.2 + 1.6 * len(generators), 1.2 + 0.42 * n)
    ax = fig.add_subplot()
    xs = np.arange(len(generators))
    for i, (name, r) in enumerate(zip(models, ranks)):
        ys = np.array([np.nan if r.get(g) is None else r[g] for g in generators], dtype=float)
        moves = np.nanmax(ys) != np.nanmin(ys) if np.isfinite(ys).any() else False
        ax.plot(xs, ys, marker="o", color=_color(i), lw=2.2 if moves else 1.2, ls="-" if moves else "--")
        last = np.flatnonzero(np.isfinite(ys))
        if len(last):
            j = int(last[-1])
            ax.annotate(name, (xs[j], ys[j]), textcoords="offset points", xytext=(8, -3), fontsize=8, color=_color(i))
    ax.set_xticks(xs, generators)
    ax.set_xlim(-0.3, len(generators) - 0.4)
    ax.set_ylim(n + 0.5, 0.5)
    ax.set_yticks(np.arange(1, n + 1))
    ax.set_ylabel(f"rank by {label}")
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(f"rank by {label} under each {what} (solid: the rank depends on the {what})", fontsize=9)
    return _png(fig, f"ranks by {label} under each {what}, one line per model")


def transfer_heatmap(sources: list[str], targets: list[str], mat: np.ndarray, marks: dict[tuple[int, int], str]) -> PNG:
    """Accuracy of each target model on the images generated against each source model (paper App. D)."""
    fig = _new(min(12, 3.0 + 0.8 * len(targets)), 1.8 + 0.45 * len(sources))
    ax = fig.add_subplot()
    im = ax.imshow(np.ma.masked_invalid(mat), cmap="magma", vmin=0, vmax=100, aspect="auto")
    ax.set_xticks(np.arange(len(targets)), targets, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(np.arange(len(sources)), sources, fontsize=8)
    for (i, j), v in np.ndenumerate(mat):
        if np.isfinite(v):
            ax.text(
                j,
                i,
                f"{v:.1f}{marks.get((i, j), '')}",
                ha="center",
                va="center",
                fontsize=7,
                color="white" if v < 60 else "black",
            )
    ax.set_xlabel("scored on (target model)")
    ax.set_ylabel("generated against")
    fig.colorbar(im, ax=ax, label="accuracy (%)")
    return _png(fig, "transfer matrix")


def _grid_titles(rec: SampleRecord, name, amp: float) -> tuple[str, str, str]:
    fooled = rec.final_pred != rec.label
    tag = (" (fooled)" if rec.clean_pred == rec.label else " (wrong)") if fooled else ""
    return (
        f"{rec.source_id}\ntrue {name(rec.label)} | model {name(rec.clean_pred)}\n"
        f"oracle (recon) {name(rec.oracle_start_pred)}",
        f"perturbed, step {rec.accepted_steps}\nmodel {name(rec.final_pred)}{tag}\n"
        f"oracle accepts {name(rec.label)} (p={rec.oracle_score:.2f})",
        f"difference x{amp:.1f}",
    )


def image_grid(m: ModelView, class_names: list[str], k: int) -> PNG | None | str:
    """Original / perturbed / amplified difference for up to ``k`` validated samples (fooled ones first).

    None when no run of the model saved images; ``""`` when none of its samples was validated.
    """
    run = next((r for r in m.runs if r.has("images")), None)
    if run is None:
        return None
    data = run.tensors("images")
    index = {sid: i for i, sid in enumerate(data["source_ids"])}
    recs = [r for r in run.samples if r.validated and r.source_id in index]
    # really fooled first (right on the original, wrong after), then wrong anyway, then still right
    recs = sorted(recs, key=lambda r: (r.final_pred == r.label, r.clean_pred != r.label, r.source_id))
    recs = recs[:k]
    if not recs:
        return ""

    def name(c: int) -> str:
        return class_names[c] if 0 <= c < len(class_names) else str(c)

    fig = _new(max(4.0, 2.0 * len(recs)), 7.2)
    axes = fig.subplots(3, len(recs), squeeze=False)
    for col, rec in enumerate(recs):
        i = index[rec.source_id]
        pert = data["perturbed"][i].float() / 255
        orig = resize_images(data["original"][i][None].float() / 255, tuple(pert.shape[-2:]))[0]
        diff = pert - orig
        amp = float(0.5 / max(diff.abs().max().item(), 1e-6))
        fooled = rec.final_pred != rec.label
        for r, (img, title) in enumerate(
            zip((orig, pert, (0.5 + amp * diff).clamp(0, 1)), _grid_titles(rec, name, amp))
        ):
            ax = axes[r][col]
            arr = img.permute(1, 2, 0).numpy()
            if arr.shape[-1] == 1:
                ax.imshow(arr[..., 0], cmap="gray", vmin=0, vmax=1, interpolation="nearest")
            else:
                ax.imshow(arr, interpolation="nearest")
            ax.set_title(title, fontsize=7.5, color="#a21b1b" if fooled and r == 1 else "black")
            ax.set_xticks([])
            ax.set_yticks([])
    for r, label in enumerate(("original", "perturbed", "difference")):
        axes[r][0].set_ylabel(label, fontsize=9)
    size = shown_at_one_size(tuple(data["original"].shape[-2:]), tuple(data["perturbed"].shape[-2:]))
    fig.suptitle(size, fontsize=8)
    return _png(fig, f"image grid for {m.name}: {size}", kind="images")


def saved_grid(m: ModelView) -> PNG | None:
    """The ``grid.png`` a run writes (originals over their perturbed images, ``output.grid_size`` validated samples),
    from the first of the model's runs that has one; None when none has."""
    path = next((r.path / "grid.png" for r in m.runs if (r.path / "grid.png").is_file()), None)
    if path is None:
        return None
    src = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
    return PNG(src, f"grid.png of {m.name}: originals (top row) over their perturbed images (bottom row)", "images")


def shown_at_one_size(original_hw: tuple[int, int], perturbed_hw: tuple[int, int]) -> str:
    """The sentence that states at which size a grid shows originals next to perturbed images."""
    o, p = (f"{h}x{w} px" for h, w in (original_hw, perturbed_hw))
    if o == p:
        return f"originals and perturbed images at their size, {p}"
    return f"originals ({o}) resized to the perturbed images' size ({p}) to be shown side by side"
