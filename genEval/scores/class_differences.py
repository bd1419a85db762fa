"""Per-class effects of an intervention (the paper's App. J per-class scores; Miller's thesis, the per-class arrow
plots): for every pair of models, the per-class FMR_v difference with a paired interval and the classes that drive
the overall difference; and per model, FMR and FMR_v per class with a bootstrap interval (docs/scores.md,
"Per-class differences").

A class's difference ``d_c = FMR_v(a | class c) - FMR_v(b | class c)`` uses only the samples of class ``c``, paired
as the overall difference is (repetition r of both models saw the same sources; one resample of those sources
drives both: :func:`genEval.scores.rankings.metric_differences`). FMR_v is a ratio, so the overall difference is not
a sum over classes; a class's **contribution** is its difference weighted by its share of the validated samples
of the two models, ``w_c d_c`` (``sum_c w_c d_c`` approximates the overall difference when SA_v is similar across
classes). A class **drives** the overall difference when its interval excludes 0 and its difference has the
overall one's sign; ``drivers`` lists them by the size of their contribution.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations

import numpy as np

from genEval.scores.intervals import N_BOOT, bootstrap_scores
from genEval.scores.outcomes import Outcomes
from genEval.scores.rankings import metric_differences

METRIC = "fmr_validated"


@dataclass(frozen=True)
class ClassDifference:
    """``value = FMR_v(a) - FMR_v(b)`` on class ``name`` (points) with its paired interval; ``weight`` the class's
    share of the pair's validated samples, ``contribution = weight * value``, ``drives``: see the module
    docstring. None where the class has no validated sample for one of the models."""

    a: str
    b: str
    cls: int
    name: str
    value: float | None
    low: float | None
    high: float | None
    weight: float
    contribution: float | None
    drives: bool
    reason: str = ""


@dataclass(frozen=True)
class PairDifference:
    """One pair: its overall FMR_v difference (with interval) and the classes that drive it, largest first."""

    a: str
    b: str
    value: float | None
    low: float | None
    high: float | None
    drivers: list[str]


@dataclass(frozen=True)
class ClassDifferences:
    """Per-class FMR_v differences of every pair of models (``pairs`` a before b in leaderboard order; ``rows``:
    one per pair and class), how the intervals were made (``method``)."""

    metric: str
    class_names: list[str]
    pairs: list[PairDifference]
    rows: list[ClassDifference]
    method: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> ClassDifferences:
        return cls(
            metric=d["metric"],
            class_names=list(d["class_names"]),
            pairs=[PairDifference(**p) for p in d["pairs"]],
            rows=[ClassDifference(**r) for r in d["rows"]],
            method=d.get("method", ""),
            notes=list(d.get("notes") or []),
        )

    def matrix(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """(pair labels ``a - b``, differences (P, C) with NaN where undefined, whether each interval excludes 0)."""
        labels = [f"{p.a} - {p.b}" for p in self.pairs]
        index = {(p.a, p.b): i for i, p in enumerate(self.pairs)}
        mat = np.full((len(self.pairs), len(self.class_names)), np.nan)
        sep = np.zeros(mat.shape, bool)
        for r in self.rows:
            i = index[(r.a, r.b)]
            if r.value is not None:
                mat[i, r.cls] = r.value
                sep[i, r.cls] = r.low is not None and (r.low > 0 or r.high < 0)
        return labels, mat, sep

    def notes_text(self) -> list[str]:
        out = []
        for p in self.pairs:
            if p.drivers:
                out.append(f"per-class FMR_v difference {p.a} - {p.b}: driven by {', '.join(p.drivers)}")
        return out or ["per-class FMR_v differences: no class's paired interval excludes 0 for any pair"]

    def markdown_lines(self) -> list[str]:
        lines = [
            "## Per-class FMR_v differences (a - b, points, paired 95% interval)",
            "",
            f"{self.method}. A class drives the overall difference when its interval excludes 0 with the overall "
            "difference's sign; contribution = the class's share of the pair's validated samples x its difference.",
            "",
            "| a | b | overall | driven by |",
            "|---|---|---|---|",
        ]
        for p in self.pairs:
            overall = (
                "-"
                if p.value is None
                else f"{p.value:+.2f}" + (f" [{p.low:+.2f}, {p.high:+.2f}]" if p.low is not None else "")
            )
            lines.append(f"| {p.a} | {p.b} | {overall} | {', '.join(p.drivers) or '-'} |")
        lines += ["", "| a | b | class | difference [95%] | contribution | drives |", "|---|---|---|---|---|---|"]
        for r in self.rows:
            if r.value is None:
                continue
            iv = f"{r.value:+.2f}" + (f" [{r.low:+.2f}, {r.high:+.2f}]" if r.low is not None else "")
            lines.append(f"| {r.a} | {r.b} | {r.name} | {iv} | {r.contribution:+.2f} | {'yes' if r.drives else 'no'} |")
        return lines + [f"- {n}" for n in self.notes] + [""]


def _by_class(reps: Sequence[Outcomes], c: int) -> list[Outcomes]:
    return [o.subset(o.labels == c) for o in reps]


def class_differences(
    order: Sequence[str],
    outcomes: Mapping[str, Sequence[Outcomes]],
    class_names: Sequence[str],
    num_classes: int,
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = 0.95,
) -> ClassDifferences:
    """Every pair (a before b in ``order``), every class: the paired per-class FMR_v difference (module docstring)."""
    pairs, rows = [], []
    for a, b in combinations(order, 2):
        kw = dict(names=(a, b), n_boot=n_boot, seed=seed, level=level)
        overall = metric_differences(outcomes[a], outcomes[b], num_classes, (METRIC,), **kw)[METRIC]
        val_a = [o.validated for o in outcomes[a]]
        val_b = [o.validated for o in outcomes[b]]
        total = sum(int(v.sum()) for v in val_a + val_b)
        pair_rows = []
        for c, name in enumerate(class_names):
            ra, rb = _by_class(outcomes[a], c), _by_class(outcomes[b], c)
            n_val = sum(int(o.validated.sum()) for o in ra + rb)
            weight = n_val / total if total else 0.0
            if not any(len(o) for o in ra) or not any(len(o) for o in rb):
                continue
            d = metric_differences(ra, rb, num_classes, (METRIC,), **kw)[METRIC]
            separated = d.low is not None and (d.low > 0 or d.high < 0)
            same_sign = d.value is not None and overall.value is not None and np.sign(d.value) == np.sign(overall.value)
            pair_rows.append(
                ClassDifference(
                    a,
                    b,
                    c,
                    str(name),
                    d.value,
                    d.low,
                    d.high,
                    weight,
                    None if d.value is None else weight * d.value,
                    bool(separated and same_sign and overall.value != 0),
                    d.reason,
                )
            )
        drivers = [r.name for r in sorted(pair_rows, key=lambda r: -abs(r.contribution or 0.0)) if r.drives]
        pairs.append(PairDifference(a, b, overall.value, overall.low, overall.high, drivers))
        rows += pair_rows
    return ClassDifferences(
        METRIC,
        [str(c) for c in class_names],
        pairs,
        rows,
        f"paired bootstrap({n_boot}) over each class's shared source images (repetition r of both models)",
    )


def per_class_ratio_intervals(
    reps: Sequence[Outcomes],
    class_names: Sequence[str],
    num_classes: int,
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = 0.95,
) -> dict[int, dict[str, float | None]]:
    """Per class: the bootstrap interval of FMR and FMR_v over that class's source images (all repetitions
    resampled together), as ``{class: {"fmr_low": ..., "fmr_high": ..., "fmr_validated_low": ...}}``."""
    out = {}
    for c in range(len(class_names)):
        sub = _by_class(reps, c)
        if not sum(len(o) for o in sub):
            continue
        est = bootstrap_scores(sub, num_classes, ("fmr", METRIC), n_boot=n_boot, seed=seed, level=level)
        out[c] = {f"{k}_{side}": getattr(est[k], side) for k in ("fmr", METRIC) for side in ("low", "high")}
    return out


def with_ratio_intervals(rows: Sequence[dict], intervals: Mapping[int, Mapping[str, float | None]]) -> list[dict]:
    """Per-class table rows (:func:`genEval.scores.run_scores.per_class_table`) with the FMR / FMR_v intervals of
    :func:`per_class_ratio_intervals` added (``fmr_low``, ``fmr_high``, ``fmr_validated_low``, ...)."""
    return [{**r, **intervals.get(int(r["class"]), {})} for r in rows]
