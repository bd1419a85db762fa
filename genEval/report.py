"""One self-contained HTML report for a run or a comparison (paper App. J per-class scores, App. N
leaderboards, Table 2 comparisons; S0 effective-robustness scatter; ``../seeds/digest.md`` 5.3).

``write_report(comparison_or_dir, path)`` writes ``report.html``: no scripts, no external requests (a
Content-Security-Policy forbids them), every plot a base64 PNG drawn with matplotlib's Agg canvas.
Sections: summary, leaderboard, scores (SA/PA/FMR with intervals), PA against budget, first-fooled steps,
per-class FMR, effective robustness, stability, pairwise differences, transfer (when a ``transfer.csv``
lies next to the input), and image grids (original / perturbed / amplified difference) when the runs
were made with ``save_images=true``. A single run directory gets the same report with its own sections.

PA against budget is computed from the per-sample records, not by re-running: at budget ``t`` a
validated sample counts as wrong when ``1 <= first_fooled <= t`` (the first accepted step whose image the
model got wrong). Approximations, stated in the report: a sample fooled at an earlier step and correct
again later still counts as wrong; a sample whose search was stopped by the oracle before ``t`` keeps its
last accepted image; ``t = 0`` is the accuracy on the reconstruction of the validated samples. The exact
PA at the full budget is marked next to each curve, so the gap is visible.

``transfer.csv``: the long format ``geneval transfer`` writes (``source, target, pa, ...``; see
:func:`read_transfer`) or a wide one (header ``source,<target>,...``, one row of accuracies per source).
"""

from __future__ import annotations

import base64
import csv
import html
import io
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from genEval.compare import Comparison, LoadedRun, load_runs
from genEval.rundir import read_results, read_samples
from genEval.stats import METRIC_LABELS, METRICS, format_estimate

log = logging.getLogger(__name__)

SECTIONS = (
    "summary",
    "leaderboard",
    "scores",
    "budget",
    "first-fooled",
    "per-class",
    "effective-robustness",
    "stability",
    "differences",
    "transfer",
    "images",
)
SECTION_TITLES = {
    "summary": "Summary",
    "leaderboard": "Leaderboard",
    "scores": "Scores with 95% intervals",
    "budget": "PA against budget",
    "first-fooled": "First-fooled step",
    "per-class": "Per-class FMR",
    "effective-robustness": "Effective robustness",
    "stability": "Ranking stability",
    "differences": "Pairwise differences",
    "transfer": "Transfer",
    "images": "Images: original / perturbed / difference",
}
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
MAX_CLASSES = 60

CSS = """
body{font-family:-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;margin:0;color:#1d232b;
 background:#f6f7f9}
header{background:#1f3a5f;color:#fff;padding:18px 32px}header h1{margin:0;font-size:24px}
header p{margin:4px 0 0;opacity:.85;font-size:14px}
nav{padding:8px 32px;background:#e6ebf1;font-size:13px}
nav a{margin-right:14px;color:#1f3a5f;text-decoration:none}
main{padding:8px 32px 40px;max-width:1250px}
section{background:#fff;border:1px solid #dde2e8;border-radius:6px;padding:12px 20px;margin:16px 0}
h2{font-size:19px;margin:4px 0 10px;color:#1f3a5f}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{border-bottom:1px solid #e3e6ea;padding:4px 9px;text-align:right;white-space:nowrap}
th{background:#f0f3f6}td.l,th.l{text-align:left}
img.figure{max-width:100%;height:auto;display:block;margin:8px 0}
.note{color:#555;font-size:13px}.warn{color:#9a3b00;font-size:13px}
.muted{color:#888}.scroll{overflow-x:auto}
span.ci{display:block;font-size:11px;color:#667}
"""


# ------------------------------------------------------------------------------------------- data
@dataclass
class ModelView:
    """What the report needs about one model: its leaderboard row and its loaded runs."""

    name: str
    row: dict
    runs: list[LoadedRun] = field(default_factory=list)

    @property
    def records(self) -> list[dict]:
        return [rec for r in self.runs for rec in r.records]

    @property
    def budget(self) -> int:
        for r in self.runs:
            b = ((r.results.get("config") or {}).get("search") or {}).get("budget")
            if b is not None:
                return int(b)
        steps = [int(rec.get("accepted_steps", 0)) for rec in self.records]
        return max(steps, default=0)


def pa_by_budget(records: list[dict], budget: int) -> tuple[np.ndarray, np.ndarray | None]:
    """PA (percent) at every budget ``t = 0..budget`` from per-sample records (module docstring).

    Returns ``(t, pa)``; ``pa`` is None when no sample was validated.
    """
    val = [r for r in records if r.get("validated")]
    ts = np.arange(0, max(0, int(budget)) + 1)
    if not val:
        return ts, None
    ff = np.asarray([int(r["first_fooled"]) for r in val])
    recon_ok = np.asarray([r["recon_pred"] == r["label"] for r in val])
    pa = np.empty(len(ts))
    pa[0] = 100.0 * recon_ok.mean()
    for i, t in enumerate(ts[1:], start=1):
        pa[i] = 100.0 * (1.0 - ((ff >= 1) & (ff <= t)).mean())
    return ts, pa


def _single_run_row(name: str, results: dict) -> dict:
    s = results["scores"]
    row = {
        "model": name,
        "rank_fmr": 1 if s["fmr"]["value"] is not None else None,
        "rank_sa": 1 if s["sa"]["value"] is not None else None,
        "rank_diff": 0,
        "baseline": False,
        "repetitions": 1,
        "n": s["n"],
        "n_validated": s["n_validated"],
        "er": None,
        "seeds": [results.get("seed")],
    }
    for m in METRICS:
        row[m] = {**s[m], "std": None, "per_rep": [s[m]["value"]]}
    return row


def _load(source: Any) -> tuple[str, Comparison | None, list[ModelView], Path | None, dict]:
    """-> (kind 'comparison' | 'run', comparison, models, base dir, single-run results)."""
    if isinstance(source, Comparison):
        comp, base = source, Path(source.out_dir) if source.out_dir else None
    else:
        p = Path(source).expanduser()
        if (p / "comparison.json").is_file() or p.name == "comparison.json":
            comp = Comparison.load(p)
            base = p if p.is_dir() else p.parent
        elif (p / "results.json").is_file():
            results = read_results(p)
            name = str(
                (results.get("config") or {}).get("comparison", {}).get("model")
                or results.get("components", {}).get("classifier")
                or p.name
            )
            run = LoadedRun(name, 0, str(p), results, read_samples(p))
            return "run", None, [ModelView(name, _single_run_row(name, results), [run])], p, results
        else:
            raise FileNotFoundError(
                f"'{p}' is neither a run directory (results.json) nor a comparison directory "
                "(comparison.json). Pass input=<run dir or comparison dir>."
            )
    models = []
    for row in comp.leaderboard:
        dirs = [d for d in comp.runs.get(row["model"], []) if (Path(d) / "results.json").is_file()]
        if len(dirs) < len(comp.runs.get(row["model"], [])):
            log.warning(
                "report: some run directories of %s are missing; per-sample sections use %d of them",
                row["model"],
                len(dirs),
            )
        runs = load_runs({row["model"]: dirs})[row["model"]] if dirs else []
        models.append(ModelView(row["model"], row, runs))
    return "comparison", comp, models, base, {}


# ------------------------------------------------------------------------------------------- figures
class _Figures:
    """Collects figures as base64 PNG ``<img>`` tags (and counts them: the report states the count)."""

    def __init__(self) -> None:
        self.count = 0

    def new(self, w: float, h: float):
        from matplotlib.figure import Figure

        return Figure(figsize=(w, h), dpi=100, layout="constrained")

    def img(self, fig, alt: str, kind: str = "plot") -> str:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
        self.count += 1
        data = base64.b64encode(buf.getvalue()).decode("ascii")
        return (
            f'<img class="figure" data-kind="{kind}" alt="{html.escape(alt)}" '
            f'src="data:image/png;base64,{data}">'
        )


COLORS = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _bars(figs: _Figures, models: list[ModelView]) -> str:
    metrics = ("sa", "pa", "fmr")
    fig = figs.new(min(12, 3 + 1.2 * len(models) * len(metrics) / 2), 3.6)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(models))
    for i, m in enumerate(models):
        vals, err = [], [[], []]
        for k in metrics:
            e = m.row[k]
            v = e.get("value")
            vals.append(np.nan if v is None else v)
            lo, hi = e.get("low"), e.get("high")
            err[0].append(0 if v is None or lo is None else max(0.0, v - lo))
            err[1].append(0 if v is None or hi is None else max(0.0, hi - v))
        x = np.arange(len(metrics)) + (i - (len(models) - 1) / 2) * width
        ax.bar(x, vals, width * 0.92, yerr=err, capsize=3, label=m.name, color=_color(i))
    ax.set_xticks(np.arange(len(metrics)), [METRIC_LABELS[k] for k in metrics])
    ax.set_ylabel("percent")
    ax.grid(axis="y", alpha=0.3)
    if len(models) > 1:
        ax.legend(fontsize=8, ncols=min(4, len(models)))
    ax.set_title("SA, PA and FMR (error bars: 95% interval)", fontsize=10)
    return figs.img(fig, "bar chart of SA, PA and FMR with 95% intervals")


def _budget(figs: _Figures, models: list[ModelView]) -> str:
    fig = figs.new(8, 3.8)
    ax = fig.add_subplot()
    drawn = 0
    for i, m in enumerate(models):
        ts, pa = pa_by_budget(m.records, m.budget)
        if pa is None:
            continue
        ax.plot(ts, pa, color=_color(i), label=m.name, lw=1.6)
        exact = m.row["pa"].get("value")
        if exact is not None and len(ts):
            ax.scatter([ts[-1]], [exact], color=_color(i), marker="x", s=50, zorder=3)
        drawn += 1
    ax.set_xlabel("budget t (steps)")
    ax.set_ylabel("PA at budget t (%)")
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
    ax.set_title("PA had the search stopped at step t (x: exact PA at the full budget)", fontsize=10)
    if drawn:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no validated samples", ha="center", transform=ax.transAxes)
    return figs.img(fig, "PA against budget")


def _first_fooled(figs: _Figures, models: list[ModelView]) -> tuple[str, str]:
    fig = figs.new(8, 3.6)
    ax = fig.add_subplot()
    rows = []
    budget = max([m.budget for m in models] or [1])
    bins = np.arange(0.5, max(1, budget) + 1.5, 1.0)
    for i, m in enumerate(models):
        val = [r for r in m.records if r.get("validated")]
        ff = np.asarray([int(r["first_fooled"]) for r in val if int(r["first_fooled"]) >= 1])
        rows.append((m.name, len(val), len(ff), float(np.median(ff)) if len(ff) else None))
        if len(ff):
            ax.hist(ff, bins=bins, histtype="step", lw=1.6, color=_color(i), label=m.name)
    ax.set_xlabel("first accepted step whose image the model got wrong")
    ax.set_ylabel("validated samples")
    ax.grid(alpha=0.3)
    if any(r[2] for r in rows):
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no sample was fooled", ha="center", transform=ax.transAxes)
    table = _table(
        ["model", "validated (all repetitions)", "wrong at some accepted step", "median first-fooled step"],
        [[n, v, f, "" if med is None else f"{med:.0f}"] for n, v, f, med in rows],
    )
    return figs.img(fig, "histogram of first-fooled steps"), table


def _per_class(
    figs: _Figures, models: list[ModelView], per_class: dict[str, list[dict]], class_names: list[str]
) -> str:
    names = [m.name for m in models]
    mat = np.full((len(names), len(class_names)), np.nan)
    for i, n in enumerate(names):
        for r in per_class.get(n, []):
            if r.get("fmr") is not None:
                mat[i, int(r["class"])] = r["fmr"]
    cols = np.arange(len(class_names))
    note = ""
    if len(class_names) > MAX_CLASSES:
        order = np.argsort(
            np.nan_to_num(np.nanmean(mat, 0) if len(names) else np.zeros(len(cols)), nan=np.inf)
        )
        cols = np.sort(order[:MAX_CLASSES])
        note = (
            f'<p class="note">{len(class_names)} classes: showing the {MAX_CLASSES} with the lowest '
            "mean FMR.</p>"
        )
    sub = mat[:, cols]
    fig = figs.new(min(14.0, max(5.5, 2.5 + 0.55 * len(cols))), 1.6 + 0.42 * len(names))
    ax = fig.add_subplot()
    vmax = max(100.0, float(np.nanmax(sub)) if np.isfinite(sub).any() else 100.0)
    im = ax.imshow(np.ma.masked_invalid(sub), cmap="viridis", vmin=0, vmax=vmax, aspect="auto")
    ax.set_xticks(
        np.arange(len(cols)), [str(class_names[c])[:14] for c in cols], rotation=45, ha="right", fontsize=8
    )
    ax.set_yticks(np.arange(len(names)), names, fontsize=8)
    if sub.size <= 400:
        for (i, j), v in np.ndenumerate(sub):
            if np.isfinite(v):
                ax.text(
                    j,
                    i,
                    f"{v:.0f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if v < 0.6 * vmax else "black",
                )
    fig.colorbar(im, ax=ax, label="FMR (%)")
    ax.set_title("per-class FMR (blank: undefined)", fontsize=10)
    return note + figs.img(fig, "per-class FMR heatmap")


def _er_scatter(figs: _Figures, models: list[ModelView], er: dict) -> str:
    from genEval.stats import expit, logit

    fig = figs.new(6.4, 4.6)
    ax = fig.add_subplot()
    sa = [m.row["sa"]["value"] for m in models]
    pa = [m.row["pa"]["value"] for m in models]
    pts = [(s, p) for s, p in zip(sa, pa) if s is not None and p is not None]
    lo = max(0.5, min(s for s, _ in pts) - 5) if pts else 1
    hi = min(99.5, max(s for s, _ in pts) + 5) if pts else 99
    xs = np.linspace(lo, hi, 200)
    clip = er.get("clip", 1e-3)
    line = 100 * expit(er["w"] * logit(np.clip(xs / 100, clip, 1 - clip)) + er["b"])
    ax.plot(xs, line, color="#444", lw=1.2, label="baseline fit")
    for i, m in enumerate(models):
        if sa[i] is None or pa[i] is None:
            continue
        base = m.row.get("baseline")
        ax.scatter(
            [sa[i]],
            [pa[i]],
            s=50,
            color=_color(i),
            edgecolors=_color(i),
            facecolors=_color(i) if base else "none",
            zorder=3,
        )
        ax.annotate(m.name, (sa[i], pa[i]), textcoords="offset points", xytext=(5, 4), fontsize=8)
    r2 = "undefined" if er.get("r2") is None else f"{er['r2']:.3f}"
    ax.set_title(
        f"logit(PA) = {er['w']:.2f} logit(SA) + {er['b']:.2f};  R^2 (logit) = {r2},  "
        f"MAE = {er['mae']:.2f} pts",
        fontsize=9,
    )
    ax.set_xlabel("SA (%)")
    ax.set_ylabel("PA (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return figs.img(fig, "effective robustness scatter with baseline fit")


def read_transfer(path: str | Path) -> tuple[list[str], list[str], np.ndarray, dict[tuple[int, int], str]]:
    """``transfer.csv`` -> (sources, targets, accuracy matrix in percent (NaN = empty), cell marks).

    Long format (``geneval transfer``, genEval.snapshot.transfer_matrix): columns ``source, target, pa, ...``
    with optional ``self_generated`` / ``used_for_filtering`` flags (marked ``*`` / ``f``). Wide format:
    header ``source,<target>,...`` and one row of accuracies per source.
    """
    with open(path, encoding="utf-8", newline="") as fh:
        rows = [r for r in csv.reader(fh) if r]
    if len(rows) < 2 or len(rows[0]) < 2:
        raise ValueError(f"{path} holds no transfer matrix (need a header and at least one row).")

    def num(v: str) -> float:
        try:
            return float(v)
        except ValueError:
            return float("nan")

    head = [h.strip() for h in rows[0]]
    marks: dict[tuple[int, int], str] = {}
    if {"source", "target", "pa"} <= set(head):
        recs = [dict(zip(head, r)) for r in rows[1:]]
        sources = list(dict.fromkeys(r["source"] for r in recs))
        targets = list(dict.fromkeys(r["target"] for r in recs))
        mat = np.full((len(sources), len(targets)), np.nan)
        for r in recs:
            i, j = sources.index(r["source"]), targets.index(r["target"])
            mat[i, j] = num(r["pa"])
            flag = lambda k, r=r: str(r.get(k, "")).strip().lower() in ("true", "1", "yes")
            marks[(i, j)] = ("*" if flag("self_generated") else "") + (
                "f" if flag("used_for_filtering") else ""
            )
        return sources, targets, mat, marks
    targets = head[1:]
    sources = [r[0] for r in rows[1:]]
    mat = np.full((len(sources), len(targets)), np.nan)
    for i, r in enumerate(rows[1:]):
        for j, v in enumerate(r[1 : len(targets) + 1]):
            mat[i, j] = num(v)
    return sources, targets, mat, marks


def _transfer(figs: _Figures, path: Path) -> str:
    try:
        sources, targets, mat, marks = read_transfer(path)
    except ValueError as err:
        return f'<p class="warn">{_e(err)}</p>'
    fig = figs.new(min(12, 3.0 + 0.8 * len(targets)), 1.8 + 0.45 * len(sources))
    ax = fig.add_subplot()
    im = ax.imshow(np.ma.masked_invalid(mat), cmap="magma", vmin=0, vmax=100, aspect="auto")
    ax.set_xticks(np.arange(len(targets)), targets, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(np.arange(len(sources)), sources, fontsize=8)
    for (i, j), v in np.ndenumerate(mat):
        if np.isfinite(v):
            color = "white" if v < 60 else "black"
            label = f"{v:.1f}{marks.get((i, j), '')}"
            ax.text(j, i, label, ha="center", va="center", fontsize=7, color=color)
    ax.set_xlabel("scored on (target model)")
    ax.set_ylabel("generated against")
    fig.colorbar(im, ax=ax, label="accuracy (%)")
    rows = [
        [s, *["" if np.isnan(v) else f"{v:.2f}{marks.get((i, j), '')}" for j, v in enumerate(mat[i])]]
        for i, s in enumerate(sources)
    ]
    table = _table(["generated against \\ scored on", *targets], rows)
    note = (
        '<p class="note">Accuracy (percent) of each target model on the images generated against each source '
        "model (paper App. D). * self-generated (the diagonal); f the target was used to filter the "
        "snapshot, so its cell is not a transfer result.</p>"
    )
    return figs.img(fig, "transfer matrix") + table + note


def _images(figs: _Figures, m: ModelView, class_names: list[str], k: int) -> str | None:
    """Original / perturbed / amplified difference for up to ``k`` validated samples (fooled ones first)."""
    from genEval.interfaces import resize_images
    from genEval.rundir import has_tensors, load_tensors

    run = next((r for r in m.runs if has_tensors(r.run_dir, "images")), None)
    if run is None:
        return None
    data = load_tensors(run.run_dir, "images")
    index = {sid: i for i, sid in enumerate(data["source_ids"])}
    recs = [r for r in run.records if r.get("validated") and r["source_id"] in index]
    # really fooled first (right on the original, wrong after), then wrong anyway, then still right
    recs.sort(key=lambda r: (r["final_pred"] == r["label"], r["clean_pred"] != r["label"], r["source_id"]))
    recs = recs[:k]
    if not recs:
        return ""
    name = lambda c: class_names[c] if 0 <= c < len(class_names) else str(c)
    fig = figs.new(max(4.0, 2.0 * len(recs)), 7.2)
    axes = fig.subplots(3, len(recs), squeeze=False)
    for col, rec in enumerate(recs):
        i = index[rec["source_id"]]
        pert = data["perturbed"][i].float() / 255
        orig = resize_images(data["original"][i][None].float() / 255, tuple(pert.shape[-2:]))[0]
        diff = pert - orig
        amp = float(0.5 / max(diff.abs().max().item(), 1e-6))
        vis = (0.5 + amp * diff).clamp(0, 1)
        fooled = rec["final_pred"] != rec["label"]
        tag = (" (fooled)" if rec["clean_pred"] == rec["label"] else " (wrong)") if fooled else ""
        titles = [
            f"{rec['source_id']}\ntrue {name(rec['label'])} | model {name(rec['clean_pred'])}\n"
            f"oracle (recon) {name(rec['oracle_start_pred'])}",
            f"perturbed, step {rec['accepted_steps']}\nmodel {name(rec['final_pred'])}"
            f"{tag}\noracle accepts {name(rec['label'])} (p={rec['oracle_score']:.2f})",
            f"difference x{amp:.1f}",
        ]
        for r, (img, title) in enumerate(zip((orig, pert, vis), titles)):
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
    return figs.img(fig, f"image grid for {m.name}", kind="images")


# ------------------------------------------------------------------------------------------- html
def _e(x: Any) -> str:
    return html.escape(str(x))


class _Html(str):
    """A table cell that is already HTML (everything else is escaped)."""


def _cell(c: Any) -> str:
    return str(c) if isinstance(c, _Html) else _e(c)


def _table(head: list[str] | None, rows: list[list[Any]], left: int = 1) -> str:
    th = "".join(f'<th class="{"l" if i < left else ""}">{_e(h)}</th>' for i, h in enumerate(head or []))
    thead = f"<thead><tr>{th}</tr></thead>" if head else ""
    body = "".join(
        "<tr>"
        + "".join(f'<td class="{"l" if i < left else ""}">{_cell(c)}</td>' for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f'<div class="scroll"><table>{thead}<tbody>{body}</tbody></table></div>'


def _est(e: dict) -> str:
    return format_estimate(e)


def _est_html(e: dict) -> _Html:
    """Value on one line, its 95% interval small underneath (keeps wide tables readable)."""
    if e.get("value") is None or e.get("low") is None or e.get("high") is None:
        return _Html(_e(_est(e)))
    return _Html(f'{e["value"]:.2f}<span class="ci">[{e["low"]:.2f}, {e["high"]:.2f}]</span>')


def _signed(v: int | None) -> str:
    return "-" if v is None else (f"+{v}" if v > 0 else str(v))


def _leaderboard_html(models: list[ModelView], kind: str) -> str:
    head = ["rank", "model", "FMR", "SA", "PA", "VR", "RA", "FMR cc", "ER", "rank SA", "rank_diff", "n"]
    rows = []
    for m in models:
        r = m.row
        rows.append(
            [
                r.get("rank_fmr") or "-",
                m.name + (" (baseline)" if r.get("baseline") else ""),
                *[_est_html(r[k]) for k in ("fmr", "sa", "pa", "vr", "ra", "fmr_chance_corrected")],
                "" if r.get("er") is None else f"{r['er']:+.2f}",
                r.get("rank_sa") or "-",
                _signed(r.get("rank_diff")),
                f"{r.get('n', 0):.0f}",
            ]
        )
    extra = (
        '<p class="note">Ranked by FMR. rank_diff = rank by SA - rank by FMR (positive: higher on FMR than '
        "on SA). ER: effective robustness in points (blank when the baseline fit is not trusted).</p>"
        if kind == "comparison"
        else ""
    )
    return _table(head, rows, left=2) + extra


def _stability_html(comp: Comparison) -> str:
    s = comp.stability
    parts = []
    if s.get("tau_reps"):
        parts.append(
            _table(
                ["repetitions", "Kendall tau (FMR rankings)", "models"],
                [
                    [
                        f"{t['reps'][0]} vs {t['reps'][1]}",
                        "undefined" if t["tau"] is None else f"{t['tau']:.3f}",
                        t["n_models"],
                    ]
                    for t in s["tau_reps"]
                ],
            )
        )
    lines = [f"<li>{_e(n)}</li>" for n in comp.notes() if not n.startswith("effective robustness")]
    parts.append(f"<ul class='note'>{''.join(lines)}</ul>")
    per_rep = [
        [m["model"], *["" if v is None else f"{v:.2f}" for v in m["fmr"]["per_rep"]]]
        for m in comp.leaderboard
    ]
    n = max((len(r) - 1 for r in per_rep), default=0)
    parts.append(
        "<p class='note'>FMR per repetition (seeds "
        f"{_e(comp.settings.get('repetition_seeds'))}):</p>"
        + _table(["model", *[f"rep {i}" for i in range(n)]], per_rep)
    )
    return "".join(parts)


def _differences_html(comp: Comparison) -> str:
    rows = []
    for d in comp.differences:
        iv = (
            "undefined"
            if d["value"] is None
            else f"{d['value']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]"
            if d["low"] is not None
            else f"{d['value']:+.2f}"
        )
        rows.append(
            [
                d["a"],
                d["b"],
                METRIC_LABELS.get(d["metric"], d["metric"]),
                iv,
                "paired" if d["paired"] else "independent",
                d["n_sources"],
                "yes" if d.get("excludes_zero") else "no",
            ]
        )
    return (
        _table(
            ["a", "b", "metric", "a - b (points) [95%]", "bootstrap", "sources", "interval excludes 0"],
            rows,
            left=3,
        )
        + '<p class="note">Bootstrap over source images; paired when both models saw the same sources '
        "(repetition r of one model against repetition r of the other).</p>"
    )


def _section(sid: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{_e(SECTION_TITLES[sid])}</h2>{body}</section>'


def render_report(
    source: Any, *, grid_samples: int = 6, transfer: str | Path | None = None
) -> tuple[str, int]:
    """The report HTML and the number of figures (``<img>`` elements) in it."""
    kind, comp, models, base, results = _load(source)
    figs = _Figures()
    if comp is not None:
        class_names, per_class = comp.class_names, comp.per_class
        components, settings = comp.settings.get("components", {}), comp.settings
        er = comp.effective_robustness
    else:
        class_names, per_class = (
            list(results.get("class_names") or []),
            {models[0].name: results["per_class"]},
        )
        components, settings, er = results.get("components", {}), {}, {}
    out: dict[str, str] = {}

    info = [
        ["input", str(base) if base else "(in memory)"],
        ["kind", kind],
        ["models", ", ".join(m.name for m in models)],
        ["data", components.get("data")],
        ["generator", components.get("generator")],
        ["oracle", components.get("oracle")],
    ]
    search = settings.get("search") if comp is not None else (results.get("config") or {}).get("search")
    if search:
        info.append(["search", ", ".join(f"{k}={v}" for k, v in search.items())])
    if comp is not None:
        info += [
            ["repetitions", settings.get("repetitions")],
            ["seeds per repetition", settings.get("repetition_seeds")],
            ["intervals", settings.get("interval_note")],
        ]
    else:
        info += [["seed", results.get("seed")], ["n", results["scores"]["n"]]]
    warns = comp.warnings if comp is not None else results.get("warnings", [])
    out["summary"] = _table(None, [[k, "" if v is None else v] for k, v in info]) + "".join(
        f'<p class="warn">WARNING: {_e(w)}</p>' for w in warns
    )

    out["leaderboard"] = _leaderboard_html(models, kind)
    out["scores"] = _bars(figs, models)
    out["budget"] = (
        _budget(figs, models) + '<p class="note">Computed from the per-sample records: at budget t a '
        "validated sample counts as wrong when its first fooled step is in [1, t]. Approximations: a "
        "sample fooled earlier and correct again later still counts as wrong; a sample the oracle "
        "stopped before t keeps its last accepted image; t = 0 is the accuracy on the reconstruction. "
        "The x marks the exact PA at the full budget.</p>"
    )
    img, tab = _first_fooled(figs, models)
    out["first-fooled"] = img + tab
    out["per-class"] = (
        _per_class(figs, models, per_class, class_names)
        if class_names and per_class
        else '<p class="note">No per-class table in the results.</p>'
    )
    if comp is None:
        out["effective-robustness"] = (
            '<p class="note">A single run has no model zoo to fit; effective robustness '
            "needs several models: <code>geneval compare</code>.</p>"
        )
        out["stability"] = (
            '<p class="note">Ranking stability needs several models and repetitions: '
            "<code>geneval compare repetitions=3</code>.</p>"
        )
        out["differences"] = '<p class="note">Pairwise differences need several models.</p>'
    else:
        if er.get("w") is not None:
            r2 = "undefined" if er.get("r2") is None else f"{er['r2']:.3f}"
            verdict = "ER reported (fit trusted)." if er["trusted"] else _e(er["reason"])
            rows = [
                [
                    m.name,
                    "yes" if m.row.get("baseline") else "no",
                    _est_html(m.row["sa"]),
                    _est_html(m.row["pa"]),
                    "" if m.row.get("er_predicted_pa") is None else f"{m.row['er_predicted_pa']:.2f}",
                    "" if m.row.get("er") is None else f"{m.row['er']:+.2f}",
                ]
                for m in models
            ]
            out["effective-robustness"] = (
                _er_scatter(figs, models, er)
                + f'<p class="note">Fit over {er["n_baselines"]} baseline models in {er["space"]} space: '
                f"logit(PA) = {er['w']:.3f} logit(SA) + {er['b']:.3f}; R^2 (logit space) = {r2} "
                f"(threshold {er['min_r2']}, at least {er['min_baselines']} baselines); "
                f"MAE = {er['mae']:.2f} points. {verdict} ER = PA - expit(w logit(SA) + b), in points "
                "(Shi et al. 2023, after Taori et al. 2020). PA comes from a model-adaptive search, "
                "closer to adversarial filtering than to natural shift: trust ER only with a good fit.</p>"
                + _table(["model", "baseline", "SA", "PA", "predicted PA", "ER (points)"], rows)
            )
        else:
            out["effective-robustness"] = f'<p class="note">Not computed: {_e(er.get("reason", ""))}</p>'
        out["stability"] = _stability_html(comp)
        out["differences"] = (
            _differences_html(comp)
            if comp.differences
            else '<p class="note">Only one model: no pairwise differences.</p>'
        )

    tpath = Path(transfer) if transfer else (base / "transfer.csv" if base else None)
    if tpath is not None and tpath.is_file():
        out["transfer"] = _transfer(figs, tpath)
    else:
        out["transfer"] = (
            '<p class="note">No <code>transfer.csv</code> next to this input. Transfer (paper App. D): '
            "images generated against one model, scored on the others. Write it with <code>geneval transfer "
            "out=&lt;this dir&gt;/transfer.csv</code> (or pass transfer=...) to show it here.</p>"
        )

    grids = []
    for m in models:
        g = _images(figs, m, class_names, grid_samples)
        if g is None:
            grids.append(
                f"<h3>{_e(m.name)}</h3><p class='note'>No images saved for this model: run with "
                "<code>save_images=true</code> to see original / perturbed pairs.</p>"
            )
        elif g == "":
            grids.append(f"<h3>{_e(m.name)}</h3><p class='note'>No validated sample to show.</p>")
        else:
            grids.append(f"<h3>{_e(m.name)}</h3>{g}")
    out["images"] = (
        '<p class="note">Each column is one validated sample (fooled ones first, from the first '
        "repetition with saved images): the original with the model's prediction and the oracle's "
        "prediction on its reconstruction; the final perturbed image with the model's prediction (the "
        "oracle accepted it as the true class, with its score); and the difference amplified around "
        "grey.</p>" + "".join(grids)
    )

    title = (
        "genEval comparison: " + ", ".join(m.name for m in models[:6]) + (" ..." if len(models) > 6 else "")
        if kind == "comparison"
        else f"genEval run: {models[0].name}"
    )
    nav = "".join(f'<a href="#{s}">{_e(SECTION_TITLES[s])}</a>' for s in SECTIONS)
    body = "".join(_section(s, out[s]) for s in SECTIONS)
    doc = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="genEval report">
<meta name="geneval-figures" content="{figs.count}">
<title>{_e(title)}</title><style>{CSS}</style></head>
<body><header><h1>{_e(title)}</h1><p>Foundation-model-oriented robustness
(FMR = 100 PA / SA; Zhang et al., ICLR 2024). Scores in percent with 95% intervals.
Written {_e(time.strftime("%Y-%m-%d %H:%M:%S"))}.</p></header>
<nav>{nav}</nav><main>{body}</main></body></html>
"""
    return doc, figs.count


def write_report(
    source: Any, path: str | Path | None = None, *, grid_samples: int = 6, transfer: str | Path | None = None
) -> Path:
    """Write ``report.html`` for a :class:`~genEval.compare.Comparison`, a comparison dir or a run dir.

    ``path`` defaults to ``<input dir>/report.html``. ``transfer``: a transfer.csv (default: the one next
    to the input, when present).
    """
    from genEval.fileio import atomic_write_bytes

    if path is None:
        if isinstance(source, Comparison):
            if not source.out_dir:
                raise ValueError("this comparison has no out_dir; pass path=... for the report.")
            path = Path(source.out_dir) / "report.html"
        else:
            p = Path(source)
            path = (p.parent if p.is_file() else p) / "report.html"
    doc, n = render_report(source, grid_samples=grid_samples, transfer=transfer)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, doc.encode("utf-8"))
    log.info("report with %d figures written to %s", n, path)
    return path


def expected_figures(html_text: str) -> int:
    """The figure count the report states in its ``geneval-figures`` meta tag."""
    import re

    m = re.search(r'<meta name="geneval-figures" content="(\d+)">', html_text)
    if not m:
        raise ValueError("not a genEval report (no geneval-figures meta tag).")
    return int(m.group(1))


__all__ = [
    "write_report",
    "render_report",
    "pa_by_budget",
    "read_transfer",
    "expected_figures",
    "SECTIONS",
]
