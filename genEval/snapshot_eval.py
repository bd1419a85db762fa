"""Scoring classifiers on static snapshots: re-scoring one model and the transfer matrix (paper App. D, O).

A snapshot (:mod:`genEval.snapshot`) stores the perturbed images *and* their originals, so any classifier
can be scored on it with no access to the source data set: PA on the perturbed images, SA on the originals
(percent, 95% Wilson or Clopper-Pearson intervals over the snapshot's samples) and FMR = 100 * PA / SA
(METHOD.md "Scores"). :func:`transfer_matrix` scores every target model on every source snapshot, as in
the paper's Table 6: images generated against one model, scored on others.
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
from genEval.snapshot import Snapshot, SnapshotDataset, SnapshotError, load_snapshot
from genEval.stats import Estimate, fmr_value, format_estimate, proportion


def classifier_name(classifier: Any) -> str:
    return str(getattr(classifier, "name", None) or type(classifier).__name__)


def check_classes(classifier: Any, class_names: list[str], where: str, cname: str) -> None:
    """Refuse a classifier whose ``num_classes`` differs from the snapshot's class list."""
    k = getattr(classifier, "num_classes", None)
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
    if batch_size < 1:
        raise SnapshotError(f"batch_size must be >= 1, got {batch_size}.")
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
    """One classifier on one snapshot: PA (perturbed), SA (originals), FMR, per class, and the predictions."""

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """The one-screen summary ``geneval score`` prints."""
        pa, sa = asdict(self.pa), asdict(self.sa)
        fmr = "undefined" if self.fmr is None else f"{self.fmr:.2f}"
        lines = [
            f"snapshot {self.snapshot}  n={self.n}  classes={len(self.class_names)}",
            f"  classifier: {self.classifier}   (snapshot made against: {', '.join(self.tested_models)})",
            f"  SA (originals)  {format_estimate(sa, with_reason=True)}   ({sa['k']}/{sa['n']})",
            f"  PA (perturbed)  {format_estimate(pa, with_reason=True)}   ({pa['k']}/{pa['n']})",
            f"  FMR  {fmr}",
        ]
        if self.filtered_with:
            lines.append(f"  filtered with: {', '.join(self.filtered_with)}")
        return "\n".join(lines)


def score_loaded(
    snap: Snapshot, classifier: Any, device: torch.device | str, batch_size: int, interval: str, cname: str
) -> SnapshotScore:
    """:func:`score_snapshot` on a snapshot already loaded lazily."""
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
    return SnapshotScore(
        snapshot=where,
        classifier=cname,
        n=n,
        pa=pa,
        sa=sa,
        fmr=fmr_value(sa.value, pa.value),
        class_names=snap.class_names,
        tested_models=snap.manifest.tested_models,
        filtered_with=snap.manifest.filtered_with,
        per_class=per_class,
        predictions=pp.tolist(),
        original_predictions=po.tolist(),
    )


def score_snapshot(
    path: str | Path,
    classifier: Any,
    batch_size: int = 64,
    device: torch.device | str = "cpu",
    interval: str = "wilson",
    verify: bool = True,
) -> SnapshotScore:
    """Accuracy of ``classifier`` on a snapshot's perturbed images (``pa``) and on their originals (``sa``).

    Both are percentages with 95% intervals (``interval``: wilson | clopper-pearson) over the snapshot's
    samples; ``fmr = 100 * pa / sa``. Needs no access to the source data set (the originals are stored).
    ``device``: a torch device (the ``geneval score`` command resolves ``auto``).
    """
    snap = load_snapshot(path, lazy=True, verify=verify)
    return score_loaded(snap, classifier, device, batch_size, interval, classifier_name(classifier))


# --------------------------------------------------------------------------------------------- transfer


@dataclass(frozen=True)
class TransferRow:
    """One cell of the transfer matrix: target model scored on source snapshot (percent; None when skipped).

    ``self_generated``: source and target share a name (the diagonal). ``used_for_filtering``: the target
    is one of the snapshot's ``filtered_with`` surrogates, so its accuracy is not a transfer result.
    The field order is the CSV's column order.
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
    fmr: float | None
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
        fmr=None if score is None else score.fmr,
        self_generated=source == target,
        used_for_filtering=used,
        skipped=score is None,
    )


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
) -> list[TransferRow]:
    """Accuracy of every target classifier on every source snapshot (paper App. D, Table 6).

    One :class:`TransferRow` per (source, target), sources in the given order. ``skip_filtering_models=True``
    leaves the cells of targets a snapshot was filtered with empty (``skipped``). Written to ``out_csv``
    when given (atomic).
    """
    if not snapshots:
        raise SnapshotError("transfer_matrix needs at least one snapshot: {name: snapshot dir}.")
    if not classifiers:
        raise SnapshotError("transfer_matrix needs at least one target classifier: {name: classifier}.")
    loaded = {name: load_snapshot(p, lazy=True, verify=verify) for name, p in snapshots.items()}
    for tname, clf in classifiers.items():
        for snap in loaded.values():
            check_classes(clf, snap.class_names, str(snap.path), tname)
    cells: dict[tuple[str, str], TransferRow] = {}
    for tname, clf in classifiers.items():
        for sname, snap in loaded.items():
            skip = skip_filtering_models and tname in snap.manifest.filtered_with
            score = None if skip else score_loaded(snap, clf, device, batch_size, interval, tname)
            cells[sname, tname] = _transfer_row(sname, tname, snap, score)
    rows = [cells[s, t] for s in loaded for t in classifiers]
    if out_csv is not None:
        write_transfer_csv(rows, out_csv)
    return rows


def format_transfer(rows: list[TransferRow]) -> str:
    """Sources as rows, targets as columns; cells ``PA / FMR``, ``*`` self-generated, ``f`` filter model."""
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
        return f"{pa}/{fmr}" + ("*" if r.self_generated else "") + ("f" if r.used_for_filtering else "")

    table = [["source \\ target", *targets]] + [[s, *(fmt(cell.get((s, t))) for t in targets)] for s in sources]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in table]
    lines.append("cells: PA / FMR (percent); * = self-generated, f = target was a filtering surrogate")
    return "\n".join(lines)


__all__ = [
    "TRANSFER_COLUMNS",
    "SnapshotScore",
    "TransferRow",
    "format_transfer",
    "predict",
    "score_snapshot",
    "transfer_matrix",
    "write_transfer_csv",
]
