"""The statistics of genEval: the scores of one run and the comparison of models.

Scores and their uncertainty (paper Sec. 3.3; METHOD.md "Scores").

* SA  = accuracy of ``f`` on the clean images (all samples).
* RA  = accuracy of ``f`` on the generator's reconstructions ``D(E(x))`` (the generator gap).
* VR  = validated / all samples (paper App. J).
* PA  = accuracy of ``f`` on the perturbed images, over validated samples only (undefined when none).
* FMR = 100 * PA / SA; chance-corrected FMR = 100 * (PA - 100/C) / (SA - 100/C).

Proportions get Wilson (default) or Clopper-Pearson 95% intervals; FMR, a ratio, gets a percentile
bootstrap over *source images* (``digest.md``: intervals at the level of source images), so repeated
samples of one source image move together.

Comparing models: ranks, Kendall tau, effective robustness, paired differences.

* Ranks and rank agreement: Kendall's tau-b (``scipy.stats.kendalltau``), as S0 (Shi et al., NeurIPS 2023,
  App. A.2) uses to compare rankings; competition ranks ("1224") for ties, as leaderboards print them.
* Effective robustness (S0 eq. 1-2, after Taori et al. 2020; ``../seeds/digest.md`` section 1): fit
  ``logit(PA) = w * logit(SA) + b`` by least squares over *baseline* models, then
  ``ER(f) = PA(f) - expit(w * logit(SA(f)) + b)`` in accuracy points. R^2 is computed **in logit space**
  (the space of the regression; S0 leaves the choice open, the digest asks to record it), MAE in accuracy
  points over the baselines. ER is only reported when the fit is good (S0 section 8: a fit-quality gate):
  R^2 >= ``min_r2`` and at least ``min_baselines`` baselines.
* Differences between two models with 95% intervals from a bootstrap over *source images* (digest 5.1:
  intervals at the level of source images; 5.1.9: paired when the same source images were used). All
  samples of one source image (over repetitions too) are resampled together; with shared sources both
  models get the same resample (paired), otherwise each is resampled on its own (independent).

Accuracies are percentages everywhere in this module, as in the paper's tables.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import stats
from scipy import stats as sps

INTERVALS = ("wilson", "clopper-pearson")


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
        return format_estimate(self.to_dict(), digits, with_reason=True)


def format_estimate(e: dict, digits: int = 2, with_reason: bool = False) -> str:
    """``"value [low, high]"`` for an estimate as a dict (results.json form); ``undefined`` without a value."""
    if e.get("value") is None:
        return f"undefined ({e.get('reason', '')})" if with_reason else "undefined"
    if e.get("low") is None or e.get("high") is None:
        return f"{e['value']:.{digits}f}"
    return f"{e['value']:.{digits}f} [{e['low']:.{digits}f}, {e['high']:.{digits}f}]"


def proportion(k: int, n: int, method: str = "wilson", level: float = 0.95, what: str = "") -> Estimate:
    """Percentage ``100*k/n`` with a Wilson score or exact Clopper-Pearson interval."""
    if method not in INTERVALS:
        raise ValueError(f"unknown interval method {method!r}; choose one of {', '.join(INTERVALS)}.")
    if n == 0:
        return Estimate(None, None, None, 0, 0, method, f"no samples{(' for ' + what) if what else ''}")
    p = k / n
    alpha = 1 - level
    if method == "wilson":
        zc = stats.norm.ppf(1 - alpha / 2)
        denom = 1 + zc**2 / n
        centre = (p + zc**2 / (2 * n)) / denom
        half = zc * math.sqrt(p * (1 - p) / n + zc**2 / (4 * n**2)) / denom
        lo, hi = max(0.0, centre - half), min(1.0, centre + half)
    else:
        lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
        hi = 1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return Estimate(100 * p, 100 * lo, 100 * hi, n, k, method)


def fmr_value(sa: float | None, pa: float | None) -> float | None:
    """FMR = 100 * PA / SA (both in percent); None when either is undefined or SA is 0."""
    if sa is None or pa is None or sa == 0:
        return None
    return 100.0 * pa / sa


def chance_corrected_fmr(sa: float | None, pa: float | None, num_classes: int) -> float | None:
    """100 * (PA - 100/C) / (SA - 100/C): 0 for a model at chance after perturbation, 100 for no drop."""
    chance = 100.0 / num_classes
    if sa is None or pa is None or abs(sa - chance) < 1e-12:
        return None
    return 100.0 * (pa - chance) / (sa - chance)


def _ratio_stats(clean: np.ndarray, valid: np.ndarray, final: np.ndarray, num_classes: int,
                 w: np.ndarray) -> tuple[float | None, float | None]:
    """(FMR, chance-corrected FMR) from per-sample 0/1 arrays weighted by bootstrap counts ``w``."""
    nw = w.sum()
    nv = (w * valid).sum()
    if nw == 0 or nv == 0:
        return None, None
    sa = 100.0 * (w * clean).sum() / nw
    pa = 100.0 * (w * valid * final).sum() / nv
    return fmr_value(sa, pa), chance_corrected_fmr(sa, pa, num_classes)


def bootstrap_fmr(clean: np.ndarray, valid: np.ndarray, final: np.ndarray, groups: Sequence[str],
                  num_classes: int, n_boot: int = 1000, seed: int = 0, level: float = 0.95
                  ) -> tuple[Estimate, Estimate]:
    """FMR and chance-corrected FMR with percentile intervals from a bootstrap over source images.

    ``clean``/``valid``/``final``: per-sample 0/1 arrays (clean correct, validated, perturbed correct);
    ``groups``: the source-image id of each sample (samples of one source are resampled together).
    """
    clean, valid, final = (np.asarray(a, dtype=float) for a in (clean, valid, final))
    n = len(clean)
    ones = np.ones(n)
    point = _ratio_stats(clean, valid, final, num_classes, ones)
    if n == 0 or valid.sum() == 0:
        why = "no samples" if n == 0 else "no validated sample, so PA is undefined"
        empty = Estimate(None, None, None, n, None, "bootstrap", why)
        return empty, empty
    _, inverse = np.unique(np.asarray(groups), return_inverse=True)
    n_groups = inverse.max() + 1
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n_groups, np.full(n_groups, 1.0 / n_groups), size=n_boot)  # (n_boot, G)
    draws: list[list[float]] = [[], []]
    for c in counts:
        for i, v in enumerate(_ratio_stats(clean, valid, final, num_classes, c[inverse].astype(float))):
            if v is not None:
                draws[i].append(v)
    out = []
    a = (1 - level) / 2
    for i in range(2):  # FMR, chance-corrected FMR
        if point[i] is None:
            out.append(Estimate(None, None, None, n, None, "bootstrap",
                                "SA equals chance (100/C)" if i == 1 else "SA is 0"))
            continue
        d = np.asarray(draws[i])
        lo, hi = (float(np.quantile(d, a)), float(np.quantile(d, 1 - a))) if len(d) else (None, None)
        out.append(Estimate(float(point[i]), lo, hi, n, None, f"bootstrap({n_boot}, source images)"))
    return out[0], out[1]


@dataclass(frozen=True)
class Scores:
    """All scores of one evaluation (percentages with 95% intervals) plus the raw counts."""

    sa: Estimate
    ra: Estimate
    vr: Estimate
    pa: Estimate
    fmr: Estimate
    fmr_chance_corrected: Estimate
    oracle_start_accuracy: Estimate
    n: int
    n_clean_correct: int
    n_validatable: int
    n_validated: int
    n_perturbed_correct: int
    n_rejected: int
    num_classes: int

    def to_dict(self) -> dict:
        return {k: (v.to_dict() if isinstance(v, Estimate) else v) for k, v in self.__dict__.items()}


def compute_scores(clean_correct: np.ndarray, recon_correct: np.ndarray, start_ok: np.ndarray,
                   validated: np.ndarray, final_correct: np.ndarray, rejected: np.ndarray,
                   groups: Sequence[str], num_classes: int, interval: str = "wilson",
                   n_boot: int = 1000, seed: int = 0) -> Scores:
    """SA, RA, VR, PA, FMR (+chance-corrected) with intervals from per-sample boolean arrays."""
    cc, rc, so, va, fc, rj = (np.asarray(a, dtype=bool) for a in
                              (clean_correct, recon_correct, start_ok, validated, final_correct, rejected))
    n = len(cc)
    pa_k = int((fc & va).sum())
    n_val = int(va.sum())
    pa = proportion(pa_k, n_val, interval, what="PA")
    if n_val == 0 and n > 0:
        pa = Estimate(None, None, None, 0, 0, interval,
                      "no validated sample: no step was accepted (budget 0, or every first step rejected)")
    fmr, fmr_cc = bootstrap_fmr(cc, va, fc, groups, num_classes, n_boot=n_boot, seed=seed)
    return Scores(
        sa=proportion(int(cc.sum()), n, interval, what="SA"),
        ra=proportion(int(rc.sum()), n, interval, what="RA"),
        vr=proportion(n_val, n, interval, what="VR"),
        pa=pa, fmr=fmr, fmr_chance_corrected=fmr_cc,
        oracle_start_accuracy=proportion(int(so.sum()), n, interval, what="oracle start check"),
        n=n, n_clean_correct=int(cc.sum()), n_validatable=int(so.sum()), n_validated=n_val,
        n_perturbed_correct=pa_k, n_rejected=int(rj.sum()), num_classes=num_classes,
    )


def per_class_table(labels: np.ndarray, class_names: Sequence[str], **arrays: np.ndarray) -> list[dict]:
    """Per-class SA / RA / VR / PA / FMR (paper App. J) as plain rows; no intervals bootstrap per class."""
    labels = np.asarray(labels)
    rows = []
    for c, name in enumerate(class_names):
        m = labels == c
        n = int(m.sum())
        if n == 0:
            continue
        cc, rc, va, fc = (np.asarray(arrays[k], dtype=bool)[m] for k in
                          ("clean_correct", "recon_correct", "validated", "final_correct"))
        sa = proportion(int(cc.sum()), n)
        pa = proportion(int((fc & va).sum()), int(va.sum()))
        rows.append({"class": c, "name": name, "n": n, "sa": sa.value, "ra": proportion(int(rc.sum()), n).value,
                     "vr": proportion(int(va.sum()), n).value, "pa": pa.value,
                     "fmr": fmr_value(sa.value, pa.value), "n_validated": int(va.sum())})
    return rows


METRICS = ("sa", "ra", "vr", "pa", "fmr", "fmr_chance_corrected")
METRIC_LABELS = {
    "sa": "SA",
    "ra": "RA",
    "vr": "VR",
    "pa": "PA",
    "fmr": "FMR",
    "fmr_chance_corrected": "FMR chance-corrected",
}


# ----------------------------------------------------------------------------------------------- ranks
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
        raise ValueError(
            f"kendall_tau needs two rankings of the same items, got lengths {len(a)} and {len(b)}."
        )
    if len(a) < 2:
        return None
    res = sps.kendalltau(a, b, variant="b")
    tau = float(res.statistic if hasattr(res, "statistic") else res[0])
    return None if math.isnan(tau) else tau


# ---------------------------------------------------------------------------------- effective robustness
def logit(p: np.ndarray | float) -> np.ndarray:
    p = np.asarray(p, dtype=float)
    return np.log(p) - np.log1p(-p)


def expit(x: np.ndarray | float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))


@dataclass(frozen=True)
class ERFit:
    """The baseline fit ``logit(PA) = w*logit(SA) + b`` and the effective robustness of every model.

    ``r2`` is the coefficient of determination in **logit** space over the baselines; ``mae`` the mean
    absolute error in accuracy **points** over the baselines. ``er`` (points) is None for every model when
    the fit is not ``trusted``; ``er_untrusted`` keeps the values for inspection (never for ranking).
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

    def curve(self, sa: np.ndarray) -> np.ndarray:
        """Predicted PA (percent) for clean accuracies ``sa`` (percent) on the fitted line."""
        if self.w is None or self.b is None:
            raise ValueError("no baseline fit to evaluate; see ERFit.reason.")
        x = np.clip(np.asarray(sa, dtype=float) / 100.0, self.clip, 1 - self.clip)
        return 100.0 * expit(self.w * logit(x) + self.b)


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
    defined = [s is not None and p is not None for s, p in zip(sa, pa)]
    use = [m and d for m, d in zip(mask, defined)]
    k = sum(use)
    none = [None] * n
    common = dict(n_baselines=k, baselines=mask, min_r2=min_r2, min_baselines=min_baselines, clip=clip)

    def unfitted(reason: str) -> ERFit:
        return ERFit(None, None, None, None, predicted=none, er=none, er_untrusted=none, trusted=False,
                     reason=reason, **common)

    if k < 2:
        return unfitted(f"{k} baseline model(s) with defined SA and PA; a line needs at least 2 "
                        f"(and {min_baselines} to be trusted).")
    frac = lambda v: np.clip(
        np.asarray([0.0 if x is None else x for x in v], dtype=float) / 100.0, clip, 1 - clip
    )
    x, y = logit(frac(sa)), logit(frac(pa))
    sel = np.asarray(use)
    xs, ys = x[sel], y[sel]
    if np.ptp(xs) < 1e-12:
        return unfitted("all baselines have the same SA, so the slope of the line is undefined.")
    w, b = np.polyfit(xs, ys, 1)
    resid = ys - (w * xs + b)
    ss_res, ss_tot = float(resid @ resid), float(((ys - ys.mean()) ** 2).sum())
    r2 = None if ss_tot < 1e-24 else 1.0 - ss_res / ss_tot
    pred = 100.0 * expit(w * x + b)
    pa_arr = np.asarray([np.nan if v is None else v for v in pa], dtype=float)
    mae = float(np.mean(np.abs(pa_arr[sel] - pred[sel])))
    predicted = [float(p) if d else None for p, d in zip(pred, defined)]
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
        float(w),
        float(b),
        r2,
        mae,
        predicted=predicted,
        er=raw if trusted else none,
        er_untrusted=raw,
        trusted=trusted,
        reason="" if trusted else "ER not reported: " + "; ".join(reasons) + ".",
        **common,
    )


# ------------------------------------------------------------------------------ bootstrap over sources
@dataclass(frozen=True)
class Outcomes:
    """Per-sample 0/1 outcomes of one model in one run, with the source-image id of each sample.

    ``clean``: f(x) correct; ``recon``: f(D(E(x))) correct; ``validated``: at least one accepted step;
    ``final``: f correct on the final perturbed image.
    """

    ids: np.ndarray
    clean: np.ndarray
    recon: np.ndarray
    validated: np.ndarray
    final: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.ids)
        for name in ("clean", "recon", "validated", "final"):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"Outcomes.{name} has {len(getattr(self, name))} entries for {n} source ids."
                )

    @classmethod
    def from_records(cls, records: Sequence[dict]) -> Outcomes:
        """From ``samples.jsonl`` rows (dicts with source_id, label, clean_pred, recon_pred, validated,
        final_pred)."""
        lab = np.asarray([r["label"] for r in records], dtype=np.int64)
        get = lambda k: np.asarray([r[k] for r in records], dtype=np.int64)
        return cls(
            ids=np.asarray([str(r["source_id"]) for r in records], dtype=object),
            clean=get("clean_pred") == lab,
            recon=get("recon_pred") == lab,
            validated=np.asarray([bool(r["validated"]) for r in records], dtype=bool),
            final=get("final_pred") == lab,
        )

    def columns(self) -> np.ndarray:
        """(N, 5) float columns summed per source: [1, clean, recon, validated, validated & final]."""
        v = self.validated.astype(bool)
        return np.stack(
            [np.ones(len(self.ids)), self.clean, self.recon, v, v & self.final.astype(bool)], axis=1
        ).astype(float)


def metric_from_sums(sums: np.ndarray, metric: str, num_classes: int | None = None) -> np.ndarray:
    """A score in percent from summed columns ``[..., 5]`` (:meth:`Outcomes.columns`); NaN if undefined."""
    n, clean, recon, valid, vf = (sums[..., i] for i in range(5))
    with np.errstate(divide="ignore", invalid="ignore"):
        sa = 100.0 * clean / n
        pa = 100.0 * vf / valid
        if metric == "sa":
            out = sa
        elif metric == "ra":
            out = 100.0 * recon / n
        elif metric == "vr":
            out = 100.0 * valid / n
        elif metric == "pa":
            out = pa
        elif metric == "fmr":
            out = 100.0 * pa / sa
        elif metric == "fmr_chance_corrected":
            if not num_classes:
                raise ValueError("fmr_chance_corrected needs num_classes (C in 100*(PA-100/C)/(SA-100/C)).")
            c = 100.0 / num_classes
            den = sa - c
            out = np.where(np.abs(den) < 1e-12, np.nan, 100.0 * (pa - c) / np.where(den == 0, 1.0, den))
        else:
            raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}.")
    return np.where(np.isfinite(out), out, np.nan)


def _clusters(id_arrays: Sequence[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """Map every sample of every array to the index of its source id in the union of ids."""
    allids = np.concatenate([np.asarray(a, dtype=object) for a in id_arrays]) if id_arrays else np.array([])
    uniq, inv = np.unique(allids.astype(str), return_inverse=True)
    out, start = [], 0
    for a in id_arrays:
        out.append(inv[start : start + len(a)])
        start += len(a)
    return out, len(uniq)


def _sum_by(cols: np.ndarray, inv: np.ndarray, g: int) -> np.ndarray:
    """(G, K): column sums per cluster."""
    out = np.zeros((g, cols.shape[1]))
    np.add.at(out, inv, cols)
    return out


def _count_chunks(rng: np.random.Generator, g: int, n_boot: int, chunk: int = 256):
    """Bootstrap resample counts over ``g`` clusters, (chunk, g) at a time (memory stays small)."""
    done = 0
    while done < n_boot:
        m = min(chunk, n_boot - done)
        yield rng.multinomial(g, np.full(g, 1.0 / g), size=m).astype(float)
        done += m


def _mean_over_reps(per_rep: np.ndarray) -> np.ndarray:
    """nan-aware mean over the last axis (repetitions); NaN where every repetition is undefined."""
    ok = ~np.isnan(per_rep)
    cnt = ok.sum(-1)
    tot = np.where(ok, per_rep, 0.0).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)


def _percentile(draws: np.ndarray, level: float) -> tuple[float | None, float | None]:
    d = draws[~np.isnan(draws)]
    if len(d) == 0:
        return None, None
    a = (1 - level) / 2
    return float(np.quantile(d, a)), float(np.quantile(d, 1 - a))


StatFn = Callable[[np.ndarray], np.ndarray]


def bootstrap_scores(
    reps: Sequence[Outcomes],
    num_classes: int,
    metrics: Sequence[str] = METRICS,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Estimate]:
    """Mean over repetitions of each score, with a percentile interval from a bootstrap over source images.

    A source image's samples in *all* repetitions move together (they share the image, so they are not
    independent), and each resample recomputes every repetition's score before averaging.
    """
    if not reps:
        raise ValueError("bootstrap_scores needs at least one repetition.")
    invs, g = _clusters([o.ids for o in reps])
    sums = np.stack([_sum_by(o.columns(), inv, g) for o, inv in zip(reps, invs)])  # (R, G, 5)
    point_sums = sums.sum(1)  # (R, 5)
    draws: dict[str, list[np.ndarray]] = {m: [] for m in metrics}
    rng = np.random.default_rng(seed)
    for counts in _count_chunks(rng, g, n_boot):
        s = np.einsum("bg,rgk->brk", counts, sums)
        for m in metrics:
            draws[m].append(_mean_over_reps(metric_from_sums(s, m, num_classes)))
    n_total = int(sum(len(o.ids) for o in reps))
    out = {}
    for m in metrics:
        value = float(_mean_over_reps(metric_from_sums(point_sums, m, num_classes)))
        if math.isnan(value):
            out[m] = Estimate(
                None,
                None,
                None,
                n_total,
                None,
                "bootstrap",
                f"{METRIC_LABELS[m]} is undefined in every repetition",
            )
            continue
        lo, hi = _percentile(np.concatenate(draws[m]), level)
        out[m] = Estimate(
            value,
            lo,
            hi,
            n_total,
            None,
            f"mean of {len(reps)} repetitions, bootstrap({n_boot}, {g} source images)",
        )
    return out


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
    extra: dict = field(default_factory=dict)

    @property
    def excludes_zero(self) -> bool:
        """True when the 95% interval lies entirely on one side of 0 (the two models are separated)."""
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["excludes_zero"] = self.excludes_zero
        return d


def _difference(
    a_cols: Sequence[tuple[np.ndarray, np.ndarray]],
    b_cols: Sequence[tuple[np.ndarray, np.ndarray]],
    stat: Callable[[np.ndarray, str], np.ndarray],
    metrics: Sequence[str],
    names: tuple[str, str],
    n_boot: int,
    seed: int,
    level: float,
    paired: bool | None,
) -> dict[str, Difference]:
    """Core of the difference bootstrap. ``*_cols``: per repetition, (source ids, (N, K) columns).

    Paired (default when the two models share source ids): one resample of the shared sources drives both
    models; samples whose source the other model lacks are dropped. Independent: separate resamples.
    """
    shared = (
        set.intersection(*[set(map(str, i)) for i, _ in [*a_cols, *b_cols]]) if a_cols and b_cols else set()
    )
    do_pair = bool(shared) if paired is None else paired
    if do_pair and not shared:
        raise ValueError(
            f"paired difference of {names[0]} and {names[1]}: they share no source ids; "
            "use paired=False (independent bootstrap)."
        )

    def prep(cols, keep):
        if keep is None:
            return cols
        keep_arr = np.asarray(sorted(keep), dtype=str)
        return [(i[m], c[m]) for i, c in cols for m in [np.isin(i.astype(str), keep_arr)]]

    a_cols, b_cols = prep(a_cols, shared if do_pair else None), prep(b_cols, shared if do_pair else None)
    rng = np.random.default_rng(seed)
    if do_pair:
        invs, g = _clusters([i for i, _ in [*a_cols, *b_cols]])
        sa = np.stack([_sum_by(c, inv, g) for (_, c), inv in zip(a_cols, invs[: len(a_cols)])])
        sb = np.stack([_sum_by(c, inv, g) for (_, c), inv in zip(b_cols, invs[len(a_cols) :])])
        ga = gb = g
    else:
        ia, ga = _clusters([i for i, _ in a_cols])
        ib, gb = _clusters([i for i, _ in b_cols])
        sa = np.stack([_sum_by(c, inv, ga) for (_, c), inv in zip(a_cols, ia)])
        sb = np.stack([_sum_by(c, inv, gb) for (_, c), inv in zip(b_cols, ib)])
    draws: dict[str, list[np.ndarray]] = {m: [] for m in metrics}
    chunks_a = _count_chunks(rng, ga, n_boot)
    chunks_b = None if do_pair else _count_chunks(np.random.default_rng([seed, 1]), gb, n_boot)
    for ca in chunks_a:
        cb = ca if do_pair else next(chunks_b)
        xa, xb = np.einsum("bg,rgk->brk", ca, sa), np.einsum("bg,rgk->brk", cb, sb)
        for m in metrics:
            draws[m].append(_mean_over_reps(stat(xa, m)) - _mean_over_reps(stat(xb, m)))
    out = {}
    n_src = len(shared) if do_pair else ga + gb
    how = (
        f"paired bootstrap({n_boot}) over {n_src} shared source images"
        if do_pair
        else f"independent bootstrap({n_boot}) over {ga} and {gb} source images"
    )
    for m in metrics:
        va, vb = (float(_mean_over_reps(stat(s.sum(1), m))) for s in (sa, sb))
        if math.isnan(va) or math.isnan(vb):
            out[m] = Difference(
                m,
                *names,
                None,
                None,
                None,
                do_pair,
                n_src,
                how,
                reason=f"{METRIC_LABELS.get(m, m)} undefined for {names[0] if math.isnan(va) else names[1]}",
            )
            continue
        lo, hi = _percentile(np.concatenate(draws[m]), level)
        out[m] = Difference(
            m, *names, va - vb, lo, hi, do_pair, n_src, how, extra={"a_value": va, "b_value": vb}
        )
    return out


def paired_difference(
    a_correct: Sequence[bool],
    b_correct: Sequence[bool],
    ids: Sequence[str],
    *,
    a_mask: Sequence[bool] | None = None,
    b_mask: Sequence[bool] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    names: tuple[str, str] = ("a", "b"),
) -> Difference:
    """Difference of two accuracies (points), paired bootstrap over the source ids ``ids``.

    ``a_correct[i]`` and ``b_correct[i]`` are the two models' outcomes on the same sample ``ids[i]``
    (repeated ids are one source and are resampled together). ``a_mask``/``b_mask`` restrict each
    accuracy's denominator (e.g. PA counts validated samples only; they may differ between the models).
    """
    ids = np.asarray([str(i) for i in ids], dtype=object)
    a, b = np.asarray(a_correct, dtype=bool), np.asarray(b_correct, dtype=bool)
    if not len(a) == len(b) == len(ids):
        raise ValueError(
            f"paired_difference needs aligned arrays: {len(a)} and {len(b)} outcomes for {len(ids)} ids."
        )
    am = np.ones(len(a), bool) if a_mask is None else np.asarray(a_mask, dtype=bool)
    bm = np.ones(len(b), bool) if b_mask is None else np.asarray(b_mask, dtype=bool)
    cols = lambda c, m: np.stack([m, c & m], axis=1).astype(float)

    def stat(s: np.ndarray, _m: str) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(s[..., 0] > 0, 100.0 * s[..., 1] / np.where(s[..., 0] > 0, s[..., 0], 1), np.nan)

    return _difference(
        [(ids, cols(a, am))],
        [(ids, cols(b, bm))],
        stat,
        ["accuracy"],
        names,
        n_boot,
        seed,
        level,
        paired=True,
    )["accuracy"]


def metric_differences(
    a_reps: Sequence[Outcomes],
    b_reps: Sequence[Outcomes],
    num_classes: int,
    metrics: Sequence[str] = ("sa", "vr", "pa", "fmr", "fmr_chance_corrected"),
    *,
    names: tuple[str, str] = ("a", "b"),
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    paired: bool | None = None,
) -> dict[str, Difference]:
    """Differences (a - b, points) of scores averaged over repetitions, FMR included, with 95% intervals.

    Repetition r of ``a`` is paired with repetition r of ``b``: each sample's pairing key is
    ``(repetition, source id)``, and the bootstrap resamples source ids (all repetitions together).
    ``paired=None`` pairs when the two models share source ids, else resamples them independently.
    """
    if len(a_reps) == 0 or len(b_reps) == 0:
        raise ValueError(
            f"metric_differences needs at least one repetition per model ({names[0]}: "
            f"{len(a_reps)}, {names[1]}: {len(b_reps)})."
        )

    def cols(reps):
        return [(np.asarray([str(i) for i in o.ids], dtype=object), o.columns()) for o in reps]

    r = min(len(a_reps), len(b_reps))  # pair repetition r with repetition r
    return _difference(
        cols(a_reps[:r]),
        cols(b_reps[:r]),
        lambda s, m: metric_from_sums(s, m, num_classes),
        metrics,
        names,
        n_boot,
        seed,
        level,
        paired,
    )
