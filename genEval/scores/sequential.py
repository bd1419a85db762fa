"""Comparing two models from rounds of fresh, paired sources, looking after every round (docs/comparing.md).

A dynamic benchmark can keep drawing sources, so a comparison may *look* after every round and stop when the order
of two models is known. A fixed-design interval (the bootstrap of :mod:`genEval.scores.intervals`) used that way
inflates false orderings: with equal models and 50 looks, a 95% interval excludes 0 at some look in about a quarter
of the comparisons (``tests/scores/test_sequential.py`` shows it). This module gives intervals that hold at *every*
look.

**The estimate.** A ranking score is a ratio of column sums (FMR_v = 100 PA / SA_v = 100 sum(validated & perturbed
correct) / sum(validated & clean correct); :mod:`genEval.scores.definitions`), hence a smooth function ``g`` of the
mean column vector over source units. The difference ``d = g(m_a) - g(m_b)`` of two models evaluated on the *same*
sources (paired) is estimated by the plug-in ``d_n`` pooled over every unit so far, whose influence per source is
``psi_i = J_a (x_ia - m_a) - J_b (x_ib - m_b)`` (``J`` the gradient of ``g``: the delta method), and ``sd_n`` is the
spread of ``psi`` with a small-sample safeguard (:func:`looks_of`): two pseudo-units at plus and minus the influence
of one discordant outcome, the Bonett & Price (2012) adjustment of the paired-proportion interval (one pseudo-count
on each discordant cell) carried through the delta method, so that a look where every unit agrees, or a rare outcome
was seen once, is not read as certainty, and two models with identical outcomes still get an interval (and so a
verdict). Its weight vanishes as 2 / n.

**The boundary** (:mod:`genEval.scores.boundaries`): with a planned ``max_sources`` the group-sequential alpha
spending of Lan & DeMets (``boundary="spending"``), whose repeated confidence intervals ``d_k +- c_k sd_k /
sqrt(n_k)`` cover at every look up to the planned maximum; open-ended, the asymptotic confidence sequence of
Waudby-Smith et al. (2024, Thm 2.2; ``boundary="sequence"``), ``d_n +- sd_n w(n)``, valid however long it runs. Both
are asymptotic (a central limit theorem): no verdict before :data:`MIN_UNITS` units. The guarantee is per pair;
:mod:`genEval.comparisons.settled` gives a family-wise one over a leaderboard's adjacent pairs (Holm).

**The verdict** (:class:`PairVerdict`) comes from the running intersection of the looks' intervals, which is also
valid at every look and only shrinks, so a verdict never flips: ``ordered`` when it excludes 0, ``equivalent`` when
it lies within ``[-margin, margin]``, ``resolved`` when it is narrower than ``resolution`` points (the two models are
tied at that resolution), else ``open``. A look whose interval is disjoint from the running one cannot happen under
the rule's assumptions; it is recorded as a warning (:data:`DISAGREE`) and leaves the running interval as it was.
The pooled estimate is printed with its own look's interval (which contains it) and the running interval beside it.
For an open pair, :mod:`genEval.scores.forecast` says how likely it is to be settled by ``max_sources``, over the
differences its interval allows.

A unit is one source image in one round (a round draws fresh sources; the same image drawn again in a later round
is a new unit, with new start noise).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from genEval.interfaces import SettingError
from genEval.scores.boundaries import SPENDING, mixture_eta2, mixture_width, spending_bounds
from genEval.scores.definitions import score_values
from genEval.scores.forecast import forecast
from genEval.scores.intervals import source_sums
from genEval.scores.outcomes import COLUMNS, Outcomes

#: Before this many source units no verdict is given: the boundaries rest on a central limit theorem and a variance
#: estimated from the units, which a few dozen binary outcomes do not yet pin down.
MIN_UNITS = 30
VERDICTS = ("ordered", "equivalent", "resolved", "open")
SETTLED = ("ordered", "equivalent", "resolved")
BOUNDARIES = ("sequence", "spending")
#: The small-sample safeguards of the spread (:func:`looks_of`): ``discordant`` (the default), ``worst``
#: (the first settled rule's one pseudo-unit at the largest possible influence) and ``none`` (the plain delta method,
#: which benchmarks/sequential.py shows failing on rare outcomes).
SAFEGUARDS = ("discordant", "worst", "none")
#: The warning recorded when a look's interval is disjoint from the running one.
DISAGREE = "the rounds disagree: the generator, oracle or data changed between rounds?"


@dataclass(frozen=True)
class SequentialTest:
    """The rule a pair is judged by: ``confidence`` (1 - alpha, per pair), the equivalence ``margin`` (points of the
    score; 0 = no equivalence verdict), the ``resolution`` (points; a running interval narrower than it is
    ``resolved``; 0 = never), the ``boundary`` (``spending``: Lan-DeMets alpha spending of type ``spending`` over
    the planned ``max_sources`` per model; ``sequence``: the confidence sequence, tightest at ``t_star`` sources,
    for open-ended runs), the ``round_sources`` of a look and the ``power`` the forecast of an open pair aims at
    (:mod:`genEval.scores.forecast`), and the spread's small-sample ``safeguard`` (:data:`SAFEGUARDS`)."""

    confidence: float = 0.95
    margin: float = 1.0
    t_star: float = 1000.0
    power: float = 0.8
    resolution: float = 0.0
    boundary: str = "sequence"
    spending: str = "pocock"
    max_sources: int | None = None
    round_sources: int | None = None
    safeguard: str = "discordant"

    def __post_init__(self) -> None:
        where = "the sequential comparison, genEval/scores/sequential.py"
        for name, low, high, allowed, example in (
            ("confidence", 0, 1, "a number in (0, 1)", "0.95"),
            ("margin", 0, math.inf, "a number of points >= 0 (0: no equivalence verdict)", "1"),
            ("resolution", 0, math.inf, "a number of points >= 0 (0: no resolved verdict)", "2"),
            ("t_star", 1, math.inf, "a number of sources >= 1", "1000"),
            ("power", 0.5, 1, "a number in [0.5, 1)", "0.8"),
        ):
            v = getattr(self, name)
            number = isinstance(v, (int, float)) and not isinstance(v, bool)
            if not number or not (low <= v < high) or (name == "confidence" and v == 0):
                raise SettingError(name, v, allowed, example, where)
        for name, allowed in (("boundary", BOUNDARIES), ("spending", SPENDING), ("safeguard", SAFEGUARDS)):
            if getattr(self, name) not in allowed:
                raise SettingError(name, getattr(self, name), " | ".join(allowed), allowed[0], where)
        for name in ("max_sources", "round_sources"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise SettingError(name, v, "a whole number of sources >= 1, or None", "5000", where)
        if self.boundary == "spending" and self.max_sources is None:
            raise SettingError(
                "max_sources", None, "a planned maximum for boundary=spending (or boundary=sequence)", "5000", where
            )

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence

    @property
    def eta2(self) -> float:
        """The normal mixture's variance on the standardised scale, tightest at ``t_star`` (their eq. 13)."""
        return mixture_eta2(self.alpha, self.t_star)

    def width(self, n: np.ndarray | float) -> np.ndarray:
        """The confidence sequence's half-width per unit standard deviation after ``n`` units, ``w(n)``."""
        return mixture_width(n, self.alpha, self.eta2)

    def at(self, confidence: float) -> SequentialTest:
        """This rule at another confidence (a family-wise procedure's level for one pair)."""
        return replace(self, confidence=float(confidence))

    def critical(self, n: np.ndarray) -> np.ndarray:
        """Half-widths per standard error, ``c_k`` (K,), at looks with ``n`` (K,) units each (every one a look
        that counts): ``w(n) sqrt(n)`` for the sequence, the spending boundary at fractions ``n / max_sources``."""
        n = np.asarray(n, dtype=float)
        if self.boundary == "sequence":
            return self.width(n) * np.sqrt(n)
        return spending_bounds(n / float(self.max_sources), self.alpha, self.spending)


def norm_isf(q: float) -> float:
    """The standard normal's upper quantile (scipy, imported when first needed: a slow import)."""
    from scipy.stats import norm

    return float(norm.isf(q))


def points(x: float) -> str:
    """``1 point``, ``0.5 points``, ``2 points``."""
    return f"{x:g} point" + ("" if x == 1 else "s")


@dataclass(frozen=True)
class PairVerdict:
    """Score ``metric`` of ``a`` minus that of ``b`` after ``looks`` rounds and ``n_sources`` paired source units.

    ``value`` is the difference pooled over every unit so far and ``[low, high]`` the last look's interval around
    it (which contains it); ``[run_low, run_high]`` is the running intersection over the looks, which the
    ``verdict`` (:data:`VERDICTS`) is read from (reached at look ``since``); ``sd`` the influence spread. An open
    pair has a forecast (:mod:`genEval.scores.forecast`), a range over the differences its interval allows: the
    chance that it is settled by the rule's ``max_sources`` (``p_low`` to ``p_high``), and the sources per model more
    after which it is settled with the rule's power (``more_sources`` at the most favourable difference to
    ``more_high`` at the least; None: not within ``max_sources``), ``more_kind`` saying how ("order", "show
    equivalence" or "resolve"); ``reason`` says why a value, an interval or a forecast is missing. ``warnings``:
    looks whose interval missed the running one (:data:`DISAGREE`). ``confidence``: the level the pair was judged at
    (a family-wise procedure's level for it, :mod:`genEval.comparisons.settled`)."""

    a: str
    b: str
    metric: str
    value: float | None
    low: float | None
    high: float | None
    n_sources: int
    looks: int
    sd: float | None
    verdict: str
    confidence: float
    margin: float
    more_sources: int | None = None
    more_kind: str = ""
    reason: str = ""
    run_low: float | None = None
    run_high: float | None = None
    since: int = 0
    resolution: float = 0.0
    p_low: float | None = None
    p_high: float | None = None
    more_high: int | None = None
    max_sources: int | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> PairVerdict:
        fields = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        if fields.get("run_low") is None and fields.get("low") is not None and "run_low" not in d:
            fields["run_low"], fields["run_high"] = fields["low"], fields.get("high")  # the first rule's records
        return cls(**fields)

    @property
    def settled(self) -> bool:
        return self.verdict in SETTLED

    @property
    def higher(self) -> str | None:
        """The model the running interval puts higher (None: it does not exclude 0)."""
        if self.run_low is not None and self.run_low > 0:
            return self.a
        if self.run_high is not None and self.run_high < 0:
            return self.b
        return None

    def flipped(self) -> PairVerdict:
        """The same verdict on ``b`` minus ``a``."""
        neg = lambda x: None if x is None else -x  # noqa: E731
        return replace(self, a=self.b, b=self.a, value=neg(self.value), low=neg(self.high), high=neg(self.low),
                       run_low=neg(self.run_high), run_high=neg(self.run_low))  # fmt: skip

    def describe(self, label: str) -> str:
        """One line, e.g. "resnet32 vs resnet20: FMR_v difference +9.30 pooled over 1,000 sources (5 looks), 95%
        interval [+3.81, +14.81]: ordered (resnet32 higher, since look 2)"."""
        head = f"{self.a} vs {self.b}: {label} difference "
        if self.value is None:
            return head + f"undefined ({self.reason})"
        head += f"{self.value:+.2f} pooled over {self.n_sources:,} sources ({self.looks} look{'s' * (self.looks != 1)})"
        if self.low is None or self.run_low is None:
            return head + f": open ({self.reason})" + self._chance()
        level = f"{100 * self.confidence:.4g}%"
        look = f"[{self.low:+.2f}, {self.high:+.2f}]"
        held = f"[{self.run_low:+.2f}, {self.run_high:+.2f}]"
        head += (
            f", {level} interval {look}"
            if look == held
            else f", this look's {level} interval {look}, held over the looks {held}"
        )
        since = f", since look {self.since}" if self.since and self.since < self.looks else ""
        if self.verdict == "ordered":
            return head + f": ordered ({self.higher} higher{since})"
        if self.verdict == "equivalent":
            return head + f": equivalent within {points(self.margin)}{since}"
        if self.verdict == "resolved":
            return head + f": resolved (tied at a resolution of {points(self.resolution)}{since})"
        if self.p_low is None:
            return head + f": open ({self.reason or 'no forecast'})"
        return head + ": open" + self._chance()

    def _chance(self) -> str:
        """The forecast of an open pair, as a clause ("" without one)."""
        if self.p_low is None:
            return ""
        chance = f"{self.p_low:.0%}" if round(100 * self.p_low) == round(100 * self.p_high) else (
            f"{self.p_low:.0%} to {self.p_high:.0%}")  # fmt: skip
        tail = f", {chance} likely to be settled by {self.max_sources:,} sources per model (over its interval)"
        if self.more_sources is not None:
            upto = f"{self.more_high:,}" if self.more_high is not None else "more than max_sources"
            more = (
                f"{self.more_sources:,}" if self.more_high == self.more_sources else f"{self.more_sources:,} to {upto}"
            )
            tail += f"; ≈ {more} more to {self.more_kind} with the rule's power"
        return tail


# ------------------------------------------------------------------------------------------ the estimate
def _moments(units: np.ndarray) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(count, column sums (P,), outer-product sums (P, P), column minima and maxima (P,)) of units (U, P)."""
    if not len(units):
        return 0, units.sum(0), units.T @ units, np.full(units.shape[1], np.inf), np.full(units.shape[1], -np.inf)
    return units.shape[0], units.sum(0), units.T @ units, units.min(0), units.max(0)


def pair_units(a: Outcomes, b: Outcomes) -> np.ndarray:
    """One round of two models as paired units: (U, 2 * len(COLUMNS)) per-source column sums, ``a``'s columns then
    ``b``'s (a source only one of them saw has zeros for the other)."""
    sums = source_sums([a, b])  # (2, U, K) over the union of their source ids
    return np.concatenate([sums[0], sums[1]], axis=1)


def _gradient(mean: np.ndarray, key: str, num_classes: int, h: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """The score and its gradient in the mean columns, vectorised: ``mean`` (L, K) -> (L,), (L, K); forward
    differences (the score is a ratio of sums, smooth where defined; NaN where undefined)."""
    k = mean.shape[-1]
    shifted = mean[:, None, :] + h * np.eye(k)[None]  # (L, K, K)
    base = score_values(mean, num_classes, [key])[key]
    moved = score_values(shifted, num_classes, [key])[key]  # (L, K)
    return base, (moved - base[:, None]) / h


def looks_of(
    rounds: Sequence[np.ndarray], key: str, num_classes: int, safeguard: str = "discordant"
) -> tuple[np.ndarray, ...]:
    """After each round (cumulative): units ``n`` (L,), difference ``d`` (L,) and influence spread ``sd`` (L,) of
    ``key`` for paired units per round ``rounds`` [(U_r, 2K)].

    ``safeguard`` (:data:`SAFEGUARDS`) keeps a look where every unit agrees (two models with the same decisions on
    the first 60 sources: a sample variance of 0) or one where a rare outcome was seen once (one disagreement in
    600 sources: a variance far below its uncertainty) from reading as certainty:

    * ``discordant``: two pseudo-units at plus and minus ``w1``, the influence of one discordant outcome (the
      largest ``|J_k|`` over the columns of both models, times one outcome or the column's range if wider):
      ``sd^2 = (n var + 2 w1^2) / (n + 2)``. For SA (a proportion) that is Bonett & Price's pseudo-count on each
      discordant cell of the paired table.
    * ``worst``: one pseudo-unit at the largest influence a unit can have, every column anywhere in the range it
      took so far (``sum_k |J_k| max(high_k - m_k, m_k - low_k)``), ``sd^2 = (n var + W^2) / (n + 1)``.
    * ``none``: the plain sample spread.
    """
    k = len(COLUMNS)
    rounds = [np.asarray(u, dtype=float).reshape(-1, 2 * k) for u in rounds]
    counts, s1, s2, lows, highs = zip(*(_moments(u) for u in rounds))
    n = np.cumsum(counts).astype(float)
    m = np.cumsum(np.stack(s1), 0) / np.maximum(n, 1)[:, None]  # (L, 2K)
    cov = np.cumsum(np.stack(s2), 0) / np.maximum(n, 1)[:, None, None] - m[:, :, None] * m[:, None, :]
    ga, ja = _gradient(m[:, :k], key, num_classes)
    gb, jb = _gradient(m[:, k:], key, num_classes)
    j = np.concatenate([ja, -jb], axis=1)  # (L, 2K): the influence of a unit is j . (x - m)
    var = np.maximum(np.einsum("lp,lpq,lq->l", j, cov, j), 0.0)
    low, high = np.minimum.accumulate(np.stack(lows), 0), np.maximum.accumulate(np.stack(highs), 0)
    with np.errstate(invalid="ignore"):
        if safeguard == "discordant":
            one = np.where(np.isfinite(j), np.abs(j), np.nan) * np.maximum(1.0, high - low)
            w1 = np.where(np.isnan(one).all(1), np.nan, np.nanmax(np.where(np.isnan(one), -np.inf, one), axis=1))
            var = (n * var + 2.0 * w1**2) / (n + 2.0)
        elif safeguard == "worst":
            worst = np.nansum(np.abs(j) * np.maximum(high - m, m - low), axis=1)
            var = (n * var + worst**2) / (n + 1.0)
        elif safeguard != "none":
            raise ValueError(f"unknown safeguard {safeguard!r}; choose one of {', '.join(SAFEGUARDS)}.")
    return n, ga - gb, np.sqrt(var)


# ------------------------------------------------------------------------------------------ the looks
@dataclass(frozen=True)
class Track:
    """The looks of one pair under one rule: which looks count (``valid`` (L,): at least :data:`MIN_UNITS` units, a
    defined difference and a spread above 0), each look's own interval ``look_low``/``look_high`` (L,; NaN where it
    does not count), the running intersection ``low``/``high`` (L,; -inf/inf before the first look that counts)
    and the 1-based looks whose interval was disjoint from the running one (``disjoint``: left out of it)."""

    valid: np.ndarray
    look_low: np.ndarray
    look_high: np.ndarray
    low: np.ndarray
    high: np.ndarray
    disjoint: tuple[int, ...]


def track(n: np.ndarray, d: np.ndarray, sd: np.ndarray, test: SequentialTest) -> Track:
    """The looks' intervals and their running intersection from :func:`looks_of`'s ``n``, ``d``, ``sd``."""
    n, d, sd = (np.asarray(x, dtype=float) for x in (n, d, sd))
    valid = (n >= MIN_UNITS) & np.isfinite(d) & np.isfinite(sd) & (sd > 0)
    half = np.full(len(n), np.nan)
    if valid.any():
        half[valid] = test.critical(n[valid]) * sd[valid] / np.sqrt(n[valid])
    look_low, look_high = d - half, d + half
    low, high = np.full(len(n), -np.inf), np.full(len(n), np.inf)
    lo, hi, disjoint = -np.inf, np.inf, []
    for t in range(len(n)):
        if valid[t] and np.isfinite(half[t]):
            new_lo, new_hi = max(lo, look_low[t]), min(hi, look_high[t])
            if new_lo > new_hi:
                disjoint.append(t + 1)
            else:
                lo, hi = new_lo, new_hi
        low[t], high[t] = lo, hi
    return Track(valid, look_low, look_high, low, high, tuple(disjoint))


def running_bounds(n: np.ndarray, d: np.ndarray, sd: np.ndarray, test: SequentialTest) -> tuple[np.ndarray, ...]:
    """The running interval after each look, ``low`` (L,), ``high`` (L,) (see :func:`track`)."""
    t = track(n, d, sd, test)
    return t.low, t.high


def verdict_of(low: float, high: float, margin: float, resolution: float = 0.0) -> str:
    """``ordered`` when ``[low, high]`` excludes 0, ``equivalent`` when it lies within ``[-margin, margin]``
    (margin > 0), ``resolved`` when it is narrower than ``resolution`` (> 0), else ``open``."""
    if low > 0 or high < 0:
        return "ordered"
    if margin > 0 and -margin <= low and high <= margin:
        return "equivalent"
    if resolution > 0 and high - low < resolution:
        return "resolved"
    return "open"


@dataclass(frozen=True)
class PairLooks:
    """Two models' looks at the difference of score ``key`` (:func:`looks_of`), before any rule is applied: one pair
    judged at several levels (a family-wise procedure) reuses them."""

    a: str
    b: str
    key: str
    n: np.ndarray
    d: np.ndarray
    sd: np.ndarray

    @classmethod
    def of(
        cls, a: str, b: str, rounds: Sequence[np.ndarray], key: str, num_classes: int, safeguard: str = "discordant"
    ) -> PairLooks:
        if not rounds:
            return cls(a, b, key, np.zeros(0), np.zeros(0), np.zeros(0))
        return cls(a, b, key, *looks_of(rounds, key, num_classes, safeguard))


def judge(looks: PairLooks, test: SequentialTest) -> PairVerdict:
    """The verdict on ``looks.a`` minus ``looks.b`` under ``test`` (see the module docstring)."""
    a, b, key, conf, margin = looks.a, looks.b, looks.key, test.confidence, test.margin
    common = dict(resolution=test.resolution, max_sources=test.max_sources)
    if not len(looks.n):
        return PairVerdict(a, b, key, None, None, None, 0, 0, None, "open", conf, margin, reason="no rounds", **common)
    n, d, sd = looks.n, looks.d, looks.sd
    units, count = int(n[-1]), len(n)
    if not np.isfinite(d[-1]):
        why = "the score is undefined for one of the two models"
        return PairVerdict(a, b, key, None, None, None, units, count, None, "open", conf, margin, reason=why, **common)
    tr = track(n, d, sd, test)
    value, spread = float(d[-1]), float(sd[-1])
    if not tr.valid[-1]:
        why = f"fewer than {MIN_UNITS} paired sources (too few for the boundaries' central limit theorem)"
        return PairVerdict(
            a, b, key, value, None, None, units, count, spread, "open", conf, margin, reason=why, **common
        )
    if not np.isfinite(tr.low[-1]):  # alpha spending of the O'Brien-Fleming type spends ~nothing this early
        why = f"the {test.spending} boundary spends no alpha yet at {units:,} of {test.max_sources:,} sources"
        half = float(norm_isf(test.alpha / 2.0)) * spread / math.sqrt(units)  # the forecast's range: fixed-design
        f = forecast(n, d, sd, tr.valid, (value - half, value + half), (-math.inf, math.inf), test)
        return PairVerdict(
            a, b, key, value, None, None, units, count, spread, "open", conf, margin, f.more_low, f.kind,
            why, p_low=f.p_low, p_high=f.p_high, more_high=f.more_high, **common,
        )  # fmt: skip
    run_low, run_high = float(tr.low[-1]), float(tr.high[-1])
    verdict = verdict_of(run_low, run_high, margin, test.resolution)
    since = next(t + 1 for t in range(count) if verdict_of(tr.low[t], tr.high[t], margin, test.resolution) == verdict)
    warnings = [f"look {t}: {DISAGREE}" for t in tr.disjoint]
    out = PairVerdict(
        a, b, key, value, float(tr.look_low[-1]), float(tr.look_high[-1]), units, count, spread, verdict, conf,
        margin, run_low=run_low, run_high=run_high, since=since, warnings=warnings, **common,
    )  # fmt: skip
    if verdict != "open":
        return out
    f = forecast(n, d, sd, tr.valid, (out.low, out.high), (run_low, run_high), test)
    return replace(
        out, p_low=f.p_low, p_high=f.p_high, more_sources=f.more_low, more_high=f.more_high, more_kind=f.kind,
        reason=f.reason,
    )  # fmt: skip


def settle_pair(
    a: str, b: str, rounds: Sequence[np.ndarray], key: str, num_classes: int, test: SequentialTest
) -> PairVerdict:
    """The verdict on ``a`` vs ``b`` by score ``key`` after every round of paired units ``rounds`` [(U_r, 2K)]
    (:func:`pair_units`): the looks' intervals under ``test``, intersected over the looks (see the module
    docstring)."""
    return judge(PairLooks.of(a, b, rounds, key, num_classes, test.safeguard), test)
