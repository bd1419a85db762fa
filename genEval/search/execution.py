"""How a run executes: one settings object for every entry point, and the roles prepared for the device.

:class:`Execution` is the config group ``conf/execution`` (its keys sit at the top level: ``device=cuda
precision=bf16 compile=true``) and the one object ``geneval``, ``geneval compare`` (every model and repetition),
``geneval worker`` and service jobs pass to :func:`genEval.search.driver.evaluate`. It is validated once, here,
and recorded in ``results.json`` under ``execution`` (what was asked, and what took effect).

Precision (``fp32`` default, ``bf16``, ``fp16``; for all roles or per role). Reduced precision converts a frozen
role's *weights* (``role.to(bf16)``) and casts the role's floating inputs at its boundary, handing fp32 back: the
search state (latents, Adam moments, gradients, the loss) stays fp32. Weights rather than ``torch.autocast``,
because autocast re-casts every weight and every normalisation input at every call; on the paper's VQGAN
decoder that made the bf16 step barely faster than fp32 (docs/benchmarks.md: 309 ms vs 323 ms, against 210 ms with bf16
weights). Autocast is kept only where a role cannot take converted weights: a role that is not an
``nn.Module`` (nothing to convert), or one that declares ``precision_mode = "autocast"`` (a compiled program
such as a ``torch.export`` graph whose constants stay fp32). fp16 is never a default: VAE and VQGAN decoders
overflow in it, so it warns unless the generator declares ``fp16_safe = True``.

``memory_format`` (``auto`` | ``channels_last`` | ``contiguous``, docs/configuration.md): ``channels_last`` runs the
roles NHWC end to end (weights, latents in, activations, GroupNorm, images out: :mod:`genEval.kernels`); ``contiguous``
leaves them as built (NCHW); ``auto`` is channels_last where the step is compiled on CUDA and contiguous elsewhere
(eager CUDA GroupNorm converts NHWC back to NCHW, so eager NHWC pays transposes; a CPU gains nothing). Measured:
not yet (no GPU was lent to the session that wrote it; ``benchmarks/gpu_issue34.sh`` measures it). The old
``channels_last=true`` (weights only) is read as ``memory_format=channels_last``, with a deprecation note.

``compile`` compiles the search step (decode, classify, loss, judge: :func:`genEval.search.perturb.search_forward`)
as one graph with ``torch.compile(fullgraph=True, dynamic=False)``; the backward to the latent is compiled with it
by AOTAutograd. The batch keeps its size for the whole run (:class:`~genEval.search.rows.SearchRows` pads
instead of shrinking), so a run compiles once. ``compile_scope=regional`` compiles only the generator's repeated
decoder blocks, each block type once (:func:`genEval.kernels.compile_regions`), meant to shorten the first
compile (on a CPU it did not: ``benchmarks/RESULTS.md``; on a GPU not measured yet); the classifier and the oracle
then run eagerly. ``compile_mode=reduce-overhead`` adds CUDA graphs over the fixed-shape
step (measured: not yet, no GPU). Compiled artefacts are cached under ``$GENEVAL_CACHE/torch_compile``. On CUDA
with fp32, TF32 matmuls and convolutions are switched on unless ``tf32=false`` (strict fp32). A setting that cannot
work here (compile on a CPU, a torch without triton) falls back with one warning line and is recorded as not taken.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from genEval.fileio import cache_dir
from genEval.interfaces import SettingError, check_batch_size, component_id, hook  # noqa: F401  (perturb imports it)
from genEval.kernels import compile_regions, repeated_blocks, to_memory_format
from genEval.search.execution_settings import (  # noqa: F401  (the settings, torch-free; importable from here too)
    COMPILE_MODES,
    EXECUTION_FIELDS,
    ROLES,
    Execution,
    resolve_device,
)

log = logging.getLogger(__name__)

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_memory_format(memory_format: str, device: torch.device, compiled: bool) -> str:
    """``auto`` -> ``channels_last`` when the step is compiled on CUDA, else ``contiguous``; others as given."""
    if memory_format != "auto":
        return memory_format
    return "channels_last" if compiled and device.type == "cuda" else "contiguous"


# ------------------------------------------------------------------------------------------------ the roles
def _cast(value: Any, dtype: torch.dtype) -> Any:
    """Floating tensors (also inside tuples, lists and dataclasses such as a Judgement) cast to ``dtype``."""
    if torch.is_tensor(value):
        return value.to(dtype) if value.is_floating_point() and value.dtype != dtype else value
    if isinstance(value, (tuple, list)):
        return type(value)(_cast(v, dtype) for v in value)
    if hasattr(value, "__dataclass_fields__"):
        return type(value)(**{f: _cast(getattr(value, f), dtype) for f in value.__dataclass_fields__})
    return value


class RoleRunner(nn.Module):
    """A role at reduced precision, with the role's contract unchanged: fp32 in, fp32 out.

    ``mode="weights"``: the role's weights were converted to ``dtype``; floating inputs are cast to it at the
    boundary. ``mode="autocast"``: the role runs as built under ``torch.autocast``. Every other attribute (a
    generator's ``name``, ``downsample``, ``decoded_latents``; an oracle's ``reference``...) is the role's own.
    """

    def __init__(self, role: Any, dtype: torch.dtype, mode: str, device_type: str) -> None:
        super().__init__()
        if isinstance(role, nn.Module):
            self.role = role
        else:
            self.__dict__["role"] = role
        self.dtype, self.mode, self.device_type = dtype, mode, device_type

    def run(self, fn: Callable, *args: Any) -> Any:
        if self.mode == "autocast":
            with torch.autocast(self.device_type, dtype=self.dtype):
                return _cast(fn(*args), torch.float32)
        return _cast(fn(*_cast(args, self.dtype)), torch.float32)

    # the three roles' calls (Classifier.__call__, Generator.encode/decode, Oracle.judge)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run(self.role, x)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.run(self.role.encode, x)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.run(self.role.decode, z)

    def judge(self, x: torch.Tensor, y: torch.Tensor):
        return self.run(self.role.judge, x, y)

    def prepare(self, class_names: list[str]) -> None:
        self.role.prepare(class_names)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            role = self._modules.get("role") or self.__dict__.get("role")
            if role is None:
                raise
            return getattr(role, name)

    def extra_repr(self) -> str:
        return f"{str(self.dtype).removeprefix('torch.')}, {self.mode}"


def _mode(role: Any) -> str | None:
    """How reduced precision reaches ``role``: its weights; autocast when it is not a module or asks for it; and
    not at all (None) when it is a module without floating weights (a fixed function such as a sigmoid latent
    space: there is nothing to convert, and casting its inputs would only lose precision)."""
    if not isinstance(role, nn.Module):
        return "autocast"
    if hook(role, "precision_mode") == "autocast":
        return "autocast"
    has_weights = any(t.is_floating_point() for t in (*role.parameters(), *role.buffers()))
    return "weights" if has_weights else None


def compile_problem(device: torch.device) -> str | None:
    """None when torch.compile can work here, else the reason it cannot."""
    if device.type != "cuda":
        return f"compile needs a CUDA device (this run is on {device.type})"
    try:
        import triton  # noqa: F401  (optional: the compiler torch.compile uses on GPUs)
    except ImportError:
        return "torch.compile needs triton, which is not installed"
    return None


def use_compile_cache() -> str:
    """Point inductor's and triton's on-disk caches at ``$GENEVAL_CACHE/torch_compile`` (unless the user set
    them), so a second start of the same configuration reuses the compiled kernels and graphs."""
    root = cache_dir() / "torch_compile"
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(root / "inductor"))
    os.environ.setdefault("TRITON_CACHE_DIR", str(root / "triton"))
    return os.environ["TORCHINDUCTOR_CACHE_DIR"]


def accelerate(
    classifier: Any, generator: Any, oracle: Any, execution: Execution, device: torch.device
) -> tuple[Any, Any, Any, dict[str, Any]]:
    """The three roles prepared as ``execution`` asks (weights converted in place); returns them and the
    settings that took effect (``compile`` is True only when the step will really be compiled; ``memory_format``
    is ``auto`` resolved)."""
    effective: dict[str, Any] = {"tf32": False, "compile": False}
    if execution.compile:
        why_not = compile_problem(device)
        if why_not:
            log.warning("compile=true ignored: %s; running eagerly.", why_not)
        else:
            effective.update(compile=True, compile_mode=execution.compile_mode, compile_scope=execution.compile_scope,
                             compile_cache=use_compile_cache())  # fmt: skip
    effective["memory_format"] = resolve_memory_format(execution.memory_format, device, effective["compile"])
    if device.type == "cuda":
        fp32_somewhere = any(execution.precision_of(r) == "fp32" for r in ROLES)
        tf32 = fp32_somewhere and execution.tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        effective["tf32"] = tf32
    if execution.precision_of("generator") == "fp16" and not hook(generator, "fp16_safe"):
        log.warning(
            "precision fp16 for generator %s: VAE/VQGAN decoders overflow in fp16 (NaN/inf images); "
            "use precision=bf16 instead.",
            component_id(generator),
        )
    out = {}
    for role, obj in {"classifier": classifier, "generator": generator, "oracle": oracle}.items():
        prec = execution.precision_of(role)
        if effective["memory_format"] == "channels_last" and isinstance(obj, nn.Module):
            to_memory_format(obj, "channels_last", hook(obj, "nhwc_classes"))  # contiguous: the roles as built
        mode = None if prec == "fp32" else _mode(obj)
        if mode is None:
            out[role] = obj  # fp32, or nothing to convert: the role runs as built
        else:
            if mode == "weights":
                obj.to(PRECISIONS[prec])
            out[role] = RoleRunner(obj, PRECISIONS[prec], mode, device.type)
        effective[role] = {"precision": prec if mode or prec == "fp32" else "fp32 (no weights)", "mode": mode}
    return out["classifier"], out["generator"], out["oracle"], effective


def compile_generator_regions(generator: Any, options: Mapping[str, Any]) -> int:
    """``compile_scope=regional``: compile the generator's repeated decoder blocks (its ``compile_regions`` hook,
    else :func:`genEval.kernels.repeated_blocks` of the whole module) with ``torch.compile`` ``options``; returns
    the number of blocks compiled (0, with a warning, when it has none)."""
    regions = hook(generator, "compile_regions")
    if regions is not None:
        blocks = list(regions())
    else:
        blocks = repeated_blocks(generator) if isinstance(generator, nn.Module) else []
    if not blocks:
        log.warning("compile_scope=regional: generator %s has no repeated blocks; it runs eagerly.",
                    component_id(generator))  # fmt: skip
        return 0
    return compile_regions(blocks, **options)
