"""Shards and comparisons on a local Ray cluster (issue 35): wall times and equality, measured, not tested.

Starts a head node on this machine (:mod:`benchmarks.harness.ray_cluster`: ``ray start --head --block`` on
127.0.0.1, ``--cpus`` CPUs, its own temporary directory; stopped at the end) and runs the real command line on the
offline digits default with the models cached in ``$GENEVAL_CACHE`` (trained on first use):

1. ``shards``: the unsharded run, then 2 shards through ``hydra/launcher=ray_cpus`` (auto-merged): wall times, and
   whether the merged scores and every decision equal the unsharded run's;
2. ``kill``: the same sweep with ``batch_size=2``, shard 1's Ray worker killed (SIGKILL, pid from its run.lock) after
   2 samples: whether Ray retried it, how many samples the retry computed, and the equality of the merge;
3. ``compare``: ``geneval compare`` of 3 digits models x 2 repetitions with ``executor=local`` and ``executor=ray``:
   wall times and whether the two comparison.json files conclude the same (scores, ranks, differences, stability).

    python -m benchmarks.cluster [--cpus 2] [--keep /tmp/cluster-bench]
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/cluster.py`: rerun as a module
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

from benchmarks.harness import results
from benchmarks.harness.ray_cluster import COMPARE, SHARDS, TINY, kill_mid_run, local_ray_cluster, start
from benchmarks.harness.run_equality import decisions, scores, verdicts

ROOT = Path(__file__).resolve().parents[1]


def timed(args: list[str] | tuple[str, ...], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "genEval.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"geneval {' '.join(args)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return time.perf_counter() - t0


def same_run(a: Path, b: Path) -> bool:
    return scores(a) == scores(b) and decisions(a) == decisions(b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--keep", type=Path, default=None, help="write the runs here (default: a temporary folder)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    local = dict(os.environ)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    out: dict = {"cpus": args.cpus, "load_average_at_start": os.getloadavg()}
    with local_ray_cluster(num_cpus=args.cpus, env={"PYTHONPATH": path}) as cluster:
        out["unsharded_s"] = timed([*TINY, f"hydra.run.dir={work / 'whole'}"], local)
        out["sweep_2_shards_s"] = timed([*SHARDS, f"hydra.sweep.dir={work / 'sweep'}"], cluster.env)
        out["sweep_equals_unsharded"] = same_run(work / "sweep" / "merged", work / "whole")

        t0 = time.perf_counter()
        proc = start([*SHARDS, "batch_size=2", f"hydra.sweep.dir={work / 'killed'}"], cluster.env, work / "killed")
        killed = kill_mid_run("*/shard-1-of-2", work / "killed", proc, samples=2)
        out["killed_sweep"] = {"killed_pid": killed, "exit_status": proc.wait()}
        shard = next((work / "killed").glob("*/shard-1-of-2"))
        logs = "".join(p.read_text() for p in [*(work / "killed").rglob("*.log"), work / "killed.err"])
        out["killed_sweep"] |= {
            "wall_s": time.perf_counter() - t0,
            "retried_and_took_over_the_lock": f"taking over the stale lock of process {killed} " in logs,
            "shard_1_samples_computed_by_the_retry": json.loads((shard / "results.json").read_text())["timings"][
                "samples_computed"
            ],
            "merge_equals_unsharded": same_run(work / "killed" / "merged", work / "whole"),
        }

        out["compare_local_s"] = timed([*COMPARE, f"out_dir={work / 'cmp-local'}"], local)
        out["compare_ray_s"] = timed([*COMPARE, "executor=ray", f"out_dir={work / 'cmp-ray'}"], cluster.env)
        out["compare_equal"] = verdicts(work / "cmp-ray") == verdicts(work / "cmp-local")
    out["load_average_at_end"] = os.getloadavg()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
