"""Selective prediction, calibration and OOD detection from a run's recorded confidence (S2: Hendrycks et al.,
*Natural Adversarial Examples*, CVPR 2021, Sec. 3 and App. 7.3; docs/scores.md, "Confidence").

Every score here reads the classifier's maximum softmax probability (MSP, the first of a record's
``clean_top_probs`` / ``final_top_probs``) and whether its answer was right, per sample:

* :func:`rra_curve` / :func:`aurra`: the response-rate accuracy curve (keep the fraction ``p`` of samples the
  classifier is most confident on, measure the accuracy on them; at ``p = 1`` it is the accuracy) and the area
  under it (AURRA). Written by hand as the authors' ``calibration_tools.aurra`` computes it (the mean of the curve
  over the response rates ``k/N``), with one change: confidence ties keep the data's order (a stable sort), so the
  value does not depend on how numpy breaks ties.
* :func:`calibration_error`: the RMS (l2) calibration error ``sqrt(sum_b |b|/N (conf_b - acc_b)^2)`` with the
  paper's binning: samples sorted by confidence, consecutive bins of :data:`BIN_SIZE` = 100 samples (the
  authors' ``calib_err(..., p='2', beta=100)``), the remainder joining the last bin. The authors' loop leaves the
  last bin out (``range(len(bins) - 1)``); here every sample counts, and fewer than 100 samples are one bin. No
  library computes adaptive (equal-mass) bins, so this is hand-written; :func:`calibration_error_uniform` is the
  same l2 error over 15 equal-width bins, from torchmetrics (``binary_calibration_error(norm='l2')``), which
  computes that binning exactly (a point value: torchmetrics scores one set per call, too slow for a bootstrap).
* :func:`anomaly_detection`: -MSP as the anomaly score, AUPR (the paper's ImageNet-O metric, ``sklearn``'s
  ``average_precision_score`` with the anomalies as the positive class) and AUROC (``roc_auc_score``).

:func:`run_confidence` gathers them for one run (results.json ``confidence``): on the clean images (every source:
the population of SA) and on the validated perturbed images (the population of PA), each with a percentile
bootstrap interval over the run's sources (``scipy.stats.bootstrap``); the -MSP detection of the validated
perturbed images against their own clean sources (``shift``: paired); and, given an OOD set's MSPs, its detection
against the clean images (``ood``). Values are in percent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from genEval.scores.intervals import MIN_BOOTSTRAP_SOURCES, N_BOOT, Estimate, few_sources
from genEval.scores.outcomes import SampleRecord

#: Samples per bin of the RMS calibration error (the authors' ``calib_err`` default, ``beta=100``).
BIN_SIZE = 100
#: Equal-width bins of :func:`calibration_error_uniform` (torchmetrics' default).
UNIFORM_BINS = 15
#: Points of a response-rate accuracy curve kept in results.json (the report draws it).
CURVE_POINTS = 101
NOT_RECORDED = (
    "not recorded: the run's records hold no classifier confidence (written by an older genEval); rerun the evaluation"
)
#: What the ``shift`` row means (docs/scores.md, "Confidence").
SHIFT_MEANING = (
    "-MSP separating the validated perturbed images (positives) from their own clean sources: high when the model's "
    "confidence drops on the images genEval made (it 'notices' them); 50 AUROC when it cannot tell them apart"
)


# ------------------------------------------------------------------------------------------ the scores
def _arrays(confidence: Sequence[float], correct: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    conf, ok = np.asarray(confidence, dtype=float).reshape(-1), np.asarray(correct, dtype=float).reshape(-1)
    if len(conf) != len(ok):
        raise ValueError(f"confidence has {len(conf)} entries but correct has {len(ok)}; pass one of each per sample.")
    return conf, ok


def rra_curve(confidence: Sequence[float], correct: Sequence[bool]) -> np.ndarray:
    """The response-rate accuracy curve: entry ``k-1`` is the accuracy (in [0, 1]) on the ``k`` samples of highest
    confidence, ``k = 1..N`` (response rate ``k/N``). ``confidence`` (N,) the MSP, ``correct`` (N,) 0/1."""
    conf, ok = _arrays(confidence, correct)
    order = np.argsort(-conf, kind="stable")
    return np.cumsum(ok[order]) / np.arange(1, len(ok) + 1)


def aurra(confidence: Sequence[float], correct: Sequence[bool]) -> float | None:
    """AURRA in percent: the area under :func:`rra_curve` over the response rates ``k/N`` (its mean); None for no
    samples. A classifier that is surest where it is right scores above its accuracy, one whose confidence says
    nothing scores its accuracy on average."""
    curve = rra_curve(confidence, correct)
    return None if len(curve) == 0 else 100.0 * float(curve.mean())


def calibration_error(confidence: Sequence[float], correct: Sequence[bool], bin_size: int = BIN_SIZE) -> float | None:
    """RMS calibration error in percent with the paper's adaptive binning (see the module docstring): bins of
    ``bin_size`` consecutive samples in confidence order, the remainder in the last; None for no samples."""
    conf, ok = _arrays(confidence, correct)
    n = len(conf)
    if n == 0:
        return None
    order = np.argsort(conf, kind="stable")
    conf, ok = conf[order], ok[order]
    edges = [i * bin_size for i in range(max(1, n // bin_size))] + [n]  # the remainder joins the last bin
    sq = sum((b - a) / n * (conf[a:b].mean() - ok[a:b].mean()) ** 2 for a, b in zip(edges[:-1], edges[1:]))
    return 100.0 * float(np.sqrt(sq))


def calibration_error_uniform(confidence: Sequence[float], correct: Sequence[bool], n_bins: int = UNIFORM_BINS):
    """The l2 calibration error in percent over ``n_bins`` equal-width confidence bins, from torchmetrics
    (``binary_calibration_error(preds=confidence, target=correct, norm='l2')``); None for no samples."""
    conf, ok = _arrays(confidence, correct)
    if len(conf) == 0:
        return None
    import torch  # torchmetrics is a torch library; both imported only where this is computed
    from torchmetrics.functional.classification import binary_calibration_error

    value = binary_calibration_error(
        torch.as_tensor(conf, dtype=torch.float64), torch.as_tensor(ok, dtype=torch.long), n_bins=n_bins, norm="l2"
    )
    return 100.0 * float(value)


def anomaly_detection(in_msp: Sequence[float], out_msp: Sequence[float]) -> tuple[float | None, float | None]:
    """(AUPR, AUROC) in percent of -MSP as an anomaly score, the ``out`` samples the positive class (S2's ImageNet-O
    metric: chance AUPR is the share of positives). None for both without samples of both groups."""
    a, b = np.asarray(in_msp, dtype=float).reshape(-1), np.asarray(out_msp, dtype=float).reshape(-1)
    if not len(a) or not len(b):
        return None, None
    from sklearn.metrics import average_precision_score, roc_auc_score  # slow import: only where it is computed

    y, score = np.r_[np.zeros(len(a)), np.ones(len(b))], -np.r_[a, b]
    return 100.0 * float(average_precision_score(y, score)), 100.0 * float(roc_auc_score(y, score))


# ------------------------------------------------------------------------------------------ batched (the bootstrap)
# The bootstrap recomputes a score on n_boot resamples at once: these take (B, N) arrays (one resample a row) and
# return (B,). The AURRA and calibration rows are the functions above, row by row; the AUROC rows are the
# Mann-Whitney statistic and the AUPR rows sklearn's average precision (ties grouped as it groups them), written
# out because sklearn scores one set per call; tests/scores/test_confidence.py checks both against sklearn.
def _aurra_rows(conf: np.ndarray, ok: np.ndarray) -> np.ndarray:
    order = np.argsort(-conf, axis=1, kind="stable")
    hits = np.take_along_axis(ok, order, axis=1).cumsum(1)
    return 100.0 * (hits / np.arange(1, conf.shape[1] + 1)).mean(1)


def _calibration_rows(conf: np.ndarray, ok: np.ndarray, bin_size: int = BIN_SIZE) -> np.ndarray:
    n = conf.shape[1]
    order = np.argsort(conf, axis=1, kind="stable")
    c, k = np.take_along_axis(conf, order, axis=1), np.take_along_axis(ok, order, axis=1)
    starts = np.array([i * bin_size for i in range(max(1, n // bin_size))])
    sizes = np.diff(np.r_[starts, n])
    gap = (np.add.reduceat(c, starts, axis=1) - np.add.reduceat(k, starts, axis=1)) / sizes
    return 100.0 * np.sqrt((sizes / n * gap**2).sum(1))


def _auroc_rows(neg: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """AUROC of the anomaly score ``-msp``: ``neg`` / ``pos`` (B, n0) / (B, n1) MSPs (Mann-Whitney U / n0 n1)."""
    from scipy.stats import rankdata

    ranks = rankdata(-np.concatenate([neg, pos], axis=1), axis=1)  # average ranks for ties
    n0, n1 = neg.shape[1], pos.shape[1]
    u = ranks[:, n0:].sum(1) - n1 * (n1 + 1) / 2
    return 100.0 * u / (n0 * n1)


def _aupr_rows(neg: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Average precision of the anomaly score ``-msp`` with the positives ``pos``, tied scores as one threshold."""
    score = -np.concatenate([neg, pos], axis=1)
    label = np.concatenate([np.zeros_like(neg), np.ones_like(pos)], axis=1)
    order = np.argsort(-score, axis=1, kind="stable")
    s, y = np.take_along_axis(score, order, axis=1), np.take_along_axis(label, order, axis=1)
    tp = y.cumsum(1)
    seen = np.arange(1, s.shape[1] + 1)
    end = np.ones_like(s, dtype=bool)
    end[:, :-1] = s[:, 1:] != s[:, :-1]  # the last of each run of tied scores
    tp_end = np.where(end, tp, 0.0)
    before = np.zeros_like(tp_end)
    before[:, 1:] = np.maximum.accumulate(tp_end, axis=1)[:, :-1]  # tp at the previous threshold
    gain = np.where(end, (tp - before) * tp / seen, 0.0)
    return 100.0 * gain.sum(1) / pos.shape[1]


# ------------------------------------------------------------------------------------------ intervals
def _estimate(
    statistic: Callable[..., float | None],
    data: tuple[np.ndarray, ...],
    *,
    paired: bool,
    n_boot: int,
    seed: int,
    level: float,
    what: str,
    rows: Callable[..., np.ndarray] | None = None,
) -> Estimate:
    """``statistic(*data)`` with a percentile bootstrap interval (``scipy.stats.bootstrap``: resampling the samples
    together when ``paired``, each group on its own otherwise; ``rows`` computes the statistic on (B, N) resamples,
    None: no interval); no interval below :data:`~genEval.scores.intervals.MIN_BOOTSTRAP_SOURCES` samples in a
    group."""
    n = int(sum(len(d) for d in data)) if not paired else int(len(data[0]))
    value = statistic(*data)
    if value is None:
        return Estimate(None, None, None, n, None, "bootstrap", f"no {what}")
    if rows is None:
        return Estimate(value, None, None, n, None, "point value", "no bootstrap: torchmetrics scores one set per call")
    smallest = min(len(d) for d in data)
    if smallest < MIN_BOOTSTRAP_SOURCES:
        return Estimate(value, None, None, n, None, "bootstrap", few_sources(smallest, what))
    from scipy.stats import bootstrap  # slow import (about 0.8 s)

    def stat(*resampled: np.ndarray, axis: int = -1) -> np.ndarray:
        flat = [np.moveaxis(np.asarray(r, dtype=float), axis, -1) for r in resampled]
        shape = flat[0].shape[:-1]
        out = rows(*(f.reshape(-1, f.shape[-1]) for f in flat))
        return out.reshape(shape)

    res = bootstrap(
        tuple(np.asarray(d, dtype=float) for d in data),
        stat,
        n_resamples=n_boot,
        batch=100,  # memory stays at 100 resamples x N
        paired=paired,
        vectorized=True,
        confidence_level=level,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    low, high = (float(v) for v in (res.confidence_interval.low, res.confidence_interval.high))
    if not (np.isfinite(low) and np.isfinite(high)):
        return Estimate(value, None, None, n, None, f"bootstrap({n_boot})", "the bootstrap was undefined")
    return Estimate(value, min(low, value), max(high, value), n, None, f"bootstrap({n_boot}, {what})")


# ------------------------------------------------------------------------------------------ one run
@dataclass(frozen=True)
class Confidences:
    """The confidence a run's records hold, as arrays over the samples that recorded it: ``ids``, ``labels``,
    the MSP and correctness on the clean image (``clean_msp``, ``clean_correct``) and on the final image
    (``final_msp``, ``final_correct``), ``validated``, the final image's top-2 probability (``final_second``, 0 for
    one class), the classifier's and the oracle's class for the final image (``final_pred``,
    ``oracle_final_pred``), the whole softmax rows of the final image (``final_probs``, (N, K); None unless every
    record kept its vector) and the top-k rows (``final_top_probs``, ``final_top_classes``). ``missing``: samples
    without recorded confidence (left out)."""

    ids: np.ndarray
    labels: np.ndarray
    clean_msp: np.ndarray
    clean_correct: np.ndarray
    final_msp: np.ndarray
    final_second: np.ndarray
    final_correct: np.ndarray
    final_pred: np.ndarray
    oracle_final_pred: np.ndarray
    validated: np.ndarray
    final_top_probs: list[tuple[float, ...]]
    final_top_classes: list[tuple[int, ...]]
    final_probs: np.ndarray | None
    missing: int = 0

    @classmethod
    def of(cls, records: Sequence[SampleRecord]) -> Confidences:
        have = [r for r in records if r.clean_top_probs is not None and r.final_top_probs is not None]

        def col(fn: Callable[[SampleRecord], Any], dtype: Any = float) -> np.ndarray:
            return np.asarray([fn(r) for r in have], dtype=dtype)

        full = [r.final_probs for r in have]
        return cls(
            ids=col(lambda r: r.source_id, object),
            labels=col(lambda r: r.label, np.int64),
            clean_msp=col(lambda r: r.clean_top_probs[0]),
            clean_correct=col(lambda r: r.clean_pred == r.label, bool),
            final_msp=col(lambda r: r.final_top_probs[0]),
            final_second=col(lambda r: r.final_top_probs[1] if len(r.final_top_probs) > 1 else 0.0),
            final_correct=col(lambda r: r.final_pred == r.label, bool),
            final_pred=col(lambda r: r.final_pred, np.int64),
            oracle_final_pred=col(lambda r: -1 if r.oracle_final_pred is None else r.oracle_final_pred, np.int64),
            validated=col(lambda r: r.validated, bool),
            final_top_probs=[r.final_top_probs for r in have],
            final_top_classes=[r.final_top_classes or () for r in have],
            final_probs=np.asarray(full, dtype=float) if have and all(f is not None for f in full) else None,
            missing=len(records) - len(have),
        )

    def __len__(self) -> int:
        return len(self.ids)

    def subset(self, mask: np.ndarray) -> Confidences:
        """The samples where ``mask`` (N,) is True."""
        idx = np.flatnonzero(mask)
        take = {k: getattr(self, k)[idx] for k in self.__dataclass_fields__ if isinstance(getattr(self, k), np.ndarray)}
        lists = {k: [getattr(self, k)[i] for i in idx] for k in ("final_top_probs", "final_top_classes")}
        return Confidences(**{**asdict_shallow(self), **take, **lists})


def asdict_shallow(obj: Any) -> dict[str, Any]:
    """A dataclass's fields as a dict without copying them (``dataclasses.asdict`` deep-copies arrays)."""
    return {k: getattr(obj, k) for k in obj.__dataclass_fields__}


@dataclass(frozen=True)
class SelectivePrediction:
    """One population's selective prediction and calibration: AURRA, the RMS calibration error (paper binning)
    and the same over equal-width bins, the accuracy and the mean MSP (percent), with the response-rate accuracy
    curve as ``[response rate, accuracy]`` points (at most :data:`CURVE_POINTS`)."""

    n: int
    accuracy: float | None
    mean_msp: float | None
    aurra: Estimate
    calibration_error: Estimate
    calibration_error_uniform: Estimate
    curve: list[list[float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SelectivePrediction:
        est = {k: Estimate(**d[k]) for k in ("aurra", "calibration_error", "calibration_error_uniform")}
        return cls(d["n"], d.get("accuracy"), d.get("mean_msp"), **est, curve=list(d.get("curve") or []))


def selective_prediction(
    msp: np.ndarray, correct: np.ndarray, *, n_boot: int = N_BOOT, seed: int = 0, level: float = 0.95, what: str
) -> SelectivePrediction:
    """AURRA and the calibration errors of one population (``msp``, ``correct`` over its samples), each with a
    bootstrap interval over the samples (a run has one sample per source: over the sources)."""
    kw = dict(paired=True, n_boot=n_boot, seed=seed, level=level, what=what)
    curve = rra_curve(msp, correct)
    pick = np.unique(np.linspace(0, len(curve) - 1, min(CURVE_POINTS, len(curve))).round().astype(int))
    return SelectivePrediction(
        n=len(msp),
        accuracy=100.0 * float(np.mean(correct)) if len(msp) else None,
        mean_msp=100.0 * float(np.mean(msp)) if len(msp) else None,
        aurra=_estimate(aurra, (msp, correct), rows=_aurra_rows, **kw),
        calibration_error=_estimate(calibration_error, (msp, correct), rows=_calibration_rows, **kw),
        calibration_error_uniform=_estimate(calibration_error_uniform, (msp, correct), **kw),
        curve=[[round((i + 1) / len(curve), 6), round(100.0 * float(curve[i]), 4)] for i in pick] if len(curve) else [],
    )


@dataclass(frozen=True)
class Detection:
    """-MSP as an anomaly score between two sets of images: AUPR and AUROC (percent, with bootstrap intervals),
    ``n_in`` / ``n_out`` the negatives and positives, ``chance_aupr`` the share of positives, ``what`` and
    ``meaning`` say which sets."""

    what: str
    n_in: int
    n_out: int
    aupr: Estimate
    auroc: Estimate
    chance_aupr: float | None
    meaning: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Detection:
        return cls(**{**d, "aupr": Estimate(**d["aupr"]), "auroc": Estimate(**d["auroc"])})


def detection(
    in_msp: np.ndarray,
    out_msp: np.ndarray,
    *,
    paired: bool,
    what: str,
    meaning: str = "",
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = 0.95,
) -> Detection:
    """:func:`anomaly_detection` with bootstrap intervals: ``paired`` resamples (in, out) pairs together (the same
    sources), else each set on its own."""
    kw = dict(paired=paired, n_boot=n_boot, seed=seed, level=level, what="images" if not paired else "sources")
    total = len(in_msp) + len(out_msp)
    return Detection(
        what,
        len(in_msp),
        len(out_msp),
        _estimate(lambda a, b: anomaly_detection(a, b)[0], (in_msp, out_msp), rows=_aupr_rows, **kw),
        _estimate(lambda a, b: anomaly_detection(a, b)[1], (in_msp, out_msp), rows=_auroc_rows, **kw),
        100.0 * len(out_msp) / total if total else None,
        meaning,
    )


@dataclass(frozen=True)
class RunConfidence:
    """A run's confidence scores (results.json ``confidence``): ``clean`` over every source's clean image,
    ``perturbed`` over the validated perturbed images, ``shift`` the -MSP detection of those perturbed images
    against their own clean sources, ``ood`` the detection of an OOD set against the clean images (None without
    one); ``recorded`` False (with ``reason``) for a run whose records hold no confidence. ``binning`` names the
    calibration binning."""

    recorded: bool
    clean: SelectivePrediction | None = None
    perturbed: SelectivePrediction | None = None
    shift: Detection | None = None
    ood: Detection | None = None
    binning: str = (
        f"RMS (l2) calibration error over bins of {BIN_SIZE} samples in confidence order (Hendrycks et al.'s "
        f"calib_err, beta={BIN_SIZE}; remainder in the last bin); calibration_error_uniform: {UNIFORM_BINS} "
        "equal-width bins (torchmetrics)"
    )
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "recorded": self.recorded,
            **{k: None if getattr(self, k) is None else getattr(self, k).to_dict() for k in _PARTS},
            "binning": self.binning,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> RunConfidence:
        """Inverse of :meth:`to_dict`; None (a results.json of an older genEval) reads as not recorded."""
        if not d:
            return cls(False, reason=NOT_RECORDED)
        parts = {
            k: None
            if d.get(k) is None
            else (SelectivePrediction if k in ("clean", "perturbed") else Detection).from_dict(d[k])
            for k in _PARTS
        }
        return cls(bool(d.get("recorded")), **parts, binning=d.get("binning", ""), reason=d.get("reason", ""))

    def lines(self) -> list[str]:
        """The lines of a run's summary."""
        if not self.recorded:
            return [f"  confidence: {self.reason}"]
        out = []
        for name, part in (("clean", self.clean), ("perturbed", self.perturbed)):
            if part is not None:
                out.append(
                    f"  {name + ':':<10} AURRA {part.aurra.fmt()}  RMS calibration error "
                    f"{part.calibration_error.fmt()}  (n={part.n})"
                )
        for det in (self.shift, self.ood):
            if det is not None:
                out.append(
                    f"  -MSP {det.what}: AUPR {det.aupr.fmt()} (chance {det.chance_aupr or 0:.2f})  AUROC "
                    f"{det.auroc.fmt()}"
                )
        return out


_PARTS = ("clean", "perturbed", "shift", "ood")


def run_confidence(
    records: Sequence[SampleRecord],
    ood_msp: Sequence[float] | None = None,
    *,
    ood_name: str = "OOD images",
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = 0.95,
) -> RunConfidence:
    """Every confidence score of one run (see the module docstring) from its records, and from the MSPs of an OOD
    set's images when one was given (``ood_msp``, named ``ood_name``)."""
    c = Confidences.of(records)
    if not len(c):
        return RunConfidence(False, reason=NOT_RECORDED if records else "no samples")
    kw = dict(n_boot=n_boot, seed=seed, level=level)
    v = c.validated
    ood = None
    if ood_msp is not None:
        ood = detection(
            c.clean_msp,
            np.asarray(ood_msp, dtype=float),
            paired=False,
            what=f"{ood_name} vs the clean images",
            meaning="-MSP separating images of classes outside the label set (positives) from the clean test images",
            **kw,
        )
    return RunConfidence(
        True,
        clean=selective_prediction(c.clean_msp, c.clean_correct, what="sources", **kw),
        perturbed=selective_prediction(c.final_msp[v], c.final_correct[v], what="validated sources", **kw),
        shift=detection(
            c.clean_msp[v],
            c.final_msp[v],
            paired=True,
            what="validated perturbed vs their clean sources",
            meaning=SHIFT_MEANING,
            **kw,
        ),  # fmt: skip
        ood=ood,
        reason="" if not c.missing else f"{c.missing} records without confidence left out",
    )
