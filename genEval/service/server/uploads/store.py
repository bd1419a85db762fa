"""The ``uploads`` table and its store: model files a submitter uploaded, kept as ``home/uploads/<sha256>.<ext>``; and
the ``upload_attempts`` table, every upload a submitter started (refused ones too: each costs a check), which the
hourly quota counts (:meth:`UploadStore.take_attempt`), so that it holds across restarts and server processes."""

from __future__ import annotations

from sqlalchemy import Float, Integer, String, delete, func, select
from sqlalchemy.orm import Mapped, mapped_column

from genEval.service.records import UploadInfo, new_id
from genEval.service.server.session import Base, Sessions, record
from genEval.service.server.tokens.store import TokenRow


class UploadRow(Base):
    __tablename__ = "uploads"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner_id: Mapped[str] = mapped_column(String(32), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    sha256: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(Integer)
    filename: Mapped[str] = mapped_column(String(200))
    path: Mapped[str] = mapped_column(String(300))
    created_at: Mapped[float] = mapped_column(Float)


class UploadAttemptRow(Base):
    __tablename__ = "upload_attempts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    owner_id: Mapped[str] = mapped_column(String(32), index=True)
    at: Mapped[float] = mapped_column(Float, index=True)


class UploadStore:
    """The ``uploads`` and ``upload_attempts`` tables."""

    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions

    def add(self, owner_id: str, kind: str, sha256: str, size: int, filename: str, path: str) -> UploadInfo:
        """Record a kept upload of ``owner_id``'s (``path`` relative to the service home)."""
        row = UploadRow(id=new_id(), owner_id=owner_id, kind=kind, sha256=sha256, size=size, filename=filename)
        row.path = path
        with self.sessions.write() as s:
            row.created_at = self.sessions.now_in(s)
            s.add(row)
        return record(UploadInfo, row)

    def get(self, upload_id: str) -> UploadInfo | None:
        with self.sessions.read() as s:
            row = s.get(UploadRow, upload_id)
            return None if row is None else record(UploadInfo, row)

    def take_attempt(self, owner_id: str, limit: int, window_s: float) -> float | None:
        """Count an upload attempt of ``owner_id`` unless it made ``limit`` in the last ``window_s`` seconds (by the
        database's clock); returns None when counted, else the seconds until the oldest of them leaves the window.
        One transaction (the token's row locked on PostgreSQL), so simultaneous uploads of one token on any number of
        servers cannot pass the limit together; attempts older than the window are dropped on the way."""
        with self.sessions.write() as s:
            if self.sessions.dialect == "postgresql":
                s.execute(select(TokenRow.id).where(TokenRow.id == owner_id).with_for_update())
            now = self.sessions.now_in(s)
            s.execute(
                delete(UploadAttemptRow).where(
                    UploadAttemptRow.owner_id == owner_id, UploadAttemptRow.at <= now - window_s
                )
            )
            q = select(func.count(), func.min(UploadAttemptRow.at)).where(UploadAttemptRow.owner_id == owner_id)
            count, oldest = s.execute(q).one()
            if count >= limit:
                return max(0.0, float(oldest) + window_s - now)
            s.add(UploadAttemptRow(owner_id=owner_id, at=now))
            return None
