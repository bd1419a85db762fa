"""The comparison as data and as files: typed leaderboard rows, their text renderings, and writing them.

:mod:`genEval.comparisons.aggregate` builds a :class:`Comparison`; this module owns what it is made of (frozen
dataclasses that round-trip through ``comparison.json``) and its files (paper App. N leaderboards):
``leaderboard.csv`` (numbers as numbers, empty = undefined), ``leaderboard.md``, ``models/<model>.json`` and
``comparison.json``. The HTML report (:mod:`genEval.reports.report`) renders the same rows.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from genEval.comparisons.settled import Settled
from genEval.fileio import atomic_write_bytes, atomic_write_json, ensure_writable_dir
from genEval.scores.class_differences import ClassDifferences
from genEval.scores.definitions import LEADERBOARD_SCORES, SCORE
from genEval.scores.effective_robustness import ERFit
from genEval.scores.fixed_shift import FixedShift
from genEval.scores.intervals import Estimate, format_estimate
from genEval.scores.multi_id import MultiIDFit
from genEval.scores.rankings import Difference, TauDistribution

COMPARISON_SCHEMA = 2
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


def score_columns(rank_by: str = "fmr") -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The (compact, extended) score columns of a table ranked by ``rank_by``, each in :data:`TABLE_SCORES` order:
    :data:`COMPACT_SCORES` and the ranking score (when it is another score), then every other leaderboard score."""
    compact = tuple(k for k in TABLE_SCORES if k in COMPACT_SCORES or k == rank_by)
    return compact, tuple(k for k in TABLE_SCORES if k not in compact)


def _fields(cls: type, d: Mapping) -> dict:
    return {k: v for k, v in d.items() if k in cls.__dataclass_fields__}


@dataclass(frozen=True)
class MetricEntry:
    """One model's score: mean over repetitions (percent) with its 95% interval, spread and per-repetition values.

    With one repetition it is the run's own estimate from results.json; ``std`` is None below 2 repetitions.
    """

    value: float | None
    low: float | None
    high: float | None
    n: int | None
    method: str = ""
    reason: str = ""
    std: float | None = None
    per_rep: list[float | None] = field(default_factory=list)

    @classmethod
    def of(cls, est: Estimate | Mapping, per_rep: list[float | None], std: float | None) -> MetricEntry:
        d = est.to_dict() if isinstance(est, Estimate) else dict(est)
        return cls(
            d.get("value"),
            d.get("low"),
            d.get("high"),
            d.get("n"),
            d.get("method", ""),
            d.get("reason", ""),
            std,
            list(per_rep),
        )

    def fmt(self, digits: int = 2) -> str:
        return format_estimate(self, digits)


@dataclass(frozen=True)
class LeaderboardRow:
    """One model of a comparison. ``scores``: score key -> :class:`MetricEntry` (also ``row["fmr"]``).

    ``rank`` is the model's rank by the comparison's ranking score (``Settings.rank_by``; the rows are in this
    order), ``rank_fmr`` / ``rank_sa`` its ranks by the paper's FMR and by SA;
    ``rank_diff = rank_sa - rank_fmr`` (timm's convention: positive = ranks higher on FMR than on SA);
    ``er`` is the effective robustness in points (None unless baselines were named and their fit is trusted)
    with its bootstrap interval ``er_low``/``er_high``. ``softmax_corr``: label-free SoftmaxCorr of the model on
    its perturbed images (hard decisions; :func:`genEval.scores.label_free.hard_softmax_corr`), mean over repetitions.
    Run cost, means over repetitions: ``rejected_per_sample`` (samples whose search ended on an oracle
    rejection, per sample), ``steps_per_sample`` (steps the oracle judged, start check excluded), ``time_s``
    per run and ``time_per_sample_s``.
    """

    model: str
    scores: dict[str, MetricEntry]
    rank_fmr: int | None
    rank_sa: int | None
    rank_diff: int | None
    baseline: bool
    repetitions: int
    n: float
    n_validated: float
    er: float | None = None
    er_predicted_pa: float | None = None
    er_low: float | None = None
    er_high: float | None = None
    softmax_corr: float | None = None
    rejected_per_sample: float | None = None
    steps_per_sample: float | None = None
    time_s: float | None = None
    time_per_sample_s: float | None = None
    components: dict[str, Any] = field(default_factory=dict)
    seeds: list[int | None] = field(default_factory=list)
    run_dirs: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    rank: int | None = None
    tied_rank: str | None = None

    def __getitem__(self, key: str) -> MetricEntry:
        return self.scores[key]

    def headline(self, rank_by: str = "fmr") -> str:
        """One line: the ranking score with its interval, then the counts it rests on, e.g.
        ``FMR_v 68.42 [48.62, 88.58] on 24 sources, 19 validated`` (per repetition: a mean over several)."""
        score = self.scores.get(rank_by)
        value = (er_cell(self) or "undefined") if rank_by == "er" or score is None else score.fmt()
        reps = f" (means over {self.repetitions} repetitions)" if self.repetitions > 1 else ""
        return f"{score_label(rank_by)} {value} on {_count(self.n)} sources, {_count(self.n_validated)} validated{reps}"

    def to_dict(self) -> dict:
        d = asdict(self)
        return {"model": d.pop("model"), **d.pop("scores"), **d}

    @classmethod
    def from_dict(cls, d: Mapping) -> LeaderboardRow:
        scores = {k: MetricEntry(**_fields(MetricEntry, d[k])) for k in SCORE if isinstance(d.get(k), Mapping)}
        fields = _fields(cls, {k: v for k, v in d.items() if k != "scores"})
        fields.setdefault("rank", d.get("rank_fmr"))  # comparisons written before rank_by were ordered by FMR
        return cls(scores=scores, **fields)


@dataclass(frozen=True)
class TauPair:
    """Kendall tau between the rankings of two repetitions by the ranking score (over the models defined in both)."""

    reps: list[int]
    tau: float | None
    n_models: int


@dataclass(frozen=True)
class Flip:
    """Two models whose order by the ranking score differs between repetitions (``a`` higher in ``a_higher``, ...);
    ``fmr_difference_separated``: whether the paired difference of that score excludes zero (None: no difference
    computed for it, e.g. ER). The name is kept from when only FMR ranked."""

    a: str
    b: str
    a_higher: list[int]
    b_higher: list[int]
    fmr_difference_separated: bool | None


@dataclass(frozen=True)
class Stability:
    """How stable the ranking is (digest 5.3.5; S0 App. A.2): Kendall tau between the rankings of fresh
    repetitions by the ranking score ``score`` (``Settings.rank_by``), and ``tau_bootstrap``, the distribution of
    tau between that ranking and the rankings of bootstrap resamples of the source images
    (:func:`genEval.scores.rankings.rank_stability`). ``sources_resampled``: the repetitions drew different source
    images (else tau between them reflects the start noise only). ``tau_fmr_sa``: Kendall tau between the FMR and
    SA rankings; ``tau_rank_fmr``: between the ranking score's ranking and the FMR ranking (1 when it is FMR)."""

    repetitions: int
    tau_reps: list[TauPair]
    tau_reps_mean: float | None
    tau_reps_min: float | None
    tau_reps_note: str
    tau_fmr_sa: float | None
    flips: list[Flip]
    identical_repetitions: bool
    tau_bootstrap: TauDistribution | None = None
    sources_resampled: bool | None = None
    score: str = "fmr"
    tau_rank_fmr: float | None = None

    @property
    def stable(self) -> bool:
        return not self.flips

    def to_dict(self) -> dict:
        return {**asdict(self), "stable": self.stable}

    @classmethod
    def from_dict(cls, d: Mapping) -> Stability:
        boot = d.get("tau_bootstrap")
        return cls(
            **{
                **_fields(cls, d),
                "tau_reps": [TauPair(**t) for t in d["tau_reps"]],
                "flips": [Flip(**f) for f in d["flips"]],
                "tau_bootstrap": None if boot is None else TauDistribution.from_dict(boot),
            }
        )


@dataclass(frozen=True)
class LabelFree:
    """The label-free diagnostic (S1, Tu et al. 2024): SoftmaxCorr of each model on its perturbed images
    (leaderboard rows, ``softmax_corr``) and its Spearman correlation with PA across the models."""

    spearman_pa: float | None
    n_models: int
    method: str
    reason: str = ""


@dataclass(frozen=True)
class Settings:
    """How a comparison was made: repetitions, seeds, bootstrap, ER gate, shared components and search, and which
    score orders the leaderboard (``rank_by``) and why (``rank_reason``)."""

    repetitions: int | list[int]
    n_boot: int
    level: float
    bootstrap_seed: int
    er_min_r2: float
    interval_note: str
    repetition_seeds: list[int | None]
    num_classes: int
    created: str
    components: dict[str, Any]
    search: dict[str, Any] | None
    baselines: list[str] | None = None
    mask: dict[str, Any] | None = None
    data_seeds: list[int | None] = field(default_factory=list)
    rank_by: str = "fmr"  # comparisons written before rank_by existed were ordered by FMR
    rank_reason: str = ""


#: Comparison's fields that are objects of their own in comparison.json (read back by their own from_dict).
_NESTED = ("leaderboard", "differences", "stability", "effective_robustness", "settings", "label_free", "settled")
#: Optional parts added by issue 43, each an object of its own with to_dict / from_dict / notes_text /
#: markdown_lines: multi-ID ER, the fixed-shift column, per-class differences.
_EXTRAS: dict[str, type] = {"multi_id": MultiIDFit, "fixed_shift": FixedShift, "class_differences": ClassDifferences}


@dataclass(frozen=True)
class Comparison:
    """A model comparison: leaderboard rows sorted by the ranking score (``settings.rank_by``), differences,
    stability, ER, provenance.

    ``effective_robustness`` lists its per-model values in leaderboard order. ``per_class``: model ->
    per-class rows (:func:`genEval.scores.run_scores.per_class_table`, all repetitions pooled).
    """

    leaderboard: list[LeaderboardRow]
    differences: list[Difference]
    stability: Stability
    effective_robustness: ERFit
    runs: dict[str, list[str]]
    seeds: dict[str, list[int | None]]
    class_names: list[str]
    per_class: dict[str, list[dict]]
    settings: Settings
    warnings: list[str] = field(default_factory=list)
    out_dir: str | None = None
    label_free: LabelFree | None = None
    settled: Settled | None = None
    multi_id: MultiIDFit | None = None
    fixed_shift: FixedShift | None = None
    class_differences: ClassDifferences | None = None

    def extras(self) -> list[Any]:
        """The optional parts present (multi-ID ER, fixed shift, per-class differences), in that order."""
        return [getattr(self, k) for k in _EXTRAS if getattr(self, k) is not None]

    @property
    def models(self) -> list[str]:
        return [row.model for row in self.leaderboard]

    @property
    def rank_by(self) -> str:
        return self.settings.rank_by

    def ranking_note(self) -> str:
        """Which score orders the leaderboard and why (first line of the notes, the report and the service)."""
        return f"ranked by {score_label(self.rank_by)}: {self.settings.rank_reason or 'higher first'}"

    def row(self, model: str) -> LeaderboardRow:
        for r in self.leaderboard:
            if r.model == model:
                return r
        raise KeyError(f"no model {model!r} in this comparison; models: {', '.join(self.models)}.")

    def to_dict(self) -> dict:
        er = self.effective_robustness
        return {
            "schema_version": COMPARISON_SCHEMA,
            "leaderboard": [r.to_dict() for r in self.leaderboard],
            "differences": [d.to_dict() for d in self.differences],
            "stability": self.stability.to_dict(),
            "effective_robustness": {
                **er.to_dict(),
                "models": self.models,
                "baseline_models": [m for m, b in zip(self.models, er.baselines) if b],
            },
            "runs": self.runs,
            "seeds": self.seeds,
            "class_names": self.class_names,
            "per_class": self.per_class,
            "settings": asdict(self.settings),
            "warnings": self.warnings,
            "out_dir": self.out_dir,
            "label_free": None if self.label_free is None else asdict(self.label_free),
            "settled": None if self.settled is None else self.settled.to_dict(),
            **{k: None if getattr(self, k) is None else getattr(self, k).to_dict() for k in _EXTRAS},
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> Comparison:
        return cls(
            leaderboard=[LeaderboardRow.from_dict(r) for r in d["leaderboard"]],
            differences=[Difference.from_dict(x) for x in d["differences"]],
            stability=Stability.from_dict(d["stability"]),
            effective_robustness=ERFit.from_dict(d["effective_robustness"]),
            settings=Settings(**_fields(Settings, d["settings"])),
            label_free=LabelFree(**d["label_free"]) if d.get("label_free") else None,
            settled=Settled.from_dict(d["settled"]) if d.get("settled") else None,
            **{k: t.from_dict(d[k]) for k, t in _EXTRAS.items() if d.get(k)},
            **_fields(
                cls,
                {k: v for k, v in d.items() if k not in _NESTED and k not in _EXTRAS},
            ),
        )

    @classmethod
    def load(cls, path: str | Path) -> Comparison:
        """From ``comparison.json`` or the directory that holds it."""
        p = Path(path)
        p = p / "comparison.json" if p.is_dir() else p
        if not p.is_file():
            raise FileNotFoundError(f"no comparison.json at '{p}'; make one with `geneval compare`.")
        d = json.loads(p.read_text(encoding="utf-8"))
        if d.get("kind") == "generator_ablation":
            raise ValueError(
                f"'{p}' holds a generator ablation (one comparison per generator); read it with "
                "genEval.comparisons.ablation.load_comparison, or load one generator's comparison from "
                "generators/<name>/comparison.json."
            )
        return cls.from_dict(d)

    # ---------------------------------------------------------------------------------- text renderings
    def notes(self) -> list[str]:
        """Stability, ER, the label-free diagnostic and warnings as short sentences (summary, leaderboard.md,
        report)."""
        s = self.stability
        label = score_label(s.score)
        out = [self.ranking_note(), *(self.settled.notes() if self.settled is not None else [])]
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
        out.append(self._er_note())
        if self.label_free is not None:
            lf = self.label_free
            out.append(
                f"label-free diagnostic: SoftmaxCorr on the perturbed images ({lf.method}); Spearman rho "
                f"(SoftmaxCorr, PA) over {lf.n_models} models = " + _num(lf.spearman_pa, 3, f"undefined ({lf.reason})")
            )
        over = [r.model for r in self.leaderboard if (r["fmr"].value or 0) > 100]
        if over:
            out.append(
                f"FMR above 100 ({', '.join(over)}): possible because PA is measured over the validated "
                "samples only (the images the oracle vouched for) and SA over all; FMR_v compares the same "
                "population."
            )
        if self.settings.mask:
            m = self.settings.mask
            out.append(
                f"style mask {m.get('id')} fitted once with reference model {m.get('reference')} on "
                f"{m.get('fit_samples')} samples (scored by no model) and used for every model"
            )
        out += [n for extra in self.extras() for n in extra.notes_text()]
        return out + [f"WARNING: {w}" for w in self.warnings]

    def _er_note(self) -> str:
        er = self.effective_robustness
        if er.w is None:
            return f"effective robustness: {er.reason or 'not computed'}"
        base = [m for m, b in zip(self.models, er.fitted_on) if b]
        t = er.space
        return (
            f"effective robustness fit ({t} space, {er.n_baselines} baselines: {', '.join(base)}): "
            f"{t}(PA) = {er.w:.3f} {t}(SA) + {er.b:.3f}, R^2 = {_num(er.r2, 3, 'undefined')} "
            f"(threshold {er.min_r2}), MAE = {er.mae:.2f} points -> "
            + (f"ER reported with {er.interval or 'no interval'}" if er.trusted else er.reason)
            + "".join(f"; {n}" for n in er.notes)
        )

    def summary(self) -> str:
        """The tables printed at the end of ``geneval compare``: the compact scores (the ranking score and FMR with
        their intervals, the other :func:`score_columns` as values), then run cost, then the notes. Every score and
        rank is in ``leaderboard.md`` and ``leaderboard.csv``."""
        compact, _ = score_columns(self.rank_by)
        intervals = list(dict.fromkeys(k for k in (self.rank_by, "fmr") if k in SCORE))  # ER has its own column
        cells = self._text_cells(intervals, [k for k in compact if k not in intervals])
        lines = [
            f"genEval compare  {len(self.models)} models x {self.settings.repetitions} repetitions  "
            f"(95% intervals: {self.settings.interval_note})",
            f"# = rank by {score_label(self.rank_by)} (rank_by={self.rank_by})"
            + ("; settled = the rank the anytime-valid verdicts support" if self.settled is not None else "")
            + (f"; every score and rank: {Path(self.out_dir) / 'leaderboard.md'}" if self.out_dir else ""),
        ]
        head = f"{'#':>2} {'model':<20}" + "".join(f" {h:>{w}}" for h, w, _ in cells)
        lines += [head, "-" * len(head)]
        for r in self.leaderboard:
            lines.append(f"{_rank(r.rank):>2} {r.model[:20]:<20}" + "".join(f" {c(r):>{w}}" for _, w, c in cells))
        cost = f"{'':>2} {'model':<20} {'rejected/sample':>15} {'steps/sample':>12} {'s/run':>9} {'s/sample':>9}"
        lines += ["", cost, "-" * len(cost)]
        for r in self.leaderboard:
            lines.append(
                f"{'':>2} {r.model[:20]:<20} {_num(r.rejected_per_sample, 3):>15} "
                f"{_num(r.steps_per_sample, 2):>12} {_num(r.time_s, 1):>9} {_num(r.time_per_sample_s, 4):>9}"
            )
        lines += ["", *self.notes()]
        if self.out_dir:
            lines.append(f"comparison directory: {self.out_dir} (leaderboard.md, comparison.json, report.html)")
        return "\n".join(lines)

    def _text_cells(self, intervals: list[str], values: list[str]) -> list[tuple[str, int, Any]]:
        """The terminal table's columns after ``#`` and ``model``, as (header, width, cell of a row): ER first when it
        ranks, the ``intervals`` scores with their interval, the ``values`` scores as values, ER (when reported),
        the settled rank (a settled comparison)."""

        def er(r: LeaderboardRow) -> str:
            return er_cell(r) or ("baseline" if r.baseline else "-")

        has_er = any(r.er is not None for r in self.leaderboard)
        cells: list[tuple[str, int, Any]] = [("ER", 24, er)] if self.rank_by == "er" else []
        cells += [(SCORE[k].label, 22, lambda r, k=k: r[k].fmt()) for k in intervals]
        cells += [(SCORE[k].label, 7, lambda r, k=k: _num(r[k].value, missing="-")) for k in values]
        if has_er and self.rank_by != "er":
            cells.append(("ER", 24, er))
        if self.settled is not None:
            cells.append(("settled", 7, lambda r: r.tied_rank or "-"))
        return cells

    def markdown(self) -> str:
        """``leaderboard.md``: the compact table (:func:`score_columns`), then every score and rank in a full table
        behind a ``<details>`` toggle, run cost, notes and pairwise differences."""
        compact, _ = score_columns(self.rank_by)
        has_er = any(r.er is not None for r in self.leaderboard)
        short = [
            ("rank", lambda r: _rank(r.rank)),
            ("model", lambda r: r.model + (" (baseline)" if r.baseline else "")),
            *((SCORE[k].short or SCORE[k].label, lambda r, k=k: r[k].fmt()) for k in compact),
            *([("ER", er_cell)] if has_er else []),
            *([("settled rank", lambda r: r.tied_rank or "-")] if self.settled is not None else []),
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
            f"{len(self.models)} models, {self.settings.repetitions} repetition(s); seeds per repetition: "
            f"{self.settings.repetition_seeds}. Scores in percent, mean over repetitions with 95% interval: "
            f"{self.settings.interval_note}. Ranked by {score_label(self.rank_by)} (rank_by={self.rank_by}): "
            f"{self.settings.rank_reason or 'higher first'}. FMR is the paper's 100 PA / SA; "
            "FMR_v = 100 PA / SA_v with SA_v over the validated samples (the population of PA); "
            "VR = validated / all samples. Every score and rank: the table under it, and leaderboard.csv.",
            "",
            *_markdown_table(short, self.leaderboard),
            "",
            f"<details><summary>Every score and rank ({len(full)} columns)</summary>",
            "",
            "VR_cond = validated / passed the start check. rank_diff = rank by SA - rank by FMR (positive: higher on "
            "FMR than on SA). ER = effective robustness in points with its bootstrap interval (blank unless "
            "baselines were named and their fit is trusted). Settled rank: the rank by the ranking score pooled over "
            "every round, a range (2–3) where an adjacent pair is not yet ordered by the anytime-valid rule (see "
            "Notes).",
            "",
            *_markdown_table(full, self.leaderboard),
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
        for r in self.leaderboard:
            lines.append(
                f"| {r.model} | {_num(r.rejected_per_sample, 3)} | {_num(r.steps_per_sample, 2)} | "
                f"{_num(r.time_s, 1)} | {_num(r.time_per_sample_s, 4)} | {_num(r.softmax_corr, 3)} |"
            )
        lines += ["", "## Notes", "", *[f"- {n}" for n in self.notes()], ""]
        if self.differences:
            lines += [
                "## Pairwise differences (a - b, points, 95% interval)",
                "",
                "| a | b | metric | difference | paired | separated |",
                "|---|---|---|---|---|---|",
            ]
            for d in self.differences:
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
        lines += [line for extra in self.extras() for line in extra.markdown_lines()]
        return "\n".join(lines)

    def csv(self) -> str:
        """``leaderboard.csv``: one row per model in leaderboard order (by ``rank_by``), numbers as numbers (empty =
        undefined); ``rank`` (the rank by the ranking score) and ``rank_by`` come last, after the columns of
        comparisons made before ``rank_by`` existed."""
        head = ["model", "rank_fmr", "rank_sa", "rank_diff", "baseline", "repetitions", "n", "n_validated"]
        tail = ["er", "er_low", "er_high", "er_predicted_pa", "softmax_corr", *COST, "rank"]
        scores = [c for k in LEADERBOARD_SCORES for c in (k, f"{k}_low", f"{k}_high", f"{k}_std")]
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=head + scores + tail + ["rank_by", "tied_rank"], lineterminator="\n")
        w.writeheader()
        for r in self.leaderboard:
            row: dict[str, Any] = {k: getattr(r, k) for k in head + tail} | {
                "rank_by": self.rank_by,
                "tied_rank": r.tied_rank,
            }
            for k in LEADERBOARD_SCORES:
                e = r[k]
                row.update({k: e.value, f"{k}_low": e.low, f"{k}_high": e.high, f"{k}_std": e.std})
            w.writerow({k: "" if v is None else v for k, v in row.items()})
        return buf.getvalue()


def _markdown_table(columns: list[tuple[str, Any]], rows: list[LeaderboardRow]) -> list[str]:
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


def er_cell(r: LeaderboardRow) -> str:
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


def write_comparison(comp: Comparison, out_dir: str | Path) -> Comparison:
    """Write leaderboard.csv/.md, models/<model>.json and comparison.json into ``out_dir`` (each atomically).

    Returns the comparison with ``out_dir`` set (the report goes next to them:
    :func:`genEval.reports.report.write_report`).
    """
    out = ensure_writable_dir(out_dir)
    comp = replace(comp, out_dir=str(out))
    (out / "models").mkdir(exist_ok=True)
    for row in comp.leaderboard:
        atomic_write_json(
            out / "models" / f"{row.model}.json",
            {
                **row.to_dict(),
                "per_class": comp.per_class.get(row.model, []),
                "class_names": comp.class_names,
                "settings": asdict(comp.settings),
            },
        )
    atomic_write_bytes(out / "leaderboard.csv", comp.csv().encode())
    atomic_write_bytes(out / "leaderboard.md", comp.markdown().encode())
    atomic_write_json(out / "comparison.json", comp.to_dict())
    return comp
