"""The ``uploads`` table and its store: model files a submitter uploaded, kept as ``home/uploads/<sha256>.<ext>``."""

from __future__ import annotations

from sqlalchemy import Float, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from genEval.service.records import UploadInfo, new_id
from genEval.service.server.session import Base, Sessions, record


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


class UploadStore:
    """The ``uploads`` table."""

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
