"""Comparing models: paired differences, ranks, Kendall tau and its distribution under resampling of sources.

Competition ranks ("1224"), Kendall's tau-b (``scipy.stats.kendalltau``; S0, Shi et al., NeurIPS 2023,
App. A.2) and Spearman's rho. The difference of two models' scores gets the clustered bootstrap of
:mod:`genEval.scores.intervals` (digest 5.1.9: paired when they share source images, else independent), widened
where the sources agree too much for a bootstrap to see (docs/method.md: two models with the same outcomes on 40 sources
read "0.00 [0.00, 0.00]"): paired, to the delta-method interval of the paired units with the Bonett-Price
pseudo-counts on the discordant cells (:func:`genEval.scores.sequential.looks_of`, the spread the settled verdicts
use, at the fixed-design ``z``); independent, to the MOVER difference (Newcombe 1998; Zou & Donner 2008) of the two
models' score-type intervals (:func:`genEval.scores.intervals.score_floor`). The rank
stability of a comparison is a *distribution* (:func:`rank_stability`: Kendall tau between the point ranking and
the rankings of bootstrap resamples of the source images, :func:`genEval.scores.intervals.model_draws`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import combinations

import numpy as np

from genEval.scores.definitions import COMPARED_SCORES, SCORE
from genEval.scores.intervals import (
    MIN_BOOTSTRAP_SOURCES,
    N_BOOT,
    bootstrap,
    few_sources,
    percentile,
    rep_mean,
    score_floor,
    source_sums,
    support_sources,
    widened,
)
from genEval.scores.outcomes import Outcomes
from genEval.scores.sequential import looks_of


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
    n_boot: int = N_BOOT,
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
    stat = rep_mean(metrics, num_classes)
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
    floors = _difference_floors(sa, sb, metrics, num_classes, level, do_pair)
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
            lo, hi = widened(float(va[i] - vb[i]), *percentile(draws[:, i], level), floors.get(m))
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


def _difference_floors(
    sa: np.ndarray, sb: np.ndarray, metrics: Sequence[str], num_classes: int, level: float, paired: bool
) -> dict[str, tuple[float, float]]:
    """Metric -> how far below and above a difference its evidence reaches at least (see the module docstring);
    ``sa``, ``sb``: (R, G, K) per-source sums of the two models (paired: the same G sources)."""
    from scipy.stats import norm  # slow import, kept off the command line's start

    z = float(norm.isf((1.0 - level) / 2.0))
    out = {}
    for m in metrics:
        if paired:
            units = [np.concatenate([a, b], axis=1) for a, b in zip(sa, sb)]  # each repetition a round of units
            n, _, sd = looks_of(units, m, num_classes)
            if n[-1] > 0 and np.isfinite(sd[-1]):
                out[m] = (z * sd[-1] / np.sqrt(n[-1]),) * 2
            continue
        fa = score_floor(sa.sum((0, 1)), m, num_classes, level)
        fb = score_floor(sb.sum((0, 1)), m, num_classes, level)
        if fa is not None and fb is not None:
            out[m] = (float(np.hypot(fa[0], fb[1])), float(np.hypot(fa[1], fb[0])))
    return out


def pairwise_differences(
    order: Sequence[str],
    outcomes: Mapping[str, Sequence[Outcomes]],
    num_classes: int,
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = 0.95,
) -> list[Difference]:
    """Every pair of models (a before b in ``order``), every compared score: :func:`metric_differences`."""
    out = []
    for a, b in combinations(order, 2):
        res = metric_differences(
            outcomes[a], outcomes[b], num_classes, COMPARED_SCORES, names=(a, b), n_boot=n_boot, seed=seed, level=level
        )
        out += [res[k] for k in COMPARED_SCORES]
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
    from scipy import stats as sps  # slow import (about 0.8 s): kept out of the command line's start

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
    from scipy import stats as sps  # slow import (about 0.8 s): kept out of the command line's start

    tau = float(sps.kendalltau(a, b, variant="b").statistic)
    return None if math.isnan(tau) else tau


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
    lo, hi = percentile(t, level)
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


def spearman(a: Sequence[float | None], b: Sequence[float | None]) -> float | None:
    """Spearman's rho (``scipy.stats.spearmanr``) over the items where both are defined; None below 3 items or
    when one side is constant."""
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    if len(pairs) < 3:
        return None
    x, y = np.asarray(pairs, dtype=float).T
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    from scipy import stats as sps  # slow import (about 0.8 s): kept out of the command line's start

    rho = float(sps.spearmanr(x, y).statistic)
    return None if math.isnan(rho) else rho
