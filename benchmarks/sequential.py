"""Simulated leaderboards with known truths: the error rates, the cost and the forecasts of ``stop=settled``.

The simulator is written apart from genEval's verdict code, which it only calls to judge: the truths are exact
(issues 33 and 40).

* **Outcomes.** A source has a latent type (easy, medium, hard: ``Law.pi``). Each model gives it one of six states:
  start check failed; start check passed but rejected; validated with the clean image wrong and the perturbed one
  wrong or right; validated with the clean image right and the perturbed one wrong or right. Per type the oracle
  validates with probability ``v``, the clean image is right with ``c``, a perturbed image of a clean-wrong source
  is right with ``r``, and that of a clean-right source with ``q_m h`` (``q_m`` the model's robustness). So a
  model's FMR_v = 100 P(validated, perturbed right) / P(validated, clean right) is linear in ``q_m`` and known
  exactly (:meth:`Law.fmr_v`); ``q_m`` is solved for the board's target values.
* **Pairing.** Each of the three draws (validation, clean, perturbed) of a source is, for each model, the source's
  own uniform with probability ``rho``, else the model's own (marginals stay exact): the same images are easy or
  hard for every model, as in a real comparison.
* **Boards.** 4, 8 or 12 models whose FMR_v fall from 95 by ``gaps``: equal (all the same), near-tied (0.3 points
  apart), mixed (each gap drawn from 0.5-8 points), separated (6 points apart) and twins (pairs of equal models, 5
  points between pairs: issue 40's family-wise case). Every round draws ``round``
  fresh sources for every model (the models that run it see them; a model behind catches up on the same draw).
* **Policies.** ``all``: every model runs every round until every adjacent pair is settled (genEval before issue 40);
  ``open``: only the models of open adjacent pairs (``genEval.comparisons.settled.next_rounds``). The verdicts are
  genEval's own: ``settle_pair`` before issue 40 (``--code`` a checkout of it), else the library's board
  (``order_board``, ``judge``, ``holm``), given the simulated units.

Measured per scenario: the share of adjacent pairs and of boards wrongly ordered at some look up to each look (an
ordered verdict naming the model whose true FMR_v is not higher), the model-sources until the board stops and how it
stopped. ``--calibration`` runs two-model boards over eight outcome laws and sets the forecast after the first look
(issue 40: the probability of being settled by ``max_sources``; before it, "≈ N more at 80% power") against what
happened.

    python -m benchmarks.sequential --boards 200                          # this checkout's defaults
    python -m benchmarks.sequential --code /tmp/before --policy all       # genEval before issue 40
    python -m benchmarks.sequential --calibration --boards 300 --json cal.json
    python -m benchmarks.sequential --level 2000                           # the level of each boundary
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/sequential.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

import genEval
from benchmarks.harness import results

ROOT = Path(__file__).resolve().parents[1]
KEY = "fmr_validated"
SCENARIOS = ("equal", "near-tied", "mixed", "separated", "twins")


# ------------------------------------------------------------------------------------------ the truth
@dataclass(frozen=True)
class Law:
    """Per-type probabilities of the outcome states (see the module docstring) and the pairing ``rho``."""

    pi: tuple[float, ...] = (0.5, 0.3, 0.2)
    v: tuple[float, ...] = (0.8, 0.6, 0.3)
    c: tuple[float, ...] = (0.97, 0.85, 0.6)
    r: tuple[float, ...] = (0.05, 0.05, 0.05)
    h: tuple[float, ...] = (1.0, 0.9, 0.75)
    rho: float = 0.5

    def _parts(self) -> tuple[float, float, float]:
        pi, v, c, r, h = (np.asarray(x) for x in (self.pi, self.v, self.c, self.r, self.h))
        base = float(np.sum(pi * v * (1 - c) * r))
        slope = float(np.sum(pi * v * c * h))
        den = float(np.sum(pi * v * c))
        return base, slope, den

    def fmr_v(self, q: float) -> float:
        """The exact FMR_v of a model of robustness ``q``: 100 (sum pi v ((1 - c) r + c q h)) / (sum pi v c)."""
        base, slope, den = self._parts()
        return 100.0 * (base + q * slope) / den

    def q_for(self, fmr_v: float) -> float:
        base, slope, den = self._parts()
        q = (fmr_v / 100.0 * den - base) / slope
        if not 0 <= q <= 1 / max(self.h):
            raise ValueError(f"FMR_v {fmr_v} is out of reach of this law (q = {q:.3f})")
        return q


#: Rare outcomes: every perturbed image of a clean-right source stays right with probability ``q`` whatever its type,
#: so FMR_v near 100 means one disagreement in hundreds of sources (the case a plain delta method gets wrong).
RARE = Law(h=(1.0, 1.0, 1.0), r=(0.0, 0.0, 0.0))


def board_truths(kind: str, k: int, rng: np.random.Generator, top: float = 95.0) -> np.ndarray:
    """The true FMR_v of the ``k`` models of a board of ``kind``, highest first (mixed: gaps drawn per board)."""
    gaps = {
        "equal": np.zeros(k - 1),
        "near-tied": np.full(k - 1, 0.3),
        "separated": np.full(k - 1, 6.0),
        "mixed": rng.uniform(0.5, 8.0, k - 1),
        "twins": np.resize([0.0, 5.0], k - 1),
    }[kind]
    return top - np.concatenate([[0.0], np.cumsum(gaps)])


def draw_round(rng: np.random.Generator, law: Law, qs: np.ndarray, units: int, column: dict) -> np.ndarray:
    """One round: (models, units, len(COLUMNS)) per-source column sums of every model on the same fresh sources."""
    k = len(qs)
    t = rng.choice(len(law.pi), size=units, p=law.pi)
    v, c, r, h = (np.asarray(x)[t] for x in (law.v, law.c, law.r, law.h))

    def paired() -> np.ndarray:  # (k, units): the source's uniform with probability rho, else the model's own
        own, shared = rng.random((k, units)), rng.random(units)
        return np.where(rng.random((k, units)) < law.rho, shared[None], own)

    u_val, u_clean, u_pert = paired(), paired(), paired()
    validated = u_val < v
    start_ok = u_val < v + 0.3 * (1 - v)
    clean = u_clean < c
    right = np.where(clean, u_pert < qs[:, None] * h, u_pert < r) & validated
    x = np.zeros((k, units, len(column)))
    x[..., column["n"]] = 1
    x[..., column["clean"]] = x[..., column["recon"]] = clean
    x[..., column["start_ok"]], x[..., column["validated"]] = start_ok, validated
    x[..., column["rejected"]] = start_ok & ~validated
    x[..., column["clean_validated"]] = validated & clean
    x[..., column["perturbed_correct"]] = right
    x[..., column["oracle_clean"]] = x[..., column["oracle_recon"]] = 1
    return x


# ------------------------------------------------------------------------------------------ the rule under test
class Judge:
    """genEval's verdicts, before issue 40 (``settle_pair`` on every model's rounds) or after (the board)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from genEval.scores import sequential

        self.seq, self.args = sequential, args
        self.new = hasattr(sequential, "PairLooks")
        max_sources, rnd = args.max_sources, args.round
        t_star = math.sqrt(rnd * max_sources)
        if self.new:
            from genEval.comparisons import settled

            self.board = settled
            self.test = sequential.SequentialTest(
                confidence=args.confidence, margin=args.margin, t_star=t_star, resolution=args.resolution,
                boundary=args.boundary, spending=args.spending, max_sources=max_sources, round_sources=rnd,
                safeguard=args.safeguard,
            )  # fmt: skip
            if args.no_forecast:
                import genEval.scores.forecast as fc

                sequential.forecast = lambda *a, **k: fc.Forecast(None, None, reason="off")
        else:
            self.test = sequential.SequentialTest(args.confidence, args.margin, t_star)

    def look(self, units: list[np.ndarray], ran: dict[int, int], pooled: dict[int, float]) -> tuple[list, list]:
        """(order, verdicts on its adjacent pairs); ``units[r]``: round r of every model; ``ran``: model -> rounds."""
        seq = self.seq

        def rounds(a: int, b: int) -> list[np.ndarray]:
            return [np.concatenate([units[r][a], units[r][b]], axis=1) for r in range(min(ran[a], ran[b]))]

        if not self.new:
            order = sorted(pooled, key=lambda m: (-pooled[m], m))
            return order, [seq.settle_pair(a, b, rounds(a, b), KEY, 10, self.test) for a, b in zip(order, order[1:])]
        cache: dict = {}

        def looks(a: int, b: int):
            if (a, b) not in cache:
                cache[a, b] = seq.PairLooks.of(a, b, rounds(a, b), KEY, 10, self.test.safeguard)
            return cache[a, b]

        order, pairs = self.board.order_board(pooled, lambda a, b: seq.judge(looks(a, b), self.test))
        if self.args.familywise and len(pairs) > 1:
            pairs = self.board.holm([looks(a, b) for a, b in zip(order, order[1:])], self.test)
        return order, pairs

    def settled(self, p) -> bool:
        return p.verdict in ("ordered", "equivalent", "resolved")

    def higher(self, p):
        """The model an ordered verdict puts higher."""
        if self.new:
            return p.higher
        return p.a if p.low > 0 else p.b


# ------------------------------------------------------------------------------------------ one board
@dataclass
class BoardRun:
    """What one simulated board did: per look the wrong orderings seen so far (pairs of models), the model-sources
    spent, how it stopped, and the first-look forecasts of its open pairs."""

    wrong_by_look: list[int] = field(default_factory=list)
    sources_by_look: list[int] = field(default_factory=list)
    stopped: str = ""
    verdicts: dict[str, int] = field(default_factory=dict)


def run_board(judge: Judge, truths: np.ndarray, law: Law, rng: np.random.Generator, args, column) -> BoardRun:
    qs = np.array([law.q_for(f) for f in truths])
    k, units = len(truths), []
    ran = dict.fromkeys(range(k), 0)
    wanted = dict.fromkeys(range(k), 0)
    sums = np.zeros((k, len(column)))
    wrong: set[frozenset] = set()
    out = BoardRun()
    while True:
        for m, r in wanted.items():
            while len(units) <= r:
                units.append(draw_round(rng, law, qs, args.round, column))
            sums[m] += units[r][m].sum(0)
            ran[m] += 1
        cv, pc = sums[:, column["clean_validated"]], sums[:, column["perturbed_correct"]]
        pooled = {m: 100.0 * pc[m] / cv[m] if cv[m] else 0.0 for m in range(k)}
        order, pairs = judge.look(units, ran, pooled)
        for p in pairs:
            if p.verdict == "ordered":
                hi = judge.higher(p)
                lo = p.b if hi == p.a else p.a
                if truths[hi] <= truths[lo]:
                    wrong.add(frozenset((p.a, p.b)))
        out.wrong_by_look.append(len(wrong))
        out.sources_by_look.append(sum(ran.values()) * args.round)
        if all(judge.settled(p) for p in pairs):
            out.stopped = "settled"
            break
        if args.policy == "all" or not judge.new:
            full = ran[0] * args.round >= args.max_sources
            wanted = {} if full else dict.fromkeys(range(k), ran[0])
        else:
            wanted = judge.board.next_rounds(pairs, ran, args.max_sources)
        if not wanted:
            out.stopped = "max_sources"
            break
    for p in pairs:
        out.verdicts[p.verdict] = out.verdicts.get(p.verdict, 0) + 1
    return out


def scenario(judge: Judge, kind: str, k: int, args, column, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    law = replace(RARE if args.law == "rare" else Law(), rho=args.rho)
    runs = [run_board(judge, board_truths(kind, k, rng, args.top), law, rng, args, column) for _ in range(args.boards)]
    looks = max(len(r.wrong_by_look) for r in runs)

    def at(r: BoardRun, j: int) -> int:  # carried forward after the board stopped
        return r.wrong_by_look[min(j, len(r.wrong_by_look) - 1)]

    per_pair = [float(np.mean([at(r, j) for r in runs]) / (k - 1)) for j in range(looks)]
    per_board = [float(np.mean([at(r, j) > 0 for r in runs])) for j in range(looks)]
    spent = np.array([r.sources_by_look[-1] for r in runs])
    verdicts: dict[str, int] = {}
    for r in runs:
        for v, c in r.verdicts.items():
            verdicts[v] = verdicts.get(v, 0) + c
    return dict(
        kind=kind, models=k, boards=args.boards, looks=looks,
        wrong_per_pair_by_look=per_pair, wrong_per_board_by_look=per_board,
        wrong_per_pair=per_pair[-1], wrong_per_board=per_board[-1], max_wrong_per_pair=max(per_pair),
        model_sources_mean=float(spent.mean()), model_sources_median=float(np.median(spent)),
        settled_share=float(np.mean([r.stopped == "settled" for r in runs])), verdicts=verdicts,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------ calibration
CAL_LAWS = [(gap, rho) for rho in (0.3, 0.8) for gap in (0.0, 1.0, 3.0, 6.0)]
#: The looks whose forecasts are set against what happened (before issue 40: the first).
CAL_LOOKS = (1, 5, 10)


def calibration(judge: Judge, args, column) -> list[dict]:
    """Two-model boards per law (true gap, pairing): the forecasts after looks 1, 5 and 10 against what happened. After
    issue 40 the forecast is a range: the chance of being settled by ``max_sources`` (``p_low``..``p_high``) and the
    sources after which the chance reaches the rule's power (``more``..``more_high``); before it, "≈ N more at 80%
    power". The boards run past ``max_sources`` (to ``--horizon``) so that a promise beyond it can be checked."""
    out = []
    horizon = max(args.horizon, args.max_sources)
    looks = CAL_LOOKS if judge.new else (1,)
    for i, (gap, rho) in enumerate(CAL_LAWS):
        rng = np.random.default_rng(args.seed + 1000 + i)
        law = Law(rho=rho)
        qs = np.array([law.q_for(f) for f in (90.0, 90.0 - gap)])
        rows: dict[int, list[dict]] = {k: [] for k in looks}
        for _ in range(args.boards):
            units, stated, settled_at = [], {}, None
            for r in range(horizon // args.round):
                units.append(draw_round(rng, law, qs, args.round, column))
                _, (p,) = judge.look(units, {0: r + 1, 1: r + 1}, {0: 1.0, 1: 0.0})
                n = (r + 1) * args.round
                if judge.settled(p):
                    settled_at = n
                    break
                if r + 1 in looks:
                    stated[r + 1] = p  # an open pair's forecast at this look
                first = stated.get(1)
                if judge.new and n >= args.max_sources:
                    break
                if not judge.new and (
                    first is None or first.more_sources is None or n >= args.round + first.more_sources
                ):
                    break
            for k, p in stated.items():
                row = dict(at=k * args.round, more=p.more_sources, settled_at=settled_at)
                if judge.new:
                    row |= dict(p_low=p.p_low, p_high=p.p_high, more_high=p.more_high)
                rows[k].append(row)
        out += [_summary(rows[k], gap, rho, args, judge.new) | {"look": k} for k in looks]
    return out


def _summary(rows: list[dict], gap: float, rho: float, args, new: bool) -> dict:
    """One law's first-look forecasts against what happened: the share settled by ``max_sources`` against the
    stated range, and the share settled within each promised number of sources."""

    def share(cond) -> float | None:
        kept = [cond(r) for r in rows if cond(r) is not None]
        return float(np.mean(kept)) if kept else None

    def within(r: dict, more: str) -> bool | None:
        return None if r[more] is None else (r["settled_at"] or math.inf) <= r["at"] + r[more]

    def median(key: str) -> float | None:
        kept = [r[key] for r in rows if r.get(key) is not None]
        return float(np.median(kept)) if kept else None

    by_max = share(lambda r: (r["settled_at"] or math.inf) <= args.max_sources)
    entry = dict(
        gap=gap, rho=rho, pairs=len(rows), settled_by_max=by_max, promised_median=median("more"),
        kept_share=share(lambda r: within(r, "more")),
    )  # fmt: skip
    if new:
        entry |= dict(
            p_low_mean=share(lambda r: r["p_low"]), p_high_mean=share(lambda r: r["p_high"]),
            kept_share_high=share(lambda r: within(r, "more_high")), more_high_median=median("more_high"),
        )  # fmt: skip
    return entry


# ------------------------------------------------------------------------------------------ the level of each boundary
def level_check(runs: int, seed: int = 0, rho: float = 0.5, looks: int = 25, round_sources: int = 200) -> dict:
    """Equal-model comparisons (FMR_v 90 vs 90): the share called ordered by each look under the confidence sequence,
    alpha spending of both types, and a fixed-design 95% interval looked at every round (genEval after issue 40)."""
    from genEval.scores.outcomes import COLUMN
    from genEval.scores.sequential import PairLooks, SequentialTest, track

    law = Law(rho=rho)
    qs = np.array([law.q_for(90.0)] * 2)
    rng = np.random.default_rng(seed)
    top = looks * round_sources
    tests = {
        "sequence": SequentialTest(margin=0, t_star=math.sqrt(round_sources * top)),
        "pocock": SequentialTest(margin=0, boundary="spending", spending="pocock", max_sources=top),
        "obrien-fleming": SequentialTest(margin=0, boundary="spending", spending="obrien-fleming", max_sources=top),
    }
    called = {k: np.zeros(looks) for k in [*tests, "fixed 95%"]}
    for _ in range(runs):
        units = [np.concatenate(list(draw_round(rng, law, qs, round_sources, COLUMN)), axis=1) for _ in range(looks)]
        lk = PairLooks.of("a", "b", units, KEY, 10)
        for name, test in tests.items():
            tr = track(lk.n, lk.d, lk.sd, test)
            called[name] += (tr.low > 0) | (tr.high < 0)
        called["fixed 95%"] += np.maximum.accumulate(np.abs(lk.d) > 1.96 * lk.sd / np.sqrt(lk.n))
    return {k: (v / runs).tolist() for k, v in called.items()}


# ------------------------------------------------------------------------------------------ main
def _rerun_in(code: Path, argv: list[str]) -> int:
    """This study again with ``code``'s genEval: a child whose working folder is that checkout (``python -m`` puts it
    first on the import path) with this checkout after it on ``PYTHONPATH``, for ``benchmarks`` (a checkout whose
    ``benchmarks/`` is not a package yet, as before issue 45, leaves it to this one)."""
    argv = [str(Path(a).resolve()) if i and argv[i - 1] == "--json" else a for i, a in enumerate(argv)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "benchmarks.sequential", *argv], cwd=code, env=env).returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--code", type=Path, default=ROOT, help="the genEval checkout")
    ap.add_argument("--boards", type=int, default=200, help="simulated boards per scenario")
    ap.add_argument("--models", type=int, nargs="*", default=[4, 8, 12])
    ap.add_argument("--kinds", nargs="*", default=list(SCENARIOS[:4]), choices=SCENARIOS)
    ap.add_argument("--round", type=int, default=200, help="fresh sources per round")
    ap.add_argument("--max-sources", type=int, default=5000)
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--margin", type=float, default=1.0)
    ap.add_argument("--resolution", type=float, default=2.0)
    ap.add_argument("--boundary", default="spending", choices=("spending", "sequence"))
    ap.add_argument("--spending", default="pocock", choices=("obrien-fleming", "pocock"))
    ap.add_argument("--safeguard", default="discordant", choices=("discordant", "worst", "none"))
    ap.add_argument("--familywise", action="store_true")
    ap.add_argument("--policy", default="open", choices=("open", "all"))
    ap.add_argument("--rho", type=float, default=0.97, help="pairing of the boards")
    ap.add_argument("--law", default="default", choices=("default", "rare"), help="rare: FMR_v near 100 (see RARE)")
    ap.add_argument("--top", type=float, default=95.0, help="the true FMR_v of a board's first model")
    ap.add_argument("--no-forecast", action="store_true", help="skip the forecasts (they do not change verdicts)")
    ap.add_argument("--calibration", action="store_true", help="the forecast's calibration instead of boards")
    ap.add_argument("--level", type=int, default=0, help="N equal-model comparisons: each boundary's level, by look")
    ap.add_argument("--horizon", type=int, default=20000, help="calibration: sources a pair may run to")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if Path(genEval.__file__).resolve().parents[1] != args.code.resolve():
        return _rerun_in(args.code.resolve(), sys.argv[1:] if argv is None else argv)
    from genEval.scores.outcomes import COLUMN

    judge = Judge(args)
    label = "after issue 40" if judge.new else "before issue 40"
    t0 = time.perf_counter()
    rule = (
        f"{args.boundary} ({args.spending}), safeguard {args.safeguard}, resolution {args.resolution}, "
        f"{'family-wise' if args.familywise else 'per pair'}, policy {args.policy}"
        if judge.new
        else "confidence sequence, one pseudo-unit at the worst influence, no resolution, per pair, policy all"
    )
    print(f"genEval {label} ({args.code}): {rule}; confidence {args.confidence}, margin {args.margin}, rounds of "
          f"{args.round} to {args.max_sources} per model, {args.law} law, pairing {args.rho}, top FMR_v {args.top}, "
          f"{args.boards} boards each")  # fmt: skip
    result: dict = {"args": {k: str(v) for k, v in vars(args).items()}, "code": label}
    if args.level:
        result["level"] = level_check(args.level, args.seed, 0.5)
        print(f"{args.level} equal-model comparisons (pairing 0.5), 25 looks of 200: share called ordered by look k")
        for name, by in result["level"].items():
            print(f"{name:>15}: " + ", ".join(f"k={k} {by[k - 1]:.4f}" for k in (1, 5, 10, 25)))
    elif args.calibration:
        cal = calibration(judge, args, column=COLUMN)
        result["calibration"] = cal

        def f(x, spec=".3f"):
            return "-" if x is None else format(x, spec)

        print(f"{'look':>4} {'gap':>4} {'rho':>4} {'pairs':>5} {'settled by max':>14} {'stated range':>13} "
              f"{'N (median)':>10} {'kept':>5} {'N far end':>9} {'kept':>5}")  # fmt: skip
        for e in cal:
            rng = f"{f(e.get('p_low_mean'), '.2f')}-{f(e.get('p_high_mean'), '.2f')}" if judge.new else "-"
            print(
                f"{e['look']:>4} {e['gap']:>4} {e['rho']:>4} {e['pairs']:>5} {f(e['settled_by_max']):>14} {rng:>13} "
                f"{f(e['promised_median'], '.0f'):>10} {f(e['kept_share']):>5} "
                f"{f(e.get('more_high_median'), '.0f'):>9} {f(e.get('kept_share_high')):>5}"
            )
    else:
        rows = []
        for i, k in enumerate(args.models):
            for j, kind in enumerate(args.kinds):
                sc = scenario(judge, kind, k, args, COLUMN, args.seed + 100 * i + j)
                rows.append(sc)
                print(
                    f"{k:>2} models {kind:>10}: wrong per pair {sc['wrong_per_pair']:.4f} (max over looks "
                    f"{sc['max_wrong_per_pair']:.4f}), per board {sc['wrong_per_board']:.3f}; model-sources "
                    f"mean {sc['model_sources_mean']:,.0f} (median {sc['model_sources_median']:,.0f}); settled "
                    f"{sc['settled_share']:.3f}; verdicts {sc['verdicts']}",
                    flush=True,
                )
        result["scenarios"] = rows
    print(f"{time.perf_counter() - t0:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
