"""The job queue as workers see it: the atomic claim, the lease a worker renews with every heartbeat, and how a job
ends (done with its leaderboard row, failed, handed back); a job whose lease ran out (its worker was killed or its
machine lost) goes back to the queue (:meth:`JobQueue.requeue_expired`, run by workers and by the server), up to
``max_attempts`` times, and is re-run with the same seeds. Leases are on the database's clock
(:mod:`~genEval.service.server.session`).

The claim (:meth:`JobQueue.claim`):

* PostgreSQL: ``SELECT ... FOR UPDATE SKIP LOCKED`` picks the oldest queued job no other transaction holds, and the
  same transaction marks it running: concurrent workers never get the same row and never wait.
* SQLite: the claim is a conditional ``UPDATE ... WHERE id = :id AND status = 'queued'`` inside a ``BEGIN
  IMMEDIATE`` transaction, whose row count tells whether this worker won; a lost race moves on to the next job.
  SQLite is for one machine; workers on several machines need PostgreSQL.

A job becomes ``done`` in the same transaction that stores its standings row: the use case
:mod:`~genEval.service.server.finishing` hands one session to :meth:`JobQueue.finish_in` and to the standings store.
A job's ``error`` is the reason its submitter sees (no paths, hosts, pids or tracebacks:
:func:`genEval.service.errors.public_reason`); ``error_detail`` keeps the full text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from genEval.service.records import JobInfo
from genEval.service.server.jobs.rows import JobRow
from genEval.service.server.session import Sessions, record


def _at(now: float) -> float:
    """A value of :meth:`JobQueue._holder_update` that is the database's time itself."""
    return now


class JobQueue:
    """The ``jobs`` table as workers use it (see the module docstring)."""

    def __init__(self, sessions: Sessions, lock: Callable[[Session, str, str], None]) -> None:
        self.sessions, self.lock = sessions, lock  # the benchmark version's lock (BenchmarkStore.lock)

    def claim(self, worker_id: str, lease_s: float) -> JobInfo | None:
        """Atomically take the oldest queued job for ``worker_id`` (see the module docstring), or None."""
        if self.sessions.dialect == "postgresql":
            with self.sessions.write() as s:
                row = s.scalars(
                    select(JobRow)
                    .where(JobRow.status == "queued")
                    .order_by(JobRow.created_at, JobRow.id)
                    .limit(1)
                    .with_for_update(skip_locked=True)
                ).first()
                if row is None:
                    return None
                now = self.sessions.now_in(s)
                row.status, row.worker_id, row.started_at = "running", worker_id, now
                row.heartbeat_at, row.lease_expires_at, row.attempts = now, now + lease_s, row.attempts + 1
                row.images_done, row.eta_s, row.error = 0, None, None
                return record(JobInfo, row)
        skipped: set[str] = set()
        while True:
            with self.sessions.write() as s:
                q = select(JobRow.id).where(JobRow.status == "queued").order_by(JobRow.created_at, JobRow.id)
                cand = next((j for j in s.scalars(q.limit(len(skipped) + 1)) if j not in skipped), None)
                if cand is None:
                    return None
                now = self.sessions.now_in(s)
                res = s.execute(
                    update(JobRow)
                    .where(JobRow.id == cand, JobRow.status == "queued")
                    .values(
                        status="running",
                        worker_id=worker_id,
                        started_at=now,
                        heartbeat_at=now,
                        lease_expires_at=now + lease_s,
                        attempts=JobRow.attempts + 1,
                        images_done=0,
                        eta_s=None,
                        error=None,
                    )
                )
                if res.rowcount == 1:
                    return record(JobInfo, s.get(JobRow, cand))
            skipped.add(cand)  # another worker won this one: try the next

    def _holder_update(self, job_id: str, holder: str, **values: Any) -> bool:
        """Update a running job only while worker ``holder`` still holds it; False when it lost the job (it was
        cancelled, or re-queued after its lease ran out). A callable value is called with the database's time."""
        with self.sessions.write() as s:
            now = self.sessions.now_in(s)
            res = s.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.worker_id == holder, JobRow.status == "running")
                .values(**{k: v(now) if callable(v) else v for k, v in values.items()})
            )
            return res.rowcount == 1

    def heartbeat(
        self,
        job_id: str,
        worker_id: str,
        lease_s: float,
        images_done: int | None = None,
        images_total: int | None = None,
        eta_s: float | None = None,
    ) -> bool:
        """Renew the lease and record progress; False when the worker no longer holds the job."""
        values: dict[str, Any] = {"heartbeat_at": _at, "lease_expires_at": lambda now: now + lease_s, "eta_s": eta_s}
        if images_done is not None:
            values["images_done"] = images_done
        if images_total is not None:
            values["images_total"] = images_total
        return self._holder_update(job_id, worker_id, **values)

    def finish_in(
        self, s: Session, job_id: str, worker_id: str, result: dict, images: int | None = None
    ) -> float | None:
        """In the transaction of ``s`` (its benchmark version locked first, as every writer of its standings does):
        mark a held job done with its result summary (and ``images`` evaluated in all). Returns the time it finished
        (the database's), or None (nothing changed) when the worker no longer holds the job. Its standings row is
        stored in the same transaction (:meth:`genEval.service.server.finishing.JobEndings.finish`)."""
        extra = {} if images is None else {"images_done": images, "images_total": images}
        now = self.sessions.now_in(s)
        job = s.get(JobRow, job_id)
        if job is None:
            return None
        self.lock(s, job.benchmark, job.benchmark_version)
        res = s.execute(
            update(JobRow)
            .where(JobRow.id == job_id, JobRow.worker_id == worker_id, JobRow.status == "running")
            .values(status="done", finished_at=now, result=result, eta_s=0.0, lease_expires_at=None, **extra)
        )
        return now if res.rowcount == 1 else None

    def finish(self, job_id: str, worker_id: str, result: dict, images: int | None = None) -> bool:
        """:meth:`finish_in` in a transaction of its own, without a standings row (a worker of a genEval from before
        standings were stored did so; the backfill adds the row). False when the worker no longer holds the job."""
        with self.sessions.write() as s:
            return self.finish_in(s, job_id, worker_id, result, images) is not None

    def fail(self, job_id: str, worker_id: str, error: str, detail: str | None = None) -> bool:
        """Mark a held job failed: ``error`` is the reason its submitter sees, ``detail`` the full text (admins)."""
        return self._holder_update(
            job_id,
            worker_id,
            status="failed",
            finished_at=_at,
            error=error,
            error_detail=detail if detail is not None else error,
            eta_s=None,
            lease_expires_at=None,
        )

    def release(self, job_id: str, worker_id: str) -> bool:
        """Put a job this worker holds back in the queue (a worker shutting down cleanly)."""
        return self._holder_update(
            job_id,
            worker_id,
            status="queued",
            worker_id=None,
            lease_expires_at=None,
            eta_s=None,
            attempts=JobRow.attempts - 1,
        )

    def requeue_expired(self, max_attempts: int) -> list[tuple[str, str]]:
        """Jobs whose worker stopped renewing its lease go back to the queue (same seeds, same run
        directory), or fail once they used ``max_attempts``. Returns ``(job id, new status)`` pairs."""
        out = []
        with self.sessions.write() as s:
            now = self.sessions.now_in(s)
            rows = s.scalars(select(JobRow).where(JobRow.status == "running", JobRow.lease_expires_at < now)).all()
            for row in rows:
                lost = row.worker_id
                if row.attempts >= max_attempts:
                    row.status, row.finished_at, row.eta_s = "failed", now, None
                    row.error = (
                        f"the worker running this job stopped responding {row.attempts} times; giving up. An admin "
                        "can re-queue it."
                    )
                    row.error_detail = f"{row.error} (last worker: {lost})"
                else:
                    row.status, row.worker_id, row.eta_s = "queued", None, None
                    row.error = "re-queued: its worker stopped renewing its lease (it was stopped or its machine lost)"
                    row.error_detail = f"re-queued: worker {lost} stopped renewing its lease"
                row.lease_expires_at = None
                out.append((row.id, row.status))
        return out
