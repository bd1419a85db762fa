"""How a role's modules run on the device: NHWC end to end, and regional compilation (docs/configuration.md).

**NHWC end to end** (``memory_format=channels_last``). Converting only the weights to channels_last leaves the
activations NCHW wherever an op returns NCHW: cuDNN then transposes around every convolution (docs/benchmarks.md
measured the transposes at 13.6% of the compiled step on an H200, and the weights-only conversion made the compiled
decoder slower, 183 vs 141 ms). Three ops of the paper's decoders return NCHW from NHWC input:

* GroupNorm: ``aten.native_group_norm`` is NCHW in its meta function (what a compiled graph is traced with) and on
  CUDA. :class:`ChannelsLastGroupNorm` computes the same normalisation with a ``var_mean`` over a *view* of the
  NHWC memory (``(N, G, C/G, H, W)``), in fp32 as the native kernel accumulates, so its output keeps the input's
  layout and inductor fuses the statistics, the normalisation, the affine and the activation that follows
  (SiLU) into NHWC kernels of its own: the fused GroupNorm + SiLU that stable-fast writes by hand in Triton.
* Nearest up-sampling: a compiled graph decomposes ``upsample_nearest2d`` into an NCHW gather, and its gradient
  into an NCHW scatter (``_unsafe_index_put`` into zeros) that the convolution's gradient before it must then
  transpose. :func:`nhwc_upsample_nearest` repeats each pixel of the NHWC memory instead (an expanded view and one
  copy; its gradient is a sum over the repeats), NHWC both ways. :class:`ChannelsLastUpsample` is ``nn.Upsample``
  with it.
* taming's attention block and up-sampler, diffusers' up-sampler: their own NHWC versions live in the backend
  files that fence those libraries (``generators/vqgan.py``, ``generators/diffusers_vae.py``), declared by the
  generator's ``nhwc_classes`` hook and swapped in by :func:`to_memory_format`.

The NHWC paths are taken only inside a compiled graph (:func:`in_nhwc_graph`); eager runs keep the native kernels
(one launch each; on a CPU they are NHWC already). What is checked, on a CPU: every convolution of a generator's
decoder reads and writes NHWC in the forward and the backward graph (``tests/search/test_nhwc_compile.py``).

Latents in: a generator's ``decode`` puts its input in the layout of its first weight (:func:`like_weight`), so the
whole graph, images out and the gradient to the latent included, stays NHWC.

**Regional compilation** (``compile_scope=regional``): instead of the whole step, every repeated block of the
decoder (:func:`repeated_blocks`: taming's ``ResnetBlock``/``AttnBlock``/``Upsample``, diffusers' ``ResnetBlock2D``,
TAEF2's ``Block``) is compiled with ``module.compile()``; dynamo keys its cache on the block's code, so identical
blocks (same class, shapes and grad mode) share one compiled graph and the decoder compiles once per block type
and shape instead of once for the whole graph (PyTorch's recipe "Reducing torch.compile cold start compilation
time with regional compilation"). On a CPU, with tiny decoders, that was not faster than the whole graph
(``benchmarks/RESULTS.md``); on a GPU it is not measured yet.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from genEval.validation import COMPILE_SCOPES, MEMORY_FORMATS  # noqa: F401  (the vocabulary, torch-free, re-exported)

log = logging.getLogger(__name__)

_TORCH_FORMATS = {"channels_last": torch.channels_last, "contiguous": torch.contiguous_format}


def is_channels_last(t: Tensor) -> bool:
    """``t`` (N, C, ...) keeps its channels innermost (stride 1) and is not also plain contiguous: NHWC memory
    (a tensor with one channel or one pixel is both, and counts as neither)."""
    return t.dim() >= 3 and t.stride(1) == 1 and t.shape[1] > 1 and not t.is_contiguous()


def in_nhwc_graph(x: Tensor) -> bool:
    """``x`` is NHWC and being traced into a compiled graph: where the NHWC versions of the ops run."""
    return torch.compiler.is_compiling() and is_channels_last(x)


def like_weight(x: Tensor, weight: Tensor) -> Tensor:
    """``x`` (N, C, H, W) in channels_last when the conv ``weight`` is (the decoder was converted), else as is."""
    if x.dim() == 4 and weight.dim() == 4 and weight.is_contiguous(memory_format=torch.channels_last):
        return x.contiguous(memory_format=torch.channels_last)
    return x


def nhwc_group_norm(x: Tensor, groups: int, weight: Tensor | None, bias: Tensor | None, eps: float) -> Tensor:
    """GroupNorm of ``x`` (N, C, *spatial) with the channels innermost in memory, returned in the same layout and
    dtype. Statistics and normalisation in fp32 (at least), as ``aten.native_group_norm`` accumulates; the
    grouping is a view of the memory, so no op converts the layout."""
    acc = torch.promote_types(x.dtype, torch.float32)
    xg = x.to(acc).unflatten(1, (groups, x.shape[1] // groups))  # (N, G, C/G, *spatial): a view
    dims = tuple(range(2, xg.dim()))
    var, mean = torch.var_mean(xg, dim=dims, correction=0, keepdim=True)
    y = ((xg - mean) * torch.rsqrt(var + eps)).flatten(1, 2)  # the output follows xg's strides: a view again
    affine = (-1,) + (1,) * (x.dim() - 2)
    if weight is not None:
        y = y * weight.to(acc).view(affine)
    if bias is not None:
        y = y + bias.to(acc).view(affine)
    return y.to(x.dtype)


class ChannelsLastGroupNorm(nn.GroupNorm):
    """``nn.GroupNorm`` (same parameters and state dict) that keeps NHWC input NHWC inside a compiled graph
    (:func:`nhwc_group_norm`); elsewhere, and for NCHW input, the native kernel."""

    def forward(self, x: Tensor) -> Tensor:
        if in_nhwc_graph(x):
            return nhwc_group_norm(x, self.num_groups, self.weight, self.bias, self.eps)
        return super().forward(x)


def nhwc_upsample_nearest(x: Tensor, scale: int = 2) -> Tensor:
    """Nearest up-sampling of ``x`` (N, C, H, W) by the whole factor ``scale``, computed on the NHWC memory (each
    pixel repeated as an expanded view, then one copy): ``(N, C, scale*H, scale*W)`` in NHWC, equal to
    ``F.interpolate(x, scale_factor=scale, mode="nearest")``."""
    n, c, h, w = x.shape
    y = x.permute(0, 2, 3, 1)[:, :, None, :, None, :].expand(n, h, scale, w, scale, c)
    return y.reshape(n, h * scale, w * scale, c).permute(0, 3, 1, 2)


class ChannelsLastUpsample(nn.Upsample):
    """``nn.Upsample`` that keeps NHWC input NHWC inside a compiled graph when it repeats pixels by a whole factor
    (``mode="nearest"``, one ``scale_factor`` for both sides); otherwise ``nn.Upsample`` itself."""

    def forward(self, x: Tensor) -> Tensor:
        scale = self.scale_factor
        whole = self.mode == "nearest" and self.size is None and isinstance(scale, (int, float)) and scale == int(scale)
        if whole and x.dim() == 4 and in_nhwc_graph(x):
            return nhwc_upsample_nearest(x, int(scale))
        return super().forward(x)


def _swap_classes(module: nn.Module, mapping: Mapping[type, type]) -> int:
    """Every submodule whose class is exactly a key of ``mapping`` becomes an instance of its value (a subclass
    with the same parameters: state dict, ids and hooks are kept). Returns how many were swapped."""
    n = 0
    for m in module.modules():
        new = mapping.get(type(m))
        if new is not None:
            m.__class__ = new
            n += 1
    return n


def to_memory_format(module: nn.Module, memory_format: str, nhwc_classes: Mapping[type, type] | None = None) -> int:
    """Put ``module``'s weights in ``memory_format`` (``channels_last`` | ``contiguous``) and swap its modules for
    their NHWC versions (``channels_last``: GroupNorm, Upsample and ``nhwc_classes``, the role's own) or back
    (``contiguous``). Returns the number of modules swapped."""
    if memory_format not in _TORCH_FORMATS:
        raise ValueError(f"memory_format must be channels_last or contiguous here, got {memory_format!r}.")
    module.to(memory_format=_TORCH_FORMATS[memory_format])
    mapping = {nn.GroupNorm: ChannelsLastGroupNorm, nn.Upsample: ChannelsLastUpsample, **(nhwc_classes or {})}
    if memory_format == "contiguous":
        mapping = {new: old for old, new in mapping.items()}
    return _swap_classes(module, mapping)


# ---------------------------------------------------------------------------------------- regional compilation
def repeated_blocks(module: nn.Module) -> list[nn.Module]:
    """The innermost submodules of ``module`` whose class occurs at least twice, has children and is not one of
    torch's own (``nn.Conv2d``, ``nn.Sequential``...): the blocks a decoder repeats (a ResNet block rather than the
    up-sampling stage around it, so that identical blocks share their compiled graph), in module order."""
    counts = Counter(type(m) for m in module.modules())

    def is_block(m: nn.Module) -> bool:
        return counts[type(m)] >= 2 and not type(m).__module__.startswith("torch.") and any(True for _ in m.children())

    return [m for m in module.modules() if is_block(m) and not any(is_block(d) for d in list(m.modules())[1:])]


def compile_regions(blocks: Iterable[nn.Module], **options: Any) -> int:
    """``block.compile(dynamic=False, **options)`` for every block (``options``: ``torch.compile``'s ``mode``,
    ``backend``...). Identical blocks share one compiled graph per input shape and grad mode; the recompile limit
    is raised so that a decoder's shapes (several per block type) all compile instead of falling back to eager.
    Returns the number of blocks."""
    blocks = list(blocks)
    config = torch._dynamo.config  # cache_size_limit: recompile_limit's name in every torch >= 2.2 (an alias since 2.7)
    config.cache_size_limit = max(config.cache_size_limit, 64)
    for b in blocks:
        b.compile(dynamic=False, **options)
    log.debug("compile_scope=regional: %d blocks of %d types", len(blocks), len({type(b) for b in blocks}))
    return len(blocks)


def drop_compiled(module: nn.Module) -> None:
    """Undo :func:`compile_regions` on every submodule of ``module`` (they run eagerly again)."""
    for m in module.modules():
        m._compiled_call_impl = None  # what nn.Module.compile() set
