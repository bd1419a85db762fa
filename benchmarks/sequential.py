"""Simulated comparisons with known truths: the error rates and the cost of ``stop=settled`` (issue 33).

Each simulated comparison is two models evaluated on the same fresh sources, round after round. Per source unit a
model has the columns of :data:`genEval.scores.outcomes.COLUMNS`, drawn so that its FMR_v is known exactly:

* clean correct with probability ``sa``, validated with probability ``vr`` (start check passed with ``vr + 0.1``),
  perturbed still correct with probability ``q`` given validated and clean correct: FMR_v = 100 PA / SA_v = 100 q;
* pairing: each of the three uniforms behind those draws is shared by the two models with probability ``rho`` (the
  same image is easy or hard for both), else drawn for the model alone, so the marginals stay exact.

For each comparison the rule of :mod:`genEval.scores.sequential` looks after every round; the false-ordering rate at
``k`` looks is the share of equal-model comparisons called ``ordered`` at some look <= k. The same data are also
judged with a *fixed-design* 95% interval (``d +- 1.96 sd / sqrt(n)``, what a bootstrap interval is asymptotically)
used sequentially, which must fail that check: it shows the check can fail. For models ``delta`` points apart the
rule's power and mean sources are set against the fixed design of the same power (capped at 0.99)
(``n = ((z_{1-alpha/2} + z_power) sigma / delta)^2``, ``sigma`` the influence spread).

    python benchmarks/sequential.py                        # 2,000 comparisons per scenario, 50 looks of 100
    python benchmarks/sequential.py --sims 500 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy.stats import norm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from genEval.scores.outcomes import COLUMN, COLUMNS  # noqa: E402
from genEval.scores.sequential import SequentialTest, looks_of, running_bounds  # noqa: E402

KEY = "fmr_validated"


@dataclass(frozen=True)
class Pair:
    """Two simulated models: FMR_v of 100 q_a and 100 q_b, shared SA, VR and pairing strength rho."""

    q_a: float
    q_b: float
    sa: float = 0.82
    vr: float = 0.6
    rho: float = 0.5

    @property
    def delta(self) -> float:
        """The true FMR_v difference a - b in points."""
        return 100.0 * (self.q_a - self.q_b)


def _shared(rng: np.random.Generator, shape: tuple[int, ...], rho: float) -> tuple[np.ndarray, np.ndarray]:
    """Two uniforms per unit, equal with probability rho, else independent (both marginals stay uniform)."""
    u, own = rng.random(shape), rng.random(shape)
    return u, np.where(rng.random(shape) < rho, u, own)


def simulate(rng: np.random.Generator, pair: Pair, rounds: int, round_sources: int) -> list[np.ndarray]:
    """One comparison: per round the paired units (round_sources, 2 K), model a's columns then model b's."""
    shape = (rounds, round_sources)
    draws = [_shared(rng, shape, pair.rho) for _ in range(3)]  # clean, validation, perturbation
    cols = []
    for m, q in enumerate((pair.q_a, pair.q_b)):
        u_clean, u_val, u_pert = (d[m] for d in draws)
        x = np.zeros((*shape, len(COLUMNS)))
        clean, start, val = u_clean < pair.sa, u_val < pair.vr + 0.1, u_val < pair.vr
        x[..., COLUMN["n"]] = 1
        x[..., COLUMN["clean"]] = x[..., COLUMN["recon"]] = clean
        x[..., COLUMN["start_ok"]], x[..., COLUMN["validated"]] = start, val
        x[..., COLUMN["rejected"]] = start & ~val
        x[..., COLUMN["clean_validated"]] = val & clean
        x[..., COLUMN["perturbed_correct"]] = val & clean & (u_pert < q)
        x[..., COLUMN["oracle_clean"]] = x[..., COLUMN["oracle_recon"]] = 1
        cols.append(x)
    both = np.concatenate(cols, axis=-1)
    return list(both)


@dataclass(frozen=True)
class Scenario:
    """What ``sims`` comparisons of ``pair`` gave: the share called ordered by each look (the rule and the naive
    fixed interval), the share settled, mean sources at the rule's stop, and the fixed design of equal power."""

    pair: Pair
    sims: int
    looks: int
    round_sources: int
    ordered_by_look: list[float]
    naive_ordered_by_look: list[float]
    wrong_direction: float
    settled: float
    mean_sources_at_stop: float
    sigma: float
    fixed_sources_same_power: float | None

    @property
    def false_ordering(self) -> float:
        return max(self.ordered_by_look)

    @property
    def naive_false_ordering(self) -> float:
        return max(self.naive_ordered_by_look)


def run_scenario(pair: Pair, test: SequentialTest, sims: int, looks: int, round_sources: int, seed: int) -> Scenario:
    rng = np.random.default_rng(seed)
    z = float(norm.ppf(1 - test.alpha / 2))
    ordered = np.zeros((sims, looks), bool)
    naive = np.zeros((sims, looks), bool)
    wrong = np.zeros(sims, bool)
    stop_sources = np.zeros(sims)
    settled = np.zeros(sims, bool)
    sigmas = np.zeros(sims)
    for s in range(sims):
        n, d, sd = looks_of(simulate(rng, pair, looks, round_sources), KEY, 10)
        low, high = running_bounds(n, d, sd, test)
        ordered[s] = (low > 0) | (high < 0)
        half = z * sd / np.sqrt(n)
        naive[s] = np.maximum.accumulate((d - half > 0) | (d + half < 0))
        done = ordered[s] | ((test.margin > 0) & (low >= -test.margin) & (high <= test.margin))
        first = int(np.argmax(done)) if done.any() else looks - 1
        settled[s], stop_sources[s] = done.any(), n[first]
        wrong[s] = ordered[s].any() and np.sign(d[first]) != np.sign(pair.delta) and pair.delta != 0
        sigmas[s] = sd[-1]
    sigma = float(np.mean(sigmas))
    power = float(ordered[:, -1].mean())
    fixed = None
    if pair.delta != 0 and power > 0.5:  # the fixed design sized to the rule's power (capped at 0.99)
        fixed = float(((z + norm.ppf(min(power, 0.99))) * sigma / abs(pair.delta)) ** 2)
    return Scenario(
        pair,
        sims,
        looks,
        round_sources,
        ordered.mean(0).tolist(),
        naive.mean(0).tolist(),
        float(wrong.mean()),
        float(settled.mean()),
        float(stop_sources.mean()),
        sigma,
        fixed,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=2000, help="simulated comparisons per scenario")
    ap.add_argument("--looks", type=int, default=50, help="rounds (looks) per comparison")
    ap.add_argument("--round-sources", type=int, default=100, help="fresh sources per round")
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--margin", type=float, default=1.0, help="equivalence margin of the 3-point scenario")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="also write the scenarios here")
    args = ap.parse_args(argv)
    max_sources = args.looks * args.round_sources
    t_star = float(np.sqrt(args.round_sources * max_sources))
    t0 = time.perf_counter()
    equal = run_scenario(
        Pair(0.90, 0.90),
        SequentialTest(args.confidence, 0.0, t_star),  # margin 0: no equivalence stop, every look is looked at
        args.sims,
        args.looks,
        args.round_sources,
        args.seed,
    )
    apart = {
        delta: run_scenario(
            Pair(0.90, 0.90 - delta / 100),
            SequentialTest(args.confidence, args.margin, t_star),
            args.sims,
            args.looks,
            args.round_sources,
            args.seed + i + 1,
        )
        for i, delta in enumerate((3, 6))
    }
    took = time.perf_counter() - t0
    print(
        f"{args.sims} simulated comparisons per scenario, up to {args.looks} looks of {args.round_sources} fresh "
        f"sources (max {max_sources}), confidence {args.confidence}, t_star {t_star:.0f}; {took:.1f} s"
    )
    print("equal models (FMR_v 90 vs 90): share wrongly called ordered by look k")
    print(f"{'looks':>6} {'anytime-valid':>14} {'fixed 95% interval, looked at every round':>42}")
    for k in (1, 2, 5, 10, 20, 30, 40, 50):
        if k <= args.looks:
            print(f"{k:>6} {equal.ordered_by_look[k - 1]:>14.4f} {equal.naive_ordered_by_look[k - 1]:>42.4f}")
    for delta, sc in apart.items():
        print(
            f"models {delta} points apart (FMR_v 90 vs {90 - delta}, margin {args.margin}): ordered by the last look "
            f"in {sc.ordered_by_look[-1]:.3f}, ordered the wrong way in {sc.wrong_direction:.4f}; mean sources per "
            f"model at the stop {sc.mean_sources_at_stop:.0f} (max {max_sources}); fixed design of the same power: "
            + ("n/a" if sc.fixed_sources_same_power is None else f"{sc.fixed_sources_same_power:.0f} sources")
            + f" (influence sd {sc.sigma:.1f} points)"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "equal": asdict(equal),
                    **{f"apart_{d}": asdict(sc) for d, sc in apart.items()},
                    "args": vars(args) | {"json": str(args.json)},
                }
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
