"""What a component will be, read from its settings before it is built: the cheap checks' vocabulary (docs/assets.md).

Building a component can take minutes: weights are downloaded, a CLIP head encodes thousands of prompts, a digits
model is trained on first use. The command layer therefore checks that the pieces of a run fit together from their
configs alone, before building any of them (:mod:`genEval.commands.checks`): the tested classifier's classes against
the data's, the oracle's, the data's images against the generator, a mask file against the generator's latents.

A component's ``_target_`` (a class or a factory function) takes part by offering

* ``declare(**arguments) -> Declaration``: what the component built from these arguments will be (its classes, the
  images it gives or takes, its latent space), from the arguments alone: no weights loaded, no data read beyond
  listing class folders. A class defines it as a classmethod; a factory function gets it with :func:`declared_by`.
* ``check_available(**arguments) -> None`` (optional): raise, within seconds, when the component cannot be built
  now (its weights are neither on this machine nor downloadable), naming the setting that fixes it.

``arguments`` are the config's values with the target's defaults filled in. Anything a declaration leaves ``None``
is unknown and not checked; the component's own checks still run when it is built.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

#: Label spaces known by name: members of one family share their class indices, whatever names they print
#: (an ImageNet classifier's "tench" is open_clip's "tench" and the wnid n01440764).
FAMILIES = {"imagenet1k": "ImageNet-1k", "cifar10": "CIFAR-10", "digits": "digit"}


def normalised(name: str) -> str:
    """A class name for matching: lower case, runs of ``_``, ``-`` and spaces as one space."""
    return re.sub(r"[\s_-]+", " ", str(name)).strip().lower()


@dataclass(frozen=True)
class ClassSet:
    """The classes of a model's logits or of a data set's labels, in label order, as far as they are known.

    ``names``: the class names (None when only their number is known); ``count``: how many (from ``names`` when
    given); ``family``: a label space of :data:`FAMILIES` whose members share indices whatever names they use.
    ``mapped`` (data only): the data's folders are mapped onto the model's classes by name, so ``names`` are the
    folder names, a subset of the model's classes in any order.
    """

    names: tuple[str, ...] | None = None
    count: int | None = None
    family: str | None = None
    mapped: bool = False

    def __post_init__(self) -> None:
        if self.names is not None:
            object.__setattr__(self, "names", tuple(str(n) for n in self.names))
            if self.count is None and not self.mapped:
                object.__setattr__(self, "count", len(self.names))
        if self.family is not None and self.family not in FAMILIES:
            raise ValueError(f"unknown class family {self.family!r}; known: {', '.join(FAMILIES)}.")

    def describe(self) -> str:
        """``the 10 CIFAR-10 classes [airplane, automobile, ...]`` (as much as is known)."""
        title = f" {FAMILIES[self.family]}" if self.family else ""
        if self.mapped:
            return f"the class folders {_listed(self.names or ())}"
        count = f" {self.count}" if self.count is not None else ""
        names = f" {_listed(self.names)}" if self.names is not None else ""
        return f"the{count}{title} classes{names}"

    def mismatch(self, data: ClassSet) -> str | None:
        """Why a model whose logits are these classes cannot be scored on ``data``'s labels, or None when they fit
        (or too little is known to tell)."""
        if data.mapped:
            if self.names is None:  # the folders are numbered 0..k-1
                k = len(data.names or ())
                return f"it has {self.count} classes and the data {k}" if self.count not in (None, k) else None
            known = {normalised(n) for n in self.names}
            unknown = [n for n in data.names or () if normalised(n) not in known]
            return f"it has no class for the folders {_listed(unknown)}" if unknown else None
        if self.family is not None and data.family is not None:
            return None if self.family == data.family else "they are different label spaces"
        if self.count is not None and data.count is not None and self.count != data.count:
            return f"it has {self.count} classes and the data {data.count}"
        if self.names is not None and data.names is not None:
            if [normalised(n) for n in self.names] != [normalised(n) for n in data.names]:
                return "their names differ"
        return None


@dataclass(frozen=True)
class Declaration:
    """What a built component will be (every field optional: None is unknown).

    ``classes``: a classifier's logits or a data set's labels. ``channels`` / ``size``: the images a data set gives
    (``size`` ``(H, W)``), or the ones a generator takes (``size``: the side it resizes every image to itself, None
    when it takes them at their size). ``downsample`` / ``latent_channels``: a generator's latent space, ``(B,
    latent_channels, H / downsample, W / downsample)``. ``latents``: the latent shape a style mask was fitted for.
    """

    classes: ClassSet | None = None
    channels: int | None = None
    size: tuple[int, int] | None = None
    downsample: int | None = None
    latent_channels: int | None = None
    latents: tuple[int, ...] | None = None

    def latent_shape(self, image_size: tuple[int, int]) -> tuple[int, int, int] | None:
        """A generator's latent shape for images of ``image_size`` (after its own resize), when known."""
        if self.latent_channels is None or self.downsample is None:
            return None
        h, w = self.size or image_size
        return (self.latent_channels, h // self.downsample, w // self.downsample)


def square(side: int | Sequence[int] | None) -> tuple[int, int] | None:
    """An ``image_size`` setting (a side, ``[H, W]`` or None) as ``(H, W)``."""
    if side is None:
        return None
    if isinstance(side, Sequence) and not isinstance(side, str):
        return (int(side[0]), int(side[-1]))
    return (int(side), int(side))


F = TypeVar("F", bound=Callable[..., Any])


def declared_by(declare: Callable[..., Declaration], check_available: Callable[..., None] | None = None):
    """Give a factory function its ``declare`` (and ``check_available``) hook (module docstring)."""

    def attach(fn: F) -> F:
        fn.declare = declare  # type: ignore[attr-defined]
        if check_available is not None:
            fn.check_available = check_available  # type: ignore[attr-defined]
        return fn

    return attach


def _listed(names: Sequence[str], n: int = 10) -> str:
    names = [str(x) for x in names]
    more = f", ... ({len(names)} in all)" if len(names) > n else ""
    return "[" + ", ".join(names[:n]) + more + "]"
