"""Benchmark versions re-keyed to the canonical spec: a version was the hash of a preset's resolved YAML (import
paths included); it is now the hash of :meth:`genEval.service.benchmarks.Benchmark.spec` (each role by its component
name and settings, each bundle by its ``to_dict()``, a ``schema_version``). Every stored version moves to the one
its record gives now, in every table that names it, so its jobs, standings, verdicts, round secret and reuse budget
carry over (:func:`genEval.service.server.benchmarks.store.remap_versions`; docs/service.md, "Benchmark versions").
A data migration: run once per database, recorded in ``alembic_version``.

Revision ID: 0003_remap_versions
Revises: 0002_stop_rule_column
"""

from __future__ import annotations

from alembic import op

from genEval.service.server.benchmarks.store import remap_versions

revision = "0003_remap_versions"
down_revision = "0002_stop_rule_column"
branch_labels = None
depends_on = None


def upgrade() -> None:
    remap_versions(op.get_bind())


def downgrade() -> None:
    """The old versions cannot be computed again (the old hash read YAML files that have since moved)."""
    raise NotImplementedError("0003_remap_versions cannot be undone: restore the database from before the upgrade")
