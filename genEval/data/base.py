"""Evaluation datasets: the test images ``x`` and labels ``y`` that the search starts from.

Every dataset here follows :class:`genEval.interfaces.ImageDataset`::

    dataset[i] -> (image (C, H, W) float32 in [0, 1], label int, source_id str)

``source_id`` is stable across runs (a path relative to the root, or ``"test/00042"``), so results,
bootstrap intervals over source images (docs/method.md, "Intervals over source images") and resumed runs can
refer to the same picture;
``dataset.source_id(i)`` tells it without reading the image.

Common options (all datasets):

* ``image_size``: resize to a square side (bilinear, antialiased when shrinking; ``None`` keeps the
  native size, and then all selected images must share one size: an image folder checks this from the file
  headers when it is built and names two files that differ).
* ``channels``: ``1`` grayscale (ITU-R 601 luma, as PIL's ``"L"``; torchvision's ``rgb_to_grayscale``),
  ``3`` RGB (grayscale sources are repeated), ``None`` keeps the source's channels.
* ``indices``: the part of the dataset to use, before ``limit``: ``"START:STOP"`` (a Python slice of the
  dataset's own order, e.g. ``"0:5000"`` and ``"5000:"`` split a test set in two), a file with one source id per
  line, or a list of positions.
* ``limit``: a class-balanced subset of ``limit`` samples, interleaved round-robin over the classes.
  ``subset="random"`` (default) draws the samples of each class, and the order of the classes in every round
  (hence which classes a ``limit`` below the number of classes reaches), at random from a seed:
  ``subset_seed``, or, when that is ``None``, the run's seed (``genEval.evaluate`` calls :meth:`with_seed`),
  so every unseeded run evaluates fresh source images (docs/method.md, "Why a generated test set") and
  every model of one comparison repetition the same ones. ``subset="first"`` keeps the dataset's own order
  within each class and the label order of the classes (a deterministic prefix). Either way ``limit=N`` is a
  prefix of ``limit=N+k`` for the same seed, so a small run is the start of a larger one, and the draw depends on
  the seed alone (shards and resumed runs see the same sources).
* ``class_names``: override the class names (e.g. better prompts for a CLIP oracle); names must be distinct.

Images are read in ``__getitem__`` (files are never all held in memory); only the tiny scikit-learn
digits set, torchvision's CIFAR-10 pickles and MNIST's idx files (at most 47 MB) are held as arrays.
ImageNet folders (:class:`ImageNetData`) get their class index and name from :mod:`genEval.data.imagenet`.

torchvision is imported inside the functions that use it: it costs about two seconds to import, and a run
on an image folder never needs it.
"""

from __future__ import annotations

import abc
import copy
import logging
import os
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from torch import Tensor

from genEval.interfaces import SettingError, is_whole, resize_images

log = logging.getLogger(__name__)

SUBSET_MODES = ("random", "first")
_SLICE = re.compile(r"^\s*(-?\d*)\s*:\s*(-?\d*)\s*$")


def round_robin_order(labels: Sequence[int], rng: np.random.Generator | None = None) -> list[int]:
    """Indices interleaved over classes in rounds: one sample of each class per round, then the next round.

    Any prefix of the result is as class-balanced as possible; classes that run out are skipped. Without ``rng``
    every round walks the classes in label order and each class keeps the dataset's order (a deterministic
    prefix). With ``rng`` both are drawn: each class's samples in a random permutation, and each round's class
    order in its own random permutation, so the classes a short prefix reaches (``limit`` below the number of
    classes, or the extra samples of a ``limit`` that is not a multiple of it) are a uniform random choice, not
    the lowest-numbered ones. The result depends only on ``labels`` and the generator's state, so one seed gives
    one order and ``order[:n]`` is a prefix of ``order[:n + k]``.
    """
    by_class: dict[int, list[int]] = {}
    for i, y in enumerate(labels):
        by_class.setdefault(int(y), []).append(i)
    queues = [by_class[c] for c in sorted(by_class)]
    if rng is not None:
        queues = [[q[k] for k in rng.permutation(len(q))] for q in queues]
    order: list[int] = []
    for depth in range(max((len(q) for q in queues), default=0)):
        live = [q for q in queues if depth < len(q)]
        if rng is not None:
            live = [live[k] for k in rng.permutation(len(live))]
        order.extend(q[depth] for q in live)
    return order


def check_unique_names(names: Sequence[str], where: str) -> list[str]:
    """``names`` as strings, or a teaching error naming every class name given more than once."""
    names = [str(c) for c in names]
    twice = {n: [i for i, m in enumerate(names) if m == n] for n, k in Counter(names).items() if k > 1}
    if twice:
        listed = "; ".join(f"{n!r} at positions {pos}" for n, pos in twice.items())
        raise ValueError(
            f"{where}: class names must be distinct, but {listed}. Two classes with one name cannot "
            "be told apart (a CLIP oracle would read the same prompt for both); give each its own "
            "name in data.class_names (e.g. 'crane bird' and 'construction crane')."
        )
    return names


def _to_channels(image: Tensor, channels: int | None) -> Tensor:
    """Convert a (C, H, W) image with C in {1, 3} (4 = RGBA drops alpha) to ``channels``."""
    if image.shape[0] == 4:
        image = image[:3]
    if channels is None or image.shape[0] == channels:
        return image
    if channels == 3 and image.shape[0] == 1:
        return image.expand(3, -1, -1).contiguous()
    if channels == 1 and image.shape[0] == 3:
        from torchvision.transforms.functional import rgb_to_grayscale  # slow import, see module docstring

        return rgb_to_grayscale(image, num_output_channels=1).clamp(0, 1)  # ITU-R 601-2 luma weights
    raise ValueError(f"cannot convert an image with {image.shape[0]} channels to {channels} channels")


def limit_warning(limit: int, size: int, name: str) -> str:
    """The warning of a ``data.limit`` above the number of samples there are (the run then uses them all)."""
    return (
        f"data.limit={limit} is more than the {size} samples of {name}: all {size} are used. Lower data.limit (or "
        "point data at a larger data set) to run the number you meant."
    )


class ImageData(abc.ABC):
    """Shared machinery: option checks, ``indices``, the class-balanced ``limit`` subset, channel/size conversion.

    Subclasses set ``name``, ``class_names``, call :meth:`_select` with the labels of all raw samples, and
    implement ``_read(raw index) -> image (C, H, W) float in [0, 1]`` and ``_source_id(raw index) -> str``.
    """

    name: str
    class_names: list[str]

    def __init__(
        self,
        image_size: int | None,
        channels: int | None,
        limit: int | None,
        subset: str = "random",
        subset_seed: int | None = None,
        indices: str | Sequence[int] | None = None,
    ) -> None:
        if image_size is not None and not is_whole(image_size, 1):
            raise SettingError("image_size", image_size, "a whole number >= 1 or null (keep the native size)", "224")
        if channels not in (None, 1, 3):
            raise SettingError("channels", channels, "1 (grayscale), 3 (RGB) or null (keep the source's)", "3")
        if limit is not None and not is_whole(limit, 1):
            raise SettingError("limit", limit, "a whole number >= 1 (number of samples) or null (all)", "100")
        if subset not in SUBSET_MODES:
            raise SettingError(
                "subset", subset, "random (a seeded class-balanced draw) or first (the dataset's own order)", "random"
            )
        if subset_seed is not None and not is_whole(subset_seed, 0):
            raise SettingError("subset_seed", subset_seed, "a whole number >= 0 or null (the run's seed)", "0")
        self.image_size = None if image_size is None else int(image_size)
        self.channels = channels
        self.limit = None if limit is None else int(limit)
        self.subset = subset
        self.subset_seed = None if subset_seed is None else int(subset_seed)
        self.indices = indices
        self._draw_seed: int | None = None
        self._indices: list[int] = []
        self.labels: list[int] = []

    # ---- which samples --------------------------------------------------------------------------------
    def _select(self, labels: Sequence[int]) -> None:
        """Fix the pool (all raw samples, or ``indices``) and draw the ``limit`` subset from it."""
        self._all_labels = [int(y) for y in labels]
        self._pool = self._pool_positions(len(self._all_labels))
        if not self._pool:
            raise ValueError(
                f"{type(self).__name__}: indices={self.indices!r} selects no sample of the "
                f"{len(self._all_labels)}; give a range inside 0:{len(self._all_labels)}."
            )
        if self.limit is not None and self.limit > len(self._pool):
            log.warning(limit_warning(self.limit, len(self._pool), self.name))  # once: draws reuse this pool
        self._draw()

    def _pool_positions(self, n: int) -> list[int]:
        spec = self.indices
        if spec is None:
            return list(range(n))
        if isinstance(spec, str) and _SLICE.match(spec):
            start, stop = (int(v) if v not in ("", "-") else None for v in _SLICE.match(spec).groups())
            return list(range(n))[slice(start, stop)]
        if isinstance(spec, (str, os.PathLike)):
            return self._positions_from_file(Path(spec).expanduser(), n)
        positions = [int(i) for i in spec]
        bad = [i for i in positions if not 0 <= i < n]
        if bad:
            raise ValueError(f"indices {bad[:5]} lie outside 0..{n - 1} ({type(self).__name__} has {n} samples).")
        return sorted(set(positions))

    def _positions_from_file(self, path: Path, n: int) -> list[int]:
        if not path.is_file():
            raise FileNotFoundError(
                f"indices={str(path)!r} is neither a range START:STOP (e.g. 0:5000) nor an "
                "existing file of source ids (one per line)."
            )
        wanted = [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        where = {self._source_id(i): i for i in range(n)}
        unknown = [w for w in wanted if w not in where]
        if unknown:
            example = self._source_id(0) if n else "?"
            raise ValueError(
                f"indices file '{path}' lists {len(unknown)} source id(s) this dataset does not have, "
                f"e.g. {unknown[:3]}; ids look like {example!r} (samples.jsonl of a run lists them)."
            )
        return sorted({where[w] for w in wanted})

    def _seed(self) -> int:
        """The seed of the random subset: ``subset_seed``, else the run's (``with_seed``), else 0."""
        if self.subset_seed is not None:
            return self.subset_seed
        return 0 if self._draw_seed is None else self._draw_seed

    def _draw(self) -> None:
        pool = self._pool
        pool_labels = [self._all_labels[i] for i in pool]
        if self.limit is None:
            order = list(range(len(pool)))
        else:
            rng = np.random.default_rng(self._seed()) if self._random_draw() else None
            order = round_robin_order(pool_labels, rng)[: self.limit]
        self._indices = [pool[k] for k in order]
        self.labels = [pool_labels[k] for k in order]
        self._check_selection()

    def _random_draw(self) -> bool:
        return self.subset == "random" and self.limit is not None

    def with_seed(self, seed: int) -> ImageData:
        """This dataset with its random ``limit`` subset drawn from ``seed`` (the run's seed).

        Unchanged (the same object) when ``subset_seed`` is set, ``subset="first"`` or ``limit`` is None.
        """
        if self.subset_seed is not None or not self._random_draw() or self._draw_seed == int(seed):
            return self
        other = copy.copy(self)
        other._draw_seed = int(seed)
        other._draw()
        log.info(
            "%s: drew %d of %d sources (class-balanced, seed %d)",
            other.name,
            len(other),
            len(other._pool),
            other._seed(),
        )
        return other

    def with_limit(self, limit: int) -> ImageData:
        """This dataset drawing ``limit`` sources from the same pool and seed, as ``data.limit=limit`` builds it (a
        round of ``stop=settled`` draws its ``round_sources`` so); the same object when it draws that many already."""
        if not is_whole(limit, 1):
            raise SettingError("limit", limit, "a whole number >= 1 (number of samples)", "100")
        if self.limit == int(limit):
            return self
        other = copy.copy(self)
        other.limit = int(limit)
        if other.limit > len(other._pool):
            log.warning(limit_warning(other.limit, len(other._pool), other.name))
        other._draw()
        return other

    def subset_info(self) -> dict[str, Any]:
        """How the samples were chosen (for results): mode (``random``, ``first`` or ``all``), seed (None when
        nothing was drawn at random), limit, indices, and the size of the pool the subset came from."""
        return {
            "mode": "all" if self.limit is None else self.subset,
            "seed": self._seed() if self._random_draw() else None,
            "limit": self.limit,
            "indices": None if self.indices is None else str(self.indices),
            "pool": len(self._pool),
        }

    def _check_selection(self) -> None:  # noqa: B027 - an optional hook, empty on purpose
        """Hook run after every draw (image folders check that the selected images can be batched)."""

    def _check_class_names(self, class_names: Sequence[str] | None, default: list[str]) -> list[str]:
        if class_names is None:
            return list(default)
        names = check_unique_names(class_names, f"{type(self).__name__}")
        if len(names) != len(default):
            shown = ", ".join(default[:10]) + (", ..." if len(default) > 10 else "")
            raise ValueError(
                f"{type(self).__name__}: class_names has {len(names)} entries but the dataset "
                f"has {len(default)} classes ({shown}). Give one name per class, in label order."
            )
        return names

    # ---- reading --------------------------------------------------------------------------------------
    @abc.abstractmethod
    def _read(self, index: int) -> Tensor:
        """Image (C, H, W) in [0, 1] of raw sample ``index`` (before indices/limit/order)."""

    @abc.abstractmethod
    def _source_id(self, index: int) -> str:
        """Source id of raw sample ``index``, without reading the image."""

    def __len__(self) -> int:
        return len(self._indices)

    def _full_index(self, index: int) -> int:
        n = len(self._indices)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index} out of range for {self.name} with {n} samples")
        return self._indices[index]

    def source_id(self, index: int) -> str:
        """The source id of sample ``index`` (cheap: no image is read)."""
        return self._source_id(self._full_index(index))

    def __getitem__(self, index: int) -> tuple[Tensor, int, str]:
        full = self._full_index(index)
        image = _to_channels(self._read(full), self.channels)
        if self.image_size is not None:
            image = resize_images(image.unsqueeze(0), self.image_size)[0]
        label = self.labels[index if index >= 0 else index + len(self)]
        return image.float().contiguous(), label, self._source_id(full)

    def __repr__(self) -> str:
        info = self.subset_info()
        drawn = f", subset={info['mode']}" + (f"@seed{info['seed']}" if info["seed"] is not None else "")
        part = "" if self.indices is None else f", indices={self.indices!r}"
        return (
            f"{type(self).__name__}(name={self.name!r}, n={len(self)}, classes={len(self.class_names)}, "
            f"image_size={self.image_size}, channels={self.channels}, limit={self.limit}{drawn}{part})"
        )


class SubsetData:
    """A fixed subset of another dataset (same classes, same source ids), e.g. the fit/score split of
    ``mask=auto``. ``name`` gets ``suffix`` so results say which part was scored.

    ``indices`` are positions in ``data``; :meth:`with_seed` re-seeds ``data`` and keeps the positions, so
    the parts of one split stay disjoint when both are drawn from the same seed."""

    def __init__(self, data, indices: Sequence[int], suffix: str = "subset") -> None:
        self.data, self.indices, self.suffix = data, [int(i) for i in indices], suffix
        self.class_names = list(data.class_names)
        self.name = f"{getattr(data, 'name', type(data).__name__)}[{suffix}]"
        base = getattr(data, "labels", None)
        self.labels = [base[i] for i in self.indices] if base is not None else None

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int):
        return self.data[self.indices[index]]

    def source_id(self, index: int) -> str:
        get = getattr(self.data, "source_id", None)
        return get(self.indices[index]) if callable(get) else self.data[self.indices[index]][2]

    def with_seed(self, seed: int) -> SubsetData:
        reseed = getattr(self.data, "with_seed", None)
        base = reseed(seed) if callable(reseed) else self.data
        return self if base is self.data else SubsetData(base, self.indices, self.suffix)

    def subset_info(self) -> dict[str, Any] | None:
        info = getattr(self.data, "subset_info", None)
        return None if not callable(info) else {**info(), "part": self.suffix, "n": len(self.indices)}
