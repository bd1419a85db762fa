"""Throughput of the search on the paper's architectures: samples/s, ms/step, memory, FLOP-limit share (issue 12).

Usage::

    python -m benchmarks.throughput --device cuda --json results.json     # the full table (GPU)
    python -m benchmarks.throughput --device cuda --quick --json q.json   # issue 26's table, < 5 min on one H100
    python -m benchmarks.throughput --device cpu --smoke                  # tiny sizes, a few minutes on a CPU

Roles (random weights: they cost the same time as trained ones): the tested classifier is torchvision's
ResNet-50 (input 224 px, or the image size when smaller), the oracle open_clip ViT-B-32 (``pretrained=None``,
prepared with the 1000 ImageNet class names ``data=imagenet`` uses, :func:`genEval.data.imagenet.imagenet_class_names`)
through :class:`oracles.clip.CLIPOracle`, and the generators are
the paper's taming VQGAN f16-16384 (``vqgan-f16``), TAESD (diffusers ``AutoencoderTiny`` default config),
the Stable Diffusion VAE (``sd-vae``, ``AutoencoderKL``) and TAEF2 (the shared weights when present).

What a number means (issue 12, "What must land" 4-6):

* A *sample* is one source image searched for the full budget ``B``. Each (generator, setting, batch) runs
  :func:`genEval.search.perturb.perturb` itself, with an oracle that runs the real CLIP judge but accepts every
  step (so the batch stays full): ``T(1)`` (budget 1: preparation, start check and one step) and ``T(1 + k)``
  (``k`` more steps, default ``min(B, 10)``). ``ms/step = (T(1 + k) - T(1)) / k`` is one loop step of the whole
  batch; ``samples/s = batch / (T(1) + (B - 1) * step)``, exactly ``batch / T(B)`` when ``1 + k = B``. Budget 1,
  not 0, as the base: a budget-0 run needs no gradient, which a compiled step would compile anew.
* FLOPs per sample-step are counted with ``torch.utils.flop_counter.FlopCounterMode`` on one real fp32 step
  (decode forward + classifier forward + backward to the latent + oracle forward). The issue's arithmetic for
  the paper's setting: VQGAN decode + gradient 506, ResNet-50 forward + input gradient 16.4, CLIP image tower
  8.8, about 531 GFLOP per sample-step, 26.6 TFLOP per sample at B = 50, so an H100's ~790 TFLOP/s of bf16
  caps it near 30 samples/s. ``% of FLOP limit`` = achieved FLOP/s (GFLOP per sample-step x 1e9 x batch /
  step seconds) / the device's dense bf16 peak (``roofline.PEAKS``, from the data sheets, x 1e12); empty on a CPU.
* Settings (:data:`SETTINGS`, each a :class:`genEval.search.execution.Execution`, the object ``geneval`` passes
  on): ``fp32`` (eager; TF32 on CUDA), ``bf16`` (bf16 weights), ``bf16-cl`` (+ NHWC end to end, eager), ``compile``
  (bf16 weights + the step compiled as one graph; NHWC on CUDA, ``memory_format=auto``), ``compile-nchw`` (the same
  in NCHW: issue 26's compile row), ``compile-regional`` (only the decoder's repeated blocks compiled,
  ``compile_scope=regional``), ``compile-cg`` (+ CUDA graphs: ``compile_mode=reduce-overhead``), ``fp32-compile``
  (the default precision compiled: fp32 weights, TF32 on CUDA), ``fp32-strict-compile`` (the same, ``tf32=false``), and
  ``refill``: the setting before it with an oracle that rejects steps (each sample's rejection step drawn once
  from a seeded geometric law), comparing the refilled stream (one :func:`perturb` over all sources) with fixed
  chunks of ``batch`` sources (one :func:`perturb` per chunk, each running until all its samples stop).
* The naive reference is the textbook loop: one image at a time, fp32, Adam on ``z`` and two decodes per step
  (one for the gradient, one for the oracle). The speed-up printed is best samples/s over its samples/s, both
  measured in this run with the same roles.
* The per-phase breakdown of the best setting times decode forward, classifier forward, backward (through
  classifier and decoder to the latent) and oracle alone; "host syncs / bookkeeping" is the loop step minus
  their sum.
* ``--roofline`` (on in ``--quick``): the top 10 kernels of the best compiled row with FLOPs or bytes and the share
  of each kernel's own limit (``benchmarks/roofline.py``).
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/throughput.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
import gc
import logging
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.harness import results
from benchmarks.harness.roles import NUM_CLASSES, Roles, ScriptedOracle, build_generator, build_judges
from benchmarks.harness.roofline import KernelRow, kernel_rows, markdown, peak_for, profile_events, rows_as_dicts
from benchmarks.harness.timing import sync, timed, timed_call
from genEval.fileio import atomic_write_json
from genEval.interfaces import hook
from genEval.kernels import drop_compiled, to_memory_format
from genEval.search.execution import Execution, accelerate
from genEval.search.perturb import Outcome, Sample, SearchConfig, perturb

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

log = logging.getLogger("throughput")

GENERATORS = ("vqgan-f16", "taesd", "sd-vae", "taef2")
SETTINGS: dict[str, Execution] = {
    "fp32": Execution(),
    "bf16": Execution(precision="bf16"),
    "bf16-cl": Execution(precision="bf16", memory_format="channels_last"),
    "compile": Execution(precision="bf16", compile=True),
    "compile-nchw": Execution(precision="bf16", compile=True, memory_format="contiguous"),
    "compile-regional": Execution(precision="bf16", compile=True, compile_scope="regional"),
    "compile-cg": Execution(precision="bf16", compile=True, compile_mode="reduce-overhead"),
    "fp32-compile": Execution(compile=True),
    "fp32-strict-compile": Execution(compile=True, tf32=False),
}
REFILL = "refill"  # + the refilled stream, on the kernels of the setting listed before it


def apply_setting(roles: Roles, execution: Execution, dev: torch.device) -> tuple[Any, Any, Any, dict]:
    """Prepare the roles for one setting. ``accelerate`` converts weights (precision, memory format) in place, so
    every setting starts from fp32 contiguous weights and torch's own modules (the NHWC ones swapped back, compiled
    blocks uncompiled); compiled settings start from a clean dynamo cache, since a new batch size is a new graph and
    the recompile limit would otherwise turn later batches eager."""
    for m in (roles.classifier, roles.generator, roles.oracle):
        to_memory_format(m.float(), "contiguous", hook(m, "nhwc_classes"))
        drop_compiled(m)
    if execution.compile:
        torch._dynamo.reset()
    return accelerate(roles.classifier, roles.generator, roles.oracle, execution, dev)


def make_sources(n: int, size: int, seed: int = 0) -> list[Sample]:
    """``n`` random images (3, size, size) with distinct labels 1.. (the sample ids of :class:`ScriptedOracle`;
    label 0 is what a free row of a fixed-size batch holds)."""
    g = torch.Generator().manual_seed(seed)
    return [
        Sample(
            torch.rand(3, size, size, generator=g),
            1 + i % (NUM_CLASSES - 1),
            f"src{i:05d}",
            seed=seed * 100003 + i,
            index=i,
        )
        for i in range(n)
    ]


def run_search(
    sources: list[Sample],
    wrapped: tuple,
    oracle: Any,
    budget: int,
    batch: int,
    dev: torch.device,
    effective: dict | None = None,
) -> list[Outcome]:
    """All outcomes of one :func:`perturb` run (paper Algorithm 1) over ``sources``, the step compiled when the
    setting's ``effective`` settings say so (as :func:`genEval.search.driver.evaluate` does)."""
    clf, gen = wrapped[0], wrapped[1]
    on = effective and effective.get("compile")
    compiled = {"mode": effective["compile_mode"], "scope": effective["compile_scope"]} if on else False
    return list(
        perturb(sources, clf, gen, oracle, SearchConfig(budget=budget), batch_size=batch, device=dev, compile=compiled)
    )


def measure_setting(
    roles: Roles,
    name: str,
    batch: int,
    args: argparse.Namespace,
    dev: torch.device,
    flops: float | None,
    peak: float | None,
) -> dict:
    """One row of the main table: samples/s, ms/step, peak memory and FLOP-limit share (accept-all oracle).

    ``T(1)`` and ``T(1 + k)`` (``k = args.steps``) are timed whole, the minimum of ``args.repeats`` each, after an
    untimed warm-up run (which compiles, under ``compile``): ``ms/step = (T(1 + k) - T(1)) / k`` and ``samples/s =
    batch / (T(1) + (B - 1) * step)``, the full budget's time (``batch / T(1 + k)``, measured whole, when
    ``k = B - 1``). ``first_run_s``: the warm-up run's seconds (compilation included).
    """
    *wrapped, effective = apply_setting(roles, SETTINGS[name], dev)
    sources = make_sources(batch, args.size)

    def search(budget: int) -> float:
        return timed(partial(run_search, sources, wrapped, ScriptedOracle(wrapped[2], roles.oracle_classes), budget,
                             batch, dev, effective), dev)  # fmt: skip

    first = search(1 + args.warmup)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    base = min(search(1) for _ in range(args.repeats))
    more = min(search(1 + args.steps) for _ in range(args.repeats))
    step = max(more - base, 0.0) / args.steps
    # k = B - 1 times the whole budget, T(1 + k) = T(B): no extrapolation (the --smoke run does this)
    whole = more if args.steps == args.budget - 1 else base + (args.budget - 1) * step
    row = {
        "setting": name,
        "batch": batch,
        "samples_per_s": batch / whole,
        "ms_per_step": 1e3 * step,
        "timed_s": more,
        "first_run_s": first,
        "peak_mib": None,
        "flop_limit_pct": None,
        "effective": effective,
    }
    if dev.type == "cuda":
        row["peak_mib"] = torch.cuda.max_memory_allocated(dev) / 2**20
    if flops and peak and step > 0:
        row["flop_limit_pct"] = 100 * (flops * 1e9) * batch / step / (peak * 1e12)  # GFLOP and TFLOP/s to FLOP
    return row


def describe(effective: dict) -> str:
    """What actually ran (compile falls back to eager on a CPU; TF32 follows fp32 on CUDA)."""
    parts = [
        f"compiled ({effective['compile_mode']}, {effective['compile_scope']})" if effective["compile"] else "eager"
    ]
    parts.append(effective["memory_format"])
    modes = {effective[r]["mode"] for r in ("classifier", "generator", "oracle")} - {None}
    return "; ".join(parts + [f"bf16 {m}" for m in sorted(modes)] + (["tf32"] if effective.get("tf32") else []))


# ------------------------------------------------------------------------------------------------ refill
def steps_taken(o: Outcome, budget: int) -> int:
    """Search steps a sample ran: up to its rejection, the whole budget, or none when the start failed."""
    return o.rejected_at if o.rejected_at > 0 else (budget if o.start_ok else 0)


def refill_base(settings: list[str]) -> str:
    """The kernel setting "+ refill" builds on: the one listed just before it (fp32 when none is)."""
    before = settings[: settings.index(REFILL)] if REFILL in settings else settings
    return next((s for s in reversed(before) if s in SETTINGS), "fp32")


def run_chunked(
    sources: list[Sample],
    wrapped: tuple,
    oracle: Any,
    budget: int,
    batch: int,
    dev: torch.device,
    effective: dict | None = None,
) -> list[Outcome]:
    """The non-refilling way: one :func:`perturb` per chunk of ``batch`` sources, each until all its samples
    stop (the chunk's batch thins out as they do)."""
    return [
        o
        for i in range(0, len(sources), batch)
        for o in run_search(sources[i : i + batch], wrapped, oracle, budget, batch, dev, effective)
    ]


def measure_refill(roles: Roles, batch: int, args: argparse.Namespace, dev: torch.device) -> dict:
    """Refilled stream vs fixed chunks over the same sources, with the same per-sample rejection steps.

    Under ``compile`` each mode runs once untimed first: chunk tails shrink the batch, and every new shape
    is a new graph. ``same_work`` checks that every sample stopped at the same step in both modes.
    """
    base = refill_base(args.settings)
    *wrapped, effective = apply_setting(roles, SETTINGS[base], dev)
    chunks = max(1, min(args.chunks, NUM_CLASSES // batch))
    sources = make_sources(chunks * batch, args.size, seed=1)
    result: dict[str, Any] = {"setting": base, "batch": batch, "sources": len(sources), "accept_prob": args.accept_prob}
    stops = {}
    for mode, run in (("chunks", run_chunked), ("refill", run_search)):  # the same sources and rejection steps

        def once(run=run) -> list[Outcome]:
            oracle = ScriptedOracle(wrapped[2], roles.oracle_classes, args.accept_prob, seed=2)
            return run(sources, wrapped, oracle, args.budget, batch, dev, effective)

        if effective["compile"]:
            once()
        outs, secs = timed_call(once, dev)
        stops[mode] = {o.source_id: steps_taken(o, args.budget) for o in outs}
        result[f"{mode}_samples_per_s"] = len(outs) / secs
    result["mean_steps"] = statistics.fmean(stops["refill"].values())
    result["ratio"] = result["refill_samples_per_s"] / result["chunks_samples_per_s"]
    result["same_work"] = stops["chunks"] == stops["refill"]
    return result


# ------------------------------------------------------------------------------------------------- naive
def naive_search(x: torch.Tensor, y: torch.Tensor, classifier, generator, oracle, budget: int, lr: float):
    """The textbook loop for one image (B = 1): start check, then Adam ascent on ``z`` with two decodes per
    step (docs/method.md, "One sample", steps 2-4)."""
    with torch.no_grad():
        z = generator.encode(x).requires_grad_(True)
        if not bool(oracle.judge(generator.decode(z), y).accept.all()):  # not validatable
            return z.detach()
    opt = torch.optim.Adam([z], lr=lr)
    for _ in range(budget):
        loss = -F.cross_entropy(classifier(generator.decode(z)), y)  # ascent on the classifier's loss
        opt.zero_grad()
        loss.backward()
        last = z.detach().clone()
        opt.step()
        with torch.no_grad():
            if not bool(oracle.judge(generator.decode(z), y).accept.all()):  # decode again for the oracle
                return last
    return z.detach()


def measure_naive(roles: Roles, args: argparse.Namespace, dev: torch.device) -> float:
    """Samples/s of :func:`naive_search` (fp32 eager, torch's default TF32 flags) with the accept-all oracle."""
    apply_setting(roles, SETTINGS["fp32"], dev)
    if dev.type == "cuda":  # torch's defaults (accelerate may have changed them): TF32 convolutions only
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True
    oracle = ScriptedOracle(roles.oracle, roles.oracle_classes)
    sources = make_sources(args.naive_samples + 1, args.size, seed=3)
    run = lambda s: naive_search(
        s.x[None].to(dev),
        torch.tensor([s.label], device=dev),
        roles.classifier,  # noqa: E731
        roles.generator,
        oracle,
        args.budget,
        1e-3,
    )
    run(sources[0])  # warm-up
    secs = timed(lambda: [run(s) for s in sources[1:]], dev)
    return args.naive_samples / secs


# ------------------------------------------------------------------------------------------------- FLOPs
def count_flops(roles: Roles, size: int, dev: torch.device) -> dict[str, float]:
    """GFLOP per sample-step by phase, counted on one real fp32 step at batch 1 (matmuls, convolutions and
    attention; attention runs through the math path here so that every kernel is one FlopCounterMode knows)."""
    apply_setting(roles, SETTINGS["fp32"], dev)
    s = make_sources(1, size)[0]
    x, y = s.x[None].to(dev), torch.tensor([s.label], device=dev)
    counters = {k: FlopCounterMode(display=False) for k in ("decode", "classifier", "backward", "oracle")}
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # the fused MHA op is invisible to the counter
    try:
        with sdpa_kernel(SDPBackend.MATH):
            with torch.no_grad():
                z = roles.generator.encode(x).detach().requires_grad_(True)
            with counters["decode"]:
                img = roles.generator.decode(z)
            with counters["classifier"]:
                loss = F.cross_entropy(roles.classifier(img), y)
            with counters["backward"]:
                loss.backward()  # (autograd.grad trips FlopCounterMode's module hooks on a leaf)
            with counters["oracle"], torch.no_grad():
                roles.oracle.judge(img.detach(), y % roles.oracle_classes)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    out = {k: c.get_total_flops() / 1e9 for k, c in counters.items()}
    out["total"] = sum(out.values())
    return out


def peak_for_name(device_name: str) -> float | None:
    """Dense bf16 TFLOP/s of a GPU named like ``torch.cuda.get_device_name()``; None when not known."""
    peak = peak_for(device_name)
    return peak.bf16 if peak else None


def peak_tflops(dev: torch.device, override: float | None) -> float | None:
    """Dense bf16 peak of the device (``--peak-tflops`` wins); None on a CPU or an unknown GPU."""
    if override:
        return override
    return peak_for_name(torch.cuda.get_device_name(dev)) if dev.type == "cuda" else None


# -------------------------------------------------------------------------------------------- breakdown
def timed_median(fns: dict[str, Callable[[], Any]], repeats: int, dev: torch.device) -> dict[str, float]:
    """Median seconds of each function after one warm-up call; they take turns so drift hits all alike."""
    for fn in fns.values():
        fn()
    ts: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            ts[k].append(timed(fn, dev))
    return {k: statistics.median(v) for k, v in ts.items()}


def phase_breakdown(roles: Roles, row: dict, args: argparse.Namespace, dev: torch.device) -> dict[str, float]:
    """Milliseconds per loop step by phase for the setting and batch of ``row`` (the best one)."""
    clf, gen, orc, _ = apply_setting(roles, SETTINGS[row["setting"]], dev)
    sources = make_sources(row["batch"], args.size)
    x = torch.stack([s.x for s in sources]).to(dev)
    y = torch.tensor([s.label for s in sources], device=dev)
    with torch.no_grad():
        z0 = gen.encode(x)
        img = gen.decode(z0)
    leaf = lambda: z0.detach().requires_grad_(True)  # noqa: E731

    def full() -> None:
        z = leaf()
        torch.autograd.grad(F.cross_entropy(clf(gen.decode(z)), y, reduction="sum"), z)

    def judge() -> None:
        with torch.no_grad():
            orc.judge(img, y % roles.oracle_classes)

    t = timed_median(
        {
            "decode": lambda: gen.decode(leaf()),
            "decode_clf": lambda: clf(gen.decode(leaf())),
            "full": full,
            "oracle": judge,
        },
        args.phase_repeats,
        dev,
    )
    ms = {
        "decode forward": t["decode"],
        "classifier forward": t["decode_clf"] - t["decode"],
        "backward (classifier + decoder)": t["full"] - t["decode_clf"],
        "oracle forward": t["oracle"],
    }
    ms = {k: 1e3 * v for k, v in ms.items()}  # a part below 0 (or a remainder below 0) is timing noise
    ms["host syncs / bookkeeping"] = row["ms_per_step"] - sum(ms.values())
    ms["loop step (perturb)"] = row["ms_per_step"]
    return ms


def profile_steps(roles: Roles, row: dict, args: argparse.Namespace, dev: torch.device, top: int = 15) -> list[dict]:
    """The kernels that take the device's time in ``args.steps`` loop steps of ``row``'s setting and batch
    (``torch.profiler``, after a warm-up run that compiles): name, milliseconds, calls, share of the device time."""
    from torch.profiler import ProfilerActivity, profile

    *wrapped, effective = apply_setting(roles, SETTINGS[row["setting"]], dev)
    sources = make_sources(row["batch"], args.size)
    oracle = lambda: ScriptedOracle(wrapped[2], roles.oracle_classes)  # noqa: E731
    run_search(sources, wrapped, oracle(), 1 + args.warmup, row["batch"], dev, effective)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=activities) as prof:
        run_search(sources, wrapped, oracle(), 1 + args.steps, row["batch"], dev, effective)
        sync(dev)
    attr = "self_device_time_total" if dev.type == "cuda" else "self_cpu_time_total"
    events = [e for e in prof.key_averages() if getattr(e, attr, 0) > 0]
    if dev.type == "cuda":  # the kernels themselves, not also the aten ops that launched them (counted twice)
        events = [e for e in events if str(getattr(e, "device_type", "")).endswith("CUDA")] or events
    total = sum(getattr(e, attr) for e in events) or 1.0
    events.sort(key=lambda e: getattr(e, attr), reverse=True)
    return [
        {"kernel": e.key[:100], "ms": getattr(e, attr) / 1e3, "calls": e.count, "pct": 100 * getattr(e, attr) / total}
        for e in events[:top]
    ]


# ---------------------------------------------------------------------------------------------- driving
def is_oom(err: BaseException) -> bool:
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower()


def free_memory(dev: torch.device) -> None:
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def measure_generator(
    kind: str, clf: Any, oracle: Any, n_cls: int, args: argparse.Namespace, dev: torch.device, peak: float | None
) -> dict:
    """Every table's numbers for one generator; a batch that runs out of memory is reported as OOM and the
    larger batches of that setting are skipped."""
    gen, weights = build_generator(kind)
    roles = Roles(clf, gen.to(dev).eval(), oracle, n_cls)
    res: dict[str, Any] = {"generator": kind, "weights": weights, "rows": [], "refill": []}
    res["flops"] = count_flops(roles, args.size, dev)
    log.info("%s: %.2f GFLOP per sample-step", kind, res["flops"]["total"])
    res["naive_samples_per_s"] = measure_naive(roles, args, dev) if args.naive_samples > 0 else None
    for name in args.settings:
        for batch in args.batches:
            try:
                if name == REFILL:
                    res["refill"].append(measure_refill(roles, batch, args, dev))
                else:
                    res["rows"].append(measure_setting(roles, name, batch, args, dev, res["flops"]["total"], peak))
            except Exception as err:  # noqa: BLE001 - one setting's failure is reported; the others still run
                free_memory(dev)
                key = "refill" if name == REFILL else "rows"
                if is_oom(err):
                    res[key].append({"setting": name, "batch": batch, "oom": True})
                    log.info("%s %s batch %d: OOM; larger batches skipped", kind, name, batch)
                else:
                    res[key].append({"setting": name, "batch": batch, "error": f"{type(err).__name__}: {err}"[:500]})
                    log.exception("%s %s batch %d failed; larger batches skipped", kind, name, batch)
                break
            log.info("%s %s batch %d done", kind, name, batch)
    timed_rows = [r for r in res["rows"] if not (r.get("oom") or r.get("error"))]
    if timed_rows:
        res["best"] = max(timed_rows, key=lambda r: r["samples_per_s"])
        res["breakdown"] = phase_breakdown(roles, res["best"], args, dev)
        if args.profile:
            res["profile"] = profile_steps(roles, res["best"], args, dev)
        if args.roofline:  # the best compiled row (the step this issue speeds up), else the best row
            row = max((r for r in timed_rows if r["effective"]["compile"]), key=lambda r: r["samples_per_s"],
                      default=res["best"])  # fmt: skip
            kernels = step_roofline(roles, row["setting"], row["batch"], args, dev)
            res["roofline"] = {"setting": row["setting"], "batch": row["batch"], "rows": rows_as_dicts(kernels)}
    del roles, gen
    free_memory(dev)
    return res


def fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 10**digits else f"{v:.0f}"
    return str(v)


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows])


def report(results: list[dict], args: argparse.Namespace, device_name: str) -> str:
    """All tables as markdown."""
    main_rows, refill_rows, flop_rows, naive_rows, phase_rows = [], [], [], [], []
    for res in results:
        g = res["generator"]
        f = res["flops"]
        flop_rows.append(
            [
                g,
                res["weights"],
                f["decode"],
                f["classifier"],
                f["backward"],
                f["oracle"],
                f["total"],
                f["total"] * args.budget / 1e3,
            ]
        )
        for r in res["rows"]:
            if r.get("oom") or r.get("error"):
                main_rows.append([g, r["setting"], r["batch"], "OOM" if r.get("oom") else "error", "", "", "", "",
                                  r.get("error", "")[:120]])  # fmt: skip
            else:
                main_rows.append(
                    [
                        g,
                        r["setting"],
                        r["batch"],
                        r["samples_per_s"],
                        r["ms_per_step"],
                        r["peak_mib"],
                        r["flop_limit_pct"],
                        r["first_run_s"],
                        describe(r["effective"]),
                    ]
                )
        for r in res["refill"]:
            refill_rows.append(
                [g, r["setting"], r["batch"], "OOM" if r.get("oom") else r["error"][:120]]
                if r.get("oom") or r.get("error")
                else [
                    g,
                    f"{r['setting']} + refill",
                    r["batch"],
                    r["sources"],
                    r["mean_steps"],
                    r["chunks_samples_per_s"],
                    r["refill_samples_per_s"],
                    r["ratio"],
                    r["same_work"],
                ]
            )
        best, naive = res.get("best"), res["naive_samples_per_s"]
        if best:
            naive_rows.append(
                [
                    g,
                    naive,
                    f"{best['setting']} @ {best['batch']}",
                    best["samples_per_s"],
                    best["samples_per_s"] / naive if naive else None,
                ]
            )
            share = {k: v / best["ms_per_step"] for k, v in res["breakdown"].items()} if best["ms_per_step"] else {}
            phase_rows += [
                [g, f"{best['setting']} @ {best['batch']}", k, v, 100 * share.get(k, 0.0)]
                for k, v in res["breakdown"].items()
            ]
    head = (
        f"device: {device_name}; image {args.size} px; budget B = {args.budget} (k = {args.steps} timed steps, "
        f"{args.repeats} run(s)); oracle {args.oracle_model} with {args.classes} classes; "
        f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads"
    )
    parts = [
        head,
        "",
        "### Throughput (accept-all oracle: the batch stays full)",
        "",
        table(
            [
                "generator",
                "setting",
                "batch",
                "samples/s",
                "ms/step",
                "peak MiB",
                "% of FLOP limit",
                "first run s",
                "ran",
            ],
            main_rows,
        ),
        "",
        "### + refill (oracle rejects: refilled stream vs fixed chunks of `batch`)",
        "",
        table(
            [
                "generator",
                "setting",
                "batch",
                "sources",
                "mean steps/sample",
                "chunks samples/s",
                "refill samples/s",
                "refill / chunks",
                "same work",
            ],
            refill_rows,
        ),
        "",
        "### FLOPs per sample-step (GFLOP, FlopCounterMode, fp32)",
        "",
        table(
            [
                "generator",
                "weights",
                "decode fwd",
                "classifier fwd",
                "backward",
                "oracle fwd",
                "total",
                f"TFLOP per sample (B={args.budget})",
            ],
            flop_rows,
        ),
        "",
        "### Speed-up over the naive reference (1 image, fp32, two decodes per step)",
        "",
        table(["generator", "naive samples/s", "best setting @ batch", "best samples/s", "speed-up"], naive_rows),
        "",
        "### Where a step goes (best setting)",
        "",
        table(["generator", "setting @ batch", "phase", "ms", "% of loop step"], phase_rows),
    ]
    for res in results:
        if res.get("roofline"):
            rf = res["roofline"]
            parts += ["", f"### Roofline, {res['generator']} {rf['setting']} @ {rf['batch']} ({args.steps} steps)", "",
                      markdown([KernelRow(**r) for r in rf["rows"]], device_name, peak_for(device_name))]  # fmt: skip
        if res.get("profile"):
            best = res["best"]
            parts += [
                "",
                f"### Top kernels, {res['generator']} {best['setting']} @ {best['batch']} "
                f"({args.steps} steps, torch.profiler)",
                "",
                table(["kernel", "ms", "calls", "% of device time"], [[k["kernel"], k["ms"], k["calls"], k["pct"]]
                                                                        for k in res["profile"]]),
            ]  # fmt: skip
    return "\n".join(parts)


# bf16 is left out of the smoke run: CPUs without native bf16 (no AVX512-BF16/AMX) emulate it ~10x slower.
SMOKE = {
    "size": 32,
    "batches": [1, 2],
    "budget": 2,
    "steps": 1,  # k = B - 1: the whole budget is timed, samples/s = batch / T(B)
    "warmup": 0,
    "generators": ["taesd"],
    "settings": ["fp32", REFILL],
    "oracle_model": "ViT-S-32",
    "classes": 10,
    "naive_samples": 1,
    "chunks": 2,
    "accept_prob": 0.5,
    "phase_repeats": 3,
}


# Issue 26's table: the paper's generator and TAEF2 at the batches and settings that matter, in under 5 minutes on
# one H100 with the compilations (so that 15 minutes of GPU time cover it and a rerun).
QUICK = {
    "generators": ["vqgan-f16", "taef2"],
    "batches": [64, 128],
    "settings": ["bf16", "compile", "fp32-compile"],  # issue 34: the default precision compiled, and the roofline
    "roofline": True,
    "budget": 50,
    "steps": 5,
    "warmup": 1,
    "naive_samples": 1,
    "phase_repeats": 3,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--smoke", action="store_true", help=f"tiny sizes for a CPU check: {SMOKE}")
    ap.add_argument("--quick", action="store_true", help=f"issue 26's GPU table, < 5 min on one H100: {QUICK}")
    ap.add_argument("--profile", action="store_true", help="also list the top kernels of each generator's best row")
    ap.add_argument(
        "--roofline", action="store_true", help="roofline of the best compiled row (benchmarks/roofline.py)"
    )
    ap.add_argument("--size", type=int, default=256, help="image side in px")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128, 256])
    ap.add_argument("--budget", type=int, default=50, help="search budget B (steps per sample)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps k (default min(B, 10))")
    ap.add_argument("--warmup", type=int, default=2, help="steps of the untimed warm-up run")
    ap.add_argument("--repeats", type=int, default=1, help="timed runs of each kind; the minimum is used")
    ap.add_argument("--phase-repeats", type=int, default=5, help="timed calls per phase; the median is used")
    ap.add_argument(
        "--settings",
        nargs="+",
        default=[*SETTINGS, REFILL],
        choices=[*SETTINGS, REFILL],
        help="refill runs on the kernels of the setting listed before it",
    )
    ap.add_argument("--generators", nargs="+", default=list(GENERATORS), choices=list(GENERATORS))
    ap.add_argument("--oracle-model", default="ViT-B-32", help="open_clip architecture of the oracle")
    ap.add_argument("--classes", type=int, default=1000, help="class names the oracle is prepared with")
    ap.add_argument("--naive-samples", type=int, default=3, help="images the naive reference searches (0: skip)")
    ap.add_argument("--chunks", type=int, default=4, help="refill comparison: sources = chunks x batch")
    ap.add_argument("--accept-prob", type=float, default=0.95, help="refill comparison: P(a step is accepted)")
    ap.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak (default: known devices)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--json", type=Path, default=None, help="also write every number to this JSON file")
    args = ap.parse_args(argv)
    given = {a.lstrip("-").split("=")[0].replace("-", "_") for a in (argv or sys.argv[1:]) if a.startswith("--")}
    for flag, preset in (("smoke", SMOKE), ("quick", QUICK)):
        if getattr(args, flag):
            for k, v in preset.items():
                if k not in given:
                    setattr(args, k, v)
    args.steps = args.steps or min(args.budget, 10)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device cuda but CUDA is not available here; use --device cpu (with --smoke)")
    if min(args.batches) < 1 or args.budget < 1 or not 1 <= args.steps <= args.budget:
        ap.error("--batches and --budget must be >= 1 and 1 <= --steps <= --budget")
    if min(args.repeats, args.phase_repeats) < 1 or args.warmup < 0 or args.naive_samples < 0:
        ap.error("--repeats and --phase-repeats must be >= 1, --warmup and --naive-samples >= 0")
    if not 0 < args.accept_prob <= 1 or not 1 <= args.classes <= NUM_CLASSES:
        ap.error(f"--accept-prob must be in (0, 1] and --classes in [1, {NUM_CLASSES}]")
    return args


def step_roofline(roles: Any, setting: str, batch: int, args: argparse.Namespace, dev: torch.device) -> list[KernelRow]:
    """The roofline of ``args.steps`` loop steps of ``setting`` at ``batch`` with this script's roles (a warm-up
    run first, which compiles)."""
    *wrapped, effective = apply_setting(roles, SETTINGS[setting], dev)
    sources = make_sources(batch, args.size)
    oracle = lambda: ScriptedOracle(wrapped[2], roles.oracle_classes)  # noqa: E731
    run_search(sources, wrapped, oracle(), 1 + args.warmup, batch, dev, effective)
    events = profile_events(lambda: run_search(sources, wrapped, oracle(), 1 + args.steps, batch, dev, effective), dev)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    return kernel_rows(events, dev.type == "cuda", peak_for(name), tf32=effective.get("tf32", False))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("generators", "genEval", "oracles", "diffusers", "root"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    log.setLevel(logging.INFO)
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    torch.manual_seed(0)
    start = time.perf_counter()
    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    peak = peak_tflops(dev, args.peak_tflops)
    clf, oracle, n_cls = build_judges(args, dev)
    log.info("classifier and oracle built (%.0f s)", time.perf_counter() - start)
    results: list[dict] = []

    def save() -> None:  # after every generator: a run cut short keeps what it measured
        if args.json is not None:
            atomic_write_json(
                args.json,
                {
                    "device": device_name,
                    "peak_bf16_tflops": peak,
                    "args": vars(args),
                    "torch": torch.__version__,
                    "seconds": time.perf_counter() - start,
                    "complete": len(results) == len(args.generators),
                    "results": results,
                },
            )

    for kind in args.generators:
        results.append(measure_generator(kind, clf, oracle, n_cls, args, dev, peak))
        save()
        print(report(results[-1:], args, device_name), flush=True)
    print(f"\n(total {time.perf_counter() - start:.0f} s; peak bf16 {peak or '-'} TFLOP/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
