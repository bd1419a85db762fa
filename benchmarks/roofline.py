"""Roofline of the search step: for its top kernels, time, FLOPs or bytes, and the share of each kernel's own limit
(issue 34, "What must land" 4: it tells the next person what is left). The counting and the device peaks are
:mod:`harness.roofline`; this script profiles one setting with throughput.py's roles.

Usage::

    python -m benchmarks.roofline --device cuda --generator vqgan-f16 --batch 128 --setting compile   # one GPU
    python -m benchmarks.throughput --device cuda --quick        # adds this table for the best compiled row
    python -m benchmarks.roofline --device cpu --smoke           # the plumbing on a CPU (CPU time, no share)
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/roofline.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
import logging
import sys

import torch

from benchmarks.harness import results
from benchmarks.harness.roles import Roles, build_generator, build_judges
from benchmarks.harness.roofline import markdown, peak_for
from benchmarks.throughput import GENERATORS, SETTINGS, step_roofline

SMOKE = {"generator": "taesd", "setting": "fp32", "batch": 2, "size": 32, "steps": 1, "warmup": 0,
         "oracle_model": "ViT-S-32", "classes": 10}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--smoke", action="store_true", help=f"tiny sizes for a CPU check: {SMOKE}")
    ap.add_argument("--generator", default="vqgan-f16", choices=list(GENERATORS))
    ap.add_argument("--setting", default="compile", choices=list(SETTINGS))
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3, help="profiled loop steps")
    ap.add_argument("--warmup", type=int, default=1, help="steps of the untimed run before (it compiles)")
    ap.add_argument("--oracle-model", default="ViT-B-32")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args(argv)
    if args.smoke:
        given = {a.lstrip("-").split("=")[0].replace("-", "_") for a in (argv or sys.argv[1:]) if a.startswith("--")}
        for k, v in SMOKE.items():
            if k not in given:
                setattr(args, k, v)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device cuda but CUDA is not available here; use --device cpu --smoke")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    dev = torch.device(args.device)
    clf, oracle, n_cls = build_judges(args, dev)
    gen, _ = build_generator(args.generator)
    roles = Roles(clf, gen.to(dev).eval(), oracle, n_cls)
    rows = step_roofline(roles, args.setting, args.batch, args, dev)[: args.top]
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    print(
        f"### Roofline: {args.generator} {args.setting} @ {args.batch}, {args.steps} steps, torch {torch.__version__}"
    )
    print()
    print(markdown(rows, name, peak_for(name) if dev.type == "cuda" else None))
    return 0


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
