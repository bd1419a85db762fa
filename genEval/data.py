"""Evaluation datasets: the test images ``x`` and labels ``y`` that the search starts from.

Every dataset here follows :class:`genEval.interfaces.ImageDataset`::

    dataset[i] -> (image (C, H, W) float32 in [0, 1], label int, source_id str)

``source_id`` is stable across runs (a path relative to the root, or ``"test/00042"``), so results,
bootstrap intervals over source images (METHOD.md) and resumed runs can refer to the same picture.

Common options (all datasets):

* ``image_size``: resize to a square side (bilinear, antialiased when shrinking; ``None`` keeps the
  native size).
* ``channels``: ``1`` grayscale (ITU-R 601 luma, as PIL's ``"L"``; torchvision's ``rgb_to_grayscale``),
  ``3`` RGB (grayscale sources are repeated), ``None`` keeps the source's channels.
* ``limit``: a deterministic, class-balanced subset. Samples are interleaved round-robin over the
  classes (class order = label order, within a class the dataset's own order), and the first ``limit``
  of that sequence are kept. The same ``limit`` always gives the same samples, and ``limit=N`` is a
  prefix of ``limit=N+k``, so a small run is the start of a larger one.
* ``class_names``: override the class names (e.g. better prompts for a CLIP oracle).

Images are read in ``__getitem__`` (files are never all held in memory); only the tiny scikit-learn
digits set, torchvision's CIFAR-10 pickles and MNIST's idx files (at most 47 MB) are held as arrays.

torchvision is imported inside the functions that use it: it costs about two seconds to import, and a run
on an image folder never needs it.
"""

from __future__ import annotations

import abc
import gzip
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from genEval.checkpoints import cache_dir
from genEval.interfaces import resize_images

log = logging.getLogger(__name__)

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
DIGIT_CLASSES = [str(d) for d in range(10)]
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm")


def round_robin_order(labels: Sequence[int]) -> list[int]:
    """Indices interleaved over classes: first of each class (in label order), then second of each, ...

    Any prefix of the result is as class-balanced as possible; classes that run out are skipped.
    """
    by_class: dict[int, list[int]] = {}
    for i, y in enumerate(labels):
        by_class.setdefault(int(y), []).append(i)
    queues = [by_class[c] for c in sorted(by_class)]
    order: list[int] = []
    for depth in range(max((len(q) for q in queues), default=0)):
        order.extend(q[depth] for q in queues if depth < len(q))
    return order


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
    """Shared machinery: option checks, the round-robin ``limit`` subset, channel/size conversion.

    Subclasses set ``name``, ``class_names``, call :meth:`_select` with the labels of all samples, and
    implement ``_read(full_index) -> (image (C, H, W) float in [0, 1], source_id)``.
    """

    name: str
    class_names: list[str]

    def __init__(self, image_size: int | None, channels: int | None, limit: int | None) -> None:
        if image_size is not None and (isinstance(image_size, bool) or int(image_size) != image_size
                                       or image_size < 1):
            raise ValueError(f"image_size must be a positive integer or null (keep the native size), "
                             f"got {image_size!r}.")
        if channels not in (None, 1, 3):
            raise ValueError(f"channels must be 1 (grayscale), 3 (RGB) or null (keep the source's), "
                             f"got {channels!r}.")
        if limit is not None and (isinstance(limit, bool) or int(limit) != limit or limit < 1):
            raise ValueError(f"limit must be a positive integer (number of samples) or null (all), "
                             f"got {limit!r}.")
        self.image_size = None if image_size is None else int(image_size)
        self.channels = channels
        self.limit = None if limit is None else int(limit)
        self._indices: list[int] = []
        self.labels: list[int] = []

    def _select(self, labels: Sequence[int]) -> None:
        """Fix the samples this dataset exposes: all in order, or the round-robin prefix of ``limit``."""
        labels = [int(y) for y in labels]
        if self.limit is None:
            self._indices = list(range(len(labels)))
        else:
            self._indices = round_robin_order(labels)[: self.limit]
        self.labels = [labels[i] for i in self._indices]

    def _check_class_names(self, class_names: Sequence[str] | None, default: list[str]) -> list[str]:
        if class_names is None:
            return list(default)
        names = [str(c) for c in class_names]
        if len(names) != len(default):
            raise ValueError(f"{type(self).__name__}: class_names has {len(names)} entries but the dataset "
                             f"has {len(default)} classes ({default}). Give one name per class, in label "
                             "order.")
        return names

    @abc.abstractmethod
    def _read(self, index: int) -> tuple[Tensor, str]:
        """Image (C, H, W) in [0, 1] and source id of raw sample ``index`` (before limit/order)."""

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, index: int) -> tuple[Tensor, int, str]:
        n = len(self._indices)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index} out of range for {self.name} with {n} samples")
        full = self._indices[index]
        image, source_id = self._read(full)
        image = _to_channels(image, self.channels)
        if self.image_size is not None:
            image = resize_images(image.unsqueeze(0), self.image_size)[0]
        return image.float().contiguous(), self.labels[index], source_id

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(name={self.name!r}, n={len(self)}, classes={len(self.class_names)}, "
                f"image_size={self.image_size}, channels={self.channels}, limit={self.limit})")


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


class ImageFolderData(_ImageData):
    """Images in ``root/<class>/**/<file>``; the class is the sub-folder, ``source_id`` the relative path.

    Without ``class_names`` the classes are the sorted sub-folder names. With ``class_names``, label =
    position in that list, and every sub-folder must be one of them (classes without a folder are fine).
    """

    def __init__(self, root: str | Path, class_names: Sequence[str] | None = None,
                 image_size: int | None = None, channels: int | None = 3, limit: int | None = None,
                 extensions: Sequence[str] = IMAGE_EXTENSIONS, name: str | None = None) -> None:
        super().__init__(image_size, channels, limit)
        self.root = Path(root).expanduser()
        if not self.root.is_dir():
            raise FileNotFoundError(
                f"image folder root not found: '{self.root}'. Point data.root at a folder with one "
                "sub-folder per class (e.g. `geneval data=imagefolder data.root=/path/to/images`).")
        exts = tuple(e.lower() if e.startswith(".") else f".{e.lower()}" for e in extensions)
        folders = sorted(d.name for d in self.root.iterdir() if d.is_dir() and not d.name.startswith("."))
        if class_names is None:
            self.class_names = folders
        else:
            self.class_names = [str(c) for c in class_names]
            unknown = [f for f in folders if f not in self.class_names]
            if unknown:
                raise ValueError(
                    f"folder class '{unknown[0]}' in '{self.root}' is not in class_names "
                    f"{self.class_names}. Add it to data.class_names or remove the folder.")
        index = {c: i for i, c in enumerate(self.class_names)}
        self._files: list[str] = []
        labels: list[int] = []
        for folder in folders:
            for dirpath, dirnames, filenames in os.walk(self.root / folder):
                dirnames.sort()
                for fn in sorted(filenames):
                    if fn.lower().endswith(exts):
                        self._files.append(os.path.relpath(os.path.join(dirpath, fn), self.root))
                        labels.append(index[folder])
        if not self._files:
            raise ValueError(
                f"no images with extensions {list(exts)} found under '{self.root}/<class>/'. "
                "Expected one sub-folder per class holding image files; set data.extensions if yours "
                "use another suffix.")
        self.extensions = exts
        self.name = name or f"imagefolder:{self.root.name}"
        self._select(labels)
        log.debug("%r", self)

    def _read(self, index: int) -> tuple[Tensor, str]:
        from PIL import Image, UnidentifiedImageError

        rel = self._files[index]
        path = self.root / rel
        try:
            with Image.open(path) as img:
                img.load()
                image = _pil_to_tensor(img, self.channels)
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
            raise ValueError(f"cannot read image file '{path}' ({type(err).__name__}: {err}). Remove or "
                             "replace the corrupt/non-image file.") from err
        return image, rel.replace(os.sep, "/")


class CIFAR10Data(_ImageData):
    """CIFAR-10 in torchvision's format (``<root>/cifar-10-batches-py``), loaded with torchvision.

    ``root=None`` uses ``genEval.checkpoints.cache_dir("cifar10")``. The JPEG copy in the shared assets is
    read with ``data=cifar10_jpg`` (:class:`ImageFolderData`) instead.
    """

    def __init__(self, root: str | Path | None = None, train: bool = False, download: bool = False,
                 image_size: int | None = None, channels: int | None = 3, limit: int | None = None,
                 class_names: Sequence[str] | None = None) -> None:
        super().__init__(image_size, channels, limit)
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
                "shared assets).") from err
        self._images = ds.data  # (N, 32, 32, 3) uint8; torchvision holds the pickles in memory
        self.class_names = self._check_class_names(class_names, CIFAR10_CLASSES)
        self.name = f"cifar10:{split}"
        self._split = split
        self._select(ds.targets)

    def _read(self, index: int) -> tuple[Tensor, str]:
        image = torch.from_numpy(np.ascontiguousarray(self._images[index])).permute(2, 0, 1).float() / 255.0
        return image, f"{self._split}/{index:05d}"


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
        raise ValueError(f"'{path}' has idx magic number {magic} but {expect} was expected ({kind} file). Is it "
                         "the right file, and not corrupt?")
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

    def __init__(self, root: str | Path | None = None, split: str = "test", image_size: int | None = None,
                 channels: int | None = 1, limit: int | None = None,
                 class_names: Sequence[str] | None = None, name: str | None = None) -> None:
        super().__init__(image_size, channels, limit)
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
            raise ValueError(f"'{img_path}' holds {len(self._images)} images but '{lbl_path}' holds "
                             f"{len(labels)} labels; the files do not belong together.")
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
            f"the idx files ({stem} or {stem}.gz) in data.root.")

    def _read(self, index: int) -> tuple[Tensor, str]:
        return self._images[index].float().div(255.0).unsqueeze(0), f"{self.split}/{index:05d}"


class DigitsData(_ImageData):
    """scikit-learn's bundled 8x8 digits (1,797 images; values 0..16 scaled to [0, 1]): the offline default.

    A stratified train/test split with a fixed seed (independent of any run seed) gives 1,257 train and
    540 test images for ``test_fraction=0.3``; images are up-sampled to ``image_size`` (bilinear).
    ``source_id`` is ``"digits/<index in load_digits>"``, the same for both splits.
    """

    SPLIT_SEED = 0

    def __init__(self, split: str = "test", image_size: int | None = 16, channels: int | None = 1,
                 test_fraction: float = 0.3, limit: int | None = None,
                 class_names: Sequence[str] | None = None) -> None:
        super().__init__(image_size, channels, limit)
        if split not in ("train", "test"):
            raise ValueError(f"digits split must be 'train' or 'test', got {split!r}.")
        if not 0.0 < float(test_fraction) < 1.0:
            raise ValueError(f"test_fraction must lie strictly between 0 and 1, got {test_fraction!r}.")
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        digits = load_digits()
        idx = np.arange(len(digits.target))
        train_idx, test_idx = train_test_split(idx, test_size=float(test_fraction), stratify=digits.target,
                                               random_state=self.SPLIT_SEED, shuffle=True)
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

    def _read(self, index: int) -> tuple[Tensor, str]:
        return self._images[index], f"digits/{self._orig[index]:04d}"


class SubsetData:
    """A fixed subset of another dataset (same classes, same source ids), e.g. the fit/score split of
    ``mask=auto``. ``name`` gets ``suffix`` so results say which part was scored."""

    def __init__(self, data, indices: Sequence[int], suffix: str = "subset") -> None:
        self.data, self.indices = data, [int(i) for i in indices]
        self.class_names = list(data.class_names)
        self.name = f"{getattr(data, 'name', type(data).__name__)}[{suffix}]"
        base = getattr(data, "labels", None)
        self.labels = [base[i] for i in self.indices] if base is not None else None

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int):
        return self.data[self.indices[index]]
