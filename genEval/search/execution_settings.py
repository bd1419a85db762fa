"""The execution settings of a run, checked without torch: :class:`Execution` (device, batch size, precision, memory
format, compile; docs/configuration.md) and :func:`resolve_device`.

:mod:`genEval.search.execution` prepares the roles as these settings ask (weights in reduced precision, NHWC, the
compiled step) and re-exports these names. They live here, apart, so that the command line refuses a bad value
(``geneval batch_size=0``, ``precision=fp8``, ``device=gpu``) before it imports torch (docs/configuration.md): torch is
imported only to check an unusual device spelling and when a device is resolved.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Mapping
from dataclasses import InitVar, asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from genEval.validation import COMPILE_SCOPES, MEMORY_FORMATS, SettingError, check_batch_size, is_whole, precision_name

if TYPE_CHECKING:  # annotations only: torch is imported where a device is resolved
    import torch

ROLES = ("classifier", "generator", "oracle")
#: torch.compile modes (``compile_mode``): ``default``; ``reduce-overhead`` adds CUDA graphs over the fixed-shape
#: step; ``max-autotune`` also searches kernel configurations (long first compile).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: Device spellings torch accepts that are checked without importing it.
_COMMON_DEVICES = re.compile(r"auto|cpu|cuda(:\d+)?|mps")


def _device_spelling(device: Any) -> str:
    """``device`` as text, refused (SettingError) unless torch could read it; whether this machine has it is asked
    at :meth:`Execution.torch_device`. The usual spellings are checked here, anything else (or a ``torch.device``)
    by torch itself."""
    if isinstance(device, str) and _COMMON_DEVICES.fullmatch(device):
        return device
    import torch  # an unusual spelling (xpu, meta, ...) or a torch.device: torch tells

    if not isinstance(device, (str, torch.device)):
        raise SettingError("device", device, "auto, cpu, cuda or cuda:N", "auto")
    try:
        torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise SettingError("device", str(device), "auto, cpu, cuda or cuda:N", "auto") from err
    return str(device)


#: The files a GPU driver puts on Linux (NVIDIA's control device and version, AMD ROCm's kernel driver): CUDA (or
#: ROCm, which torch also calls ``cuda``) cannot work without one of them.
GPU_DRIVER_FILES = ("/dev/nvidiactl", "/proc/driver/nvidia/version", "/dev/kfd")


def refuse_cuda_without_driver(device: str, driver_files: tuple[str, ...] = GPU_DRIVER_FILES) -> None:
    """``device=cuda`` (or ``cuda:N``) on a Linux machine with no GPU driver file: refused without importing torch,
    with the message :func:`resolve_device` gives (docs/configuration.md). Anywhere else (a driver is there, or not
    Linux) torch decides later, in :func:`resolve_device`."""
    if not str(device).startswith("cuda") or not sys.platform.startswith("linux"):
        return
    if not any(os.path.exists(p) for p in driver_files):
        raise SettingError("device", str(device), "a device this machine has", "cpu", "no CUDA device is available")


def resolve_device(device: str | torch.device) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; anything else must be a valid torch device (torch is imported
    here, when a device is resolved, not when the settings are checked)."""
    import torch

    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise SettingError("device", device, "auto, cpu, cuda or cuda:N", "auto") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SettingError("device", str(device), "a device this machine has", "cpu", "no CUDA device is available")
    return dev


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


@dataclass(frozen=True)
class Execution:
    """Where and how fast a run goes; never what it finds, except ``precision`` (bf16 may flip a near-tie, so
    precision is part of a run's identity, and a run is not resumed under another precision).

    device: ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``. batch_size: rows searched at once, or None (chosen from
    the memory one search step needs). num_workers: DataLoader workers decoding images. precision: ``fp32`` |
    ``bf16`` | ``fp16`` for every role; role_precision: per-role overrides (``{"generator": "bf16"}``; None =
    ``precision``). memory_format: ``auto`` | ``channels_last`` (NHWC end to end) | ``contiguous`` (as built).
    compile: compile the search step (CUDA; elsewhere eager with a warning). compile_mode: one of
    :data:`COMPILE_MODES`. compile_scope: ``full`` (the step as one graph) | ``regional`` (the decoder's repeated
    blocks). tf32: TF32 matmuls and convolutions for fp32 roles on CUDA (false: strict fp32).

    The node ``conf/execution`` builds it; ``device=``, ``batch_size=``, ``precision=``, ``memory_format=``,
    ``compile=``, ``compile_scope=`` (and the deprecated ``channels_last=``) are its short spellings at the top level
    of a command's config.
    """

    device: str = "auto"
    batch_size: int | None = None
    num_workers: int = 0
    precision: str = "fp32"
    role_precision: Mapping[str, str | None] = field(default_factory=dict)
    memory_format: str = "auto"
    compile: bool = False
    compile_mode: str = "default"
    compile_scope: str = "full"
    tf32: bool = True
    #: Deprecated (the old weights-only switch, replaced by memory_format; docs/configuration.md): true is read as
    #: ``memory_format=channels_last``, false as ``contiguous``, when memory_format is left at ``auto``.
    channels_last: InitVar[bool | None] = None

    def __post_init__(self, channels_last: bool | None = None) -> None:
        if channels_last is not None:
            if not _is_bool(channels_last):
                raise SettingError(
                    "channels_last", channels_last, "true or false (deprecated: use memory_format)", "null"
                )
            new = "channels_last" if channels_last else "contiguous"
            warnings.warn(f"channels_last is deprecated: write memory_format={new}.", FutureWarning, stacklevel=3)
            if self.memory_format == "auto":
                object.__setattr__(self, "memory_format", new)
        object.__setattr__(self, "device", _device_spelling(self.device))
        object.__setattr__(self, "batch_size", check_batch_size(self.batch_size))
        if not is_whole(self.num_workers, 0):
            raise SettingError("num_workers", self.num_workers, "a whole number >= 0", "0")
        object.__setattr__(self, "num_workers", int(self.num_workers))
        object.__setattr__(self, "precision", precision_name(self.precision))  # old spellings: deprecated
        roles = dict(self.role_precision or {})
        for role, p in roles.items():
            if role not in ROLES:
                raise SettingError("role_precision", {role: p}, "a mapping of " + ", ".join(ROLES), "{generator: bf16}")
            roles[role] = precision_name(p, f"role_precision.{role}", nullable=True)
        # canonical: only real overrides (None follows precision), so {} and {generator: null} are one identity
        object.__setattr__(self, "role_precision", {r: p for r, p in roles.items() if p is not None})
        for key in ("compile", "tf32"):
            if not _is_bool(getattr(self, key)):
                raise SettingError(key, getattr(self, key), "true or false", "true")
        if self.compile_mode not in COMPILE_MODES:
            raise SettingError("compile_mode", self.compile_mode, "one of " + ", ".join(COMPILE_MODES), "default")
        for key, allowed in (("memory_format", MEMORY_FORMATS), ("compile_scope", COMPILE_SCOPES)):
            if getattr(self, key) not in allowed:
                raise SettingError(key, getattr(self, key), "one of " + ", ".join(allowed), allowed[0])

    @classmethod
    def coerce(cls, value: Execution | Mapping[str, Any] | None) -> Execution:
        """From itself, a mapping of its fields (a config made plain; other keys are ignored), or None (defaults)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"execution must be an Execution or a mapping of its fields, got {type(value).__name__}.")
        given = {f.name: value[f.name] for f in fields(cls) if f.name in value}
        return cls(**given, channels_last=value.get("channels_last"))

    def precision_of(self, role: str) -> str:
        return self.role_precision.get(role) or self.precision

    def torch_device(self) -> torch.device:
        return resolve_device(self.device)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["role_precision"] = dict(self.role_precision)
        return out


#: The keys of :class:`Execution`, as they stand at the top level of a command's config (and the deprecated
#: ``channels_last``, which :meth:`Execution.coerce` reads as ``memory_format``).
EXECUTION_FIELDS = (*(f.name for f in fields(Execution)), "channels_last")
