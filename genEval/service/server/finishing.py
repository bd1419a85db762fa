"""How a job's end reaches both the jobs and the standings tables: one use case per ending, each one transaction
handed to the stores of both slices, so that neither slice imports the other.

==========================  ===================================================================================
:meth:`JobEndings.finish`   a worker's job is done and its leaderboard row stored (on a settled benchmark: its
                            submission's row over one round more), with the marks it sets on other rows
:meth:`JobEndings.withdraw` a settled model's submission is cancelled with its rounds, its row marked withdrawn
:meth:`JobEndings.add`      the row of a job that is already done (finished before standings were stored)
:meth:`JobEndings.unranked` done submissions without a row yet (the backfill's work; the page counts them)
==========================  ===================================================================================

Every transaction that writes a version's standings takes the version's lock first
(:meth:`~genEval.service.server.benchmarks.store.BenchmarkStore.lock`), so a job finishing while another is compared is
seen done (:mod:`~genEval.service.server.standings.store`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from sqlalchemy import func, select

from genEval.service.records import JobInfo, StandingInfo
from genEval.service.server.jobs.queue import JobQueue
from genEval.service.server.jobs.rows import JobRow
from genEval.service.server.jobs.store import JobStore
from genEval.service.server.session import Sessions, record
from genEval.service.server.standings.store import StandingRow, StandingStore


class JobEndings:
    """The endings of jobs that write both slices (see the module docstring)."""

    def __init__(self, sessions: Sessions, jobs: JobStore, queue: JobQueue, standings: StandingStore) -> None:
        self.sessions, self.jobs, self.queue, self.standings = sessions, jobs, queue, standings

    def finish(
        self,
        job_id: str,
        worker_id: str,
        result: dict,
        images: int | None = None,
        standing: StandingInfo | None = None,
        beaten_by: Mapping[str, Sequence[str]] | None = None,
        unbeaten_by: Mapping[str, Sequence[str]] | None = None,
    ) -> bool:
        """Mark a held job done with its ``result`` summary (and ``images`` evaluated in all) and, in the same
        transaction, store its ``standing`` (finished at the job's time), add its name under each metric of
        ``beaten_by`` (job id -> metrics) to those rows and take it off each metric of ``unbeaten_by``. False, and
        nothing stored, when the worker no longer holds the job."""
        with self.sessions.write() as s:
            now = self.queue.finish_in(s, job_id, worker_id, result, images)
            if now is None:
                return False
            if standing is not None:
                self.standings.store_in(s, replace(standing, finished_at=now), beaten_by or {}, unbeaten_by)
            return True

    def withdraw(self, root_id: str) -> JobInfo | None:
        """Withdraw a settled benchmark's model, whose submission is job ``root_id``: cancel its queued and running
        jobs and mark its leaderboard row withdrawn, in one transaction. Returns the submission's job (None when it
        does not exist); a model withdrawn twice stays withdrawn."""
        with self.sessions.write() as s:
            job = self.jobs.withdraw_in(s, root_id)
            if job is not None:
                self.standings.mark_withdrawn_in(s, root_id)
            return job

    def add(self, standing: StandingInfo, beaten_by: Mapping[str, Sequence[str]] | None = None) -> bool:
        """Store the row of a job that is already done (a job finished before standings were stored), at the job's
        finish time; False when the job is not done."""
        with self.sessions.write() as s:
            self.queue.lock(s, standing.benchmark, standing.version)
            job = s.get(JobRow, standing.job_id)
            if job is None or job.status != "done":
                return False
            self.standings.store_in(s, replace(standing, finished_at=job.finished_at), beaten_by or {})
            return True

    @staticmethod
    def _unranked(*where):
        """Done submissions without a stored row (a settled benchmark's later rounds have none of their own: they
        add to their submission's row), and ``where``."""
        return (
            JobRow.status == "done",
            StandingRow.job_id.is_(None),
            JobRow.parent_id.is_(None),
            *where,
        )

    def unranked(self, benchmark: str | None = None, version: str | None = None) -> list[JobInfo]:
        """Done jobs without a stored standing row (finished before standings were stored), oldest first."""
        where = [JobRow.benchmark == benchmark] if benchmark is not None else []
        where += [JobRow.benchmark_version == version] if version is not None else []
        q = (
            select(JobRow)
            .outerjoin(StandingRow, StandingRow.job_id == JobRow.id)
            .where(*self._unranked(*where))
            .order_by(JobRow.finished_at, JobRow.id)
        )
        with self.sessions.read() as s:
            return [record(JobInfo, r) for r in s.scalars(q)]

    def count_unranked(self, benchmark: str, version: str) -> int:
        """How many done jobs of a version have no stored row yet (the page says so)."""
        q = (
            select(func.count())
            .select_from(JobRow)
            .outerjoin(StandingRow, StandingRow.job_id == JobRow.id)
            .where(*self._unranked(JobRow.benchmark == benchmark, JobRow.benchmark_version == version))
        )
        with self.sessions.read() as s:
            return int(s.execute(q).scalar_one())
