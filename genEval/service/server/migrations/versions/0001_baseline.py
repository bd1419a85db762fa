"""The schema of genEval before Alembic: every table as the stores declared it, created in a fresh database and
completed in one an earlier genEval made (the work of the hand-rolled ``upgrade()`` this revision replaces).

A database made before Alembic has tables but no ``alembic_version``: each missing column is added (with its server
default, NOT NULL, where it has one; nullable otherwise, since existing rows have no value), each missing index made,
the unique index of names replaced by the one of active names and rounds. A database that already holds two active
jobs of one name (accepted by a genEval without the index) keeps working without the index, with an error in the log
naming them, until an admin cancels one.

Revision ID: 0001_baseline
Revises:
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op

from genEval.service.server.migrations.names import NAMED_SQL, make_name_index

revision = "0001_baseline"
down_revision = None
branch_labels = None
depends_on = None

log = logging.getLogger("genEval.service.server.migrations")
NAME_INDEX, OLD_NAME_INDEX = "uq_jobs_active_name_round", "uq_jobs_active_name"
BASELINE = sa.MetaData()
sa.Table(
    "benchmarks",
    BASELINE,
    sa.Column("name", sa.String(length=100), nullable=False),
    sa.Column("version", sa.String(length=64), nullable=False),
    sa.Column("title", sa.String(length=300), nullable=False),
    sa.Column("config", sa.JSON(), nullable=False),
    sa.Column("registered_at", sa.Float(), nullable=False),
    sa.Column("round_base", sa.Integer(), nullable=True),
    sa.Column("reuse", sa.JSON(), nullable=True),
    sa.PrimaryKeyConstraint("name", "version"),
)
sa.Table(
    "jobs",
    BASELINE,
    sa.Column("id", sa.String(length=32), nullable=False),
    sa.Column("benchmark", sa.String(length=100), nullable=False),
    sa.Column("benchmark_version", sa.String(length=64), nullable=False),
    sa.Column("name", sa.String(length=100), nullable=False),
    sa.Column("owner_id", sa.String(length=32), nullable=False),
    sa.Column("owner_name", sa.String(length=200), nullable=False),
    sa.Column("model", sa.JSON(), nullable=False),
    sa.Column("config", sa.JSON(), nullable=False),
    sa.Column("overrides", sa.JSON(), nullable=False),
    sa.Column("seeds", sa.JSON(), nullable=False),
    sa.Column("run_dir", sa.String(length=300), nullable=False),
    sa.Column("upload_path", sa.String(length=300), nullable=True),
    sa.Column("status", sa.String(length=16), nullable=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.Column("started_at", sa.Float(), nullable=True),
    sa.Column("finished_at", sa.Float(), nullable=True),
    sa.Column("worker_id", sa.String(length=100), nullable=True),
    sa.Column("lease_expires_at", sa.Float(), nullable=True),
    sa.Column("heartbeat_at", sa.Float(), nullable=True),
    sa.Column("attempts", sa.Integer(), nullable=False),
    sa.Column("images_done", sa.Integer(), nullable=False),
    sa.Column("images_total", sa.Integer(), nullable=True),
    sa.Column("eta_s", sa.Float(), nullable=True),
    sa.Column("error", sa.Text(), nullable=True),
    sa.Column("result", sa.JSON(), nullable=True),
    sa.Column("error_detail", sa.Text(), nullable=True),
    sa.Column("round", sa.Integer(), server_default=sa.text("0"), nullable=False),
    sa.Column("parent_id", sa.String(length=32), nullable=True),
    sa.PrimaryKeyConstraint("id"),
    sa.Index("ix_jobs_benchmark", "benchmark", unique=False),
    sa.Index("ix_jobs_created_at", "created_at", unique=False),
    sa.Index("ix_jobs_owner_id", "owner_id", unique=False),
    sa.Index("ix_jobs_parent_id", "parent_id", unique=False),
    sa.Index("ix_jobs_status", "status", unique=False),
    sa.Index(
        "uq_jobs_active_name_round",
        "benchmark",
        "benchmark_version",
        "name",
        "round",
        unique=True,
        sqlite_where=sa.text(NAMED_SQL),
        postgresql_where=sa.text(NAMED_SQL),
    ),
)
sa.Table(
    "standings",
    BASELINE,
    sa.Column("job_id", sa.String(length=32), nullable=False),
    sa.Column("benchmark", sa.String(length=100), nullable=False),
    sa.Column("version", sa.String(length=64), nullable=False),
    sa.Column("name", sa.String(length=100), nullable=False),
    sa.Column("finished_at", sa.Float(), nullable=True),
    sa.Column("run_dirs", sa.JSON(), nullable=False),
    sa.Column("repetitions", sa.Integer(), nullable=False),
    sa.Column("scores", sa.JSON(none_as_null=True), nullable=True),
    sa.Column("better_than", sa.JSON(), nullable=False),
    sa.Column("warnings", sa.JSON(), nullable=False),
    sa.Column("interval_note", sa.Text(), nullable=False),
    sa.Column("computed_at", sa.Float(), nullable=False),
    sa.Column("marks", sa.JSON(), nullable=False),
    sa.Column("settled", sa.JSON(none_as_null=True), nullable=True),
    sa.PrimaryKeyConstraint("job_id"),
    sa.Index("ix_standings_benchmark", "benchmark", unique=False),
    sa.Index("ix_standings_version", "version", unique=False),
)
sa.Table(
    "tokens",
    BASELINE,
    sa.Column("id", sa.String(length=32), nullable=False),
    sa.Column("name", sa.String(length=200), nullable=False),
    sa.Column("role", sa.String(length=16), nullable=False),
    sa.Column("token_sha256", sa.String(length=64), nullable=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.Column("revoked_at", sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint("id"),
    sa.Index("ix_tokens_token_sha256", "token_sha256", unique=True),
)
sa.Table(
    "upload_attempts",
    BASELINE,
    sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
    sa.Column("owner_id", sa.String(length=32), nullable=False),
    sa.Column("at", sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sa.Index("ix_upload_attempts_at", "at", unique=False),
    sa.Index("ix_upload_attempts_owner_id", "owner_id", unique=False),
)
sa.Table(
    "uploads",
    BASELINE,
    sa.Column("id", sa.String(length=32), nullable=False),
    sa.Column("owner_id", sa.String(length=32), nullable=False),
    sa.Column("kind", sa.String(length=16), nullable=False),
    sa.Column("sha256", sa.String(length=64), nullable=False),
    sa.Column("size", sa.Integer(), nullable=False),
    sa.Column("filename", sa.String(length=200), nullable=False),
    sa.Column("path", sa.String(length=300), nullable=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sa.Index("ix_uploads_owner_id", "owner_id", unique=False),
)
sa.Table(
    "verdicts",
    BASELINE,
    sa.Column("first", sa.String(length=32), nullable=False),
    sa.Column("second", sa.String(length=32), nullable=False),
    sa.Column("benchmark", sa.String(length=100), nullable=False),
    sa.Column("version", sa.String(length=64), nullable=False),
    sa.Column("upper", sa.String(length=32), nullable=False),
    sa.Column("rounds", sa.Integer(), nullable=False),
    sa.Column("verdict", sa.JSON(), nullable=False),
    sa.Column("computed_at", sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint("first", "second"),
    sa.Index("ix_verdicts_version", "version", unique=False),
)
sa.Table(
    "workers",
    BASELINE,
    sa.Column("id", sa.String(length=100), nullable=False),
    sa.Column("host", sa.String(length=200), nullable=False),
    sa.Column("pid", sa.Integer(), nullable=False),
    sa.Column("device", sa.String(length=50), nullable=False),
    sa.Column("started_at", sa.Float(), nullable=False),
    sa.Column("last_seen", sa.Float(), nullable=False),
    sa.Column("job_id", sa.String(length=32), nullable=True),
    sa.Column("stopped_at", sa.Float(), nullable=True),
    sa.Column("lease_s", sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint("id"),
)


def _complete(bind, table: sa.Table, have: set[str]) -> None:
    """Add the columns of ``table`` that an earlier genEval's table lacks (``have``: its columns)."""
    for column in table.columns:
        if column.name in have:
            continue
        kind = column.type.compile(dialect=bind.dialect)
        if column.server_default is not None:
            kind += f" DEFAULT {column.server_default.arg.text} NOT NULL"
        op.execute(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}")
        log.info("database: added column %s.%s", table.name, column.name)


def upgrade() -> None:
    bind = op.get_bind()
    for table in BASELINE.sorted_tables:
        found = sa.inspect(bind)
        if not found.has_table(table.name):
            table.create(bind)
            continue
        _complete(bind, table, {c["name"] for c in found.get_columns(table.name)})
        indexes = {i["name"] for i in sa.inspect(bind).get_indexes(table.name)}
        if OLD_NAME_INDEX in indexes:
            op.execute(f"DROP INDEX {OLD_NAME_INDEX}")
        for index in table.indexes:
            if index.name not in indexes:
                (make_name_index if index.name == NAME_INDEX else lambda b, i: i.create(b))(bind, index)


def downgrade() -> None:
    BASELINE.drop_all(op.get_bind())  # below the baseline: no tables
