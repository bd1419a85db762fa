"""Which classes a seeded ``data.limit`` draw reaches (issue 20): a measurement, not a test.

For many seeds, draw the class-balanced random subset (``subset=random``, :func:`genEval.data.round_robin_order`
through the real :class:`genEval.data.base.ImageData` machinery) and count the samples each class gets. A fair
draw gives every class ``limit / classes`` samples per seed on average; a draw that walks the classes in label
order gives the first classes (the first ``limit`` ones, or the extra samples) every time.

Two data sets: an ImageNet-shaped label list (1,000 classes x 50 images, ``--limit`` 500 and 10) and the shared
CIFAR-10 JPEG folder (``data=cifar10_jpg``, 10 classes, limit 5 and 15) when ``../shared/assets`` is there.

    python -m benchmarks.class_coverage --seeds 200
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/class_coverage.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
from collections import Counter
from pathlib import Path

import numpy as np
from scipy.stats import chisquare

from benchmarks.harness import results
from genEval.data.base import ImageData

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT.parent / "shared" / "assets"


class LabelsOnly(ImageData):
    """The draw of :class:`ImageData` over a plain label list (no images are read)."""

    name = "labels"

    def __init__(self, labels: list[int], limit: int) -> None:
        super().__init__(image_size=None, channels=None, limit=limit)
        self.class_names = [str(c) for c in sorted(set(labels))]
        self._select(labels)

    def _read(self, index: int):
        raise NotImplementedError("labels only")

    def _source_id(self, index: int) -> str:
        return f"{index:06d}"


def coverage(data: ImageData, n_classes: int, seeds: int) -> str:
    """One table row: classes ever drawn, distinct class multisets, samples per class and seed (lowest and
    highest class; fair: ``limit / classes`` each) and the chi-square p of "every class equally likely"."""
    hits: Counter[int] = Counter()
    sets = set()
    for seed in range(seeds):
        drawn = Counter(data.with_seed(seed).labels)
        sets.add(tuple(sorted(drawn.items())))
        hits.update(drawn)
    counts = np.array([hits.get(c, 0) for c in range(n_classes)], dtype=float)
    p = chisquare(counts).pvalue if counts.min() != counts.max() else 1.0
    most = [c for c in range(n_classes) if hits.get(c, 0) == counts.max()][:3]
    return (
        f"| {n_classes} | {data.limit} | {seeds} | {int((counts > 0).sum())} | {len(sets)} | "
        f"{counts.min() / seeds:.2f} .. {counts.max() / seeds:.2f} (fair: {data.limit / n_classes:.2f}) | "
        f"{p:.3g} | {most} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=200)
    a = ap.parse_args()
    print(f"class coverage of the seeded class-balanced draw over seeds 0..{a.seeds - 1}")
    print(
        "| classes | limit | seeds | classes ever drawn | distinct draws (samples per class) | samples per class and "
        "seed (min .. max) | chi-square p (uniform) | most drawn classes |"
    )
    print("|---|---|---|---|---|---|---|---|")
    imagenet_like = [c for c in range(1000) for _ in range(50)]
    for limit in (500, 10):
        print(coverage(LabelsOnly(imagenet_like, limit), 1000, a.seeds), flush=True)
    if ASSETS.exists():
        from genEval.data.folders import ImageFolderData
        from genEval.data.standard import CIFAR10_CLASSES

        for limit in (5, 15):
            data = ImageFolderData(ASSETS / "cifar10" / "test-jpg", class_names=CIFAR10_CLASSES, limit=limit)
            print(coverage(data, 10, a.seeds), flush=True)


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
