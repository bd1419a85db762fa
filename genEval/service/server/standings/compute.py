"""Leaderboard standings of one benchmark version (the paper's Appendix N leaderboards), computed when a job
finishes and stored, so that a page view reads rows instead of re-running the comparison.

One row per model (a finished job): SA, PA, FMR, VR (and chance-corrected FMR) with 95% intervals, its
repetitions, date, and which other models it is *significantly better* than: the paired bootstrap over source
images (a difference whose 95% interval excludes zero).

Where the numbers come from: a model's row is the comparison library's own row for that model
(:func:`genEval.comparisons.aggregate.build_comparison` on its runs; a row depends on that model's runs only), and
its marks are the comparison library's pairwise differences (:func:`genEval.scores.rankings.pairwise_differences`,
the models in the library's order, :func:`genEval.comparisons.rows.order_models`), one pair at a time. A whole
comparison of ``n`` models costs ``n(n-1)/2`` paired bootstraps (measured in ``benchmarks/RESULTS.md``: about two
hours for 1,000 models on a 2-core CPU), so it is never run per page view: when a job finishes, its worker
(:class:`StandingsBuilder`) computes the new model's row and its ``n - 1`` pairs, and the database stores them with
the job (:meth:`genEval.service.server.finishing.JobEndings.finish`). The stored standings equal those of one
:func:`aggregate` over all finished jobs (``tests/service/server/standings/test_service_standings.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from genEval.comparisons.aggregate import aggregate as compare_runs
from genEval.comparisons.aggregate import build_comparison
from genEval.comparisons.leaderboard import TABLE_SCORES
from genEval.comparisons.loading import DamagedRun, check_records
from genEval.comparisons.ranking import DEFAULT_RANK_BY
from genEval.comparisons.rows import order_models, score_entries
from genEval.comparisons.settings import ComparisonSettings, StopRule
from genEval.comparisons.settled import holm, round_seed
from genEval.comparisons.standing import Standing
from genEval.runs.reader import RunDir
from genEval.scores.definitions import SCORE
from genEval.scores.intervals import N_BOOT
from genEval.scores.rankings import pairwise_differences
from genEval.scores.sequential import PairLooks, PairVerdict
from genEval.service.records import MARKED, JobInfo, SettledInfo, StandingInfo
from genEval.service.reuse import version_budget
from genEval.service.server.finishing import JobEndings
from genEval.service.server.standings.settled import (
    Neighbours,
    board_order,
    judge,
    pair_looks,
    pair_of,
    rounds_wanted,
    withdrawn,
)
from genEval.service.server.standings.stores import StandingsStores
from genEval.service.server.standings.verdicts import StoredVerdict, pair_key

log = logging.getLogger(__name__)

#: Metrics shown, in column order: every leaderboard score of genEval.scores.definitions.SCORES, in the order of
#: ``geneval compare``'s tables (a score added there appears here, stored with every row computed after it).
COLUMNS = TABLE_SCORES
LABELS = {k: SCORE[k].short or SCORE[k].label for k in COLUMNS}
#: ``rank``: the ranking's own order (a fixed benchmark's: by :data:`RANK_BY`; a settled one's: by the ranking score
#: pooled over every round, with tied ranks: :mod:`~genEval.service.server.standings.settled`).
SORT_KEYS = (*COLUMNS, "name", "date", "repetitions", "rank")
#: The default order of the pages and the API: the comparison library's ranking score (``geneval compare``'s
#: ``rank_by`` default, FMR_v; see :mod:`genEval.comparisons.ranking` for why not the paper's FMR).
RANK_BY = DEFAULT_RANK_BY
#: The bootstrap seed and level of every interval and mark (those of ``aggregate``'s defaults).
SEED, LEVEL = 0, 0.95


@dataclass(frozen=True)
class ModelComparison:
    models: dict[str, Standing]
    interval_note: str
    warnings: list[str] = field(default_factory=list)
    rank_by: str = "fmr"  # the score that orders the standings (the comparison's rank_by) and why
    rank_reason: str = ""


def aggregate(
    run_dirs: Mapping[str, Sequence[Path]] | Sequence[Path], n_boot: int = N_BOOT, seed: int = SEED
) -> ModelComparison:
    """Model name -> its run directories (one per repetition), or run directories whose names and repetitions
    (a settled benchmark's rounds) are the ones recorded -> scores and pairwise significance, all at once (one
    :func:`genEval.comparisons.aggregate.aggregate`; ``n(n-1)/2`` paired bootstraps). The reference the stored
    standings are checked against, and the way to rank a set of runs outside the service."""
    if not run_dirs:
        return ModelComparison({}, "")
    settings = ComparisonSettings(n_boot=n_boot, seed=seed, level=LEVEL, rank_by=RANK_BY)
    if isinstance(run_dirs, Mapping):
        comp = compare_runs({k: [str(p) for p in v] for k, v in run_dirs.items()}, settings)
    else:
        comp = compare_runs([str(p) for p in run_dirs], settings)
    better: dict[str, dict[str, list[str]]] = {m: {k: [] for k in MARKED} for m in comp.models}
    for d in comp.differences:
        if d.metric in MARKED and d.excludes_zero and d.value:
            winner, loser = (d.a, d.b) if d.value > 0 else (d.b, d.a)
            better[winner][d.metric].append(loser)
    models = {row.model: Standing.of(row, better[row.model], COLUMNS) for row in comp.leaderboard}
    return ModelComparison(
        models, comp.settings.interval_note, list(comp.warnings), comp.rank_by, comp.settings.rank_reason
    )


# ------------------------------------------------------------------------------ computing (the worker)
@dataclass(frozen=True)
class Contender:
    """A finished job's runs, loaded once: its name, runs (repetition order), the comparison library's score
    entries (what orders a pair) and its number of classes."""

    job_id: str
    name: str
    runs: list[RunDir]
    entries: dict
    num_classes: int
    class_names: tuple


@dataclass(frozen=True)
class StandingUpdate:
    """What finishing a job stores: its row, the jobs whose rows gain its name (job id -> metrics), the jobs it was
    compared with and the rounds each had then (a job that finished, or a settled model that finished a round,
    meanwhile is compared afterwards), and on a settled model's later round the jobs whose rows lose its name."""

    row: StandingInfo
    beaten_by: dict[str, list[str]]
    compared: dict[str, int]
    unbeaten_by: dict[str, list[str]] = field(default_factory=dict)


def significance_marks(a: Contender, b: Contender, n_boot: int) -> list[tuple[str, str]]:
    """``(metric, winner job id)`` for every marked metric on which ``a`` and ``b`` differ significantly (the
    comparison library's paired bootstrap of the pair, in the library's model order). Jobs are told apart by id,
    never by name (two jobs of one name, left by an older genEval, stay two models)."""
    if a.name != b.name:
        entries = {a.name: a.entries, b.name: b.entries}
        names, _ = order_models({m: e[RANK_BY].value for m, e in entries.items()}, entries)
        order = [{a.name: a.job_id, b.name: b.job_id}[n] for n in names]
    else:
        order = sorted((a.job_id, b.job_id))
    outcomes = {c.job_id: [r.outcomes for r in c.runs] for c in (a, b)}
    out = []
    for d in pairwise_differences(order, outcomes, a.num_classes, n_boot, SEED, LEVEL):
        if d.metric in MARKED and d.excludes_zero and d.value:
            out.append((d.metric, d.a if d.value > 0 else d.b))
    return out


class StandingsBuilder:
    """Computes and stores the standings row of each job a worker finishes (see the module docstring), and on a
    settled benchmark judges the neighbours and queues the rounds the rule asks for (:meth:`settle`).

    Loaded runs are kept (a finished run never changes), so a worker that finishes many jobs reads each run
    directory once. ``stores``: the standings slice's stores (``db.leaderboard``); ``n_boot``: bootstrap resamples
    of the intervals and marks (``geneval serve``/``worker`` ``n_boot``; every worker of one service should use the
    same).
    """

    def __init__(self, stores: StandingsStores, home: str | Path, n_boot: int = N_BOOT) -> None:
        self.stores, self.home, self.n_boot = stores, Path(home), int(n_boot)
        self.settings = ComparisonSettings(n_boot=self.n_boot, seed=SEED, level=LEVEL, rank_by=RANK_BY)
        self._loaded: dict[tuple, Contender | None] = {}
        self._rules: dict[tuple[str, str], StopRule | None] = {}
        self.damaged: dict[str, str] = {}  # job id -> why its runs were refused

    def _load(self, job_id: str, name: str, run_dirs: Sequence[str]) -> Contender | None:
        """A finished job's runs (None when one is missing, or damaged: its records disagree with its results.json,
        :func:`genEval.comparisons.loading.check_records`; :attr:`damaged` says how)."""
        key = (job_id, tuple(run_dirs))  # a settled model's runs grow by a round at a time
        if key not in self._loaded:
            dirs = [self.home / d for d in run_dirs]
            runs = [RunDir(d) for d in dirs]  # in the order given (a settled model's rounds)
            try:
                for run in runs:
                    if run.finished:
                        check_records(run)
            except DamagedRun as err:
                log.error("standings: %s", err)
                self.damaged[job_id] = str(err).replace(str(self.home) + "/", "")
                self._loaded[key] = None
                return None
            if not all(run.finished for run in runs):
                self._loaded[key] = None
            else:
                first = runs[0].results
                n = int(first.scores.num_classes)
                entries = score_entries(runs, n, self.settings)
                names = tuple(first.class_names)
                self._loaded[key] = Contender(job_id, name, runs, entries, n, names)
        return self._loaded[key]

    def rule(self, benchmark: str, version: str) -> StopRule | None:
        """The stop rule of a settled benchmark version (its registered record's ``stop``); None: fixed."""
        if (benchmark, version) not in self._rules:
            registered = self.stores.benchmarks.get(benchmark, version)
            self._rules[benchmark, version] = registered.stop if registered else None
        return self._rules[benchmark, version]

    @staticmethod
    def run_dirs(job: JobInfo) -> list[str]:
        """The job's run directories relative to the service home (the layout :meth:`JobInfo.rep_dir` owns)."""
        return [str(job.rep_dir(Path(), r)) for r in range(len(job.seeds))]

    def model_dirs(self, job: JobInfo) -> list[str]:
        """The run directories of the model ``job`` is (a round of): its own on a fixed benchmark; on a settled one
        those of every finished round of its submission and its own, in round order."""
        if self.rule(job.benchmark, job.benchmark_version) is None:
            return self.run_dirs(job)
        rounds = {j.round: j for j in self.stores.jobs.rounds(job.root_id)} | {job.round: job}
        return [d for r in sorted(rounds) for d in self.run_dirs(rounds[r])]

    def unranked(self, job: JobInfo, why: str, dirs: Sequence[str] | None = None) -> StandingUpdate:
        """A row that leaves ``job``'s model out of the ranking, saying why (its runs could not be compared)."""
        dirs = self.run_dirs(job) if dirs is None else list(dirs)
        row = StandingInfo(
            job_id=job.root_id,
            benchmark=job.benchmark,
            version=job.benchmark_version,
            standing=Standing(job.name, len(dirs), {}),  # no scores: not ranked
            finished_at=job.finished_at,
            run_dirs=dirs,
            warnings=[f"{job.name}: {why}; left out"],
            computed_at=time.time(),
        )
        return StandingUpdate(row, {}, {})

    def prepare(self, job: JobInfo) -> StandingUpdate:
        """The row of ``job``'s model (``job`` done or about to be; on a settled benchmark over all its rounds) and
        its marks against every model already stored."""
        t0 = time.perf_counter()
        rule = self.rule(job.benchmark, job.benchmark_version)
        root = job.root_id
        stored = self.stores.standings.rows(job.benchmark, job.benchmark_version)
        others = [r for r in stored if r.job_id != root]
        gone = any(r.job_id == root and withdrawn(r) for r in stored)  # stays withdrawn
        dirs = self.model_dirs(job)
        me = self._load(root, job.name, dirs)
        compared = {r.job_id: r.repetitions for r in others}
        if me is None:
            why = self.damaged.get(root) or f"run directory {Path(job.run_dir)} is missing or incomplete"
            return self.unranked(job, why, dirs)
        comp = build_comparison({me.name: me.runs}, self.settings)
        settled = comp.settled
        better: dict[str, list[str]] = {k: [] for k in MARKED}
        beaten_by: dict[str, list[str]] = {}
        unbeaten_by: dict[str, list[str]] = {}  # a later round: marks on fewer rounds may no longer hold
        warnings = list(comp.warnings)
        for other in others:
            them = None if not other.ranked else self._load(other.job_id, other.name, other.run_dirs)
            if them is None:
                continue
            if them.class_names != me.class_names:
                warnings.append(f"{me.name} and {other.name} were run on different classes; not compared")
                continue
            wins = significance_marks(me, them, self.n_boot)
            for metric, winner in wins:
                if winner == me.job_id:
                    better[metric].append(them.name)
                else:
                    beaten_by.setdefault(them.job_id, []).append(metric)
            if rule is not None and len(dirs) > 1:
                unbeaten_by[them.job_id] = [m for m in MARKED if (m, them.job_id) not in wins]
        standing = replace(Standing.of(comp.leaderboard[0], better, COLUMNS), name=job.name, repetitions=len(dirs))
        row = StandingInfo(
            job_id=root,
            benchmark=job.benchmark,
            version=job.benchmark_version,
            standing=standing,
            finished_at=job.finished_at,
            run_dirs=dirs,
            warnings=warnings,
            interval_note=comp.settings.interval_note,
            computed_at=time.time(),
            settled=None
            if rule is None
            else SettledInfo(settled.pooled.get(me.name), settled.sources, len(dirs), gone),
        )
        log.info(
            "standings of %s (%s): compared with %d models in %.1fs",
            job.name,
            job.benchmark,
            len(compared),
            time.perf_counter() - t0,
        )
        return StandingUpdate(row, beaten_by, compared, unbeaten_by)

    def reconcile(self, job: JobInfo, update: StandingUpdate) -> int:
        """Compare ``job``'s model with the models stored while its row was being computed (they finished, or a
        settled one finished a round, meanwhile and did not see this one); returns how many. Marks are set
        idempotently, so a pair both sides compare is marked once; on a settled benchmark both ways."""
        settled = self.rule(job.benchmark, job.benchmark_version) is not None
        seen = update.compared
        rows = [
            r
            for r in self.stores.standings.rows(job.benchmark, job.benchmark_version)
            if r.job_id != job.root_id and seen.get(r.job_id) != r.repetitions
        ]
        me = self._load(job.root_id, job.name, update.row.run_dirs)
        marks = []
        for other in rows:
            them = None if not other.ranked else self._load(other.job_id, other.name, other.run_dirs)
            if me is None or them is None or them.class_names != me.class_names:
                continue
            wins = significance_marks(me, them, self.n_boot)
            for a, b in ((me, them), (them, me)):
                marks += [
                    (a.job_id, m, b.name, (m, a.job_id) in wins) for m in MARKED if settled or (m, a.job_id) in wins
                ]
        self.stores.standings.set_marks(job.benchmark, job.benchmark_version, marks)
        return len(rows)

    def settle(self, benchmark: str, version: str) -> dict[str, int]:
        """On a settled benchmark version: order the board and judge its neighbours whose verdict misses rounds they
        share (every neighbour under a family-wise rule, Holm over them), store the verdicts, and queue the next
        round of each model the rule asks for (:mod:`~genEval.service.server.standings.settled`); returns submission
        job id -> round queued. Nothing on a fixed benchmark."""
        rule = self.rule(benchmark, version)
        if rule is None:
            return {}
        stored = self.stores.verdicts.of_version(benchmark, version)

        def keep(found: StoredVerdict | None) -> None:
            if found is not None and self.stores.verdicts.store(benchmark, version, found):
                stored[pair_key(found.upper, found.lower)] = found

        def verdict(pair: Neighbours) -> PairVerdict:
            pair = pair_of(pair.upper, pair.lower, stored)
            if not pair.fresh:
                keep(self._judge(pair, rule))
            return pair_of(pair.upper, pair.lower, stored).verdict()

        _, pairs, _ = board_order(self.stores.standings.rows(benchmark, version), verdict)
        if rule.familywise and len(pairs) > 1:
            looks = [self._looks(p) for p in pairs]
            if all(lk is not None for lk in looks):
                for p, v in zip(pairs, holm(looks, rule.test())):
                    keep(StoredVerdict(p.upper.job_id, p.lower.job_id, min(p.upper.repetitions, p.lower.repetitions),
                                       v.to_dict()))  # fmt: skip
        queued = {}
        for job_id, r in rounds_wanted([pair_of(p.upper, p.lower, stored) for p in pairs], rule).items():
            root = self.stores.jobs.get(job_id)
            seed = round_seed(self.stores.benchmarks.round_base(benchmark, version), r)
            if root is not None and self.stores.jobs.queue_round(root, r, seed) is not None:
                queued[job_id] = r
                log.info("settled %s: %s is open against a neighbour; round %d queued", benchmark, root.name, r)
        return queued

    def _runs(self, pair: Neighbours) -> tuple[Contender, Contender] | None:
        """The loaded runs of two neighbours (None: they cannot be compared)."""
        a, b = (self._load(r.job_id, r.name, r.run_dirs) for r in (pair.upper, pair.lower))
        return None if a is None or b is None or a.class_names != b.class_names else (a, b)

    def _judge(self, pair: Neighbours, rule: StopRule) -> StoredVerdict | None:
        """The verdict on two neighbours over the rounds they share (None: their runs cannot be compared)."""
        if (loaded := self._runs(pair)) is None:
            return None
        a, b = loaded
        found = judge((a.name, a.runs), (b.name, b.runs), pair.rounds, RANK_BY, a.num_classes, rule)
        return StoredVerdict(a.job_id, b.job_id, pair.rounds, found.to_dict())

    def _looks(self, pair: Neighbours) -> PairLooks | None:
        """The looks of two neighbours over the rounds they share, for a family-wise rule (None: not comparable)."""
        if (loaded := self._runs(pair)) is None:
            return None
        a, b = loaded
        return pair_looks((a.name, a.runs), (b.name, b.runs), pair.rounds, RANK_BY, a.num_classes)

    def reuse(self, benchmark: str, version: str) -> dict | None:
        """Recompute and store a settled version's reuse budget from every ranked model's rounds (docs/scores.md,
        :mod:`genEval.service.reuse`); returns it (None on a fixed benchmark)."""
        if self.rule(benchmark, version) is None:
            return None
        models = {}
        for row in self.stores.standings.rows(benchmark, version):
            loaded = None if not row.ranked else self._load(row.job_id, row.name, row.run_dirs)
            if loaded is not None:
                models[row.job_id] = loaded.runs
        registered = self.stores.benchmarks.get(benchmark, version)
        budget = version_budget(models, registered and registered.config.get("reuse"))
        self.stores.benchmarks.set_reuse(benchmark, version, budget)
        return budget

    def backfill(self) -> int:
        """Store rows for done jobs that have none (jobs finished before standings were stored, e.g. by an older
        worker); returns how many were added."""
        added = 0
        for job in self.stores.endings.unranked():
            update = self.prepare(job)
            if self.stores.endings.add(update.row, update.beaten_by):
                self.reconcile(job, update)
                self.settle(job.benchmark, job.benchmark_version)
                added += 1
        if added:
            log.info("standings: added %d finished job(s) that had no stored row", added)
        return added


class HoldsEndings(Protocol):
    """What :func:`record_finished` needs of its caller's database: the endings store (the
    :class:`~genEval.service.server.database.Database` and its ``db.leaderboard`` both have it)."""

    endings: JobEndings


def record_finished(
    db: HoldsEndings,
    builder: StandingsBuilder,
    job: JobInfo,
    worker_id: str,
    result: dict,
    images: int | None = None,
    update: StandingUpdate | None = None,
) -> bool:
    """Finish ``job`` with its standings row (computed now unless ``update`` is given), then compare it with the
    models that finished meanwhile and, on a settled benchmark, judge the neighbours and queue the rounds the rule
    asks for (:meth:`StandingsBuilder.settle`). False when the worker no longer held the job (nothing stored).
    ``db``: the database, or only its ``db.leaderboard`` (the endings store is all it uses)."""
    update = update if update is not None else builder.prepare(job)
    if not db.endings.finish(
        job.id,
        worker_id,
        result,
        images,
        standing=update.row,
        beaten_by=update.beaten_by,
        unbeaten_by=update.unbeaten_by,
    ):
        return False
    try:
        builder.reconcile(job, update)
    except Exception:  # noqa: BLE001 - the job is done; a missing mark is logged, not a failed job
        log.exception("standings of %s: comparing with the models that finished meanwhile failed", job.name)
    try:
        builder.settle(job.benchmark, job.benchmark_version)
    except Exception:  # noqa: BLE001 - the next finished round (or the backfill) judges and queues again
        log.exception("standings of %s: judging its neighbours or queueing its next round failed", job.name)
    try:
        builder.reuse(job.benchmark, job.benchmark_version)
    except Exception:  # noqa: BLE001 - the budget is recomputed when the next job of the version finishes
        log.exception("reuse budget of %s %s: not updated", job.benchmark, job.benchmark_version)
    return True
