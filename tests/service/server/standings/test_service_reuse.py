"""The reuse budget of a settled benchmark version (issue 44; Miller 2022 ch. 3): the correctness agreement of the
submitted models on the shared rounds and the submissions left, in ``GET /api/benchmarks`` and on the leaderboard;
spent, it says so and an admin renews the version (fresh round seeds, a new leaderboard)."""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

import pytest
from fastapi.testclient import TestClient

from genEval.commands.serve import load_benchmarks
from genEval.runs.reader import RunDir
from genEval.scores.reuse import similarity_bound_models
from genEval.service.execute import run_job
from genEval.service.server.app import create_app
from genEval.service.server.database import Database, sqlite_url
from genEval.service.server.facade import Service, Settings
from genEval.service.server.standings.board import read_standings
from genEval.service.server.standings.compute import StandingsBuilder, record_finished
from tests.support.service import CENTROIDS, centroid_build


@pytest.fixture(scope="module")
def presets():
    return load_benchmarks(["digits_settled", "digits_smoke"])


def _service(db, home, benchmarks) -> Service:
    return Service(db, Settings(home=home, default_benchmark="digits_settled"), dict(benchmarks), dict(CENTROIDS))


def _submit_and_run(service: Service, home, models: dict[str, str]) -> None:
    for name, config in models.items():
        owner = service.db.tokens.create(name, "submitter")[1]
        service.jobs.submit("digits_settled", name, {"kind": "config", "name": config}, {}, owner)
    builder = StandingsBuilder(service.db.leaderboard, home, n_boot=100)
    while (job := service.db.queue.claim("w", 600)) is not None:
        assert record_finished(service.db, builder, job, "w", run_job(job, home, lambda *a: None, build=centroid_build))


@pytest.fixture
def db(tmp_path):
    database = Database(sqlite_url(tmp_path / "geneval.db"))
    yield database
    database.close()


def _agreement_by_hand(db, home, bench) -> tuple[float, int]:
    """Mean pairwise agreement of the models' final-image correctness on the (round, source) points both ran."""
    rows = read_standings(db.leaderboard, bench.name, bench.version).rows
    right = {}
    for row in rows:
        right[row.name] = {
            (r, rec.source_id): rec.final_pred == rec.label
            for r, d in enumerate(row.run_dirs)
            for rec in RunDir(home / d).samples
        }
    pairs = []
    shared_min = None
    for a, b in combinations(sorted(right), 2):
        shared = set(right[a]) & set(right[b])
        pairs.append(sum(right[a][k] == right[b][k] for k in shared) / len(shared))
        shared_min = len(shared) if shared_min is None else min(shared_min, len(shared))
    return sum(pairs) / len(pairs), shared_min


def test_the_budget_of_a_settled_version_in_the_api_and_on_the_leaderboard(db, tmp_path, presets):
    assert presets["digits_settled"].reuse_epsilon == 0.05  # the preset's (conf/benchmark/digits_settled.yaml)
    loose = {**presets, "digits_settled": replace(presets["digits_settled"], reuse_epsilon=0.3)}
    service = _service(db, tmp_path, loose)
    settled = service.catalog.benchmark("digits_settled")
    client = TestClient(create_app(service))
    before = {b["name"]: b for b in client.get("/api/benchmarks").json()}
    assert before["digits_settled"]["reuse_budget"]["eta"] is None  # no two models yet
    assert before["digits_smoke"]["reuse_budget"] is None  # a fixed benchmark reuses no rounds
    _submit_and_run(service, tmp_path, {"a": "sharp", "b": "blurred", "c": "sharp"})
    got = {b["name"]: b for b in client.get("/api/benchmarks").json()}["digits_settled"]["reuse_budget"]
    eta, n = _agreement_by_hand(db, tmp_path, settled)
    assert got["eta"] == pytest.approx(eta) and got["n_sources"] == n and got["models"] == 3
    assert got["epsilon"] == 0.3 and got["delta"] == 0.05  # the version's reuse_epsilon / reuse_delta
    want = similarity_bound_models(n, got["error_rate"], got["eta"], 0.3, 0.05)
    assert want > 3  # room for more submissions at 30 points
    assert got["similarity_bound"] == want and got["submissions_left"] == max(0, want - 3)
    page = client.get("/leaderboard/digits_settled").text
    assert f"about {got['submissions_left']:,} submissions left" in page and 'id="reuse-budget"' in page


def test_a_spent_budget_says_so_and_an_admin_renews_the_version(db, tmp_path, presets):
    tight = {**presets, "digits_settled": replace(presets["digits_settled"], reuse_epsilon=0.001)}
    service = _service(db, tmp_path, tight)
    _submit_and_run(service, tmp_path, {"a": "sharp", "b": "blurred"})
    client = TestClient(create_app(service))
    old = service.catalog.benchmark("digits_settled")
    budget = {b["name"]: b for b in client.get("/api/benchmarks").json()}["digits_settled"]["reuse_budget"]
    assert budget["spent"] and budget["submissions_left"] == 0
    page = client.get("/leaderboard/digits_settled").text
    assert "reuse budget spent" in page and "/api/benchmarks/digits_settled/renew" in page
    submitter = {"Authorization": f"Bearer {db.tokens.create('s', 'submitter')[0]}"}
    admin = {"Authorization": f"Bearer {db.tokens.create('root', 'admin')[0]}"}
    assert client.post("/api/benchmarks/digits_settled/renew").status_code == 401
    assert client.post("/api/benchmarks/digits_settled/renew", headers=submitter).status_code == 403
    fixed = client.post("/api/benchmarks/digits_smoke/renew", headers=admin)
    assert fixed.status_code == 409 and "fixed" in fixed.json()["detail"]
    assert client.post("/api/benchmarks/nope/renew", headers=admin).status_code == 404
    renewed = client.post("/api/benchmarks/digits_settled/renew", headers=admin).json()
    assert renewed["version"] != old.version and renewed["epoch"] == 1 and renewed["base_version"] == old.version
    assert renewed["versions"][0] == renewed["version"] and old.version in renewed["versions"]
    assert db.benchmarks.round_base("digits_settled", renewed["version"]) != db.benchmarks.round_base(
        "digits_settled", old.version
    )  # fresh secret round seeds
    assert renewed["reuse_budget"]["eta"] is None  # a new version: nobody has run on its rounds
    assert client.get(f"/api/leaderboard/digits_settled?version={old.version}").json()["total"] == 2
    assert client.get("/api/leaderboard/digits_settled").json()["total"] == 0  # standings carry over by re-running
    restarted = _service(db, tmp_path, tight)  # a restarted server offers the renewed version
    assert restarted.catalog.benchmark("digits_settled").version == renewed["version"]
