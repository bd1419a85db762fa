"""Wall time of ``geneval compare`` from an empty cache (issue 19): the offline intervention zoo as a new user runs it.

    python -m benchmarks.compare_default --out runs/compare-default [overrides ...]
    python -m benchmarks.compare_default --out runs/ablation 'generators=[digits_vq,identity]' repetitions=1

Runs ``python -m genEval.cli compare <overrides> hydra.run.dir=<out>`` in a subprocess with ``GENEVAL_CACHE`` set to a
fresh temporary folder (so the digits VQ, the oracle's members and every intervention are trained, as on a first
run), then prints the leaderboard it printed and a table: total wall time, the time spent in the evaluations
(sum of the runs' ``timings.total_s``), and the rest (training on first use, building, aggregation and the report).
``--cache DIR`` reuses a cache instead (the time of a second run). A measurement, not a test: the numbers go to
benchmarks/RESULTS.md with the command and the device.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/compare_default.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import results

ROOT = Path(__file__).resolve().parents[1]


def run_seconds(out: Path) -> tuple[float, int]:
    """Sum of ``timings.total_s`` over every run directory under ``out`` and how many runs there are."""
    total, n = 0.0, 0
    for res in out.rglob("results.json"):
        t = (json.loads(res.read_text()).get("timings") or {}).get("total_s")
        if t is not None:
            total, n = total + float(t), n + 1
    return total, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the comparison's directory (hydra.run.dir)")
    ap.add_argument("--cache", default=None, help="a GENEVAL_CACHE to reuse (default: a fresh, empty one)")
    ap.add_argument("overrides", nargs="*", help="geneval compare overrides")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    cache = args.cache or tempfile.mkdtemp(prefix="geneval-cache-")
    cmd = [sys.executable, "-m", "genEval.cli", "compare", *args.overrides, f"hydra.run.dir={out}"]
    env = dict(os.environ, GENEVAL_CACHE=str(cache))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    print(proc.stdout)
    if proc.returncode != 0:
        print(proc.stderr[-4000:], file=sys.stderr)
        sys.exit(proc.returncode)
    runs, n = run_seconds(out)
    print(f"device: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores; cache {cache}")
    print(f"command: {' '.join(cmd[1:])}\n")
    print("| phase | seconds | minutes |\n|---|---|---|")
    for name, sec in (
        (f"evaluations ({n} runs, sum of timings.total_s)", runs),
        ("training on first use, building, aggregation, report", wall - runs),
        ("total wall time", wall),
    ):
        print(f"| {name} | {sec:.0f} | {sec / 60:.1f} |")


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
