"""A settled benchmark's leaderboard (docs/service.md): models in rounds of fresh, paired sources, judged against
their neighbours by the rule of ``geneval compare stop=settled``, run only until each is settled against them.

A settled benchmark (``stop: settled`` in its preset, :mod:`genEval.service.benchmarks`) runs every job as one *round*
of ``round_sources`` fresh sources drawn with the round's seed, the same for every model of the version, so that
round ``r`` of any two models is paired. A model's row holds all its finished rounds. The order, the verdicts and
the rounds to queue come from the comparison library, the functions ``geneval compare stop=settled`` uses
(:mod:`genEval.comparisons.settled`), so the service and ``compare`` reach the same verdicts on the same rounds:
rows by the ranking score pooled over every round (``rank_by``, FMR_v), a pair of neighbours whose verdict orders
the lower one higher swapped (:func:`board_order`: ``order_board``), each pair judged on the rounds both have
(:func:`judge`: ``settle_pair``), Holm over the version's neighbours when its rule is ``familywise``, tied ranks
(``tied_ranks``), and the next round of each model of an open pair that has the fewer rounds of the two (both, when
even) while the pair has fewer than ``max_sources`` sources (:func:`rounds_wanted`: ``next_rounds``).

After every finished round a worker (:meth:`genEval.service.server.standings.compute.StandingsBuilder.settle`) judges
the neighbours that have no verdict on the rounds they share yet (every neighbour, under a family-wise rule: a pair's
level depends on the others), stores the verdicts (:mod:`~genEval.service.server.standings.verdicts`), and queues the
rounds :func:`rounds_wanted` asks for. The verdicts stay valid however often they are looked at, which is what lets a
worker look after every round; the guarantee (per pair, or family-wise over the version's neighbours) is the
version's rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from genEval.comparisons.settings import StopRule
from genEval.comparisons.settled import next_rounds, order_board, tied_ranks
from genEval.runs.reader import RunDir
from genEval.scores.outcomes import Outcomes
from genEval.scores.sequential import PairLooks, PairVerdict, pair_units, settle_pair
from genEval.service.records import SettledInfo
from genEval.service.server.standings.verdicts import StoredVerdict, pair_key

#: Why the leaderboard ties neighbours whose pair no worker has judged yet.
NOT_JUDGED = "not judged yet (a worker is judging the pair)"


class Ranked(Protocol):
    """What a settled row needs (a stored :class:`~genEval.service.records.StandingInfo` has it)."""

    job_id: str
    name: str
    repetitions: int
    ranked: bool
    settled: SettledInfo | None


def withdrawn(row: Ranked) -> bool:
    """Whether the row's model was withdrawn by its submitter (its submission cancelled): it keeps its row, marked
    withdrawn, but leaves the settled order, so it is neither ranked, nor tied, nor given more rounds."""
    return row.settled is not None and row.settled.withdrawn


def _ranked(rows: Sequence[Ranked]) -> list[Ranked]:
    """The rows with scores and settled info, not :func:`withdrawn`, by job id (the order ties keep)."""
    ranked = (r for r in rows if r.ranked and r.settled is not None and not withdrawn(r))
    return sorted(ranked, key=lambda r: r.job_id)


@dataclass(frozen=True)
class Neighbours:
    """Two adjacent rows of the board, the ``rounds`` they share and the ``stored`` verdict on them (None: never
    judged); ``fresh`` when it judged every round they share."""

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
        return v if self.stored.upper == self.upper.job_id else v.flipped()


def pair_of(a: Ranked, b: Ranked, stored: Mapping[tuple[str, str], StoredVerdict]) -> Neighbours:
    return Neighbours(a, b, min(a.repetitions, b.repetitions), stored.get(pair_key(a.job_id, b.job_id)))


def board_order(
    rows: Sequence[Ranked], verdict: Callable[[Neighbours], PairVerdict]
) -> tuple[list[Ranked], list[Neighbours], list[PairVerdict]]:
    """The board of the ranked ``rows``: its order (the comparison library's ``order_board``), its pairs of
    neighbours and the verdict on each (``verdict(pair)``: the stored one, or one judged now)."""
    by_id = {r.job_id: r for r in _ranked(rows)}
    pairs: dict[tuple[str, str], Neighbours] = {}

    def judged(a: str, b: str) -> PairVerdict:
        upper, lower = by_id[a], by_id[b]
        pairs[a, b] = pairs.get((a, b)) or Neighbours(upper, lower, min(upper.repetitions, lower.repetitions), None)
        return verdict(pairs[a, b])

    ids, verdicts = order_board({j: r.settled.pooled for j, r in by_id.items()}, judged)
    order = [by_id[j] for j in ids]
    return order, [pairs[a, b] for a, b in zip(ids, ids[1:])], verdicts


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
    one of the two saw is left out of the pair: docs/service.md)."""
    return settle_pair(upper[0], lower[0], shared_units(upper[1], lower[1], rounds), score, num_classes, rule.test())


def pair_looks(
    upper: tuple[str, Sequence[RunDir]], lower: tuple[str, Sequence[RunDir]], rounds: int, score: str, num_classes: int
) -> PairLooks:
    """The looks of ``upper`` minus ``lower`` on their first ``rounds`` rounds (for a family-wise rule)."""
    return PairLooks.of(upper[0], lower[0], shared_units(upper[1], lower[1], rounds), score, num_classes)


def _shared(a: Outcomes, b: Outcomes) -> tuple[Outcomes, Outcomes]:
    """The outcomes of the sources both ``a`` and ``b`` have, each in its own order."""
    both = np.intersect1d(a.ids.astype(str), b.ids.astype(str))
    return a.subset(np.isin(a.ids.astype(str), both)), b.subset(np.isin(b.ids.astype(str), both))


def shared_units(upper: Sequence[RunDir], lower: Sequence[RunDir], rounds: int) -> list:
    """The paired units of each of the first ``rounds`` rounds, on the sources both sides of the round have."""
    return [pair_units(*_shared(upper[r].outcomes, lower[r].outcomes)) for r in range(rounds)]


def rounds_wanted(pairs: Sequence[Neighbours], rule: StopRule) -> dict[str, int]:
    """Job id of a submission -> the round to queue for it: the library's ``next_rounds`` over the freshly judged
    pairs of neighbours (a pair no worker has judged on every round it shares yet waits)."""
    fresh = [p for p in pairs if p.fresh]
    ids = {side.name: side.job_id for p in fresh for side in (p.upper, p.lower)}
    rounds = {side.name: side.repetitions for p in fresh for side in (p.upper, p.lower)}
    wanted = next_rounds([p.verdict() for p in fresh], rounds, rule.max_sources)
    return {ids[name]: r for name, r in wanted.items()}


@dataclass(frozen=True)
class SettledRanks:
    """A settled leaderboard: its ``order`` (job ids), job id -> its rank ("2", or "2–3" tied with a neighbour whose
    pair is not ordered), job id -> the verdict on it and the row below it (None for the last), and whether every
    adjacent pair is settled."""

    order: list[str]
    rank: dict[str, str]
    below: dict[str, PairVerdict | None]
    done: bool

    @classmethod
    def of(cls, rows: Sequence[Ranked], stored: Mapping[tuple[str, str], StoredVerdict]) -> SettledRanks:
        order, pairs, verdicts = board_order(rows, lambda p: pair_of(p.upper, p.lower, stored).verdict())
        below: dict[str, PairVerdict | None] = {r.job_id: None for r in order}
        below.update({p.upper.job_id: v for p, v in zip(pairs, verdicts)})
        ids = [r.job_id for r in order]
        return cls(ids, tied_ranks(ids, verdicts), below, all(v.settled for v in verdicts))
