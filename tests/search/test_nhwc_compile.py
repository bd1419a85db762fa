"""NHWC end to end and regional compilation (issue 34), checked on a CPU by reading the compiled graphs.

A GPU's cuDNN transposes NCHW to NHWC around every convolution whose input is NCHW (13.6% of the compiled step on an
H200, issue 26). Which layout each tensor of a compiled step has is decided when the graph is traced, the same on
a CPU: the forward and backward graphs AOTAutograd hands to the compiler carry every tensor's strides. So the
tests compile the real search step with a backend that keeps those graphs and read the strides of every
convolution of the generator (inputs, outputs, gradients). Speed is measured by benchmarks/, never here.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from generators.taef2 import TAEF2Generator
from generators.vqgan import VQGANGenerator, nhwc_classes
from genEval.interfaces import contract_checked_by_caller
from genEval.kernels import nhwc_group_norm, nhwc_upsample_nearest, repeated_blocks, to_memory_format
from genEval.search.execution import Execution, accelerate
from genEval.search.perturb import Sample, SearchConfig, perturb, search_forward
from oracles.classifier import ClassifierOracle
from tests.support.real_roles import cnn
from tests.support.toys import tiny_ddconfig

CL = torch.channels_last


def tiny_vqgan(**changes) -> VQGANGenerator:
    """taming's decoder with every block type: ResnetBlocks (with and without a shortcut), attention at 8 px and
    a nearest up-sampler; 16 px images, 8x8 latents."""
    cfg = {**tiny_ddconfig(4), "attn_resolutions": [8], **changes}
    return VQGANGenerator(cfg, n_embed=16, embed_dim=4, quantize="straight_through")


def tiny_kl():
    """A two-level diffusers AutoencoderKL (GroupNorm, SiLU, mid-block attention, Upsample2D)."""
    from diffusers import AutoencoderKL

    from generators.diffusers_vae import DiffusersVAEGenerator

    torch.manual_seed(0)
    vae = AutoencoderKL(block_out_channels=(32, 32), down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, layers_per_block=1, norm_num_groups=8,
                        latent_channels=4, sample_size=16)  # fmt: skip
    return DiffusersVAEGenerator(vae, name="tiny-kl")


GENERATORS = {"vqgan": tiny_vqgan, "taef2": TAEF2Generator, "diffusers-kl": tiny_kl}


def module_path_items(node: torch.fx.Node) -> list[tuple[str, type]]:
    """(path, class) of the modules a graph node runs in (a backward node: those of the forward op it computes)."""
    return list((node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {}).values())


def module_path(node: torch.fx.Node) -> list[str]:
    return [path for path, _ in module_path_items(node)]


def _nchw(t: object) -> bool:
    """A 4-D tensor whose memory is not NHWC (one channel or one pixel is both layouts: not counted)."""
    return (
        isinstance(t, torch.Tensor)
        and t.dim() == 4
        and t.shape[1] > 1
        and t.shape[2] * t.shape[3] > 1
        and (not t.is_contiguous(memory_format=CL))
    )


def generator_layout(graph: torch.fx.GraphModule) -> tuple[int, list[str]]:
    """The generator's convolutions in ``graph`` (forward ``convolution``, backward ``convolution_backward``): how
    many, and what a GPU would transpose: a convolution that reads or writes a tensor not in NHWC memory, and a copy
    that changes a tensor's layout (except the latent's, a graph input, put in NHWC once)."""
    n, found = 0, []
    for node in graph.graph.nodes:
        scope, target = module_path(node), str(node.target)
        if node.op != "call_function" or not any("['generator']" in s for s in scope):
            continue
        out = node.meta.get("val")
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        ins = [a for a in node.args if isinstance(a, torch.fx.Node)]
        where = f"{target} in {scope[-1]}"
        if "convolution" in target:
            n += 1
            found += [f"{where}: {tuple(t.shape)} strides {t.stride()}" for t in [a.meta["val"] for a in ins] + outs
                      if _nchw(t)]  # fmt: skip
        elif target in ("aten.clone.default", "aten._to_copy.default", "aten.copy.default") and ins:
            src = ins[0].meta.get("val")
            if ins[0].op != "placeholder" and any(_nchw(t) != _nchw(src) for t in outs[:1] if _nchw(t) or _nchw(src)):
                found.append(
                    f"{where}: layout changed, {tuple(src.shape)} strides {src.stride()} -> {outs[0].stride()}"
                )
    return n, found


def compiled_step(gen, execution: Execution, prepare=None):
    """The search step compiled (forward + backward to the latent) with a backend that keeps AOTAutograd's graphs
    and runs them as traced; returns (graphs, compiled outputs and gradient, eager outputs and gradient)."""
    torch._dynamo.reset()
    clf, gen, orc, _ = accelerate(cnn(0), gen, ClassifierOracle(cnn(1)), execution, torch.device("cpu"))
    if prepare:
        prepare(gen)
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    step = torch.compile(search_forward, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep), fullgraph=True)
    z = gen.encode(torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(0)))
    z = z.contiguous().requires_grad_(True)  # NCHW, as the loop may hold it: decode puts it in NHWC itself
    y = torch.tensor([0, 1])
    results = []
    with contract_checked_by_caller():
        for fn in (step, search_forward):
            out = fn(gen, clf, orc, z, y, y)
            results.append((out[0], out[1], torch.autograd.grad(out[2].sum(), z)[0]))
    return graphs, results[0], results[1]


@pytest.mark.parametrize("name", list(GENERATORS))
def test_the_compiled_step_runs_every_decoder_convolution_nhwc_and_equals_eager(name):
    graphs, (x, logits, grad), (x0, logits0, grad0) = compiled_step(
        GENERATORS[name](), Execution(memory_format="channels_last")
    )
    assert len(graphs) == 2  # the forward and the backward (gradient to the latent)
    for g in graphs:
        checked, nchw = generator_layout(g)
        # Known and kept: the gradient of the attention's keys comes out of bmm's backward for its right operand,
        # (b, c, hw) contiguous; one transpose per taming attention block (4 at 16x16 in the paper's decoder).
        assert (
            checked > 5 and [c for c in nchw if not c.startswith("aten.convolution_backward") or ".k:" not in c] == []
        )
        assert not [n for n in g.graph.nodes if "native_group_norm" in str(n.target)]  # NCHW in its meta function
    assert x.is_contiguous(memory_format=CL) and x0.is_contiguous(memory_format=CL)  # images out NHWC
    torch.testing.assert_close(x, x0, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(logits, logits0, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grad, grad0, rtol=1e-3, atol=1e-6)


def test_weights_alone_in_channels_last_leave_nchw_convolutions_in_the_graph():
    """Issue 26's ``channels_last=true`` (the weights only, without the NHWC GroupNorm, up-sampler and attention)
    is what the check above catches: taming's GroupNorm and up-sampling hand NCHW tensors to the convolutions."""

    def weights_only(gen):
        to_memory_format(gen, "contiguous", nhwc_classes())  # the modules back to taming's and torch's own
        gen.to(memory_format=CL)

    graphs, _, _ = compiled_step(tiny_vqgan(), Execution(memory_format="channels_last"), prepare=weights_only)
    (_, forward), (_, backward) = (generator_layout(g) for g in graphs)
    assert any("block_1.conv1" in c for c in forward), forward  # after a GroupNorm
    assert any("upsample: layout changed" in c for c in forward), forward  # the up-sampling's result
    assert any("convolution_backward" in c for c in backward), backward  # and in the gradient


def test_memory_format_auto_is_contiguous_on_a_cpu_and_channels_last_swaps_the_modules():
    gen = tiny_vqgan()
    kinds = lambda m: {type(b).__name__ for b in m.modules()}  # noqa: E731
    *_, eff = accelerate(cnn(0), gen, ClassifierOracle(cnn(1)), Execution(), torch.device("cpu"))
    assert eff["memory_format"] == "contiguous" and "ChannelsLastGroupNorm" not in kinds(gen)
    clf = cnn(0)
    *_, eff = accelerate(clf, gen, ClassifierOracle(cnn(1)), Execution(memory_format="channels_last"),
                         torch.device("cpu"))  # fmt: skip
    assert eff["memory_format"] == "channels_last"
    assert {"ChannelsLastGroupNorm", "NHWCAttnBlock", "NHWCUpsample"} <= kinds(gen)
    assert "ChannelsLastGroupNorm" in kinds(clf)  # every role, not only the generator
    assert gen.decoder.conv_in.weight.is_contiguous(memory_format=CL)
    before = {k: v.clone() for k, v in gen.state_dict().items()}
    to_memory_format(gen, "contiguous", gen.nhwc_classes)
    assert "ChannelsLastGroupNorm" not in kinds(gen) and "NHWCAttnBlock" not in kinds(gen)
    assert all(torch.equal(before[k], v) for k, v in gen.state_dict().items())  # same keys, same values


# ------------------------------------------------------------------------------- the NHWC ops, eager, on a CPU
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nhwc_group_norm_equals_group_norm_and_keeps_the_layout(dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(3, 32, 5, 7, generator=g) * 3 + 1).to(dtype).contiguous(memory_format=CL)
    w, b = torch.randn(32, generator=g).to(dtype), torch.randn(32, generator=g).to(dtype)
    y = nhwc_group_norm(x, 8, w, b, 1e-6)
    assert y.dtype == dtype and y.is_contiguous(memory_format=CL)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(y, F.group_norm(x.contiguous(), 8, w, b, 1e-6), **tol)
    seq = torch.randn(2, 16, 9, generator=g).transpose(1, 2).contiguous().transpose(1, 2)  # (b, c, L), c innermost
    torch.testing.assert_close(nhwc_group_norm(seq, 4, None, None, 1e-5), F.group_norm(seq, 4, eps=1e-5))


def test_nhwc_upsampling_and_attention_equal_the_originals():
    x = torch.randn(2, 8, 3, 5).contiguous(memory_format=CL)
    up = nhwc_upsample_nearest(x, 2)
    assert up.is_contiguous(memory_format=CL) and torch.equal(up, F.interpolate(x, scale_factor=2.0, mode="nearest"))
    from taming.modules.diffusionmodules.model import AttnBlock

    from generators.vqgan import _nhwc_attention

    torch.manual_seed(0)
    block = AttnBlock(32).eval()
    h = torch.randn(2, 32, 4, 6).contiguous(memory_format=CL)
    with torch.no_grad():
        out = _nhwc_attention(block.to(memory_format=CL), h)
        torch.testing.assert_close(out, block(h.contiguous()), rtol=1e-5, atol=1e-5)
    assert out.is_contiguous(memory_format=CL)


# ---------------------------------------------------------------------------------------- regional compilation
def test_regional_compilation_compiles_each_block_type_once_per_shape_and_finds_what_eager_finds():
    """Identical decoder blocks share one compiled graph: every compiled frame is a different block signature (class,
    input shapes, grad mode), there are fewer frames than blocks, a second run compiles nothing, and the search
    decides what the eager search decides."""
    torch._dynamo.reset()
    gen = tiny_vqgan(ch_mult=[1, 1], num_res_blocks=2)  # two levels of the same width: blocks repeat exactly
    blocks = repeated_blocks(gen.decoder)
    assert len(blocks) == 12 and {type(b).__name__ for b in blocks} == {"ResnetBlock", "AttnBlock"}
    frames = []

    def backend(gm, example_inputs):  # one call per compiled frame
        parts = {path.rsplit(".", 1)[-1] for n in gm.graph.nodes for path, _ in module_path_items(n)}
        block = "AttnBlock" if "q" in parts else "ResnetBlock" if "conv1" in parts else "?"
        frames.append((block, tuple(tuple(t.shape) for t in example_inputs), torch.is_grad_enabled()))
        return gm.forward

    g = torch.Generator().manual_seed(1)
    sources = [Sample(torch.rand(3, 16, 16, generator=g), i % 3, f"s{i}", seed=i, index=i) for i in range(4)]
    clf, orc, cfg = cnn(0), ClassifierOracle(cnn(1)), SearchConfig(budget=2, step_size=0.5)
    search = lambda **kw: {o.source_id: o for o in perturb(sources, clf, gen, orc, cfg, batch_size=4, **kw)}  # noqa: E731
    eager = search()
    compiled = search(compile={"backend": backend, "scope": "regional"})
    assert {f[0] for f in frames} == {"ResnetBlock", "AttnBlock"}
    assert len(set(frames)) == len(frames) < len(blocks), frames  # each signature once; shared by the blocks
    n = len(frames)
    search(compile={"backend": backend, "scope": "regional"})
    assert len(frames) == n  # cached: nothing compiles again
    for sid, a in eager.items():
        b = compiled[sid]
        assert (a.start_ok, a.accepted_steps, a.rejected_at, a.final_pred) == (
            b.start_ok,
            b.accepted_steps,
            b.rejected_at,
            b.final_pred,
        )
        torch.testing.assert_close(a.latent, b.latent)


def test_repeated_blocks_are_the_innermost_repeated_classes_of_each_decoder():
    taef2 = TAEF2Generator()
    assert [type(b).__name__ for b in taef2.compile_regions()] == ["Block"] * 10
    kl = tiny_kl()
    names = [type(b).__name__ for b in kl.compile_regions()]
    assert names == ["ResnetBlock2D"] * 6  # mid block 2, up blocks 2 x 2 (its one Upsample2D is not repeated)
    assert repeated_blocks(torch.nn.Sequential(torch.nn.Conv2d(1, 1, 1), torch.nn.Conv2d(1, 1, 1))) == []


def test_compile_mode_reaches_torch_compile_in_both_scopes(monkeypatch):
    """``compile_mode=reduce-overhead`` (CUDA graphs; its speed is not measured yet) is handed to torch.compile for
    the whole step and for every block of the regional scope."""
    from genEval.kernels import drop_compiled
    from genEval.search.perturb import step_function

    seen = []
    monkeypatch.setattr(torch, "compile", lambda fn=None, **kw: seen.append(kw) or fn)
    gen = TAEF2Generator()
    step_function({"mode": "reduce-overhead", "scope": "full"}, gen)
    assert seen == [{"fullgraph": True, "dynamic": False, "mode": "reduce-overhead"}]
    seen.clear()
    step_function({"mode": "reduce-overhead", "scope": "regional"}, gen)
    assert len(seen) == 10 and all(kw["mode"] == "reduce-overhead" and kw["dynamic"] is False for kw in seen)
    drop_compiled(gen)
    assert step_function(False, gen) is search_forward and step_function({"mode": "default"}, gen) is not search_forward
