"""A settled benchmark's leaderboard (issue 33): models in rounds of fresh, paired sources, judged against their
neighbours by the anytime-valid rule, run only until each is ordered (or equivalent) against them.

A settled benchmark (``stop: settled`` in its preset, :mod:`genEval.service.benchmarks`) runs every job as one *round*
of ``round_sources`` fresh sources drawn with the round's seed, the same for every model of the version, so that
round ``r`` of any two models is paired. A model's row holds all its finished rounds; the leaderboard orders the rows
by the ranking score (``rank_by``, FMR_v) pooled over every source of every round (:func:`settled_order`, as
:func:`genEval.comparisons.settled.settle_comparison` orders a comparison), and judges each pair of neighbours on the
rounds both have (:func:`judge`: :func:`genEval.scores.sequential.settle_pair`, the same verdict ``geneval compare``
gives the pair). Neighbours whose pair is ``open`` or ``equivalent`` share a tied rank ("2–3";
:func:`genEval.comparisons.settled.tied_ranks`), and an open pair says how many more sources per model would settle it.

After every finished round a worker (:meth:`genEval.service.server.standings.compute.StandingsBuilder.settle`) judges
the neighbours that have no verdict on the rounds they share yet, stores the verdicts
(:mod:`~genEval.service.server.standings.verdicts`), and queues the next round of each model of an open pair that has
the fewer rounds of the two (both, when even), unless it has ``max_sources`` (:func:`rounds_wanted`): a new
submission is run until it is ordered or equivalent against its neighbours, or ``max_sources``; a neighbour with
fewer rounds than it gets rounds too. The verdicts stay valid however often they are looked at, which is what lets a
worker look after every round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from genEval.comparisons.settings import StopRule
from genEval.comparisons.settled import tied_ranks
from genEval.runs.reader import RunDir
from genEval.scores.outcomes import Outcomes
from genEval.scores.sequential import PairVerdict, pair_units, settle_pair
from genEval.service.server.standings.verdicts import StoredVerdict, pair_key

#: Why the leaderboard ties neighbours whose pair no worker has judged yet.
NOT_JUDGED = "not judged yet (a worker is judging the pair)"


class Ranked(Protocol):
    """What a settled row needs: a stored standing or a board row."""

    job_id: str
    name: str
    repetitions: int
    scores: dict | None
    settled: dict | None


def withdrawn(row: Ranked) -> bool:
    """Whether the row's model was withdrawn by its submitter (its submission cancelled): it keeps its row, marked
    withdrawn, but leaves the settled order, so it is neither ranked, nor tied, nor given more rounds."""
    return bool((row.settled or {}).get("withdrawn"))


def settled_order(rows: Sequence[Ranked]) -> list[Ranked]:
    """The ranked rows (scores read, a pooled value stored, not :func:`withdrawn`) by the pooled ranking score, highest
    first; an undefined one last; ties by job id (the worker that judges neighbours and the leaderboard use this one
    order)."""
    ranked = [r for r in rows if r.scores is not None and r.settled is not None and not withdrawn(r)]
    return sorted(ranked, key=lambda r: (r.settled["pooled"] is None, -(r.settled["pooled"] or 0.0), r.job_id))


@dataclass(frozen=True)
class Neighbours:
    """Two adjacent rows of :func:`settled_order`, the ``rounds`` they share and the ``stored`` verdict on them
    (None: never judged); ``fresh`` when it judged every round they share."""

    upper: Ranked
    lower: Ranked
    rounds: int
    stored: StoredVerdict | None

    @property
    def fresh(self) -> bool:
        return self.stored is not None and self.stored.rounds >= self.rounds

    def verdict(self) -> PairVerdict:
        """The stored verdict, oriented upper minus lower; not yet judged: ``open`` with :data:`NOT_JUDGED`."""
        if self.stored is None:
            return PairVerdict(self.upper.name, self.lower.name, "", None, None, None, 0, 0, None, "open", 0, 0,
                               reason=NOT_JUDGED)  # fmt: skip
        v = PairVerdict.from_dict(self.stored.verdict)
        if self.stored.upper == self.upper.job_id:
            return v
        flip = {"a": v.b, "b": v.a, "value": None if v.value is None else -v.value}
        bounds = {"low": None, "high": None} if v.low is None else {"low": -v.high, "high": -v.low}
        return PairVerdict.from_dict({**v.to_dict(), **flip, **bounds})


def neighbours(order: Sequence[Ranked], stored: Mapping[tuple[str, str], StoredVerdict]) -> list[Neighbours]:
    """Every adjacent pair of ``order`` with its stored verdict."""
    return [
        Neighbours(a, b, min(a.repetitions, b.repetitions), stored.get(pair_key(a.job_id, b.job_id)))
        for a, b in zip(order, order[1:])
    ]


def judge(
    upper: tuple[str, Sequence[RunDir]],
    lower: tuple[str, Sequence[RunDir]],
    rounds: int,
    score: str,
    num_classes: int,
    rule: StopRule,
) -> PairVerdict:
    """The verdict on ``upper`` minus ``lower`` ((name, runs in round order) each) by ``score`` on their first
    ``rounds`` rounds: round ``r`` of both is one look of paired units, the sources both of them have (a source only
    one of the two saw is left out of the pair: issue 41)."""

    def shared(a: Outcomes, b: Outcomes) -> tuple[Outcomes, Outcomes]:
        both = np.intersect1d(a.ids.astype(str), b.ids.astype(str))
        return a.subset(np.isin(a.ids.astype(str), both)), b.subset(np.isin(b.ids.astype(str), both))

    units = [pair_units(*shared(upper[1][r].outcomes, lower[1][r].outcomes)) for r in range(rounds)]
    return settle_pair(upper[0], lower[0], units, score, num_classes, rule.test())


def rounds_wanted(pairs: Sequence[Neighbours], rule: StopRule) -> dict[str, int]:
    """Job id of a submission -> the round to queue for it: in each freshly judged ``open`` pair, the model(s) with
    the rounds the pair shares, while those rounds hold fewer than ``max_sources`` sources."""
    out: dict[str, int] = {}
    for p in pairs:
        if not p.fresh or p.stored.verdict.get("verdict") != "open":
            continue
        for side in (p.upper, p.lower):
            if side.repetitions == p.rounds and p.rounds * rule.round_sources < rule.max_sources:
                out[side.job_id] = p.rounds
    return out


@dataclass(frozen=True)
class SettledRanks:
    """A settled leaderboard's ranks: job id -> its rank ("2", or "2–3" tied with a neighbour whose pair is open or
    equivalent), job id -> the verdict on it and the row below it (None for the last), and whether every adjacent
    pair is settled."""

    rank: dict[str, str]
    below: dict[str, PairVerdict | None]
    done: bool

    @classmethod
    def of(cls, order: Sequence[Ranked], stored: Mapping[tuple[str, str], StoredVerdict]) -> SettledRanks:
        pairs = neighbours(order, stored)
        verdicts = [p.verdict() for p in pairs]
        below: dict[str, PairVerdict | None] = {r.job_id: None for r in order}
        below.update({p.upper.job_id: v for p, v in zip(pairs, verdicts)})
        ranks = tied_ranks([r.job_id for r in order], verdicts)
        return cls(ranks, below, all(v.settled for v in verdicts))


def describe_below(v: PairVerdict) -> dict[str, Any]:
    """The verdict on a row and the one below it, as the API and the page show it."""
    return {
        "name": v.b,
        "verdict": v.verdict,
        "difference": v.value,
        "low": v.low,
        "high": v.high,
        "sources": v.n_sources,
        "more_sources": v.more_sources,
        "more_kind": v.more_kind,
        "reason": v.reason,
    }
