"""The HTTP API and the leaderboard page, through FastAPI's TestClient (no worker: jobs are finished by hand
from runs made with the toy components, so these tests take seconds)."""

from __future__ import annotations

import io
import json
import re
import tarfile

import pytest
import torch

import genEval
from genEval.commands.serve import load_benchmarks, registered_classifiers
from genEval.runs.recording import RunOutput
from genEval.scores.run_scores import Scoring
from genEval.service.server.standings.compute import StandingsBuilder, record_finished
from tests.support.service import bearer, claim_smoke_job
from tests.support.toys import LinearClassifier, ListDataset, ModelOracle, SigmoidGenerator

JOB = {"benchmark": "digits_smoke", "name": "cnn", "model": {"kind": "config", "name": "digits_cnn"}}


@pytest.fixture(scope="module")
def presets():
    return load_benchmarks(), registered_classifiers(None)


def test_fresh_service_answers(client, svc):
    health = client.get("/api/health")  # no worker yet: queued jobs would wait
    assert health.status_code == 503 and health.json()["status"] == "degraded"
    assert health.json()["problems"] == ["no worker is alive: queued jobs wait until one starts (geneval worker)"]
    svc.db.workers.register("w:1:abcdef01", "w", 1, "cpu", lease_s=60)
    assert client.get("/api/health").json() | {"version": None} == {
        "status": "ok",
        "problems": [],
        "version": None,
        "database": "sqlite",
        "benchmarks": list(svc.benchmarks),
        "jobs": dict.fromkeys(("queued", "running", "done", "failed", "cancelled"), 0),
        "workers": 1,
    }
    page = client.get("/")
    assert page.status_code == 200 and "leaderboard" in page.text.lower()
    assert "No finished submissions yet" in page.text
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page.text)  # no external resources
    assert client.get("/docs").status_code == 200
    assert "/api/jobs" in client.get("/openapi.json").json()["paths"]
    assert client.get("/leaderboard/digits").status_code == 200
    assert client.get("/leaderboard/nope").status_code == 404


def test_tokens_and_roles(client, svc):
    assert client.post("/api/jobs").status_code == 401
    assert client.post("/api/jobs", json=JOB).status_code == 401
    assert client.post("/api/jobs", json=JOB, headers={"Authorization": "Bearer gev_wrong"}).status_code == 401
    assert client.post("/api/jobs", json=JOB, headers=bearer(svc.db, "viewer", "v")).status_code == 403
    submitter = bearer(svc.db)
    assert client.get("/api/tokens", headers=submitter).status_code == 403
    assert client.post("/api/tokens", json={"name": "x", "role": "admin"}, headers=submitter).status_code == 403
    admin = bearer(svc.db, "admin", "root")
    made = client.post("/api/tokens", json={"name": "bob", "role": "submitter"}, headers=admin)
    assert made.status_code == 201
    bob = {"Authorization": f"Bearer {made.json()['token']}"}
    assert client.post("/api/jobs", json=JOB, headers=bob).status_code == 201
    listed = client.get("/api/tokens", headers=admin).json()
    assert made.json()["token"] not in json.dumps(listed)  # never shown again
    assert client.delete(f"/api/tokens/{made.json()['id']}", headers=admin).status_code == 200
    assert client.post("/api/jobs", json={**JOB, "name": "again"}, headers=bob).status_code == 401
    assert client.get("/api/jobs", headers=submitter).status_code == 200  # viewer rights included
    assert client.get("/api/jobs").status_code == 401


@pytest.mark.parametrize(
    "body, key",
    [
        ({**JOB, "model": {"kind": "config", "name": "digits_cnn", "_target_": "os.system"}}, "model._target_"),
        ({**JOB, "_target_": "builtins.eval"}, "_target_"),
        ({**JOB, "overrides": {"search.budget": 1}}, "overrides.search.budget"),
        ({**JOB, "overrides": {"data._target_": "x"}}, "overrides.data._target_"),
        ({**JOB, "overrides": {"hydra.run.dir": "/tmp"}}, "overrides.hydra.run.dir"),
        ({**JOB, "overrides": {"batch_size": 100000}}, "overrides.batch_size"),
        ({**JOB, "benchmark": "nope"}, "benchmark"),
        ({**JOB, "model": {"kind": "config", "name": "timm"}}, "model.name"),
        ({**JOB, "model": {"kind": "pickle"}}, "model.kind"),
        ({**JOB, "name": "../../etc"}, "name"),
        ({**JOB, "model": {"kind": "torchscript", "num_classes": 10, "upload": "0" * 32}}, "model.upload"),
    ],
)
def test_requests_cannot_reach_code_or_unlisted_keys(client, svc, body, key):
    r = client.post("/api/jobs", json=body, headers=bearer(svc.db))
    assert r.status_code == 422, r.text
    got = r.json()
    assert key == got.get("key") or key in got.get("keys", []), got
    assert key.split(".")[-1] in json.dumps(got)
    assert svc.db.jobs.list() == []


def test_allowlisted_override_and_name_conflict(client, svc):
    h = bearer(svc.db)
    r = client.post("/api/jobs", json={**JOB, "overrides": {"batch_size": 4}}, headers=h)
    assert r.status_code == 201
    job = svc.db.jobs.get(r.json()["id"])
    assert job.config["batch_size"] == 4 and job.overrides == {"batch_size": 4}
    assert job.config["classifier"]["_target_"] == "genEval.classifiers.digits_classifier"
    assert len(job.seeds) == svc.benchmarks["digits_smoke"].repetitions
    assert "config" not in r.json() and r.json()["status"] == "queued"
    assert client.post("/api/jobs", json=JOB, headers=h).status_code == 409


def test_cancel_and_requeue_permissions(client, svc):
    alice, mallory, admin = bearer(svc.db), bearer(svc.db, name="mallory"), bearer(svc.db, "admin", "root")
    job_id = client.post("/api/jobs", json=JOB, headers=alice).json()["id"]
    assert client.get(f"/api/jobs/{job_id}/results.json").status_code == 409
    assert client.post(f"/api/jobs/{job_id}/cancel", headers=mallory).status_code == 403
    assert client.post(f"/api/jobs/{job_id}/cancel", headers=alice).json()["status"] == "cancelled"
    assert client.post(f"/api/jobs/{job_id}/cancel", headers=alice).status_code == 409
    assert client.post(f"/api/jobs/{job_id}/requeue", headers=alice).status_code == 403
    assert client.post(f"/api/jobs/{job_id}/requeue", headers=admin).json()["status"] == "queued"
    assert client.get("/api/jobs/nope").status_code == 404


# ------------------------------------------------------------------------------- leaderboard
def _finish_toy_job(svc, name: str, classifier, data, oracle, seed: int) -> str:
    """A job whose run is made by genEval.evaluate with toy components, then recorded as done."""
    job, claimed = claim_smoke_job(svc, name, seed)
    res = genEval.evaluate(
        classifier=classifier,
        data=data,
        generator=SigmoidGenerator(),
        oracle=oracle,
        search={"budget": 3, "step_size": 0.05},
        seed=seed,
        config={"comparison": {"model": name}},
        output=RunOutput(job.rep_dir(svc.home, 0), save_images=True, progress=False),
        scoring=Scoring(n_boot=200),
    )
    builder = StandingsBuilder(svc.db.leaderboard, svc.home, n_boot=svc.settings.n_boot)  # as the worker finishes a job
    assert record_finished(svc.db, builder, claimed, "w", {"repetitions": [{"metrics": res.metrics}]})
    return job.id


@pytest.fixture
def board(svc):
    truth = LinearClassifier(seed=0)
    x = torch.rand(90, 3, 2, 2, generator=torch.Generator().manual_seed(1))
    data = ListDataset(x, truth(x).argmax(1).tolist(), ["a", "b", "c"])
    oracle = ModelOracle(truth)
    ids = {
        "good": _finish_toy_job(svc, "good", truth, data, oracle, 1),
        "poor": _finish_toy_job(svc, "poor", LinearClassifier(seed=5), data, oracle, 2),
    }
    return ids


def _names_in_order(html: str) -> list[str]:
    return re.findall(r'<tr data-model="([^"]+)"', html)


def test_leaderboard_rows_sorting_and_significance(client, svc, board):
    api = client.get("/api/leaderboard/digits_smoke").json()
    row = {r["name"]: r for r in api["rows"]}
    fmr_v = {n: r["scores"]["fmr_validated"]["value"] for n, r in row.items()}
    page = client.get("/").text
    # by the comparison's ranking score (FMR_v, a score over comparable populations), descending, and it says so
    assert api["rank_by"] == "fmr_validated" and api["rank_reason"].startswith("FMR_v = 100 PA / SA_v")
    assert _names_in_order(page) == sorted(fmr_v, key=fmr_v.get, reverse=True)
    assert 'id="ranked-by"' in page and "Ranked by <strong>FMR_v</strong>: FMR_v = 100 PA / SA_v" in page
    assert 'id="ranked-by"' not in client.get("/?sort=sa").text
    assert _names_in_order(client.get("/?sort=sa").text) == ["good", "poor"]
    assert _names_in_order(client.get("/?sort=sa&order=asc").text) == ["poor", "good"]
    assert _names_in_order(client.get("/?sort=name&order=desc").text) == ["poor", "good"]
    assert client.get("/?sort=__class__").status_code == 422
    good_row = page.split('<tr data-model="good">')[1].split("</tr>")[0]
    assert "SA &gt; poor" in good_row  # paired bootstrap separates 100% from ~33% clean accuracy
    assert "SA &gt;" not in page.split('<tr data-model="poor">')[1].split("</tr>")[0]
    assert f"/jobs/{board['good']}/report?rep=0" in good_row
    assert row["good"]["scores"]["sa"]["value"] == 100.0
    assert row["good"]["scores"]["sa"]["low"] < 100.0 <= row["good"]["scores"]["sa"]["high"]
    assert row["good"]["better_than"]["sa"] == ["poor"] and row["poor"]["better_than"]["sa"] == []
    for name in ("good", "poor"):  # FMR_v (same population as PA) beside the paper's FMR, with its interval
        res = json.loads((svc.files.rep_dir(svc.db.jobs.get(board[name]), 0) / "results.json").read_text())
        assert row[name]["scores"]["fmr_validated"]["value"] == pytest.approx(res["scores"]["fmr_validated"]["value"])
    assert ">FMR_v</a></th>" in page and page.index(">FMR</a></th>") < page.index(">FMR_v</a></th>")


def test_results_report_and_snapshot(client, svc, board):
    job_id = board["good"]
    results = client.get(f"/api/jobs/{job_id}/results.json")
    assert results.status_code == 200 and results.json()["scores"]["sa"]["value"] == 100.0
    assert client.get(f"/api/jobs/{job_id}/results.json?rep=3").status_code == 404
    report = client.get(f"/jobs/{job_id}/report")
    assert report.status_code == 200 and "<html" in report.text.lower()
    snap = client.get(f"/api/jobs/{job_id}/snapshot")
    assert snap.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(snap.content)) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile(next(n for n in names if n.endswith("/manifest.json"))))
    assert manifest["seed"] == 1 and any(n.endswith(".png") for n in names)
    assert all(n.startswith("good-rep0-snapshot") for n in names)
    view = client.get(f"/api/jobs/{job_id}").json()
    assert view["links"]["snapshot"] == [f"/api/jobs/{job_id}/snapshot?rep=0"]
    assert "config" not in view and "upload_path" not in view
    assert client.get(f"/jobs/{job_id}").status_code == 200
