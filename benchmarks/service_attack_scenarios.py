"""Issue 41's library-level scenarios for ``benchmarks/service_attacks.py`` (``round``, ``truncate``, ``lock``): run
in a subprocess whose genEval is the checkout under test (``--code``), each printing what happened as JSON. The tiny
components and the preset come from this checkout's harness (``benchmarks/harness/{centroids,toys,presets}.py``)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from types import SimpleNamespace


def _settled_service(home: Path):
    from benchmarks.harness.centroids import CENTROIDS
    from benchmarks.harness.presets import benchmark
    from genEval.service.server.database import Database, sqlite_url
    from genEval.service.server.facade import Service, Settings

    bench = benchmark("digits_settled")
    db = Database(sqlite_url(home / "geneval.db"))
    return Service(db, Settings(home=home, default_benchmark=bench.name), {bench.name: bench}, dict(CENTROIDS))


def _run_queue(service, home: Path, limit: int | None = None) -> int:
    from benchmarks.harness.centroids import centroid_build
    from genEval.service.execute import run_job
    from genEval.service.server.standings.compute import StandingsBuilder, record_finished

    builder, ran = StandingsBuilder(service.db.leaderboard, home, n_boot=100), 0
    while (limit is None or ran < limit) and (job := service.db.queue.claim("w", 600)) is not None:
        record_finished(service.db, builder, job, "w", run_job(job, home, lambda *a: None, build=centroid_build))
        ran += 1
    return ran


def round_scenario() -> dict:
    """E8 and E11: two equal models on digits_settled; after round 0 of both, round 1 of each is queued. Is the queued
    round's seed shown? May the submitter cancel its own round? Then it cancels its submission: what ranks show?"""
    from fastapi.testclient import TestClient

    from genEval.service.server.app import create_app

    home = Path(tempfile.mkdtemp(prefix="geneval-round-"))
    service = _settled_service(home)
    auth, roots = {}, {}
    for name in ("twin_a", "twin_b"):
        secret, owner = service.db.tokens.create(name, "submitter")
        roots[name] = service.jobs.submit("digits_settled", name, {"kind": "config", "name": "blurred"}, {}, owner)
        auth[name] = {"Authorization": f"Bearer {secret}"}
    _run_queue(service, home, limit=2)
    queued = {j.name: j for j in service.db.jobs.list(status="queued")}
    client = TestClient(create_app(service))
    out: dict = {"queued_rounds": {n: j.round for n, j in queued.items()}}
    mine = queued["twin_a"]
    out["queued_round_seed_shown"] = client.get(f"/api/jobs/{mine.id}").json().get("seeds")
    out["cancel_own_round"] = client.post(f"/api/jobs/{mine.id}/cancel", headers=auth["twin_a"]).status_code
    out["cancel_submission"] = client.post(f"/api/jobs/{roots['twin_a'].id}/cancel", headers=auth["twin_a"]).status_code
    out["ran_after"] = _run_queue(service, home)
    board = client.get("/api/leaderboard/digits_settled").json()
    out["ranks"] = {r["name"]: r["rank"] for r in board["rows"]}
    out["rounds"] = sorted((j.name, j.round, j.status) for j in service.db.jobs.list())
    return out


def truncate_scenario() -> dict:
    """E13: two models' runs on the same 50 sources; one samples.jsonl cut to 43 lines after it finished. Does
    ``compare`` accept it, and on how many sources does a settled pair's verdict count them?"""
    from benchmarks.harness.toys import LinearClassifier, ModelOracle, SigmoidGenerator, toy_data
    from genEval import evaluate
    from genEval.comparisons.aggregate import aggregate
    from genEval.comparisons.settings import ComparisonSettings, StopRule
    from genEval.runs.reader import RunDir, read_records
    from genEval.runs.recording import RunOutput
    from genEval.scores.outcomes import Outcomes
    from genEval.service.server.standings.settled import judge

    root = Path(tempfile.mkdtemp(prefix="geneval-truncate-"))
    dirs = []
    for seed, name in ((2, "a"), (5, "b")):
        out = root / name / "rep0"
        evaluate(
            classifier=LinearClassifier(seed=seed),
            data=toy_data(50, seed=3),
            generator=SigmoidGenerator(),
            oracle=ModelOracle(LinearClassifier(seed=1)),
            search={"budget": 2, "step_size": 0.3},
            seed=1,
            output=RunOutput(out, progress=False),
            config={"comparison": {"model": name, "repetition": 0}},
        )
        dirs.append(out)
    samples = dirs[1] / "samples.jsonl"
    samples.write_text("\n".join(samples.read_text().splitlines()[:43]) + "\n")
    result: dict = {}
    try:
        comp = aggregate([str(d) for d in dirs], ComparisonSettings(n_boot=50))
        result["compare"] = {"accepted": True, "models": [r.model for r in comp.leaderboard]}
    except ValueError as err:
        result["compare"] = {"accepted": False, "said": str(err)[:200]}
    records = [r for _, r, _ in read_records(samples, samples.read_text())]
    a, b = RunDir(dirs[0]), SimpleNamespace(outcomes=Outcomes.from_records(records))
    rule = StopRule(stop="settled", round_sources=50, max_sources=500, confidence=0.95, margin=1.0, power=0.8)
    verdict = judge(("a", [a]), ("b", [b]), 1, "fmr_validated", 2, rule)
    result["verdict_sources"] = {"shared": 43, "counted": verdict.n_sources}
    return result


def lock_scenario() -> dict:
    """X14: a run.lock owner stalled past its lease reads its lock; another process takes it over; the stalled
    heartbeat then writes. Whose lock is it after, and who learns it lost?"""
    import json

    from genEval.runs import lock as run_lock
    from genEval.runs.lock import LOCK, RunLock

    d = Path(tempfile.mkdtemp(prefix="geneval-lock-"))
    old = RunLock(d, lease_s=0.3)
    old.acquire()
    old._stop.set()
    old._thread.join()
    time.sleep(0.6)
    new = RunLock(d, lease_s=30)
    real, armed = run_lock._read, [True]

    def stalled(path):
        found = real(path)
        if armed and armed.pop():
            new.acquire()
        return found

    run_lock._read = stalled
    try:
        old.refresh()
    finally:
        run_lock._read = real
    owner = json.loads((d / LOCK).read_text())["token"]
    out = {
        "lock_holds": "the new owner" if owner == new.token else "the stalled old owner",
        "new_owner_keeps_it": bool(new.refresh()),
        "old_owner_learns_it_lost": not old.refresh(),
    }
    old._stop.set()
    new._stop.set()
    return out


SCENARIOS = {"round": round_scenario, "truncate": truncate_scenario, "lock": lock_scenario}
