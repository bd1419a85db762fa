"""The standard small data sets, held in memory: CIFAR-10 (torchvision's pickles), MNIST (idx files) and
scikit-learn's bundled digits (the offline default). The options common to every data set are described in
:mod:`genEval.data.base`; torchvision is imported inside the functions that use it (about two seconds).
"""

import gzip
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from genEval.checkpoints import cache_dir
from genEval.data.base import ImageData
from genEval.declared import ClassSet, Declaration, square
from genEval.interfaces import SettingError, resize_images

log = logging.getLogger(__name__)

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
DIGIT_CLASSES = [str(d) for d in range(10)]


class CIFAR10Data(ImageData):
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

    @classmethod
    def declare(
        cls, image_size: int | None = None, channels: int | None = 3, class_names: Sequence[str] | None = None, **_
    ) -> Declaration:
        """CIFAR-10's label space (renamed classes keep its indices), 32 px RGB unless resized."""
        classes = ClassSet(class_names or CIFAR10_CLASSES, family="cifar10")
        return Declaration(classes=classes, channels=channels or 3, size=square(image_size or 32))

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


class MNISTData(ImageData):
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
            raise SettingError("split", split, f"one of {', '.join(self._PREFIX)} (MNIST's files)", "test")
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

    @classmethod
    def declare(
        cls, image_size: int | None = None, channels: int | None = 1, class_names: Sequence[str] | None = None, **_
    ) -> Declaration:
        """The ten digits, or the classes ``class_names`` give (Fashion-MNIST): another label space."""
        classes = ClassSet(class_names) if class_names is not None else ClassSet(DIGIT_CLASSES, family="digits")
        return Declaration(classes=classes, channels=channels or 1, size=square(image_size or 28))

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


class DigitsData(ImageData):
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
            raise SettingError("split", split, "train or test", "test")
        if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)) or not 0 < test_fraction < 1:
            raise SettingError("test_fraction", test_fraction, "a number strictly between 0 and 1", "0.3")
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

    @classmethod
    def declare(
        cls, image_size: int | None = 16, channels: int | None = 1, class_names: Sequence[str] | None = None, **_
    ) -> Declaration:
        """The ten digits (renamed classes keep their indices), grey, ``image_size`` px (8 when null)."""
        classes = ClassSet(class_names or DIGIT_CLASSES, family="digits")
        return Declaration(classes=classes, channels=channels or 1, size=square(image_size or 8))

    def _read(self, index: int) -> Tensor:
        return self._images[index]

    def _source_id(self, index: int) -> str:
        return f"digits/{self._orig[index]:04d}"
