"""Every score of genEval, defined once (paper Sec. 3.3; docs/method.md, "The scores"), in percent as in the paper.

* SA  = accuracy of ``f`` on the clean images (all samples).
* RA  = accuracy of ``f`` on the generator's reconstructions ``D(E(x))`` (the generator gap).
* VR  = validated / all samples (paper App. J).
* PA  = accuracy of ``f`` on the perturbed images, over validated samples only (undefined when none).
* FMR = 100 * PA / SA (the paper's headline); chance-corrected FMR = 100 * (PA - 100/C) / (SA - 100/C),
  undefined whenever SA <= 100/C (at or below chance the ratio rewards a useless model).
* oracle start accuracy = share of samples whose reconstruction the oracle accepts (the start check).

SA and PA are over different populations: the start check removes exactly the images the oracle cannot
vouch for, which are often the hard ones, so FMR can exceed 100 and is inflated by a model-specific factor
(docs/method.md). Scores over the *same* population stand beside it:

* SA_v  (``sa_validated``)  = accuracy of ``f`` on the clean images of the validated samples.
* FMR_v (``fmr_validated``) = 100 * PA / SA_v.
* VR_cond (``vr_conditional``) = validated / samples that passed the start check.
* ``oracle_clean_accuracy`` / ``oracle_recon_accuracy`` = the oracle's own accuracy (its verdict == the true
  label) on the clean images and on the start reconstructions ``D(z_0)``: PA is only as meaningful as the judge.
* ``unchanged_share`` = share of validated samples whose final image moved less than 1/255 (L-inf) from the
  start reconstruction: "validated" must mean "perturbed".

Each is one :class:`Score` in :data:`SCORES`, computed by :func:`score_values` from column sums of
:class:`genEval.scores.outcomes.Outcomes`. Adding a score is one :class:`Score` (plus a column in
:data:`~genEval.scores.outcomes.COLUMNS` when it counts something new): results.json, the bootstrap, the
leaderboard, differences and per-class tables follow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from genEval.scores.outcomes import COLUMN, COLUMNS


def fmr_formula(sa, pa):
    """FMR = 100 * PA / SA (percent in, percent out; arrays or scalars); NaN where SA is 0 or a value NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.asarray(sa) == 0, np.nan, 100.0 * np.asarray(pa) / np.asarray(sa))


def chance_corrected_formula(sa, pa, num_classes: int):
    """100 * (PA - 100/C) / (SA - 100/C): 0 for a model at chance after perturbation, 100 for no drop.

    NaN wherever SA <= chance (100/C): at chance the ratio is undefined, and below it both differences are
    negative, so a model worse than chance before and after (SA 0, PA 0) would read as perfectly robust.
    """
    if not num_classes:
        raise ValueError("fmr_chance_corrected needs num_classes (C in 100*(PA-100/C)/(SA-100/C)).")
    chance = 100.0 / num_classes
    den = np.asarray(sa) - chance
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 1e-12, 100.0 * (np.asarray(pa) - chance) / np.where(den > 1e-12, den, 1.0), np.nan)


#: A reason for an undefined score: fixed text, or a function of the column sums and the run's context
#: (``{"budget": search budget or None, "num_classes": C}``).
Why = str | Callable[[np.ndarray, Mapping], str]


@dataclass(frozen=True)
class Score:
    """One score, defined once. A *proportion* is ``100 * sum(numerator) / sum(denominator)`` over columns of
    :data:`COLUMNS` (Wilson/Clopper-Pearson interval for one run); otherwise ``formula(values, C)`` derives it
    from the scores listed before it (bootstrap interval; ``support`` is the column whose sources count
    towards :data:`MIN_BOOTSTRAP_SOURCES`). ``undefined`` lists ``(column, why)``: the first column whose sum
    is 0 says why the score is undefined; ``otherwise`` covers a formula's own NaN. ``leaderboard`` /
    ``compared`` / ``per_class`` say where it is shown (leaderboard rows, pairwise differences, per-class
    tables); ``summary`` is its note in a run's printed summary (``{k}``, ``{n}`` and the counts of
    :class:`~genEval.scores.run_scores.Scores` may appear in it; None: the summary leaves the score out)."""

    key: str
    label: str
    numerator: str = ""
    denominator: str = ""
    formula: Callable[[Mapping[str, np.ndarray], int], np.ndarray] | None = None
    undefined: tuple[tuple[str, Why], ...] = ()
    otherwise: Why = ""
    short: str = ""
    support: str = "n"
    leaderboard: bool = True
    compared: bool = True
    per_class: bool = True
    summary: str | None = "{k}/{n}"

    @property
    def is_proportion(self) -> bool:
        return self.formula is None

    def why_undefined(self, totals: np.ndarray, context: Mapping | None = None) -> str:
        """The reason this score is undefined for column sums ``totals`` (one run)."""
        ctx = dict(context or {})
        for col, why in self.undefined:
            if totals[COLUMN[col]] == 0:
                return why(totals, ctx) if callable(why) else why
        return self.otherwise(totals, ctx) if callable(self.otherwise) else self.otherwise


def no_validated_reason(totals: np.ndarray, context: Mapping) -> str:
    """Why no sample was validated, told apart from the records' column sums (docs/scores.md): nothing passed the
    start check, the budget was 0 (no step taken), or the oracle rejected every first step."""
    start_ok, rejected = int(totals[COLUMN["start_ok"]]), int(totals[COLUMN["rejected"]])
    if totals[COLUMN["n"]] == 0:
        return "no samples"
    if start_ok == 0:
        return "no validated sample: no sample passed the start check (the oracle rejected every reconstruction)"
    if context.get("budget") == 0:
        return "no validated sample: search.budget is 0, so no step was taken"
    if rejected >= start_ok:
        return (
            f"no validated sample: the oracle rejected the first step of every one of the {start_ok} samples "
            "that passed the start check (lower search.step_size)"
        )
    if rejected == 0:
        return "no validated sample: no step was taken (search.budget 0)"
    return "no validated sample: no step was accepted"


def _pa_undefined(totals: np.ndarray, context: Mapping) -> str:
    return "PA is undefined: " + no_validated_reason(totals, context)


def _below_chance(totals: np.ndarray, context: Mapping) -> str:
    c = context.get("num_classes")
    n = totals[COLUMN["n"]]
    sa = 100.0 * totals[COLUMN["clean"]] / n if n else float("nan")
    chance = f"100/C = {100.0 / c:.2f}" if c else "100/C"
    return f"SA ({sa:.2f}) is at or below chance ({chance}): the chance-corrected ratio is undefined there"


def _no_start(what: str) -> Why:
    return f"no sample passed the start check, so {what} is undefined"


SCORES: tuple[Score, ...] = (
    Score("sa", "SA", "clean", "n", undefined=(("n", "no samples for SA"),)),
    Score(
        "ra",
        "RA",
        "recon",
        "n",
        undefined=(("n", "no samples for RA"),),
        compared=False,
        summary="{k}/{n}: accuracy on reconstructions",
    ),
    Score(
        "vr",
        "VR",
        "validated",
        "n",
        undefined=(("n", "no samples for VR"),),
        summary="{k}/{n} validated, {n_validatable} passed the start check",
    ),
    Score(
        "pa",
        "PA",
        "perturbed_correct",
        "validated",
        undefined=(("n", "no samples for PA"), ("validated", no_validated_reason)),
    ),
    Score(
        "fmr",
        "FMR",
        formula=lambda v, c: fmr_formula(v["sa"], v["pa"]),
        support="validated",
        undefined=(("n", "no samples"), ("validated", _pa_undefined)),
        otherwise="SA is 0",
        summary="100 PA / SA, the paper's FMR",
    ),
    Score(
        "fmr_chance_corrected",
        "FMR chance-corrected",
        short="FMR cc",
        support="validated",
        formula=lambda v, c: chance_corrected_formula(v["sa"], v["pa"], c),
        undefined=(("n", "no samples"), ("validated", _pa_undefined)),
        otherwise=_below_chance,
        per_class=False,
        summary="",
    ),
    Score(
        "oracle_start_accuracy",
        "oracle start check",
        "start_ok",
        "n",
        undefined=(("n", "no samples for oracle start check"),),
        leaderboard=False,
        compared=False,
        per_class=False,
        summary=None,
    ),
    Score(
        "sa_validated",
        "SA_v",
        "clean_validated",
        "validated",
        undefined=(("n", "no samples"), ("validated", no_validated_reason)),
        summary="{k}/{n}: SA over the validated samples",
    ),
    Score(
        "fmr_validated",
        "FMR_v",
        formula=lambda v, c: fmr_formula(v["sa_validated"], v["pa"]),
        support="validated",
        undefined=(("n", "no samples"), ("validated", _pa_undefined)),
        otherwise="SA_v is 0 (the model is wrong on every validated clean image)",
        summary="100 PA / SA_v: both over the validated samples",
    ),
    Score(
        "vr_conditional",
        "VR_cond",
        "validated",
        "start_ok",
        undefined=(("n", "no samples"), ("start_ok", _no_start("VR_cond"))),
        compared=False,
        summary="{k}/{n}: validated / passed the start check",
    ),
    Score(
        "oracle_clean_accuracy",
        "oracle clean acc.",
        "oracle_clean",
        "n",
        short="oracle clean",
        undefined=(("n", "no samples"),),
        compared=False,
        summary="{k}/{n}: the oracle's own verdict on the clean images",
    ),
    Score(
        "oracle_recon_accuracy",
        "oracle recon. acc.",
        "oracle_recon",
        "n",
        short="oracle recon",
        undefined=(("n", "no samples"),),
        compared=False,
        summary="{k}/{n}: its verdict on the start reconstructions",
    ),
    Score(
        "unchanged_share",
        "unchanged",
        "unchanged",
        "validated",
        undefined=(("n", "no samples"), ("validated", no_validated_reason)),
        compared=False,
        per_class=False,
        summary="{k}/{n} validated samples moved < 1/255 L-inf",
    ),
)
SCORE = {s.key: s for s in SCORES}
LEADERBOARD_SCORES = tuple(s.key for s in SCORES if s.leaderboard)
COMPARED_SCORES = tuple(s.key for s in SCORES if s.compared)
PER_CLASS_SCORES = tuple(s.key for s in SCORES if s.per_class)


def score_values(sums: np.ndarray, num_classes: int, keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Every score (percent) from column sums ``sums[..., len(COLUMNS)]``; NaN where a score is undefined.

    Vectorised over the leading axes (bootstrap draws, repetitions). ``keys``: the scores wanted (the ones
    they derive from are computed too).
    """
    sums = np.asarray(sums, dtype=float)
    col = {c: sums[..., i] for i, c in enumerate(COLUMNS)}
    want = set(SCORE) if keys is None else set(keys)
    unknown = want - set(SCORE)
    if unknown:
        raise ValueError(f"unknown score {sorted(unknown)[0]!r}; choose one of {', '.join(SCORE)}.")
    out: dict[str, np.ndarray] = {}
    for s in SCORES:  # in order: a formula only uses scores defined before it
        if s.is_proportion:
            num, den = col[s.numerator], col[s.denominator]
            with np.errstate(divide="ignore", invalid="ignore"):
                out[s.key] = np.where(den > 0, 100.0 * num / np.where(den > 0, den, 1.0), np.nan)
        else:
            out[s.key] = np.asarray(s.formula(out, num_classes), dtype=float)
    return {k: v for k, v in out.items() if k in want}


def finite_or_none(v: float) -> float | None:
    return None if v is None or not np.isfinite(v) else float(v)


def fmr_value(sa: float | None, pa: float | None) -> float | None:
    """FMR (:func:`fmr_formula`) of two percentages; None when either is undefined or SA is 0."""
    return None if sa is None or pa is None else finite_or_none(fmr_formula(sa, pa))
