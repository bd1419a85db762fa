"""The comparison as data and as files: typed leaderboard rows and writing them (the text renderings are
:mod:`genEval.comparisons.writers`).

:mod:`genEval.comparisons.aggregate` builds a :class:`Comparison`; this module owns what it is made of (frozen
dataclasses that round-trip through ``comparison.json``) and its files (paper App. N leaderboards):
``leaderboard.csv`` (numbers as numbers, empty = undefined), ``leaderboard.md``, ``models/<model>.json`` and
``comparison.json``. The HTML report (:mod:`genEval.reports.report`) renders the same rows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from genEval.comparisons.settled import Settled
from genEval.comparisons.writers import (  # noqa: F401 (the table layout's old home: imported from here too)
    COMPACT_SCORES,
    CONFIDENCE_COLUMNS,
    COST,
    TABLE_SCORES,
    TERMINAL_HEADERS,
    TERMINAL_LEGEND,
    _count,
    er_cell,
    label_free_lines,
    render_csv,
    render_markdown,
    render_notes,
    render_summary,
    score_columns,
    score_label,
    signed,
)
from genEval.fileio import atomic_write_bytes, atomic_write_json, ensure_writable_dir
from genEval.scores.class_differences import ClassDifferences
from genEval.scores.definitions import SCORE
from genEval.scores.effective_robustness import ERFit
from genEval.scores.fixed_shift import FixedShift
from genEval.scores.intervals import Estimate, format_estimate
from genEval.scores.multi_id import MultiIDFit
from genEval.scores.rankings import Difference, TauDistribution

COMPARISON_SCHEMA = 2


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
    with its bootstrap interval ``er_low``/``er_high``. The label-free measures of the model on its validated perturbed
    images (:mod:`genEval.scores.label_free`, from the recorded softmax probabilities, q from the oracle's classes;
    means over repetitions; None: not recorded): ``softmax_corr``, ``max_pred``, ``soft_gap``, ``atc_mc``,
    ``oracle_agreement``. Selective prediction and calibration of its runs (:mod:`genEval.scores.confidence`, percent,
    means over repetitions): ``aurra_clean`` / ``aurra_perturbed``, ``calibration_error_clean`` /
    ``calibration_error_perturbed`` (RMS, bins of 100), ``shift_auroc`` (-MSP telling its validated perturbed images
    from their clean sources) and, with ``ood_data``, ``ood_aupr`` / ``ood_auroc``.
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
    max_pred: float | None = None
    soft_gap: float | None = None
    atc_mc: float | None = None
    oracle_agreement: float | None = None
    aurra_clean: float | None = None
    aurra_perturbed: float | None = None
    calibration_error_clean: float | None = None
    calibration_error_perturbed: float | None = None
    shift_auroc: float | None = None
    ood_aupr: float | None = None
    ood_auroc: float | None = None

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
    (leaderboard rows, ``softmax_corr``) and its Spearman correlation with PA across the models (``spearman_pa``).
    ``measures``: every label-free measure (SoftmaxCorr, MaxPred, SoftGap, ATC-MC, agreement with the oracle) ->
    truth (``pa``, ``fmr_validated``) -> ``{rho, tau_w, n_models, reason}``; ``sensitivity``: the same measure ->
    truth -> ``{subsample: {fraction: {rho, tau_w}}, kept_models: {...}}`` when the paper's protocol was run
    (``label_free.sensitivity=true``); ``not_recorded``: models whose runs hold no confidence (docs/scores.md)."""

    spearman_pa: float | None
    n_models: int
    method: str
    reason: str = ""
    measures: dict[str, dict[str, dict[str, Any]]] | None = None
    sensitivity: dict[str, dict[str, dict[str, Any]]] | None = None
    not_recorded: list[str] = field(default_factory=list)


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
#: Optional parts (docs/comparing.md), each an object of its own with to_dict / from_dict / notes_text /
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

    # ------------------------------------------- text renderings: genEval.comparisons.writers
    def notes(self) -> list[str]:
        """Stability, ER, the label-free diagnostic and warnings as short sentences (:func:`render_notes`)."""
        return render_notes(self)

    def summary(self) -> str:
        """The tables printed at the end of ``geneval compare`` (:func:`render_summary`)."""
        return render_summary(self)

    def markdown(self) -> str:
        """``leaderboard.md`` (:func:`render_markdown`)."""
        return render_markdown(self)

    def csv(self) -> str:
        """``leaderboard.csv`` (:func:`render_csv`)."""
        return render_csv(self)


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
