# ruff: noqa: F811  (pytest fixtures imported from service_support are redefined as test arguments)
"""The service database's schema goes through Alembic (genEval/service/server/migrations): a fresh database gets the
stores' tables, and a database of main's schema (before Alembic; tests/support/service_main_schema.<dialect>.sql)
with its rows is upgraded on SQLite and PostgreSQL, its jobs and standings surviving and served."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from fastapi.testclient import TestClient
from sqlalchemy import inspect

from genEval.commands.serve import load_benchmarks, registered_classifiers
from genEval.service.server.app import create_app
from genEval.service.server.database import Database
from genEval.service.server.facade import Service, Settings
from genEval.service.server.migrations import HEAD, current
from genEval.service.server.session import Base
from genEval.service.server.standings.board import read_standings
from tests.support.service import db_url, main_schema_database, pg_url, postgres_cluster  # noqa: F401 - fixtures


@pytest.fixture(scope="module")
def benchmarks():
    return load_benchmarks(["digits_smoke", "digits_settled"])


def _schema_drift(db: Database) -> list:
    """What differs between the database and the tables the stores declare (empty: the same)."""
    with db.engine.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn), Base.metadata)


def test_a_fresh_database_is_migrated_to_the_stores_tables_once(db_url):
    db = Database(db_url)
    assert current(db.engine) == HEAD == "0003_remap_versions"
    assert _schema_drift(db) == []
    db.close()
    again = Database(db_url)  # a second start runs nothing (and fails on nothing)
    assert current(again.engine) == HEAD and _schema_drift(again) == []
    again.close()


def test_a_database_of_mains_schema_is_upgraded_and_its_jobs_and_standings_survive_and_serve(
    db_url, benchmarks, tmp_path
):
    ids = main_schema_database(db_url, benchmarks)
    db = Database(db_url)
    assert current(db.engine) == HEAD and _schema_drift(db) == []
    fixed, settled = benchmarks["digits_smoke"], benchmarks["digits_settled"]
    assert db.benchmarks.get(settled.name, settled.version).stop == settled.rule  # the typed column, from config
    assert db.benchmarks.get(fixed.name, fixed.version).stop is None
    assert db.benchmarks.round_base(settled.name, settled.version) == 7  # the secret kept
    job = db.jobs.get(ids["digits_smoke/first"])
    assert (job.status, job.round, job.parent_id, job.seeds) == ("done", 0, None, [0])
    st = read_standings(db.leaderboard, fixed.name, fixed.version)
    (row,) = st.rows
    assert (row.job_id, row.standing.value("fmr"), row.standing.scores["fmr"].low) == (job.id, 10.0, 5.0)
    board = read_standings(db.leaderboard, settled.name, settled.version)
    assert [r.name for r in board.rows] == ["first", "second"]  # by the pooled score, the open pair tied
    assert [r.standing.rank for r in board.rows] == ["1–2", "1–2"] and board.stop == settled.rule
    assert board.rows[0].standing.below.more_sources == 120 and board.rows[0].standing.better_than["sa"] == ["second"]
    service = Service(
        db, Settings(home=tmp_path, default_benchmark=fixed.name), benchmarks, registered_classifiers(None)
    )
    client = TestClient(create_app(service))
    answer = client.get(f"/api/leaderboard/{settled.name}").json()
    top = answer["rows"][0]
    assert (top["job"], top["rank"], top["scores"]["fmr"], top["below"]["text"]) == (
        ids["digits_settled/first"], "1–2", {"value": 10.0, "low": 5.0, "high": 15.0},
        "open vs second: ≈ 120 more sources to order")  # fmt: skip
    assert answer["stop"] == settled.rule.to_dict()
    page = client.get(f"/leaderboard/{fixed.name}")
    assert page.status_code == 200 and "first" in page.text and "10.00" in page.text
    db.close()


def test_a_database_of_mains_schema_with_twin_active_names_starts_without_the_index(db_url, benchmarks, caplog):
    ids = main_schema_database(db_url, {"digits_smoke": benchmarks["digits_smoke"]})
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url)
    with engine.begin() as conn:  # a job of the same name queued again, as a genEval without the index accepted
        conn.execute(text("DROP INDEX uq_jobs_active_name_round"))
        cols = list(conn.execute(text("SELECT * FROM jobs LIMIT 1")).keys())
        picked = ", ".join("'" + "9" * 32 + "'" if c == "id" else "'queued'" if c == "status" else c for c in cols)
        conn.execute(text(f"INSERT INTO jobs ({', '.join(cols)}) SELECT {picked} FROM jobs"))
    engine.dispose()
    db = Database(db_url)
    assert "several active jobs share a name" in caplog.text and current(db.engine) == HEAD
    assert "uq_jobs_active_name_round" not in {i["name"] for i in inspect(db.engine).get_indexes("jobs")}
    assert db.jobs.get(ids["digits_smoke/first"]).status == "done"
    db.close()
