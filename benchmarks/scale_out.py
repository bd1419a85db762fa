"""Memory and input pipeline of a run at scale (issue 9): measurements, not tests.

``rss``: peak resident memory of a whole run with ``save_images=true`` at two data-set sizes. Each size runs
in its own fresh process (``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` of that child), so the numbers do
not mix. Images and latents are streamed to disk in parts, so the peak should not grow with the data set.
The run is the real engine on the shared CIFAR-10 JPEGs up-sampled to ``--size`` px (so that an in-memory
copy of the images would show: 5,000 x 2 x 3 x 128 x 128 bytes = 490 MB), the shared ResNet-20, the identity
generator (the pixel baseline) and an oracle that accepts every step, with a small budget.

``loader``: images/s of the same run for several DataLoader ``num_workers``, to choose the default.

    python benchmarks/scale_out.py rss --sizes 500 5000 --size 128 --budget 2
    python benchmarks/scale_out.py loader --workers 0 1 2 --n 1000
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT.parent / "shared" / "assets"


class AcceptAll:
    """Accepts every image; keeps the batch full and the cost on the engine."""

    name = "accept-all"

    def prepare(self, class_names):
        pass

    def judge(self, x, y):
        import torch

        from genEval.interfaces import Judgement

        return Judgement(torch.ones(len(y), dtype=torch.bool), torch.ones(len(y)), y.clone())


def one_run(n: int, size: int, budget: int, workers: int, batch: int, out: str) -> dict:
    """The measured run (executed in a child process)."""
    import torch

    from generators.identity import IdentityGenerator
    from genEval import evaluate
    from genEval.classifiers.loaders import cifar_resnet
    from genEval.data.folders import ImageFolderData
    from genEval.data.standard import CIFAR10_CLASSES
    from genEval.search.perturb import SearchConfig

    torch.set_num_threads(2)
    data = ImageFolderData(ASSETS / "cifar10" / "test-jpg", class_names=CIFAR10_CLASSES, image_size=size, limit=n)
    clf = cifar_resnet(20, checkpoint=ASSETS / "weights" / "cifar10-resnet" / "resnet20-12fca82f.th")
    t0 = time.perf_counter()
    r = evaluate(
        clf,
        data,
        IdentityGenerator(),
        AcceptAll(),
        SearchConfig(budget=budget, step_size=1e-3),
        seed=0,
        batch_size=batch,
        num_workers=workers,
        device="cpu",
        output_dir=out,
        save_images=True,
        save_latents=False,
        progress=False,
    )
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux -> MiB
    return {"n": n, "seconds": seconds, "sa": r.scores.sa.value, "peak_rss_mib": peak}


def run_child(args: list[str]) -> dict:
    """Run this script's ``child`` mode in a fresh process and return what it measured about itself."""
    proc = subprocess.run([sys.executable, __file__, "child", *args], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["rss", "loader", "child"])
    ap.add_argument("--sizes", type=int, nargs="+", default=[500, 5000])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--budget", type=int, default=2)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--workers", type=int, nargs="+", default=[0])
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if a.mode == "child":
        print(json.dumps(one_run(a.n, a.size, a.budget, a.workers[0], a.batch, a.out)))
        return
    if not ASSETS.exists():
        raise SystemExit(f"needs the shared assets at {ASSETS}")
    common = ["--size", str(a.size), "--budget", str(a.budget), "--batch", str(a.batch)]
    if a.mode == "rss":
        print(f"peak RSS of a run with save_images=true ({a.size} px, budget {a.budget}, batch {a.batch})")
        print("| sources | peak RSS (MiB) | seconds |\n|---|---|---|")
        for n in a.sizes:  # each size in a fresh process: ru_maxrss is that process's own peak
            with tempfile.TemporaryDirectory() as tmp:
                r = run_child(["--n", str(n), *common, "--workers", "0", "--out", tmp])
            print(f"| {n} | {r['peak_rss_mib']:.0f} | {r['seconds']:.0f} |", flush=True)
    else:
        print(f"images/s by DataLoader num_workers ({a.n} sources, {a.size} px, budget {a.budget})")
        print("| num_workers | images/s |\n|---|---|")
        for w in a.workers:
            with tempfile.TemporaryDirectory() as tmp:
                r = run_child(["--n", str(a.n), *common, "--workers", str(w), "--out", tmp])
            print(f"| {w} | {a.n / r['seconds']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
