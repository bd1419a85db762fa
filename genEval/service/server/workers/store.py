"""The ``workers`` table and its store: every worker that started, when it was last seen (by the database's clock) and
what it runs. One not seen within its lease is ``gone``; one stopped or gone for ``retention_s`` is dropped
(:meth:`WorkerStore.prune`)."""

from __future__ import annotations

from sqlalchemy import Float, Integer, String, delete, or_, select, update
from sqlalchemy.orm import Mapped, mapped_column

from genEval.service.records import WORKER_RETENTION_S, WorkerInfo
from genEval.service.server.session import Base, Sessions, record


class WorkerRow(Base):
    __tablename__ = "workers"
    id: Mapped[str] = mapped_column(String(100), primary_key=True)
    host: Mapped[str] = mapped_column(String(200))
    pid: Mapped[int] = mapped_column(Integer)
    device: Mapped[str] = mapped_column(String(50))
    started_at: Mapped[float] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)
    job_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    stopped_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    lease_s: Mapped[float | None] = mapped_column(Float, nullable=True)  # gone when not seen for this long


class WorkerStore:
    """The ``workers`` table."""

    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions

    def register(self, worker_id: str, host: str, pid: int, device: str, lease_s: float | None = None) -> None:
        """Record a worker that starts; ``lease_s``: it counts as gone when not seen for this long."""
        with self.sessions.write() as s:
            now = self.sessions.now_in(s)
            row = WorkerRow(id=worker_id, host=host, pid=pid, device=device, started_at=now, last_seen=now)
            row.job_id, row.stopped_at, row.lease_s = None, None, lease_s
            s.merge(row)

    def seen(self, worker_id: str, job_id: str | None) -> None:
        """The worker is alive (running ``job_id``, or idle)."""
        with self.sessions.write() as s:
            now = self.sessions.now_in(s)
            s.execute(update(WorkerRow).where(WorkerRow.id == worker_id).values(last_seen=now, job_id=job_id))

    def stopped(self, worker_id: str) -> None:
        with self.sessions.write() as s:
            now = self.sessions.now_in(s)
            s.execute(update(WorkerRow).where(WorkerRow.id == worker_id).values(stopped_at=now, job_id=None))

    def list(self, retention_s: float = WORKER_RETENTION_S) -> list[WorkerInfo]:
        """Workers seen within ``retention_s`` (stopped and gone ones included: :meth:`WorkerInfo.state` tells),
        oldest first."""
        with self.sessions.read() as s:
            q = select(WorkerRow).where(WorkerRow.last_seen >= self.sessions.now_in(s) - retention_s)
            return [record(WorkerInfo, r) for r in s.scalars(q.order_by(WorkerRow.started_at))]

    def live(self) -> int:
        """How many workers are neither stopped nor gone (by the database's clock)."""
        now = self.sessions.now()
        return sum(w.state(now) in ("busy", "idle") for w in self.list())

    def prune(self, retention_s: float = WORKER_RETENTION_S) -> int:
        """Drop the workers that stopped, or were last seen, more than ``retention_s`` ago; returns how many."""
        with self.sessions.write() as s:
            cutoff = self.sessions.now_in(s) - retention_s
            res = s.execute(delete(WorkerRow).where(or_(WorkerRow.last_seen < cutoff, WorkerRow.stopped_at < cutoff)))
            return res.rowcount
