"""Scores and their uncertainty (paper Sec. 3.3; METHOD.md "Scores").

* SA  = accuracy of ``f`` on the clean images (all samples).
* RA  = accuracy of ``f`` on the generator's reconstructions ``D(E(x))`` (the generator gap).
* VR  = validated / all samples (paper App. J).
* PA  = accuracy of ``f`` on the perturbed images, over validated samples only (undefined when none).
* FMR = 100 * PA / SA; chance-corrected FMR = 100 * (PA - 100/C) / (SA - 100/C).

Proportions get Wilson (default) or Clopper-Pearson 95% intervals; FMR, a ratio, gets a percentile
bootstrap over *source images* (``digest.md``: intervals at the level of source images), so repeated
samples of one source image move together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

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
