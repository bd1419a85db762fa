"""The roofline study (``python -m benchmarks.roofline``; its counting is :mod:`benchmarks.harness.roofline`, issue 34):
the work it attributes to each kernel, checked against known answers and against torch's own FLOP counter on a real
search step; the GPU attribution on recorded events of known shape; the CPU table without a share. Speed is never
asserted (RESULTS.md holds the numbers)."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from genEval.search.perturb import SearchConfig, perturb
from tests.support.real_roles import AcceptAll, images, real_roles


@pytest.fixture(scope="module")
def rf():
    """The roofline counting, :mod:`benchmarks.harness.roofline`."""
    return importlib.import_module("benchmarks.harness.roofline")


def test_the_flops_of_convolutions_products_and_attention(rf):
    # 3x3 conv, stride 2, padding 1: 16x16 -> 8x8; 2 * N * C_out * 64 * C_in * 9
    assert rf.op_flops("aten::convolution", [[4, 8, 16, 16], [32, 8, 3, 3], [32]], [
        "", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]) == 2 * 4 * 32 * 64 * 8 * 9  # fmt: skip
    assert (
        rf.op_flops("aten::conv2d", [[1, 4, 5, 5], [4, 4, 1, 1], []], ["", "", "", "[1, 1]", "[0, 0]"])
        == 2 * 4 * 25 * 4
    )
    grad = [[2, 16, 8, 8], [2, 8, 8, 8], [16, 8, 3, 3]]
    both = ["", "", "", "[16]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[True, True, True]"]
    weight_only = both[:10] + ["[False, True, False]"]
    per = 2 * 2 * 16 * 64 * 8 * 9
    assert rf.op_flops("aten::convolution_backward", grad, both) == 2 * per
    assert rf.op_flops("aten::convolution_backward", grad, weight_only) == per
    assert rf.op_flops("aten::mm", [[3, 5], [5, 7]]) == 2 * 3 * 5 * 7
    assert rf.op_flops("aten::addmm", [[7], [3, 5], [5, 7]]) == 2 * 3 * 5 * 7
    assert rf.op_flops("aten::bmm", [[2, 3, 5], [2, 5, 7]]) == 2 * 2 * 3 * 5 * 7
    q = [2, 4, 16, 32]  # (B, H, L, D)
    assert rf.op_flops("aten::_scaled_dot_product_flash_attention", [q, q, q]) == 4 * 2 * 4 * 16 * 16 * 32
    assert rf.op_flops("aten::add", [[3, 5], [3, 5]]) == 0
    assert rf.op_bytes([[2, 3], [4], []], ["c10::BFloat16", "float", "Scalar"]) == 6 * 2 + 4 * 4


def test_a_real_search_step_gets_the_flops_torch_counts(rf):
    """All the matrix work of a loop step (taming decoder, two CNN classifiers, forward and gradient) found in the
    profile equals what torch's FlopCounterMode counts for the same step."""
    clf, gen, orc = real_roles()

    def run():
        list(perturb(images(2), clf, gen, AcceptAll(orc), SearchConfig(budget=1), batch_size=2))

    counter = FlopCounterMode(display=False)
    with counter:
        run()
    events = rf.profile_events(run, torch.device("cpu"))
    rows = rf.kernel_rows(events, on_gpu=False, top=10_000)
    assert sum(r.gflop for r in rows) * 1e9 == pytest.approx(counter.get_total_flops(), rel=1e-9)
    convs = [r for r in rows if r.bound == "compute" and "conv" in r.kernel]
    assert convs and all(r.share is None and r.limit is None for r in rows)  # a CPU: no peak, no share
    assert any(r.gb > 0 for r in rows if r.bound == "memory")
    top = rf.kernel_rows(events, on_gpu=False)
    assert len(top) == 10 and [r.ms for r in top] == sorted((r.ms for r in top), reverse=True)
    assert "no roofline share" in rf.markdown(top, "cpu", None)


def _event(name, shapes=(), dtypes=(), concrete=None, parent=None, kernels=(), self_us=0.0):
    return SimpleNamespace(name=name, input_shapes=list(shapes), input_dtypes=list(dtypes), concrete_inputs=concrete,
                           cpu_parent=parent, kernels=[SimpleNamespace(name=k, duration=us) for k, us in kernels],
                           self_cpu_time_total=self_us, device_type="DeviceType.CPU")  # fmt: skip


def test_gpu_kernels_are_attributed_to_the_op_that_launched_them(rf):
    """A bf16 convolution run by cuDNN as three kernels (two transposes around the GEMM) inside inductor's call of
    ``aten::convolution``, beside a longer cast, and an inductor Triton kernel recorded with its arguments, on an
    H100 SXM."""
    x, w = [128, 256, 32, 32], [256, 256, 3, 3]
    conv = _event("aten::convolution", [x, w, []], ["c10::BFloat16"] * 2,
                  ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"])  # fmt: skip
    three = [("nchwToNhwcKernel", 40.0), ("sm90_xmma_fprop", 2000.0), ("nhwcToNchwKernel", 40.0)]
    cudnn = _event("aten::cudnn_convolution", [x, w], ["c10::BFloat16"] * 2, parent=conv, kernels=three)
    cast = _event("aten::copy_", [x, x], ["c10::BFloat16", "float"], parent=conv, kernels=[("copy_kernel", 3000.0)])
    triton = _event("triton_poi_fused_silu_0", [x, x], ["c10::BFloat16"] * 2, kernels=[("triton_poi_fused_silu_0", 50)])
    peak = rf.peak_for("NVIDIA H100 80GB HBM3")
    rows = {r.kernel: r for r in rf.kernel_rows([conv, cudnn, cast, triton], on_gpu=True, peak=peak)}
    flops = 2 * 128 * 256 * 32 * 32 * 256 * 9
    gemm = rows["sm90_xmma_fprop"]
    assert (gemm.bound, gemm.dtype, gemm.gflop) == ("compute", "c10::BFloat16", pytest.approx(flops / 1e9))
    assert gemm.limit == 989.5 and gemm.share == pytest.approx(100 * flops / 2000e-6 / 989.5e12)
    t = rows["nchwToNhwcKernel"]
    op_bytes = (128 * 256 * 32 * 32 + 256 * 256 * 9) * 2
    assert (t.bound, t.gflop, t.limit) == ("memory", 0.0, 3.35)
    assert t.gb == pytest.approx(op_bytes * 40 / 2080 / 1e9)  # its share (by time) of the op's bytes
    s = rows["triton_poi_fused_silu_0"]
    assert s.gb == pytest.approx(2 * 128 * 256 * 32 * 32 * 2 / 1e9)  # reads x, writes out
    assert s.share == pytest.approx(100 * s.gb / 50e-6 / 1e3 / 3.35)
    assert rows["copy_kernel"].bound == "memory"  # longer, but not the convolution's
    assert sum(r.pct for r in rows.values()) == pytest.approx(100)
    fp32 = rf.kernel_rows([_event("aten::mm", [[64, 64], [64, 64]], ["float"] * 2, kernels=[("gemm", 1.0)])],
                          on_gpu=True, peak=peak, tf32=False)  # fmt: skip
    assert fp32[0].limit == 67.0  # strict fp32: the CUDA-core peak, not TF32's


def test_the_known_gpus(rf):
    assert rf.peak_for("NVIDIA H200").tb_s == 4.8 and rf.peak_for("NVIDIA H100 80GB HBM3").tb_s == 3.35
    assert rf.peak_for("NVIDIA H100 PCIe").bf16 == 756.5 and rf.peak_for("cpu") is None
