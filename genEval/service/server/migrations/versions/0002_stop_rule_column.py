"""``benchmarks.stop``: a benchmark version's comparison settings (its stop rule,
:class:`~genEval.comparisons.settings.StopRule`) as a typed column, read by the leaderboard and the workers instead
of the ``stop`` key of the version's config JSON; filled from that key for the versions already registered (a
fixed benchmark's stays null).

Revision ID: 0002_stop_rule_column
Revises: 0001_baseline
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_stop_rule_column"
down_revision = "0001_baseline"
branch_labels = None
depends_on = None

#: The table as this revision reads and writes it (not the store's model, which later revisions may change).
benchmarks = sa.table(
    "benchmarks", sa.column("name", sa.String), sa.column("version", sa.String), sa.column("config", sa.JSON),
    sa.column("stop", sa.JSON),
)  # fmt: skip


def upgrade() -> None:
    with op.batch_alter_table("benchmarks") as batch:
        batch.add_column(sa.Column("stop", sa.JSON(none_as_null=True), nullable=True))
    bind = op.get_bind()
    for name, version, config in bind.execute(sa.select(benchmarks.c.name, benchmarks.c.version, benchmarks.c.config)):
        stop = (config or {}).get("stop")
        if stop:
            bind.execute(
                benchmarks.update().where(benchmarks.c.name == name, benchmarks.c.version == version).values(stop=stop)
            )


def downgrade() -> None:
    with op.batch_alter_table("benchmarks") as batch:
        batch.drop_column("stop")
