"""``stop=settled`` against ``stop=fixed`` on a real zoo (issues 33, 40): sources per model, wall time, verdicts.

Both designs run through the command line with the same base seed, so the fixed design's repetition ``r`` is the
settled design's round ``r`` (both derive seed ``r`` from ``seed``): the settled run is a prefix of the fixed one,
and the fixed design spends ``max_sources`` per model whatever the data say. Both are judged by the same rule at
the end (the fixed design also by its bootstrap differences). ``--designs settled`` runs the settled design alone
(issue 40's before/after: this script against a checkout of each, ``--code``).

    python -m benchmarks.compare_settled                         # the digits intervention zoo, budget 10
    python -m benchmarks.compare_settled --args data=cifar10_jpg 'classifiers=[cifar_resnet20,cifar_resnet44]'
    python -m benchmarks.compare_settled --designs settled --code /tmp/before   # genEval before issue 40
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/compare_settled.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import results
from genEval.comparisons.leaderboard import Comparison

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str], out: Path, code: Path = ROOT) -> tuple[Comparison, float]:
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "genEval.cli", "compare", *args, f"out_dir={out}", "report=false"]
    env = {**os.environ, "PYTHONPATH": str(code)}
    proc = subprocess.run(cmd, cwd=code, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return Comparison.load(out), time.perf_counter() - t0


def describe(name: str, comp: Comparison, seconds: float) -> list[str]:
    s = comp.settled
    separated = sum(d.excludes_zero for d in comp.differences if d.metric == comp.rank_by)
    run_s = sum((r.time_s or 0.0) * r.repetitions for r in comp.leaderboard)  # the runs' own recorded times
    per_model = getattr(s, "model_sources", None) or {m: s.sources for m in s.order}
    lines = [
        f"{name}: {s.sources} sources per model at most in {s.rounds} round(s), {sum(per_model.values()):,} "
        f"model-sources, {seconds:.0f} s wall (runs {run_s:.0f} s); leaderboard order {', '.join(comp.models)}; "
        f"{s.headline()}",
        f"  sources per model: {', '.join(f'{m} {n:,}' for m, n in per_model.items())}",
        f"  settled order: {' > '.join(f'{m} ({s.tied_ranks[m]})' for m in s.order)}",
        *(f"  {p.describe(comp.rank_by)}" for p in s.pairs),
        f"  fixed-design bootstrap: {separated} of {len(comp.models) * (len(comp.models) - 1) // 2} pairs separated "
        f"by {comp.rank_by} (95% interval excludes 0; not valid under repeated looks)",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--round-sources", type=int, default=100)
    ap.add_argument("--max-sources", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--margin", type=float, default=1.0)
    ap.add_argument("--budget", type=int, default=10, help="search.budget of every run")
    ap.add_argument("--args", nargs="*", default=[], help="more overrides for both designs (data=..., classifiers=...)")
    ap.add_argument("--out", type=Path, default=None, help="keep the comparisons here (default: a temp folder)")
    ap.add_argument("--designs", nargs="*", default=["settled", "fixed"], choices=("settled", "fixed"))
    ap.add_argument("--code", type=Path, default=ROOT, help="the genEval checkout to run (default: this one)")
    a = ap.parse_args(argv)
    common = [*a.args, f"seed={a.seed}", f"search.budget={a.budget}", f"margin={a.margin}"]
    out = a.out or Path(tempfile.mkdtemp(prefix="compare-settled-"))
    reps = math.ceil(a.max_sources / a.round_sources)
    print(f"overrides: {' '.join(common)}; round_sources {a.round_sources}, max_sources {a.max_sources}; {a.code}")
    done = {}
    if "settled" in a.designs:
        settled_args = [*common, "stop=settled", f"round_sources={a.round_sources}", f"max_sources={a.max_sources}"]
        done["settled"] = run(settled_args, out / "settled", a.code)
        print("\n".join(describe("stop=settled", *done["settled"])), flush=True)
    if "fixed" in a.designs:
        done["fixed"] = run(
            [*common, "stop=fixed", f"repetitions={reps}", f"data.limit={a.round_sources}",
             f"round_sources={a.round_sources}", f"max_sources={a.max_sources}"],
            out / "fixed", a.code,
        )  # fmt: skip
        print("\n".join(describe(f"stop=fixed ({reps} repetitions)", *done["fixed"])))
    if len(done) == 2:
        (settled, t_settled), (fixed, t_fixed) = done["settled"], done["fixed"]
        run_s = [sum((r.time_s or 0.0) * r.repetitions for r in c.leaderboard) for c in (settled, fixed)]
        print(
            f"settled / fixed: sources {settled.settled.sources / fixed.settled.sources:.2f}, wall time "
            f"{t_settled / t_fixed:.2f}, run time {run_s[0] / run_s[1]:.2f} (a resumed comparison's wall time counts "
            "only what this call ran; the run times are each run's own)"
        )
    print(f"comparisons in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
