# ruff: noqa: F811  (pytest fixtures imported from service_support are redefined as test arguments)
"""A settled benchmark in the service (issue 33, item 5): ``stop: settled`` presets, rounds of fresh paired sources
with the version's round seeds, a worker that queues a model's next round while a pair of neighbours is open (and
only then, once), tied ranks and the sources-needed estimate on the leaderboard, the stored verdicts equal to
``geneval compare``'s, and fixed benchmarks' versions unchanged (genEval/service/server/standings/settled.py)."""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from fastapi.testclient import TestClient

from genEval.commands.serve import load_benchmarks
from genEval.comparisons.aggregate import aggregate as compare_runs
from genEval.comparisons.settings import ComparisonSettings, StopRule
from genEval.comparisons.settled import round_seed
from genEval.runs.reader import RunDir
from genEval.service.benchmarks import Benchmark
from genEval.service.execute import run_job
from genEval.service.refusals import Conflict
from genEval.service.server.app import create_app
from genEval.service.server.database import Database, sqlite_url
from genEval.service.server.facade import Service, Settings
from genEval.service.server.standings.board import read_standings
from genEval.service.server.standings.compute import RANK_BY, StandingsBuilder, aggregate, record_finished
from genEval.service.server.worker import Worker
from tests.support.service import (  # noqa: F401 - fixtures
    CENTROIDS,
    centroid_build,
    centroid_runner,
    db,
    db_url,
    pg_url,
    postgres_cluster,
    postgres_server,
    worker_settings,
)

N_BOOT = 200


@pytest.fixture(scope="module")
def settled():
    return load_benchmarks(["digits_settled"])["digits_settled"]


@pytest.fixture
def fixed_base(monkeypatch):
    """The version's secret round base drawn as 20240611 (the rounds' sources, and so the test, are reproducible)."""
    import genEval.service.server.benchmarks.store as store

    monkeypatch.setattr(store.secrets, "randbits", lambda bits: 20240611)


def _service(db, home: Path, bench: Benchmark) -> Service:
    return Service(db, Settings(home=home, default_benchmark=bench.name), {bench.name: bench}, dict(CENTROIDS))


def _submit(service: Service, name: str, config: str, bench: str = "digits_settled"):
    owner = service.db.tokens.create(name, "submitter")[1]
    return service.jobs.submit(bench, name, {"kind": "config", "name": config}, {}, owner)


def _run_queue(db, home: Path, builder: StandingsBuilder) -> int:
    """Every queued job, the ones the rule queues meanwhile included, through the production runner (with the tiny
    centroid components) and the worker's finish (a worker's steps, in this process); returns how many ran."""
    ran = 0
    while (job := db.queue.claim("w", 600)) is not None:
        assert record_finished(db, builder, job, "w", run_job(job, home, lambda *a: None, build=centroid_build))
        ran += 1
    return ran


def _rounds(db) -> dict[str, list[int]]:
    """Model name -> the rounds of its jobs (any status), sorted."""
    out: dict[str, list[int]] = {}
    for job in db.jobs.list():
        out.setdefault(job.name, []).append(job.round)
    return {k: sorted(v) for k, v in out.items()}


def _check_equals_compare(db, home: Path, bench: Benchmark) -> None:
    """The stored leaderboard (order, tied ranks, the verdict on each pair of neighbours, scores and marks) equals
    one ``geneval compare`` aggregate of the same runs, under the stop rule the runs recorded."""
    st = read_standings(db.leaderboard, bench.name, bench.version)
    dirs = [home / d for r in st.rows for d in r.run_dirs]  # names and rounds as the runs recorded them
    comp = compare_runs(dirs, ComparisonSettings(n_boot=N_BOOT, seed=0, level=0.95, rank_by=RANK_BY))
    want = comp.settled
    assert want.rule == bench.rule.to_dict()  # the rounds recorded the benchmark's rule
    assert [r.name for r in st.rows] == want.order
    assert {r.name: r.standing.rank for r in st.rows} == want.tied_ranks
    assert {r.name: r.standing.sources for r in st.rows} == {m: want.sources for m in want.order}
    for row, pair in zip(st.rows, want.pairs):
        got = row.standing.below
        assert (got.a, got.b, got.verdict, got.n_sources, got.looks) == (
            pair.a,
            pair.b,
            pair.verdict,
            pair.n_sources,
            pair.looks,
        )
        assert (got.more_sources, got.more_kind) == (pair.more_sources, pair.more_kind)
        assert [got.value, got.low, got.high] == pytest.approx([pair.value, pair.low, pair.high], abs=1e-9)
    assert st.rows[-1].standing.below is None and st.settled == want.done
    reference = aggregate(dirs, n_boot=N_BOOT)
    for row in st.rows:
        assert row.standing.scores == reference.models[row.name].scores
        assert row.standing.better_than == reference.models[row.name].better_than


def test_two_clearly_different_models_stop_after_the_round_that_orders_them(db, tmp_path, settled, fixed_base):
    service = _service(db, tmp_path, settled)
    a, b = _submit(service, "sharp", "sharp"), _submit(service, "blurred", "blurred")
    base = db.benchmarks.round_base(settled.name, settled.version)
    assert a.seeds == b.seeds == [round_seed(base, 0)]  # round 0 of every model: one draw of sources
    builder = StandingsBuilder(db.leaderboard, tmp_path, n_boot=N_BOOT)
    assert _run_queue(db, tmp_path, builder) == 2  # ordered after the first round: no round queued
    assert _rounds(db) == {"sharp": [0], "blurred": [0]}
    assert db.jobs.count()["queued"] == 0
    board = TestClient(create_app(service)).get("/api/leaderboard/digits_settled").json()
    assert [(r["name"], r["rank"], r["sources"]) for r in board["rows"]] == [("sharp", "1", 40), ("blurred", "2", 40)]
    assert board["rows"][0]["below"]["verdict"] == "ordered" and board["rows"][0]["below"]["low"] > 0
    assert board["settled"] is True and board["stop"]["max_sources"] == 120
    _check_equals_compare(db, tmp_path, settled)


@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def test_two_equal_models_get_rounds_up_to_max_sources_and_share_a_rank(
    database, request, tmp_path, settled, fixed_base
):
    url = request.getfixturevalue("pg_url") if database == "postgresql" else sqlite_url(tmp_path / "geneval.db")
    db = Database(url)
    service = _service(db, tmp_path, settled)
    for name in ("twin_a", "twin_b"):
        _submit(service, name, "blurred")  # the same model under two names
    builder = StandingsBuilder(db.leaderboard, tmp_path, n_boot=N_BOOT)
    assert _run_queue(db, tmp_path, builder) == 6  # rounds of 40 until max_sources=120 per model
    assert _rounds(db) == {"twin_a": [0, 1, 2], "twin_b": [0, 1, 2]}
    base = db.benchmarks.round_base(settled.name, settled.version)
    assert all(j.seeds == [round_seed(base, j.round)] for j in db.jobs.list())  # round r: one seed for all models
    assert all(j.parent_id is None if j.round == 0 else j.parent_id != j.id for j in db.jobs.list())
    client = TestClient(create_app(service))
    board = client.get("/api/leaderboard/digits_settled").json()
    assert [(r["rank"], r["repetitions"], r["sources"]) for r in board["rows"]] == [("1–2", 3, 120)] * 2
    below = board["rows"][0]["below"]
    assert below["verdict"] == "open" and below["sources"] == 120 and below["low"] < 0 < below["high"]
    assert below["more_sources"] is None and "max_sources=120 reached" in below["reason"]  # nothing left to forecast
    assert board["settled"] is False  # equal: never ordered, and too few sources to be resolved
    page = client.get("/").text
    assert re.findall(r"<td>(1–2)</td>", page) == ["1–2", "1–2"]
    assert "open vs twin_b (max_sources=120 reached)" in page or "open vs twin_a (max_sources=120 reached)" in page
    assert page.count("?rep=0") == 6  # each round's report, a job of its own
    _check_equals_compare(db, tmp_path, settled)
    # a new equal model: it has fewer rounds than its neighbour, so it gets rounds (and the neighbours, at the
    # maximum, none)
    _submit(service, "twin_c", "blurred")
    assert _run_queue(db, tmp_path, builder) == 3
    assert _rounds(db) == {"twin_a": [0, 1, 2], "twin_b": [0, 1, 2], "twin_c": [0, 1, 2]}
    assert [r.standing.rank for r in read_standings(db.leaderboard, settled.name, settled.version).rows] == ["1–3"] * 3
    db.close()


def test_a_familywise_version_judges_its_neighbours_with_holm(db, tmp_path, settled, fixed_base):
    """A version whose rule is family-wise (issue 40, item 7): the worker judges its neighbours with Holm over them,
    so the ordered pair is stored at level alpha / 2 and the other at alpha, the leaderboard's rule says so, and the
    verdicts are those of ``geneval compare`` on the same rounds."""
    bench = replace(settled, name="digits_fw", rule=replace(settled.rule, familywise=True, max_sources=40))
    service = _service(db, tmp_path, bench)
    for name, config in (("sharp", "sharp"), ("twin_a", "blurred"), ("twin_b", "blurred")):
        _submit(service, name, config, bench.name)
    builder = StandingsBuilder(db.leaderboard, tmp_path, n_boot=N_BOOT)
    assert _run_queue(db, tmp_path, builder) == 3  # one round each: max_sources = round_sources
    board = TestClient(create_app(service)).get("/api/leaderboard/digits_fw").json()
    assert board["stop"]["familywise"] is True and [r["name"] for r in board["rows"]][0] == "sharp"
    below = [
        r.standing.below for r in read_standings(db.leaderboard, bench.name, bench.version).rows[:-1]
    ]  # the stored verdicts
    assert [(v.verdict, v.confidence) for v in below] == [("ordered", pytest.approx(0.975)), ("open", 0.95)]
    _check_equals_compare(db, tmp_path, bench)


def test_a_round_is_queued_once_however_many_workers_ask_at_once(db, tmp_path, settled):
    service = _service(db, tmp_path, settled)
    root = _submit(service, "twin_a", "blurred")
    got = []
    threads = [threading.Thread(target=lambda: got.append(db.jobs.queue_round(root, 1, 7))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(j is not None for j in got) == 1 and _rounds(db) == {"twin_a": [0, 1]}
    later = next(j for j in got if j is not None)
    assert (later.round, later.parent_id, later.seeds, later.name) == (1, root.id, [7], "twin_a")
    db.jobs.cancel(later.id)  # a cancelled (or failed) round stops the model's rounds: not queued again
    assert db.jobs.queue_round(root, 1, 7) is None and _rounds(db) == {"twin_a": [0, 1]}
    with pytest.raises(ValueError, match="round >= 1"):
        db.jobs.queue_round(root, 0, 7)


@pytest.mark.slow  # a worker process per round: 6 spawned children, about a minute on 2 CPU cores
def test_a_worker_runs_the_rounds_the_rule_asks_for(tmp_path, settled):
    db = Database(sqlite_url(tmp_path / "geneval.db"))
    service = _service(db, tmp_path, settled)
    for name in ("twin_a", "twin_b"):
        _submit(service, name, "blurred")
    worker = Worker(
        db, tmp_path, centroid_runner, worker_settings(heartbeat_s=0.5, poll_s=0.1, exit_when_idle=True, n_boot=N_BOOT)
    )
    assert worker.run() == 6
    assert _rounds(db) == {"twin_a": [0, 1, 2], "twin_b": [0, 1, 2]}
    assert {j.status for j in db.jobs.list()} == {"done"}
    db.close()


def test_the_round_seeds_are_a_secret_of_the_version_kept_by_the_database(tmp_path, settled):
    first = Database(sqlite_url(tmp_path / "one.db"))
    seeds = [_submit(_service(first, tmp_path, settled), n, "sharp").seeds for n in ("a", "b")]
    base = first.benchmarks.round_base(settled.name, settled.version)
    first.close()
    again = Database(sqlite_url(tmp_path / "one.db"))
    assert again.benchmarks.round_base(settled.name, settled.version) == base  # drawn once, kept
    assert seeds == [[round_seed(base, 0)]] * 2
    other = Database(sqlite_url(tmp_path / "two.db"))
    other.benchmarks.register(settled.name, settled.version, settled.title, settled.record())
    assert other.benchmarks.round_base(settled.name, settled.version) != base  # not derivable from the public hash
    with pytest.raises(KeyError, match="no registered version"):
        other.benchmarks.round_base(settled.name, "0" * 16)
    again.close()
    other.close()


def _preset(data: dict | None = None, **meta) -> dict:
    return {
        "data": {"_target_": "D", "limit": 40, "subset": "random", "subset_seed": None, **(data or {})},
        "generator": {"_target_": "G"},
        "oracle": {"_target_": "O"},
        "search": {"budget": 5},
        "mask": {"_target_": "M"},
        "benchmark": {"title": "t", "stop": "settled", "max_sources": 120, **meta},
    }


def test_a_settled_preset_fills_its_rule_and_its_round_draw():
    bench = Benchmark.from_config("s", _preset({"limit": None}, round_sources=50, margin=2))
    assert bench.config["data"]["limit"] == 50 and bench.settled
    assert bench.rule.to_dict() == dict(
        stop="settled", round_sources=50, max_sources=120, confidence=0.95, margin=2, power=0.8, resolution=2.0,
        familywise=False, boundary="spending", spending="pocock",
    )  # fmt: skip
    config, _ = bench.apply_overrides({})
    # the job carries its rule as its runs record it (results.json config.comparison.sequential)
    assert config["comparison"] == {"sequential": bench.rule.to_dict()} and "comparison" not in bench.config
    assert "stop" not in config and StopRule.carried_by(config) == bench.rule
    assert Benchmark.from_config("s", _preset()).rule.round_sources == 40  # round_sources = data.limit
    assert Benchmark.from_config("s", _preset(margin=2)).version != Benchmark.from_config("s", _preset()).version


@pytest.mark.parametrize(
    "data, meta, message",
    [
        ({"subset": "first"}, {}, r"has subset: first \(the same images every round\)"),
        ({"subset_seed": 3}, {}, "fixes subset_seed: 3"),
        ({"subset": None}, {}, "has subset: None"),
        ({}, {"repetitions": 2}, "remove repetitions: 2"),
        ({}, {"max_sources": None}, "needs max_sources"),
        ({}, {"round_sources": 30}, r"round_sources \(30\) and data.limit \(40\) differ"),
        ({"limit": None}, {}, "needs round_sources"),
        ({}, {"max_sources": 10}, "max_sources must be >= round_sources"),
        ({}, {"stop": "sometimes"}, "stop must be fixed | settled"),
        ({}, {"stop": "fixed"}, r"\['max_sources'\] apply to `stop: settled` only"),
    ],
)
def test_a_settled_preset_that_cannot_run_is_refused_naming_why(data, meta, message):
    config = _preset(data, **meta)
    config["benchmark"] = {k: v for k, v in config["benchmark"].items() if v is not None}
    with pytest.raises(ValueError, match=message):
        Benchmark.from_config("s", config)


def _as_block(config: dict) -> dict:
    """The same preset with its stop rule spelled as a ``benchmark.sequential`` block."""
    meta = dict(config["benchmark"])
    block = {k: meta.pop(k) for k in list(meta) if k in StopRule.__dataclass_fields__}
    return {**config, "benchmark": {**meta, "sequential": block}}


def test_a_presets_rule_spelled_as_a_sequential_block_is_the_same_rule_and_version():
    flat = _preset({"limit": None}, round_sources=50, margin=2)
    a, b = Benchmark.from_config("s", flat), Benchmark.from_config("s", _as_block(flat))
    assert a.rule == b.rule and a.spec() == b.spec() and a.version == b.version and a.config == b.config
    assert b.rule.round_sources == 50 and b.rule.margin == 2


def test_the_shipped_settled_preset_spells_a_sequential_block_and_keeps_its_version(settled):
    from genEval.commands import CONF_DIR

    meta = yaml.safe_load((Path(CONF_DIR) / "benchmark" / "digits_settled.yaml").read_text())["benchmark"]
    assert meta["sequential"]["stop"] == "settled" and not set(meta) & set(StopRule.__dataclass_fields__)
    assert settled.version == "48dff956f67e8034"  # as before the block (issue 45): a spelling changes no version
    flat_meta = {k: v for k, v in meta.items() if k != "sequential"} | meta["sequential"]
    flat = {**settled.config, "benchmark": {**flat_meta, "overrides": settled.overrides}}  # digits.yaml's allowlist
    assert Benchmark.from_config(settled.name, flat).version == settled.version


@pytest.mark.parametrize(
    "block, message",
    [
        ({"stop": "settled", "max_source": 120}, r"benchmark.sequential must hold the stop rule's keys \(stop, "),
        ({"stop": "settled", "rule": "override"}, r"got \{'stop': 'settled', 'rule': 'override'\}"),
        ("settled", "benchmark.sequential must hold"),
        ({"stop": "settled", "max_sources": 10}, "max_sources must be >= round_sources"),
    ],
)
def test_a_bad_sequential_block_is_refused_naming_why(block, message):
    config = _preset()
    config["benchmark"] = {"title": "t", "sequential": block}
    with pytest.raises(ValueError, match=message):
        Benchmark.from_config("s", config)


def test_a_rule_given_in_both_spellings_is_refused():
    config = _as_block(_preset())
    config["benchmark"]["margin"] = 2
    with pytest.raises(ValueError, match=r"given twice, as benchmark.sequential and as \['margin'\]"):
        Benchmark.from_config("s", config)


@pytest.mark.parametrize(
    "key, value", [("n_boot", 0), ("batch_size", 0), ("precision", "fp8"), ("interval", "wald"), ("grid_size", -1)]
)
def test_a_presets_bad_run_setting_is_refused_when_it_is_loaded_naming_it(key, value):
    with pytest.raises(ValueError, match=rf"benchmark s: .*{key}"):
        Benchmark.from_config("s", {**_preset(), key: value})


def test_data_without_a_fresh_draw_per_round_is_refused():
    config = _preset()
    config["data"] = {"_target_": "my.FixedImages", "limit": 40}
    with pytest.raises(ValueError, match=r"\(my.FixedImages\) has no `subset` setting, so it cannot draw a fresh"):
        Benchmark.from_config("s", config)


def test_the_shipped_fixed_benchmarks_keep_their_versions():
    """Their versions are hashes of the canonical spec (issue 45): pinned, so that an edit that changes a shipped
    preset's version (and so starts a new leaderboard) is a decision, not an accident."""
    benches = load_benchmarks(["digits", "digits_smoke", "cifar10"])
    assert {n: b.version for n, b in benches.items()} == PINNED
    assert not any(b.settled for b in benches.values())
    spec = benches["digits"].spec()
    assert spec["schema_version"] == 2 and spec["roles"]["mask"] == {"component": "NoMask", "settings": {}}
    assert "genEval." not in repr(spec)  # no import path: a module may move without an alias module
    # a module that moves keeps the version; a setting that changes does not
    digits = benches["digits"]
    moved = {**digits.config, "mask": {"_target_": "somewhere.else.NoMask"}}
    assert dataclasses.replace(digits, config=moved).version == digits.version
    cifar = benches["cifar10"]
    skipping = {**cifar.config, "data": {**cifar.config["data"], "other_folders": "skip"}}
    assert cifar.config["data"]["other_folders"] == "refuse"
    assert dataclasses.replace(cifar, config=skipping).version != cifar.version


#: The shipped fixed presets' versions (canonical spec, schema 2) and the ones they had before issue 45 (the hash of
#: the resolved YAML, import paths included), which :func:`remap_versions` carries over.
PINNED = {"digits": "20fbe62dca099ba4", "digits_smoke": "6861d9ec3b635119", "cifar10": "b7432d687edb285b"}
BEFORE_45 = {"digits": "382b9012964f7d1d", "digits_smoke": "d49c84f8469a9217", "cifar10": "c0e5ceadfb6bb244"}


def test_an_old_database_keeps_its_standings_under_the_new_version(db_url):
    """A database whose benchmark was registered under its pre-issue-45 version: opening it with this genEval moves
    the version, its job, its standing and its round secret to the new version, once (SQLite and PostgreSQL)."""
    from sqlalchemy import text

    from genEval.comparisons.standing import Score, Standing
    from genEval.service.records import StandingInfo
    from genEval.service.server.benchmarks.store import remap_versions

    digits, old = load_benchmarks(["digits"])["digits"], BEFORE_45["digits"]
    url = db_url
    first = Database(url)
    first.benchmarks.register("digits", old, digits.title, {**digits.record(), "version": old, "base_version": old})
    owner = first.tokens.create("alice", "submitter")[1]
    job = first.jobs.submit(benchmark="digits", benchmark_version=old, name="m0", owner=owner,
                            model={"kind": "config", "name": "x"}, config={}, overrides={}, seeds=[0],
                            upload_path=None)  # fmt: skip
    with first.writer.begin() as conn:
        conn.execute(text("UPDATE jobs SET status = 'done', finished_at = 1.0 WHERE id = :id"), {"id": job.id})
    scores = {"fmr_validated": Score(50.0, 40.0, 60.0)}
    standing = StandingInfo(job.id, "digits", old, Standing("m0", 1, scores), None, ["runs/digits/x/rep0"])
    assert first.endings.add(standing)
    secret = first.benchmarks.round_base("digits", old)
    with first.writer.begin() as conn:  # a database of the genEval before Alembic (and before issue 45's versions)
        conn.execute(text("DROP TABLE alembic_version"))
        conn.execute(text("ALTER TABLE benchmarks DROP COLUMN stop"))
    first.close()

    again = Database(url)  # opening it runs the migrations, whose 0003 carries the versions over
    (row,) = again.standings.rows("digits", PINNED["digits"])
    assert (row.job_id, row.name, row.standing.scores) == (job.id, "m0", scores)
    assert again.standings.rows("digits", old) == []
    assert again.jobs.get(job.id).benchmark_version == PINNED["digits"]
    assert again.benchmarks.get("digits", old) is None
    stored = again.benchmarks.get("digits", PINNED["digits"])
    assert stored.config["version"] == stored.config["base_version"] == PINNED["digits"]
    assert again.benchmarks.round_base("digits", PINNED["digits"]) == secret
    with again.writer.begin() as conn:
        assert remap_versions(conn) == {}  # once: a second opening changes nothing
    again.close()


def test_a_database_from_before_rounds_is_upgraded(tmp_path, settled):
    from sqlalchemy import create_engine, inspect, text

    url = sqlite_url(tmp_path / "old.db")
    first = Database(url)
    root = _submit(_service(first, tmp_path, settled), "twin_a", "blurred")
    first.close()
    engine = create_engine(url)  # the jobs table before rounds: no round or parent_id, a unique index of names
    with engine.begin() as conn:
        for sql in (
            "DROP TABLE alembic_version",  # a database from before Alembic
            "ALTER TABLE benchmarks DROP COLUMN stop",
            "DROP INDEX uq_jobs_active_name_round",
            "DROP INDEX ix_jobs_parent_id",
            "ALTER TABLE jobs DROP COLUMN round",
            "ALTER TABLE jobs DROP COLUMN parent_id",
            "ALTER TABLE benchmarks DROP COLUMN round_base",
            "CREATE UNIQUE INDEX uq_jobs_active_name ON jobs (benchmark, benchmark_version, name) "
            "WHERE status IN ('queued', 'running', 'done')",
        ):
            conn.execute(text(sql))
    engine.dispose()
    again = Database(url)
    names = {i["name"] for i in inspect(again.engine).get_indexes("jobs")}
    assert {"uq_jobs_active_name_round", "ix_jobs_parent_id"} <= names and "uq_jobs_active_name" not in names
    old = again.jobs.get(root.id)
    assert (old.round, old.parent_id) == (0, None)
    base = again.benchmarks.round_base(settled.name, settled.version)  # drawn now, then kept
    assert again.benchmarks.round_base(settled.name, settled.version) == base
    later = again.jobs.queue_round(old, 1, round_seed(base, 1))
    assert later is not None and _rounds(again) == {"twin_a": [0, 1]}
    with pytest.raises(Conflict, match="already has a model named 'twin_a'"):
        _submit(_service(again, tmp_path, settled), "twin_a", "sharp")  # names stay unique among submissions
    again.close()


# ------------------------------------------------------------------------- issue 41: rounds are the benchmark's
def _submit_as(service: Service, name: str, config: str) -> tuple[object, dict]:
    secret, owner = service.db.tokens.create(name, "submitter")
    job = service.jobs.submit("digits_settled", name, {"kind": "config", "name": config}, {}, owner)
    return job, {"Authorization": f"Bearer {secret}"}


def _run_one(db, home: Path, builder: StandingsBuilder) -> None:
    job = db.queue.claim("w", 600)
    assert record_finished(db, builder, job, "w", run_job(job, home, lambda *a: None, build=centroid_build))


def test_a_submitter_cannot_cancel_a_round_and_cancelling_the_model_withdraws_it(db, tmp_path, settled, fixed_base):
    """Issue 41 (E8): a submitter could cancel its own queued round; its rounds then stopped for good and the model
    kept a tied "1–2" rank. Now a round is the benchmark's (403 naming the submission to cancel instead), and
    cancelling the submission withdraws the model: its rounds stop and its row shows withdrawn, not tied. (E11: the
    queued round's seed is not shown before it has run.)"""
    service = _service(db, tmp_path, settled)
    a, auth_a = _submit_as(service, "twin_a", "blurred")
    _submit_as(service, "twin_b", "blurred")
    builder = StandingsBuilder(db.leaderboard, tmp_path, n_boot=N_BOOT)
    for _ in range(2):
        _run_one(db, tmp_path, builder)  # round 0 of both: an open pair, so round 1 of each is queued
    queued = {j.name: j for j in db.jobs.list(status="queued")}
    assert {n: j.round for n, j in queued.items()} == {"twin_a": 1, "twin_b": 1}
    client = TestClient(create_app(service))
    shown = client.get(f"/api/jobs/{queued['twin_a'].id}").json()
    assert shown["seeds"] is None and shown["round"] == 1  # E11
    assert "shown once the round has run" in client.get(f"/jobs/{queued['twin_a'].id}").text
    refused = client.post(f"/api/jobs/{queued['twin_a'].id}/cancel", headers=auth_a)
    assert refused.status_code == 403 and f"cancel its submission (job {a.id})" in refused.json()["detail"]
    assert db.jobs.get(queued["twin_a"].id).status == "queued"
    withdrawn = client.post(f"/api/jobs/{a.id}/cancel", headers=auth_a)
    assert withdrawn.status_code == 200, withdrawn.text
    assert db.jobs.get(queued["twin_a"].id).status == "cancelled"
    assert _run_queue(db, tmp_path, builder) == 1  # twin_b's round 1; nothing more for either
    assert _rounds(db) == {"twin_a": [0, 1], "twin_b": [0, 1]}
    board = client.get("/api/leaderboard/digits_settled").json()
    assert [(r["name"], r["rank"]) for r in board["rows"]] == [("twin_b", "1"), ("twin_a", "withdrawn")]
    assert board["rows"][0]["below"] is None
    assert client.get(f"/api/jobs/{queued['twin_b'].id}").json()["seeds"] == queued["twin_b"].seeds  # it ran
    assert client.post(f"/api/jobs/{a.id}/cancel", headers=auth_a).status_code == 200  # withdrawn stays withdrawn


def _results(run: Path) -> dict:
    rec = json.loads((run / "results.json").read_text())
    return {k: rec[k] for k in ("config", "scores", "seed", "execution", "per_class")}


def test_a_job_stored_with_the_old_stop_key_runs_and_is_settled_like_a_new_one(db, tmp_path, settled, fixed_base):
    """A settled job carries its rule as ``comparison.sequential`` (as its runs record it); jobs stored before that
    spelling carry it as ``stop``, and are still read as settled: the same run and record, the round's seed hidden until
    it has run, and cancelling the finished submission withdraws the model (a fixed job's would be refused)."""
    from sqlalchemy import JSON, bindparam, text

    service = _service(db, tmp_path, settled)
    job, auth = _submit_as(service, "twin_a", "blurred")
    assert job.config["comparison"] == {"sequential": settled.rule.to_dict()} and "stop" not in job.config
    legacy = {**{k: v for k, v in job.config.items() if k != "comparison"}, "stop": settled.rule.to_dict()}
    old = replace(job, config=legacy, run_dir="old")
    assert run_job(old, tmp_path, lambda *a: None, build=centroid_build)["repetitions"][0]["n"] == 40
    assert replace(old, status="queued").shown_seeds is None and replace(old, status="done").shown_seeds == old.seeds
    _run_one(
        db, tmp_path, StandingsBuilder(db.leaderboard, tmp_path, n_boot=N_BOOT)
    )  # the new spelling, through the queue
    new_run, old_run = db.jobs.get(job.id).rep_dir(tmp_path, 0), old.rep_dir(tmp_path, 0)
    assert _results(old_run) == _results(new_run)  # the same record, config.comparison.sequential included
    assert _results(old_run)["config"]["comparison"]["sequential"] == settled.rule.to_dict()
    assert "stop" not in _results(old_run)["config"]
    assert (old_run / "samples.jsonl").read_text() == (new_run / "samples.jsonl").read_text()
    with db.writer.begin() as conn:  # the finished submission as a job stored before the spelling
        update = text("UPDATE jobs SET config = :config WHERE id = :id").bindparams(bindparam("config", type_=JSON))
        conn.execute(update, {"config": legacy, "id": job.id})
    assert db.jobs.get(job.id).config == legacy
    withdrawn = TestClient(create_app(service)).post(f"/api/jobs/{job.id}/cancel", headers=auth)
    assert withdrawn.status_code == 200, withdrawn.text  # withdrawn as a settled submission, not "already done"


def _truncate(path: Path, keep: int) -> None:
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:keep]) + "\n")


def test_a_truncated_round_is_refused_by_compare_and_by_a_re_rank(db, tmp_path, settled, fixed_base):
    """Issue 41 (E13): a finished round's samples.jsonl, cut short in place, was accepted: exit 0, an extra round past
    max_sources, a verdict on sources the pair did not share. Now ``compare`` and the service's re-rank refuse it,
    naming the file and the count."""
    from genEval.comparisons.loading import DamagedRun

    service = _service(db, tmp_path, settled)
    _submit(service, "sharp", "sharp")
    _submit(service, "blurred", "blurred")
    builder = StandingsBuilder(db.leaderboard, tmp_path, n_boot=N_BOOT)
    assert _run_queue(db, tmp_path, builder) == 2
    rows = read_standings(db.leaderboard, settled.name, settled.version).rows
    victim = tmp_path / rows[0].run_dirs[0]
    _truncate(victim / "samples.jsonl", 33)
    with pytest.raises(DamagedRun, match=rf"'{victim}' is damaged: samples.jsonl sums to 33 for n but results.json"):
        compare_runs([tmp_path / d for r in rows for d in r.run_dirs], ComparisonSettings(n_boot=N_BOOT))
    again = StandingsBuilder(db.leaderboard, tmp_path, n_boot=N_BOOT).prepare(db.jobs.get(rows[0].job_id))  # a re-rank
    assert not again.row.ranked and "is damaged: samples.jsonl sums to 33 for n" in again.row.warnings[0]


def test_a_verdict_counts_only_the_sources_both_models_have(db, tmp_path, settled, fixed_base):
    """Issue 41 (E13): a pair's verdict counted the union of its sources (50 where the two shared 43)."""
    from types import SimpleNamespace

    from genEval.service.server.standings.settled import judge

    service = _service(db, tmp_path, settled)
    _submit(service, "sharp", "sharp")
    _submit(service, "blurred", "blurred")
    assert _run_queue(db, tmp_path, StandingsBuilder(db.leaderboard, tmp_path, n_boot=N_BOOT)) == 2
    runs = {
        r.name: RunDir(tmp_path / r.run_dirs[0])
        for r in read_standings(db.leaderboard, settled.name, settled.version).rows
    }
    whole = judge(("sharp", [runs["sharp"]]), ("blurred", [runs["blurred"]]), 1, RANK_BY, 10, settled.rule)
    cut = SimpleNamespace(outcomes=runs["blurred"].outcomes.subset(np.arange(40) < 33))
    part = judge(("sharp", [runs["sharp"]]), ("blurred", [cut]), 1, RANK_BY, 10, settled.rule)
    assert (whole.n_sources, part.n_sources) == (40, 33)
