"""Scoring classifiers on static snapshots: re-scoring one model and the transfer matrix (paper App. D, O).

A snapshot (:mod:`genEval.snapshots.manifest`) stores the perturbed images *and* their originals, so any classifier
can be scored on it with no access to the source data set: PA on the perturbed images and ``sa`` on the
originals (percent, 95% Wilson or Clopper-Pearson intervals over the snapshot's samples). The originals are
those of the *validated* samples only, so ``sa`` is SA_v. FMR has one definition everywhere (docs/method.md,
"The scores"): ``fmr = 100 * PA / SA_full``, with SA_full the classifier's clean accuracy over the
*whole* sample of the run (every source image, validated or not). The export stores the tested model's in
the manifest (``Manifest.full_sample_sa``); for another classifier it is given (``sa_full=`` / ``clean_accuracy=``)
or taken from a snapshot made against it (:func:`transfer_matrix`). ``fmr_validated = 100 * PA / SA_v``
stands beside it. :func:`transfer_matrix` scores every target model on every source snapshot, as in the
paper's Table 6: images generated against one model, scored on others.
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from genEval.fileio import atomic_write_bytes
from genEval.interfaces import check_batch_size, component_id, hook
from genEval.scores.definitions import fmr_value
from genEval.scores.intervals import Estimate, format_estimate, proportion
from genEval.snapshots.manifest import SnapshotError
from genEval.snapshots.reader import Snapshot, SnapshotDataset, load_snapshot

#: What a full-sample SA may be given as: an estimate, its dict form (results.json, the manifest) or a percent.
FullSA = Estimate | Mapping[str, Any] | float | int


def classifier_name(classifier: Any) -> str:
    return component_id(classifier)


def check_classes(classifier: Any, class_names: list[str], where: str, cname: str) -> None:
    """Refuse a classifier whose ``num_classes`` differs from the snapshot's class list."""
    k = hook(classifier, "num_classes")
    if k is not None and int(k) != len(class_names):
        shown = ", ".join(class_names[:10]) + (", ..." if len(class_names) > 10 else "")
        raise SnapshotError(
            f"classifier {cname} has {int(k)} classes but snapshot '{where}' has "
            f"{len(class_names)} ({shown}). Use a classifier trained on the snapshot's classes."
        )


def on_device(classifier: Any, device: torch.device | str) -> torch.device:
    """``torch.device(device)``, with ``classifier`` moved there and put in eval mode when it is a Module."""
    dev = torch.device(device)
    if isinstance(classifier, torch.nn.Module):
        classifier.to(dev).eval()
    return dev


def predict(
    ds: SnapshotDataset, classifier: Any, dev: torch.device, batch_size: int, cname: str
) -> tuple[Tensor, Tensor]:
    """Predictions ``(N,)`` long and true-class softmax probabilities ``(N,)`` of ``classifier`` on ``ds``.

    One forward pass per image size within a batch (a filtered snapshot may pool several sizes).
    """
    batch_size = check_batch_size(batch_size, nullable=False)
    n, nc = len(ds), len(ds.class_names)
    preds = torch.empty(n, dtype=torch.long)
    p_true = torch.empty(n)
    labels = torch.tensor(ds.labels, dtype=torch.long)
    with torch.no_grad():
        for start in range(0, n, batch_size):
            arrays = {i: ds.uint8(i) for i in range(start, min(n, start + batch_size))}
            by_shape: dict[tuple[int, ...], list[int]] = defaultdict(list)
            for i, a in arrays.items():
                by_shape[a.shape].append(i)
            for rows in by_shape.values():
                x = torch.from_numpy(np.stack([arrays[i] for i in rows])).to(dev).float().div(255)
                logits = classifier(x)
                if logits.ndim != 2 or logits.shape[1] != nc:
                    raise SnapshotError(
                        f"classifier {cname} returned logits shaped {tuple(logits.shape)} but "
                        f"snapshot '{ds.root}' has {nc} classes; use a classifier trained on them."
                    )
                r = torch.tensor(rows)
                prob = logits.float().softmax(1).cpu()
                preds[r] = prob.argmax(1)
                p_true[r] = prob.gather(1, labels[r][:, None])[:, 0]
    return preds, p_true


# --------------------------------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class SnapshotScore:
    """One classifier on one snapshot: PA (perturbed), ``sa`` (originals of the validated samples: SA_v),
    ``sa_full`` (over the run's whole sample; None when unknown), ``fmr = 100 PA / SA_full`` (None with
    ``fmr_reason`` when SA_full is unknown), ``fmr_validated = 100 PA / SA_v``, per class, and the predictions."""

    snapshot: str
    classifier: str
    n: int
    pa: Estimate
    sa: Estimate
    fmr: float | None
    class_names: list[str]
    tested_models: list[str]
    filtered_with: list[str]
    per_class: list[dict[str, Any]]  # {"class", "n", "pa", "sa"} in percent
    predictions: list[int]  # on the perturbed images, snapshot order
    original_predictions: list[int]
    sa_full: Estimate | None = None
    fmr_validated: float | None = None
    fmr_reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """The one-screen summary ``geneval score`` prints."""
        pa, sa = asdict(self.pa), asdict(self.sa)
        fmr = f"undefined ({self.fmr_reason})" if self.fmr is None else f"{self.fmr:.2f}"
        full = "unknown" if self.sa_full is None else format_estimate(self.sa_full, with_reason=True)
        lines = [
            f"snapshot {self.snapshot}  n={self.n}  classes={len(self.class_names)}",
            f"  classifier: {self.classifier}   (snapshot made against: {', '.join(self.tested_models)})",
            f"  SA (originals)  {format_estimate(sa, with_reason=True)}   ({sa['k']}/{sa['n']}: the validated samples, "
            "SA_v)",
            f"  SA (full sample of the run)  {full}",
            f"  PA (perturbed)  {format_estimate(pa, with_reason=True)}   ({pa['k']}/{pa['n']})",
            f"  FMR  {fmr}   (100 PA / SA_full)",
            f"  FMR_v  {'undefined' if self.fmr_validated is None else f'{self.fmr_validated:.2f}'}   "
            "(100 PA / SA_v, over the snapshot's samples)",
        ]
        if self.filtered_with:
            lines.append(f"  filtered with: {', '.join(self.filtered_with)}")
        return "\n".join(lines)


def full_sa(value: FullSA | None) -> Estimate | None:
    """A full-sample SA as an :class:`Estimate` (None stays None; a number gets no interval)."""
    if value is None or isinstance(value, Estimate):
        return value
    if isinstance(value, Mapping):
        if value.get("value") is None:
            return None
        return Estimate(
            float(value["value"]),
            value.get("low"),
            value.get("high"),
            int(value.get("n") or 0),
            value.get("k"),
            str(value.get("method") or ""),
            str(value.get("reason") or ""),
        )
    return Estimate(float(value), None, None, 0, None, "given")


def manifest_sa_full(snap: Snapshot) -> Estimate | None:
    """The tested model's SA over the whole sample of the run an exported snapshot came from (``full_sample_sa``;
    for manifests written before that field, the run's scores, which hold the same number). None for a
    filtered snapshot (a selection pooled from several runs has no such sample)."""
    m = snap.manifest
    if m.kind != "export":
        return None
    return full_sa(m.full_sample_sa or (m.run_scores or {}).get("sa"))


def _fmr_full(pa: Estimate, sa_full: Estimate | None, why_unknown: str) -> tuple[float | None, str]:
    if sa_full is None:
        return None, why_unknown
    value = fmr_value(sa_full.value, pa.value)
    return value, "" if value is not None else "PA undefined or SA_full is 0"


def score_loaded(
    snap: Snapshot,
    classifier: Any,
    device: torch.device | str,
    batch_size: int,
    interval: str,
    cname: str,
    sa_full: FullSA | None = None,
) -> SnapshotScore:
    """:func:`score_snapshot` on a snapshot already loaded lazily. ``sa_full``: the classifier's full-sample SA
    (default: the manifest's when ``cname`` is the snapshot's one tested model)."""
    where = str(snap.path)
    check_classes(classifier, snap.class_names, where, cname)
    dev = on_device(classifier, device)
    labels, n = snap.labels, len(snap)
    pp, _ = predict(snap.images, classifier, dev, batch_size, cname)
    po, _ = predict(snap.originals, classifier, dev, batch_size, cname)
    cp, co = pp == labels, po == labels
    per_class = []
    for k, name in enumerate(snap.class_names):
        m = labels == k
        nk = int(m.sum())
        per_class.append(
            {
                "class": name,
                "n": nk,
                "pa": proportion(int(cp[m].sum()), nk, interval).value,
                "sa": proportion(int(co[m].sum()), nk, interval).value,
            }
        )
    pa = proportion(int(cp.sum()), n, interval, what="perturbed images")
    sa = proportion(int(co.sum()), n, interval, what="original images")
    own = snap.manifest.tested_models == [cname]
    full = full_sa(sa_full) if sa_full is not None else (manifest_sa_full(snap) if own else None)
    why = (
        f"the full-sample SA of {cname} is unknown: the snapshot was made against "
        f"{', '.join(snap.manifest.tested_models)}; pass sa_full= (its SA on the run's data)"
        if not own
        else "the snapshot's manifest holds no full-sample SA (a filtered snapshot, or exported without scores)"
    )
    fmr, fmr_reason = _fmr_full(pa, full, why)
    return SnapshotScore(
        snapshot=where,
        classifier=cname,
        n=n,
        pa=pa,
        sa=sa,
        fmr=fmr,
        class_names=snap.class_names,
        tested_models=snap.manifest.tested_models,
        filtered_with=snap.manifest.filtered_with,
        per_class=per_class,
        predictions=pp.tolist(),
        original_predictions=po.tolist(),
        sa_full=full,
        fmr_validated=fmr_value(sa.value, pa.value),
        fmr_reason=fmr_reason,
    )


def score_snapshot(
    path: str | Path,
    classifier: Any,
    batch_size: int = 64,
    device: torch.device | str = "cpu",
    interval: str = "wilson",
    verify: bool = True,
    sa_full: FullSA | None = None,
) -> SnapshotScore:
    """Accuracy of ``classifier`` on a snapshot's perturbed images (``pa``) and on their originals (``sa``).

    Both are percentages with 95% intervals (``interval``: wilson | clopper-pearson) over the snapshot's
    samples. ``fmr = 100 * pa / sa_full`` with ``sa_full`` the classifier's clean accuracy over the run's whole
    sample: given, or the manifest's when the classifier is the snapshot's tested model (else ``fmr`` is None
    and ``fmr_reason`` says why); ``fmr_validated = 100 * pa / sa``. Needs no access to the source data set
    (the originals are stored). ``device``: a torch device (the ``geneval score`` command resolves ``auto``).
    """
    snap = load_snapshot(path, lazy=True, verify=verify)
    return score_loaded(snap, classifier, device, batch_size, interval, classifier_name(classifier), sa_full)


# --------------------------------------------------------------------------------------------- transfer


@dataclass(frozen=True)
class TransferRow:
    """One cell of the transfer matrix: target model scored on source snapshot (percent; None when skipped).

    ``sa`` is the target's accuracy on the snapshot's originals (the validated samples: SA_v), ``sa_full`` its
    clean accuracy over a run's whole sample (None when unknown), ``fmr = 100 pa / sa_full`` (the one FMR) and
    ``fmr_validated = 100 pa / sa``. ``self_generated``: source and target share a name (the diagonal).
    ``used_for_filtering``: the target is one of the snapshot's ``filtered_with`` surrogates, so its accuracy
    is not a transfer result. The field order is the CSV's column order.
    """

    source: str
    target: str
    n: int
    pa: float | None
    pa_low: float | None
    pa_high: float | None
    sa: float | None
    sa_low: float | None
    sa_high: float | None
    sa_full: float | None
    fmr: float | None
    fmr_validated: float | None
    self_generated: bool
    used_for_filtering: bool
    skipped: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


TRANSFER_COLUMNS = tuple(f.name for f in fields(TransferRow))


def _transfer_row(source: str, target: str, snap: Snapshot, score: SnapshotScore | None) -> TransferRow:
    used = target in snap.manifest.filtered_with
    values: dict[str, float | None] = dict.fromkeys(("pa", "pa_low", "pa_high", "sa", "sa_low", "sa_high"))
    if score is not None:
        for m, e in (("pa", score.pa), ("sa", score.sa)):
            values.update({m: e.value, f"{m}_low": e.low, f"{m}_high": e.high})
        values = {k: None if v is None else float(v) for k, v in values.items()}  # numpy scalars -> float
    return TransferRow(
        source=source,
        target=target,
        n=len(snap),
        **values,
        sa_full=None if score is None or score.sa_full is None else float(score.sa_full.value),
        fmr=None if score is None else score.fmr,
        fmr_validated=None if score is None else score.fmr_validated,
        self_generated=source == target,
        used_for_filtering=used,
        skipped=score is None,
    )


def _full_sa_of_targets(
    loaded: Mapping[str, Snapshot], classifiers: Mapping[str, Any], given: Mapping[str, FullSA] | None
) -> dict[str, Estimate | None]:
    """Each target's full-sample SA: given, else that of the snapshot made against it (the snapshot with the
    target's name, or whose one tested model is the target's classifier id), else None."""
    out: dict[str, Estimate | None] = {}
    for tname, clf in classifiers.items():
        if given and tname in given:
            out[tname] = full_sa(given[tname])
            continue
        own = [loaded[tname]] if tname in loaded else []
        own += [s for s in loaded.values() if s.manifest.tested_models == [classifier_name(clf)]]
        out[tname] = next((v for v in map(manifest_sa_full, own) if v is not None), None)
    return out


def write_transfer_csv(rows: list[TransferRow], path: str | Path) -> Path:
    """The rows as CSV (columns :data:`TRANSFER_COLUMNS`, empty cells for None), written atomically."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=TRANSFER_COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows({k: "" if v is None else v for k, v in r.to_dict().items()} for r in rows)
    return atomic_write_bytes(Path(path), buf.getvalue().encode())


def transfer_matrix(
    snapshots: Mapping[str, str | Path],
    classifiers: Mapping[str, Any],
    out_csv: str | Path | None = None,
    batch_size: int = 64,
    device: torch.device | str = "cpu",
    interval: str = "wilson",
    skip_filtering_models: bool = False,
    verify: bool = True,
    clean_accuracy: Mapping[str, FullSA] | None = None,
) -> list[TransferRow]:
    """Accuracy of every target classifier on every source snapshot (paper App. D, Table 6).

    One :class:`TransferRow` per (source, target), sources in the given order. FMR = 100 PA / SA_full with the
    target's full-sample SA from ``clean_accuracy`` (target -> percent or estimate), else from the snapshot made
    against the target (its manifest), else undefined; FMR_v = 100 PA / SA_v beside it.
    ``skip_filtering_models=True`` leaves the cells of targets a snapshot was filtered with empty (``skipped``).
    Written to ``out_csv`` when given (atomic).
    """
    if not snapshots:
        raise SnapshotError("transfer_matrix needs at least one snapshot: {name: snapshot dir}.")
    if not classifiers:
        raise SnapshotError("transfer_matrix needs at least one target classifier: {name: classifier}.")
    loaded = {name: load_snapshot(p, lazy=True, verify=verify) for name, p in snapshots.items()}
    for tname, clf in classifiers.items():
        for snap in loaded.values():
            check_classes(clf, snap.class_names, str(snap.path), tname)
    full = _full_sa_of_targets(loaded, classifiers, clean_accuracy)
    cells: dict[tuple[str, str], TransferRow] = {}
    for tname, clf in classifiers.items():
        for sname, snap in loaded.items():
            skip = skip_filtering_models and tname in snap.manifest.filtered_with
            score = None if skip else score_loaded(snap, clf, device, batch_size, interval, tname, full[tname])
            cells[sname, tname] = _transfer_row(sname, tname, snap, score)
    rows = [cells[s, t] for s in loaded for t in classifiers]
    if out_csv is not None:
        write_transfer_csv(rows, out_csv)
    return rows


def format_transfer(rows: list[TransferRow]) -> str:
    """Sources as rows, targets as columns; cells ``PA / FMR / FMR_v``, ``*`` self-generated, ``f`` filter model."""
    sources = list(dict.fromkeys(r.source for r in rows))
    targets = list(dict.fromkeys(r.target for r in rows))
    cell = {(r.source, r.target): r for r in rows}

    def fmt(r: TransferRow | None) -> str:
        if r is None:
            return "-"
        if r.skipped:
            return "skipped(f)"
        pa = "n/a" if r.pa is None else f"{r.pa:.1f}"
        fmr = "n/a" if r.fmr is None else f"{r.fmr:.1f}"
        fmr_v = "n/a" if r.fmr_validated is None else f"{r.fmr_validated:.1f}"
        return f"{pa}/{fmr}/{fmr_v}" + ("*" if r.self_generated else "") + ("f" if r.used_for_filtering else "")

    table = [["source \\ target", *targets]] + [[s, *(fmt(cell.get((s, t))) for t in targets)] for s in sources]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in table]
    lines.append(
        "cells: PA / FMR / FMR_v (percent; FMR = 100 PA / SA_full, the target's SA over a run's whole "
        "sample; FMR_v = 100 PA / SA on the snapshot's originals); * = self-generated, f = target was a "
        "filtering surrogate"
    )
    return "\n".join(lines)


__all__ = [
    "TRANSFER_COLUMNS",
    "full_sa",
    "manifest_sa_full",
    "SnapshotScore",
    "TransferRow",
    "format_transfer",
    "predict",
    "score_snapshot",
    "transfer_matrix",
    "write_transfer_csv",
]
