"""Loading weights safely, with errors that name the problem.

Official research checkpoints are often pickles (taming's ``.ckpt``, akamaster's ``.th``).
``torch.load(weights_only=True)`` refuses to execute pickled code; genEval uses it always and
only falls back to a full unpickle when the user opts in with ``allow_pickle=True``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

log = logging.getLogger(__name__)


def require_file(path: str | Path, what: str, hint: str = "") -> Path:
    """Return ``path`` as a Path, or raise FileNotFoundError saying what was expected there."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"{what} not found: '{p}'. {hint}".strip())
    return p


def load_checkpoint(path: str | Path, what: str = "checkpoint", allow_pickle: bool = False, hint: str = "") -> object:
    """Load a torch/safetensors file on the CPU without running pickled code unless allowed."""
    p = require_file(path, what, hint)
    if p.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(p), device="cpu")
    try:
        return torch.load(p, map_location="cpu", weights_only=True)
    except Exception as err:  # weights_only refuses arbitrary objects
        if not allow_pickle:
            raise ValueError(
                f"{what} '{p}' holds pickled Python objects that torch refuses to load safely "
                f"({type(err).__name__}: {str(err).splitlines()[0][:200]}). If you trust the file, "
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


def cache_dir(sub: str = "") -> Path:
    """genEval's cache (``$GENEVAL_CACHE`` or ``~/.cache/geneval``), created on demand."""
    import os

    root = Path(os.environ.get("GENEVAL_CACHE", Path.home() / ".cache" / "geneval")).expanduser()
    p = root / sub if sub else root
    p.mkdir(parents=True, exist_ok=True)
    return p


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
