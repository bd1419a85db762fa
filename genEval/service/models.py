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
loaded, a TorchScript archive (``code/`` and ``constants.pkl``) is handed to ``torch.jit.load``; all of that in a
child process with a time limit, a memory limit and no network (:mod:`genEval.sandbox`), since loading TorchScript
runs code from the file. A safetensors header is bounded in bytes and tensors before anything parses it.
"""

from __future__ import annotations

import difflib
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genEval.checkpoints import (
    SAFETENSORS,
    TORCH_EXPORT,
    TORCH_SAVE,
    TORCHSCRIPT,
    ZIP_MAGIC,
    check_safetensors_header,
)
from genEval.model_ops import check_model_file
from genEval.sandbox import CheckFailed, LimitExceeded, Limits

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


class UploadRefused(ValueError):
    """An uploaded file that the service will not load (the message says why and what to send instead); ``status``:
    the HTTP answer (415: not a format the service loads)."""

    status = 415


class UploadTooCostly(UploadRefused):
    """An upload whose check ran past its time or memory limit (the message names the limit and its setting)."""

    status = 422


class UploadUnsafe(UploadRefused):
    """An upload whose code or graph asks for files, processes or the network (the message names the op), or model
    code that this server cannot run in a sandbox."""

    status = 422


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


def _checked(path: Path, kind: str | None, limits: Limits | None, sandbox: UploadSandbox) -> dict:
    """:func:`genEval.model_ops.check_model_file` (in a sandboxed child that sees only the file) with its refusals as
    :class:`UploadRefused` (a limit passed: :class:`UploadTooCostly`; an op a classifier never needs:
    :class:`UploadUnsafe`); the file's path is never part of a message."""
    try:
        return check_model_file(
            path, kind, limits, what="the upload's check", isolation=sandbox.isolation, hidden=sandbox.hidden
        )
    except LimitExceeded as err:
        raise UploadTooCostly(str(err)) from None
    except CheckFailed as err:
        refused = UploadUnsafe if err.kind == "UnsafeModel" else UploadRefused
        raise refused(str(err).replace(f"'{path}' ", "the file ").replace(str(path), "the file")) from None


@dataclass(frozen=True)
class UploadSandbox:
    """How uploads are checked: the sandbox's ``isolation`` (:data:`genEval.sandbox.ISOLATION`), what the check must
    not see (``hidden``: the service's home), and ``allow_code``: whether TorchScript and torch.export archives
    (model code) are checked at all. A server that cannot isolate a check (``code_problem`` says why) refuses them
    unless its admin opts in (``allow_unsandboxed_models``)."""

    isolation: str = "auto"
    hidden: tuple[str, ...] = ()
    allow_code: bool = True
    code_problem: str | None = None


def sniff_upload(path: str | Path, limits: Limits | None = None, sandbox: UploadSandbox | None = None) -> str:
    """``"safetensors"``, ``"torch.export"`` or ``"torchscript"`` for a file that is one; :class:`UploadRefused` with
    the reason for anything else, pickles first.

    This process reads only the first bytes (a pickle's opcode, a zip's magic, a safetensors header's length) and a
    safetensors header of at most :data:`~genEval.checkpoints.MAX_SAFETENSORS_HEADER` bytes and
    :data:`~genEval.checkpoints.MAX_SAFETENSORS_TENSORS` tensors. Everything else (a zip's layout, loading the model)
    happens in a sandboxed child process within ``limits`` (:class:`genEval.sandbox.Limits`: time, memory, no network;
    ``sandbox``: :class:`UploadSandbox`), so a file whose loading never returns or fills the memory is refused
    (:class:`UploadTooCostly`), one that asks for files, processes or the network is refused naming the op
    (:class:`UploadUnsafe`), and this process never runs its code."""
    sandbox = sandbox or UploadSandbox()
    p = Path(path)
    size = p.stat().st_size
    with open(p, "rb") as fh:
        head = fh.read(16)
    if size == 0:
        raise UploadRefused("the file is empty.")
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:  # PROTO opcode: a pickle (protocol 2-5)
        raise UploadRefused("this file is a Python pickle (e.g. torch.save). " + _PICKLE_HELP)
    if head[:4] == ZIP_MAGIC:
        if not sandbox.allow_code:
            raise UploadUnsafe(
                f"this server cannot run model code in a sandbox ({sandbox.code_problem}), so it accepts no "
                "TorchScript or torch.export upload; upload safetensors weights (kind timm or torchvision), or ask "
                "the admin (who can install bubblewrap, or allow them: `geneval serve allow_unsandboxed_models=true`)."
            )
        if not zipfile.is_zipfile(p):
            raise UploadRefused(
                "the file is an incomplete zip archive (its end is missing): the upload or the file was cut short."
            )
        found = _checked(p, None, limits, sandbox)
        if found["kind"] is None:
            raise UploadRefused(
                "this zip archive is not a TorchScript model (no code/ and constants.pkl) nor a torch.export program "
                "(no archive_format and models/). " + _PICKLE_HELP
            )
        if found["kind"] == TORCH_SAVE:
            raise UploadRefused("this is a torch.save archive (a zip holding a pickle), not a model. " + _PICKLE_HELP)
        if found["kind"] == TORCH_EXPORT and found["inputs"] != 1:
            raise UploadRefused(
                f"the torch.export program takes {found['inputs']} inputs; a classifier takes one image batch."
            )
        if found["kind"] == TORCHSCRIPT and not found["forward"]:
            raise UploadRefused("TorchScript archive has no forward method.")
        return found["kind"]
    if size > 9 and head[8:9] == b"{":
        try:
            check_safetensors_header(p, "the upload")
        except ValueError as err:
            raise UploadRefused(str(err).replace(f" '{p.name}'", "")) from None
        _checked(p, SAFETENSORS, limits, sandbox)
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
