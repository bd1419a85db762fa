"""The ``jobs`` table: one row per submission (and per later round of a submission on a settled benchmark), its
seeds, status, lease and result.

The name rule (one queued, running or done job per name, benchmark version and round: one leaderboard row per model,
and each round of it once) is a partial unique index, ``uq_jobs_active_name_round``, so the database itself refuses a
second one however many servers submit, or workers queue a model's next round, at once. (A genEval from before
rounds had ``uq_jobs_active_name``, without the round; the baseline migration replaces it:
:mod:`genEval.service.server.migrations`.)
"""

from __future__ import annotations

from sqlalchemy import JSON, Float, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from genEval.service.server.session import Base

#: The statuses that hold a name (as SQL, for the partial index).
NAMED_SQL = text("status IN ('queued', 'running', 'done')")
#: The unique index of names and rounds.
NAME_INDEX = "uq_jobs_active_name_round"


class JobRow(Base):
    __tablename__ = "jobs"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    benchmark: Mapped[str] = mapped_column(String(100), index=True)
    benchmark_version: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(100))
    owner_id: Mapped[str] = mapped_column(String(32), index=True)
    owner_name: Mapped[str] = mapped_column(String(200))
    model: Mapped[dict] = mapped_column(JSON)
    config: Mapped[dict] = mapped_column(JSON)
    overrides: Mapped[dict] = mapped_column(JSON)
    seeds: Mapped[list] = mapped_column(JSON)
    run_dir: Mapped[str] = mapped_column(String(300))
    upload_path: Mapped[str | None] = mapped_column(String(300), nullable=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    created_at: Mapped[float] = mapped_column(Float, index=True)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    worker_id: Mapped[str | None] = mapped_column(String(100), nullable=True)
    lease_expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    heartbeat_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    images_done: Mapped[int] = mapped_column(Integer, default=0)
    images_total: Mapped[int | None] = mapped_column(Integer, nullable=True)
    eta_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)  # the reason, as the submitter sees it
    result: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    error_detail: Mapped[str | None] = mapped_column(Text, nullable=True)  # the full text (admins, server log)
    #: A settled benchmark's round of the model (0: the submission) and the submission's job id (rounds >= 1).
    round: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"), nullable=False)
    parent_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)

    __table_args__ = (
        Index(
            NAME_INDEX,
            "benchmark",
            "benchmark_version",
            "name",
            "round",
            unique=True,
            sqlite_where=NAMED_SQL,
            postgresql_where=NAMED_SQL,
        ),
    )
