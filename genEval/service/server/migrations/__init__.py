"""The service database's schema, migrated by Alembic (the FastAPI full-stack template's practice): the revisions
in ``versions/`` (shipped in the wheel) bring any database a genEval made, SQLite or PostgreSQL, to the tables the
stores declare, and :func:`upgrade` runs them when a server or worker opens the database.

==========================  ===================================================================================
``0001_baseline``           the schema of genEval before Alembic (every table; a database made by an earlier
                            genEval, which has no ``alembic_version``, is completed: missing columns, indexes
                            and the unique index of active names and rounds)
``0002_stop_rule_column``   ``benchmarks.stop``: a version's comparison settings (its stop rule) as a typed column
``0003_remap_versions``     every stored benchmark version re-keyed to the canonical spec's (a data migration)
==========================  ===================================================================================

A schema change is a revision of its own, next in the chain: change the store's table, write the revision in
``versions/`` by hand (``op.add_column`` ..., data moved with ``op.get_bind()``; ``alembic revision`` with this
folder as ``script_location`` writes the skeleton from ``script.py.mako``), and test it from the previous schema
(``tests/service/server/migrations/test_service_migrations.py``, which also checks that the chain ends at the tables
the stores declare). A one-time *data* migration (``0003_remap_versions``) is the same: a revision whose
``upgrade()`` calls the function that does it with ``op.get_bind()``, run once per database and recorded in
``alembic_version``.

Concurrent starts are serialised: the whole upgrade is one write transaction (SQLite: ``BEGIN IMMEDIATE``;
PostgreSQL: a transaction-level advisory lock, then transactional DDL), so two servers opening a fresh database at
once create its tables once.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine

from genEval.service.server.jobs.rows import NAME_INDEX, JobRow
from genEval.service.server.migrations.names import make_name_index

__all__ = ["HEAD", "current", "upgrade"]
HERE = Path(__file__).parent
#: The key of the PostgreSQL advisory lock that serialises upgrades ("gEvl" as an integer).
LOCK_KEY = 0x6745766C


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    return cfg


#: The newest revision (what :func:`upgrade` brings a database to).
HEAD = ScriptDirectory.from_config(_config()).get_current_head()


def current(engine: Engine) -> str | None:
    """The revision a database is at (None: a fresh database, or one made before Alembic)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine) -> None:
    """Run every revision the database at ``engine`` (a write engine) lacks, in one transaction (see the module
    docstring), then make the unique index of names if an earlier start had to leave it out
    (:mod:`~genEval.service.server.migrations.names`); idempotent."""
    cfg = _config()
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOCK_KEY})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
        names = next(i for i in JobRow.__table__.indexes if i.name == NAME_INDEX)
        if NAME_INDEX not in {i["name"] for i in inspect(conn).get_indexes(JobRow.__tablename__)}:
            make_name_index(conn, names)  # left out by an earlier start: twin active names (migrations.names)
