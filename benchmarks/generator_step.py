"""Seconds per search step for each latent space (paper Sec. 3.2: one step = grad through D, update, D, O).

Usage::

    python -m benchmarks.generator_step --sizes 64 128 256 --batch 4 --repeats 3 --device cpu
    python -m benchmarks.generator_step --device cuda --precision --json step.json

What is timed: :func:`genEval.search.perturb.perturb` itself, so a "step" is exactly what the search does per
step: the small classifier's forward on the current image, the backward through it and the decoder to the
latent, the sign update, one decode with grad of the new latent (its graph feeds the next step) and the
oracle's no-grad check of that image. Per-step cost is isolated as
``(time(budget=B) - time(budget=0)) / B``: the budget-0 run does the fixed part (encode, the start decode,
the start check, the classifier on the clean image and the reconstruction), which cancels. The oracle
accepts every step (so the batch never shrinks) but still runs the small classifier forward, standing in
for a cheap oracle; a CLIP oracle adds its own forward per step on top of these numbers.

Generators: ``identity`` (pixel baseline), ``taef2`` (the real weights from ../shared/assets when present,
else random), ``taesd`` (random-init AutoencoderTiny with its default = TAESD architecture), ``sd-vae``
(random-init AutoencoderKL with the Stable Diffusion 1.x VAE architecture: block_out_channels
(128, 256, 512, 512), layers_per_block 2, 4 latent channels) and ``vqgan-f16`` (random-init taming VQGAN
with the ImageNet f16-16384 ddconfig, when generators.vqgan builds). Random weights cost the same time as
trained ones.

``--precision`` (CUDA only): cosine similarity between the fp32 latent gradient ``grad_z CE(f(D(z)), y)``
and the same gradient with the generator run in bf16 / fp16, reported per generator and size.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/generator_step.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
import json
import logging
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.harness import results
from benchmarks.harness.roles import GENERATOR_KINDS, AcceptAllOracle, SmallCNN, build_generator
from benchmarks.harness.timing import timed
from genEval.search.perturb import Sample, SearchConfig, perturb

ROOT = Path(__file__).resolve().parents[1]

log = logging.getLogger("generator_step")
GENERATORS = GENERATOR_KINDS
SMALL = ("identity", "taef2", "taesd")  # cheap enough that the CPU time limit never skips them


def step_seconds(
    gen: nn.Module,
    clf: nn.Module,
    size: int,
    batch: int,
    budget: int,
    repeats: int,
    dev: torch.device,
    max_seconds: float,
) -> tuple[float | None, str]:
    """``(min t(budget) - min t(0)) / budget`` over ``repeats`` runs each, or ``(None, reason)`` if skipped.

    Minima, not means: on a shared machine the fastest run is the one least disturbed by other work.
    """
    g = torch.Generator().manual_seed(0)
    x = torch.rand(batch, 3, size, size, generator=g)
    y = torch.randint(0, clf.num_classes, (batch,), generator=g)
    sources = [Sample(x[i], int(y[i]), f"src{i}", seed=i, index=i) for i in range(batch)]
    oracle = AcceptAllOracle(clf)

    def run(b: int) -> None:  # one batch of ``batch`` sources (perturb yields their outcomes)
        cfg = SearchConfig(budget=b, step_size=1e-3, update="sign")
        list(perturb(sources, clf, gen, oracle, cfg, batch_size=batch, device=dev))

    t0 = timed(lambda: run(0), dev)  # also the warm-up (allocations, kernel choice)
    t1 = timed(lambda: run(1), dev) - t0
    estimate = (t0 * 2 + max(t1, 0.0) * budget) * repeats
    if estimate > max_seconds:
        return None, f"skipped: ~{estimate:.0f} s estimated > --max-seconds {max_seconds:.0f}"
    base, full = [], []
    for _ in range(repeats):
        base.append(timed(lambda: run(0), dev))
        full.append(timed(lambda: run(budget), dev))
    return max(min(full) - min(base), 0.0) / budget, ""


def gradient_cosine(
    gen: nn.Module, clf: nn.Module, size: int, batch: int, dtype: torch.dtype, dev: torch.device
) -> float:
    """Cosine between the fp32 latent gradient and the one with ``gen`` run in ``dtype`` (same z, y)."""
    g = torch.Generator().manual_seed(1)
    x = torch.rand(batch, 3, size, size, generator=g).to(dev)
    y = torch.randint(0, clf.num_classes, (batch,), generator=g).to(dev)

    def latent_grad(z0: torch.Tensor) -> torch.Tensor:
        z = z0.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(F.cross_entropy(clf(gen.decode(z).float()), y, reduction="sum"), z)
        return grad.float().flatten()

    gen.to(torch.float32)
    with torch.no_grad():
        z0 = gen.encode(x).float()
    ref = latent_grad(z0)
    try:
        gen.to(dtype)
        low = latent_grad(z0)
    finally:
        gen.to(torch.float32)
    return float(F.cosine_similarity(ref, low, dim=0))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--generators", nargs="+", default=list(GENERATORS), choices=GENERATORS)
    ap.add_argument("--sizes", nargs="+", type=int, default=[64, 128, 256], help="image sides in px")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--budget", type=int, default=4, help="steps B of the timed run (minus a budget-0 run)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each budget; minima are used")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=120.0,
        help="skip a (generator, size) whose timed runs are estimated to take longer",
    )
    ap.add_argument(
        "--precision", action="store_true", help="CUDA only: cosine of the bf16/fp16 latent gradient with the fp32 one"
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the rows to this JSON file")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("generators", "genEval", "diffusers"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    if args.budget < 1 or args.batch < 1 or args.repeats < 1:
        ap.error("--budget, --batch and --repeats must be >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    precision = args.precision
    if precision and dev.type != "cuda":
        log.info("--precision: skipped, bf16/fp16 gradients are only checked on CUDA (device=%s)", dev)
        precision = False
    torch.manual_seed(0)
    clf = SmallCNN().to(dev).eval().requires_grad_(False)

    rows: list[dict] = []
    for kind in args.generators:
        try:
            gen, weights = build_generator(kind)
        except Exception as err:  # e.g. taming not installed: report and go on with the others
            log.info("%s: not built (%s: %s)", kind, type(err).__name__, str(err).splitlines()[0][:200])
            rows.append(
                {
                    "generator": kind,
                    "size": None,
                    "weights": "-",
                    "s_per_step": None,
                    "s_per_step_image": None,
                    "note": f"not built: {type(err).__name__}",
                }
            )
            continue
        gen = gen.to(dev).eval()
        n_params = sum(p.numel() for p in gen.parameters())
        for size in args.sizes:
            ds = int(getattr(gen, "downsample", 1))
            row = {
                "generator": kind,
                "size": size,
                "batch": args.batch,
                "budget": args.budget,
                "weights": weights,
                "params_m": round(n_params / 1e6, 2),
                "device": str(dev),
                "s_per_step": None,
                "s_per_step_image": None,
                "note": "",
            }
            if size % ds:
                row["note"] = f"skipped: size not a multiple of {ds}"
            else:
                limit = float("inf") if kind in SMALL else args.max_seconds
                sec, note = step_seconds(gen, clf, size, args.batch, args.budget, args.repeats, dev, limit)
                row["note"] = note
                if sec is not None:
                    row["s_per_step"], row["s_per_step_image"] = sec, sec / args.batch
                if precision and sec is not None and n_params > 0:
                    for name, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
                        row[f"cos_{name}"] = gradient_cosine(gen, clf, size, args.batch, dt, dev)
            log.info("%s %d px: %s", kind, size, row["note"] or f"{row['s_per_step']:.4f} s/step")
            rows.append(row)
        del gen
        if dev.type == "cuda":
            torch.cuda.empty_cache()

    cols = ["generator", "weights", "size", "s/step", "s/step/image"]
    cols += (["cos bf16", "cos fp16"] if precision else []) + ["note"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        fmt = lambda v: "-" if v is None else f"{v:.4g}"  # noqa: E731
        cells = [
            r["generator"],
            r["weights"],
            "-" if r["size"] is None else str(r["size"]),
            fmt(r["s_per_step"]),
            fmt(r["s_per_step_image"]),
        ]
        if precision:
            cells += [fmt(r.get("cos_bf16")), fmt(r.get("cos_fp16"))]
        cells.append(r["note"])
        print("| " + " | ".join(cells) + " |")
    print(
        f"\n(device {dev}, batch {args.batch}, budget {args.budget}, min of {args.repeats} runs; "
        f"torch threads {torch.get_num_threads()}; "
        "per step = (t(B) - t(0)) / B of genEval.search.perturb.perturb)"
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "device": str(dev),
                    "batch": args.batch,
                    "budget": args.budget,
                    "repeats": args.repeats,
                    "torch": torch.__version__,
                    "threads": torch.get_num_threads(),
                    "rows": rows,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
