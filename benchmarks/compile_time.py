"""First compile of the search step: the whole step as one graph (``compile_scope=full``) against the decoder's
repeated blocks (``compile_scope=regional``), issue 34 "What must land" 3.

Usage::

    python -m benchmarks.compile_time --device cpu                     # tiny configs on a CPU (inductor's C++ code)
    python -m benchmarks.compile_time --device cuda --paper            # the paper's roles at 256 px, batch 64

Each (generator, scope) runs in a fresh process with empty inductor and Triton caches, so nothing compiled before
helps: ``first s`` is the first search (budget 1: the start check and one step, compiled on the way), ``warm s`` the
same search again in that process (compiled code cached), ``compile s`` their difference, ``frames`` the graphs
dynamo compiled. The ratio printed per generator is full / regional compile seconds.

Roles. ``--paper`` (GPU): throughput.py's, the taming VQGAN f16-16384, TAEF2 (and the diffusers VAEs) with the
ResNet-50 under test and the CLIP ViT-B/32 judge, bf16 weights (``precision=bf16``, the fast setting). Otherwise
tiny configurations of the three decoders (taming: ``ch=32, ch_mult=[1,1,2]``, two ResNet blocks a level and
attention at 8 px; TAEF2 as released; an AutoencoderKL with three levels of 32-64 channels), 32 px images, batch 2,
fp32 and NHWC (``memory_format=channels_last``, what a compiled CUDA run gets by default), with two small CNNs as
classifier and judge: the decoder is what is compiled. Under ``regional`` the classifier
and the judge run eagerly, as they do in a real run with ``compile_scope=regional``.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/compile_time.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from benchmarks.harness import results

ROOT = Path(__file__).resolve().parents[1]

TINY = ("vqgan-tiny", "taef2", "kl-tiny")
SCOPES = ("full", "regional")


def tiny_generator(kind: str) -> nn.Module:
    """The tiny configurations of the three decoders (random weights)."""
    torch.manual_seed(0)
    if kind == "vqgan-tiny":
        from generators.vqgan import VQGANGenerator

        cfg = dict(ch=32, out_ch=3, ch_mult=[1, 1, 2], num_res_blocks=2, attn_resolutions=[8], in_channels=3,
                   resolution=32, z_channels=4, dropout=0.0, double_z=False)  # fmt: skip
        return VQGANGenerator(cfg, n_embed=16, embed_dim=4, quantize="straight_through")
    if kind == "taef2":
        from generators.taef2 import TAEF2Generator

        return TAEF2Generator()
    from diffusers import AutoencoderKL

    from generators.diffusers_vae import DiffusersVAEGenerator

    vae = AutoencoderKL(block_out_channels=(32, 32, 64), down_block_types=("DownEncoderBlock2D",) * 3,
                        up_block_types=("UpDecoderBlock2D",) * 3, layers_per_block=2, norm_num_groups=8,
                        latent_channels=4, sample_size=32)  # fmt: skip
    return DiffusersVAEGenerator(vae, name="kl-tiny")


def tiny_judges() -> tuple[nn.Module, object, int]:
    from genEval.classifiers import ImageClassifier
    from oracles.classifier import ClassifierOracle

    def cnn(seed: int) -> ImageClassifier:
        torch.manual_seed(seed)
        net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.SiLU(), nn.AdaptiveAvgPool2d(1),
                            nn.Flatten(), nn.Linear(16, 10))  # fmt: skip
        return ImageClassifier(net, 10, [0.5] * 3, [0.25] * 3, None, name=f"cnn{seed}")

    return cnn(0), ClassifierOracle(cnn(1)), 10


def one(kind: str, scope: str, args: argparse.Namespace) -> dict:
    """One (generator, scope) in this process: seconds of the first and the warm compiled search."""
    from genEval.search.execution import Execution, accelerate
    from genEval.search.perturb import Sample, SearchConfig, perturb

    dev = torch.device(args.device)
    if args.paper:
        from benchmarks.harness.roles import ScriptedOracle, build_generator, build_judges

        ns = argparse.Namespace(size=args.size, oracle_model="ViT-B-32", classes=1000)
        clf, judge, n_cls = build_judges(ns, dev)
        gen = build_generator(kind)[0].to(dev)
        oracle = ScriptedOracle(judge, n_cls)
        execution = Execution(device=args.device, precision="bf16", compile=True, compile_scope=scope)
    else:
        clf, oracle, n_cls = tiny_judges()
        gen = tiny_generator(kind)
        execution = Execution(device=args.device, memory_format="channels_last", compile=True, compile_scope=scope)
    clf, gen, oracle, eff = accelerate(clf.to(dev), gen.to(dev), oracle, execution, dev)
    g = torch.Generator().manual_seed(0)
    sources = [Sample(torch.rand(3, args.size, args.size, generator=g), 1 + i, f"s{i}", seed=i, index=i)
               for i in range(args.batch)]  # fmt: skip
    options = {"scope": scope, "mode": eff.get("compile_mode", "default")}

    def search() -> float:
        t0 = time.perf_counter()
        list(perturb(sources, clf, gen, oracle, SearchConfig(budget=1), batch_size=args.batch, device=dev,
                     compile=options))  # fmt: skip
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        return time.perf_counter() - t0

    first, warm = search(), search()
    frames = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    return {"generator": kind, "scope": scope, "first_s": first, "warm_s": warm, "compile_s": first - warm,
            "frames": frames, "memory_format": eff["memory_format"], "device": args.device}  # fmt: skip


def run_fresh(kind: str, scope: str, args: argparse.Namespace) -> dict:
    """:func:`one` in a new process with empty compile caches (nothing compiled before is reused)."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor", "TRITON_CACHE_DIR": f"{cache}/triton"}
        cmd = [sys.executable, "-m", "benchmarks.compile_time", "--one", kind, scope, "--device", args.device,
               "--size", str(args.size), "--batch", str(args.batch)] + (["--paper"] if args.paper else [])  # fmt: skip
        proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode:
        return {"generator": kind, "scope": scope, "error": proc.stderr.strip().splitlines()[-1][:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--paper", action="store_true", help="the paper's roles (GPU): vqgan-f16 and taef2 at 256 px")
    ap.add_argument("--generators", nargs="+", default=None)
    ap.add_argument("--scopes", nargs="+", default=list(SCOPES), choices=SCOPES)
    ap.add_argument("--size", type=int, default=None, help="image side (default 32; 256 with --paper)")
    ap.add_argument("--batch", type=int, default=None, help="rows (default 2; 64 with --paper)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds for one (generator, scope) process")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--one", nargs=2, metavar=("GENERATOR", "SCOPE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.size = args.size or (256 if args.paper else 32)
    args.batch = args.batch or (64 if args.paper else 2)
    if args.one:
        print(json.dumps(one(*args.one, args)))
        return 0
    generators = args.generators or (["vqgan-f16", "taef2"] if args.paper else list(TINY))
    rows = [run_fresh(k, s, args) for k in generators for s in args.scopes]
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU ({os.cpu_count()} cores)"
    print(f"device: {where}; torch {torch.__version__}; image {args.size} px, batch {args.batch}; fresh caches")
    print(
        "\n| generator | scope | first s | warm s | compile s | frames | memory format |\n|---|---|---|---|---|---|---|"
    )
    for r in rows:
        if "error" in r:
            print(f"| {r['generator']} | {r['scope']} | error: {r['error']} | | | | |")
        else:
            print(f"| {r['generator']} | {r['scope']} | {r['first_s']:.1f} | {r['warm_s']:.2f} | {r['compile_s']:.1f} "
                  f"| {r['frames']} | {r['memory_format']} |")  # fmt: skip
    print()
    for k in generators:
        by = {r["scope"]: r for r in rows if r["generator"] == k and "error" not in r}
        if len(by) == 2:
            print(f"{k}: first compile full / regional = {by['full']['compile_s'] / by['regional']['compile_s']:.2f}")
    if args.json:
        from genEval.fileio import atomic_write_json

        atomic_write_json(args.json, {"device": where, "torch": torch.__version__, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
