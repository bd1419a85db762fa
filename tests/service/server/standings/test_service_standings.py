# ruff: noqa: F811  (pytest fixtures imported from service_support are redefined as test arguments)
"""Leaderboard standings are computed when a job finishes and stored: equal to one comparison of all finished
jobs, complete when jobs finish concurrently or finished before standings were stored, and page views compute
nothing (genEval.service.server.standings.compute, genEval.service.server.database standings)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

import genEval
import genEval.service.server.standings.compute as leaderboard
from genEval.commands.serve import load_benchmarks
from genEval.runs.recording import RunOutput
from genEval.scores.run_scores import Scoring
from genEval.service.server.app import create_app
from genEval.service.server.facade import Service, Settings
from genEval.service.server.standings.board import read_standings
from genEval.service.server.standings.compute import MARKED, StandingsBuilder, aggregate, record_finished
from genEval.service.server.worker import Worker
from tests.support.service import (  # noqa: F401 - fixtures
    db,
    db_url,
    pg_url,
    postgres_cluster,
    postgres_server,
    toy_eval_runner,
    worker_settings,
)
from tests.support.toys import LinearClassifier, ListDataset, ModelOracle, SigmoidGenerator

N_BOOT = 200


@pytest.fixture(scope="module")
def smoke():
    return load_benchmarks(["digits_smoke"])["digits_smoke"]


def _data(name: str, n: int = 45) -> ListDataset:
    truth = LinearClassifier(seed=0)
    x = torch.rand(n, 3, 2, 2, generator=torch.Generator().manual_seed(7))
    return ListDataset(x, truth(x).argmax(1).tolist(), ["a", "b", "c"], name=name)


#: name -> (classifier seed, data set name): "far" saw other source images (an independent bootstrap), the others
#: share theirs (paired), so both kinds of difference are exercised.
MODELS = {"truth": (0, "toy"), "m3": (3, "toy"), "m5": (5, "toy"), "m8": (8, "toy"), "far": (3, "far")}


def _submit_and_run(db, home: Path, smoke, name: str):
    owner = db.tokens.create(name, "submitter")[1]
    job = db.jobs.submit(
        benchmark=smoke.name,
        benchmark_version=smoke.version,
        name=name,
        owner=owner,
        model={"kind": "config", "name": name},
        config={},
        overrides={},
        seeds=[11],
        upload_path=None,
    )
    while (claimed := db.queue.claim("w", 600)).id != job.id:
        pass
    seed, data = MODELS[name]
    genEval.evaluate(
        classifier=LinearClassifier(seed=seed),
        data=_data(data),
        generator=SigmoidGenerator(),
        oracle=ModelOracle(LinearClassifier(seed=0)),
        search={"budget": 3, "step_size": 0.05, "start_noise": 0.0},
        seed=11,
        output=RunOutput(job.rep_dir(home, 0), progress=False),
        scoring=Scoring(n_boot=N_BOOT),
    )
    return claimed


def _reference(db, home: Path, smoke) -> dict[str, tuple[dict, dict]]:
    """name -> (scores, better_than as sets) from one aggregate over every finished job at once."""
    done = db.jobs.list(status="done", benchmark=smoke.name)
    comp = aggregate({j.name: [j.rep_dir(home, 0)] for j in done}, n_boot=N_BOOT)
    return {m: (s.scores, {k: set(v) for k, v in s.better_than.items()}) for m, s in comp.models.items()}


def _stored(db, smoke) -> dict[str, tuple[dict, dict]]:
    st = read_standings(db.leaderboard, smoke.name, smoke.version)
    return {r.name: (r.standing.scores, {k: set(r.standing.better_than[k]) for k in MARKED}) for r in st.rows}


def test_stored_standings_equal_one_comparison_of_all_finished_jobs(db, tmp_path, smoke):
    builder = StandingsBuilder(db.leaderboard, tmp_path, n_boot=N_BOOT)
    for name in MODELS:
        job = _submit_and_run(db, tmp_path, smoke, name)
        assert record_finished(db, builder, job, "w", {"ok": True})
    stored, reference = _stored(db, smoke), _reference(db, tmp_path, smoke)
    assert stored == reference
    assert any(v for _, better in stored.values() for v in better.values())  # some marks: a real check


def test_jobs_that_finish_while_the_other_is_being_compared_are_compared_afterwards(db, tmp_path, smoke):
    builder = StandingsBuilder(db.leaderboard, tmp_path, n_boot=N_BOOT)
    first = _submit_and_run(db, tmp_path, smoke, "truth")
    assert record_finished(db, builder, first, "w", {})
    a = _submit_and_run(db, tmp_path, smoke, "m3")
    b = _submit_and_run(db, tmp_path, smoke, "m8")
    update_a, update_b = builder.prepare(a), builder.prepare(b)  # both computed before either is stored
    assert record_finished(db, builder, a, "w", {}, update=update_a)
    assert record_finished(db, builder, b, "w", {}, update=update_b)
    assert _stored(db, smoke) == _reference(db, tmp_path, smoke)
    assert set(_stored(db, smoke)["truth"][1]["sa"]) == {"m3", "m8"}  # each mark once


def test_jobs_finished_without_a_stored_row_are_backfilled(db, tmp_path, smoke):
    for name in ("truth", "m5", "m8"):
        job = _submit_and_run(db, tmp_path, smoke, name)
        assert db.queue.finish(job.id, "w", {})  # as a worker from before standings were stored did
    assert read_standings(db.leaderboard, smoke.name, smoke.version).pending == 3
    assert StandingsBuilder(db.leaderboard, tmp_path, n_boot=N_BOOT).backfill() == 3
    st = read_standings(db.leaderboard, smoke.name, smoke.version)
    assert st.pending == 0 and _stored(db, smoke) == _reference(db, tmp_path, smoke)


def test_a_job_without_its_run_directory_is_left_out_with_a_warning(db, tmp_path, smoke):
    job = _submit_and_run(db, tmp_path, smoke, "m3")
    (job.rep_dir(tmp_path, 0) / "results.json").unlink()
    assert record_finished(db, StandingsBuilder(db.leaderboard, tmp_path, n_boot=N_BOOT), job, "w", {})
    st = read_standings(db.leaderboard, smoke.name, smoke.version)
    assert st.rows == [] and st.pending == 0
    assert any("m3: run directory" in w and "left out" in w for w in st.warnings)


def test_page_views_read_the_stored_rows_and_compute_nothing(db, tmp_path, smoke, monkeypatch):
    builder = StandingsBuilder(db.leaderboard, tmp_path, n_boot=N_BOOT)
    for name in ("truth", "m5"):
        assert record_finished(db, builder, _submit_and_run(db, tmp_path, smoke, name), "w", {})
    service = Service(db, Settings(home=tmp_path, default_benchmark="digits_smoke"), {"digits_smoke": smoke}, {})
    client = TestClient(create_app(service))

    def no(*args, **kwargs):
        raise AssertionError("a page view recomputed the standings")

    for fn in ("build_comparison", "pairwise_differences", "compare_runs", "RunDir"):
        monkeypatch.setattr(leaderboard, fn, no)
    board = client.get("/api/leaderboard/digits_smoke").json()  # by default ranked by FMR_v, which says why
    assert board["rank_by"] == "fmr_validated" and "same validated samples" in board["rank_reason"]
    values = [r["scores"]["fmr_validated"]["value"] for r in board["rows"]]
    assert values == sorted(values, reverse=True) and len(values) == 2
    rows = client.get("/api/leaderboard/digits_smoke?sort=fmr").json()["rows"]
    stored = [_stored(db, smoke)[r["name"]][0]["fmr"].value for r in rows]
    assert stored == sorted(stored, reverse=True) and {r["name"] for r in rows} == {"truth", "m5"}
    rows = client.get("/api/leaderboard/digits_smoke?sort=name&order=asc").json()["rows"]
    assert [r["name"] for r in rows] == ["m5", "truth"]
    page = client.get("/")
    assert page.status_code == 200 and 'data-model="truth"' in page.text and "SA &gt; m5" in page.text


def test_a_worker_stores_the_row_of_each_job_it_finishes(tmp_path, smoke):
    from genEval.service.server.database import Database, sqlite_url

    db = Database(sqlite_url(tmp_path / "geneval.db"))
    owner = db.tokens.create("t", "submitter")[1]
    for name in ("aa", "bbbbb"):  # the toy runner seeds each classifier by the name's length
        db.jobs.submit(
            benchmark=smoke.name,
            benchmark_version=smoke.version,
            name=name,
            owner=owner,
            model={},
            config={},
            overrides={},
            seeds=[4],
            upload_path=None,
        )
    worker = Worker(
        db, tmp_path, toy_eval_runner, worker_settings(heartbeat_s=0.5, poll_s=0.1, exit_when_idle=True, n_boot=N_BOOT)
    )
    assert worker.run() == 2
    assert _stored(db, smoke) == _reference(db, tmp_path, smoke)
    assert {j.status for j in db.jobs.list()} == {"done"}
    db.close()


def test_the_page_and_the_api_are_paged_by_the_database(db, tmp_path, smoke, monkeypatch):
    import genEval.service.records as records
    import genEval.service.server.pages as pages

    monkeypatch.setattr(records, "MARK_NAMES", 1)  # a page names this many beaten models per metric
    builder = StandingsBuilder(db.leaderboard, tmp_path, n_boot=N_BOOT)
    for name in ("truth", "m3", "m5"):
        assert record_finished(db, builder, _submit_and_run(db, tmp_path, smoke, name), "w", {})
    service = Service(db, Settings(home=tmp_path, default_benchmark="digits_smoke"), {"digits_smoke": smoke}, {})
    client = TestClient(create_app(service))
    monkeypatch.setattr(pages, "PAGE_ROWS", 2)
    by_name = client.get("/api/leaderboard/digits_smoke?sort=name&order=asc").json()
    assert [r["name"] for r in by_name["rows"]] == ["m3", "m5", "truth"] and by_name["total"] == 3
    second = client.get("/api/leaderboard/digits_smoke?sort=name&order=asc&limit=1&offset=1").json()
    assert [r["name"] for r in second["rows"]] == ["m5"] and second["total"] == 3 and second["offset"] == 1
    first_page = client.get("/?sort=name&order=asc").text
    assert re.findall(r'<tr data-model="([^"]+)"', first_page) == ["m3", "m5"]
    assert "rows 1–2 shown" in first_page and 'href="?sort=name&amp;order=asc&amp;page=2"' in first_page
    last = client.get("/?sort=name&order=asc&page=2").text
    assert re.findall(r'<tr data-model="([^"]+)"', last) == ["truth"] and "<td>3</td>" in last
    assert client.get("/?page=0").status_code == 422
    assert client.get("/api/leaderboard/digits_smoke?sort=__class__").status_code == 422
    truth = {r["name"]: r for r in by_name["rows"]}["truth"]
    assert set(truth["better_than"]["sa"]) == {"m3", "m5"}  # the API lists every name
    row = last.split('<tr data-model="truth">')[1].split("</tr>")[0]
    assert "SA &gt; m3 and 1 more" in row


# ------------------------------------------------------------------------------ the typed Standing
def _library_row(name: str, sa: float, fmr: float | None):
    """A comparison library row with two scores (what the worker builds a standing from)."""
    from genEval.comparisons.leaderboard import LeaderboardRow, MetricEntry

    scores = {
        "sa": MetricEntry(sa, sa - 2.5, sa + 2.0, 40, "wilson"),
        "fmr": MetricEntry(fmr, None, None, 0, "", "no samples") if fmr is None else MetricEntry(fmr, 1.0, 9.5, 40),
    }
    return LeaderboardRow(name, scores, None, None, None, False, 3, 40.0, 30.0)


def _verdict(**changes):
    from genEval.scores.sequential import PairVerdict

    fields = dict(a="m1", b="m2", metric="fmr_validated", value=4.25, low=1.5, high=7.0, n_sources=120,
                  looks=3, sd=0.5, verdict="ordered", confidence=0.95, margin=1.0, run_low=1.5, run_high=7.0,
                  since=2)  # fmt: skip
    return PairVerdict(**(fields | changes))


def test_a_standing_is_built_from_the_library_row_and_round_trips_through_json():
    import json

    from genEval.comparisons.standing import Score, Standing

    got = Standing.of(_library_row("m1", 80.0, None), {"sa": ["m2"]}, columns=("sa", "fmr", "pa"))
    assert got.scores == {"sa": Score(80.0, 77.5, 82.0), "fmr": Score(), "pa": Score()}  # a missing score: undefined
    assert (got.name, got.repetitions, got.better_than, got.value("sa"), got.value("vr")) == (
        "m1", 3, {"sa": ["m2"]}, 80.0, None)  # fmt: skip
    settled = Standing.of(_library_row("m1", 80.0, 5.0), columns=("fmr",))
    settled = replace(settled, rank="1–2", sources=120, below=_verdict())
    for standing in (got, settled):
        assert Standing.from_dict(json.loads(json.dumps(standing.to_dict()))) == standing
    assert settled.to_dict()["below"]["n_sources"] == 120 and settled.to_dict()["scores"]["fmr"]["low"] == 1.0


def test_a_standing_reads_a_row_stored_before_the_settled_keys_and_names_a_missing_key():
    from genEval.comparisons.standing import Score, Standing

    old = {"name": "m", "repetitions": 2, "scores": {"fmr": {"value": 3.0, "low": 1.0, "high": 5.0}}}
    got = Standing.from_dict(old)
    assert (got.scores, got.better_than, got.rank, got.below) == ({"fmr": Score(3.0, 1.0, 5.0)}, {}, None, None)
    assert (
        got.scores["fmr"].fmt() == "3.00 [1.00, 5.00]" and Score(2.0).fmt() == "2.00" and Score().fmt() == "undefined"
    )
    with pytest.raises(ValueError, match=r"needs 'repetitions'; got the keys \['name', 'scores'\]"):
        Standing.from_dict({"name": "m", "scores": {}})


def test_the_verdict_on_a_row_and_the_one_below_is_worded_once_for_the_api_and_the_page():
    from genEval.comparisons.standing import verdict_view

    ordered = verdict_view(_verdict(), "FMR_v")
    assert (ordered["name"], ordered["difference"], ordered["sources"], ordered["text"]) == (
        "m2", 4.25, 120, "ordered above m2")  # fmt: skip
    assert ordered["title"] == _verdict().describe("FMR_v") and ordered["title"].startswith("m1 vs m2: FMR_v")
    assert (
        verdict_view(_verdict(verdict="equivalent", margin=0.5), "x")["text"] == "equivalent to m2 (within 0.5 points)"
    )
    more = verdict_view(_verdict(verdict="open", more_sources=1500, more_kind="order"), "x")
    assert more["text"] == "open vs m2: ≈ 1,500 more sources to order"
    unjudged = verdict_view(_verdict(verdict="open", metric="", reason="not judged yet"), "x")
    assert unjudged["text"] == unjudged["title"] == "open vs m2 (not judged yet)"
