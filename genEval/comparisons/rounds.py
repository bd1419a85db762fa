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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from genEval.comparisons.leaderboard import Comparison, write_comparison
from genEval.comparisons.settings import StopRule
from genEval.comparisons.settled import next_rounds
from genEval.fileio import atomic_write_json, ensure_writable_dir

log = logging.getLogger(__name__)

ROUNDS = "rounds.json"


def round_seed(base: int, r: int) -> int:
    """Round ``r``'s seed, derived from ``base`` (the same for every model of the round; independent of how many
    rounds run)."""
    return int(np.random.SeedSequence([int(base), int(r)]).generate_state(1)[0] & 0x7FFFFFFF)


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


def run_until_settled(
    run_round: Callable[[list[str], int, int], Mapping[str, str]],
    look: Callable[[Mapping[str, list[str]], list[int]], Comparison],
    rule: StopRule,
    seed: int | None,
    out_dir: str | Path,
    models: Sequence[str],
) -> Comparison:
    """Steps of rounds until the ranking is settled or no open pair may have another round.

    ``run_round(models, r, seed)`` evaluates ``models`` on round ``r``'s draw and returns model -> its run
    directory; ``look(dirs, seeds)`` aggregates the runs so far (model -> run directories in round order; ``seeds``:
    the round seeds) into a :class:`Comparison` written to ``out_dir``. ``models``: every compared model (each runs
    round 0). Returns the last look, with why it stopped recorded in its ``settled`` verdicts (and the comparison
    files rewritten)."""
    rule = rule.filled()
    base = base_seed(seed, out_dir, rule)
    dirs: dict[str, list[str]] = {m: [] for m in models}
    seeds: list[int] = []
    wanted, spent = dict.fromkeys(models, 0), 0
    while True:
        for r in sorted(set(wanted.values())):  # a model behind catches up on the round its neighbour ran
            seeds += [round_seed(base, len(seeds)) for _ in range(r + 1 - len(seeds))]
            for model, run_dir in run_round([m for m in models if wanted.get(m) == r], r, seeds[r]).items():
                dirs[model].append(run_dir)
        comp = look(dirs, seeds)
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
