"""The comparison as data and as files: typed leaderboard rows, their text renderings, and writing them.

:mod:`genEval.compare` builds a :class:`Comparison`; this module owns what it is made of (frozen dataclasses
that round-trip through ``comparison.json``) and its files (paper App. N leaderboards):
``leaderboard.csv`` (numbers as numbers, empty = undefined), ``leaderboard.md``, ``models/<model>.json`` and
``comparison.json``. The HTML report (:mod:`genEval.report`) renders the same rows.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from genEval.fileio import atomic_write_bytes, atomic_write_json, ensure_writable_dir
from genEval.stats import LEADERBOARD_SCORES, SCORE, Difference, ERFit, Estimate, format_estimate

COMPARISON_SCHEMA = 1
#: Leaderboard columns in tables: ranked by FMR, so FMR first, then the other scores in definition order.
TABLE_SCORES = ("fmr", *(k for k in LEADERBOARD_SCORES if k != "fmr"))


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
        return cls(d.get("value"), d.get("low"), d.get("high"), d.get("n"), d.get("method", ""),
                   d.get("reason", ""), std, list(per_rep))

    def fmt(self, digits: int = 2) -> str:
        return format_estimate(self, digits)


@dataclass(frozen=True)
class LeaderboardRow:
    """One model of a comparison. ``scores``: score key -> :class:`MetricEntry` (also ``row["fmr"]``).

    ``rank_diff = rank_sa - rank_fmr`` (timm's convention: positive = ranks higher on FMR than on SA);
    ``er`` is the effective robustness in points (None unless the baseline fit is trusted).
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
    components: dict[str, Any] = field(default_factory=dict)
    seeds: list[int | None] = field(default_factory=list)
    run_dirs: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def __getitem__(self, key: str) -> MetricEntry:
        return self.scores[key]

    def to_dict(self) -> dict:
        d = asdict(self)
        return {"model": d.pop("model"), **d.pop("scores"), **d}

    @classmethod
    def from_dict(cls, d: Mapping) -> LeaderboardRow:
        scores = {k: MetricEntry(**_fields(MetricEntry, d[k])) for k in SCORE if isinstance(d.get(k), Mapping)}
        return cls(scores=scores, **_fields(cls, {k: v for k, v in d.items() if k != "scores"}))


@dataclass(frozen=True)
class TauPair:
    """Kendall tau between the FMR rankings of two repetitions (over the models defined in both)."""

    reps: list[int]
    tau: float | None
    n_models: int


@dataclass(frozen=True)
class Flip:
    """Two models whose FMR order differs between repetitions (``a`` higher in ``a_higher``, ...)."""

    a: str
    b: str
    a_higher: list[int]
    b_higher: list[int]
    fmr_difference_separated: bool | None


@dataclass(frozen=True)
class Stability:
    """How stable the ranking is across fresh repetitions (digest 5.3.5; S0 App. A.2)."""

    repetitions: int
    tau_reps: list[TauPair]
    tau_reps_mean: float | None
    tau_reps_min: float | None
    tau_reps_note: str
    tau_fmr_sa: float | None
    flips: list[Flip]
    identical_repetitions: bool

    @property
    def stable(self) -> bool:
        return not self.flips

    def to_dict(self) -> dict:
        return {**asdict(self), "stable": self.stable}

    @classmethod
    def from_dict(cls, d: Mapping) -> Stability:
        return cls(**{**_fields(cls, d), "tau_reps": [TauPair(**t) for t in d["tau_reps"]],
                      "flips": [Flip(**f) for f in d["flips"]]})


@dataclass(frozen=True)
class Settings:
    """How a comparison was made: repetitions, seeds, bootstrap, ER gate, shared components and search."""

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


@dataclass(frozen=True)
class Comparison:
    """A model comparison: leaderboard rows sorted by FMR rank, differences, stability, ER, provenance.

    ``effective_robustness`` lists its per-model values in leaderboard order. ``per_class``: model ->
    per-class rows (:func:`genEval.stats.per_class_table`, all repetitions pooled).
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

    @property
    def models(self) -> list[str]:
        return [row.model for row in self.leaderboard]

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
            "effective_robustness": {**er.to_dict(), "models": self.models,
                                     "baseline_models": [m for m, b in zip(self.models, er.baselines) if b]},
            "runs": self.runs, "seeds": self.seeds, "class_names": self.class_names, "per_class": self.per_class,
            "settings": asdict(self.settings), "warnings": self.warnings, "out_dir": self.out_dir,
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> Comparison:
        return cls(
            leaderboard=[LeaderboardRow.from_dict(r) for r in d["leaderboard"]],
            differences=[Difference.from_dict(x) for x in d["differences"]],
            stability=Stability.from_dict(d["stability"]),
            effective_robustness=ERFit.from_dict(d["effective_robustness"]),
            settings=Settings(**_fields(Settings, d["settings"])),
            **_fields(cls, {k: v for k, v in d.items()
                            if k not in ("leaderboard", "differences", "stability", "effective_robustness",
                                         "settings")}),
        )

    @classmethod
    def load(cls, path: str | Path) -> Comparison:
        """From ``comparison.json`` or the directory that holds it."""
        p = Path(path)
        p = p / "comparison.json" if p.is_dir() else p
        if not p.is_file():
            raise FileNotFoundError(f"no comparison.json at '{p}'; make one with `geneval compare`.")
        return cls.from_dict(json.loads(p.read_text(encoding="utf-8")))

    # ---------------------------------------------------------------------------------- text renderings
    def notes(self) -> list[str]:
        """Stability, ER and warnings as short sentences (summary, leaderboard.md, report)."""
        s, er = self.stability, self.effective_robustness
        out = []
        if s.tau_reps_mean is not None:
            out.append(f"rank stability: Kendall tau between repetitions' FMR rankings mean {s.tau_reps_mean:.3f}, "
                       f"min {s.tau_reps_min:.3f} ({len(s.tau_reps)} pairs)")
        else:
            out.append(f"rank stability: {s.tau_reps_note or 'not computed'}")
        out.append("Kendall tau(FMR ranking, SA ranking): " + _num(s.tau_fmr_sa, 3, "undefined"))
        for f in s.flips:
            out.append(f"FMR order of {f.a} and {f.b} flips across repetitions "
                       f"({f.a} higher in reps {f.a_higher}, {f.b} higher in reps {f.b_higher})")
        if er.w is not None:
            out.append(f"effective robustness fit ({er.space} space, {er.n_baselines} baselines): "
                       f"logit(PA) = {er.w:.3f} logit(SA) + {er.b:.3f}, R^2 = {_num(er.r2, 3, 'undefined')} "
                       f"(threshold {er.min_r2}), MAE = {er.mae:.2f} points -> "
                       + ("ER reported" if er.trusted else er.reason))
        else:
            out.append(f"effective robustness: {er.reason or 'not computed'}")
        return out + [f"WARNING: {w}" for w in self.warnings]

    def summary(self) -> str:
        """The fixed-width table printed at the end of ``geneval compare``."""
        lines = [f"genEval compare  {len(self.models)} models x {self.settings.repetitions} repetitions  "
                 f"(95% intervals: {self.settings.interval_note})"]
        head = f"{'#':>2} {'model':<20} {'FMR':>22} {'SA':>22} {'PA':>22} {'VR':>7} {'rankSA':>6} {'diff':>5}"
        lines += [head, "-" * len(head)]
        for r in self.leaderboard:
            lines.append(f"{_rank(r.rank_fmr):>2} {r.model[:20]:<20} {r['fmr'].fmt():>22} {r['sa'].fmt():>22} "
                         f"{r['pa'].fmt():>22} {_num(r['vr'].value):>7} {_rank(r.rank_sa):>6} "
                         f"{signed(r.rank_diff):>5}")
        lines += ["", *self.notes()]
        if self.out_dir:
            lines.append(f"comparison directory: {self.out_dir} (leaderboard.md, comparison.json, report.html)")
        return "\n".join(lines)

    def markdown(self) -> str:
        """``leaderboard.md``."""
        cols = ["rank", "model", *(SCORE[k].short or SCORE[k].label for k in TABLE_SCORES), "ER", "rank SA",
                "rank_diff"]
        lines = [
            "# genEval leaderboard", "",
            f"{len(self.models)} models, {self.settings.repetitions} repetition(s); seeds per repetition: "
            f"{self.settings.repetition_seeds}. Scores in percent, mean over repetitions with 95% interval: "
            f"{self.settings.interval_note}. Ranked by FMR; rank_diff = rank by SA - rank by FMR (positive: "
            "higher on FMR than on SA). ER = effective robustness in points (blank when the baseline fit is "
            "not trusted).", "",
            "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols),
        ]
        for r in self.leaderboard:
            cells = [_rank(r.rank_fmr), r.model + (" (baseline)" if r.baseline else ""),
                     *(r[k].fmt() for k in TABLE_SCORES), _num(r.er), _rank(r.rank_sa), signed(r.rank_diff)]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "## Notes", "", *[f"- {n}" for n in self.notes()], ""]
        if self.differences:
            lines += ["## Pairwise differences (a - b, points, 95% interval)", "",
                      "| a | b | metric | difference | paired | separated |", "|---|---|---|---|---|---|"]
            for d in self.differences:
                iv = "undefined" if d.value is None else f"{d.value:.2f} [{_num(d.low)}, {_num(d.high)}]"
                lines.append(f"| {d.a} | {d.b} | {SCORE[d.metric].label} | {iv} | {'yes' if d.paired else 'no'} | "
                             f"{'yes' if d.excludes_zero else 'no'} |")
            lines.append("")
        return "\n".join(lines)

    def csv(self) -> str:
        """``leaderboard.csv``: one row per model, numbers as numbers (empty = undefined)."""
        head = ["model", "rank_fmr", "rank_sa", "rank_diff", "baseline", "repetitions", "n", "n_validated"]
        tail = ["er", "er_predicted_pa"]
        scores = [c for k in LEADERBOARD_SCORES for c in (k, f"{k}_low", f"{k}_high", f"{k}_std")]
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=head + scores + tail, lineterminator="\n")
        w.writeheader()
        for r in self.leaderboard:
            row: dict[str, Any] = {k: getattr(r, k) for k in head + tail}
            for k in LEADERBOARD_SCORES:
                e = r[k]
                row.update({k: e.value, f"{k}_low": e.low, f"{k}_high": e.high, f"{k}_std": e.std})
            w.writerow({k: "" if v is None else v for k, v in row.items()})
        return buf.getvalue()


def _num(v: float | None, digits: int = 2, missing: str = "") -> str:
    return missing if v is None else f"{v:.{digits}f}"


def _rank(v: int | None) -> str:
    return "-" if v is None else str(v)


def signed(v: int | None) -> str:
    """A rank difference with its sign (``+2``, ``0``, ``-1``); ``-`` when undefined."""
    return "-" if v is None else (f"+{v}" if v > 0 else str(v))


def write_comparison(comp: Comparison, out_dir: str | Path) -> Comparison:
    """Write leaderboard.csv/.md, models/<model>.json and comparison.json into ``out_dir`` (each atomically).

    Returns the comparison with ``out_dir`` set (the report goes next to them: :func:`genEval.report.write_report`).
    """
    out = ensure_writable_dir(out_dir)
    comp = replace(comp, out_dir=str(out))
    (out / "models").mkdir(exist_ok=True)
    for row in comp.leaderboard:
        atomic_write_json(out / "models" / f"{row.model}.json",
                          {**row.to_dict(), "per_class": comp.per_class.get(row.model, []),
                           "class_names": comp.class_names, "settings": asdict(comp.settings)})
    atomic_write_bytes(out / "leaderboard.csv", comp.csv().encode())
    atomic_write_bytes(out / "leaderboard.md", comp.markdown().encode())
    atomic_write_json(out / "comparison.json", comp.to_dict())
    return comp
