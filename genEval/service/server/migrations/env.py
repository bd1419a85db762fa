"""Alembic's environment for the service database: migrations run on the connection :func:`upgrade` hands over
(:mod:`genEval.service.server.migrations`), inside its transaction; SQLite's ALTERs in batch mode."""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, render_as_batch=True, transaction_per_migration=False)
with context.begin_transaction():
    context.run_migrations()
