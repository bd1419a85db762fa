"""Issue 43 on real zoos: multi-ID against single-ID effective robustness, FMR_v against corruption accuracy, and the
ranking's sensitivity to the search budget (benchmarks/RESULTS.md, "Issue 43").

Three comparisons through the command line (bounded: ``search.budget=5``, ``data.limit=100``), then the tables:

* ``digits``: the digits intervention zoo with a second ID set (``id_data=[digits,digits_noisy]``), both axis scales
  (the run uses ``er.scale=probit``; the logit fit is refitted here from the same saved scores) and
  ``shift=corruptions``;
* ``cifar``: the CIFAR-10 ResNets (``data=cifar10_jpg``, the shared assets) with ``shift=corruptions``;
* ``budget``: ``'ablate={search.budget:[5,20]}'`` on the digits zoo.

    python -m benchmarks.robustness_across --out /tmp/i43m            # runs what /tmp/i43m lacks, then prints
    python -m benchmarks.robustness_across --out /tmp/i43m --only digits
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/robustness_across.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import results
from genEval.comparisons.ablation import load_comparison
from genEval.comparisons.leaderboard import Comparison
from genEval.comparisons.multi_id import attach_multi_id, load_id_sets
from genEval.comparisons.settings import ComparisonSettings

ROOT = Path(__file__).resolve().parents[1]

COMMON = ["search.budget=5", "data.limit=100", "seed=0"]
RUNS = {
    "digits": ["id_data=[digits,digits_noisy]", "er.scale=probit", "shift=corruptions", "repetitions=2", *COMMON],
    "cifar": ["data=cifar10_jpg", "shift=corruptions", "repetitions=1", *COMMON],
    "budget": ["ablate={search.budget:[5,20]}", "repetitions=1", "data.limit=100", "seed=0"],
}


def run(name: str, out: Path) -> float | None:
    """Run one comparison into ``out/name`` unless its comparison.json exists; its wall time (None: reused)."""
    target = out / name
    if (target / "comparison.json").is_file():
        return None
    cmd = [sys.executable, "-m", "genEval.cli", "compare", *RUNS[name], f"out_dir={target}"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def _n(v: float | None, d: int = 2) -> str:
    return "-" if v is None else f"{v:.{d}f}"


def multi_id_tables(out: Path) -> list[str]:
    comp = Comparison.load(out / "digits")
    lines = []
    for scale in ("logit", "probit"):
        settings = ComparisonSettings(er_scale=scale, n_boot=comp.settings.n_boot, er_min_r2=0.0)
        if scale == comp.multi_id.space:
            m = comp.multi_id
        else:
            scores = load_id_sets(out / "digits", comp.models)
            m = attach_multi_id(comp, scores, comp.multi_id.id_sets, _families(comp), settings, write=False).multi_id
        lines += [f"### {scale} axes", "", *m.markdown_lines()]
    return lines


def _families(comp: Comparison) -> dict[str, str]:
    return {m: f for m, f in zip(comp.multi_id.models, comp.multi_id.families) if f is not None}


def shift_table(out: Path, name: str) -> list[str]:
    comp = Comparison.load(out / name)
    return comp.fixed_shift.markdown_lines()


def ablation_table(out: Path) -> list[str]:
    ab = load_comparison(out / "budget")
    lines = [
        "| model | " + " | ".join(ab.values) + " | rank depends on the budget |",
        "|---" * (len(ab.values) + 2) + "|",
    ]
    for m in ab.models:
        cells = [f"{m.ranks.get(v)} ({_n(m.values.get(v))})" for v in ab.values]
        share = "" if m.share_changed is None else f" ({100 * m.share_changed:.0f}% of resamples)"
        lines.append(f"| {m.model} | " + " | ".join(cells) + f" | {'yes' if m.depends else 'no'}{share} |")
    lines += ["", *(f"- Kendall tau {a.a} vs {a.b}: {a.fmt()} ({a.method})" for a in ab.agreement)]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", choices=list(RUNS), action="append")
    args = ap.parse_args()
    names = args.only or list(RUNS)
    for name in names:
        seconds = run(name, args.out)
        print(f"{name}: " + ("reused" if seconds is None else f"ran in {seconds:.0f} s") + f" ({' '.join(RUNS[name])})")
    if "digits" in names:
        print("\n".join(["", "## digits zoo: single- and multi-ID ER", "", *multi_id_tables(args.out)]))
        print("\n".join(["", "## digits zoo: fixed shift", "", *shift_table(args.out, "digits")]))
    if "cifar" in names:
        print("\n".join(["", "## CIFAR-10 ResNets: fixed shift", "", *shift_table(args.out, "cifar")]))
    if "budget" in names:
        print("\n".join(["", "## digits zoo: ranking under search.budget 5 and 20", "", *ablation_table(args.out)]))


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
