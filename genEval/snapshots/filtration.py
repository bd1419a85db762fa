"""Adversarial filtration of snapshots into a hard static set (ImageNet-A, Hendrycks et al. 2021).

docs/method.md, "Adversarial filtration": a generated pool becomes a hard static benchmark by keeping what
fools a set of surrogate models (digest S2 Sec. 3.2): a sample is kept when at least ``min_fooled``
surrogates misclassify its perturbed image, optionally only when the surrogates' true-class confidence is low,
and at most ``max_per_pair`` samples per (true, predicted) confusion pair. The new snapshot lists its
surrogates under ``filtered_with``; transfer is to be reported on other models
(:func:`genEval.snapshots.scoring.transfer_matrix` marks or skips them).

Two rules (``rule=``): ``mean`` (the default, and the only rule before confidence was recorded) compares the surrogates'
*mean* true-class probability with ``max_true_conf`` and has no caps unless given. ``imagenet_a`` is ImageNet-A's filter
exactly (Hendrycks et al. 2021, Sec. 3): an image is removed when *any* surrogate gives the true class more than 15%
(the max over surrogates) or when *any* of its 10 crops is classified correctly by any surrogate (the 10-crop
check: the four corners and the centre at 87.5% of the side, 224/256 as for ImageNet, and their mirror images;
``torchvision.transforms.v2.functional.ten_crop``), and at most 15 images are kept per (true, predicted) pair:
those caps are on unless set otherwise. Every surrogate must be fooled on the whole image (``min_fooled``: all).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from genEval.fileio import sha256_file
from genEval.runs.identity import package_versions
from genEval.snapshots.manifest import MANIFEST, Manifest, SnapshotError, now_utc
from genEval.snapshots.reader import Snapshot, load_snapshot
from genEval.snapshots.scoring import check_classes, classifier_name, on_device, predict
from genEval.snapshots.writer import SnapshotItem, check_format, check_out_dir, write_snapshot

log = logging.getLogger(__name__)

# Per-sample keys of a source snapshot that describe where it was stored there, not the sample.
_STORAGE_KEYS = ("file_name", "original_file_name", "key", "shard")


def _whole(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


#: The filter rules (``rule=``) and ImageNet-A's caps (Hendrycks et al. 2021, Sec. 3).
RULES = ("mean", "imagenet_a")
IMAGENET_A_MAX_TRUE_CONF, IMAGENET_A_MAX_PER_PAIR = 0.15, 15
#: The side of a crop of the 10-crop check, relative to the image (ImageNet's 224 of 256).
CROP_FRACTION = 224 / 256


@dataclass(frozen=True)
class FilterRule:
    """Which samples a filter keeps: fooled by >= ``min_fooled`` surrogates, the true-class softmax probability
    below ``max_true_conf`` (``rule="mean"``: the mean over surrogates below it; ``rule="imagenet_a"``: every
    surrogate's at most it, i.e. removed when any gives more), at most ``max_per_pair`` per (true, predicted) pair,
    and with ``ten_crop`` removed when any of the 10 crops is classified correctly by any surrogate.
    """

    min_fooled: int
    max_true_conf: float | None = None
    max_per_pair: int | None = None
    rule: str = "mean"
    ten_crop: bool = False

    @classmethod
    def make(
        cls,
        n_surrogates: int,
        min_fooled: int | None,
        max_true_conf: float | None,
        max_per_pair: int | None,
        rule: str = "mean",
        ten_crop: bool | None = None,
    ) -> FilterRule:
        """The rule for ``n_surrogates`` surrogates (``min_fooled=None``: all of them), or a teaching error. Under
        ``rule="imagenet_a"`` a cap left None is ImageNet-A's (0.15, 15) and ``ten_crop`` defaults to on."""
        if rule not in RULES:
            raise SnapshotError(
                f"rule must be one of {', '.join(RULES)}, got {rule!r}: mean (the surrogates' mean true-class "
                "probability, no caps by default) or imagenet_a (Hendrycks et al.: removed when any surrogate gives "
                "the true class more than 15% or any of 10 crops is right; at most 15 per confusion pair)."
            )
        if rule == "imagenet_a":
            max_true_conf = IMAGENET_A_MAX_TRUE_CONF if max_true_conf is None else max_true_conf
            max_per_pair = IMAGENET_A_MAX_PER_PAIR if max_per_pair is None else max_per_pair
            ten_crop = True if ten_crop is None else ten_crop
        if not isinstance(ten_crop if ten_crop is not None else False, bool):
            raise SnapshotError(f"ten_crop must be true or false (or null: the rule's default), got {ten_crop!r}.")
        k = n_surrogates if min_fooled is None else min_fooled
        if not _whole(k) or not 1 <= k <= n_surrogates:
            raise SnapshotError(
                f"min_fooled must be a whole number in 1..{n_surrogates} (the number of surrogates), "
                f"got {min_fooled!r}."
            )
        if max_true_conf is not None and not (isinstance(max_true_conf, (int, float)) and 0 < max_true_conf <= 1):
            raise SnapshotError(
                f"max_true_conf must be a probability in (0, 1] or None, got {max_true_conf!r} (ImageNet-A used 0.15)."
            )
        if max_per_pair is not None and not (_whole(max_per_pair) and max_per_pair >= 1):
            raise SnapshotError(
                f"max_per_pair must be a whole number >= 1 or None, got {max_per_pair!r} (ImageNet-A used 15)."
            )
        return cls(k, max_true_conf, max_per_pair, rule, bool(ten_crop))

    def true_conf(self, c: Candidate) -> float:
        """The true-class confidence the rule compares: the surrogates' mean (``mean``) or max (``imagenet_a``)."""
        return c.max_true_conf if self.rule == "imagenet_a" else c.mean_true_conf

    def confident_enough(self, c: Candidate) -> bool:
        """Whether ``c`` passes the confidence cap: mean below it, or (ImageNet-A) no surrogate above it."""
        if self.max_true_conf is None:
            return True
        return (
            c.max_true_conf <= self.max_true_conf
            if self.rule == "imagenet_a"
            else c.mean_true_conf < self.max_true_conf
        )

    def to_dict(self) -> dict[str, Any]:
        which = "max" if self.rule == "imagenet_a" else "mean"
        return {
            "rule": self.rule,
            "min_fooled": self.min_fooled,
            "max_true_conf": self.max_true_conf,
            "true_conf": f"{which} over surrogates of the true-class softmax probability",
            "max_per_pair": self.max_per_pair,
            "ten_crop": self.ten_crop,
            "crop_fraction": CROP_FRACTION if self.ten_crop else None,
            "predicted": "most common wrong surrogate prediction",
            "cap_order": f"lowest {which} true-class confidence first",
        }


@dataclass(frozen=True)
class Candidate:
    """One sample of a source snapshot as the surrogates see it."""

    source: int  # index of its snapshot in the pooled sources
    index: int  # its index in that snapshot
    label: int
    preds: dict[str, int]  # surrogate name -> prediction, in surrogate order
    mean_true_conf: float  # true-class softmax probability, mean over surrogates
    max_true_conf: float = 0.0  # ... the largest over surrogates (ImageNet-A's rule)
    crop_correct: bool | None = None  # some surrogate classifies some of the 10 crops correctly (None: not checked)

    @property
    def n_fooled(self) -> int:
        return sum(p != self.label for p in self.preds.values())

    @property
    def pair_pred(self) -> int:
        """The most common wrong prediction (ties: the first surrogate's among the tied); the label if none."""
        wrong = [p for p in self.preds.values() if p != self.label]
        if not wrong:
            return self.label
        top = Counter(wrong).most_common()
        tied = {q for q, c in top if c == top[0][1]}
        return next(p for p in self.preds.values() if p in tied)


@dataclass(frozen=True)
class FilterStages:
    """The candidates after each step of the rule, in pool order."""

    candidates: list[Candidate]
    fooled: list[Candidate]  # fooled >= min_fooled surrogates
    confident: list[Candidate]  # ... and below max_true_conf
    cropped: list[Candidate]  # ... and no crop right (the 10-crop check; all of ``confident`` without it)
    kept: list[Candidate]  # ... and within the per-pair cap


def _load_sources(paths: Sequence[str | Path], verify: bool) -> list[Snapshot]:
    snaps = [load_snapshot(p, lazy=True, verify=verify) for p in paths]
    first = snaps[0]
    for s in snaps[1:]:
        if s.class_names != first.class_names:
            raise SnapshotError(
                f"snapshots '{first.path}' and '{s.path}' have different class lists "
                f"({len(first.class_names)} vs {len(s.class_names)} classes); filter them separately."
            )
    return snaps


def crops_correct(
    images: Any, surrogates: Mapping[str, Any], device: torch.device | str, batch_size: int
) -> torch.Tensor:
    """(N,) bool: some surrogate classifies some of the 10 crops of image i correctly (ImageNet-A's 10-crop check;
    crops of :data:`CROP_FRACTION` of each side, ``torchvision.transforms.v2.functional.ten_crop``)."""
    from torchvision.transforms.v2.functional import ten_crop  # slow import: only where crops are checked

    labels = torch.tensor(images.labels, dtype=torch.long)
    out = torch.zeros(len(images), dtype=torch.bool)
    with torch.no_grad():
        for i in range(len(images)):
            x = torch.from_numpy(images.uint8(i)).float().div(255)
            size = [max(1, round(CROP_FRACTION * s)) for s in x.shape[-2:]]
            crops = torch.stack(ten_crop(x, size))  # (10, C, h, w)
            for clf in surrogates.values():
                dev = on_device(clf, device)
                for start in range(0, len(crops), batch_size):
                    pred = clf(crops[start : start + batch_size].to(dev)).argmax(1).cpu()
                    if bool((pred == labels[i]).any()):
                        out[i] = True
                        break
                if out[i]:
                    break
    return out


def score_candidates(
    snaps: Sequence[Snapshot],
    surrogates: Mapping[str, Any],
    device: torch.device | str,
    batch_size: int,
    ten_crop: bool = False,
) -> list[Candidate]:
    """Every sample of every snapshot, with each surrogate's prediction and true-class probability (and, with
    ``ten_crop``, whether some surrogate gets some crop of it right)."""
    out = []
    for si, snap in enumerate(snaps):
        preds, confs = [], []
        for name, clf in surrogates.items():
            p, c = predict(snap.images, clf, on_device(clf, device), batch_size, name)
            preds.append(p)
            confs.append(c)
        P, C = torch.stack(preds, 1), torch.stack(confs, 1)  # (N, S)
        crops = crops_correct(snap.images, surrogates, device, batch_size) if ten_crop else None
        for i in range(len(snap)):
            row = dict(zip(surrogates, P[i].tolist(), strict=True))
            crop = None if crops is None else bool(crops[i])
            out.append(Candidate(si, i, int(snap.labels[i]), row, float(C[i].mean()), float(C[i].max()), crop))
    return out


def _cap_per_pair(cands: list[Candidate], cap: int, conf: Any = None) -> list[Candidate]:
    """At most ``cap`` per (label, pair_pred), the lowest true-class confidence (``conf(c)``, default the mean)
    first; pool order kept."""
    conf = conf or (lambda c: c.mean_true_conf)
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for pos, c in enumerate(cands):
        groups[c.label, c.pair_pred].append(pos)
    chosen = sorted(pos for g in groups.values() for pos in sorted(g, key=lambda p: conf(cands[p]))[:cap])
    return [cands[p] for p in chosen]


def select(cands: list[Candidate], rule: FilterRule) -> FilterStages:
    """Apply ``rule`` step by step."""
    fooled = [c for c in cands if c.n_fooled >= rule.min_fooled]
    confident = [c for c in fooled if rule.confident_enough(c)]
    cropped = [c for c in confident if not (rule.ten_crop and c.crop_correct)]
    kept = cropped if rule.max_per_pair is None else _cap_per_pair(cropped, rule.max_per_pair, rule.true_conf)
    if not kept:
        raise SnapshotError(
            f"no sample passes the filter ({len(cands)} candidates, {len(fooled)} fool >= {rule.min_fooled} "
            f"surrogates, {len(confident)} below max_true_conf, {len(cropped)} with no crop right); lower min_fooled, "
            "raise max_true_conf or set ten_crop=false."
        )
    return FilterStages(cands, fooled, confident, cropped, kept)


def _filtered_items(snaps: Sequence[Snapshot], kept: list[Candidate]) -> Iterator[SnapshotItem]:
    """The kept samples with their stored PNG bytes unchanged and the filter's per-sample findings."""
    for c in kept:
        snap = snaps[c.source]
        rec = {k: v for k, v in snap.records[c.index].items() if k not in _STORAGE_KEYS}
        meta = {
            **rec,
            "source_snapshot": snap.name,
            "source_index": c.index,
            "surrogate_preds": c.preds,
            "n_fooled": c.n_fooled,
            "pair_pred": c.pair_pred,
            "mean_true_conf": c.mean_true_conf,
            "max_true_conf": c.max_true_conf,
            **({} if c.crop_correct is None else {"crop_correct": c.crop_correct}),
        }
        yield SnapshotItem(snap.images.png_bytes(c.index), snap.originals.png_bytes(c.index), meta)


def _filter_manifest(
    snaps: Sequence[Snapshot], surrogates: Mapping[str, Any], rule: FilterRule, stages: FilterStages, name: str
) -> Manifest:
    shapes = [s.manifest.image_shapes for s in snaps]
    return Manifest(
        kind="filter",
        name=name,
        created=now_utc(),
        tested_models=sorted({m for s in snaps for m in s.manifest.tested_models}),
        sources=[
            {
                "snapshot": str(s.path.resolve()),
                "name": s.name,
                "manifest_sha256": sha256_file(s.path / MANIFEST),
                "kind": s.manifest.kind,
                "samples": len(s),
                "tested_models": s.manifest.tested_models,
                "components": s.manifest.components,
                "seed": s.manifest.seed,
                "versions": s.manifest.versions,
                "sources": s.manifest.sources,
            }
            for s in snaps
        ],
        class_names=list(snaps[0].class_names),
        image_shapes=shapes[0] if all(s == shapes[0] for s in shapes) else shapes,
        counts={
            "candidates": len(stages.candidates),
            "fooled_enough": len(stages.fooled),
            "below_max_true_conf": len(stages.confident),
            **({"no_crop_right": len(stages.cropped)} if rule.ten_crop else {}),
        },
        exported_with=package_versions(),
        filtered_with=list(surrogates),
        surrogates={n: {"id": classifier_name(c), "repr": repr(c)[:500]} for n, c in surrogates.items()},
        filter=rule.to_dict(),
    )


def filter_snapshots(
    paths: str | Path | Sequence[str | Path],
    surrogates: Mapping[str, Any],
    out_dir: str | Path,
    min_fooled: int | None = None,
    max_true_conf: float | None = None,
    max_per_pair: int | None = None,
    overwrite: bool = False,
    batch_size: int = 64,
    device: torch.device | str = "cpu",
    format: str | None = None,
    shard_size: int = 1000,
    verify: bool = True,
    rule: str = "mean",
    ten_crop: bool | None = None,
) -> Path:
    """Pool the snapshots at ``paths``, keep what fools the surrogates (:class:`FilterRule`), write a snapshot.

    A sample is kept when at least ``min_fooled`` surrogates misclassify its perturbed image (default: all
    of them, ImageNet-A's rule), and, with ``max_true_conf``, when the surrogates' true-class softmax
    probability averaged over surrogates is below it. Each kept sample's predicted class is the most common
    wrong prediction among the surrogates (ties: the first surrogate, in the given order, that predicts one
    of the tied classes); with ``max_per_pair`` at most that many samples per (true, predicted) pair are
    kept, the lowest mean true-class confidence first. ``rule="imagenet_a"`` is ImageNet-A's filter (the module
    docstring): the max over surrogates instead of the mean, the 10-crop check (``ten_crop``, default on there) and
    the caps 0.15 and 15 unless given. The new snapshot (``format``: default the first
    source's) lists the surrogates under ``filtered_with``; report transfer on other models.
    ``device``: a torch device. Returns the new snapshot directory.
    """
    srcs = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not srcs:
        raise SnapshotError("filter_snapshots needs at least one source snapshot directory.")
    if not surrogates:
        raise SnapshotError("filter_snapshots needs at least one surrogate classifier: {name: classifier}.")
    rule = FilterRule.make(len(surrogates), min_fooled, max_true_conf, max_per_pair, rule, ten_crop)
    snaps = _load_sources(srcs, verify)
    fmt = format or snaps[0].manifest.format
    check_format(fmt, shard_size)
    check_out_dir(out_dir, overwrite, [s.path for s in snaps])
    for name, clf in surrogates.items():
        check_classes(clf, snaps[0].class_names, str(snaps[0].path), name)
    stages = select(score_candidates(snaps, surrogates, device, batch_size, rule.ten_crop), rule)
    log.info(
        "filter (%s): %d candidates -> %d fool >= %d surrogates -> %d confident -> %d no crop right -> %d kept",
        rule.rule,
        len(stages.candidates),
        len(stages.fooled),
        rule.min_fooled,
        len(stages.confident),
        len(stages.cropped),
        len(stages.kept),
    )
    return write_snapshot(
        out_dir,
        _filtered_items(snaps, stages.kept),
        len(stages.kept),
        _filter_manifest(snaps, surrogates, rule, stages, Path(out_dir).name),
        fmt=fmt,
        overwrite=overwrite,
        shard_size=shard_size,
        protect=[s.path for s in snaps],
    )


__all__ = [
    "RULES",
    "Candidate",
    "FilterRule",
    "FilterStages",
    "crops_correct",
    "filter_snapshots",
    "score_candidates",
    "select",
]
