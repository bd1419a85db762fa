"""A comparison's text renderings (paper App. N leaderboards): the terminal summary of ``geneval compare``
(:func:`render_summary`), ``leaderboard.md`` (:func:`render_markdown`), ``leaderboard.csv`` (:func:`render_csv`,
numbers as numbers, empty = undefined) and the notes they share (:func:`render_notes`), with the table layout
(:data:`TABLE_SCORES`, :func:`score_columns`, :data:`CONFIDENCE_COLUMNS`) and the cell formats (:func:`er_cell`,
:func:`signed`, :func:`score_label`).

Each writer reads a :class:`genEval.comparisons.leaderboard.Comparison` (and its :class:`LeaderboardRow` s) by their
attributes only: this module sits below the data module, which imports it for its ``summary()``, ``markdown()``,
``csv()`` and ``notes()``, so the writers never import the data (one direction, no import circle).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from genEval.scores.definitions import LEADERBOARD_SCORES, SCORE

#: Leaderboard columns in tables: ranked by the paper's FMR, so FMR first with FMR_v (same population) beside
#: it, then the accuracies, rates and the oracle's own accuracy; any other leaderboard score after them.
_ORDER = (
    "fmr",
    "fmr_validated",
    "sa",
    "sa_validated",
    "pa",
    "vr",
    "vr_conditional",
    "ra",
    "fmr_chance_corrected",
    "oracle_clean_accuracy",
    "oracle_recon_accuracy",
    "unchanged_share",
)
TABLE_SCORES = (*(k for k in _ORDER if k in LEADERBOARD_SCORES), *(k for k in LEADERBOARD_SCORES if k not in _ORDER))
#: The compact tables' scores (the terminal, ``leaderboard.md``, the report and the service's pages show these
#: first): the paper's FMR with FMR_v beside it, the two accuracies FMR is made of and the validation rate. Every
#: other leaderboard score, one added to :data:`genEval.scores.definitions.SCORES` later included, is *extended*:
#: behind a toggle in the pages, in the full table of ``leaderboard.md``, and in ``leaderboard.csv`` and the JSON.
COMPACT_SCORES = ("fmr", "fmr_validated", "sa", "pa", "vr")
#: Per-model run-cost columns (means over repetitions): the paper's speed claim for the mask comes from
#: fewer rejected steps, so rejections stand next to the run time.
COST = ("rejected_per_sample", "steps_per_sample", "time_s", "time_per_sample_s")
#: The label-free measures and confidence scores of a row (docs/scores.md), in table order, with their headers.
CONFIDENCE_COLUMNS = {
    "softmax_corr": "SoftmaxCorr",
    "max_pred": "MaxPred",
    "soft_gap": "SoftGap",
    "atc_mc": "ATC-MC",
    "oracle_agreement": "agrees w/ oracle",
    "aurra_clean": "AURRA clean",
    "aurra_perturbed": "AURRA perturbed",
    "calibration_error_clean": "RMS cal. err. clean",
    "calibration_error_perturbed": "RMS cal. err. perturbed",
    "shift_auroc": "-MSP AUROC perturbed vs clean",
    "ood_aupr": "OOD AUPR",
    "ood_auroc": "OOD AUROC",
}

#: Short headers of :data:`CONFIDENCE_COLUMNS` in the terminal summary (explained by :data:`TERMINAL_LEGEND`).
TERMINAL_HEADERS = {
    "softmax_corr": "SoftmaxCorr",
    "max_pred": "MaxPred",
    "soft_gap": "SoftGap",
    "atc_mc": "ATC-MC",
    "oracle_agreement": "agree oracle",
    "aurra_clean": "AURRA clean",
    "aurra_perturbed": "AURRA pert",
    "calibration_error_clean": "RMSCE clean",
    "calibration_error_perturbed": "RMSCE pert",
    "shift_auroc": "shift AUROC",
    "ood_aupr": "OOD AUPR",
    "ood_auroc": "OOD AUROC",
}
TERMINAL_LEGEND = (
    "pert = the validated perturbed images; RMSCE = RMS calibration error (bins of 100); shift AUROC = -MSP AUROC "
    "of the perturbed images against their clean sources; - = not recorded (docs/scores.md)"
)


def _width(key: str) -> int:
    """The terminal column width of a :data:`TERMINAL_HEADERS` entry (its header, at least a 7-character number)."""
    return max(len(TERMINAL_HEADERS[key]), 7)


def score_columns(rank_by: str = "fmr") -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The (compact, extended) score columns of a table ranked by ``rank_by``, each in :data:`TABLE_SCORES` order:
    :data:`COMPACT_SCORES` and the ranking score (when it is another score), then every other leaderboard score."""
    compact = tuple(k for k in TABLE_SCORES if k in COMPACT_SCORES or k == rank_by)
    return compact, tuple(k for k in TABLE_SCORES if k not in compact)


def corr(v: float | None) -> str:
    """A rank correlation in tables: signed, 3 decimals (``+0.812``); ``-`` when undefined."""
    return "-" if v is None else f"{v:+.3f}"


def label_free_lines(lf: Any) -> list[str]:
    """The label-free table of a comparison's printed summary: each measure's rho and tau_w against PA and FMR_v,
    and, when computed, the sensitivity protocol's means."""
    if lf is None or not lf.measures:
        return []
    head = f"{'label-free measure':<20} {'rho PA':>8} {'tau_w PA':>8} {'rho FMR_v':>9} {'tau_w FMR_v':>11}"
    out = ["", head, "-" * len(head)]
    for name, by_truth in lf.measures.items():
        pa, fv = by_truth.get("pa", {}), by_truth.get("fmr_validated", {})
        out.append(
            f"{name:<20} {corr(pa.get('rho')):>8} {corr(pa.get('tau_w')):>8} {corr(fv.get('rho')):>9} "
            f"{corr(fv.get('tau_w')):>11}"
        )
    if lf.sensitivity:
        out += ["", "sensitivity (S1 Sec. 5.3, App. A.2; mean of 3 seeded runs): rho / tau_w against PA"]
        for name, by_truth in lf.sensitivity.items():
            s: dict[str, Any] = by_truth.get("pa", {})
            sub = "  ".join(f"{float(f):.0%} {corr(v['rho'])}/{corr(v['tau_w'])}" for f, v in s["subsample"].items())
            kept = "  ".join(f"{float(f):.0%} {corr(v['rho'])}/{corr(v['tau_w'])}" for f, v in s["kept_models"].items())
            out.append(f"  {name:<18} sources {sub} | models kept {kept}")
    return out


def _markdown_table(columns: list[tuple[str, Any]], rows: list[Any]) -> list[str]:
    """A Markdown table of ``rows``: one column per (header, cell of a row)."""
    return [
        "| " + " | ".join(h for h, _ in columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(cell(r) for _, cell in columns) + " |" for r in rows),
    ]


def _count(v: float) -> str:
    """A count that may be a mean over repetitions: ``24``, or ``23.5``."""
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.1f}"


def score_label(key: str) -> str:
    """How a ranking score is written in tables: its label (``FMR_v``), or ``ER`` for effective robustness."""
    return "ER" if key == "er" else SCORE[key].label


def er_cell(r: Any) -> str:
    """ER with its bootstrap interval (``+1.23 [-0.40, +2.90]``), empty when ER is not reported."""
    if r.er is None:
        return ""
    return f"{r.er:+.2f}" + (f" [{r.er_low:+.2f}, {r.er_high:+.2f}]" if r.er_low is not None else "")


def _num(v: float | None, digits: int = 2, missing: str = "") -> str:
    return missing if v is None else f"{v:.{digits}f}"


def _rank(v: int | None) -> str:
    return "-" if v is None else str(v)


def signed(v: int | None) -> str:
    """A rank difference with its sign (``+2``, ``0``, ``-1``); ``-`` when undefined."""
    return "-" if v is None else (f"+{v}" if v > 0 else str(v))


def render_notes(comp: Any) -> list[str]:
    """Stability, ER, the label-free diagnostic and warnings as short sentences (summary, leaderboard.md,
    report)."""
    s = comp.stability
    label = score_label(s.score)
    out = [comp.ranking_note(), *(comp.settled.notes() if comp.settled is not None else [])]
    if s.tau_reps_mean is not None:
        out.append(
            f"rank stability: Kendall tau between repetitions' {label} rankings mean {s.tau_reps_mean:.3f}, "
            f"min {s.tau_reps_min:.3f} ({len(s.tau_reps)} pairs"
            + (", repetitions drew different source images)" if s.sources_resampled else ")")
        )
    else:
        out.append(f"rank stability: {s.tau_reps_note or 'not computed'}")
    if s.tau_bootstrap is not None:
        out.append(s.tau_bootstrap.describe())
    if s.score != "fmr":
        out.append(f"Kendall tau({label} ranking, FMR ranking): " + _num(s.tau_rank_fmr, 3, "undefined"))
    out.append("Kendall tau(FMR ranking, SA ranking): " + _num(s.tau_fmr_sa, 3, "undefined"))
    for f in s.flips:
        out.append(
            f"{label} order of {f.a} and {f.b} flips across repetitions "
            f"({f.a} higher in reps {f.a_higher}, {f.b} higher in reps {f.b_higher})"
        )
    out.append(_er_note(comp))
    if comp.label_free is not None:
        lf = comp.label_free
        out.append(
            f"label-free diagnostic: SoftmaxCorr on the perturbed images ({lf.method}); Spearman rho "
            f"(SoftmaxCorr, PA) over {lf.n_models} models = " + _num(lf.spearman_pa, 3, f"undefined ({lf.reason})")
        )
        for name, by_truth in (lf.measures or {}).items():
            out.append(
                f"label-free {name}: "
                + "; ".join(
                    f"{score_label(t)} rho {_num(a.get('rho'), 3, '-')} tau_w {_num(a.get('tau_w'), 3, '-')}"
                    for t, a in by_truth.items()
                )
            )
    over = [r.model for r in comp.leaderboard if (r["fmr"].value or 0) > 100]
    if over:
        out.append(
            f"FMR above 100 ({', '.join(over)}): possible because PA is measured over the validated "
            "samples only (the images the oracle vouched for) and SA over all; FMR_v compares the same "
            "population."
        )
    if comp.settings.mask:
        m = comp.settings.mask
        out.append(
            f"style mask {m.get('id')} fitted once with reference model {m.get('reference')} on "
            f"{m.get('fit_samples')} samples (scored by no model) and used for every model"
        )
    out += [n for extra in comp.extras() for n in extra.notes_text()]
    return out + [f"WARNING: {w}" for w in comp.warnings]


def _er_note(comp: Any) -> str:
    er = comp.effective_robustness
    if er.w is None:
        return f"effective robustness: {er.reason or 'not computed'}"
    base = [m for m, b in zip(comp.models, er.fitted_on) if b]
    t = er.space
    return (
        f"effective robustness fit ({t} space, {er.n_baselines} baselines: {', '.join(base)}): "
        f"{t}(PA) = {er.w:.3f} {t}(SA) + {er.b:.3f}, R^2 = {_num(er.r2, 3, 'undefined')} "
        f"(threshold {er.min_r2}), MAE = {er.mae:.2f} points -> "
        + (f"ER reported with {er.interval or 'no interval'}" if er.trusted else er.reason)
        + "".join(f"; {n}" for n in er.notes)
    )


def render_summary(comp: Any) -> str:
    """The tables printed at the end of ``geneval compare``: the compact scores (the ranking score and FMR with
    their intervals, the other :func:`score_columns` as values), then run cost, then the notes. Every score and
    rank is in ``leaderboard.md`` and ``leaderboard.csv``."""
    compact, _ = score_columns(comp.rank_by)
    intervals = list(dict.fromkeys(k for k in (comp.rank_by, "fmr") if k in SCORE))  # ER has its own column
    cells = _text_cells(comp, intervals, [k for k in compact if k not in intervals])
    lines = [
        f"genEval compare  {len(comp.models)} models x {comp.settings.repetitions} repetitions  "
        f"(95% intervals: {comp.settings.interval_note})",
        f"# = rank by {score_label(comp.rank_by)} (rank_by={comp.rank_by})"
        + (
            "; settled = the rank the settled verdicts support (a range: an adjacent pair is open, equivalent or "
            "resolved, a tie)"
            if comp.settled is not None
            else ""
        )
        + (f"; every score and rank: {Path(comp.out_dir) / 'leaderboard.md'}" if comp.out_dir else ""),
    ]
    head = f"{'#':>2} {'model':<20}" + "".join(f" {h:>{w}}" for h, w, _ in cells)
    lines += [head, "-" * len(head)]
    for r in comp.leaderboard:
        lines.append(f"{_rank(r.rank):>2} {r.model[:20]:<20}" + "".join(f" {c(r):>{w}}" for _, w, c in cells))
    cost = f"{'':>2} {'model':<20} {'rejected/sample':>15} {'steps/sample':>12} {'s/run':>9} {'s/sample':>9}"
    lines += ["", cost, "-" * len(cost)]
    for r in comp.leaderboard:
        lines.append(
            f"{'':>2} {r.model[:20]:<20} {_num(r.rejected_per_sample, 3):>15} "
            f"{_num(r.steps_per_sample, 2):>12} {_num(r.time_s, 1):>9} {_num(r.time_per_sample_s, 4):>9}"
        )
    lines += _confidence_lines(comp)
    lines += label_free_lines(comp.label_free)
    lines += ["", *render_notes(comp)]
    if comp.out_dir:
        lines.append(f"comparison directory: {comp.out_dir} (leaderboard.md, comparison.json, report.html)")
    return "\n".join(lines)


def _confidence_lines(comp: Any) -> list[str]:
    """The terminal's two tables of :data:`CONFIDENCE_COLUMNS` (the label-free measures, then selective
    prediction, calibration and detection), with :data:`TERMINAL_HEADERS`, each under 101 characters."""
    keys = list(CONFIDENCE_COLUMNS)
    lines: list[str] = []
    for part in (keys[:5], keys[5:]):
        head = f"{'':>2} {'model':<20}" + "".join(f" {TERMINAL_HEADERS[k]:>{_width(k)}}" for k in part)
        lines += ["", head, "-" * len(head)]
        for r in comp.leaderboard:
            cells = "".join(f" {_num(getattr(r, k), 3, '-'):>{_width(k)}}" for k in part)
            lines.append(f"{'':>2} {r.model[:20]:<20}" + cells)
    return [*lines, TERMINAL_LEGEND]


def _text_cells(comp: Any, intervals: list[str], values: list[str]) -> list[tuple[str, int, Any]]:
    """The terminal table's columns after ``#`` and ``model``, as (header, width, cell of a row): ER first when it
    ranks, the ``intervals`` scores with their interval, the ``values`` scores as values, ER (when reported),
    the settled rank (a settled comparison)."""

    def er(r: Any) -> str:
        return er_cell(r) or ("baseline" if r.baseline else "-")

    has_er = any(r.er is not None for r in comp.leaderboard)
    cells: list[tuple[str, int, Any]] = [("ER", 24, er)] if comp.rank_by == "er" else []
    cells += [(SCORE[k].label, 22, lambda r, k=k: r[k].fmt()) for k in intervals]
    cells += [(SCORE[k].label, 7, lambda r, k=k: _num(r[k].value, missing="-")) for k in values]
    if has_er and comp.rank_by != "er":
        cells.append(("ER", 24, er))
    if comp.settled is not None:
        cells.append(("settled", 7, lambda r: r.tied_rank or "-"))
    return cells


def render_markdown(comp: Any) -> str:
    """``leaderboard.md``: the compact table (:func:`score_columns`), then every score and rank in a full table
    behind a ``<details>`` toggle, run cost, notes and pairwise differences."""
    compact, _ = score_columns(comp.rank_by)
    has_er = any(r.er is not None for r in comp.leaderboard)
    short = [
        ("rank", lambda r: _rank(r.rank)),
        ("model", lambda r: r.model + (" (baseline)" if r.baseline else "")),
        *((SCORE[k].short or SCORE[k].label, lambda r, k=k: r[k].fmt()) for k in compact),
        *([("ER", er_cell)] if has_er else []),
        *([("settled rank", lambda r: r.tied_rank or "-")] if comp.settled is not None else []),
    ]
    full = [
        *short[:2],
        *((SCORE[k].short or SCORE[k].label, lambda r, k=k: r[k].fmt()) for k in TABLE_SCORES),
        ("ER", er_cell),
        ("rank FMR", lambda r: _rank(r.rank_fmr)),
        ("rank SA", lambda r: _rank(r.rank_sa)),
        ("rank_diff", lambda r: signed(r.rank_diff)),
        ("settled rank", lambda r: r.tied_rank or "-"),
    ]
    lines = [
        "# genEval leaderboard",
        "",
        f"{len(comp.models)} models, {comp.settings.repetitions} repetition(s); seeds per repetition: "
        f"{comp.settings.repetition_seeds}. Scores in percent, mean over repetitions with 95% interval: "
        f"{comp.settings.interval_note}. Ranked by {score_label(comp.rank_by)} (rank_by={comp.rank_by}): "
        f"{comp.settings.rank_reason or 'higher first'}. FMR is the paper's 100 PA / SA; "
        "FMR_v = 100 PA / SA_v with SA_v over the validated samples (the population of PA); "
        "VR = validated / all samples. Every score and rank: the table under it, and leaderboard.csv.",
        "",
        *_markdown_table(short, comp.leaderboard),
        "",
        f"<details><summary>Every score and rank ({len(full)} columns)</summary>",
        "",
        "VR_cond = validated / passed the start check. rank_diff = rank by SA - rank by FMR (positive: higher on "
        "FMR than on SA). ER = effective robustness in points with its bootstrap interval (blank unless "
        "baselines were named and their fit is trusted). Settled rank: the rank by the ranking score pooled over "
        "every round, a range (2–3) where an adjacent pair is not ordered by the settled rule: open, equivalent or "
        "resolved, a tie (see Notes).",
        "",
        *_markdown_table(full, comp.leaderboard),
        "",
        "</details>",
    ]
    lines += [
        "",
        "## Run cost (mean over repetitions)",
        "",
        "| model | rejected steps per sample | steps per sample | s per run | s per sample | SoftmaxCorr |",
        "|---|---|---|---|---|---|",
    ]
    for r in comp.leaderboard:
        lines.append(
            f"| {r.model} | {_num(r.rejected_per_sample, 3)} | {_num(r.steps_per_sample, 2)} | "
            f"{_num(r.time_s, 1)} | {_num(r.time_per_sample_s, 4)} | {_num(r.softmax_corr, 3)} |"
        )
    lines += [
        "",
        "## Label-free measures and confidence (mean over repetitions; - = not recorded)",
        "",
        "| model | " + " | ".join(CONFIDENCE_COLUMNS.values()) + " |",
        "|---|" + "---|" * len(CONFIDENCE_COLUMNS),
    ]
    for r in comp.leaderboard:
        lines.append(f"| {r.model} | " + " | ".join(_num(getattr(r, k), 3, "-") for k in CONFIDENCE_COLUMNS) + " |")
    lines += ["", "## Notes", "", *[f"- {n}" for n in render_notes(comp)], ""]
    if comp.differences:
        lines += [
            "## Pairwise differences (a - b, points, 95% interval)",
            "",
            "| a | b | metric | difference | paired | separated |",
            "|---|---|---|---|---|---|",
        ]
        for d in comp.differences:
            iv = (
                "undefined"
                if d.value is None
                else (
                    f"{d.value:.2f} [{_num(d.low)}, {_num(d.high)}]"
                    if d.low is not None
                    else f"{d.value:.2f} (no interval: {d.reason})"
                )
            )
            lines.append(
                f"| {d.a} | {d.b} | {SCORE[d.metric].label} | {iv} | {'yes' if d.paired else 'no'} | "
                f"{'yes' if d.excludes_zero else 'no'} |"
            )
        lines.append("")
    lines += [line for extra in comp.extras() for line in extra.markdown_lines()]
    return "\n".join(lines)


def render_csv(comp: Any) -> str:
    """``leaderboard.csv``: one row per model in leaderboard order (by ``rank_by``), numbers as numbers (empty =
    undefined); ``rank`` (the rank by the ranking score) and ``rank_by`` come last, after the columns of
    comparisons made before ``rank_by`` existed."""
    head = ["model", "rank_fmr", "rank_sa", "rank_diff", "baseline", "repetitions", "n", "n_validated"]
    tail = ["er", "er_low", "er_high", "er_predicted_pa", "softmax_corr", *COST, "rank"]
    scores = [c for k in LEADERBOARD_SCORES for c in (k, f"{k}_low", f"{k}_high", f"{k}_std")]
    buf = io.StringIO()
    extra = list(CONFIDENCE_COLUMNS)[1:]  # after the columns of comparisons made before confidence was recorded
    w = csv.DictWriter(buf, fieldnames=head + scores + tail + ["rank_by", "tied_rank", *extra], lineterminator="\n")
    w.writeheader()
    for r in comp.leaderboard:
        row: dict[str, Any] = {k: getattr(r, k) for k in head + tail + extra} | {
            "rank_by": comp.rank_by,
            "tied_rank": r.tied_rank,
        }
        for k in LEADERBOARD_SCORES:
            e = r[k]
            row.update({k: e.value, f"{k}_low": e.low, f"{k}_high": e.high, f"{k}_std": e.std})
        w.writerow({k: "" if v is None else v for k, v in row.items()})
    return buf.getvalue()
