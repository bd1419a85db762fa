"""Roofline of the search step: for its top kernels, time, FLOPs or bytes, and the share of each kernel's own limit
(issue 34, "What must land" 4: it tells the next person what is left).

The counting, shared by ``benchmarks/roofline.py`` (the script: one setting's table) and
``benchmarks/throughput.py`` (``--quick`` adds the table of its best compiled row).

How. ``torch.profiler`` (shapes recorded) over ``--steps`` loop steps of :func:`genEval.search.perturb.perturb`, after
an untimed run that compiles. The profiler links every device kernel to the op that launched it (the innermost
recorded op: an aten op, or an inductor Triton kernel, recorded with its arguments). The *work* of an op:

* FLOPs of convolutions (forward, and the input and weight gradients of ``convolution_backward``), matrix products
  and attention, from the recorded shapes (:func:`op_flops`);
* bytes: every tensor argument read or written once (:func:`op_bytes`), a lower bound of its memory traffic (an
  inductor kernel's arguments are its inputs and outputs; an aten op's output is not among them).

A kernel whose op (or an op around it) has FLOPs is compute-bound: its limit is the dense tensor-core peak for the
op's dtype (bf16/fp16; fp32 under TF32, the default on CUDA; strict fp32 the CUDA-core peak). When that op runs
several kernels (cuDNN: transposes and the convolution), its FLOPs go to the longest and the others move bytes. Any
other kernel is memory-bound: its limit is the memory bandwidth. Share = achieved FLOP/s or bytes/s over the limit.
On a CPU the "kernels" are the ops (self CPU time); FLOPs and bytes are listed, the share is not (no CPU peaks).

Peaks (:data:`PEAKS`) from NVIDIA's data sheets, dense: the sheets print tensor-core rates with 2:4 sparsity,
halved here. H100 SXM: bf16 1,979 -> 989.5, TF32 989 -> 494.5, fp32 67 TFLOP/s, 3.35 TB/s (NVIDIA H100 Tensor Core
GPU data sheet); H100 PCIe: 1,513 -> 756.5, 756 -> 378, 51, 2.0 TB/s; H100 NVL: 1,671 -> 835.5, 835 -> 417.5, 60,
3.9 TB/s; H200 SXM: 1,979 -> 989.5, 989 -> 494.5, 67, 4.8 TB/s (NVIDIA H200 Tensor Core GPU data sheet). Measured
on this workplace's machines (KINDS.md): an 8192^3 bf16 matrix product 788-798 TFLOP/s, a device-to-device copy
3.0 TB/s (H100) and 4.3 TB/s (H200), so 80-90% of a sheet's number is the practical ceiling.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

log = logging.getLogger("roofline")


@dataclass(frozen=True)
class Peak:
    """Dense peaks of one GPU: TFLOP/s for bf16/fp16 and TF32 tensor cores and fp32 CUDA cores, memory TB/s (None:
    not listed here, the variants differ)."""

    bf16: float
    tf32: float
    fp32: float
    tb_s: float | None


#: Known GPUs by a part of ``torch.cuda.get_device_name()``; the first that occurs wins, so specific names come first.
PEAKS: tuple[tuple[str, Peak], ...] = (
    ("H100 PCIe", Peak(756.5, 378.0, 51.0, 2.0)),
    ("H100 NVL", Peak(835.5, 417.5, 60.0, 3.9)),
    ("H100", Peak(989.5, 494.5, 67.0, 3.35)),  # SXM ("NVIDIA H100 80GB HBM3")
    ("GH200", Peak(989.5, 494.5, 67.0, None)),
    ("H200", Peak(989.5, 494.5, 67.0, 4.8)),  # SXM
    ("A100", Peak(312.0, 156.0, 19.5, None)),
    ("L40S", Peak(362.0, 183.0, 91.6, 0.864)),
)

#: Bytes per element of the dtype names the profiler records ("Input type").
ITEMSIZE = {"float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2, "long int": 8, "int": 4, "short int": 2,
            "bool": 1, "unsigned char": 1, "signed char": 1, "c10::Float8_e4m3fn": 1}  # fmt: skip
LOW_PRECISION = ("c10::BFloat16", "c10::Half")
#: Parts of the names of the ops that do matrix work (a convolution, a product, attention), as launched.
MATRIX_OPS = ("conv", "mm", "gemm", "matmul", "linear", "attention")


def peak_for(device_name: str) -> Peak | None:
    """The peaks of a GPU named like ``torch.cuda.get_device_name()``; None when not known (a CPU included)."""
    return next((p for key, p in PEAKS if key in device_name), None)


# ------------------------------------------------------------------------------------------------- work of an op
def _prod(xs: Iterable[int]) -> int:
    return math.prod(int(x) for x in xs)


def _int(value: Any, default: int = 1) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _ints(value: Any, n: int, default: int) -> list[int]:
    """A recorded int list (``"[2, 2]"``, a list or a bare int) as ``n`` ints."""
    if isinstance(value, str):
        value = [v for v in value.strip("[]").split(",") if v.strip()]
    if isinstance(value, (int, float)):
        value = [value]
    vals = [_int(v, default) for v in (value or [])] or [default]
    return (vals * n)[:n] if len(vals) < n else vals[:n]


def conv_flops(x: Sequence[int], w: Sequence[int], stride: Any, padding: Any, dilation: Any, groups: Any) -> int:
    """2 x output elements x (C_in / groups) x kernel size, for an N-d convolution of ``x`` (N, C_in, *spatial) by
    ``w`` (C_out, C_in / groups, *kernel). ``groups`` is implied by the shapes; the argument is kept for the record."""
    k = len(w) - 2
    s, p, d = _ints(stride, k, 1), _ints(padding, k, 0), _ints(dilation, k, 1)
    out = [(int(x[2 + i]) + 2 * p[i] - d[i] * (int(w[2 + i]) - 1) - 1) // s[i] + 1 for i in range(k)]
    return 2 * int(x[0]) * int(w[0]) * _prod(out) * int(w[1]) * _prod(w[2:])


def op_flops(name: str, shapes: Sequence[Sequence[int]], concrete: Sequence[Any] | None = None) -> int:
    """FLOPs of one profiled op from its recorded input shapes (and concrete scalar arguments); 0 for ops that are
    not matrix work. Schemas: ``convolution``/``_convolution``/``conv2d`` (input, weight, bias, stride, padding,
    dilation, ...), ``convolution_backward`` (grad_out, input, weight, ..., output_mask last), ``mm``, ``addmm``,
    ``bmm``, ``baddbmm``, and the fused attention kernels (query, key, value: 4 B H Lq Lk D forward, 2.5x that
    backward)."""
    c = list(concrete or []) + [None] * 16
    op = name.removeprefix("aten::")
    try:
        if op in ("convolution", "_convolution", "conv1d", "conv2d", "conv3d"):
            if len(shapes[1]) < 3:
                return 0
            groups = c[8] if op in ("convolution", "_convolution") else c[6]
            return conv_flops(shapes[0], shapes[1], c[3], c[4], c[5], groups)
        if (
            op == "convolution_backward"
        ):  # grad_out (N, C_out, *out), input, weight; output_mask = [input, weight, bias]
            g, w = shapes[0], shapes[2]
            mask = [m.strip().lower() == "true" for m in str(c[10] or "[True, True]").strip("[]").split(",")]
            per = 2 * int(g[0]) * int(g[1]) * _prod(g[2:]) * int(w[1]) * _prod(w[2:])
            return per * (int(mask[0]) + int(len(mask) > 1 and mask[1]))
        if op in ("mm", "addmm", "bmm", "baddbmm"):
            a, b = (shapes[0], shapes[1]) if op in ("mm", "bmm") else (shapes[1], shapes[2])
            return 2 * _prod(a) * int(b[-1])
        if "scaled_dot_product" in op or op.startswith("_flash_attention") or op.startswith("_efficient_attention"):
            q, k = shapes[0], shapes[1]
            fwd = 4 * _prod(q[:-1]) * int(k[-2]) * int(q[-1])
            return int(2.5 * fwd) if "backward" in op else fwd
    except (IndexError, TypeError, ValueError):
        return 0
    return 0


def op_bytes(shapes: Sequence[Sequence[int]], dtypes: Sequence[str]) -> int:
    """Bytes of every tensor argument (a shape with a known dtype), each read or written once."""
    return sum(_prod(s) * ITEMSIZE[t] for s, t in zip(shapes, dtypes) if isinstance(s, (list, tuple)) and t in ITEMSIZE
               and len(s) > 0)  # fmt: skip


def _float_dtype(dtypes: Sequence[str]) -> str:
    return next((t for t in dtypes if t in ("float", "double", *LOW_PRECISION)), "float")


# ----------------------------------------------------------------------------------------------- the table
@dataclass
class KernelRow:
    """One kernel (on a CPU: one op) of the profiled steps, all its calls together. ``bound``: ``compute`` (it does
    an op's FLOPs) or ``memory``; ``achieved``: TFLOP/s or TB/s; ``limit``: the peak it is measured against (None on
    a CPU or an unknown GPU); ``share``: achieved / limit in percent."""

    kernel: str
    calls: int
    ms: float
    pct: float
    gflop: float
    gb: float
    dtype: str
    bound: str
    achieved: float | None = None
    limit: float | None = None
    share: float | None = None


def _parents(e: Any) -> Iterable[Any]:
    p = e.cpu_parent
    while p is not None:
        yield p
        p = p.cpu_parent


def _work(e: Any) -> tuple[int, int, str]:
    shapes, dtypes = list(e.input_shapes or []), list(getattr(e, "input_dtypes", None) or [])
    return op_flops(e.name, shapes, e.concrete_inputs), op_bytes(shapes, dtypes), _float_dtype(dtypes)


def kernel_rows(
    events: Iterable[Any], on_gpu: bool, peak: Peak | None = None, tf32: bool = True, top: int = 10
) -> list[KernelRow]:
    """The ``top`` kernels by time from profiler events (``prof.events()``: name, input_shapes, input_dtypes,
    concrete_inputs, cpu_parent, self_cpu_time_total and, on a GPU, the kernels each op launched, with name and
    duration in us; the profiler attaches a kernel to the innermost op recorded when it was launched).

    The FLOPs of the outermost op that has FLOPs (``conv2d``, not also the ``convolution`` and ``mkldnn_convolution``
    inside it) go to the longest kernel under it launched by a matrix op (:data:`MATRIX_OPS`: the convolution, not a
    copy beside it); every other kernel moves the bytes of the op that launched it (split by time when that op
    launched several)."""
    events = [e for e in events if str(getattr(e, "device_type", "CPU")).endswith("CPU")]
    launched: list[tuple[str, float, Any]] = []  # (kernel, us, launching op)
    for e in events:
        if on_gpu:
            launched += [(k.name, float(k.duration), e) for k in (e.kernels or [])]
        elif e.self_cpu_time_total > 0:
            launched.append((e.name, float(e.self_cpu_time_total), e))
    work = {id(e): _work(e) for e in events}
    per_op = defaultdict(float)
    for _, us, e in launched:
        per_op[id(e)] += us
    owners: dict[int, list[int]] = defaultdict(list)  # FLOP-owning op -> indices into launched
    for i, (_, _, e) in enumerate(launched):
        with_flops = [o for o in (e, *_parents(e)) if work.get(id(o), (0,))[0] > 0]
        if with_flops:  # the outermost: conv2d, not also the convolution and _convolution inside it
            owners[id(with_flops[-1])].append(i)
    flops_of = [0.0] * len(launched)
    dtype_of = [work[id(e)][2] for _, _, e in launched]
    for oid, idx in owners.items():  # the longest kernel of a matrix op under it (not a copy or cast beside it)
        matrix = [i for i in idx if any(m in launched[i][2].name for m in MATRIX_OPS)] or idx
        longest = max(matrix, key=lambda i: launched[i][1])
        flops_of[longest] += work[oid][0]
        dtype_of[longest] = work[oid][2]
    rows: dict[str, KernelRow] = {}
    for i, (name, us, e) in enumerate(launched):
        share_of_op = us / per_op[id(e)] if per_op[id(e)] else 0.0
        gb = 0.0 if flops_of[i] else work[id(e)][1] * share_of_op / 1e9
        r = rows.setdefault(name, KernelRow(name[:100], 0, 0.0, 0.0, 0.0, 0.0, dtype_of[i], "memory"))
        r.calls, r.ms, r.gflop, r.gb = r.calls + 1, r.ms + us / 1e3, r.gflop + flops_of[i] / 1e9, r.gb + gb
        if flops_of[i]:
            r.bound, r.dtype = "compute", dtype_of[i]
    total = sum(r.ms for r in rows.values()) or 1.0
    out = sorted(rows.values(), key=lambda r: r.ms, reverse=True)[:top]
    for r in out:
        r.pct = 100 * r.ms / total
        seconds = r.ms / 1e3
        if r.bound == "compute":
            r.achieved = r.gflop / 1e3 / seconds if seconds else None  # TFLOP/s
            if peak:
                r.limit = peak.bf16 if r.dtype in LOW_PRECISION else (peak.tf32 if tf32 else peak.fp32)
        else:
            r.achieved = r.gb / 1e3 / seconds if seconds and r.gb else None  # TB/s
            if peak and peak.tb_s:
                r.limit = peak.tb_s
        if r.limit and r.achieved is not None:
            r.share = 100 * r.achieved / r.limit
    return out


def profile_events(run: Callable[[], Any], dev: torch.device) -> list[Any]:
    """``run()`` under ``torch.profiler`` with shapes recorded (CPU ops, and CUDA kernels on a GPU); its events."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof:
        run()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    return list(prof.events())


def markdown(rows: list[KernelRow], device_name: str, peak: Peak | None) -> str:
    """The table, with a line saying what the share is measured against (or why there is none)."""
    if peak is None:
        note = (
            f"{device_name}: no roofline share (peaks are listed for known GPUs only: {', '.join(k for k, _ in PEAKS)})"
        )
    else:
        note = (f"{device_name}: limits bf16 {peak.bf16:g}, TF32 {peak.tf32:g}, fp32 {peak.fp32:g} TFLOP/s, "
                f"memory {peak.tb_s or '-'} TB/s (dense, data sheet)")  # fmt: skip

    def f(v: float | None, d: int = 3) -> str:
        return "" if v is None else f"{v:.{d}g}"

    lines = [note, "", "| # | kernel | calls | ms | % of time | GFLOP | GB | dtype | bound | achieved | % of limit |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for i, r in enumerate(rows, 1):
        unit = " TFLOP/s" if r.bound == "compute" else " TB/s"
        achieved = f(r.achieved) + unit if r.achieved is not None else ""
        lines.append(f"| {i} | `{r.kernel}` | {r.calls} | {f(r.ms)} | {f(r.pct)} | {f(r.gflop) if r.gflop else ''} | "
                     f"{f(r.gb) if r.gb else ''} | {r.dtype} | {r.bound} | {achieved} | {f(r.share)} |")  # fmt: skip
    return "\n".join(lines)


def rows_as_dicts(rows: list[KernelRow]) -> list[dict]:
    return [asdict(r) for r in rows]
