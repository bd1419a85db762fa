"""ImageNet-1k class metadata: the 1k order, readable class names, and super-classes (paper Sec. 4 scenarios
"9-class ImageNet" and "ImageNet").

* The 1k order and the WordNet ids (``n01440764`` ...) of the classes, with their WordNet lemmas, come from
  the metadata timm ships (:class:`timm.data.ImageNetInfo`), the order every ImageNet-1k classifier in timm and
  torchvision uses. A folder of wnid sub-folders (the validation-set layout) thus gets the right 1k index for
  any subset of its folders.
* Readable names for text prompts come from open_clip's curated list (``open_clip.zero_shot_metadata``, the
  names Radford et al. 2021 cleaned for zero-shot CLIP: "tench", "goldfish", "crane bird" / "construction
  crane", ...). Two of its entries are still shared by two classes ("missile" for 657 and 744, "sunglasses"
  for 836 and 837) and WordNet's first lemmas share "crane" and "maillot": :func:`disambiguate` gives such a
  class the first of its own lemmas no other class uses (else its wnid), so every class has its own name.
* The paper's "9-class ImageNet" (Santurkar et al. 2019) is the Restricted ImageNet of Tsipras et al. 2019:
  nine super-classes, each a range of 1k indices (inclusive), taken from the ``RESTRICTED_IMAGNET_RANGES``
  constant of MadryLab's ``robustness`` library (``robustness/tools/constants.py``), in its label order,
  which is also the row order of the paper's Table 13 (Dog, Cat, Frog, Turtle, Bird, Primate, Fish, Crab,
  Insect). The paper calls the sixth super-class "Primate", the library "monkey"; its range 365-382 holds
  the apes and monkeys, so "primate" is used here.

timm and open_clip are imported inside the functions that read them: both take seconds to import, and only
ImageNet data needs them.
"""

from __future__ import annotations

import functools
import logging
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from genEval.data.class_maps import CIFAR10_IMAGENET

log = logging.getLogger(__name__)

NUM_CLASSES = 1000
WNID = re.compile(r"^n\d{8}$")
NAME_SOURCES = ("openai", "lemma", "wnid")

#: The paper's 9-class ImageNet (Restricted ImageNet): super-class -> inclusive ranges of 1k class indices.
#: Source: MadryLab/robustness, robustness/tools/constants.py, RESTRICTED_IMAGNET_RANGES (Tsipras et al. 2019,
#: "Robustness may be at odds with accuracy", ICLR 2019; used by Santurkar et al. 2019, the paper's citation).
RESTRICTED_IMAGENET9: dict[str, tuple[tuple[int, int], ...]] = {
    "dog": ((151, 268),),
    "cat": ((281, 285),),
    "frog": ((30, 32),),
    "turtle": ((33, 37),),
    "bird": ((80, 100),),
    "primate": ((365, 382),),
    "fish": ((389, 397),),
    "crab": ((118, 121),),
    "insect": ((300, 319),),
}
SUPERCLASS_SETS = {"restricted_imagenet9": RESTRICTED_IMAGENET9}
#: Named sets defined by WordNet ids, resolved to 1k indices through timm's metadata when asked for:
#: ``cifar10``, the CIFAR-10 classes ImageNet-1k shares (genEval/data/class_maps.py, cited there).
WNID_SETS = ("cifar10",)


def _wnid_set(name: str) -> dict[str, tuple[tuple[int, int], ...]]:
    """A named set of :data:`WNID_SETS` as super-class -> one-class ranges in the 1k order."""
    index = {w: i for i, w in enumerate(imagenet_wnids())}
    return {
        c: tuple((index[w], index[w]) for w in sorted(ws, key=index.__getitem__)) for c, ws in CIFAR10_IMAGENET.items()
    }


@functools.cache
def imagenet_wnids() -> tuple[str, ...]:
    """The 1,000 WordNet ids in the 1k class order (timm's ``ImageNetInfo``)."""
    from timm.data import ImageNetInfo  # slow import, see module docstring

    wnids = tuple(ImageNetInfo("imagenet-1k").label_names())
    if len(wnids) != NUM_CLASSES:  # pragma: no cover - a broken timm install
        raise RuntimeError(f"timm's ImageNetInfo lists {len(wnids)} ImageNet-1k classes, expected {NUM_CLASSES}.")
    return wnids


@functools.cache
def imagenet_lemmas() -> tuple[tuple[str, ...], ...]:
    """The WordNet lemmas of every class in the 1k order (``("tench", "Tinca tinca")``, ...)."""
    from timm.data import ImageNetInfo  # slow import, see module docstring

    return tuple(
        tuple(s.strip() for s in d.split(",") if s.strip()) for d in ImageNetInfo("imagenet-1k").label_descriptions()
    )


def disambiguate(names: Sequence[str], alternatives: Sequence[Sequence[str]], tags: Sequence[str]) -> list[str]:
    """Give every class its own name: a name shared by several classes is replaced, class by class in index
    order, by the first of that class's ``alternatives`` that no other class uses; failing that by
    ``"<name> (<tag>)"``. Unshared names are kept."""
    names = [str(n) for n in names]
    counts = Counter(names)
    shared = {n for n, c in counts.items() if c > 1}
    taken = {n for n in names if n not in shared}
    out = list(names)
    for i, name in enumerate(names):
        if name not in shared:
            continue
        pick = next((a for a in alternatives[i] if a not in taken), f"{name} ({tags[i]})")
        taken.add(pick)
        out[i] = pick
    changed = [(tags[i], names[i], out[i]) for i in range(len(names)) if out[i] != names[i]]
    if changed:
        log.info(
            "class names shared by several classes were made unique: %s",
            ", ".join(f"{t}: {a!r} -> {b!r}" for t, a, b in changed),
        )
    return out


@functools.cache
def _names(source: str) -> tuple[str, ...]:
    wnids, lemmas = imagenet_wnids(), imagenet_lemmas()
    if source == "wnid":
        return wnids
    if source == "lemma":
        first = [lem[0] for lem in lemmas]
    else:
        from open_clip import zero_shot_metadata  # slow import, see module docstring

        first = list(zero_shot_metadata.IMAGENET_CLASSNAMES)
    return tuple(disambiguate(first, lemmas, wnids))


def imagenet_class_names(source: str = "openai") -> list[str]:
    """1,000 distinct class names in the 1k order.

    ``openai``: open_clip's curated names (for text prompts); ``lemma``: the first WordNet lemma (timm);
    ``wnid``: the WordNet ids themselves.
    """
    if source not in NAME_SOURCES:
        raise ValueError(
            f"unknown ImageNet class-name source {source!r}; choose one of {', '.join(NAME_SOURCES)} "
            "or give a list of 1000 names."
        )
    return list(_names(source))


def wnid_index(wnid: str) -> int:
    """1k class index of a WordNet id, with a teaching error for a folder that is not an ImageNet-1k class."""
    index = {w: i for i, w in enumerate(imagenet_wnids())}
    if wnid not in index:
        hint = (
            "it is not one of the 1,000 ImageNet-1k classes"
            if WNID.match(wnid)
            else "ImageNet folders are named by WordNet id, e.g. n01440764"
        )
        raise ValueError(
            f"folder '{wnid}' is not an ImageNet-1k class ({hint}). data=imagenet expects the "
            "validation-set layout <root>/<wnid>/<image>; use data=imagefolder for other folders."
        )
    return index[wnid]


def superclass_table(superclasses: str | Mapping[str, Sequence]) -> dict[str, tuple[tuple[int, int], ...]]:
    """Validated super-classes: a named set (``restricted_imagenet9``; ``cifar10``: the 9 CIFAR-10 classes ImageNet-1k
    shares, :mod:`genEval.data.class_maps`) or a mapping name -> ``[first, last]``
    (inclusive 1k indices) or a list of such pairs. Ranges must lie in 0..999 and not overlap."""
    if isinstance(superclasses, str):
        if superclasses in WNID_SETS:
            return _wnid_set(superclasses)
        if superclasses not in SUPERCLASS_SETS:
            raise ValueError(
                f"unknown super-class set {superclasses!r}; choose one of {', '.join([*SUPERCLASS_SETS, *WNID_SETS])} "
                "or give a mapping name -> [first, last] 1k indices."
            )
        return dict(SUPERCLASS_SETS[superclasses])
    if not isinstance(superclasses, Mapping) or not superclasses:
        raise ValueError(
            f"superclasses must be a named set ({', '.join(SUPERCLASS_SETS)}) or a non-empty mapping "
            f"name -> [first, last] 1k class indices, got {superclasses!r}."
        )
    table: dict[str, tuple[tuple[int, int], ...]] = {}
    owner: dict[int, str] = {}
    for name, spec in superclasses.items():
        pairs = [spec] if len(spec) == 2 and all(isinstance(v, int) for v in spec) else list(spec)
        ranges = []
        for pair in pairs:
            if (
                len(pair) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
                or not 0 <= pair[0] <= pair[1] < NUM_CLASSES
            ):
                raise ValueError(
                    f"super-class {name!r}: range {list(pair)} must be [first, last] with "
                    f"0 <= first <= last <= {NUM_CLASSES - 1} (inclusive 1k class indices)."
                )
            ranges.append((int(pair[0]), int(pair[1])))
            for k in range(pair[0], pair[1] + 1):
                if k in owner:
                    raise ValueError(
                        f"super-classes {owner[k]!r} and {name!r} both claim 1k class {k}; the ranges must not overlap."
                    )
                owner[k] = str(name)
        table[str(name)] = tuple(ranges)
    return table


def superclass_members(table: Mapping[str, Sequence[tuple[int, int]]]) -> list[list[int]]:
    """The 1k indices of every super-class, in the table's order."""
    return [[k for lo, hi in ranges for k in range(lo, hi + 1)] for ranges in table.values()]
