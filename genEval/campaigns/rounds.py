"""``stop=settled``: a comparison in rounds of fresh, paired sources until its ranking is settled (docs/comparing.md).

Round ``r`` is repetition ``r`` of a comparison (``runs/<model>/rep<r>``): ``round_sources`` fresh sources drawn
with the round's seed, the same for every model that runs it (paired). Every model runs round 0; after each step the
comparison is aggregated and its adjacent pairs judged by the rule of :mod:`genEval.comparisons.settled`, which holds
at every look, and only the models that still matter run the next step: those of open adjacent pairs, the one behind
in rounds (both when even), while the pair has fewer than ``max_sources`` sources
(:func:`~genEval.comparisons.settled.next_rounds`, the function the service queues its rounds with). The run stops
when every adjacent pair is settled, or when no open pair may have another round.

The round seeds derive from one base seed (``seed=``, else a fresh one), written to ``<out_dir>/rounds.json`` before
the first round: a stopped comparison rerun into the same ``out_dir`` continues from its last finished round (a
finished round's runs are read back, an interrupted one resumes) and reaches the verdicts an uninterrupted run with
that seed reaches.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from genEval.campaigns.plan import Design, EvaluationPlan, Setup
from genEval.campaigns.repetitions import evaluate_repetitions
from genEval.comparisons.aggregate import aggregate
from genEval.comparisons.leaderboard import Comparison, write_comparison
from genEval.comparisons.settings import StopRule
from genEval.comparisons.settled import next_rounds, round_seed
from genEval.fileio import atomic_write_json, ensure_writable_dir

log = logging.getLogger(__name__)

ROUNDS = "rounds.json"


def base_seed(seed: int | None, out_dir: str | Path, rule: StopRule) -> int:
    """The comparison's base seed: the one ``<out_dir>/rounds.json`` recorded (a resumed comparison), else ``seed``,
    else a fresh one; recorded there with the rule before the first round."""
    path = Path(out_dir) / ROUNDS
    if path.is_file():
        recorded = json.loads(path.read_text(encoding="utf-8"))
        if seed is not None and int(seed) != recorded["seed"]:
            raise ValueError(
                f"'{out_dir}' holds a stop=settled comparison with seed {recorded['seed']}, not seed={seed}: rerun "
                f"with seed={recorded['seed']} (or seed=null) to continue it, or choose another out_dir."
            )
        return int(recorded["seed"])
    base = int(seed) if seed is not None else secrets.randbits(31)
    ensure_writable_dir(out_dir)
    atomic_write_json(path, {"seed": base, "seed_drawn": seed is None, "rule": rule.to_dict()})
    return base


def run_rounds(plan: EvaluationPlan, design: Design, setup: Setup, record: Mapping) -> Comparison:
    """Steps of rounds until the ranking is settled or no open pair may have another round.

    Every model of ``design`` runs round 0 (:func:`~genEval.campaigns.repetitions.evaluate_repetitions` with the
    round's seed, ``rep<r>``; ``record``: extra entries of every run's ``config.comparison``); after each step the
    runs so far are aggregated (:func:`genEval.comparisons.aggregate.aggregate`, written to ``design.out_dir``) and
    the models of open adjacent pairs run the next round (:func:`~genEval.comparisons.settled.next_rounds`). The
    data draw ``round_sources`` per round (``setup.data`` is expected to draw that many: see
    :func:`genEval.campaigns.draws.with_sources`). Returns the last look, with why it stopped recorded in its
    ``settled`` verdicts (and the comparison files rewritten)."""
    rule, out_dir, models = design.rule, design.out_dir, design.names
    named = dict(zip(models, design.models.values()))
    base = base_seed(design.seeds, out_dir, rule)
    dirs: dict[str, list[str]] = {m: [] for m in models}
    seeds: list[int] = []
    wanted, spent = dict.fromkeys(models, 0), 0
    while True:
        for r in sorted(set(wanted.values())):  # a model behind catches up on the round its neighbour ran
            seeds += [round_seed(base, len(seeds)) for _ in range(r + 1 - len(seeds))]
            step = {m: named[m] for m in models if wanted.get(m) == r}
            ran = evaluate_repetitions(
                step, setup, plan, [seeds[r]], out_dir, record=record, executor=design.executor, first_repetition=r
            )
            for model, run_dirs in ran.items():
                dirs[model] += run_dirs
        # the runs as a list: names and rounds come from their records (a mapping would order rep10 before rep2)
        comp = aggregate([d for ds in dirs.values() for d in ds], design.settings.with_seeds(seeds), out_dir=out_dir)
        settled = comp.settled
        total = sum(settled.model_sources.values())
        if total <= spent:
            raise ValueError(
                f"the rounds {sorted(set(wanted.values()))} added no sources (data.limit too small or the data set "
                f"exhausted?); the comparison stops at {settled.sources} sources per model."
            )
        spent = total
        log.info(
            "compare stop=settled: ran %s; %d model-sources in all: %s",
            ", ".join(f"{m} round {wanted[m]}" for m in models if m in wanted),
            spent,
            settled.headline(),
        )
        if settled.done:
            stopped = f"every adjacent pair settled after {settled.rounds} round(s)"
            break
        wanted = next_rounds(settled.pairs, {m: len(d) for m, d in dirs.items()}, rule.max_sources)
        if not wanted:
            stopped = f"max_sources={rule.max_sources} reached with {len(settled.open_pairs)} pair(s) still open"
            break
    comp = replace(comp, settled=replace(settled, stopped=stopped))
    return write_comparison(comp, comp.out_dir or out_dir)
