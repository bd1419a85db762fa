"""The scores of one run: every score with its interval, the per-class table (paper App. J), and warnings.

:func:`compute_scores` is what ``results.json`` holds under ``scores`` (:class:`Scores`); the driver and the
merge of shards both call it through :func:`genEval.runs.summary.summarize`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from genEval.scores.definitions import PER_CLASS_SCORES, SCORE, SCORES, finite_or_none, score_values
from genEval.scores.intervals import N_BOOT, Estimate, bootstrap_scores, proportion
from genEval.scores.outcomes import COLUMN, COLUMNS, Outcomes
from genEval.scores.scoring import Scoring as Scoring  # the settings bundle, re-exported where it always was


@dataclass(frozen=True)
class Scores:
    """All scores of one evaluation (``estimates``: key of :data:`SCORES` -> :class:`Estimate`, also readable
    as attributes, e.g. ``scores.sa``) plus the raw counts. ``to_dict`` is results.json's ``scores``."""

    estimates: Mapping[str, Estimate]
    n: int
    n_clean_correct: int
    n_validatable: int
    n_validated: int
    n_perturbed_correct: int
    n_rejected: int
    num_classes: int
    n_clean_validated: int = 0
    n_oracle_clean_correct: int = 0
    n_oracle_recon_correct: int = 0
    n_unchanged: int = 0

    def __getattr__(self, name: str) -> Estimate:
        est = self.__dict__.get("estimates", {})
        if name in est:
            return est[name]
        raise AttributeError(f"Scores has no score {name!r}; scores: {', '.join(est)}.")

    def to_dict(self) -> dict:
        counts = {k: v for k, v in self.__dict__.items() if k != "estimates"}
        return {**{k: e.to_dict() for k, e in self.estimates.items()}, **counts}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], num_classes: int = 0) -> Scores:
        """Inverse of :meth:`to_dict` (results.json's ``scores``): every entry holding an estimate is one, the
        counts are the rest (0 where a hand-written file has none; ``num_classes`` when it lacks its own)."""
        counts = {f: int(d.get(f, 0)) for f in _COUNTS}
        counts["num_classes"] = int(d.get("num_classes", num_classes))
        estimates = {k: Estimate(**v) for k, v in d.items() if isinstance(v, Mapping)}
        return cls(estimates, **counts)


#: The counts of :class:`Scores` (every field but the estimates).
_COUNTS = tuple(f for f in Scores.__dataclass_fields__ if f not in ("estimates", "num_classes"))


def compute_scores(
    outcomes: Outcomes,
    num_classes: int,
    *,
    interval: str = "wilson",
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = 0.95,
    budget: int | None = None,
) -> Scores:
    """Every score of one run with its interval: proportions Wilson/Clopper-Pearson, the others bootstrapped.

    ``budget`` (the search budget, when known) lets an undefined PA say that the budget was 0.
    """
    totals = outcomes.totals()
    ctx = {"budget": budget, "num_classes": num_classes}
    derived = [s.key for s in SCORES if not s.is_proportion]
    boot = bootstrap_scores([outcomes], num_classes, derived, n_boot=n_boot, seed=seed, level=level, context=ctx)
    estimates = {}
    for s in SCORES:
        if s.is_proportion:
            k, n = int(totals[COLUMN[s.numerator]]), int(totals[COLUMN[s.denominator]])
            e = proportion(k, n, interval, level)
            estimates[s.key] = e if n else Estimate(None, None, None, 0, 0, interval, s.why_undefined(totals, ctx))
        else:
            estimates[s.key] = boot[s.key]
    count = {c: int(totals[COLUMN[c]]) for c in COLUMNS}
    return Scores(
        estimates,
        n=count["n"],
        n_clean_correct=count["clean"],
        n_validatable=count["start_ok"],
        n_validated=count["validated"],
        n_perturbed_correct=count["perturbed_correct"],
        n_rejected=count["rejected"],
        num_classes=num_classes,
        n_clean_validated=count["clean_validated"],
        n_oracle_clean_correct=count["oracle_clean"],
        n_oracle_recon_correct=count["oracle_recon"],
        n_unchanged=count["unchanged"],
    )


def per_class_table(
    outcomes: Outcomes, class_names: Sequence[str], interval: str = "wilson", level: float = 0.95
) -> list[dict]:
    """Per-class scores (paper App. J) as plain rows, proportions with their interval (``interval``: Wilson or
    Clopper-Pearson per class), ratios (FMR, FMR_v) as values only (no bootstrap per class).

    One row per class that has samples: ``class`` (index), ``name``, ``n``, each score of
    :data:`PER_CLASS_SCORES` (None = undefined) followed, for proportions, by ``<score>_low`` / ``<score>_high``,
    then ``n_validated``. The oracle's per-class accuracy is ``oracle_clean_accuracy`` /
    ``oracle_recon_accuracy``.
    """
    rows = []
    num_classes = max(1, len(class_names))
    for c, name in enumerate(class_names):
        totals = outcomes.totals(outcomes.labels == c)
        n = int(totals[COLUMN["n"]])
        if n == 0:
            continue
        vals = score_values(totals, num_classes, PER_CLASS_SCORES)
        row: dict[str, Any] = {"class": c, "name": name, "n": n}
        for k in PER_CLASS_SCORES:
            row[k] = finite_or_none(vals[k])
            if SCORE[k].is_proportion:
                e = proportion(
                    int(totals[COLUMN[SCORE[k].numerator]]), int(totals[COLUMN[SCORE[k].denominator]]), interval, level
                )
                row.update({f"{k}_low": e.low, f"{k}_high": e.high})
        rows.append({**row, "n_validated": int(totals[COLUMN["validated"]])})
    return rows


def score_warnings(
    scores: Scores, *, oracle_warn_accuracy: float | None = 70.0, search: Mapping | None = None
) -> list[str]:
    """Warnings that the scores of one run are less meaningful than they look (docs/method.md):

    * the oracle's own accuracy (clean images or start reconstructions) is below ``oracle_warn_accuracy``
      percent (None: no check): PA is only as meaningful as the judge;
    * most validated samples are *unchanged* (final image within 1/255 L-inf of the start reconstruction):
      "validated" then does not mean "perturbed" and PA reads like the reconstruction accuracy. ``search``
      (the run's search settings) names the update rule and step size to change.
    """
    out = []
    clean, recon = scores.oracle_clean_accuracy.value, scores.oracle_recon_accuracy.value
    low = [
        f"{v:.1f}% on the {what}"
        for v, what in ((clean, "clean images"), (recon, "start reconstructions"))
        if oracle_warn_accuracy is not None and v is not None and v < oracle_warn_accuracy
    ]
    if low:
        out.append(
            f"oracle accuracy: the oracle is right on only {' and '.join(low)} (oracle_warn_accuracy="
            f"{oracle_warn_accuracy:g}). PA is only as meaningful as the judge: use a stronger oracle or "
            "check its class names / prompts."
        )
    if scores.n_validated and scores.n_unchanged > scores.n_validated / 2:
        s = dict(search or {})
        now = ", ".join(f"{k}={s[k]}" for k in ("update", "step_size", "budget") if k in s)
        other = "search.update=sign" if s.get("update") == "adam" else "search.update=adam"
        out.append(
            f"unchanged: {scores.n_unchanged} of {scores.n_validated} validated samples moved less than 1/255 "
            "(L-inf) from the start reconstruction, so 'validated' barely means 'perturbed' and PA/FMR "
            "mostly measure the reconstruction. Raise search.step_size or search.budget, or change "
            f"search.update{f' (now {now})' if now else ''}; e.g. {other}."
        )
    return out
