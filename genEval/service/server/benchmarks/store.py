"""The ``benchmarks`` table and its store: every benchmark version a server has offered (a version is the hash of a
preset's config, :mod:`genEval.service.benchmarks`), with the config it stood for."""

from __future__ import annotations

from sqlalchemy import JSON, Float, String, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from genEval.service.records import BenchmarkVersion
from genEval.service.server.session import Base, Sessions, record


class BenchmarkRow(Base):
    __tablename__ = "benchmarks"
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    version: Mapped[str] = mapped_column(String(64), primary_key=True)
    title: Mapped[str] = mapped_column(String(300))
    config: Mapped[dict] = mapped_column(JSON)
    registered_at: Mapped[float] = mapped_column(Float)


class BenchmarkStore:
    """The ``benchmarks`` table."""

    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions

    def register(self, name: str, version: str, title: str, config: dict) -> BenchmarkVersion:
        """Record a benchmark version (idempotent: an already registered version keeps its date)."""
        with self.sessions.write() as s:
            row = s.get(BenchmarkRow, (name, version))
            if row is None:
                row = BenchmarkRow(name=name, version=version, title=title, config=config)
                row.registered_at = self.sessions.now_in(s)
                s.add(row)
            return record(BenchmarkVersion, row)

    def versions(self, name: str) -> list[BenchmarkVersion]:
        """Every registered version of ``name``, newest first."""
        with self.sessions.read() as s:
            rows = s.scalars(
                select(BenchmarkRow).where(BenchmarkRow.name == name).order_by(BenchmarkRow.registered_at.desc())
            )
            return [record(BenchmarkVersion, r) for r in rows]

    def lock(self, s: Session, name: str, version: str) -> None:
        """Serialise the transactions that write one version's standings (a row lock on PostgreSQL; SQLite's write
        transactions are serial already): :mod:`~genEval.service.server.standings.store`."""
        if self.sessions.dialect == "postgresql":
            s.execute(
                select(BenchmarkRow.name)
                .where(BenchmarkRow.name == name, BenchmarkRow.version == version)
                .with_for_update()
            )
