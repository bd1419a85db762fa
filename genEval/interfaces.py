"""The three roles genEval plugs together, and the tensor contract they share.

Contract (every backend obeys it; the engine checks it at run time):

* Images are float tensors ``(B, C, H, W)`` with values in ``[0, 1]`` everywhere. Each adapter
  converts to its backend's range (``[-1, 1]`` for VQGAN / SD-VAE, mean/std normalisation for
  classifiers) *inside* itself.
* A :class:`Classifier` is an ``nn.Module`` mapping ``[0, 1]`` images of any size to
  ``(B, num_classes)`` logits. It owns its resize and normalisation (torchattacks' rule).
* A :class:`Generator` is an ``nn.Module`` with ``encode(images) -> latents`` and
  ``decode(latents) -> images``; ``decode`` is differentiable in the latents (paper Sec. 3.2:
  the search walks the latent ``z`` of ``x = D(z)``).
* An :class:`Oracle` judges whether an image still depicts its label (paper Sec. 3.2, the
  foundation model that vetoes steps): ``prepare(class_names)`` once, then
  ``judge(images, labels) -> Judgement``.

These are ``typing.Protocol`` classes: the roles share no machinery, so there is no base class
to inherit from. Any object with the right attributes works.

Optional hooks (the plug-in contract beyond the protocols): :data:`HOOKS` names every optional attribute the
engine reads from a role or a data set, with its default and what it changes, and :func:`hook` is the one place
the engine reads one (``tests/contracts/test_plugin_contract.py`` fails when the engine reads an attribute of a role
that is not declared here). A backend that has none of them works; each one it has refines a run:

======================  ==========================  ==========  ===========================================
hook                    on                          default     what it does
======================  ==========================  ==========  ===========================================
``name``                every role, data            None        the id recorded in results (None: class name)
``class_names``         classifier                  None        its classes: folders map onto them by name
``num_classes``         classifier                  None        checked against the data's classes
``precision_mode``      classifier, generator,      "weights"   ``"autocast"``: reduced precision by autocast
                        oracle                                  (a compiled program), not converted weights
``fp16_safe``           generator                   False       True: ``precision=fp16`` does not warn
``decoded_latents``     generator                   None        ``z -> z`` as the decoder sees it (VQ snapping);
                                                                saved latents and masks use it
``reference``           oracle                      None        ``label`` | ``clean_prediction``: what the
                                                                oracle keeps (None: ``label``)
``with_seed``           data                        None        ``seed -> data`` re-drawn (a random subset)
``with_limit``          data                        None        ``n -> data`` drawing ``n`` sources
``source_id``           data                        None        ``i -> id`` without decoding the image
``subset_info``         data                        None        ``() -> dict``: how the sources were chosen
``skip_unreadable``     data                        False       skip undecodable sources instead of stopping
``labels``              data                        None        every label without decoding (mask=auto)
``declare``             the ``_target_`` of every   None        ``settings -> Declaration`` (classes, image
                        role, data, mask                        size, latents) read before anything is built
``check_available``     the ``_target_`` of every   None        ``(config_key, settings)``: raises when its
                        role, data, mask                        weights or files are missing, before building
``nhwc_classes``        classifier, generator,      None        ``{class: NHWC subclass}``: modules swapped
                        oracle                                  in under ``memory_format=channels_last``
``compile_regions``     generator                   None        ``() -> modules``: what ``compile_scope=
                                                                regional`` compiles (its decoder's blocks)
======================  ==========================  ==========  ===========================================

Two errors every layer shares: :class:`SettingError` (a setting with a value of the wrong type or range; the
command layer prefixes the config group, so the user reads ``data.limit``) and :class:`UnreadableSource` (a
source image that cannot be decoded; the driver skips it when the data set's ``skip_unreadable`` is set).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from torch import Tensor

from genEval.validation import (  # noqa: F401  (defined there, torch-free, and re-exported here as before)
    OLD_PRECISIONS,
    PRECISIONS,
    SettingError,
    check_batch_size,
    is_whole,
    precision_name,
)


@runtime_checkable
class Classifier(Protocol):
    """Tested model ``f``: ``forward(images in [0,1], (B,C,H,W)) -> logits (B, num_classes)``."""

    num_classes: int

    def __call__(self, images: Tensor) -> Tensor: ...


@runtime_checkable
class Generator(Protocol):
    """Latent space ``(E, D)``.

    ``name``: a stable id recorded in results (e.g. ``"taef2"``, ``"vqgan:<hash>"``).
    ``downsample``: spatial factor between image and latent (image sides must be multiples).
    """

    name: str
    downsample: int

    def encode(self, images: Tensor) -> Tensor: ...

    def decode(self, latents: Tensor) -> Tensor: ...


@runtime_checkable
class ImageDataset(Protocol):
    """Evaluation data: lazily loaded, indexable.

    ``dataset[i] -> (image (C, H, W) float in [0, 1], label int, source_id str)``; ``source_id``
    is stable across runs (e.g. the file path relative to the root, or ``"test/00042"``).
    ``class_names[label]`` names the class; ``name`` identifies the dataset in results.
    """

    name: str
    class_names: list[str]

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> tuple[Tensor, int, str]: ...


@dataclass(frozen=True)
class Hook:
    """One optional attribute of a plug-in (see the module docstring): its ``name``, the ``roles`` that may have it
    (``classifier``, ``generator``, ``oracle``, ``data``), the ``default`` the engine assumes without it,
    ``meaning``, and ``type``: the type annotation its value must satisfy (``tests/contracts`` checks every built
    plug-in against it; the docs' hook table shows it)."""

    name: str
    roles: tuple[str, ...]
    default: Any
    meaning: str
    type: Any = Any


#: Every optional hook the engine reads, by name (the table of the module docstring).
HOOKS: dict[str, Hook] = {
    h.name: h
    for h in (
        Hook(
            "name",
            ("classifier", "generator", "oracle", "data"),
            None,
            "id recorded in results; None: class name",
            str | None,
        ),
        Hook(
            "class_names",
            ("classifier",),
            None,
            "the classes of the logits, in order: folders map onto them",
            Sequence[str] | None,
        ),
        Hook(
            "num_classes",
            ("classifier",),
            None,
            "the number of logits, checked against the data's classes",
            int | None,
        ),
        Hook(
            "precision_mode",
            ("classifier", "generator", "oracle"),
            "weights",
            "how precision=bf16|fp16 reaches the role: converted weights, or autocast (a compiled program)",
            Literal["weights", "autocast"],
        ),
        Hook(
            "fp16_safe",
            ("generator",),
            False,
            "the decoder does not overflow in fp16 (else precision=fp16 warns)",
            bool,
        ),
        Hook(
            "decoded_latents",
            ("generator",),
            None,
            "z -> the latents the decoder decodes (a codebook snaps them)",
            Callable[[Tensor], Tensor] | None,
        ),
        Hook(
            "reference",
            ("oracle",),
            None,
            "what the oracle keeps seeing: label | clean_prediction (None: label)",
            Literal["label", "clean_prediction"] | None,
        ),
        Hook(
            "with_seed",
            ("data",),
            None,
            "seed -> the data re-drawn with that seed (a random data.limit subset)",
            Callable[[int], Any] | None,
        ),
        Hook(
            "with_limit",
            ("data",),
            None,
            "n -> the data drawing n sources (data.limit=n; a round of stop=settled draws round_sources)",
            Callable[[int], Any] | None,
        ),
        Hook(
            "source_id",
            ("data",),
            None,
            "position -> source id without decoding the image",
            Callable[[int], str] | None,
        ),
        Hook(
            "subset_info",
            ("data",),
            None,
            "() -> how the sources were chosen (recorded in the run's identity)",
            Callable[[], Mapping[str, Any]] | None,
        ),
        Hook(
            "skip_unreadable",
            ("data",),
            False,
            "skip sources that cannot be decoded instead of stopping",
            bool,
        ),
        Hook(
            "labels",
            ("data",),
            None,
            "every source's label without decoding it (mask=auto stratifies by it)",
            Callable[[], Sequence[int]] | None,
        ),
        Hook(  # on the config's _target_ (a class or factory), read by genEval.commands.checks
            "declare",
            ("classifier", "generator", "oracle", "data", "mask"),
            None,
            "settings -> genEval.declared.Declaration: the classes, image size and latents, before anything is built",
            Callable[..., Any] | None,
        ),
        Hook(
            "nhwc_classes",
            ("classifier", "generator", "oracle"),
            None,
            "{class: subclass} swapped in under memory_format=channels_last (modules that would return NCHW)",
        ),
        Hook("compile_regions", ("generator",), None, "() -> the modules compile_scope=regional compiles"),
        Hook(
            "check_available",
            ("classifier", "generator", "oracle", "data", "mask"),
            None,
            "(config_key, settings) -> None: raises when the weights or files are missing, before anything is built",
            Callable[..., None] | None,
        ),
    )
}


def hook(obj: Any, name: str) -> Any:
    """The optional hook ``name`` of ``obj`` (a role or a data set), or its declared default: the one place the
    engine reads a hook. A name :data:`HOOKS` does not declare is a KeyError (declare it there first)."""
    if name not in HOOKS:
        raise KeyError(f"{name!r} is not a hook of genEval.interfaces.HOOKS; declare it there (name, roles, default).")
    return getattr(obj, name, HOOKS[name].default)


def component_id(obj: Any) -> str:
    """The id a component is recorded under: its ``name`` hook, else its class name."""
    return str(hook(obj, "name") or type(obj).__name__)


def _is_factory(obj: Any) -> bool:
    """A zero-argument callable that builds a role (not a role itself: a classifier takes images)."""
    if isinstance(obj, torch.nn.Module) or not callable(obj):
        return False
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return False
    return all(
        p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        for p in sig.parameters.values()
    )


def build_entry(entry: Any) -> Any:
    """A role from an entry of a comparison (a classifier, generator or oracle): the entry itself, or what its
    zero-argument factory builds (a factory defers the building, e.g. a generator that trains, until after the
    checks)."""
    return entry() if _is_factory(entry) else entry


class UnreadableSource(ValueError):
    """A source image that cannot be read (a corrupt file, a non-image with an image suffix).

    ``source_id`` and ``path`` say which; ``reason`` is the decoder's complaint. By default a run stops with
    this error; a data set with ``skip_unreadable=True`` has the driver skip the source and record it.
    """

    def __init__(self, source_id: str, path: str, reason: str) -> None:
        self.source_id, self.path, self.reason = str(source_id), str(path), str(reason)
        super().__init__(
            f"cannot read image file '{path}' ({reason}). Remove or replace the corrupt/non-image file, or set "
            "data.skip_unreadable=true to skip unreadable files (each is logged and listed in results.json)."
        )

    def __reduce__(self):
        return (type(self), (self.source_id, self.path, self.reason))


@dataclass(frozen=True)
class Judgement:
    """What an oracle says about a batch.

    accept: (B,) bool, True when the image still depicts its label.
    scores: (B,) float, the oracle's confidence in the true label (probability in [0, 1]).
    predictions: (B,) long, the oracle's own class decision.
    """

    accept: Tensor
    scores: Tensor
    predictions: Tensor


@runtime_checkable
class Oracle(Protocol):
    """Foundation model ``O`` that vetoes steps which change what an image depicts."""

    def prepare(self, class_names: list[str]) -> None: ...

    def judge(self, images: Tensor, labels: Tensor) -> Judgement: ...


_CALLER_CHECKED = False  # see contract_checked_by_caller


@contextlib.contextmanager
def contract_checked_by_caller() -> Iterator[None]:
    """Inside the search step the loop checks the decoded images' range itself, on the device, and reads the
    result back with the step's one host sync (:meth:`genEval.search.rows.SearchRows.sync`). The roles' own
    value checks (:func:`values_checked` is False), which read a minimum back to the host each call, stand aside
    meanwhile; shape and dtype checks, which cost nothing, stay. A module flag, not a thread-local: a compiled
    step reads it as a constant (and recompiles if it changes)."""
    global _CALLER_CHECKED
    before, _CALLER_CHECKED = _CALLER_CHECKED, True
    try:
        yield
    finally:
        _CALLER_CHECKED = before


def values_checked() -> bool:
    """Whether a role should check the values of its inputs (ranges): False inside the search step, whose loop
    checks them without a host sync (:func:`contract_checked_by_caller`)."""
    return not _CALLER_CHECKED


def check_images(images: Tensor, where: str, tol: float = 1e-4) -> None:
    """Raise a teaching error when ``images`` break the ``[0, 1]``, ``(B, C, H, W)`` contract."""
    if images.ndim != 4:
        raise ValueError(f"{where}: expected images shaped (B, C, H, W), got {tuple(images.shape)}.")
    if not torch.is_floating_point(images):
        raise ValueError(
            f"{where}: expected float images in [0, 1], got dtype {images.dtype}. Convert with images.float() / 255."
        )
    if not values_checked():
        return
    lo, hi = float(images.min()), float(images.max())
    if lo < -tol or hi > 1 + tol:
        raise ValueError(
            f"{where}: images must lie in [0, 1] but range over [{lo:.4g}, {hi:.4g}]. "
            "genEval's contract is float images in [0, 1]; undo any normalisation before "
            "passing them (classifiers normalise inside themselves)."
        )


def resize_images(images: Tensor, size: int | tuple[int, int] | None) -> Tensor:
    """Bilinear (antialiased when shrinking) resize of ``[0,1]`` images; ``None`` or same size is a no-op. Computed
    in fp32 and returned in the images' dtype: a role run in bf16 (``precision=bf16``) resizes as exactly as in fp32
    (and CPUs have no bf16 antialiased resize)."""
    if size is None:
        return images
    hw = (size, size) if isinstance(size, int) else tuple(size)
    if tuple(images.shape[-2:]) == hw:
        return images
    shrink = hw[0] < images.shape[-2] or hw[1] < images.shape[-1]
    out = torch.nn.functional.interpolate(
        images.float(), size=hw, mode="bilinear", align_corners=False, antialias=shrink
    ).clamp(0, 1)
    return out.to(images.dtype)
