"""Evaluation datasets: the test images ``x`` and labels ``y`` that the search starts from.

Every dataset here follows :class:`genEval.interfaces.ImageDataset`::

    dataset[i] -> (image (C, H, W) float32 in [0, 1], label int, source_id str)

``source_id`` is stable across runs (a path relative to the root, or ``"test/00042"``), so results,
bootstrap intervals over source images (METHOD.md) and resumed runs can refer to the same picture;
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
* ``limit``: a class-balanced subset of ``limit`` samples, interleaved round-robin over the classes (class
  order = label order). ``subset="random"`` (default) draws the samples of each class at random from a seed:
  ``subset_seed``, or, when that is ``None``, the run's seed (``genEval.evaluate`` calls :meth:`with_seed`),
  so every unseeded run evaluates fresh source images (METHOD.md "Why it exists": a dynamic benchmark) and
  every model of one comparison repetition the same ones. ``subset="first"`` keeps the dataset's own order
  within each class (a deterministic prefix). Either way ``limit=N`` is a prefix of ``limit=N+k`` for the same
  seed, so a small run is the start of a larger one.
* ``class_names``: override the class names (e.g. better prompts for a CLIP oracle); names must be distinct.

Images are read in ``__getitem__`` (files are never all held in memory); only the tiny scikit-learn
digits set, torchvision's CIFAR-10 pickles and MNIST's idx files (at most 47 MB) are held as arrays.
ImageNet folders (:class:`ImageNetData`) get their class index and name from :mod:`genEval.imagenet`.

torchvision is imported inside the functions that use it: it costs about two seconds to import, and a run
on an image folder never needs it.
"""

from __future__ import annotations

import abc
import copy
import gzip
import logging
import os
import re
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from genEval.checkpoints import cache_dir
from genEval.imagenet import imagenet_class_names, superclass_members, superclass_table, wnid_index
from genEval.interfaces import resize_images

log = logging.getLogger(__name__)

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
DIGIT_CLASSES = [str(d) for d in range(10)]
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm")
SUBSET_MODES = ("random", "first")
_SLICE = re.compile(r"^\s*(-?\d*)\s*:\s*(-?\d*)\s*$")


def round_robin_order(labels: Sequence[int], rng: np.random.Generator | None = None) -> list[int]:
    """Indices interleaved over classes: first of each class (in label order), then second of each, ...

    Any prefix of the result is as class-balanced as possible; classes that run out are skipped. Within a
    class the dataset's order is kept, or, with ``rng``, a random permutation drawn from it.
    """
    by_class: dict[int, list[int]] = {}
    for i, y in enumerate(labels):
        by_class.setdefault(int(y), []).append(i)
    queues = [by_class[c] for c in sorted(by_class)]
    if rng is not None:
        queues = [[q[k] for k in rng.permutation(len(q))] for q in queues]
    order: list[int] = []
    for depth in range(max((len(q) for q in queues), default=0)):
        order.extend(q[depth] for q in queues if depth < len(q))
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


class _ImageData(abc.ABC):
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
        if image_size is not None and (isinstance(image_size, bool) or int(image_size) != image_size or image_size < 1):
            raise ValueError(
                f"image_size must be a positive integer or null (keep the native size), got {image_size!r}."
            )
        if channels not in (None, 1, 3):
            raise ValueError(f"channels must be 1 (grayscale), 3 (RGB) or null (keep the source's), got {channels!r}.")
        if limit is not None and (isinstance(limit, bool) or int(limit) != limit or limit < 1):
            raise ValueError(f"limit must be a positive integer (number of samples) or null (all), got {limit!r}.")
        if subset not in SUBSET_MODES:
            raise ValueError(
                f"subset must be 'random' (a seeded class-balanced draw) or 'first' (the dataset's "
                f"own order), got {subset!r}."
            )
        if subset_seed is not None and (isinstance(subset_seed, bool) or int(subset_seed) != subset_seed):
            raise ValueError(f"subset_seed must be a whole number or null (the run's seed), got {subset_seed!r}.")
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

    def with_seed(self, seed: int) -> _ImageData:
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


def _pil_to_tensor(img, channels: int | None) -> Tensor:
    """PIL image -> (C, H, W) float32 in [0, 1] (uint8 / 255, as torchvision's ToTensor)."""
    if channels == 1:
        img = img.convert("L")
    elif channels == 3 or img.mode not in ("L", "RGB"):
        img = img.convert("RGB")
    arr = np.asarray(img, dtype=np.uint8)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    return torch.from_numpy(arr.copy()).permute(2, 0, 1).float().div_(255.0)


def _header(path: Path) -> tuple[tuple[int, int], int] | None:
    """(width, height) and band count of an image file from its header alone (PIL opens lazily), or None
    when the file cannot be read (reading it later raises the error that says so)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            bands = len(img.getbands())
            return img.size, 3 if bands == 4 else bands  # RGBA loses its alpha when read
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        return None


def _scan_folders(
    root: Path, folders: Sequence[str], label_of: Mapping[str, int], exts: tuple[str, ...]
) -> tuple[list[str], list[int]]:
    """Relative paths and labels of the image files under ``root/<folder>/**`` (sorted, folders in order)."""
    files: list[str] = []
    labels: list[int] = []
    for folder in folders:
        for dirpath, dirnames, filenames in os.walk(root / folder):
            dirnames.sort()
            for fn in sorted(filenames):
                if fn.lower().endswith(exts):
                    files.append(os.path.relpath(os.path.join(dirpath, fn), root))
                    labels.append(label_of[folder])
    return files, labels


class ImageFolderData(_ImageData):
    """Images in ``root/<class>/**/<file>``; the class is the sub-folder, ``source_id`` the relative path.

    Without ``class_names`` the classes are the sorted sub-folder names. With ``class_names``, label =
    position in that list, and every sub-folder must be one of them (classes without a folder are fine).
    With ``image_size=None`` the selected images must share one size (and, with ``channels=None``, one channel
    count): the headers are checked when the dataset is built, and an error names two files that differ and
    ``data.image_size=``, before any batch is formed.
    """

    def __init__(
        self,
        root: str | Path,
        class_names: Sequence[str] | None = None,
        image_size: int | None = None,
        channels: int | None = 3,
        limit: int | None = None,
        extensions: Sequence[str] = IMAGE_EXTENSIONS,
        name: str | None = None,
        subset: str = "random",
        subset_seed: int | None = None,
        indices: str | Sequence[int] | None = None,
    ) -> None:
        super().__init__(image_size, channels, limit, subset, subset_seed, indices)
        folders = self._open_root(root, extensions)
        if class_names is None:
            self.class_names = folders
        else:
            self.class_names = check_unique_names(class_names, f"image folder '{self.root}'")
            unknown = [f for f in folders if f not in self.class_names]
            if unknown:
                raise ValueError(
                    f"folder class '{unknown[0]}' in '{self.root}' is not in class_names "
                    f"{self.class_names}. Add it to data.class_names or remove the folder."
                )
        index = {c: i for i, c in enumerate(self.class_names)}
        self._files, labels = _scan_folders(self.root, folders, {f: index[f] for f in folders}, self.extensions)
        self._require_files()
        self.name = name or f"imagefolder:{self.root.name}"
        self._select(labels)
        log.debug("%r", self)

    def _open_root(self, root: str | Path, extensions: Sequence[str]) -> list[str]:
        """Check ``root``, set ``root`` and ``extensions``; return the sorted class sub-folder names."""
        self.root = Path(root).expanduser()
        if not self.root.is_dir():
            raise FileNotFoundError(
                f"image folder root not found: '{self.root}'. Point data.root at a folder with one "
                "sub-folder per class (e.g. `geneval data=imagefolder data.root=/path/to/images`)."
            )
        self.extensions = tuple(e.lower() if e.startswith(".") else f".{e.lower()}" for e in extensions)
        return sorted(d.name for d in self.root.iterdir() if d.is_dir() and not d.name.startswith("."))

    def _require_files(self) -> None:
        if not self._files:
            raise ValueError(
                f"no images with extensions {list(self.extensions)} found under '{self.root}/<class>/'. "
                "Expected one sub-folder per class holding image files; set data.extensions if yours "
                "use another suffix."
            )

    def _check_selection(self) -> None:
        """With ``image_size=None``, refuse images that cannot share a batch (read from headers only)."""
        if self.image_size is not None:
            return
        first: tuple[str, tuple] | None = None
        for full in self._indices:
            rel = self._files[full]
            head = _header(self.root / rel)
            if head is None:
                continue
            key = head if self.channels is None else (head[0], 0)
            if first is None:
                first = (rel, key)
            elif key != first[1]:
                (w0, h0), c0 = first[1]
                (w1, h1), c1 = key
                what = (
                    f"is {w0}x{h0} px but '{rel}' is {w1}x{h1} px (width x height)"
                    if (w0, h0) != (w1, h1)
                    else f"has {c0} channel(s) but '{rel}' has {c1} (set data.channels=3 or 1)"
                )
                raise ValueError(
                    f"images in '{self.root}' differ: '{first[0]}' {what}. genEval evaluates images in batches, "
                    "so they must share one size: set data.image_size=<side> (e.g. data.image_size=224) to resize "
                    "every image to a square of that side."
                )

    def _read(self, index: int) -> Tensor:
        from PIL import Image, UnidentifiedImageError

        path = self.root / self._files[index]
        try:
            with Image.open(path) as img:
                img.load()
                return _pil_to_tensor(img, self.channels)
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
            raise ValueError(
                f"cannot read image file '{path}' ({type(err).__name__}: {err}). Remove or "
                "replace the corrupt/non-image file."
            ) from err

    def _source_id(self, index: int) -> str:
        return self._files[index].replace(os.sep, "/")


class ImageNetData(ImageFolderData):
    """ImageNet in the validation-set layout, ``root/<wnid>/<image>`` (e.g. ``n01440764/ILSVRC2012_val_...JPEG``).

    Any subset of the 1,000 wnid folders may be present. Without ``superclasses`` the labels are the 1k class
    indices (timm's order, which 1k classifiers use) and ``class_names`` lists all 1,000 names
    (:func:`genEval.imagenet.imagenet_class_names`: ``"openai"`` open_clip's curated names, ``"lemma"``,
    ``"wnid"``, or a list of 1,000 names). With ``superclasses`` (a named set such as ``restricted_imagenet9``,
    or a mapping name -> inclusive 1k index ranges) the labels are super-class indices, the class names the
    super-class names (or a list of as many), and folders outside every super-class are left out. The folder
    -> class mapping used is logged and kept in ``folder_classes`` (wnid -> (label, name)).
    """

    def __init__(
        self,
        root: str | Path,
        class_names: str | Sequence[str] = "openai",
        superclasses: str | Mapping[str, Sequence] | None = None,
        image_size: int | None = 224,
        channels: int | None = 3,
        limit: int | None = None,
        extensions: Sequence[str] = IMAGE_EXTENSIONS,
        name: str | None = None,
        subset: str = "random",
        subset_seed: int | None = None,
        indices: str | Sequence[int] | None = None,
    ) -> None:
        _ImageData.__init__(self, image_size, channels, limit, subset, subset_seed, indices)
        folders = self._open_root(root, extensions)
        if not folders:
            raise ValueError(
                f"no class folders in '{self.root}'; data=imagenet expects <root>/<wnid>/<image>, e.g. "
                f"'{self.root}/n01440764/ILSVRC2012_val_00000293.JPEG'."
            )
        fine = {f: wnid_index(f) for f in folders}
        if superclasses is None:
            self.superclasses = None
            names = class_names if not isinstance(class_names, str) else imagenet_class_names(class_names)
            self.class_names = self._check_class_names(names, imagenet_class_names("wnid"))
            label_of = fine
        else:
            self.superclasses = superclass_table(superclasses)
            default = list(self.superclasses)
            self.class_names = self._check_class_names(None if isinstance(class_names, str) else class_names, default)
            owner = {k: s for s, members in enumerate(superclass_members(self.superclasses)) for k in members}
            label_of = {f: owner[k] for f, k in fine.items() if k in owner}
            left_out = sorted(set(folders) - set(label_of))
            if left_out:
                log.info(
                    "%s: %d of %d wnid folders lie outside the %d super-classes and are left out (%s%s)",
                    self.root,
                    len(left_out),
                    len(folders),
                    len(default),
                    ", ".join(left_out[:5]),
                    ", ..." if len(left_out) > 5 else "",
                )
            if not label_of:
                raise ValueError(
                    f"none of the {len(folders)} wnid folders in '{self.root}' belongs to a super-class "
                    f"({', '.join(default)}); check data.root and data.superclasses."
                )
            folders = [f for f in folders if f in label_of]
        self.folder_classes = {f: (label_of[f], self.class_names[label_of[f]]) for f in folders}
        self._files, labels = _scan_folders(self.root, folders, label_of, self.extensions)
        self._require_files()
        self.name = name or f"imagenet{'' if self.superclasses is None else len(self.class_names)}:{self.root.name}"
        self._select(labels)
        shown = ", ".join(f"{w} -> {lab} {nm!r}" for w, (lab, nm) in list(self.folder_classes.items())[:20])
        log.info(
            "%s: wnid folder -> class: %s%s",
            self.name,
            shown,
            f", ... ({len(self.folder_classes)} folders)" if len(self.folder_classes) > 20 else "",
        )

    def _check_class_names(self, class_names: Sequence[str] | None, default: list[str]) -> list[str]:
        if class_names is None:
            return check_unique_names(default, type(self).__name__)
        return super()._check_class_names(class_names, default)


class CIFAR10Data(_ImageData):
    """CIFAR-10 in torchvision's format (``<root>/cifar-10-batches-py``), loaded with torchvision.

    ``root=None`` uses ``genEval.checkpoints.cache_dir("cifar10")``. The JPEG copy in the shared assets is
    read with ``data=cifar10_jpg`` (:class:`ImageFolderData`) instead.
    """

    def __init__(
        self,
        root: str | Path | None = None,
        train: bool = False,
        download: bool = False,
        image_size: int | None = None,
        channels: int | None = 3,
        limit: int | None = None,
        class_names: Sequence[str] | None = None,
        subset: str = "random",
        subset_seed: int | None = None,
        indices: str | Sequence[int] | None = None,
    ) -> None:
        super().__init__(image_size, channels, limit, subset, subset_seed, indices)
        from torchvision.datasets import CIFAR10

        if root is None:
            root = cache_dir("cifar10")
        self.root = Path(root).expanduser()
        self.train = bool(train)
        split = "train" if self.train else "test"
        try:
            ds = CIFAR10(str(self.root), train=self.train, download=bool(download))
        except RuntimeError as err:
            raise FileNotFoundError(
                f"CIFAR-10 ({split}) not found under '{self.root}/cifar-10-batches-py' ({err}). Set "
                "data.download=true when online, or use data=cifar10_jpg (the offline JPEG copy in the "
                "shared assets)."
            ) from err
        self._images = ds.data  # (N, 32, 32, 3) uint8; torchvision holds the pickles in memory
        self.class_names = self._check_class_names(class_names, CIFAR10_CLASSES)
        self.name = f"cifar10:{split}"
        self._split = split
        self._select(ds.targets)

    def _read(self, index: int) -> Tensor:
        return torch.from_numpy(np.ascontiguousarray(self._images[index])).permute(2, 0, 1).float() / 255.0

    def _source_id(self, index: int) -> str:
        return f"{self._split}/{index:05d}"


_IDX_MAGIC = {"images": 2051, "labels": 2049}  # 0x0803 / 0x0801: unsigned bytes, 3 / 1 dims


def read_mnist_file(path: str | Path, kind: str) -> Tensor:
    """An MNIST idx file read by torchvision: ``kind="images"`` -> uint8 ``(N, H, W)``, ``"labels"`` -> int64 ``(N,)``.

    ``.gz`` files are decompressed into a temporary folder first (torchvision's readers take a plain file).
    The magic number is checked here so that a swapped or foreign file gets an error that says so.
    """
    from torchvision.datasets.mnist import read_image_file, read_label_file  # slow import, see module docstring
    from torchvision.datasets.utils import extract_archive

    path = Path(path)
    try:
        with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as fh:
            header = fh.read(4)
    except (OSError, EOFError) as err:
        raise ValueError(f"cannot read '{path}' ({err}); is it an MNIST idx file, and not corrupt?") from err
    if len(header) < 4:
        raise ValueError(f"'{path}' is too short to be an idx file")
    magic, expect = int.from_bytes(header, "big"), _IDX_MAGIC[kind]
    if magic != expect:
        raise ValueError(
            f"'{path}' has idx magic number {magic} but {expect} was expected ({kind} file). Is it "
            "the right file, and not corrupt?"
        )
    reader = read_image_file if kind == "images" else read_label_file
    try:
        if path.suffix != ".gz":
            return reader(str(path))
        with tempfile.TemporaryDirectory(prefix="geneval-mnist-") as tmp:
            return reader(str(extract_archive(str(path), tmp)))
    except (RuntimeError, ValueError, TypeError) as err:  # torchvision's view() of too few/many bytes
        raise ValueError(f"'{path}' is truncated or damaged: its header does not match its data ({err}).") from err


class MNISTData(_ImageData):
    """MNIST from its original idx files (``t10k-images-idx3-ubyte[.gz]`` etc.), read with torchvision.

    Files are looked up in ``root`` and in ``root/MNIST/raw`` (torchvision's layout) and held in memory;
    the same class reads Fashion-MNIST (same format) with ``class_names`` set.
    """

    _PREFIX = {"test": "t10k", "train": "train"}

    def __init__(
        self,
        root: str | Path | None = None,
        split: str = "test",
        image_size: int | None = None,
        channels: int | None = 1,
        limit: int | None = None,
        class_names: Sequence[str] | None = None,
        name: str | None = None,
        subset: str = "random",
        subset_seed: int | None = None,
        indices: str | Sequence[int] | None = None,
    ) -> None:
        super().__init__(image_size, channels, limit, subset, subset_seed, indices)
        if split not in self._PREFIX:
            raise ValueError(f"MNIST split must be one of {list(self._PREFIX)}, got {split!r}.")
        if root is None:
            root = cache_dir("mnist")
        self.root = Path(root).expanduser()
        self.split = split
        prefix = self._PREFIX[split]
        img_path = self._find(f"{prefix}-images-idx3-ubyte")
        lbl_path = self._find(f"{prefix}-labels-idx1-ubyte")
        labels = read_mnist_file(lbl_path, "labels")
        self._images = read_mnist_file(img_path, "images")  # (N, H, W) uint8
        if len(self._images) != len(labels):
            raise ValueError(
                f"'{img_path}' holds {len(self._images)} images but '{lbl_path}' holds "
                f"{len(labels)} labels; the files do not belong together."
            )
        self.class_names = self._check_class_names(class_names, DIGIT_CLASSES)
        self.name = name or f"mnist:{split}"
        self._select(labels.tolist())

    def _find(self, stem: str) -> Path:
        folders = (self.root, self.root / "MNIST" / "raw")
        candidates = [d / f"{stem}{ext}" for d in folders for ext in ("", ".gz")]
        for c in candidates:
            if c.is_file():
                return c
        raise FileNotFoundError(
            f"MNIST {self.split} file '{stem}' not found: looked for {[str(c) for c in candidates]}. Put "
            f"the idx files ({stem} or {stem}.gz) in data.root."
        )

    def _read(self, index: int) -> Tensor:
        return self._images[index].float().div(255.0).unsqueeze(0)

    def _source_id(self, index: int) -> str:
        return f"{self.split}/{index:05d}"


class DigitsData(_ImageData):
    """scikit-learn's bundled 8x8 digits (1,797 images; values 0..16 scaled to [0, 1]): the offline default.

    A stratified train/test split with a fixed seed (independent of any run seed) gives 1,257 train and
    540 test images for ``test_fraction=0.3``; images are up-sampled to ``image_size`` (bilinear).
    ``source_id`` is ``"digits/<index in load_digits>"``, the same for both splits.
    """

    SPLIT_SEED = 0

    def __init__(
        self,
        split: str = "test",
        image_size: int | None = 16,
        channels: int | None = 1,
        test_fraction: float = 0.3,
        limit: int | None = None,
        class_names: Sequence[str] | None = None,
        subset: str = "random",
        subset_seed: int | None = None,
        indices: str | Sequence[int] | None = None,
    ) -> None:
        super().__init__(image_size, channels, limit, subset, subset_seed, indices)
        if split not in ("train", "test"):
            raise ValueError(f"digits split must be 'train' or 'test', got {split!r}.")
        if not 0.0 < float(test_fraction) < 1.0:
            raise ValueError(f"test_fraction must lie strictly between 0 and 1, got {test_fraction!r}.")
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        digits = load_digits()
        idx = np.arange(len(digits.target))
        train_idx, test_idx = train_test_split(
            idx, test_size=float(test_fraction), stratify=digits.target, random_state=self.SPLIT_SEED, shuffle=True
        )
        chosen = np.sort(train_idx if split == "train" else test_idx)
        self.split = split
        self.test_fraction = float(test_fraction)
        self._orig = chosen.tolist()
        images = torch.from_numpy(digits.images[chosen].astype(np.float32) / 16.0).unsqueeze(1)
        if self.image_size is not None:
            images = resize_images(images, self.image_size)  # resize once; the set is tiny
        self._images = images.clamp(0, 1)
        self.class_names = self._check_class_names(class_names, DIGIT_CLASSES)
        self.name = f"digits:{split}"
        self._select(digits.target[chosen].tolist())

    def _read(self, index: int) -> Tensor:
        return self._images[index]

    def _source_id(self, index: int) -> str:
        return f"digits/{self._orig[index]:04d}"


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
