"""Submitted models: what an uploaded file is, and the classifier config a submission becomes.

A submission names a model in one of three ways (never as code, never as a pickle):

* ``config`` - a registered ``conf/classifier`` config (one that needs no further values), by name;
* ``timm`` / ``torchvision`` - an architecture by name plus a weights file in **safetensors**
  (``genEval.classifiers.loaders.timm_classifier`` / ``torchvision_classifier``, ``pretrained``/``weights`` off);
* ``torchscript`` - a model file: a ``torch.export`` program (``torch.export.save``, ``.pt2``) or a TorchScript
  module (``genEval.classifiers.loaders.torchscript_classifier`` tells them apart by content).

The server writes the classifier's ``_target_`` itself from this fixed table; a request only supplies
names, numbers and an upload id. Uploads are identified by their bytes, not their names
(:func:`sniff_upload`): a pickle (raw, or the zip archive ``torch.save`` writes) is refused, as is anything
that is neither a valid safetensors file, a torch.export archive nor a TorchScript archive. Zip archives are told
apart by their layout (:func:`genEval.checkpoints.model_archive_kind`) before anything loads them: a torch.export
archive is checked to hold no pickled payload (:func:`genEval.checkpoints.check_exported_archive`) and then
loaded, a TorchScript archive (``code/`` and ``constants.pkl``) is handed to ``torch.jit.load``.
"""

from __future__ import annotations

import difflib
import json
import re
import struct
import zipfile
from pathlib import Path
from typing import Any

from genEval.checkpoints import (
    TORCH_EXPORT,
    TORCH_SAVE,
    TORCHSCRIPT,
    ZIP_MAGIC,
    error_reason,
    load_exported_program,
    model_archive_kind,
)

SAFETENSORS = "safetensors"
KINDS = ("config", "timm", "torchvision", "torchscript")
#: The classifier factory of each kind that takes a file (the only _target_s a submission can reach).
TARGETS = {
    "timm": "genEval.classifiers.timm_classifier",
    "torchvision": "genEval.classifiers.torchvision_classifier",
    "torchscript": "genEval.classifiers.torchscript_classifier",
}
#: Which upload formats each kind takes, and the config key the stored file's path goes to.
UPLOAD_KIND = {"timm": (SAFETENSORS,), "torchvision": (SAFETENSORS,), "torchscript": (TORCH_EXPORT, TORCHSCRIPT)}
UPLOAD_KEY = {"timm": "checkpoint", "torchvision": "checkpoint", "torchscript": "path"}
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024  # the safetensors format's own limit


class UploadRefused(ValueError):
    """An uploaded file that the service will not load (the message says why and what to send instead)."""


class ModelRefused(ValueError):
    """A model description that cannot become a classifier (``key`` names the offending field)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


_PICKLE_HELP = (
    "Pickles can run arbitrary code when loaded, so the service never loads one. Save the weights "
    "with safetensors (safetensors.torch.save_file(model.state_dict(), 'model.safetensors')) or the "
    "whole model with torch.export (torch.export.save(torch.export.export(model.eval(), (example,)), "
    "'model.pt2')) or as TorchScript (torch.jit.save(torch.jit.script(model), 'model.pt'))."
)


def safe_filename(name: str | None, default: str = "upload") -> str:
    """A client-supplied file name reduced to a harmless label (kept for display only; files are stored
    under their sha256): the last path component, characters outside ``[A-Za-z0-9._-]`` replaced, no
    leading dots, at most 100 characters."""
    base = re.split(r"[\\/]", name or "")[-1]
    base = re.sub(r"[^A-Za-z0-9._-]", "_", base).lstrip(".")[:100]
    return base or default


def _check_safetensors(path: Path, size: int) -> None:
    """The header is a little-endian u64 length followed by that many bytes of JSON; the safetensors
    library then checks every tensor's dtype, shape and offsets."""
    with open(path, "rb") as fh:
        head = fh.read(8)
        (n,) = struct.unpack("<Q", head)
        if not 2 <= n <= min(MAX_SAFETENSORS_HEADER, size - 8):
            raise UploadRefused("not a safetensors file: its 8-byte header length is out of range.")
        header = fh.read(n)
    try:
        meta = json.loads(header)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UploadRefused(f"not a safetensors file: its header is not JSON ({err}).") from None
    if not isinstance(meta, dict) or not any(k != "__metadata__" for k in meta):
        raise UploadRefused("safetensors file holds no tensors.")
    from safetensors import SafetensorError, safe_open  # validates offsets against the file size

    try:
        with safe_open(str(path), framework="pt") as fh:
            list(fh.keys())
    except (SafetensorError, OSError, ValueError) as err:
        raise UploadRefused(f"invalid safetensors file: {err}") from None


def _zip_kind(path: Path) -> str:
    """TorchScript or torch.export archive, or refuse: a ``torch.save`` zip (a pickle) or some other zip."""
    try:
        kind = model_archive_kind(path)
    except ValueError:
        raise UploadRefused(
            "this zip archive is not a TorchScript model (no code/ and constants.pkl) nor a torch.export program "
            "(no archive_format and models/). " + _PICKLE_HELP
        ) from None
    if kind == TORCH_SAVE:
        raise UploadRefused("this is a torch.save archive (a zip holding a pickle), not a model. " + _PICKLE_HELP)
    return kind


def _check_exported(path: Path) -> None:
    """Prove a torch.export archive holds no pickled payload and loads as a program with one image input."""
    try:
        program = load_exported_program(path)
    except ValueError as err:
        raise UploadRefused(str(err).replace(f"'{path}' ", "the archive ")) from None
    inputs = list(program.graph_signature.user_inputs)
    if len(inputs) != 1:
        raise UploadRefused(f"the torch.export program takes {len(inputs)} inputs; a classifier takes one image batch.")


def _check_torchscript(path: Path) -> None:
    """Load the (already layout-checked) archive with ``torch.jit.load`` to prove it is a scripted module."""
    import warnings

    import torch

    with warnings.catch_warnings():  # torch >= 2.9 deprecates jit in favour of export; jit still works
        warnings.simplefilter("ignore", FutureWarning)
        try:
            module = torch.jit.load(str(path), map_location="cpu")
        except Exception as err:  # torch raises RuntimeError and friends with the reason
            raise UploadRefused(f"TorchScript archive does not load: {error_reason(err)}") from None
    if not hasattr(module, "forward"):
        raise UploadRefused("TorchScript archive has no forward method.")


def sniff_upload(path: str | Path) -> str:
    """``"safetensors"``, ``"torch.export"`` or ``"torchscript"`` for a file that is one (checked as described in
    the module docstring); :class:`UploadRefused` with the reason for anything else, pickles first."""
    p = Path(path)
    size = p.stat().st_size
    with open(p, "rb") as fh:
        head = fh.read(16)
    if size == 0:
        raise UploadRefused("the file is empty.")
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:  # PROTO opcode: a pickle (protocol 2-5)
        raise UploadRefused("this file is a Python pickle (e.g. torch.save). " + _PICKLE_HELP)
    if head[:4] == ZIP_MAGIC and not zipfile.is_zipfile(p):
        raise UploadRefused(
            "the file is an incomplete zip archive (its end is missing): the upload or the file was cut short."
        )
    if zipfile.is_zipfile(p):
        kind = _zip_kind(p)
        (_check_exported if kind == TORCH_EXPORT else _check_torchscript)(p)
        return kind
    if size > 9 and head[8:9] == b"{":
        _check_safetensors(p, size)
        return SAFETENSORS
    raise UploadRefused("the file is neither safetensors nor TorchScript nor a torch.export program. " + _PICKLE_HELP)


def _closest(name: str, options: list[str]) -> str:
    return ", ".join(difflib.get_close_matches(name, options, n=6, cutoff=0.5)) or "none"


def check_architecture(kind: str, name: str) -> None:
    """Refuse an architecture name the library does not know (with the closest names)."""
    if kind == "timm":
        import timm  # heavy; imported only when a timm model is submitted

        if not timm.is_model(name):
            raise ModelRefused(
                "name", f"unknown timm model {name!r}; close names: {_closest(name, timm.list_models())}."
            )
    elif kind == "torchvision":
        from torchvision.models import list_models

        if name not in list_models():
            raise ModelRefused(
                "name", f"unknown torchvision model {name!r}; close names: {_closest(name, list_models())}."
            )


def classifier_config(
    spec: dict[str, Any], registered: dict[str, dict], upload_kind: str | None, upload_path: str | None
) -> dict:
    """The ``classifier`` config node for a validated model description ``spec`` (fields: ``kind``, ``name``,
    ``num_classes``, ``input_size``, ``mean``, ``std``; the upload given separately).

    ``registered``: config name -> resolved classifier config (the ``config`` kind). The ``_target_`` comes
    from :data:`TARGETS`, never from the request.
    """
    kind = spec["kind"]
    allowed = {
        "config": {"kind", "name"},
        "timm": {"kind", "name", "num_classes", "input_size"},
        "torchvision": {"kind", "name", "num_classes", "input_size"},
        "torchscript": {"kind", "num_classes", "input_size", "mean", "std"},
    }[kind]
    for key, value in spec.items():
        if value is not None and key not in allowed:
            raise ModelRefused(
                key,
                f"model field {key!r} does not apply to kind {kind!r}; it takes: "
                f"{', '.join(sorted(allowed))}" + ("" if kind == "config" else " and an upload") + ".",
            )
    if kind == "config":
        if upload_kind is not None:
            raise ModelRefused(
                "upload", "a registered config takes no upload; use kind timm, torchvision or torchscript for a file."
            )
        if spec.get("name") not in registered:
            raise ModelRefused(
                "name", f"unknown classifier config {spec.get('name')!r}; registered: {', '.join(sorted(registered))}."
            )
        return dict(registered[spec["name"]])
    if upload_kind is None or upload_path is None:
        raise ModelRefused(
            "upload", f"kind {kind!r} needs an uploaded {' or '.join(UPLOAD_KIND[kind])} file (POST /api/uploads)."
        )
    if upload_kind not in UPLOAD_KIND[kind]:
        raise ModelRefused(
            "upload",
            f"kind {kind!r} needs a {' or '.join(UPLOAD_KIND[kind])} file but the upload is "
            f"{upload_kind}; "
            + (
                "use kind torchscript for it."
                if upload_kind in UPLOAD_KIND["torchscript"]
                else "use kind timm or torchvision with it."
            ),
        )
    node: dict[str, Any] = {"_target_": TARGETS[kind], UPLOAD_KEY[kind]: upload_path}
    if kind == "torchscript":
        if spec.get("num_classes") is None:
            raise ModelRefused("num_classes", "a TorchScript model needs num_classes (its number of logits).")
        node.update(num_classes=spec["num_classes"], input_size=spec.get("input_size"))
        node.update({k: list(spec[k]) for k in ("mean", "std") if spec.get(k) is not None})
        return node
    if not spec.get("name"):
        raise ModelRefused("name", f"kind {kind!r} needs the architecture name, e.g. resnet18.")
    check_architecture(kind, spec["name"])
    node.update(
        name=spec["name"], num_classes=spec.get("num_classes"), allow_pickle=False, input_size=spec.get("input_size")
    )
    node["pretrained" if kind == "timm" else "weights"] = False if kind == "timm" else None
    return node
