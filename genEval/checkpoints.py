"""Loading weights safely, with errors that name the problem.

Official research checkpoints are often pickles (taming's ``.ckpt``, akamaster's ``.th``).
``torch.load(weights_only=True)`` refuses to execute pickled code; genEval uses it always and
only falls back to a full unpickle when the user opts in with ``allow_pickle=True``.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from genEval.assets import is_asset, resolve
from genEval.fileio import cache_dir
from genEval.sandbox import Limits, run_isolated

log = logging.getLogger(__name__)


__all__ = [
    "cache_dir",
    "error_reason",
    "extract_state_dict",
    "load_checkpoint",
    "load_state_dict_into",
    "require_file",
    "check_model_file",
    "check_safetensors_header",
]
ZIP_MAGIC = b"PK\x03\x04"
#: The largest safetensors header read (bytes) and the most tensors it may list, checked before it is parsed: the
#: biggest classifiers need far less (EfficientNet-B7: 1,200 tensors in a 114 KB header; ResNet-152: 932 in 87 KB;
#: ViT-L/16: 296 in 28 KB), while the format itself allows 100 MB (1.15 M empty tensors took 2.3 GB to parse).
MAX_SAFETENSORS_HEADER = 4 * 1024 * 1024
MAX_SAFETENSORS_TENSORS = 10_000
_RESAVE = "It is truncated or corrupt (an interrupted download or copy?): download or save it again."


def error_reason(err: BaseException, limit: int = 300) -> str:
    """The reason an error gives, for a message: its first non-empty line (libraries such as torch start some
    messages with a line break), at most ``limit`` characters; its type when it says nothing (an ``EOFError``)."""
    line = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), "")
    if not line:
        return f"{type(err).__name__}: the file ends early" if isinstance(err, EOFError) else type(err).__name__
    return line[:limit]


def _refused_pickle(err: BaseException) -> bool:
    """Whether ``torch.load(weights_only=True)`` refused a pickled object (not a file it could not read)."""
    text = str(err)
    return isinstance(err, pickle.UnpicklingError) and "Unsupported" in text and "truncated" not in text


def check_safetensors_header(path: str | Path, what: str = "safetensors file", shown: str | None = None) -> int:
    """Refuse a safetensors file whose header is larger than :data:`MAX_SAFETENSORS_HEADER` bytes or lists more than
    :data:`MAX_SAFETENSORS_TENSORS` tensors, before the safetensors library parses it (its own limit is 100 MB of
    JSON, gigabytes of memory to parse). The header is a little-endian u64 length and that many bytes of JSON, read
    here into at most the limit and counted as it is decoded (the decoder stops at the first object past the count).
    Returns the number of tensors; raises ValueError naming the bound, or the damage of a truncated or corrupt file.
    ``shown``: how the messages name the file (default its name, which the service strips from what it answers)."""
    import json
    import struct

    p = Path(path)
    shown = p.name if shown is None else shown
    size = p.stat().st_size
    with open(p, "rb") as fh:
        head = fh.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        if not 2 <= n <= size - 8:
            raise ValueError(
                f"{what} '{shown}' is not a readable safetensors file (its 8-byte header length {n} is out of range "
                f"for a file of {size} bytes). {_RESAVE}"
            )
        if n > MAX_SAFETENSORS_HEADER:
            raise ValueError(
                f"{what} '{shown}' has a safetensors header of {n} bytes; the limit is {MAX_SAFETENSORS_HEADER} "
                "bytes (a real classifier's header is under 200 KB), so it is not read."
            )
        header = fh.read(n)
    objects = 0

    def count(pairs: list) -> dict:
        nonlocal objects
        objects += 1
        if objects > MAX_SAFETENSORS_TENSORS + 2:  # every tensor, plus the header itself and its __metadata__
            raise OverflowError
        return dict(pairs)

    too_many = ValueError(
        f"{what} '{shown}' lists more than {MAX_SAFETENSORS_TENSORS} tensors, the limit (the biggest classifiers "
        "have under 2,000), so it is not read."
    )
    try:
        meta = json.loads(header, object_pairs_hook=count)
    except OverflowError:
        raise too_many from None
    except (UnicodeDecodeError, RecursionError, ValueError) as err:
        raise ValueError(
            f"{what} '{shown}' is not a readable safetensors file (its header is not JSON: {err}). {_RESAVE}"
        ) from None
    tensors = sum(k != "__metadata__" for k in meta) if isinstance(meta, dict) else 0
    if not tensors:
        raise ValueError(f"{what} '{shown}' holds no tensors.")
    if tensors > MAX_SAFETENSORS_TENSORS:
        raise too_many
    return tensors


def require_file(path: str | Path, what: str, hint: str = "") -> Path:
    """Return ``path`` as a Path, or raise FileNotFoundError saying what was expected there. An ``asset:<path>``
    name (:mod:`genEval.assets`) is found in an assets folder or the cache, or downloaded and checked."""
    if is_asset(path):
        return resolve(path)
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"{what} not found: '{p}'. {hint}".strip())
    return p


def load_checkpoint(path: str | Path, what: str = "checkpoint", allow_pickle: bool = False, hint: str = "") -> object:
    """Load a torch/safetensors file on the CPU without running pickled code unless allowed."""
    p = require_file(path, what, hint)
    if p.suffix == ".safetensors":
        from safetensors.torch import load_file

        check_safetensors_header(p, what, shown=str(p))
        try:
            return load_file(str(p), device="cpu")
        except Exception as err:  # noqa: BLE001 - safetensors raises its own error type for every bad file
            raise ValueError(
                f"{what} '{p}' is not a readable safetensors file ({error_reason(err)}). {_RESAVE}"
            ) from err
    try:
        return torch.load(p, map_location="cpu", weights_only=True)
    except Exception as err:  # weights_only refuses arbitrary objects; a damaged file fails in many ways
        if not _refused_pickle(err):
            raise ValueError(f"{what} '{p}' cannot be read ({error_reason(err, 200)}). {_RESAVE}") from err
        if not allow_pickle:
            raise ValueError(
                f"{what} '{p}' holds pickled Python objects that torch refuses to load safely "
                f"({type(err).__name__}: {error_reason(err, 200)}). If you trust the file, "
                "set allow_pickle=true for this component to unpickle it (this executes code "
                "stored in the file)."
            ) from err
        log.warning("unpickling %s '%s' with weights_only=False (allow_pickle=true)", what, p)
        return torch.load(p, map_location="cpu", weights_only=False)


def extract_state_dict(obj: object, prefixes: tuple[str, ...] = ("module.",)) -> dict[str, torch.Tensor]:
    """Find the state dict in a checkpoint (``state_dict``/``model``/bare) and strip ``prefixes``."""
    sd = obj
    if isinstance(obj, Mapping):
        for key in ("state_dict", "model", "model_state_dict", "ema"):
            if key in obj and isinstance(obj[key], Mapping):
                sd = obj[key]
                break
    if not isinstance(sd, Mapping):
        raise ValueError(f"checkpoint holds a {type(sd).__name__}, not a state dict")
    out = {}
    for k, v in sd.items():
        for pre in prefixes:
            if k.startswith(pre):
                k = k[len(pre) :]
        out[k] = v
    return out


def load_state_dict_into(
    module: nn.Module, state_dict: Mapping[str, torch.Tensor], what: str, ignore_prefixes: tuple[str, ...] = ()
) -> None:
    """Strictly load ``state_dict`` into ``module``; raise naming missing/unexpected/mis-shaped keys."""
    sd = (
        {k: v for k, v in state_dict.items() if not k.startswith(ignore_prefixes)}
        if ignore_prefixes
        else dict(state_dict)
    )
    own = module.state_dict()
    missing = sorted(set(own) - set(sd))
    unexpected = sorted(set(sd) - set(own))
    shapes = [
        f"{k}: checkpoint {tuple(sd[k].shape)} vs model {tuple(own[k].shape)}"
        for k in sorted(set(own) & set(sd))
        if tuple(sd[k].shape) != tuple(own[k].shape)
    ]
    if missing or unexpected or shapes:

        def show(keys: list[str]) -> str:
            return ", ".join(keys[:8]) + (f" (+{len(keys) - 8} more)" if len(keys) > 8 else "")

        parts = []
        if missing:
            parts.append(f"missing keys: {show(missing)}")
        if unexpected:
            parts.append(f"unexpected keys: {show(unexpected)}")
        if shapes:
            parts.append(f"shape mismatches: {show(shapes)}")
        raise ValueError(
            f"{what} does not match the model architecture; "
            + "; ".join(parts)
            + ". Check that the checkpoint belongs to this architecture/config."
        )
    module.load_state_dict({k: v.to(own[k].dtype) for k, v in sd.items()}, strict=True)


# ------------------------------------------------------------------------------------------ model archives
#: What :func:`model_archive_kind` tells apart (by content, never by file name).
TORCHSCRIPT = "torchscript"
TORCH_EXPORT = "torch.export"
TORCH_SAVE = "torch.save"
SAFETENSORS = "safetensors"
_PICKLE_FREE_HELP = (
    "Save the model with torch.export (torch.export.save(torch.export.export(model, (example,)), 'model.pt2')) "
    "or TorchScript (torch.jit.save(torch.jit.script(model), 'model.pt')), or its weights with safetensors."
)


def model_archive_kind(path: str | Path) -> str | None:
    """``"torchscript"``, ``"torch.export"`` or ``"torch.save"`` for the zip archives torch writes, None for a
    file that is not a zip. All three are zips of one folder; they differ in layout: ``torch.jit.save`` writes
    ``code/`` and ``constants.pkl``, ``torch.export.save`` an ``archive_format`` file reading ``pt2`` and
    ``models/<name>.json``, ``torch.save`` only ``data.pkl`` (a pickle). Any other zip raises ValueError."""
    import zipfile

    p = Path(path)
    if not zipfile.is_zipfile(p):
        with open(p, "rb") as fh:
            if fh.read(4) == ZIP_MAGIC:  # a zip's start without its end (the central directory)
                raise ValueError(f"'{p}' is an incomplete zip archive (its central directory is missing). {_RESAVE}")
        return None
    try:
        with zipfile.ZipFile(p) as zf:
            names = zf.namelist()
            inner = {n.split("/", 1)[1] for n in names if "/" in n}
            if "archive_format" in inner:
                fmt = next(n for n in names if n.split("/", 1)[-1] == "archive_format")
                small = zf.getinfo(fmt).file_size <= 64  # a marker of a few bytes, never a decompression bomb
                if (
                    small
                    and zf.read(fmt).decode("utf-8", "replace").strip() == "pt2"
                    and any(n.startswith("models/") and n.endswith(".json") for n in inner)
                ):
                    return TORCH_EXPORT
    except zipfile.BadZipFile as err:
        raise ValueError(f"'{p}' is a corrupt zip archive ({err}). {_RESAVE}") from None
    if any(n.startswith("code/") for n in inner) and "constants.pkl" in inner:
        return TORCHSCRIPT
    if "data.pkl" in inner:
        return TORCH_SAVE
    raise ValueError(
        f"'{p}' is a zip archive but neither TorchScript (code/, constants.pkl) nor a torch.export program "
        f"(archive_format, models/). {_PICKLE_FREE_HELP}"
    )


def check_exported_archive(path: str | Path) -> None:
    """Refuse a ``torch.export`` archive (``.pt2``) that would make ``torch.export.load`` unpickle anything.

    ``torch.export.load`` reads tensors from raw bytes described by JSON, but it unpickles a payload marked
    ``use_pickle`` (tensor subclasses), custom and opaque objects among the constants, the legacy single-file
    weights and constants, and, when ``weights_only`` loading of the sample inputs fails, the sample inputs with
    a full unpickle; an AOTInductor package carries compiled shared libraries. Each of those is refused here,
    and the sample inputs are proved to load with ``weights_only=True``, so loading a checked archive runs no
    code from the file. Raises ValueError naming what was found.
    """
    import io
    import json
    import zipfile

    from torch.export.pt2_archive import constants as pt2

    p = Path(path)

    def refuse(what: str) -> ValueError:
        return ValueError(
            f"'{p}' is a torch.export archive that holds {what}, which loading would unpickle or execute; genEval "
            "loads only programs whose weights and constants are plain tensors. Export the model in eval mode "
            "with plain tensor weights (no tensor subclasses, custom objects or AOTInductor packages)."
        )

    with zipfile.ZipFile(p) as zf:
        by_inner = {n.split("/", 1)[1]: n for n in zf.namelist() if "/" in n}
        for inner in by_inner:
            if inner.startswith((pt2.AOTINDUCTOR_DIR, pt2.EXECUTORCH_DIR, pt2.MTIA_DIR)):
                raise refuse(f"a compiled package ({inner})")
        models = [i[len(pt2.MODELS_DIR) : -len(".json")] for i in by_inner if i.startswith(pt2.MODELS_DIR)]
        if not models:
            raise ValueError(f"'{p}' holds no exported program (no {pt2.MODELS_DIR}<name>.json).")
        for model in models:
            for legacy in (f"{pt2.WEIGHTS_DIR}{model}.pt", f"{pt2.CONSTANTS_DIR}{model}.pt"):
                if legacy in by_inner:
                    raise refuse(f"pickled weights or constants in the legacy layout ({legacy})")
            for fmt, what in (
                (pt2.WEIGHTS_CONFIG_FILENAME_FORMAT, "weights"),
                (pt2.CONSTANTS_CONFIG_FILENAME_FORMAT, "constants"),
            ):
                name = fmt.format(model)
                if name not in by_inner:
                    raise ValueError(f"'{p}' is an incomplete torch.export archive: {name} is missing.")
                try:
                    config = json.loads(zf.read(by_inner[name])).get("config", {})
                except (ValueError, AttributeError) as err:
                    raise ValueError(f"'{p}': {name} is not valid JSON ({err}).") from None
                for fqn, meta in config.items():
                    if meta.get("use_pickle"):
                        raise refuse(f"pickled {what} ({fqn})")
                    if what == "constants" and not str(meta.get("path_name", "")).startswith(
                        pt2.TENSOR_CONSTANT_FILENAME_PREFIX
                    ):
                        raise refuse(f"a non-tensor constant ({fqn}: {meta.get('path_name')})")
            sample = pt2.SAMPLE_INPUTS_FILENAME_FORMAT.format(model)
            if sample in by_inner:
                try:
                    torch.load(io.BytesIO(zf.read(by_inner[sample])), map_location="cpu", weights_only=True)
                except Exception as err:  # noqa: BLE001 - anything weights_only refuses would be unpickled by torch
                    raise refuse(f"sample inputs that only a full unpickle reads ({type(err).__name__})") from None


def load_exported_program(path: str | Path, what: str = "torch.export program"):
    """A ``torch.export`` program (``torch.export.save``, ``.pt2``) loaded without running pickled code
    (:func:`check_exported_archive` first). Returns the ``torch.export.ExportedProgram``."""
    p = require_file(path, what)
    if model_archive_kind(p) != TORCH_EXPORT:
        raise ValueError(f"'{p}' is not a torch.export archive. {_PICKLE_FREE_HELP}")
    check_exported_archive(p)
    try:
        with open(p, "rb") as fh:  # a file object: torch does not insist on the .pt2 suffix (the content was checked)
            return torch.export.load(fh)
    except Exception as err:  # torch raises RuntimeError and friends with the reason
        raise ValueError(
            f"'{p}' is a torch.export archive that does not load with this torch ({torch.__version__}): "
            f"{type(err).__name__}: {error_reason(err)}"
        ) from err


def archive_kind(path: str, kind: str | None) -> tuple[str | None, dict | None]:
    """``(kind, None)`` for a file to load as ``kind``; ``kind`` None: the zip archive's layout
    (:func:`model_archive_kind`), with the whole answer where nothing is to be loaded (``{"kind": "torch.save"}``,
    ``{"kind": None, "refused": reason}``)."""
    if kind is not None:
        return kind, None
    try:
        kind = model_archive_kind(path)
    except ValueError as err:
        return None, {"kind": None, "refused": str(err)}
    return kind, ({"kind": kind} if kind in (TORCH_SAVE, None) else None)


def probe_model_file(path: str, kind: str | None = None) -> dict:
    """Open a model file the way genEval will and say what it holds; run only in a sandbox
    (:func:`check_model_file`): loading TorchScript runs code from the file.

    ``kind`` None: a zip archive, told apart by its layout first (:func:`model_archive_kind`): a ``torch.save``
    archive or an unknown layout is answered without loading anything (``{"kind": "torch.save"}``, ``{"kind": None,
    "refused": reason}``). Then ``torchscript`` is loaded with ``torch.jit.load`` (``{"forward": bool}``),
    ``torch.export`` checked and loaded (``{"inputs": n}``) and ``safetensors`` opened (``{"tensors": n}``); the
    answer always holds ``kind``. A file that does not load raises ValueError with the reason."""
    import warnings

    kind, answer = archive_kind(path, kind)
    if answer is not None:
        return answer
    if kind == SAFETENSORS:
        from safetensors import safe_open

        check_safetensors_header(path)
        try:
            with safe_open(path, framework="pt") as fh:  # validates every tensor's dtype, shape and offsets
                return {"kind": kind, "tensors": len(list(fh.keys()))}
        except Exception as err:  # noqa: BLE001 - safetensors raises its own error type for every bad file
            raise ValueError(f"invalid safetensors file: {error_reason(err)}") from None
    if kind == TORCH_EXPORT:
        return {"kind": kind, "inputs": len(list(load_exported_program(path).graph_signature.user_inputs))}
    with warnings.catch_warnings():  # torch >= 2.9 deprecates jit in favour of export; jit still works
        warnings.simplefilter("ignore", FutureWarning)
        try:
            module = torch.jit.load(path, map_location="cpu")
        except Exception as err:  # torch raises RuntimeError and friends with the reason
            raise ValueError(f"'{path}' is not a loadable TorchScript archive ({error_reason(err, 200)}).") from None
    return {"kind": kind, "forward": hasattr(module, "forward")}


def check_model_file(
    path: str | Path, kind: str | None = None, limits: Limits | None = None, what: str = "the model file's check"
) -> dict:
    """:func:`probe_model_file` in a child process with a time limit, a memory limit and no network
    (:func:`genEval.sandbox.run_isolated`; ``limits`` default 60 s and 4 GiB),
    so that a file whose loading never returns or fills the memory stops the child, not this process. Raises
    :class:`genEval.sandbox.LimitExceeded` or :class:`genEval.sandbox.CheckFailed` (ValueErrors) with the reason."""
    return run_isolated(
        "genEval.checkpoints:probe_model_file", str(path), kind, limits=limits or Limits(), what=what,
        read_only=(str(path),),
    )  # fmt: skip


class WeightsUnavailable(FileNotFoundError):
    """Pretrained weights are neither on this machine nor downloadable now (no network, ``HF_HUB_OFFLINE``).

    A user error (a ``FileNotFoundError``): the message names the local file option that fixes it.
    """


_TRUE = {"1", "ON", "YES", "TRUE"}


def hub_problem(url: str | None = None, timeout: float = 5.0) -> str | None:
    """Why the Hugging Face hub (or ``url``) cannot be used right now, or None when it answers.

    ``HF_HUB_OFFLINE`` set to a true value (as huggingface_hub reads it) answers at once, without a request.
    Otherwise one ``HEAD`` request goes to ``url`` (default: the hub's endpoint, ``HF_ENDPOINT``) through
    huggingface_hub's own HTTP session (its proxy and certificate settings), with ``timeout`` seconds and no
    retries: huggingface_hub's downloads retry a failed connection five times per file with back-off (about half a
    minute per file), which is what an unreachable hub must not cost.
    """
    import os

    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").upper() in _TRUE:
        return "HF_HUB_OFFLINE is set"
    target = url or constants.ENDPOINT
    try:
        status = get_session().head(target, timeout=timeout).status_code
    except Exception as err:  # httpx, ssl and socket raise many types; all mean "not now"
        return f"{target} is unreachable ({type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]})"
    return f"{target} answered HTTP {status}" if status >= 500 else None
