"""Memory and input pipeline of a run at scale (issue 9): measurements, not tests.

``rss``: peak resident memory of a whole run with ``save_images=true`` at two data-set sizes. Each size runs
in its own fresh process (``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` of that child), so the numbers do
not mix. Images and latents are streamed to disk in parts, so the peak should not grow with the data set.
The run is the real engine on the shared CIFAR-10 JPEGs up-sampled to ``--size`` px (so that an in-memory
copy of the images would show: 5,000 x 2 x 3 x 128 x 128 bytes = 490 MB), the shared ResNet-20, the identity
generator (the pixel baseline) and an oracle that accepts every step, with a small budget.

``loader``: images/s of the same run for several DataLoader ``num_workers``, to choose the default.

``export`` (issue 20): peak resident memory of ``export`` (both formats), ``verify`` and ``score`` of the snapshot of
a run with ``save_images=true`` at two sizes (the same run as ``rss``, every sample validated: ``--budget 1`` with the
accept-all oracle), each step in its own fresh process. A snapshot step that held every image would grow by
``2 x 3 x size^2`` bytes per sample (384 KiB at 256 px); streamed, it should not grow with the number of images.

    python -m benchmarks.scale_out rss --sizes 500 5000 --size 128 --budget 2
    python -m benchmarks.scale_out loader --workers 0 1 2 --n 1000
    python -m benchmarks.scale_out export --sizes 100 2000 --size 256 [--keep /tmp/runs]
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/scale_out.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import results
from genEval.runs.recording import RunOutput
from genEval.search.execution import Execution

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
        execution=Execution(batch_size=batch, num_workers=workers, device="cpu"),
        output=RunOutput(out, save_latents=False, save_images=True, progress=False),
    )
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux -> MiB
    return {"n": n, "seconds": seconds, "sa": r.scores.sa.value, "peak_rss_mib": peak}


def snapshot_step(step: str, run: str, out: str) -> dict:
    """One snapshot command on a finished run (executed in a child process): export-imagefolder,
    export-webdataset, verify (the webdataset snapshot) or score (the webdataset snapshot, with ResNet-20)."""
    import torch

    from genEval.snapshots.export import export_snapshot
    from genEval.snapshots.scoring import score_snapshot
    from genEval.snapshots.verify import verify_snapshot

    torch.set_num_threads(2)
    t0 = time.perf_counter()
    if step.startswith("export-"):
        export_snapshot(run, out, format=step.removeprefix("export-"), shard_size=1000)
    elif step == "verify":
        assert verify_snapshot(out).ok
    else:
        from genEval.classifiers.loaders import cifar_resnet

        clf = cifar_resnet(20, checkpoint=ASSETS / "weights" / "cifar10-resnet" / "resnet20-12fca82f.th")
        score_snapshot(out, clf, batch_size=100)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def export_table(sizes: list[int], size: int, batch: int, keep: str = "") -> None:
    print(f"peak RSS of the snapshot commands ({size} px images, every sample validated, one fresh process per step)")
    print("| images | step | peak RSS (MiB) | seconds |\n|---|---|---|---|")
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            run = f"{keep}/run-{n}-{size}px" if keep else f"{tmp}/run"
            if not Path(run, "results.json").is_file():  # --keep reuses a run made earlier (same sources, seed 0)
                args = ["--n", str(n), "--size", str(size), "--budget", "1", "--batch", str(batch), "--out", run]
                made = run_child(args)
                print(f"| {n} | (the run itself) | {made['peak_rss_mib']:.0f} | {made['seconds']:.0f} |", flush=True)
            for step in ("export-imagefolder", "export-webdataset", "verify", "score"):
                snap = f"{tmp}/snap-imagefolder" if step == "export-imagefolder" else f"{tmp}/snap-webdataset"
                r = run_child(["--step", step, "--out", run, "--snapshot", snap])
                print(f"| {n} | {step} | {r['peak_rss_mib']:.0f} | {r['seconds']:.1f} |", flush=True)


def run_child(args: list[str]) -> dict:
    """Run this script's ``child`` mode in a fresh process and return what it measured about itself."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.scale_out", "child", *args], capture_output=True, text=True, cwd=ROOT
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["rss", "loader", "export", "child"])
    ap.add_argument("--step", default="")
    ap.add_argument("--snapshot", default="")
    ap.add_argument("--keep", default="", help="export: keep the measured runs in this folder and reuse them")
    ap.add_argument("--sizes", type=int, nargs="+", default=[500, 5000])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--budget", type=int, default=2)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--workers", type=int, nargs="+", default=[0])
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if a.mode == "child":
        if a.step:
            print(json.dumps(snapshot_step(a.step, a.out, a.snapshot)))
        else:
            print(json.dumps(one_run(a.n, a.size, a.budget, a.workers[0], a.batch, a.out)))
        return
    if not ASSETS.exists():
        raise SystemExit(f"needs the shared assets at {ASSETS}")
    if a.mode == "export":
        export_table(a.sizes, a.size, a.batch, a.keep)
        return
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
    raise SystemExit(results.run(main, __file__))
