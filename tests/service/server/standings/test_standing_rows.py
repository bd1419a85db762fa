# ruff: noqa: F811  (pytest fixtures imported from tests.support.service are redefined as test arguments)
"""A leaderboard row is typed from the store to the page: the ``standings`` store keeps a
:class:`~genEval.service.records.StandingInfo` holding the library's :class:`~genEval.comparisons.standing.Standing`
and a :class:`~genEval.service.records.SettledInfo`, stored through their ``to_dict``/``from_dict`` in the column
format every earlier genEval wrote (so no schema migration), and the standings slice gets its stores, not the
``Database`` (genEval/service/server/standings/stores.py)."""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import text

import genEval.service.server as server
from genEval.comparisons.standing import Score, Standing
from genEval.service.records import Mark, SettledInfo, StandingInfo
from tests.support.service import db, db_url, pg_url, postgres_cluster, postgres_server  # noqa: F401 - fixtures


def _raw(db, job_id: str) -> dict:
    """The stored columns of a row as the database holds them (JSON decoded), read with plain SQL."""
    with db.writer.connect() as conn:
        got = conn.execute(
            text("SELECT scores, settled, better_than, marks FROM standings WHERE job_id = :j"), {"j": job_id}
        ).one()
    return {k: json.loads(v) if isinstance(v, str) else v for k, v in got._mapping.items()}


def _store(db, info: StandingInfo) -> None:
    with db.write() as s:
        db.standings.store_in(s, info, {})


def test_a_stored_row_reads_back_typed_and_is_stored_in_the_format_of_earlier_genevals(db):
    standing = Standing("m0", 2, {"fmr": Score(5.0, 1.0, 9.0), "sa": Score()}, {"fmr": ["m1"], "sa": [], "pa": []})
    settled = SettledInfo(20.5, 8, 2)
    info = StandingInfo("a" * 32, "b", "v1", standing, 10.0, ["r/rep0", "r/rep1"], ["w"], "note", 11.0, settled)
    _store(db, info)
    (back,) = db.standings.rows("b", "v1")
    marks = {"fmr": Mark(1, ("m1",)), "sa": Mark(), "pa": Mark()}
    assert back == replace(info, marks=marks) and back.ranked
    assert _raw(db, "a" * 32) == {
        "scores": {"fmr": {"value": 5.0, "low": 1.0, "high": 9.0}, "sa": {"value": None, "low": None, "high": None}},
        "settled": {"pooled": 20.5, "sources": 8, "rounds": 2},
        "better_than": {"fmr": ["m1"], "sa": [], "pa": []},
        "marks": {
            "fmr": {"count": 1, "first": ["m1"]},
            "sa": {"count": 0, "first": []},
            "pa": {"count": 0, "first": []},
        },
    }
    total, (row,) = db.standings.board("b", "v1", "fmr")  # a page's read: the marks, not every name
    assert (total, row.standing.better_than, row.marks, row.settled) == (1, {}, marks, settled)
    (every,) = db.standings.board_of(["a" * 32], every_mark=True)
    assert every.standing.better_than == {"fmr": ["m1"], "sa": [], "pa": []}


def test_a_row_without_scores_is_stored_null_unranked_and_withdrawing_keeps_the_settled_info(db):
    settled = SettledInfo(3.0, 40, 1)
    _store(
        db, StandingInfo("a" * 32, "b", "v1", Standing("m0", 1, {"fmr": Score(1.0)}), 1.0, ["r/rep0"], settled=settled)
    )
    _store(db, StandingInfo("c" * 32, "b", "v1", Standing("lost", 1, {}), 2.0, ["q/rep0"], ["lost: missing; left out"]))
    assert _raw(db, "c" * 32)["scores"] is None  # SQL NULL: the board's filter
    assert [(r.name, r.ranked) for r in db.standings.rows("b", "v1")] == [("m0", True), ("lost", False)]
    assert [r.name for r in db.standings.board("b", "v1", "fmr")[1]] == ["m0"]
    with db.write() as s:
        db.standings.mark_withdrawn_in(s, "a" * 32)
    assert db.standings.rows("b", "v1")[0].settled == replace(settled, withdrawn=True)
    assert _raw(db, "a" * 32)["settled"] == {"pooled": 3.0, "sources": 40, "rounds": 1, "withdrawn": True}


def test_a_mark_keeps_the_count_and_the_first_names_in_sorted_order():
    names = [f"m{i:02d}" for i in (11, 3, 7, 1, 9, 5, 10, 2, 8, 4)]
    mark = Mark.of(names)
    assert mark == Mark(10, ("m01", "m02", "m03", "m04", "m05", "m07", "m08", "m09"))  # MARK_NAMES = 8 of 10
    assert Mark.from_dict(json.loads(json.dumps(mark.to_dict()))) == mark


def test_settled_info_round_trips_reads_old_rows_and_names_an_unknown_key():
    for info in (SettledInfo(20.0, 8, 1), SettledInfo(None, None, 3, True), SettledInfo()):
        assert SettledInfo.from_dict(json.loads(json.dumps(info.to_dict()))) == info
    assert SettledInfo.from_dict({"pooled": 20, "sources": 8, "rounds": 1}) == SettledInfo(20.0, 8, 1)
    assert SettledInfo.from_dict({"withdrawn": True}) == SettledInfo(withdrawn=True)  # a fixed row withdrawn
    with pytest.raises(ValueError, match=r"unknown keys \['pool'\]; known: pooled, sources, rounds, withdrawn"):
        SettledInfo.from_dict({"pool": 1.0, "rounds": 1})


def test_the_standings_slice_is_handed_its_stores_not_the_database():
    """The reader, the builder and the routes take ``db.leaderboard`` (StandingsStores): no standings module imports
    the Database."""
    home = Path(server.__file__).parent
    for path in sorted((home / "standings").glob("*.py")):
        tree = ast.parse(path.read_text())
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert f"{server.__name__}.database" not in mods, f"{path.name} imports the Database"
