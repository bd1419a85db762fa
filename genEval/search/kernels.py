"""How the roles run on the device: precision, memory layout, compilation (issue 12; recorded in results).

``precision`` is ``fp32`` (default), ``bf16`` or ``fp16``, for all roles or per role. Reduced precision is
``torch.autocast`` around each role's calls; the search state (latents, Adam moments, gradients handed back
to the loop) stays fp32, since every wrapper returns fp32 tensors. fp16 is never a default: VAE and VQGAN
decoders overflow in it (the reason bf16 exists), so it is only used when asked for, with a warning unless
the generator declares ``fp16_safe = True``. ``channels_last`` converts conv weights to NHWC (faster
convolutions with tensor cores). ``compile`` wraps the role's calls in ``torch.compile(dynamic=False)``:
the refilled batch keeps shapes static. On CUDA with fp32, TF32 matmuls and convolutions are switched on.

:func:`accelerate` returns wrapped roles and the settings that took effect (what results.json records); a
setting that cannot work here (compile on a CPU, a torch without a working compiler) falls back with one
warning line instead of failing the run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from genEval.interfaces import SettingError

log = logging.getLogger(__name__)

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ROLES = ("classifier", "generator", "oracle")


@dataclass(frozen=True)
class Kernels:
    """The settings (config keys ``precision``, ``role_precision``, ``channels_last``, ``compile``).

    ``precision``: one of :data:`PRECISIONS` for every role; ``role_precision``: per-role overrides
    (``{"generator": "bf16"}``). ``compile``: True for every role, or a mapping role -> bool.
    """

    precision: str = "fp32"
    role_precision: Mapping[str, str | None] = field(default_factory=dict)
    channels_last: bool = False
    compile: bool | Mapping[str, bool] = False

    def __post_init__(self) -> None:
        for role, p in {"all roles": self.precision, **dict(self.role_precision or {})}.items():
            if role != "all roles" and role not in ROLES:
                raise ValueError(f"role_precision names unknown role {role!r}; roles: {', '.join(ROLES)}.")
            if p is not None and p not in PRECISIONS:
                raise ValueError(
                    f"unknown precision {p!r} for {role}; choose one of {', '.join(PRECISIONS)} "
                    "(bf16 is the fast safe choice on GPUs)."
                )
        if not isinstance(self.compile, (bool, Mapping)):
            raise SettingError("compile", self.compile, "true, false or a mapping role -> true/false", "true")
        if isinstance(self.compile, Mapping) and set(self.compile) - set(ROLES):
            raise ValueError(
                f"compile names unknown roles {sorted(set(self.compile) - set(ROLES))}; roles: {', '.join(ROLES)}."
            )

    def precision_of(self, role: str) -> str:
        return (self.role_precision or {}).get(role) or self.precision

    def compile_of(self, role: str) -> bool:
        return bool(self.compile.get(role, False)) if isinstance(self.compile, Mapping) else bool(self.compile)


class _Autocast(nn.Module):
    """Runs ``fn`` under autocast (when ``dtype`` is not fp32) and hands back fp32 tensors."""

    def __init__(self, device_type: str, dtype: torch.dtype) -> None:
        super().__init__()
        self.device_type, self.dtype = device_type, dtype

    def run(self, fn, *args):
        if self.dtype == torch.float32:
            return fn(*args)
        with torch.autocast(self.device_type, dtype=self.dtype):
            out = fn(*args)
        return _to_fp32(out)


def _to_fp32(out: Any) -> Any:
    if torch.is_tensor(out):
        return out.float() if out.is_floating_point() else out
    if hasattr(out, "__dataclass_fields__"):  # e.g. a Judgement
        return type(out)(**{k: _to_fp32(v) for k, v in asdict(out).items()})
    return out


class ClassifierRunner(_Autocast):
    """A classifier under the chosen precision/compilation; same contract as the classifier it wraps."""

    def __init__(self, model: nn.Module, device_type: str, dtype: torch.dtype, compiled: bool) -> None:
        super().__init__(device_type, dtype)
        self.model = model
        self.num_classes, self.name = getattr(model, "num_classes", None), getattr(model, "name", None)
        self._forward = torch.compile(model, dynamic=False) if compiled else model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run(self._forward, x)

    def extra_repr(self) -> str:
        return f"{type(self.model).__name__}, dtype={self.dtype}"


class GeneratorRunner(_Autocast):
    """A generator's encode/decode under the chosen precision/compilation (latents and images stay fp32)."""

    def __init__(self, model: nn.Module, device_type: str, dtype: torch.dtype, compiled: bool) -> None:
        super().__init__(device_type, dtype)
        self.model = model
        self.name, self.downsample = getattr(model, "name", None), getattr(model, "downsample", 1)
        self._decode = torch.compile(model.decode, dynamic=False) if compiled else model.decode

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.run(self.model.encode, x)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.run(self._decode, z)

    def extra_repr(self) -> str:
        return f"{type(self.model).__name__}, dtype={self.dtype}"


class OracleRunner(_Autocast):
    """An oracle's judgement under the chosen precision/compilation."""

    def __init__(self, oracle: Any, device_type: str, dtype: torch.dtype, compiled: bool) -> None:
        super().__init__(device_type, dtype)
        self.oracle = oracle
        self.name, self.reference = getattr(oracle, "name", None), getattr(oracle, "reference", None)
        self._judge = torch.compile(oracle.judge, dynamic=False) if compiled else oracle.judge

    def prepare(self, class_names: list[str]) -> None:
        self.oracle.prepare(class_names)

    def judge(self, x: torch.Tensor, y: torch.Tensor):
        return self.run(self._judge, x, y)


def _can_compile(device: torch.device) -> str | None:
    """None when torch.compile can work here, else the reason it cannot."""
    if device.type != "cuda":
        return f"compile needs a CUDA device (this run is on {device.type})"
    try:
        import triton  # noqa: F401  (optional: the compiler torch.compile uses on GPUs)
    except ImportError:
        return "torch.compile needs triton, which is not installed"
    return None


def accelerate(
    classifier: Any, generator: Any, oracle: Any, kernels: Kernels, device: torch.device
) -> tuple[Any, Any, Any, dict[str, Any]]:
    """Wrap the three roles as ``kernels`` asks; returns them and the settings that took effect."""
    effective: dict[str, Any] = {"channels_last": bool(kernels.channels_last), "tf32": False}
    why_not = _can_compile(device) if any(kernels.compile_of(r) for r in ROLES) else None
    if why_not:
        log.warning("compile=true ignored: %s; running eagerly.", why_not)
    if device.type == "cuda":
        fp32_somewhere = any(kernels.precision_of(r) == "fp32" for r in ROLES)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = fp32_somewhere
        effective["tf32"] = fp32_somewhere
    if kernels.precision_of("generator") == "fp16" and not getattr(generator, "fp16_safe", False):
        log.warning(
            "precision fp16 for generator %s: VAE/VQGAN decoders overflow in fp16 (NaN/inf images); "
            "use precision=bf16 instead.",
            getattr(generator, "name", type(generator).__name__),
        )
    roles = {"classifier": classifier, "generator": generator, "oracle": oracle}
    runners = {"classifier": ClassifierRunner, "generator": GeneratorRunner, "oracle": OracleRunner}
    out = {}
    for role, obj in roles.items():
        prec, compiled = kernels.precision_of(role), kernels.compile_of(role) and why_not is None
        effective[role] = {"precision": prec, "compile": compiled}
        if kernels.channels_last and isinstance(obj, nn.Module):
            obj.to(memory_format=torch.channels_last)
        if prec == "fp32" and not compiled:
            out[role] = obj  # nothing to wrap: the role runs as built
        else:
            out[role] = runners[role](obj, device.type, PRECISIONS[prec], compiled)
    return out["classifier"], out["generator"], out["oracle"], effective
