"""One self-contained HTML report for a run or a comparison (paper App. J per-class scores, App. N
leaderboards, Table 2 comparisons; S0 effective-robustness scatter; docs/method.md, "Beyond the paper").

``write_report(comparison_or_dir, path)`` writes ``report.html`` from the jinja2 templates in
``genEval/reports/templates/`` (autoescaped): no scripts, no external requests (a Content-Security-Policy forbids
them), every plot a base64 PNG (:mod:`genEval.reports.figures`). Sections: summary, leaderboard (with FMR_v
beside the paper's FMR, the oracle's own accuracy, and the run cost: rejected steps per sample next to run
time), scores (SA/SA_v/PA/FMR/FMR_v with intervals), PA against budget, first-fooled steps, per-class scores
(heatmap and a table with Wilson intervals, the oracle's per-class accuracy included), effective robustness
(baselines named, with bootstrap intervals), stability (tau between repetitions and its bootstrap
distribution), the label-free diagnostic (SoftmaxCorr, MaxPred, SoftGap, ATC-MC and agreement with the oracle,
each with rho and tau_w against PA and FMR_v), selective prediction and calibration (the response-rate accuracy
curves, AURRA and the RMS calibration error on clean and perturbed images, -MSP detection), pairwise differences,
transfer (when a
``transfer.csv`` lies next to the input), and image grids (original / perturbed / amplified difference)
when the runs were made with ``save_images=true``. A single run
directory is aggregated like a one-model comparison (:func:`genEval.comparisons.aggregate.build_comparison`), so its
leaderboard row is built the same way; the sections that need several models say so.

PA against budget is computed from the per-sample records, not by re-running: at budget ``t`` a validated
sample counts as wrong when ``1 <= first_fooled <= t`` (the first accepted step whose image the model got
wrong). Approximations, stated in the report: a sample fooled at an earlier step and correct again later still
counts as wrong; a sample whose search was stopped by the oracle before ``t`` keeps its last accepted image;
``t = 0`` is the accuracy on the reconstruction of the validated samples. The exact PA at the full budget is
marked next to each curve, so the gap is visible.

``transfer.csv``: the long format ``geneval transfer`` writes (``source, target, pa, ...``; see
:func:`read_transfer`) or a wide one (header ``source,<target>,...``, one row of accuracies per source).

Readable at 1280 px: the leaderboard shows the compact columns
(:func:`genEval.comparisons.leaderboard.score_columns`) with the model column sticky, and every score and rank in a
full table behind a ``<details>`` toggle; an interval never wraps. A run's report leaves out what needs several
models (the leaderboard, effective robustness, stability, the label-free diagnostic, differences; transfer unless a
``transfer.csv`` is there) and shows its scores as a table instead; it embeds ``grid.png`` when the run saved no
image tensors. Reports are shared, so they name files by their name, never by a path on the machine that wrote
them (:func:`public_text`; the run's own ``results.json`` keeps the full config).
"""

from __future__ import annotations

import csv
import logging
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from genEval.comparisons.ablation import GeneratorAblation, load_comparison
from genEval.comparisons.aggregate import build_comparison
from genEval.comparisons.leaderboard import Comparison
from genEval.comparisons.loading import load_runs
from genEval.comparisons.writers import TABLE_SCORES, corr, er_cell, score_columns, score_label, signed
from genEval.fileio import atomic_write_bytes
from genEval.reports.figures import (
    MAX_CLASSES,
    PNG,
    ModelView,
    budget_curves,
    er_scatter,
    first_fooled,
    image_grid,
    per_class_heatmap,
    rankings_side_by_side,
    rra_curves,
    saved_grid,
    score_bars,
    transfer_heatmap,
)
from genEval.reports.html import TEMPLATES
from genEval.reports.robustness import ROBUSTNESS_SECTIONS, figure_count, robustness_context
from genEval.scores.definitions import PER_CLASS_SCORES, SCORE
from genEval.scores.rankings import TauDistribution

log = logging.getLogger(__name__)

SECTIONS = {
    "summary": "Summary",
    "leaderboard": "Leaderboard",
    "scores": "Scores with 95% intervals",
    "budget": "PA against budget",
    "first-fooled": "First-fooled step",
    "per-class": "Per-class scores",
    "effective-robustness": "Effective robustness",
    "stability": "Ranking stability",
    "label-free": "Label-free diagnostic",
    "confidence": "Selective prediction and calibration",
    "differences": "Pairwise differences",
    "transfer": "Transfer",
    "images": "Images: original / perturbed / difference",
    **ROBUSTNESS_SECTIONS,  # docs/comparing.md (genEval/reports/robustness.py, templates/robustness.html.j2)
}
#: What a single run's report leaves out: sections about several models (its one-row leaderboard becomes a table of
#: its scores in "scores").
NEEDS_SEVERAL = ("leaderboard", "effective-robustness", "stability", "label-free", "differences")
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
#: An absolute path in free text (``/srv/geneval/uploads/3f2a/model.pt``, ``~/runs/x``): two or more parts after a
#: leading ``/`` or ``~/``, not inside a URL (``http://host/a/b``) or a fraction (``1/255``).
_PATH = re.compile(r"(?<![\w.:/~-])~?/(?:[\w.@+=-]+/)+([\w.@+=-]*)")


def public_text(text: str) -> str:
    """``text`` with every absolute path shortened to its last part (``…/model.pt``): what a shared page may show."""
    return _PATH.sub(lambda m: "…/" + m[1], text)


def sections_for(kind: str, transfer: bool) -> dict[str, str]:
    """The sections of a report of ``kind`` (``run`` or ``comparison``), in order: a run's leaves out
    :data:`NEEDS_SEVERAL`, and transfer unless there is a ``transfer.csv`` (``transfer``)."""
    if kind == "comparison":
        return dict(SECTIONS)
    return {k: v for k, v in SECTIONS.items() if k not in NEEDS_SEVERAL and (k != "transfer" or transfer)}


@dataclass(frozen=True)
class Loaded:
    """A report's input: what kind it is, the comparison (one row for a run), its models and where it lives."""

    kind: str  # "comparison" | "run"
    comp: Comparison
    models: list[ModelView]
    base: Path | None


def _load(source: Comparison | str | Path) -> Loaded:
    if isinstance(source, Comparison):
        comp, base = source, Path(source.out_dir) if source.out_dir else None
    else:
        p = Path(source).expanduser()
        if (p / "comparison.json").is_file() or p.name == "comparison.json":
            loaded = load_comparison(p)
            if not isinstance(loaded, Comparison):
                raise ValueError(f"'{p}' is a generator ablation; render it with render_report (it dispatches).")
            comp, base = loaded, (p if p.is_dir() else p.parent)
        elif (p / "results.json").is_file():
            runs = load_runs([p])
            comp = build_comparison(runs)
            ((name, reps),) = runs.items()
            return Loaded("run", comp, [ModelView(name, comp.leaderboard[0], reps)], p)
        else:
            raise FileNotFoundError(
                f"'{p}' is neither a run directory (results.json) nor a comparison directory "
                "(comparison.json). Pass input=<run dir or comparison dir>."
            )
    models = []
    for row in comp.leaderboard:
        listed = comp.runs.get(row.model, [])
        dirs = [d for d in listed if (Path(d) / "results.json").is_file()]
        if len(dirs) < len(listed):
            log.warning(
                "report: some run directories of %s are missing; per-sample sections use %d of them",
                row.model,
                len(dirs),
            )
        models.append(ModelView(row.model, row, load_runs({row.model: dirs})[row.model] if dirs else []))
    return Loaded("comparison", comp, models, base)


def read_transfer(path: str | Path) -> tuple[list[str], list[str], np.ndarray, dict[tuple[int, int], str]]:
    """``transfer.csv`` -> (sources, targets, accuracy matrix in percent (NaN = empty), cell marks).

    Long format (``geneval transfer``, genEval.snapshots.scoring.transfer_matrix): columns ``source, target, pa, ...``
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

    def flag(rec: dict, key: str) -> bool:
        return str(rec.get(key, "")).strip().lower() in ("true", "1", "yes")

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
            marks[(i, j)] = ("*" if flag(r, "self_generated") else "") + ("f" if flag(r, "used_for_filtering") else "")
        return sources, targets, mat, marks
    targets, sources = head[1:], [r[0] for r in rows[1:]]
    mat = np.full((len(sources), len(targets)), np.nan)
    for i, r in enumerate(rows[1:]):
        for j, v in enumerate(r[1 : len(targets) + 1]):
            mat[i, j] = num(v)
    return sources, targets, mat, marks


def _transfer(path: Path | None) -> dict[str, Any] | None:
    """The transfer section's figure and table, or its error; None when there is no transfer.csv."""
    if path is None or not path.is_file():
        return None
    try:
        sources, targets, mat, marks = read_transfer(path)
    except ValueError as err:
        return {"error": str(err)}
    rows = [
        [s, *("" if np.isnan(v) else f"{v:.2f}{marks.get((i, j), '')}" for j, v in enumerate(mat[i]))]
        for i, s in enumerate(sources)
    ]
    return {"figure": transfer_heatmap(sources, targets, mat, marks), "targets": targets, "rows": rows}


def _summary_rows(loaded: Loaded) -> list[tuple[str, str]]:
    """The summary's (setting, value) rows, as text a shared page may show (:func:`public_text`)."""
    comp, first = loaded.comp, loaded.models[0]
    info: list[tuple[str, Any]] = [
        ("folder", loaded.base.name if loaded.base else "(in memory)"),
        ("kind", loaded.kind),
        ("models", ", ".join(comp.models)),
        *((role, comp.settings.components.get(role)) for role in ("data", "generator", "oracle")),
    ]
    if loaded.kind == "run":
        info.insert(3, ("classifier", first.runs[0].results.components.get("classifier")))
    if comp.settings.search:
        info.append(("search", ", ".join(f"{k}={v}" for k, v in comp.settings.search.items())))
    if loaded.kind == "comparison":
        info += [
            ("repetitions", comp.settings.repetitions),
            ("seeds per repetition", comp.settings.repetition_seeds),
            ("intervals", comp.settings.interval_note),
        ]
    else:
        info += [("seed", first.runs[0].results.seed), ("n", len(first.runs[0].outcomes))]
    return [(k, public_text("" if v is None else str(v))) for k, v in info]


def _headline(comp: Comparison) -> str:
    """The report's first line: a run's ranking score with its interval and counts; a comparison's first model's."""
    if not comp.leaderboard:
        return "no models"
    top = comp.leaderboard[0]
    line = top.headline(comp.rank_by)
    return line if len(comp.leaderboard) == 1 else f"first: {top.model}, {line}"


def _run_scores(comp: Comparison, models: list) -> list[list]:
    """A run's scores, one row each: label, value with its interval, the counts it is a share of, how the interval
    was made."""
    own = models[0].runs[0].results.scores.estimates if models and models[0].runs else {}
    row = comp.leaderboard[0]

    def counts(k: str) -> str:
        e = own.get(k)
        return f"{e.k} of {e.n}" if e is not None and SCORE[k].is_proportion and e.k is not None and e.n else ""

    return [[SCORE[k].label, row[k], counts(k), row[k].method or row[k].reason] for k in TABLE_SCORES]


def _figures(loaded: Loaded, grid_samples: int, transfer: Path | None) -> dict[str, Any]:
    """Every figure of the report (and the tables drawn from the same data), in section order."""
    comp, models = loaded.comp, loaded.models
    ff_png, ff_rows = first_fooled(models)
    er = comp.effective_robustness
    return {
        "scores": score_bars(models),
        "budget": budget_curves(models),
        "first_fooled": ff_png,
        "first_fooled_rows": ff_rows,
        "per_class": per_class_heatmap(comp.models, comp.per_class, comp.class_names)
        if comp.class_names and comp.per_class
        else None,
        "er": er_scatter(models, er) if loaded.kind == "comparison" and er.w is not None else None,
        "rra": rra_curves(models),
        "confidence_rows": _confidence_rows(models),
        "transfer": _transfer(transfer),
        "grids": [(m.name, _grid(m, comp.class_names, grid_samples)) for m in models],
    }


def _grid(m: ModelView, class_names: list[str], k: int) -> PNG | str | None:
    """The model's image grid from its saved images, else the ``grid.png`` its run wrote, else None."""
    grid = image_grid(m, class_names, k)
    return saved_grid(m) if grid is None else grid


def _fmt(v: float | None, spec: str) -> str:
    return "" if v is None else format(v, spec)


def _confidence_rows(models: list[ModelView]) -> list[list]:
    """(model, repetition, n clean/perturbed, AURRA and RMS calibration error clean and perturbed, -MSP AUROC of
    perturbed vs clean, OOD AUPR / AUROC) per run that recorded its confidence (cells: estimates or text)."""
    rows = []
    for m in models:
        for i, run in enumerate(m.runs):
            c = run.results.confidence
            if not c.recorded or c.clean is None or c.perturbed is None:
                rows.append([m.name, i, *([""] * 8), c.reason])
                continue
            ood = c.ood
            rows.append(
                [m.name, i, f"{c.clean.n} / {c.perturbed.n}", c.clean.aurra, c.perturbed.aurra,
                 c.clean.calibration_error, c.perturbed.calibration_error, c.shift.auroc if c.shift else "",
                 ood.aupr if ood else "", ood.auroc if ood else "", ""]
            )  # fmt: skip
    return rows


#: Per-class table columns: score key -> header, every per-class score of genEval.scores.definitions.SCORES, in
#: their order (proportions carry Wilson intervals).
PER_CLASS_COLUMNS = {k: SCORE[k].short or SCORE[k].label for k in PER_CLASS_SCORES}


def _cell(row: dict, key: str) -> dict[str, Any] | str:
    """A per-class value as an estimate-like cell (value with its interval), or "" when absent."""
    if key not in row:
        return ""
    return {"value": row[key], "low": row.get(f"{key}_low"), "high": row.get(f"{key}_high")}


def _per_class_rows(comp: Comparison, limit: int) -> list[list]:
    """(model, class, n, scores...) rows, at most ``limit`` classes per model in class order."""
    return [
        [m, r["name"], r["n"], *(_cell(r, k) for k in PER_CLASS_COLUMNS)]
        for m in comp.models
        for r in comp.per_class.get(m, [])[:limit]
    ]


def _tau_rows(t: TauDistribution | None) -> list[list]:
    if t is None or t.mean is None:
        return []
    return [
        [
            f"{t.mean:.3f}",
            f"{t.median:.3f}",
            f"[{t.low:.3f}, {t.high:.3f}]",
            f"{100 * t.share_identical:.1f}%",
            t.n_defined,
            t.n_sources,
        ]
    ]


def _per_rep_key(comp: Comparison) -> str:
    """The score whose per-repetition values the stability section lists: the ranking score, FMR for ER (no
    per-repetition value of its own in the rows)."""
    return comp.rank_by if comp.rank_by in SCORE else "fmr"


def _tables(comp: Comparison) -> dict[str, list]:
    """Rows of the effective-robustness, stability and differences tables (cells: text or a MetricEntry)."""
    n_reps = max((len(r["fmr"].per_rep) for r in comp.leaderboard), default=0)

    def diff(d: Any) -> str:
        if d.value is None:
            return "undefined"
        return f"{d.value:+.2f} [{d.low:+.2f}, {d.high:+.2f}]" if d.low is not None else f"{d.value:+.2f}"

    return {
        "er": [
            [r.model, "yes" if r.baseline else "no", r["sa"], r["pa"], _fmt(r.er_predicted_pa, ".2f"), er_cell(r)]
            for r in comp.leaderboard
        ],
        "tau": [
            [f"{t.reps[0]} vs {t.reps[1]}", _fmt(t.tau, ".3f") or "undefined", t.n_models]
            for t in comp.stability.tau_reps
        ],
        "tau_boot": _tau_rows(comp.stability.tau_bootstrap),
        "per_rep_head": ["model", *(f"rep {i}" for i in range(n_reps))],
        "per_rep": [[r.model, *(_fmt(v, ".2f") for v in r[_per_rep_key(comp)].per_rep)] for r in comp.leaderboard],
        "differences": [
            [
                d.a,
                d.b,
                SCORE[d.metric].label,
                diff(d),
                "paired" if d.paired else "independent",
                d.n_sources,
                "yes" if d.excludes_zero else "no",
            ]
            for d in comp.differences
        ],
        "cost": [
            [
                r.model,
                _fmt(r.rejected_per_sample, ".3f"),
                _fmt(r.steps_per_sample, ".2f"),
                _fmt(r.time_s, ".1f"),
                _fmt(r.time_per_sample_s, ".4f"),
            ]
            for r in comp.leaderboard
        ],
        "label_free": [
            [r.model, *(_fmt(getattr(r, k), ".3f") or "-" for k in LABEL_FREE_COLUMNS), r["pa"], r["fmr_validated"]]
            for r in comp.leaderboard
        ],
        "label_free_rank": _label_free_rank_rows(comp),
        "label_free_sensitivity": _sensitivity_rows(comp),
        "per_class_head": ["model", "class", "n", *PER_CLASS_COLUMNS.values()],
        "per_class": _per_class_rows(comp, MAX_CLASSES),
    }


#: The label-free measures of the report's table (row attribute -> header).
LABEL_FREE_COLUMNS = {
    "softmax_corr": "SoftmaxCorr",
    "max_pred": "MaxPred",
    "soft_gap": "SoftGap",
    "atc_mc": "ATC-MC",
    "oracle_agreement": "agreement with the oracle",
}


def _label_free_rank_rows(comp: Comparison) -> list[list]:
    """(measure, rho and tau_w against PA, against FMR_v) rows of the label-free ranking table."""
    lf = comp.label_free
    if lf is None or not lf.measures:
        return []
    out = []
    for name, by_truth in lf.measures.items():
        pa, fv = by_truth.get("pa", {}), by_truth.get("fmr_validated", {})
        out.append([LABEL_FREE_COLUMNS.get(name, name), corr(pa.get("rho")), corr(pa.get("tau_w")),
                    corr(fv.get("rho")), corr(fv.get("tau_w")), pa.get("n_models")])  # fmt: skip
    return out


def _sensitivity_rows(comp: Comparison) -> list[list]:
    """(measure, truth, protocol, fraction, rho, tau_w) rows of the sensitivity protocol, when it was run."""
    lf = comp.label_free
    if lf is None or not lf.sensitivity:
        return []
    rows = []
    for name, by_truth in lf.sensitivity.items():
        for truth, s in by_truth.items():
            for what, part in (("sources", s["subsample"]), ("models kept", s["kept_models"])):
                for frac, v in part.items():
                    rows.append([LABEL_FREE_COLUMNS.get(name, name), score_label(truth), what,
                                 f"{100 * float(frac):g}%", corr(v["rho"]), corr(v["tau_w"])])  # fmt: skip
    return rows


def _count(figures: dict[str, Any]) -> int:
    found = [v for v in figures.values() if isinstance(v, PNG)]
    found += [g for _, g in figures["grids"] if isinstance(g, PNG)]
    return len(found) + bool(figures["transfer"] and "figure" in figures["transfer"])


def _ablation(source: Comparison | GeneratorAblation | str | Path) -> GeneratorAblation | None:
    if isinstance(source, GeneratorAblation):
        return source
    if isinstance(source, Comparison):
        return None
    p = Path(source).expanduser()
    if (p / "comparison.json").is_file() or p.name == "comparison.json":
        loaded = load_comparison(p)
        if isinstance(loaded, GeneratorAblation):
            return replace(loaded, out_dir=str(p if p.is_dir() else p.parent))
    return None


def render_ablation(ab: GeneratorAblation) -> tuple[str, int]:
    """The generator ablation's page (paper Table 3): the rankings side by side in one figure, the ranks and the
    rank agreement between generators as tables, each generator's leaderboard, and links to each generator's own
    report (``generators/<name>/report.html``)."""
    label = score_label(ab.rank_by)
    sub = "generators" if ab.key == "generator" else "settings"
    figure = rankings_side_by_side(
        ab.generators, [m.model for m in ab.models], [m.ranks for m in ab.models], label, ab.what
    )
    rank_rows = [
        [
            m.model,
            *(f"{_rank_text(m.ranks.get(g))} ({_fmt(m.values.get(g), '.2f') or '-'})" for g in ab.generators),
            ("yes" if m.depends else "no")
            + ("" if m.share_changed is None else f" ({100 * m.share_changed:.0f}% of resamples)"),
        ]
        for m in ab.models
    ]
    agreement = [[a.a, a.b, a.fmt(), a.n_models, a.method or a.reason] for a in ab.agreement]
    boards = {
        g: [
            [
                _rank_text(r.rank),
                r.model + (" (baseline)" if r.baseline else ""),
                r[ab.rank_by] if ab.rank_by in SCORE else er_cell(r),
                r["fmr"],
                r["sa"],
                r["pa"],
                er_cell(r),
                _rank_text(r.rank_fmr),
            ]
            for r in c.leaderboard
        ]
        for g, c in ab.comparisons.items()
    }
    links = {
        g: f"{sub}/{g}/report.html"
        for g in ab.generators
        if ab.out_dir and (Path(ab.out_dir) / sub / g / "report.html").is_file()
    }
    html = TEMPLATES.get_template("ablation.html.j2").render(
        title=f"genEval {ab.key} ablation: " + ", ".join(ab.generators),
        csp=CSP,
        ab=ab,
        label=label,
        figure=figure,
        rank_head=["model", *ab.generators, f"rank depends on the {ab.key}"],
        rank_rows=rank_rows,
        agreement=agreement,
        board_head=["rank", "model", label, "FMR", "SA", "PA", "ER", "rank FMR"],
        boards=boards,
        links=links,
        notes=ab.notes(),
        n_figures=1,
        written=time.strftime("%Y-%m-%d %H:%M:%S"),
    )
    return html, 1


def _rank_text(v: int | None) -> str:
    return "-" if v is None else str(v)


def render_report(
    source: Comparison | GeneratorAblation | str | Path, *, grid_samples: int = 6, transfer: str | Path | None = None
) -> tuple[str, int]:
    """The report HTML and the number of figures (``<img>`` elements) in it. A generator ablation (the object, or a
    directory whose comparison.json holds one) gets the ablation page (:func:`render_ablation`)."""
    ablation = _ablation(source)
    if ablation is not None:
        return render_ablation(ablation)
    loaded = _load(source)
    comp = loaded.comp
    tpath = Path(transfer) if transfer else (loaded.base / "transfer.csv" if loaded.base else None)
    figures = _figures(loaded, grid_samples, tpath)
    robust = robustness_context(comp)
    n_figures = _count(figures) + (figure_count(robust) if robust else 0)
    names = comp.models
    title = (
        "genEval comparison: " + ", ".join(names[:6]) + (" ..." if len(names) > 6 else "")
        if loaded.kind == "comparison"
        else f"genEval run: {names[0]}"
    )
    warnings = (
        comp.warnings if loaded.kind == "comparison" else [*loaded.models[0].runs[0].results.warnings, *comp.warnings]
    )
    compact, extended = score_columns(comp.rank_by)
    html = TEMPLATES.get_template("report.html.j2", globals={"signed": signed}).render(
        title=title,
        csp=CSP,
        sections=sections_for(loaded.kind, figures["transfer"] is not None),
        kind=loaded.kind,
        comp=comp,
        models=loaded.models,
        headline=_headline(comp),
        info=_summary_rows(loaded),
        warnings=[public_text(w) for w in warnings],
        tables=_tables(comp),
        run_scores=_run_scores(comp, loaded.models) if loaded.kind == "run" else [],
        table_scores=TABLE_SCORES,
        compact=compact,
        n_extended=len(extended),
        has_er=any(r.er is not None for r in comp.leaderboard),
        score=SCORE,
        fig=figures,
        robust=robust,
        er_cell=er_cell,
        n_figures=n_figures,
        rank_label=score_label(comp.rank_by),
        per_rep_label=score_label(_per_rep_key(comp)),
        max_classes=MAX_CLASSES,
        n_classes=len(comp.class_names),
        notes=[
            public_text(n)
            for n in comp.notes()
            if not n.startswith("effective robustness") and not (comp.settled and n in comp.settled.notes())
        ],
        written=time.strftime("%Y-%m-%d %H:%M:%S"),
    )
    return html, n_figures


def write_report(
    source: Comparison | GeneratorAblation | str | Path,
    path: str | Path | None = None,
    *,
    grid_samples: int = 6,
    transfer: str | Path | None = None,
) -> Path:
    """Write ``report.html`` for a :class:`~genEval.comparisons.leaderboard.Comparison`, a generator ablation, a
    comparison dir or a run dir.

    ``path`` defaults to ``<input dir>/report.html``. ``transfer``: a transfer.csv (default: the one next
    to the input, when present).
    """
    if path is None:
        if isinstance(source, (Comparison, GeneratorAblation)):
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
    m = re.search(r'<meta name="geneval-figures" content="(\d+)">', html_text)
    if not m:
        raise ValueError("not a genEval report (no geneval-figures meta tag).")
    return int(m.group(1))


__all__ = [
    "write_report",
    "render_report",
    "render_ablation",
    "read_transfer",
    "expected_figures",
    "public_text",
    "sections_for",
    "SECTIONS",
]
