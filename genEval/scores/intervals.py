"""The statistics of genEval: every score defined once, one clustered bootstrap, rankings and effective robustness.

Scores (paper Sec. 3.3; METHOD.md "Scores"), in percent as in the paper's tables, each defined once in
:data:`SCORES` and computed from per-source column sums of one per-sample shape, :class:`Outcomes`:

* SA  = accuracy of ``f`` on the clean images (all samples).
* RA  = accuracy of ``f`` on the generator's reconstructions ``D(E(x))`` (the generator gap).
* VR  = validated / all samples (paper App. J).
* PA  = accuracy of ``f`` on the perturbed images, over validated samples only (undefined when none).
* FMR = 100 * PA / SA (the paper's headline); chance-corrected FMR = 100 * (PA - 100/C) / (SA - 100/C),
  undefined whenever SA <= 100/C (at or below chance the ratio rewards a useless model).
* oracle start accuracy = share of samples whose reconstruction the oracle accepts (the start check).

SA and PA are over different populations: the start check removes exactly the images the oracle cannot
vouch for, which are often the hard ones, so FMR can exceed 100 and is inflated by a model-specific factor
(issue 10). Scores over the *same* population stand beside it:

* SA_v  (``sa_validated``)  = accuracy of ``f`` on the clean images of the validated samples.
* FMR_v (``fmr_validated``) = 100 * PA / SA_v.
* VR_cond (``vr_conditional``) = validated / samples that passed the start check.
* ``oracle_clean_accuracy`` / ``oracle_recon_accuracy`` = the oracle's own accuracy (its verdict == the true
  label) on the clean images and on the start reconstructions ``D(z_0)``: PA is only as meaningful as the judge.
* ``unchanged_share`` = share of validated samples whose final image moved less than 1/255 (L-inf) from the
  start reconstruction: "validated" must mean "perturbed".

Intervals (95%): a proportion of one run gets Wilson (default) or Clopper-Pearson
(``scipy.stats.binomtest(...).proportion_ci``); a ratio (FMR) and every mean over repetitions get a percentile
bootstrap over *source images* (``../seeds/digest.md`` 5.1: intervals at the level of source images), so all
samples of one source image, in every repetition, move together. The same bootstrap gives the differences
between two models (digest 5.1.9: paired when they share source images, else independent). A bootstrap over
fewer than :data:`MIN_BOOTSTRAP_SOURCES` source images (counted among the sources that carry the score's
denominator, e.g. validated samples for FMR) gives no interval: with one or two sources every resample is the
same few values and the percentile interval collapses to zero width (issue 14), which reads as certainty.

Comparing models: competition ranks ("1224"), Kendall's tau-b (``scipy.stats.kendalltau``; S0, Shi et al.,
NeurIPS 2023, App. A.2), and effective robustness (S0 eq. 1-2, after Taori et al. 2020; digest section 1):
fit ``logit(PA) = w * logit(SA) + b`` over *baseline* models (``scipy.stats.linregress``), then
``ER(f) = PA(f) - expit(w * logit(SA(f)) + b)`` in points. R^2 is computed **in logit space** (the space of the
regression), MAE in points; ER is reported only when R^2 >= ``min_r2`` with >= ``min_baselines`` baselines
(S0 section 8: a fit-quality gate). The rank stability of a comparison is a *distribution*
(:func:`rank_stability`: Kendall tau between the point ranking and the rankings of bootstrap resamples of the
source images), and ER gets a bootstrap interval over the same resamples (:func:`er_intervals`).

Label-free ranking (S1, Tu et al., TMLR 2024; digest section 2): :func:`softmax_corr` is SoftmaxCorr =
cos(P^T P / N, diag(q)) of a model's softmax outputs ``P`` against an estimated class prior ``q``.

Adding a score is one :class:`Score` in :data:`SCORES` (plus a column in :data:`COLUMNS` when it counts
something new): results.json, the bootstrap, the leaderboard, differences and per-class tables follow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np
from scipy import special
from scipy import stats as sps

INTERVALS = {"wilson": "wilson", "clopper-pearson": "exact"}  # our name -> scipy's proportion_ci method

#: Per-sample 0/1 columns summed per source image; every score is a function of their sums.
COLUMNS = (
    "n",
    "clean",
    "recon",
    "start_ok",
    "validated",
    "perturbed_correct",
    "rejected",
    "clean_validated",
    "oracle_clean",
    "oracle_recon",
    "unchanged",
)
_COL = {c: i for i, c in enumerate(COLUMNS)}
#: A validated sample whose final image moved less than this (L-inf, images in [0, 1]) from the start
#: reconstruction counts as unchanged: below one 8-bit grey level, so a saved image would not differ at all.
UNCHANGED_LINF = 1.0 / 255
#: A bootstrap over fewer source images than this (among those carrying the score's denominator) gives no
#: interval: at 1-4 sources the percentile interval is degenerate (zero width or a handful of values).
MIN_BOOTSTRAP_SOURCES = 5


# ------------------------------------------------------------------------------------------ outcomes
@dataclass(frozen=True)
class Outcomes:
    """Per-sample outcomes of one model in one run: the one per-sample shape every score is computed from.

    All fields are arrays of length N (one entry per sample): ``ids`` the source-image id (str; samples of
    one source are resampled together), ``labels`` the true class, and booleans ``clean`` f(x) correct,
    ``recon`` f(D(E(x))) correct, ``start_ok`` the oracle accepted the reconstruction, ``validated`` at least
    one accepted step, ``final`` f correct on the final perturbed image, ``rejected`` the oracle rejected a step,
    ``oracle_clean`` / ``oracle_recon`` the oracle's own verdict on the clean image / on the start
    reconstruction is the true label, ``unchanged`` the final image moved less than :data:`UNCHANGED_LINF`
    (L-inf) from the start reconstruction. ``predictions`` / ``references`` (int, optional): f's class for the
    final image and the class the oracle had to keep seeing (for the label-free diagnostic, :func:`softmax_corr`).
    """

    ids: np.ndarray
    labels: np.ndarray
    clean: np.ndarray
    recon: np.ndarray
    start_ok: np.ndarray
    validated: np.ndarray
    final: np.ndarray
    rejected: np.ndarray
    oracle_clean: np.ndarray
    oracle_recon: np.ndarray
    unchanged: np.ndarray
    predictions: np.ndarray | None = None
    references: np.ndarray | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise the arrays once, here
        set_(self, "ids", np.asarray([str(i) for i in self.ids], dtype=object))
        set_(self, "labels", np.asarray(self.labels, dtype=np.int64).reshape(-1))
        n = len(self.ids)
        for name in _FLAGS:
            set_(self, name, np.asarray(getattr(self, name), dtype=bool).reshape(-1))
        for name in ("predictions", "references"):
            if getattr(self, name) is not None:
                set_(self, name, np.asarray(getattr(self, name), dtype=np.int64).reshape(-1))
        for name in ("labels", *_FLAGS, "predictions", "references"):
            arr = getattr(self, name)
            if arr is not None and len(arr) != n:
                raise ValueError(f"Outcomes.{name} has {len(arr)} entries for {n} source ids.")

    @classmethod
    def from_records(cls, records: Sequence[Mapping]) -> Outcomes:
        """From ``samples.jsonl`` rows (:class:`genEval.rundir.SampleRecord` as dicts)."""
        lacking = [k for k in _RECORD_KEYS if records and k not in records[0]]
        if lacking:
            raise ValueError(
                f"the per-sample records (e.g. source {records[0].get('source_id')!r}) lack "
                f"{', '.join(lacking)}: they were written by an older genEval; rerun the evaluation."
            )
        lab = np.asarray([r["label"] for r in records], dtype=np.int64)

        def col(key: str, dtype: type = np.int64) -> np.ndarray:
            return np.asarray([r[key] for r in records], dtype=dtype)

        return cls(
            ids=[r["source_id"] for r in records],
            labels=lab,
            clean=col("clean_pred") == lab,
            recon=col("recon_pred") == lab,
            start_ok=col("start_ok") != 0,
            validated=col("validated") != 0,
            final=col("final_pred") == lab,
            rejected=col("rejected_at") > 0,
            oracle_clean=col("oracle_clean_pred") == lab,
            oracle_recon=col("oracle_start_pred") == lab,
            unchanged=col("image_linf", float) < UNCHANGED_LINF,
            predictions=col("final_pred"),
            references=col("reference") if all("reference" in r for r in records) else lab,
        )

    def __len__(self) -> int:
        return len(self.ids)

    def subset(self, mask: np.ndarray) -> Outcomes:
        """The samples where ``mask`` is True."""
        return Outcomes(
            **{f.name: None if getattr(self, f.name) is None else getattr(self, f.name)[mask] for f in fields(self)}
        )

    def columns(self) -> np.ndarray:
        """(N, len(COLUMNS)) float 0/1 columns, in the order of :data:`COLUMNS`."""
        v = self.validated
        cols = (
            np.ones(len(self), bool),
            self.clean,
            self.recon,
            self.start_ok,
            v,
            v & self.final,
            self.rejected,
            v & self.clean,
            self.oracle_clean,
            self.oracle_recon,
            v & self.unchanged,
        )
        return np.stack(cols, axis=1).astype(float)

    def totals(self, mask: np.ndarray | None = None) -> np.ndarray:
        """(len(COLUMNS),) column sums over all samples (or those where ``mask`` is True)."""
        cols = self.columns()
        return (cols if mask is None else cols[mask]).sum(0)


_FLAGS = ("clean", "recon", "start_ok", "validated", "final", "rejected", "oracle_clean", "oracle_recon", "unchanged")
_RECORD_KEYS = (
    "source_id",
    "label",
    "clean_pred",
    "recon_pred",
    "start_ok",
    "validated",
    "final_pred",
    "rejected_at",
    "oracle_clean_pred",
    "oracle_start_pred",
    "image_linf",
)


# ------------------------------------------------------------------------------------------ scores
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
    tables)."""

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

    @property
    def is_proportion(self) -> bool:
        return self.formula is None

    def why_undefined(self, totals: np.ndarray, context: Mapping | None = None) -> str:
        """The reason this score is undefined for column sums ``totals`` (one run)."""
        ctx = dict(context or {})
        for col, why in self.undefined:
            if totals[_COL[col]] == 0:
                return why(totals, ctx) if callable(why) else why
        return self.otherwise(totals, ctx) if callable(self.otherwise) else self.otherwise


def no_validated_reason(totals: np.ndarray, context: Mapping) -> str:
    """Why no sample was validated, told apart from the records' column sums (issue 14): nothing passed the
    start check, the budget was 0 (no step taken), or the oracle rejected every first step."""
    start_ok, rejected = int(totals[_COL["start_ok"]]), int(totals[_COL["rejected"]])
    if totals[_COL["n"]] == 0:
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
    n = totals[_COL["n"]]
    sa = 100.0 * totals[_COL["clean"]] / n if n else float("nan")
    chance = f"100/C = {100.0 / c:.2f}" if c else "100/C"
    return f"SA ({sa:.2f}) is at or below chance ({chance}): the chance-corrected ratio is undefined there"


def _no_start(what: str) -> Why:
    return f"no sample passed the start check, so {what} is undefined"


SCORES: tuple[Score, ...] = (
    Score("sa", "SA", "clean", "n", undefined=(("n", "no samples for SA"),)),
    Score("ra", "RA", "recon", "n", undefined=(("n", "no samples for RA"),), compared=False),
    Score("vr", "VR", "validated", "n", undefined=(("n", "no samples for VR"),)),
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
    ),
    Score(
        "sa_validated",
        "SA_v",
        "clean_validated",
        "validated",
        undefined=(("n", "no samples"), ("validated", no_validated_reason)),
    ),
    Score(
        "fmr_validated",
        "FMR_v",
        formula=lambda v, c: fmr_formula(v["sa_validated"], v["pa"]),
        support="validated",
        undefined=(("n", "no samples"), ("validated", _pa_undefined)),
        otherwise="SA_v is 0 (the model is wrong on every validated clean image)",
    ),
    Score(
        "vr_conditional",
        "VR_cond",
        "validated",
        "start_ok",
        undefined=(("n", "no samples"), ("start_ok", _no_start("VR_cond"))),
        compared=False,
    ),
    Score(
        "oracle_clean_accuracy",
        "oracle clean acc.",
        "oracle_clean",
        "n",
        short="oracle clean",
        undefined=(("n", "no samples"),),
        compared=False,
    ),
    Score(
        "oracle_recon_accuracy",
        "oracle recon. acc.",
        "oracle_recon",
        "n",
        short="oracle recon",
        undefined=(("n", "no samples"),),
        compared=False,
    ),
    Score(
        "unchanged_share",
        "unchanged",
        "unchanged",
        "validated",
        undefined=(("n", "no samples"), ("validated", no_validated_reason)),
        compared=False,
        per_class=False,
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


def _number(v: float) -> float | None:
    return None if v is None or not np.isfinite(v) else float(v)


def fmr_value(sa: float | None, pa: float | None) -> float | None:
    """FMR (:func:`fmr_formula`) of two percentages; None when either is undefined or SA is 0."""
    return None if sa is None or pa is None else _number(fmr_formula(sa, pa))


# ------------------------------------------------------------------------------------------ estimates
@dataclass(frozen=True)
class Estimate:
    """A score in percent with its 95% interval; ``value`` is None when undefined (``reason`` says why)."""

    value: float | None
    low: float | None
    high: float | None
    n: int
    k: int | None = None
    method: str = ""
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def fmt(self, digits: int = 2) -> str:
        return format_estimate(self, digits, with_reason=True)


def format_estimate(e, digits: int = 2, with_reason: bool = False) -> str:
    """``"value [low, high]"`` for an :class:`Estimate` or its dict form (results.json); ``undefined`` without
    a value. ``with_reason`` adds why a value or an interval is missing."""
    get = e.get if isinstance(e, Mapping) else (lambda key: getattr(e, key, None))
    value, low, high = get("value"), get("low"), get("high")
    if value is None:
        return f"undefined ({get('reason')})" if with_reason else "undefined"
    if low is None or high is None:
        why = get("reason")
        return f"{value:.{digits}f} (no interval: {why})" if with_reason and why else f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def proportion(k: int, n: int, method: str = "wilson", level: float = 0.95, what: str = "") -> Estimate:
    """Percentage ``100*k/n`` with a Wilson score or exact Clopper-Pearson interval (scipy's binomtest)."""
    if method not in INTERVALS:
        raise ValueError(f"unknown interval method {method!r}; choose one of {', '.join(INTERVALS)}.")
    if n == 0:
        return Estimate(None, None, None, 0, 0, method, f"no samples{(' for ' + what) if what else ''}")
    ci = sps.binomtest(int(k), int(n)).proportion_ci(confidence_level=level, method=INTERVALS[method])
    return Estimate(100.0 * k / n, 100.0 * ci.low, 100.0 * ci.high, int(n), int(k), method)


# ------------------------------------------------------------------------------------------ the bootstrap
def source_index(id_arrays: Sequence[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """Each sample's index among the union of source ids (sorted), per array, and the number of sources."""
    allids = np.concatenate([np.asarray(a, dtype=str) for a in id_arrays]) if id_arrays else np.array([], str)
    _, inv = np.unique(allids, return_inverse=True)
    bounds = np.cumsum([0, *(len(a) for a in id_arrays)])
    return [inv[bounds[i] : bounds[i + 1]] for i in range(len(id_arrays))], int(inv.max() + 1 if len(inv) else 0)


def source_sums(reps: Sequence[Outcomes]) -> np.ndarray:
    """(R, G, len(COLUMNS)) column sums per repetition and source image (sources: the union over ``reps``)."""
    index, g = source_index([o.ids for o in reps])
    out = np.zeros((len(reps), g, len(COLUMNS)))
    for r, (o, inv) in enumerate(zip(reps, index)):
        np.add.at(out[r], inv, o.columns())
    return out


def _resample_counts(g: int, n_boot: int, rng: np.random.Generator, chunk: int = 256) -> Iterator[np.ndarray]:
    """How often each of ``g`` sources is drawn, (chunk, g) resamples at a time (memory stays small)."""
    done = 0
    while done < n_boot:
        m = min(chunk, n_boot - done)
        yield rng.multinomial(g, np.full(g, 1.0 / g), size=m).astype(float)
        done += m


def bootstrap(
    sums: Sequence[np.ndarray], statistic: Callable[..., np.ndarray], n_boot: int, rng: np.random.Generator
) -> np.ndarray:
    """The clustered bootstrap over source images, the one used for every interval here.

    ``sums``: arrays (R, G, K) of per-source column sums over the *same* G sources; one resample of the
    sources drives all of them (paired). ``statistic(*resampled)`` maps arrays (B, R, K) to (B, S).
    Returns the (n_boot, S) draws.
    """
    g = sums[0].shape[1]
    draws = [
        statistic(*(np.einsum("bg,rgk->brk", counts, s) for s in sums)) for counts in _resample_counts(g, n_boot, rng)
    ]
    return np.concatenate(draws)


def _mean_over_reps(per_rep: np.ndarray) -> np.ndarray:
    """nan-aware mean over the last axis (repetitions); NaN where every repetition is undefined."""
    ok = ~np.isnan(per_rep)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ok.any(-1), np.where(ok, per_rep, 0.0).sum(-1) / np.maximum(ok.sum(-1), 1), np.nan)


def _rep_mean(keys: Sequence[str], num_classes: int) -> Callable[[np.ndarray], np.ndarray]:
    """statistic (B, R, K) -> (B, len(keys)): each score per repetition, averaged over repetitions."""

    def stat(s: np.ndarray) -> np.ndarray:
        vals = score_values(s, num_classes, keys)
        return np.stack([_mean_over_reps(vals[k]) for k in keys], axis=-1)

    return stat


def _percentile(draws: np.ndarray, level: float) -> tuple[float | None, float | None]:
    d = draws[~np.isnan(draws)]
    if len(d) == 0:
        return None, None
    a = (1 - level) / 2
    return float(np.quantile(d, a)), float(np.quantile(d, 1 - a))


def support_sources(sums: np.ndarray, column: str) -> int:
    """How many source images carry ``column`` (sum > 0 in some repetition); ``sums`` is (R, G, K)."""
    return int((sums[..., _COL[column]].sum(0) > 0).sum()) if sums.size else 0


def few_sources(n_sources: int, what: str = "source images") -> str:
    """The reason a bootstrap interval is not given: fewer than :data:`MIN_BOOTSTRAP_SOURCES` sources."""
    return (
        f"only {n_sources} {what} (< {MIN_BOOTSTRAP_SOURCES}): a bootstrap over so few is degenerate, so no "
        "interval is given"
    )


def bootstrap_scores(
    reps: Sequence[Outcomes],
    num_classes: int,
    keys: Sequence[str] = LEADERBOARD_SCORES,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    context: Mapping | None = None,
) -> dict[str, Estimate]:
    """Each score as the mean over repetitions, with a percentile interval from a bootstrap over source images.

    A source image's samples in *all* repetitions move together (they share the image), and each resample
    recomputes every repetition's score before averaging. One repetition: the run's bootstrap. A score whose
    denominator is carried by fewer than :data:`MIN_BOOTSTRAP_SOURCES` sources gets no interval (``reason``
    says so). ``context``: ``{"budget": ...}`` for the reasons of undefined scores.
    """
    if not reps:
        raise ValueError("bootstrap_scores needs at least one repetition.")
    sums = source_sums(reps)
    g = sums.shape[1]
    stat = _rep_mean(keys, num_classes)
    point = stat(sums.sum(1)[None])[0]
    draws = bootstrap([sums], stat, n_boot, np.random.default_rng(seed)) if g else np.full((0, len(keys)), np.nan)
    n = int(sum(len(o) for o in reps))
    single = len(reps) == 1
    how = (
        f"bootstrap({n_boot}, source images)"
        if single
        else f"mean of {len(reps)} repetitions, bootstrap({n_boot}, {g} source images)"
    )
    ctx = {"num_classes": num_classes, **(context or {})}
    out = {}
    for i, k in enumerate(keys):
        support = support_sources(sums, SCORE[k].support)
        if np.isnan(point[i]):
            why = (
                SCORE[k].why_undefined(sums[0].sum(0), ctx)
                if single
                else f"{SCORE[k].label} is undefined in every repetition"
            )
            out[k] = Estimate(None, None, None, n, None, "bootstrap", why)
        elif support < MIN_BOOTSTRAP_SOURCES:
            what = "source images" if SCORE[k].support == "n" else f"source images with a {SCORE[k].support} sample"
            out[k] = Estimate(float(point[i]), None, None, n, None, how, few_sources(support, what))
        else:
            out[k] = Estimate(float(point[i]), *_percentile(draws[:, i], level), n, None, how)
    return out


# ------------------------------------------------------------------------------------------ one run
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


def compute_scores(
    outcomes: Outcomes,
    num_classes: int,
    *,
    interval: str = "wilson",
    n_boot: int = 1000,
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
            k, n = int(totals[_COL[s.numerator]]), int(totals[_COL[s.denominator]])
            e = proportion(k, n, interval, level)
            estimates[s.key] = e if n else Estimate(None, None, None, 0, 0, interval, s.why_undefined(totals, ctx))
        else:
            estimates[s.key] = boot[s.key]
    count = {c: int(totals[_COL[c]]) for c in COLUMNS}
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
        n = int(totals[_COL["n"]])
        if n == 0:
            continue
        vals = score_values(totals, num_classes, PER_CLASS_SCORES)
        row: dict[str, Any] = {"class": c, "name": name, "n": n}
        for k in PER_CLASS_SCORES:
            row[k] = _number(vals[k])
            if SCORE[k].is_proportion:
                e = proportion(
                    int(totals[_COL[SCORE[k].numerator]]), int(totals[_COL[SCORE[k].denominator]]), interval, level
                )
                row.update({f"{k}_low": e.low, f"{k}_high": e.high})
        rows.append({**row, "n_validated": int(totals[_COL["validated"]])})
    return rows


def score_warnings(
    scores: Scores, *, oracle_warn_accuracy: float | None = 70.0, search: Mapping | None = None
) -> list[str]:
    """Warnings that the scores of one run are less meaningful than they look (issue 10):

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


# ------------------------------------------------------------------------------------------ differences
@dataclass(frozen=True)
class Difference:
    """``value = score(a) - score(b)`` in points with a percentile bootstrap interval over source images."""

    metric: str
    a: str
    b: str
    value: float | None
    low: float | None
    high: float | None
    paired: bool
    n_sources: int
    method: str
    reason: str = ""
    a_value: float | None = None
    b_value: float | None = None

    @property
    def excludes_zero(self) -> bool:
        """True when the 95% interval lies entirely on one side of 0 (the two models are separated)."""
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)

    def to_dict(self) -> dict:
        return {**asdict(self), "excludes_zero": self.excludes_zero}

    @classmethod
    def from_dict(cls, d: Mapping) -> Difference:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def _restrict(o: Outcomes, keep: set[str]) -> Outcomes:
    """The samples of ``o`` whose source id is in ``keep``."""
    return o.subset(np.isin(o.ids.astype(str), np.asarray(sorted(keep), dtype=str)))


def metric_differences(
    a_reps: Sequence[Outcomes],
    b_reps: Sequence[Outcomes],
    num_classes: int,
    metrics: Sequence[str] = COMPARED_SCORES,
    *,
    names: tuple[str, str] = ("a", "b"),
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    paired: bool | None = None,
) -> dict[str, Difference]:
    """Differences (a - b, points) of scores averaged over repetitions, with 95% bootstrap intervals.

    Repetition r of ``a`` is paired with repetition r of ``b`` (in a comparison they saw the same draw of
    sources). Paired (default when every such pair shares source ids): one resample of the union of the shared
    sources drives both models in every repetition; samples whose source the paired repetition of the other
    model lacks are dropped. Independent (no shared sources, or ``paired=False``): separate resamples. Fewer
    than :data:`MIN_BOOTSTRAP_SOURCES` sources carrying a score's denominator: no interval.
    """
    if len(a_reps) == 0 or len(b_reps) == 0:
        raise ValueError(
            f"metric_differences needs at least one repetition per model ({names[0]}: "
            f"{len(a_reps)}, {names[1]}: {len(b_reps)})."
        )
    r = min(len(a_reps), len(b_reps))
    a_reps, b_reps = list(a_reps[:r]), list(b_reps[:r])
    shared = [set(a.ids.astype(str)) & set(b.ids.astype(str)) for a, b in zip(a_reps, b_reps)]
    do_pair = all(shared) if paired is None else paired
    if do_pair and not all(shared):
        raise ValueError(
            f"paired difference of {names[0]} and {names[1]}: they share no source ids (in at least "
            "one repetition); use paired=False (independent bootstrap)."
        )
    stat = _rep_mean(metrics, num_classes)
    if do_pair:
        both = source_sums(
            [_restrict(a, k) for a, k in zip(a_reps, shared)] + [_restrict(b, k) for b, k in zip(b_reps, shared)]
        )
        sa, sb = both[:r], both[r:]
        draws = bootstrap([sa, sb], lambda xa, xb: stat(xa) - stat(xb), n_boot, np.random.default_rng(seed))
        n_src = len(set().union(*shared))
        how = f"paired bootstrap({n_boot}) over {n_src} shared source images"
    else:
        sa, sb = source_sums(a_reps), source_sums(b_reps)
        draws = bootstrap([sa], stat, n_boot, np.random.default_rng(seed)) - bootstrap(
            [sb], stat, n_boot, np.random.default_rng([seed, 1])
        )
        how = f"independent bootstrap({n_boot}) over {sa.shape[1]} and {sb.shape[1]} source images"
        n_src = sa.shape[1] + sb.shape[1]
    va, vb = stat(sa.sum(1)[None])[0], stat(sb.sum(1)[None])[0]
    out = {}
    for i, m in enumerate(metrics):
        if np.isnan(va[i]) or np.isnan(vb[i]):
            who = names[0] if np.isnan(va[i]) else names[1]
            out[m] = Difference(
                m, *names, None, None, None, do_pair, n_src, how, reason=f"{SCORE[m].label} undefined for {who}"
            )
            continue
        support = min(support_sources(sa, SCORE[m].support), support_sources(sb, SCORE[m].support))
        if support < MIN_BOOTSTRAP_SOURCES:
            lo, hi, why = None, None, few_sources(support)
        else:
            lo, hi = _percentile(draws[:, i], level)
            why = "" if lo is not None else "the score is undefined in every bootstrap resample"
        out[m] = Difference(
            m,
            *names,
            float(va[i] - vb[i]),
            lo,
            hi,
            do_pair,
            n_src,
            how,
            reason=why,
            a_value=float(va[i]),
            b_value=float(vb[i]),
        )
    return out


# ------------------------------------------------------------------------------------------ ranks
def rank(values: Sequence[float | None], descending: bool = True) -> list[int | None]:
    """Competition ranks (1 = best; ties share the smallest rank, "1224"); None values get rank None.

    >>> rank([90.0, 80.0, 90.0, None])
    [1, 3, 1, None]
    """
    vals = [None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in values]
    present = [v for v in vals if v is not None]
    if not present:
        return [None] * len(vals)
    key = -np.asarray(present) if descending else np.asarray(present)
    ranks = iter(sps.rankdata(key, method="min").astype(int).tolist())
    return [None if v is None else next(ranks) for v in vals]


def kendall_tau(rank_a: Sequence[float], rank_b: Sequence[float]) -> float | None:
    """Kendall's tau-b between two rankings (or score lists) of the same items, in [-1, 1].

    None when it is undefined: fewer than two items, or one side constant (all tied).
    """
    a, b = np.asarray(rank_a, dtype=float), np.asarray(rank_b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"kendall_tau needs two rankings of the same items, got lengths {len(a)} and {len(b)}.")
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    tau = float(sps.kendalltau(a, b, variant="b").statistic)
    return None if math.isnan(tau) else tau


# ------------------------------------------------------------------------------------------ effective robustness
@dataclass(frozen=True)
class ERFit:
    """The baseline fit ``logit(PA) = w*logit(SA) + b`` and the effective robustness of every model.

    ``r2`` is the coefficient of determination in **logit** space over the baselines; ``mae`` the mean
    absolute error in accuracy **points** over the baselines. ``er`` (points) is None for every model when
    the fit is not ``trusted``; ``er_untrusted`` keeps the values for inspection (never for ranking).
    ``er_low`` / ``er_high``: the bootstrap interval of each model's ER (:func:`er_intervals`; empty until
    computed, None where unavailable), ``interval`` how it was made. Lists are per model, in the order the
    models were given.
    """

    w: float | None
    b: float | None
    r2: float | None
    mae: float | None
    n_baselines: int
    baselines: list[bool]
    predicted: list[float | None]
    er: list[float | None]
    er_untrusted: list[float | None]
    trusted: bool
    min_r2: float
    min_baselines: int
    clip: float
    space: str = "logit"
    reason: str = ""
    er_low: list[float | None] = field(default_factory=list)
    er_high: list[float | None] = field(default_factory=list)
    interval: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def unfitted(
        cls,
        n: int,
        reason: str,
        baselines: Sequence[bool] | None = None,
        *,
        min_r2: float = 0.8,
        min_baselines: int = 3,
        clip: float = 1e-3,
    ) -> ERFit:
        """No line: every model's ER is None and ``reason`` says why."""
        none = [None] * n
        base = [False] * n if baselines is None else [bool(b) for b in baselines]
        return cls(
            None,
            None,
            None,
            None,
            n_baselines=sum(base),
            baselines=base,
            predicted=none,
            er=none,
            er_untrusted=none,
            trusted=False,
            min_r2=min_r2,
            min_baselines=min_baselines,
            clip=clip,
            reason=reason,
        )

    @classmethod
    def from_dict(cls, d: Mapping) -> ERFit:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def curve(self, sa: np.ndarray) -> np.ndarray:
        """Predicted PA (percent) for clean accuracies ``sa`` (percent) on the fitted line."""
        if self.w is None or self.b is None:
            raise ValueError("no baseline fit to evaluate; see ERFit.reason.")
        x = np.clip(np.asarray(sa, dtype=float) / 100.0, self.clip, 1 - self.clip)
        return 100.0 * special.expit(self.w * special.logit(x) + self.b)


def fit_effective_robustness(
    sa: Sequence[float | None],
    pa: Sequence[float | None],
    baseline_mask: Sequence[bool] | None = None,
    *,
    min_r2: float = 0.8,
    min_baselines: int = 3,
    clip: float = 1e-3,
) -> ERFit:
    """Fit the baseline trend over the models where ``baseline_mask`` is True (default: all) and return ER.

    ``sa``, ``pa``: accuracies in percent per model (None = undefined, left out of the fit, ER None).
    Accuracies are turned into fractions and clipped to ``[clip, 1 - clip]`` before the logit, so 0% and
    100% stay finite. ``trusted`` = R^2 (logit space) >= ``min_r2`` and >= ``min_baselines`` baselines.
    """
    if not 0.0 < clip < 0.5:
        raise ValueError(f"clip={clip} must lie in (0, 0.5): accuracies are clipped to [clip, 1-clip].")
    if not 0.0 <= min_r2 <= 1.0:
        raise ValueError(f"er_min_r2={min_r2} must lie in [0, 1] (an R^2 threshold; S0 suggests a high one).")
    n = len(sa)
    if len(pa) != n:
        raise ValueError(f"fit_effective_robustness got {n} SA values but {len(pa)} PA values.")
    mask = [True] * n if baseline_mask is None else [bool(m) for m in baseline_mask]
    if len(mask) != n:
        raise ValueError(f"baseline_mask has {len(mask)} entries for {n} models.")
    defined = np.asarray([s is not None and p is not None for s, p in zip(sa, pa)], dtype=bool)
    sel = np.asarray(mask, dtype=bool) & defined
    k = int(sel.sum())
    common = dict(n_baselines=k, baselines=mask, min_r2=min_r2, min_baselines=min_baselines, clip=clip)
    if k < 2:
        return ERFit.unfitted(
            n,
            f"{k} baseline model(s) with defined SA and PA; a line needs at least 2 "
            f"(and {min_baselines} to be trusted).",
            mask,
            min_r2=min_r2,
            min_baselines=min_baselines,
            clip=clip,
        )
    sa_arr, pa_arr = (np.asarray([np.nan if v is None else v for v in vals], dtype=float) for vals in (sa, pa))
    x, y = (special.logit(np.clip(np.nan_to_num(v) / 100.0, clip, 1 - clip)) for v in (sa_arr, pa_arr))
    if np.ptp(x[sel]) < 1e-12:
        return ERFit.unfitted(
            n,
            "all baselines have the same SA, so the slope of the line is undefined.",
            mask,
            min_r2=min_r2,
            min_baselines=min_baselines,
            clip=clip,
        )
    line = sps.linregress(x[sel], y[sel])
    w, b = float(line.slope), float(line.intercept)
    constant = float(((y[sel] - y[sel].mean()) ** 2).sum()) < 1e-24
    r2 = None if constant else float(line.rvalue) ** 2
    pred = 100.0 * special.expit(w * x + b)
    mae = float(np.mean(np.abs(pa_arr[sel] - pred[sel])))
    raw = [float(pa_arr[i] - pred[i]) if defined[i] else None for i in range(n)]
    reasons = []
    if r2 is None:
        reasons.append("PA is identical across the baselines, so R^2 is undefined")
    elif r2 < min_r2:
        reasons.append(f"R^2 = {r2:.3f} (logit space) is below the threshold {min_r2}")
    if k < min_baselines:
        reasons.append(f"only {k} baselines (need {min_baselines})")
    trusted = not reasons
    return ERFit(
        w,
        b,
        r2,
        mae,
        predicted=[float(p) if d else None for p, d in zip(pred, defined)],
        er=raw if trusted else [None] * n,
        er_untrusted=raw,
        trusted=trusted,
        reason="" if trusted else "ER not reported: " + "; ".join(reasons) + ".",
        **common,
    )


def er_intervals(fit: ERFit, sa_draws: np.ndarray, pa_draws: np.ndarray, level: float = 0.95, how: str = "") -> ERFit:
    """``fit`` with a bootstrap interval for every model's ER: the line is refitted on the baselines of each
    draw and ER recomputed. ``sa_draws`` / ``pa_draws``: (B, M) accuracies in percent (NaN = undefined in that
    draw) from one shared resample of the source images per draw (:func:`model_draws`), models in the order
    of ``fit``. Only a trusted fit gets intervals (an untrusted ER is not reported, nor is its interval)."""
    n = len(fit.baselines)
    if not fit.trusted:
        return replace(fit, er_low=[None] * n, er_high=[None] * n, interval="")
    base = np.asarray(fit.baselines, dtype=bool)
    x, y = (special.logit(np.clip(d / 100.0, fit.clip, 1 - fit.clip)) for d in (sa_draws, pa_draws))
    er = np.full(sa_draws.shape, np.nan)
    for i in range(len(sa_draws)):
        ok = base & np.isfinite(x[i]) & np.isfinite(y[i])
        if ok.sum() < 2 or np.ptp(x[i, ok]) < 1e-12:
            continue
        w, b = np.polyfit(x[i, ok], y[i, ok], 1)
        er[i] = pa_draws[i] - 100.0 * special.expit(w * x[i] + b)
    bounds = [_percentile(er[:, j], level) if fit.er[j] is not None else (None, None) for j in range(n)]
    return replace(
        fit,
        er_low=[lo for lo, _ in bounds],
        er_high=[hi for _, hi in bounds],
        interval=how or f"bootstrap({len(sa_draws)}) over source images, line refitted per resample",
    )


# ------------------------------------------------------------------------------------------ joint bootstrap of models
def model_draws(
    model_reps: Sequence[Sequence[Outcomes]], num_classes: int, keys: Sequence[str], n_boot: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, int]:
    """Scores of several models on *shared* bootstrap resamples of the source images.

    ``model_reps``: per model its repetitions. Every resample of the union of all source ids drives every
    model and repetition at once (models that saw the same sources stay paired, as in a comparison where all
    models of one repetition share one draw). Returns the point values (M, S), the draws (n_boot, M, S)
    (each score averaged over a model's repetitions; NaN = undefined) and the number of sources.
    """
    flat = [o for reps in model_reps for o in reps]
    if not flat:
        raise ValueError("model_draws needs at least one model with one repetition.")
    bounds = np.cumsum([0, *(len(r) for r in model_reps)])
    sums = source_sums(flat)
    per = _rep_mean(keys, num_classes)

    def stat(s: np.ndarray) -> np.ndarray:
        return np.stack([per(s[:, bounds[m] : bounds[m + 1]]) for m in range(len(model_reps))], axis=1)

    point = stat(sums.sum(1)[None])[0]
    g = sums.shape[1]
    draws = (
        bootstrap([sums], stat, n_boot, np.random.default_rng(seed))
        if g
        else np.full((0, len(model_reps), len(keys)), np.nan)
    )
    return point, draws, g


@dataclass(frozen=True)
class TauDistribution:
    """How stable a ranking is under resampling of the source images: Kendall tau-b between the point ranking
    and the ranking of each bootstrap resample (1 = the same order in every resample). ``low``/``high`` are
    the ``level`` quantiles of the draws, ``share_identical`` the share of draws that keep the exact order;
    ``n_defined`` draws had a defined tau. All None (with ``reason``) when it cannot be computed."""

    score: str
    mean: float | None
    median: float | None
    low: float | None
    high: float | None
    share_identical: float | None
    n_boot: int
    n_defined: int
    n_models: int
    n_sources: int
    level: float = 0.95
    method: str = ""
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> TauDistribution:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def describe(self) -> str:
        if self.mean is None:
            return f"rank stability under resampling of sources: {self.reason}"
        label = SCORE[self.score].label if self.score in SCORE else self.score
        return (
            f"rank stability under resampling of sources ({self.method}): Kendall tau between the {label} "
            f"ranking and resampled rankings mean {self.mean:.3f}, median {self.median:.3f}, "
            f"{100 * self.level:g}% of resamples in [{self.low:.3f}, {self.high:.3f}], same order in "
            f"{100 * self.share_identical:.1f}% of resamples"
        )


def rank_stability(
    point: np.ndarray, draws: np.ndarray, *, score: str = "fmr", n_sources: int, level: float = 0.95
) -> TauDistribution:
    """The distribution of Kendall tau-b between the point values ``point`` (M,) of M models and each of the
    bootstrap draws ``draws`` (B, M) (from :func:`model_draws`); models undefined in a draw are left out of it.
    """
    m, b = len(point), len(draws)
    common = dict(score=score, n_boot=b, n_models=m, n_sources=n_sources, level=level)
    empty = dict(mean=None, median=None, low=None, high=None, share_identical=None, n_defined=0, **common)
    if m < 2:
        return TauDistribution(reason="needs at least 2 models", **empty)
    if n_sources < MIN_BOOTSTRAP_SOURCES:
        return TauDistribution(reason=few_sources(n_sources), **empty)
    taus = []
    for d in draws:
        ok = np.isfinite(point) & np.isfinite(d)
        t = kendall_tau(point[ok], d[ok]) if ok.sum() >= 2 else None
        if t is not None:
            taus.append(t)
    if not taus:
        return TauDistribution(
            reason=f"tau is undefined in every resample (fewer than 2 models with {score} defined, or all tied)",
            **empty,
        )
    t = np.asarray(taus)
    lo, hi = _percentile(t, level)
    return TauDistribution(
        mean=float(t.mean()),
        median=float(np.median(t)),
        low=lo,
        high=hi,
        share_identical=float(np.mean(t > 1 - 1e-12)),
        n_defined=len(t),
        method=f"bootstrap({b}) over {n_sources} source images",
        **common,
    )


# ------------------------------------------------------------------------------------------ label-free ranking
def softmax_corr(probs: np.ndarray, prior: np.ndarray) -> float | None:
    """SoftmaxCorr (S1, Tu et al. 2024, Sec. 4.3): cos(C, diag(q)) with C = P^T P / N.

    ``probs``: (N, K) softmax outputs of a model (rows on the simplex); ``prior``: (K,) the estimated class
    marginal q (S1: the average softmax of a zero-shot VLM on the same images). Equals
    ``sum_k C_kk q_k / (||C||_F ||q||_2)`` in [0, 1]: 1 when every prediction is one-hot and the predicted
    class proportions match q. None without samples or with a zero prior.
    """
    p = np.asarray(probs, dtype=float)
    q = np.asarray(prior, dtype=float).reshape(-1)
    if p.ndim != 2 or p.shape[1] != len(q):
        raise ValueError(f"softmax_corr needs probs (N, K) and prior (K,), got {p.shape} and {q.shape}.")
    if len(p) == 0 or not np.any(q):
        return None
    c = p.T @ p / len(p)
    return float(np.dot(np.diag(c), q) / (np.linalg.norm(c) * np.linalg.norm(q)))


def hard_softmax_corr(predictions: Sequence[int], references: Sequence[int], num_classes: int) -> float | None:
    """SoftmaxCorr from hard decisions: ``P`` = one-hot rows of the model's predicted classes and ``q`` = the
    class histogram of ``references`` (e.g. the oracle's verdicts on the same images). It reduces to the
    cosine between the predicted-class and the reference-class distributions (the certainty term is 1)."""
    pred = np.asarray(predictions, dtype=np.int64)
    if len(pred) == 0:
        return None
    probs = np.eye(num_classes)[pred]
    prior = np.bincount(np.asarray(references, dtype=np.int64), minlength=num_classes) / len(pred)
    return softmax_corr(probs, prior)


def spearman(a: Sequence[float | None], b: Sequence[float | None]) -> float | None:
    """Spearman's rho (``scipy.stats.spearmanr``) over the items where both are defined; None below 3 items or
    when one side is constant."""
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    if len(pairs) < 3:
        return None
    x, y = np.asarray(pairs, dtype=float).T
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    rho = float(sps.spearmanr(x, y).statistic)
    return None if math.isnan(rho) else rho


__all__ = [
    "COLUMNS",
    "SCORES",
    "SCORE",
    "LEADERBOARD_SCORES",
    "COMPARED_SCORES",
    "PER_CLASS_SCORES",
    "INTERVALS",
    "UNCHANGED_LINF",
    "MIN_BOOTSTRAP_SOURCES",
    "Outcomes",
    "Score",
    "Estimate",
    "Scores",
    "Difference",
    "ERFit",
    "TauDistribution",
    "score_values",
    "fmr_formula",
    "chance_corrected_formula",
    "fmr_value",
    "format_estimate",
    "proportion",
    "no_validated_reason",
    "few_sources",
    "source_index",
    "source_sums",
    "bootstrap",
    "bootstrap_scores",
    "compute_scores",
    "per_class_table",
    "score_warnings",
    "metric_differences",
    "rank",
    "kendall_tau",
    "fit_effective_robustness",
    "er_intervals",
    "model_draws",
    "rank_stability",
    "softmax_corr",
    "hard_softmax_corr",
    "spearman",
]
