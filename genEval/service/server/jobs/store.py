"""The job store: submissions and what admins and submitters do with them (queue, look up, list, count, cancel,
re-queue). What workers do with jobs (claim, heartbeat, finish) is :mod:`~genEval.service.server.jobs.queue`.

Job life cycle: ``queued -> running -> done | failed | cancelled``. A model's name is unique per benchmark version
among its queued, running and done jobs (the index of :mod:`~genEval.service.server.jobs.rows`): two servers
submitting one name at the same instant get one job and one :class:`NameTaken`, and an admin's re-queue of a failed
or cancelled job is refused the same way when its name was taken since. On a settled benchmark a model's later
rounds are jobs of its name too, one per round (:meth:`JobStore.queue_round`), queued by the workers. A token may
have at most ``max_active`` jobs queued or running (:class:`QuotaExceeded`), counted in the submitting transaction
(a model's later rounds count too, though they are queued without a check).
"""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from genEval.service.records import ACTIVE, NAMED, STATUSES, JobInfo, NameTaken, QuotaExceeded, TokenInfo, new_id
from genEval.service.server.jobs.rows import JobRow
from genEval.service.server.session import Sessions, record
from genEval.service.server.tokens.store import TokenRow


class JobStore:
    """The ``jobs`` table as submitters and admins use it."""

    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions

    def submit(
        self,
        *,
        benchmark: str,
        benchmark_version: str,
        name: str,
        owner: TokenInfo,
        model: dict,
        config: dict,
        overrides: dict,
        seeds: list[int],
        upload_path: str | None,
        max_active: int = 0,
    ) -> JobInfo:
        """Queue a job. Raises :class:`NameTaken` when ``name`` already has a queued, running or finished job
        in this benchmark version (one leaderboard row per model), and :class:`QuotaExceeded` when ``owner`` already
        has ``max_active`` jobs queued or running (0: no limit; counted in the same transaction, with the token's row
        locked on PostgreSQL, so simultaneous submits cannot pass it together)."""
        job_id = new_id()
        row = JobRow(
            id=job_id,
            benchmark=benchmark,
            benchmark_version=benchmark_version,
            name=name,
            owner_id=owner.id,
            owner_name=owner.name,
            model=model,
            config=config,
            overrides=overrides,
            seeds=list(seeds),
            run_dir=f"runs/{benchmark}/{job_id}",
            upload_path=upload_path,
            status="queued",
            attempts=0,
            images_done=0,
        )
        try:
            with self.sessions.write() as s:
                if max_active:
                    self._check_quota(s, owner, max_active)
                self._check_name(s, benchmark, benchmark_version, name)
                row.created_at = self.sessions.now_in(s)
                s.add(row)
        except IntegrityError:  # submitted at the same instant elsewhere: the unique index of names refused it
            with self.sessions.read() as s:
                self._check_name(s, benchmark, benchmark_version, name)
            raise
        return record(JobInfo, row)

    def _check_quota(self, s: Session, owner: TokenInfo, max_active: int) -> None:
        if (
            self.sessions.dialect == "postgresql"
        ):  # one submit of a token at a time (SQLite's writers are serial already)
            s.execute(select(TokenRow.id).where(TokenRow.id == owner.id).with_for_update())
        active = s.execute(
            select(func.count()).select_from(JobRow).where(JobRow.owner_id == owner.id, JobRow.status.in_(ACTIVE))
        ).scalar_one()
        if active >= max_active:
            raise QuotaExceeded(
                f"token {owner.name!r} has {active} jobs queued or running, its limit (server setting "
                "max_active_jobs); submit more once some have finished."
            )

    def queue_round(self, root: JobInfo, round: int, seed: int) -> JobInfo | None:
        """Queue round ``round`` (>= 1) of the submission ``root`` on a settled benchmark: its model, config and
        owner, the round's ``seed``, a run directory of its own. None when that round already has a job, in any status
        (queued, running or done: it runs once, however many workers ask at once, the unique index refusing the
        others; failed or cancelled: the model's rounds stop there, until an admin re-queues that job)."""
        if round < 1 or root.round != 0:
            raise ValueError(f"a later round is queued from the submission (round 0) as round >= 1, not {round}.")
        job_id = new_id()
        row = JobRow(
            id=job_id,
            benchmark=root.benchmark,
            benchmark_version=root.benchmark_version,
            name=root.name,
            owner_id=root.owner_id,
            owner_name=root.owner_name,
            model=root.model,
            config=root.config,
            overrides=root.overrides,
            seeds=[int(seed)],
            run_dir=f"runs/{root.benchmark}/{job_id}",
            upload_path=root.upload_path,
            status="queued",
            attempts=0,
            images_done=0,
            round=int(round),
            parent_id=root.id,
        )
        try:
            with self.sessions.write() as s:
                have = select(JobRow.id).where(JobRow.parent_id == root.id, JobRow.round == round)
                if s.scalars(have).first() is not None:
                    return None
                row.created_at = self.sessions.now_in(s)
                s.add(row)
        except IntegrityError:  # another worker queued this round at the same instant
            return None
        return record(JobInfo, row)

    def rounds(self, root_id: str) -> list[JobInfo]:
        """The done rounds of submission ``root_id`` (itself first), in round order."""
        q = select(JobRow).where((JobRow.id == root_id) | (JobRow.parent_id == root_id), JobRow.status == "done")
        with self.sessions.read() as s:
            return [record(JobInfo, r) for r in s.scalars(q.order_by(JobRow.round))]

    @staticmethod
    def _check_name(
        s: Session, benchmark: str, version: str, name: str, but: str | None = None, round: int = 0
    ) -> None:
        """Raise :class:`NameTaken` when another queued, running or done job of the version has ``name`` (in the
        same ``round``: a settled benchmark's later rounds of a model share its name)."""
        q = select(JobRow.id).where(
            JobRow.benchmark == benchmark,
            JobRow.benchmark_version == version,
            JobRow.name == name,
            JobRow.round == round,
            JobRow.status.in_(NAMED),
        )
        taken = s.scalars(q if but is None else q.where(JobRow.id != but)).first()
        if taken is not None:
            raise NameTaken(
                f"benchmark {benchmark} already has a model named {name!r} (job {taken}); choose another name."
            )

    def get(self, job_id: str) -> JobInfo | None:
        with self.sessions.read() as s:
            row = s.get(JobRow, job_id)
            return None if row is None else record(JobInfo, row)

    def list(
        self, status: str | None = None, benchmark: str | None = None, version: str | None = None, limit: int = 1000
    ) -> list[JobInfo]:
        """Jobs, newest first, filtered by status, benchmark and version."""
        q = select(JobRow)
        if status is not None:
            q = q.where(JobRow.status == status)
        if benchmark is not None:
            q = q.where(JobRow.benchmark == benchmark)
        if version is not None:
            q = q.where(JobRow.benchmark_version == version)
        with self.sessions.read() as s:
            return [record(JobInfo, r) for r in s.scalars(q.order_by(JobRow.created_at.desc()).limit(limit))]

    def count(self, benchmark: str | None = None, version: str | None = None) -> dict[str, int]:
        """Jobs per status (of one benchmark and version when given)."""
        q = select(JobRow.status, func.count())
        if benchmark is not None:
            q = q.where(JobRow.benchmark == benchmark)
        if version is not None:
            q = q.where(JobRow.benchmark_version == version)
        with self.sessions.read() as s:
            got = dict(s.execute(q.group_by(JobRow.status)).all())
        return {st: int(got.get(st, 0)) for st in STATUSES}

    def cancel(self, job_id: str) -> JobInfo | None:
        """Cancel a queued or running job (a running job's worker stops it at its next heartbeat). Returns the
        job, or None when it does not exist; a finished job is returned unchanged."""
        with self.sessions.write() as s:
            s.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.status.in_(ACTIVE))
                .values(status="cancelled", finished_at=self.sessions.now_in(s), eta_s=None, lease_expires_at=None)
            )
            row = s.get(JobRow, job_id)
            return None if row is None else record(JobInfo, row)

    def withdraw_in(self, s: Session, root_id: str) -> JobInfo | None:
        """In the transaction of ``s``: cancel the queued and running jobs of the settled model whose submission is
        job ``root_id`` (the submission and its later rounds; a running one's worker stops it at its next heartbeat).
        Returns the submission's job (None when it does not exist). Its leaderboard row is marked withdrawn in the
        same transaction (:meth:`genEval.service.server.finishing.JobEndings.withdraw`)."""
        row = s.get(JobRow, root_id)
        if row is None:
            return None
        s.execute(
            update(JobRow)
            .where((JobRow.id == root_id) | (JobRow.parent_id == root_id), JobRow.status.in_(ACTIVE))
            .values(status="cancelled", finished_at=self.sessions.now_in(s), eta_s=None, lease_expires_at=None)
        )
        s.refresh(row)
        return record(JobInfo, row)

    def requeue(self, job_id: str) -> JobInfo | None:
        """Put a failed or cancelled job back in the queue with its seeds (admin); None when it is missing. Raises
        :class:`NameTaken` when another job has taken its name since (the name rule holds for re-queues too)."""
        try:
            with self.sessions.write() as s:
                row = s.get(JobRow, job_id)
                if row is None:
                    return None
                if row.status in ("failed", "cancelled"):
                    self._check_name(s, row.benchmark, row.benchmark_version, row.name, but=job_id, round=row.round)
                    s.execute(
                        update(JobRow)
                        .where(JobRow.id == job_id, JobRow.status.in_(("failed", "cancelled")))
                        .values(
                            status="queued",
                            worker_id=None,
                            finished_at=None,
                            error=None,
                            error_detail=None,
                            attempts=0,
                            images_done=0,
                            eta_s=None,
                            lease_expires_at=None,
                        )
                    )
                    s.refresh(row)
                return record(JobInfo, row)
        except IntegrityError:  # the name was taken at the same instant
            with self.sessions.read() as s:
                row = s.get(JobRow, job_id)
                self._check_name(s, row.benchmark, row.benchmark_version, row.name, but=job_id, round=row.round)
            raise
