"""Intervals: Wilson / Clopper-Pearson for proportions, and one clustered bootstrap over source images.

A proportion of one run gets Wilson (default) or Clopper-Pearson (``scipy.stats.binomtest(...).proportion_ci``);
a ratio (FMR) and every mean over repetitions get a percentile bootstrap over *source images*
(docs/method.md, "Intervals over source images"), so all samples of one source image, in
every repetition, move together. :func:`bootstrap` is that one bootstrap; :func:`bootstrap_scores` (one model)
and :func:`model_draws` (several models on shared resamples, for rankings and effective robustness) use it. A
bootstrap over fewer than :data:`MIN_BOOTSTRAP_SOURCES` source images (counted among the sources that carry the
score's denominator, e.g. validated samples for FMR) gives no interval: with one or two sources every resample is
the same few values and the percentile interval collapses to zero width (docs/method.md), which reads as certainty.

**No interval narrower than its evidence** (docs/method.md). Where every source agrees the bootstrap still collapses: 18
of 18 validated samples kept their class gave "FMR 100.00 [100.00, 100.00]", while the Wilson interval of that PA
alone is [82.41, 100]. So a bootstrap interval is widened to hold the score-type interval its parts give
(:func:`score_floor`): a proportion's own Wilson interval (a mean over repetitions: the pooled counts'), and for a
ratio such as FMR the MOVER combination (Zou & Donner, "Construction of confidence limits about effect measures: a
general approach", Statistics in Medicine 2008) of the Wilson intervals of the proportions it is built from, each
moved to its bound one at a time, ``L = f - sqrt(sum_i D_i^2 + 2 sum_{i<j} r_ij s_i s_j D_i D_j)`` (``D_i`` the
move of ``f`` from part ``i``'s bound, ``s_i`` the sign of its effect, ``r_ij`` the parts' correlation over the
bootstrap resamples, 0 where a part never moves). Where the sources disagree enough, the bootstrap interval is the
wider one and is kept. Differences between models get the same treatment (:mod:`genEval.scores.rankings`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from genEval.scores.definitions import LEADERBOARD_SCORES, SCORE, SCORES, score_values
from genEval.scores.outcomes import COLUMN, COLUMNS, Outcomes

INTERVALS = {"wilson": "wilson", "clopper-pearson": "exact"}  # our name -> scipy's proportion_ci method
#: A bootstrap over fewer source images than this (among those carrying the score's denominator) gives no
#: interval: at 1-4 sources the percentile interval is degenerate (zero width or a handful of values).
MIN_BOOTSTRAP_SOURCES = 5
#: The bootstrap's resamples over source images when nobody says otherwise: the one place that states the default
#: (the FMR interval, paper Sec. 4; every signature, settings bundle and config default names this or must equal it:
#: a test checks the YAML defaults against the dataclasses).
N_BOOT = 1000


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
    from scipy import stats as sps  # slow import (about 0.8 s): kept out of the command line's start

    ci = sps.binomtest(int(k), int(n)).proportion_ci(confidence_level=level, method=INTERVALS[method])
    return Estimate(100.0 * k / n, 100.0 * ci.low, 100.0 * ci.high, int(n), int(k), method)


# ------------------------------------------------------------------------------------------ score-type floors
#: The proportions every derived score is built from (the parts :func:`score_floor` moves).
PARTS = tuple(s.key for s in SCORES if s.is_proportion)


def _derived(values: Mapping[str, float], num_classes: int) -> dict[str, float]:
    """Every score from the proportions in ``values`` (percent), the derived ones recomputed in order."""
    out = dict(values)
    for s in SCORES:
        if not s.is_proportion:
            with np.errstate(divide="ignore", invalid="ignore"):
                out[s.key] = float(s.formula(out, num_classes))
    return out


def score_floor(
    totals: np.ndarray,
    key: str,
    num_classes: int,
    level: float = 0.95,
    corr: Mapping[tuple[str, str], float] | None = None,
) -> tuple[float, float] | None:
    """How far below and above the score ``key`` of column sums ``totals`` (K,) its score-type interval reaches
    (points): a proportion's Wilson interval, a derived score's MOVER combination of its parts' (see the module
    docstring; ``corr``: (part, part) -> correlation, 0 where missing). None where the score, or a part moved to
    its bound, is undefined."""
    score = SCORE[key]
    if score.is_proportion:
        k, n = (int(totals[COLUMN[c]]) for c in (score.numerator, score.denominator))
        e = proportion(k, n, "wilson", level)
        return None if e.value is None else (e.value - e.low, e.high - e.value)
    values = {k: float(v) for k, v in score_values(totals, num_classes, PARTS).items()}
    f = _derived(values, num_classes)[key]
    if not np.isfinite(f):
        return None
    moves = {}  # part -> (down, up, sign): how far moving it to its bounds lowers / raises f
    for part in PARTS:
        bound = score_floor(totals, part, num_classes, level)
        if bound is None:
            continue
        at = [_derived({**values, part: values[part] + x}, num_classes)[key] for x in (-bound[0], bound[1])]
        if not all(np.isfinite(at)):
            return None
        if at[0] != f or at[1] != f:
            moves[part] = (f - min(at + [f]), max(at + [f]) - f, 1.0 if at[1] >= at[0] else -1.0)
    parts = list(moves)

    def combined(side: int) -> float:
        total = sum(moves[p][side] ** 2 for p in parts)
        for i, p in enumerate(parts):
            for q in parts[i + 1 :]:
                r = (corr or {}).get((p, q), (corr or {}).get((q, p), 0.0))
                total += 2.0 * r * moves[p][2] * moves[q][2] * moves[p][side] * moves[q][side]
        return float(np.sqrt(max(total, 0.0)))

    return combined(0), combined(1)


def widened(
    value: float, low: float | None, high: float | None, floor: tuple[float, float] | None
) -> tuple[float | None, float | None]:
    """``[low, high]`` widened to hold ``value - floor[0] .. value + floor[1]`` and ``value`` itself (None: as is)."""
    if low is None or high is None:
        return low, high
    if floor is not None:
        low, high = min(low, value - floor[0]), max(high, value + floor[1])
    return float(min(low, value)), float(max(high, value))


def part_correlations(draws: np.ndarray, names: Sequence[str]) -> dict[tuple[str, str], float]:
    """(a, b) -> the correlation of two parts' bootstrap draws ``draws`` (B, len(names)); pairs where either never
    moves are left out (0 in :func:`score_floor`)."""
    ok = np.all(np.isfinite(draws), axis=1)
    d = draws[ok]
    out = {}
    if len(d) < 3:
        return out
    sd = d.std(0)
    for i, a in enumerate(names):
        for j in range(i + 1, len(names)):
            if sd[i] > 0 and sd[j] > 0:
                out[a, names[j]] = float(np.corrcoef(d[:, i], d[:, j])[0, 1])
    return out


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


def mean_over_reps(per_rep: np.ndarray) -> np.ndarray:
    """nan-aware mean over the last axis (repetitions); NaN where every repetition is undefined."""
    ok = ~np.isnan(per_rep)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ok.any(-1), np.where(ok, per_rep, 0.0).sum(-1) / np.maximum(ok.sum(-1), 1), np.nan)


def rep_mean(keys: Sequence[str], num_classes: int) -> Callable[[np.ndarray], np.ndarray]:
    """statistic (B, R, K) -> (B, len(keys)): each score per repetition, averaged over repetitions."""

    def stat(s: np.ndarray) -> np.ndarray:
        vals = score_values(s, num_classes, keys)
        return np.stack([mean_over_reps(vals[k]) for k in keys], axis=-1)

    return stat


def percentile(draws: np.ndarray, level: float) -> tuple[float | None, float | None]:
    d = draws[~np.isnan(draws)]
    if len(d) == 0:
        return None, None
    a = (1 - level) / 2
    return float(np.quantile(d, a)), float(np.quantile(d, 1 - a))


def support_sources(sums: np.ndarray, column: str) -> int:
    """How many source images carry ``column`` (sum > 0 in some repetition); ``sums`` is (R, G, K)."""
    return int((sums[..., COLUMN[column]].sum(0) > 0).sum()) if sums.size else 0


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
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = 0.95,
    context: Mapping | None = None,
) -> dict[str, Estimate]:
    """Each score as the mean over repetitions, with a percentile interval from a bootstrap over source images,
    widened where needed to hold the score-type interval of its pooled parts (:func:`score_floor`).

    A source image's samples in *all* repetitions move together (they share the image), and each resample
    recomputes every repetition's score before averaging. One repetition: the run's bootstrap. A score whose
    denominator is carried by fewer than :data:`MIN_BOOTSTRAP_SOURCES` sources gets no interval (``reason``
    says so). ``context``: ``{"budget": ...}`` for the reasons of undefined scores.
    """
    if not reps:
        raise ValueError("bootstrap_scores needs at least one repetition.")
    sums = source_sums(reps)
    g = sums.shape[1]
    stat = rep_mean([*keys, *PARTS], num_classes)  # the parts too: their correlations for the floors
    point = stat(sums.sum(1)[None])[0]
    draws = bootstrap([sums], stat, n_boot, np.random.default_rng(seed)) if g else np.full((0, len(keys)), np.nan)
    corr = part_correlations(draws[:, len(keys) :], PARTS) if g else {}
    pooled = sums.sum((0, 1))
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
            lo, hi = percentile(draws[:, i], level)
            floor = score_floor(pooled, k, num_classes, level, corr)
            out[k] = Estimate(float(point[i]), *widened(float(point[i]), lo, hi, floor), n, None, how)
    return out


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
    per = rep_mean(keys, num_classes)

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
