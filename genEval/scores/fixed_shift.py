"""A fixed-shift accuracy beside FMR: every model on the same fixed corruptions of the search's sources (the
paper's Table 2 puts ImageNet-C accuracy beside FMR for every row; docs/scores.md, "Corruption accuracy").

Per model: the accuracy on each ImageNet-C corruption (mean over its severities), per family (noise, blur, weather,
digital: mean over the family's corruptions) and overall, the mean over every corruption and severity. The overall
score is the accuracy form of ImageNet-C's mCE (Hendrycks & Dietterich 2019): mCE averages each corruption's error
*normalised by AlexNet's*; no AlexNet exists for these data, so the unnormalised mean accuracy (100 - the mean
corruption error) is reported, the number the paper's Table 2 lists as "ImageNet-C accuracy". Family and overall
accuracies carry a percentile bootstrap interval over the source images (all models resampled together), and
Kendall tau-b between the FMR_v ranking and the corruption-accuracy ranking carries one from the same resamples:
whether the dynamic benchmark orders the models as the fixed one does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Interval:
    """A value in percent (or a tau) with its percentile bootstrap interval; None where undefined."""

    value: float | None
    low: float | None = None
    high: float | None = None

    def fmt(self, digits: int = 2) -> str:
        if self.value is None:
            return "-"
        if self.low is None:
            return f"{self.value:.{digits}f}"
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


@dataclass(frozen=True)
class ShiftRow:
    """One model under the fixed shift: ``overall`` and ``families`` accuracy with intervals, ``corruptions`` and
    ``severities`` as point values (mean over severities / over corruptions), its FMR_v beside them, and its ranks
    by both (competition ranks, 1 = best)."""

    model: str
    overall: Interval
    families: dict[str, Interval]
    corruptions: dict[str, float]
    severities: dict[str, float]
    fmr_validated: Interval
    rank_fmr_validated: int | None
    rank_shift: int | None


@dataclass(frozen=True)
class FixedShift:
    """Corruption accuracy of every model (``rows``, in leaderboard order) and the agreement of its ranking with
    FMR_v's (``tau`` with its bootstrap interval). ``corruptions`` / ``severities`` / ``families``: what was applied
    (family -> its corruptions), ``package``: the corruption package and version, ``seed``: the corruptions' seed,
    ``n_sources``: the source images (each corrupted once per corruption and severity, the same images for every
    model), ``method``: how the intervals were made."""

    kind: str
    corruptions: list[str]
    severities: list[int]
    families: dict[str, list[str]]
    package: str
    seed: int
    n_sources: int
    rows: list[ShiftRow]
    tau: Interval
    method: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> FixedShift:
        def iv(x: Mapping) -> Interval:
            return Interval(**x)

        rows = [
            ShiftRow(
                **{
                    **r,
                    "overall": iv(r["overall"]),
                    "families": {k: iv(v) for k, v in r["families"].items()},
                    "fmr_validated": iv(r["fmr_validated"]),
                }
            )
            for r in d["rows"]
        ]
        return cls(
            **{**{k: v for k, v in d.items() if k in cls.__dataclass_fields__}, "rows": rows, "tau": iv(d["tau"])}
        )

    def row(self, model: str) -> ShiftRow:
        return next(r for r in self.rows if r.model == model)

    def notes_text(self) -> list[str]:
        return [
            f"fixed shift ({self.kind}: {len(self.corruptions)} ImageNet-C corruptions x severities {self.severities} "
            f"of the same {self.n_sources} sources, {self.package}): Kendall tau(FMR_v ranking, corruption-accuracy "
            f"ranking) = {self.tau.fmt(3)}",
            *self.notes,
        ]

    def markdown_lines(self) -> list[str]:
        fams = list(self.families)
        lines = [
            f"## Fixed shift beside FMR_v ({self.kind}; the paper's Table 2 contrast)",
            "",
            f"Every model on the same {self.n_sources} source images under {len(self.corruptions)} ImageNet-C "
            f"corruptions at severities {self.severities} ({self.package}, seed {self.seed}). Corruption accuracy = "
            "mean accuracy over corruptions and severities (ImageNet-C's mCE in accuracy form, unnormalised); "
            f"95% intervals: {self.method}.",
            "",
            "| model | FMR_v | rank FMR_v | corruption accuracy | rank corruptions | " + " | ".join(fams) + " |",
            "|" + "---|" * (5 + len(fams)),
        ]
        for r in self.rows:
            cells = " | ".join(r.families[f].fmt() for f in fams)
            lines.append(
                f"| {r.model} | {r.fmr_validated.fmt()} | {_rank(r.rank_fmr_validated)} | {r.overall.fmt()} | "
                f"{_rank(r.rank_shift)} | {cells} |"
            )
        lines += ["", f"Kendall tau-b (FMR_v ranking, corruption-accuracy ranking): {self.tau.fmt(3)}", ""]
        lines += [
            "| model | " + " | ".join(self.corruptions) + " |",
            "|" + "---|" * (1 + len(self.corruptions)),
        ]
        for r in self.rows:
            lines.append(f"| {r.model} | " + " | ".join(f"{r.corruptions[c]:.1f}" for c in self.corruptions) + " |")
        return lines + [f"- {n}" for n in self.notes] + [""]


def _rank(v: int | None) -> str:
    return "-" if v is None else str(v)
