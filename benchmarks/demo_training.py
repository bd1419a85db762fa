"""What the offline demo's first run trains, and what it costs (a measurement, not a test; issue 42).

    python -m benchmarks.demo_training                               # the shipped digits VQ recipe, 1 thread
    python -m benchmarks.demo_training --ch 32 16 --epochs 8         # two model widths, 8 epochs each
    python -m benchmarks.demo_training --threads 1 2 --epochs 1      # one epoch on one and on two threads
    python -m benchmarks.demo_training --search --limit 40           # the demo's search: threads, OpenMP's wait

Trains the digits VQ generator (``generators.small_vq.train_vq_generator`` on the digits train split, held-out PSNR
on the test split, the settings of ``digits_vq`` unless changed here) in this process, once per combination of
``--ch`` (the taming ``ch``), ``--batch-size`` and ``--threads`` (torch's intra-op threads; ``OMP_WAIT_POLICY`` as in
the environment), and prints per epoch the process CPU seconds (user + sys) and wall seconds since the start, the
training loss and the held-out PSNR of the continuous and the quantised latent. Then the three digits classifiers
are trained the same way (CPU and wall each). The load average is printed before and after: on a shared machine
compare CPU seconds.

``--search`` measures the demo's evaluation instead (its models cached in ``GENEVAL_CACHE``): ``geneval seed=0
data.limit=N progress=false`` in a child process, once per setting of torch's threads and OpenMP's wait policy (one
thread; two threads waiting actively, OpenMP's default; two waiting passively, what ``geneval`` sets), with the
child's CPU seconds, its wall seconds and the search loop's seconds from ``results.json``; the scores must agree.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/demo_training.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
import json
import logging
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.harness import results
from generators.small_vq import (
    DIGITS_BATCH_SIZE,
    DIGITS_DDCONFIG,
    DIGITS_EMBED_DIM,
    DIGITS_EPOCHS,
    DIGITS_LR,
    DIGITS_N_EMBED,
    train_vq_generator,
)
from genEval.data.standard import DigitsData

ROOT = Path(__file__).resolve().parents[1]

EPOCH_LINE = re.compile(r"VQ epoch (\d+)/(\d+): train loss ([\d.]+), held-out PSNR ([\d.]+) dB \(quantized ([\d.]+)")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Epochs(logging.Handler):
    """Collects the trainer's per-epoch log lines with the CPU and wall seconds at which they came."""

    def __init__(self, cpu0: float, t0: float) -> None:
        super().__init__(logging.INFO)
        self.cpu0, self.t0, self.rows = cpu0, t0, []

    def emit(self, record: logging.LogRecord) -> None:
        found = EPOCH_LINE.search(record.getMessage())
        if found:
            epoch, _, loss, psnr, psnr_q = found.groups()
            self.rows.append((int(epoch), _cpu() - self.cpu0, time.perf_counter() - self.t0, loss, psnr, psnr_q))


def train_vq(ch: int, epochs: int, batch_size: int, threads: int) -> None:
    dd = {**DIGITS_DDCONFIG, "ch": ch}
    train = DigitsData(split="train", image_size=16, channels=1)
    held = DigitsData(split="test", image_size=16, channels=1)
    log = logging.getLogger("generators.small_vq")
    log.setLevel(logging.INFO)
    cpu0, t0 = _cpu(), time.perf_counter()
    handler = _Epochs(cpu0, t0)
    log.addHandler(handler)
    try:
        with tempfile.TemporaryDirectory(prefix="demo-vq-") as out:
            report = train_vq_generator(
                train,
                held,
                out_dir=out,
                ddconfig=dd,
                n_embed=DIGITS_N_EMBED,
                embed_dim=DIGITS_EMBED_DIM,
                epochs=epochs,
                batch_size=batch_size,
                lr=DIGITS_LR,
                seed=0,
                progress=False,
                threads=threads,
            )
            params = sum(t.numel() for t in torch.load(report.checkpoint, weights_only=True)["state_dict"].values())
    finally:
        log.removeHandler(handler)
    print(f"\nVQ ch={ch} batch={batch_size} threads={threads} ({params} parameters), {epochs} epochs")
    print("| epoch | CPU s | wall s | train loss | PSNR dB | PSNR quantised dB |")
    print("|---|---|---|---|---|---|")
    for epoch, cpu, wall, loss, psnr, psnr_q in handler.rows:
        print(f"| {epoch} | {cpu:.1f} | {wall:.1f} | {loss} | {psnr} | {psnr_q} |")


def train_classifiers() -> None:
    from genEval.classifiers.digits import _DIGITS_EPOCHS, _DIGITS_RECIPE, trained_digits_model

    print("\n| classifier | epochs | CPU s | wall s |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="demo-clf-") as folder:
        for arch, seed in (("cnn", 0), ("mlp", 1), ("wide_cnn", 1)):
            settings = {"arch": arch, "seed": seed, "epochs": _DIGITS_EPOCHS[arch], "image_size": 16}
            cpu0, t0 = _cpu(), time.perf_counter()
            trained_digits_model({**settings, "recipe": _DIGITS_RECIPE}, f"digits_{arch}", Path(folder), arch)
            cpu, wall = _cpu() - cpu0, time.perf_counter() - t0
            print(f"| digits_{arch}:seed{seed} | {settings['epochs']} | {cpu:.1f} | {wall:.1f} |")


#: (label, environment) of the --search runs.
SEARCH_SETTINGS = (
    ("1 thread", {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}),
    ("2 threads, active wait", {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "ACTIVE"}),
    ("2 threads, passive wait", {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"}),
)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def search(limit: int) -> None:
    print(f"\nthe demo's search: geneval seed=0 data.limit={limit} (cached models: GENEVAL_CACHE)")
    print("| setting | CPU s | wall s | search loop s | FMR_v |")
    print("|---|---|---|---|---|")
    for label, env in SEARCH_SETTINGS:
        with tempfile.TemporaryDirectory(prefix="demo-search-") as out:
            cmd = [sys.executable, "-m", "genEval.cli", "seed=0", f"data.limit={limit}", "progress=false"]
            cpu0, t0 = _children_cpu(), time.perf_counter()
            subprocess.run([*cmd, "report=false", f"hydra.run.dir={out}"], env={**os.environ, **env}, check=True,
                           capture_output=True, cwd=out)  # fmt: skip
            cpu, wall = _children_cpu() - cpu0, time.perf_counter() - t0
            res = json.loads((Path(out) / "results.json").read_text())
            fmr = res["scores"]["fmr_validated"]["value"]
            print(f"| {label} | {cpu:.1f} | {wall:.1f} | {res['timings']['loop_s']:.1f} | {fmr:.2f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ch", type=int, nargs="+", default=[DIGITS_DDCONFIG["ch"]], help="taming ddconfig ch")
    ap.add_argument("--epochs", type=int, default=DIGITS_EPOCHS)
    ap.add_argument("--batch-size", type=int, nargs="+", default=[DIGITS_BATCH_SIZE])
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--no-classifiers", action="store_true", help="leave out the classifiers' training")
    ap.add_argument("--search", action="store_true", help="measure the demo's search instead (see the docstring)")
    ap.add_argument("--limit", type=int, default=40, help="--search: source images")
    args = ap.parse_args()
    print(
        f"torch {torch.__version__}, {os.cpu_count()} CPUs, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, "
        f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    if args.search:
        search(args.limit)
        print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return
    for ch in args.ch:
        for batch_size in args.batch_size:
            for threads in args.threads:
                train_vq(ch, args.epochs, batch_size, threads)
    if not args.no_classifiers:
        torch.set_num_threads(args.threads[0])
        train_classifiers()
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
