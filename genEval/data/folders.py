"""Image folders: one sub-folder per class (:class:`ImageFolderData`) and ImageNet in wnid folders
(:class:`ImageNetData`, class index and name from :mod:`genEval.data.imagenet`). Images are read in
``__getitem__``; the options common to every data set are described in :mod:`genEval.data.base`.

Which class a sub-folder is: ImageNet folders by their wnid; other folders by name, onto ``class_names`` when
given, else onto ``known_classes`` (the tested classifier's classes, which the command layer passes: a folder
holding only ``ship/`` and ``dog/`` evaluated with a CIFAR-10 model gets labels 8 and 5, the model's indices),
else the sorted sub-folders are numbered 0..k-1. Names match ignoring case and ``_``/``-``/spaces; a folder
that matches no class is refused, with every such folder listed.

A file that cannot be decoded raises :class:`~genEval.interfaces.UnreadableSource` naming it; with
``skip_unreadable=True`` the driver skips such sources, logs each and lists them in ``results.json``.
"""

import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from genEval.assets import resolve as resolve_asset
from genEval.data.base import ImageData, check_unique_names
from genEval.data.imagenet import imagenet_class_names, superclass_members, superclass_table, wnid_index
from genEval.declared import ClassSet, Declaration, square
from genEval.interfaces import SettingError, UnreadableSource

log = logging.getLogger(__name__)

OTHER_FOLDERS = ("refuse", "skip")  # what an image folder does with the folders of classes not in class_names
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm")


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


def _norm(name: str) -> str:
    """A class or folder name for matching: lower case, runs of ``_``, ``-`` and spaces as one space."""
    return re.sub(r"[\s_-]+", " ", str(name)).strip().lower()


def map_folders(folders: Sequence[str], class_names: Sequence[str], root: Path, source: str) -> dict[str, int]:
    """Sub-folder name -> index in ``class_names``: the exact name, else the one class whose name matches
    ignoring case and ``_``/``-``/spaces. Folders that match no class are refused, all of them listed, with the
    classes ``source`` names (e.g. ``class_names``, ``the classes of classifier cifar_resnet20:...``)."""
    exact = {c: i for i, c in enumerate(class_names)}
    loose: dict[str, list[int]] = {}
    for i, c in enumerate(class_names):
        loose.setdefault(_norm(c), []).append(i)
    label_of, unknown = {}, []
    for f in folders:
        if f in exact:
            label_of[f] = exact[f]
        elif len(loose.get(_norm(f), [])) == 1:
            label_of[f] = loose[_norm(f)][0]
        else:
            unknown.append(f)
    if unknown:
        listed = ", ".join(repr(f) for f in unknown)
        many = len(unknown) > 1
        raise ValueError(
            f"folder class{'es' if many else ''} {listed} in '{root}' {'are' if many else 'is'} not in {source} "
            f"{list(class_names)}. Rename {'those folders' if many else 'it'} to class names (matching ignores "
            "case, '_', '-' and spaces), remove them, or set data.class_names=[...] to give every class in "
            "the model's logit order."
        )
    return label_of


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


def class_folders(root: str | Path) -> tuple[Path, list[str]]:
    """The resolved ``root`` (an ``asset:`` name found) and its sorted class sub-folders (hidden ones left out):
    the one listing the cheap checks may make (:mod:`genEval.declared`)."""
    path = resolve_asset(root)
    if not path.is_dir():
        raise FileNotFoundError(
            f"image folder root not found: '{path}'. Point data.root at a folder with one "
            "sub-folder per class (e.g. `geneval data=imagefolder data.root=/path/to/images`)."
        )
    return path, sorted(d.name for d in path.iterdir() if d.is_dir() and not d.name.startswith("."))


def _flag(key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise SettingError(key, value, "true or false", "true")
    return value


class ImageFolderData(ImageData):
    """Images in ``root/<class>/**/<file>``; the class is the sub-folder, ``source_id`` the relative path.

    With ``class_names``, label = position in that list, and every sub-folder must be one of them (classes
    without a folder are fine). Without, ``known_classes`` (the tested classifier's classes in logit order; the
    command layer passes them, ``known_from`` says whose they are) play that role, so folder names land on the
    model's indices; without either, the classes are the sorted sub-folder names (see the module docstring).
    ``skip_unreadable``: the driver skips sources whose file cannot be decoded (logged, listed in results).
    ``other_folders="skip"`` (with ``class_names``) leaves out the folders of classes not named instead of refusing
    them: the classes two label spaces share, e.g. CIFAR-10 without deer for an ImageNet classifier
    (:mod:`genEval.data.class_maps`).
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
        skip_unreadable: bool = False,
        known_classes: Sequence[str] | None = None,
        known_from: str | None = None,
        other_folders: str = "refuse",
    ) -> None:
        super().__init__(image_size, channels, limit, subset, subset_seed, indices)
        self.skip_unreadable = _flag("skip_unreadable", skip_unreadable)
        folders = self._open_root(root, extensions)
        if other_folders not in OTHER_FOLDERS:
            raise SettingError("other_folders", other_folders, " | ".join(OTHER_FOLDERS), "skip")
        if other_folders == "skip" and class_names is not None:  # keep the classes named (shared classes only)
            named = {_norm(c) for c in class_names}
            left = [f for f in folders if _norm(f) not in named]
            folders = [f for f in folders if _norm(f) in named]
            if left:
                log.info("image folder '%s': left out the folders of other classes: %s", self.root, ", ".join(left))
        if class_names is not None:
            self.class_names = check_unique_names(class_names, f"image folder '{self.root}'")
            label_of = map_folders(folders, self.class_names, self.root, "class_names")
        elif known_classes is not None:
            self.class_names = check_unique_names(known_classes, f"{known_from or 'known_classes'}")
            label_of = map_folders(folders, self.class_names, self.root, f"the classes of {known_from or 'the model'}")
        else:
            self.class_names = folders
            label_of = {f: i for i, f in enumerate(folders)}
        self.folder_classes = {f: (label_of[f], self.class_names[label_of[f]]) for f in folders}
        self._files, labels = _scan_folders(self.root, folders, label_of, self.extensions)
        self._require_files()
        self.name = name or f"imagefolder:{self.root.name}"
        self._select(labels)
        if class_names is None and known_classes is not None:
            log.info(
                "%s: folders mapped onto the %d classes of %s: %s",
                self.name,
                len(self.class_names),
                known_from or "the model",
                ", ".join(f"{f} -> {lab} {nm!r}" for f, (lab, nm) in self.folder_classes.items()),
            )
        log.debug("%r", self)

    @classmethod
    def declare(
        cls,
        root: str | Path,
        class_names: Sequence[str] | None = None,
        image_size: int | None = None,
        channels: int | None = 3,
        **_,
    ) -> Declaration:
        """The classes (``class_names``, else the class folders, mapped onto a model's classes by name) and the
        image shape where the settings fix it; lists the class folders, reads no image."""
        _, folders = class_folders(root)
        classes = ClassSet(class_names) if class_names is not None else ClassSet(folders, mapped=True)
        return Declaration(classes=classes, channels=channels, size=square(image_size))

    def _open_root(self, root: str | Path, extensions: Sequence[str]) -> list[str]:
        """Check ``root``, set ``root`` and ``extensions``; return the sorted class sub-folder names."""
        self.root, folders = class_folders(root)
        self.extensions = tuple(e.lower() if e.startswith(".") else f".{e.lower()}" for e in extensions)
        return folders

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
                img.load()  # decodes the whole file: a truncated JPEG fails here, not later
                return _pil_to_tensor(img, self.channels)
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
            raise UnreadableSource(self._source_id(index), str(path), f"{type(err).__name__}: {err}") from err

    def _source_id(self, index: int) -> str:
        return self._files[index].replace(os.sep, "/")


class ImageNetData(ImageFolderData):
    """ImageNet in the validation-set layout, ``root/<wnid>/<image>`` (e.g. ``n01440764/ILSVRC2012_val_...JPEG``).

    Any subset of the 1,000 wnid folders may be present. Without ``superclasses`` the labels are the 1k class
    indices (timm's order, which 1k classifiers use) and ``class_names`` lists all 1,000 names
    (:func:`genEval.data.imagenet.imagenet_class_names`: ``"openai"`` open_clip's curated names, ``"lemma"``,
    ``"wnid"``, or a list of 1,000 names; None = ``"openai"``). With ``superclasses`` (a named set such as
    ``restricted_imagenet9``, or a mapping name -> inclusive 1k index ranges) the labels are super-class indices,
    the class names the super-class names (``class_names`` None or a name source) or a list of as many, and
    folders outside every super-class are left out. The folder -> class mapping used is logged and kept in
    ``folder_classes`` (wnid -> (label, name)).
    """

    def __init__(
        self,
        root: str | Path,
        class_names: str | Sequence[str] | None = "openai",
        superclasses: str | Mapping[str, Sequence] | None = None,
        image_size: int | None = 224,
        channels: int | None = 3,
        limit: int | None = None,
        extensions: Sequence[str] = IMAGE_EXTENSIONS,
        name: str | None = None,
        subset: str = "random",
        subset_seed: int | None = None,
        indices: str | Sequence[int] | None = None,
        skip_unreadable: bool = False,
    ) -> None:
        ImageData.__init__(self, image_size, channels, limit, subset, subset_seed, indices)
        self.skip_unreadable = _flag("skip_unreadable", skip_unreadable)
        folders = self._open_root(root, extensions)
        if not folders:
            raise ValueError(
                f"no class folders in '{self.root}'; data=imagenet expects <root>/<wnid>/<image>, e.g. "
                f"'{self.root}/n01440764/ILSVRC2012_val_00000293.JPEG'."
            )
        fine = {f: wnid_index(f) for f in folders}
        if superclasses is None:
            self.superclasses = None
            plain = class_names is None or isinstance(class_names, str)
            names = imagenet_class_names(class_names or "openai") if plain else class_names
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

    @classmethod
    def declare(
        cls,
        root: str | Path,
        class_names: str | Sequence[str] | None = "openai",
        superclasses: str | Mapping[str, Sequence] | None = None,
        image_size: int | None = 224,
        channels: int | None = 3,
        **_,
    ) -> Declaration:
        """ImageNet-1k's label space (whatever names it prints), or the super-classes; checks that ``root`` is a
        folder (its class folders are checked when the data set is built)."""
        class_folders(root)
        if superclasses is None:
            plain = class_names is None or isinstance(class_names, str)
            names = imagenet_class_names(class_names or "openai") if plain else list(class_names)
            classes = ClassSet(names, family="imagenet1k")
        else:
            names = list(superclass_table(superclasses))
            classes = ClassSet(names if class_names is None or isinstance(class_names, str) else list(class_names))
        return Declaration(classes=classes, channels=channels, size=square(image_size))

    def _check_class_names(self, class_names: Sequence[str] | None, default: list[str]) -> list[str]:
        if class_names is None:
            return check_unique_names(default, type(self).__name__)
        return super()._check_class_names(class_names, default)
