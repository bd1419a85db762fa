"""The statistics of genEval: every score defined once, one clustered bootstrap, rankings and effective robustness.

Scores (paper Sec. 3.3; METHOD.md "Scores"), in percent as in the paper's tables, each defined once in
:data:`SCORES` and computed from per-source column sums of one per-sample shape, :class:`Outcomes`:

* SA  = accuracy of ``f`` on the clean images (all samples).
* RA  = accuracy of ``f`` on the generator's reconstructions ``D(E(x))`` (the generator gap).
* VR  = validated / all samples (paper App. J).
* PA  = accuracy of ``f`` on the perturbed images, over validated samples only (undefined when none).
* FMR = 100 * PA / SA; chance-corrected FMR = 100 * (PA - 100/C) / (SA - 100/C).
* oracle start accuracy = share of samples whose reconstruction the oracle accepts (the start check).

Intervals (95%): a proportion of one run gets Wilson (default) or Clopper-Pearson
(``scipy.stats.binomtest(...).proportion_ci``); a ratio (FMR) and every mean over repetitions get a percentile
bootstrap over *source images* (``../seeds/digest.md`` 5.1: intervals at the level of source images), so all
samples of one source image, in every repetition, move together. The same bootstrap gives the differences
between two models (digest 5.1.9: paired when they share source images, else independent).

Comparing models: competition ranks ("1224"), Kendall's tau-b (``scipy.stats.kendalltau``; S0, Shi et al.,
NeurIPS 2023, App. A.2), and effective robustness (S0 eq. 1-2, after Taori et al. 2020; digest section 1):
fit ``logit(PA) = w * logit(SA) + b`` over *baseline* models (``scipy.stats.linregress``), then
``ER(f) = PA(f) - expit(w * logit(SA(f)) + b)`` in points. R^2 is computed **in logit space** (the space of the
regression), MAE in points; ER is reported only when R^2 >= ``min_r2`` with >= ``min_baselines`` baselines
(S0 section 8: a fit-quality gate).

Adding a score is one :class:`Score` in :data:`SCORES` (plus a column in :data:`COLUMNS` when it counts
something new): results.json, the bootstrap, the leaderboard, differences and per-class tables follow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import special
from scipy import stats as sps

INTERVALS = {"wilson": "wilson", "clopper-pearson": "exact"}  # our name -> scipy's proportion_ci method

#: Per-sample 0/1 columns summed per source image; every score is a function of their sums.
COLUMNS = ("n", "clean", "recon", "start_ok", "validated", "perturbed_correct", "rejected")
_COL = {c: i for i, c in enumerate(COLUMNS)}


# ------------------------------------------------------------------------------------------ outcomes
@dataclass(frozen=True)
class Outcomes:
    """Per-sample outcomes of one model in one run: the one per-sample shape every score is computed from.

    All fields are arrays of length N (one entry per sample): ``ids`` the source-image id (str; samples of
    one source are resampled together), ``labels`` the true class, and booleans ``clean`` f(x) correct,
    ``recon`` f(D(E(x))) correct, ``start_ok`` the oracle accepted the reconstruction, ``validated`` at least
    one accepted step, ``final`` f correct on the final perturbed image, ``rejected`` the oracle rejected a step.
    """

    ids: np.ndarray
    labels: np.ndarray
    clean: np.ndarray
    recon: np.ndarray
    start_ok: np.ndarray
    validated: np.ndarray
    final: np.ndarray
    rejected: np.ndarray

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise the arrays once, here
        set_(self, "ids", np.asarray([str(i) for i in self.ids], dtype=object))
        set_(self, "labels", np.asarray(self.labels, dtype=np.int64).reshape(-1))
        n = len(self.ids)
        for name in ("clean", "recon", "start_ok", "validated", "final", "rejected"):
            arr = np.asarray(getattr(self, name), dtype=bool).reshape(-1)
            set_(self, name, arr)
        for name in ("labels", "clean", "recon", "start_ok", "validated", "final", "rejected"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Outcomes.{name} has {len(getattr(self, name))} entries for {n} source ids.")

    @classmethod
    def from_records(cls, records: Sequence[Mapping]) -> Outcomes:
        """From ``samples.jsonl`` rows (:class:`genEval.rundir.SampleRecord` as dicts)."""
        lab = np.asarray([r["label"] for r in records], dtype=np.int64)

        def col(key: str) -> np.ndarray:
            return np.asarray([r[key] for r in records], dtype=np.int64)

        return cls(ids=[r["source_id"] for r in records], labels=lab, clean=col("clean_pred") == lab,
                   recon=col("recon_pred") == lab, start_ok=col("start_ok") != 0, validated=col("validated") != 0,
                   final=col("final_pred") == lab, rejected=col("rejected_at") > 0)

    def __len__(self) -> int:
        return len(self.ids)

    def columns(self) -> np.ndarray:
        """(N, len(COLUMNS)) float 0/1 columns, in the order of :data:`COLUMNS`."""
        v = self.validated
        cols = (np.ones(len(self), bool), self.clean, self.recon, self.start_ok, v, v & self.final, self.rejected)
        return np.stack(cols, axis=1).astype(float)

    def totals(self, mask: np.ndarray | None = None) -> np.ndarray:
        """(len(COLUMNS),) column sums over all samples (or those where ``mask`` is True)."""
        cols = self.columns()
        return (cols if mask is None else cols[mask]).sum(0)


# ------------------------------------------------------------------------------------------ scores
def fmr_formula(sa, pa):
    """FMR = 100 * PA / SA (percent in, percent out; arrays or scalars); NaN where SA is 0 or a value NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.asarray(sa) == 0, np.nan, 100.0 * np.asarray(pa) / np.asarray(sa))


def chance_corrected_formula(sa, pa, num_classes: int):
    """100 * (PA - 100/C) / (SA - 100/C): 0 for a model at chance after perturbation, 100 for no drop.

    NaN where SA equals chance (the ratio is undefined there).
    """
    if not num_classes:
        raise ValueError("fmr_chance_corrected needs num_classes (C in 100*(PA-100/C)/(SA-100/C)).")
    chance = 100.0 / num_classes
    den = np.asarray(sa) - chance
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.abs(den) < 1e-12, np.nan, 100.0 * (np.asarray(pa) - chance) / den)


@dataclass(frozen=True)
class Score:
    """One score, defined once. A *proportion* is ``100 * sum(numerator) / sum(denominator)`` over columns of
    :data:`COLUMNS` (Wilson/Clopper-Pearson interval for one run); otherwise ``formula(values, C)`` derives it
    from the scores listed before it (bootstrap interval). ``undefined`` lists ``(column, why)``: the first
    column whose sum is 0 says why the score is undefined; ``otherwise`` covers a formula's own NaN.
    ``leaderboard`` / ``compared`` / ``per_class`` say where it is shown (leaderboard rows, pairwise
    differences, per-class tables)."""

    key: str
    label: str
    numerator: str = ""
    denominator: str = ""
    formula: Callable[[Mapping[str, np.ndarray], int], np.ndarray] | None = None
    undefined: tuple[tuple[str, str], ...] = ()
    otherwise: str = ""
    short: str = ""
    leaderboard: bool = True
    compared: bool = True
    per_class: bool = True

    @property
    def is_proportion(self) -> bool:
        return self.formula is None

    def why_undefined(self, totals: np.ndarray) -> str:
        """The reason this score is undefined for column sums ``totals`` (one run)."""
        for col, why in self.undefined:
            if totals[_COL[col]] == 0:
                return why
        return self.otherwise


_NO_VALIDATED = "no validated sample: no step was accepted (budget 0, or every first step rejected)"
_PA_UNDEFINED = "no validated sample, so PA is undefined"

SCORES: tuple[Score, ...] = (
    Score("sa", "SA", "clean", "n", undefined=(("n", "no samples for SA"),)),
    Score("ra", "RA", "recon", "n", undefined=(("n", "no samples for RA"),), compared=False),
    Score("vr", "VR", "validated", "n", undefined=(("n", "no samples for VR"),)),
    Score("pa", "PA", "perturbed_correct", "validated",
          undefined=(("n", "no samples for PA"), ("validated", _NO_VALIDATED))),
    Score("fmr", "FMR", formula=lambda v, c: fmr_formula(v["sa"], v["pa"]),
          undefined=(("n", "no samples"), ("validated", _PA_UNDEFINED)), otherwise="SA is 0"),
    Score("fmr_chance_corrected", "FMR chance-corrected", short="FMR cc",
          formula=lambda v, c: chance_corrected_formula(v["sa"], v["pa"], c),
          undefined=(("n", "no samples"), ("validated", _PA_UNDEFINED)), otherwise="SA equals chance (100/C)",
          per_class=False),
    Score("oracle_start_accuracy", "oracle start check", "start_ok", "n",
          undefined=(("n", "no samples for oracle start check"),), leaderboard=False, compared=False,
          per_class=False),
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
    a value."""
    get = e.get if isinstance(e, Mapping) else (lambda key: getattr(e, key, None))
    value, low, high = get("value"), get("low"), get("high")
    if value is None:
        return f"undefined ({get('reason')})" if with_reason else "undefined"
    if low is None or high is None:
        return f"{value:.{digits}f}"
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
    return [inv[bounds[i]:bounds[i + 1]] for i in range(len(id_arrays))], int(inv.max() + 1 if len(inv) else 0)


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


def bootstrap(sums: Sequence[np.ndarray], statistic: Callable[..., np.ndarray], n_boot: int,
              rng: np.random.Generator) -> np.ndarray:
    """The clustered bootstrap over source images, the one used for every interval here.

    ``sums``: arrays (R, G, K) of per-source column sums over the *same* G sources; one resample of the
    sources drives all of them (paired). ``statistic(*resampled)`` maps arrays (B, R, K) to (B, S).
    Returns the (n_boot, S) draws.
    """
    g = sums[0].shape[1]
    draws = [statistic(*(np.einsum("bg,rgk->brk", counts, s) for s in sums))
             for counts in _resample_counts(g, n_boot, rng)]
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


def bootstrap_scores(reps: Sequence[Outcomes], num_classes: int, keys: Sequence[str] = LEADERBOARD_SCORES,
                     n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, Estimate]:
    """Each score as the mean over repetitions, with a percentile interval from a bootstrap over source images.

    A source image's samples in *all* repetitions move together (they share the image), and each resample
    recomputes every repetition's score before averaging. One repetition: the run's bootstrap.
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
    how = f"bootstrap({n_boot}, source images)" if single else \
        f"mean of {len(reps)} repetitions, bootstrap({n_boot}, {g} source images)"
    out = {}
    for i, k in enumerate(keys):
        if np.isnan(point[i]):
            why = SCORE[k].why_undefined(sums[0].sum(0)) if single else \
                f"{SCORE[k].label} is undefined in every repetition"
            out[k] = Estimate(None, None, None, n, None, "bootstrap", why)
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

    def __getattr__(self, name: str) -> Estimate:
        est = self.__dict__.get("estimates", {})
        if name in est:
            return est[name]
        raise AttributeError(f"Scores has no score {name!r}; scores: {', '.join(est)}.")

    def to_dict(self) -> dict:
        counts = {k: v for k, v in self.__dict__.items() if k != "estimates"}
        return {**{k: e.to_dict() for k, e in self.estimates.items()}, **counts}


def compute_scores(outcomes: Outcomes, num_classes: int, *, interval: str = "wilson", n_boot: int = 1000,
                   seed: int = 0, level: float = 0.95) -> Scores:
    """Every score of one run with its interval: proportions Wilson/Clopper-Pearson, the others bootstrapped."""
    totals = outcomes.totals()
    derived = [s.key for s in SCORES if not s.is_proportion]
    boot = bootstrap_scores([outcomes], num_classes, derived, n_boot=n_boot, seed=seed, level=level)
    estimates = {}
    for s in SCORES:
        if s.is_proportion:
            k, n = int(totals[_COL[s.numerator]]), int(totals[_COL[s.denominator]])
            e = proportion(k, n, interval, level)
            estimates[s.key] = e if n else Estimate(None, None, None, 0, 0, interval, s.why_undefined(totals))
        else:
            estimates[s.key] = boot[s.key]
    count = {c: int(totals[_COL[c]]) for c in COLUMNS}
    return Scores(estimates, n=count["n"], n_clean_correct=count["clean"], n_validatable=count["start_ok"],
                  n_validated=count["validated"], n_perturbed_correct=count["perturbed_correct"],
                  n_rejected=count["rejected"], num_classes=num_classes)


def per_class_table(outcomes: Outcomes, class_names: Sequence[str]) -> list[dict]:
    """Per-class SA / RA / VR / PA / FMR (paper App. J) as plain rows (no intervals: no bootstrap per class).

    One row per class that has samples: ``class`` (index), ``name``, ``n``, the scores (None = undefined),
    ``n_validated``.
    """
    rows = []
    num_classes = max(1, len(class_names))
    for c, name in enumerate(class_names):
        totals = outcomes.totals(outcomes.labels == c)
        n = int(totals[_COL["n"]])
        if n == 0:
            continue
        vals = score_values(totals, num_classes, PER_CLASS_SCORES)
        rows.append({"class": c, "name": name, "n": n, **{k: _number(vals[k]) for k in PER_CLASS_SCORES},
                     "n_validated": int(totals[_COL["validated"]])})
    return rows


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


def _restrict(reps: Sequence[Outcomes], keep: set[str]) -> list[Outcomes]:
    """The samples of ``reps`` whose source id is in ``keep``."""
    keep_arr = np.asarray(sorted(keep), dtype=str)
    out = []
    for o in reps:
        m = np.isin(o.ids.astype(str), keep_arr)
        out.append(Outcomes(o.ids[m], o.labels[m], o.clean[m], o.recon[m], o.start_ok[m], o.validated[m],
                            o.final[m], o.rejected[m]))
    return out


def metric_differences(a_reps: Sequence[Outcomes], b_reps: Sequence[Outcomes], num_classes: int,
                       metrics: Sequence[str] = COMPARED_SCORES, *, names: tuple[str, str] = ("a", "b"),
                       n_boot: int = 1000, seed: int = 0, level: float = 0.95,
                       paired: bool | None = None) -> dict[str, Difference]:
    """Differences (a - b, points) of scores averaged over repetitions, with 95% bootstrap intervals.

    Repetition r of ``a`` is paired with repetition r of ``b``. Paired (default when the two models share
    source ids): one resample of the shared sources drives both models; samples whose source the other
    model lacks are dropped. Independent (no shared sources, or ``paired=False``): separate resamples.
    """
    if len(a_reps) == 0 or len(b_reps) == 0:
        raise ValueError(f"metric_differences needs at least one repetition per model ({names[0]}: "
                         f"{len(a_reps)}, {names[1]}: {len(b_reps)}).")
    r = min(len(a_reps), len(b_reps))
    a_reps, b_reps = list(a_reps[:r]), list(b_reps[:r])
    shared = set.intersection(*[set(o.ids.astype(str)) for o in [*a_reps, *b_reps]])
    do_pair = bool(shared) if paired is None else paired
    if do_pair and not shared:
        raise ValueError(f"paired difference of {names[0]} and {names[1]}: they share no source ids; "
                         "use paired=False (independent bootstrap).")
    stat = _rep_mean(metrics, num_classes)
    if do_pair:
        both = source_sums(_restrict(a_reps, shared) + _restrict(b_reps, shared))
        sa, sb = both[:r], both[r:]
        draws = bootstrap([sa, sb], lambda xa, xb: stat(xa) - stat(xb), n_boot, np.random.default_rng(seed))
        how = f"paired bootstrap({n_boot}) over {len(shared)} shared source images"
        n_src = len(shared)
    else:
        sa, sb = source_sums(a_reps), source_sums(b_reps)
        draws = (bootstrap([sa], stat, n_boot, np.random.default_rng(seed))
                 - bootstrap([sb], stat, n_boot, np.random.default_rng([seed, 1])))
        how = f"independent bootstrap({n_boot}) over {sa.shape[1]} and {sb.shape[1]} source images"
        n_src = sa.shape[1] + sb.shape[1]
    va, vb = stat(sa.sum(1)[None])[0], stat(sb.sum(1)[None])[0]
    out = {}
    for i, m in enumerate(metrics):
        if np.isnan(va[i]) or np.isnan(vb[i]):
            who = names[0] if np.isnan(va[i]) else names[1]
            out[m] = Difference(m, *names, None, None, None, do_pair, n_src, how,
                                reason=f"{SCORE[m].label} undefined for {who}")
            continue
        lo, hi = _percentile(draws[:, i], level)
        out[m] = Difference(m, *names, float(va[i] - vb[i]), lo, hi, do_pair, n_src, how,
                            a_value=float(va[i]), b_value=float(vb[i]))
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
    Lists are per model, in the order the models were given.
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

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> ERFit:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def curve(self, sa: np.ndarray) -> np.ndarray:
        """Predicted PA (percent) for clean accuracies ``sa`` (percent) on the fitted line."""
        if self.w is None or self.b is None:
            raise ValueError("no baseline fit to evaluate; see ERFit.reason.")
        x = np.clip(np.asarray(sa, dtype=float) / 100.0, self.clip, 1 - self.clip)
        return 100.0 * special.expit(self.w * special.logit(x) + self.b)


def fit_effective_robustness(sa: Sequence[float | None], pa: Sequence[float | None],
                             baseline_mask: Sequence[bool] | None = None, *, min_r2: float = 0.8,
                             min_baselines: int = 3, clip: float = 1e-3) -> ERFit:
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
    none = [None] * n
    common = dict(n_baselines=k, baselines=mask, min_r2=min_r2, min_baselines=min_baselines, clip=clip)

    def unfitted(reason: str) -> ERFit:
        return ERFit(None, None, None, None, predicted=none, er=none, er_untrusted=none, trusted=False,
                     reason=reason, **common)

    if k < 2:
        return unfitted(f"{k} baseline model(s) with defined SA and PA; a line needs at least 2 "
                        f"(and {min_baselines} to be trusted).")
    sa_arr, pa_arr = (np.asarray([np.nan if v is None else v for v in vals], dtype=float) for vals in (sa, pa))
    x, y = (special.logit(np.clip(np.nan_to_num(v) / 100.0, clip, 1 - clip)) for v in (sa_arr, pa_arr))
    if np.ptp(x[sel]) < 1e-12:
        return unfitted("all baselines have the same SA, so the slope of the line is undefined.")
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
    return ERFit(w, b, r2, mae, predicted=[float(p) if d else None for p, d in zip(pred, defined)],
                 er=raw if trusted else none, er_untrusted=raw, trusted=trusted,
                 reason="" if trusted else "ER not reported: " + "; ".join(reasons) + ".", **common)


__all__ = [
    "COLUMNS", "SCORES", "SCORE", "LEADERBOARD_SCORES", "COMPARED_SCORES", "PER_CLASS_SCORES", "INTERVALS",
    "Outcomes", "Score", "Estimate", "Scores", "Difference", "ERFit",
    "score_values", "fmr_formula", "chance_corrected_formula", "fmr_value", "format_estimate", "proportion",
    "source_index", "source_sums", "bootstrap", "bootstrap_scores", "compute_scores", "per_class_table",
    "metric_differences", "rank", "kendall_tau", "fit_effective_robustness",
]
