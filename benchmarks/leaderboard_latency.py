"""Leaderboard latency with many finished jobs (a measurement, not a test): how long ``/`` and
``/api/leaderboard/<name>`` take when the database holds N finished jobs, on SQLite and PostgreSQL.

    # 1. fill a service directory with N finished digits_smoke jobs (their standings stored as workers do)
    python -m benchmarks.leaderboard_latency fill --dir /tmp/lb1000 --jobs 1000
    # 2. measure a server of some checkout against it (the first request, then --requests more)
    python -m benchmarks.leaderboard_latency measure --dir /tmp/lb1000 --db sqlite
    python -m benchmarks.leaderboard_latency measure --dir /tmp/lb1000 --db postgresql     # copied into a fresh cluster
    python -m benchmarks.leaderboard_latency measure --dir /tmp/lb1000 --db sqlite --code /tmp/geneval-before
    # 3. what the worker pays instead: the standings of one more finished job (not stored)
    python -m benchmarks.leaderboard_latency next --dir /tmp/lb1000 --n-boot 1000

``fill`` makes one real run (``geneval data.limit=20 search.budget=5``: digits_smoke's data, generator, oracle and
search) and writes N jobs whose run directories hold its records with a share of final predictions changed per job
(seeded by the job's number), so the models differ; each ``results.json`` is scored again from those records by the
driver's own ``summarize``. Each job is submitted, claimed and finished through the database, and, when the checkout
stores standings (``genEval.service.server.standings.compute.record_finished``), with its standings row, exactly as a
worker finishes a job; the time of those last finishes is printed (the cost moved from page views to workers).

``measure`` starts ``geneval serve workers=0`` of ``--code`` (default: this checkout) on 127.0.0.1 against the
filled database (for PostgreSQL: every table copied into a throwaway cluster), times the first request of each
path (``--cold-timeout`` bounds it) and ``--requests`` more, one at a time, and prints one table row per path.
``next`` times what a worker computes when one more job finishes (cold: runs read from disk; warm: the worker's
loaded runs kept), on a copy of the database.
Traffic goes only to 127.0.0.1.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/leaderboard_latency.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

from benchmarks.harness import results

ROOT = Path(__file__).resolve().parents[1]
BENCHMARK = "digits_smoke"


def _template(out: Path) -> Path:
    """One real finished run with digits_smoke's settings (the offline default's roles, 20 images, 5 steps)."""
    if not (out / "results.json").is_file():
        subprocess.run(
            [sys.executable, "-m", "genEval.cli", "data.limit=20", "search.budget=5", "seed=0", f"hydra.run.dir={out}"],
            check=True,
            cwd=ROOT,
        )
    return out


def _variant(template: Path, out: Path, k: int) -> None:
    """The template's records with a seeded share of final predictions changed, scored again (a valid run)."""
    from genEval.runs.reader import read_results, read_samples
    from genEval.runs.summary import summarize

    res = read_results(template)
    rng = random.Random(k)
    n_classes = len(res.class_names)
    flip = rng.uniform(0.0, 0.6)
    records = []
    for rec in read_samples(template):
        if rec.validated and rng.random() < flip:
            wrong = (rec.label + 1 + rng.randrange(n_classes - 1)) % n_classes
            rec = replace(rec, final_pred=rec.label if rec.final_pred != rec.label else wrong)
        records.append(rec)
    identity = replace(res.identity, seed=k)
    result = summarize(
        records,
        res.class_names,
        config=replace(
            res.config, values={**res.config.values, "comparison": {"model": f"model-{k:04d}", "repetition": 0}}
        ),
        identity=identity,
        seed_drawn=False,
        device="cpu",
        run_dir=str(out),
        timings=res.timings,
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "samples.jsonl").write_text("".join(json.dumps(asdict(r)) + "\n" for r in records))
    (out / "results.json").write_text(json.dumps(result.to_dict()))


def fill(args: argparse.Namespace) -> None:
    from benchmarks.harness.presets import benchmark
    from genEval.service.server.database import Database, sqlite_url

    try:
        from genEval.service.server.standings.compute import StandingsBuilder, record_finished
    except ImportError:  # a checkout from before standings were stored
        StandingsBuilder = record_finished = None  # noqa: N806

    home = Path(args.dir).resolve()
    home.mkdir(parents=True, exist_ok=True)
    template = _template(home / "template")
    bench = benchmark(BENCHMARK)
    db = Database(sqlite_url(home / "geneval.db"))
    db.benchmarks.register(bench.name, bench.version, bench.title, bench.record())
    owner = db.tokens.create("latency", "submitter")[1]
    builder = None if StandingsBuilder is None else StandingsBuilder(db.leaderboard, home, n_boot=args.n_boot)
    done = len(db.jobs.list(status="done", limit=10**6))
    t_start, recent = time.perf_counter(), []
    for k in range(done, args.jobs):
        job = db.jobs.submit(
            benchmark=bench.name,
            benchmark_version=bench.version,
            name=f"model-{k:04d}",
            owner=owner,
            model={"kind": "config", "name": "digits_cnn"},
            config={},
            overrides={},
            seeds=[k],
            upload_path=None,
        )
        claimed = db.queue.claim("latency", 3600)
        _variant(template, job.rep_dir(home, 0), k)
        result = {"repetitions": [{"repetition": 0, "seed": k, "run_dir": str(Path(job.run_dir) / "rep0")}]}
        t0 = time.perf_counter()
        if builder is None:
            assert db.queue.finish(claimed.id, "latency", result)
        else:
            assert record_finished(db, builder, claimed, "latency", result)
        recent = (recent + [time.perf_counter() - t0])[-20:]
        if (k + 1) % 50 == 0 or k + 1 == args.jobs:
            print(
                f"{k + 1} jobs finished ({time.perf_counter() - t_start:.0f}s); finishing one took "
                f"{statistics.mean(recent):.2f}s on average over the last {len(recent)}",
                flush=True,
            )
    db.close()
    print(f"filled {home}: {args.jobs} finished {BENCHMARK} jobs (standings n_boot {args.n_boot})")


def next_job(args: argparse.Namespace) -> None:
    """Time the worker's standings computation for one more finished job against the filled database (on a copy of
    it, so nothing is stored), repeated ``--repeat`` times with a fresh builder (its runs read from disk)."""
    from benchmarks.harness.presets import benchmark
    from genEval.service.server.database import Database, sqlite_url
    from genEval.service.server.standings.compute import StandingsBuilder

    home = Path(args.dir).resolve()
    bench = benchmark(BENCHMARK)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(home / "geneval.db", Path(tmp) / "geneval.db")
        db = Database(sqlite_url(Path(tmp) / "geneval.db"))
        ranked = len(db.standings.rows(bench.name, bench.version))
        owner = db.tokens.create("latency-next", "submitter")[1]
        k = 10**6
        job = db.jobs.submit(
            benchmark=bench.name,
            benchmark_version=bench.version,
            name="model-next",
            owner=owner,
            model={},
            config={},
            overrides={},
            seeds=[k],
            upload_path=None,
        )
        claimed = db.queue.claim("latency", 3600)
        _variant(home / "template", job.rep_dir(home, 0), k)
        try:
            for _ in range(args.repeat):
                builder = StandingsBuilder(db.leaderboard, home, n_boot=args.n_boot)
                t0 = time.perf_counter()
                update = builder.prepare(claimed)
                t1 = time.perf_counter()
                builder.prepare(claimed)  # the worker keeps the loaded runs: the next job pays only the pairs
                t2 = time.perf_counter()
                marks = sum(len(v) for v in update.row.standing.better_than.values()) + sum(
                    len(v) for v in update.beaten_by.values()
                )
                print(
                    f"| {ranked} | {args.n_boot} | {t1 - t0:.1f} s | {t2 - t1:.1f} s | {marks} |",
                    flush=True,
                )
        finally:
            shutil.rmtree(home / job.run_dir, ignore_errors=True)
            db.close()


# --------------------------------------------------------------------------------------------- measure
def _copy_tables(src_url: str, dst_url: str) -> None:
    """Every table of the service database, row for row (SQLAlchemy reflection; the schema is the checkout's)."""
    from sqlalchemy import MetaData, create_engine, insert, select

    from genEval.service.server.database import Database

    Database(dst_url).close()  # creates the tables of this checkout
    src, dst = create_engine(src_url), create_engine(dst_url)
    meta = MetaData()
    meta.reflect(src)
    dst_meta = MetaData()
    dst_meta.reflect(dst)
    with src.connect() as a, dst.begin() as b:
        for table in meta.sorted_tables:
            if table.name not in dst_meta.tables or table.name == "alembic_version":  # the new database's own stamp
                continue
            rows = [dict(r._mapping) for r in a.execute(select(table))]
            if rows:
                b.execute(insert(dst_meta.tables[table.name]), rows)
    src.dispose()
    dst.dispose()


def _get(client, path: str, timeout: float) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    r = client.get(path, timeout=timeout)
    return time.perf_counter() - t0, r.status_code, len(r.content)


def measure(args: argparse.Namespace) -> None:
    import httpx

    from benchmarks.harness.net import free_port
    from benchmarks.harness.postgres import PgCluster
    from genEval.service.server.database import sqlite_url

    home = Path(args.dir).resolve()
    code = Path(args.code).resolve()
    url, cluster = sqlite_url(home / "geneval.db"), None
    if args.db == "postgresql":
        cluster = PgCluster().start()
        url = cluster.create_database()
        _copy_tables(sqlite_url(home / "geneval.db"), url)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(code)}
    log = open(home / f"serve-{args.db}-{code.name}.log", "w")
    cmd = [sys.executable, "-m", "genEval.cli", "serve", "host=127.0.0.1", f"port={port}", f"home={home}"]
    cmd += [f"db={url}", "workers=0", f"default_benchmark={BENCHMARK}", f"benchmarks=[{BENCHMARK}]"]
    cmd += [f"n_boot={args.n_boot}", "log_level=warning"]
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=code)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/api/health", timeout=5).status_code in (200, 503):  # 503: no worker (workers=0)
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        with httpx.Client(base_url=base) as client:
            n_done = client.get("/api/health", timeout=30).json().get("jobs", {}).get("done")
            for path in ("/", f"/api/leaderboard/{BENCHMARK}"):
                try:
                    cold, status, size = _get(client, path, args.cold_timeout)
                except httpx.TimeoutException:
                    cells = f"| {args.db} | {n_done} | {code.name} | `{path}` | > {args.cold_timeout:.0f} s (timed out)"
                    print(cells + " | - | - | - |", flush=True)
                    break
                warm = [_get(client, path, args.cold_timeout) for _ in range(args.requests)]
                ms = sorted(1000 * w[0] for w in warm)
                p95 = statistics.quantiles(ms, n=20)[18] if len(ms) >= 2 else ms[0]
                print(
                    f"| {args.db} | {n_done} | {code.name} | `{path}` | {cold:.2f} s | {statistics.median(ms):.0f} ms "
                    f"| {p95:.0f} ms | {size / 1e6:.2f} MB (HTTP {status}) |",
                    flush=True,
                )
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        if cluster is not None:
            cluster.remove()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    f = sub.add_parser("fill", help="fill a service directory with finished jobs")
    f.add_argument("--dir", required=True)
    f.add_argument("--jobs", type=int, default=1000)
    f.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples of the stored standings")
    m = sub.add_parser("measure", help="time the leaderboard of a filled service directory")
    m.add_argument("--dir", required=True)
    m.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    m.add_argument("--code", default=str(ROOT), help="the checkout whose server is measured")
    m.add_argument("--requests", type=int, default=20, help="requests per path after the first")
    m.add_argument("--cold-timeout", type=float, default=900.0, help="seconds the first request may take")
    m.add_argument("--n-boot", type=int, default=1000, help="the server's n_boot (the old server computed with it)")
    n = sub.add_parser("next", help="time the standings computation of one more finished job (not stored)")
    n.add_argument("--dir", required=True)
    n.add_argument("--n-boot", type=int, default=1000)
    n.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    {"fill": fill, "measure": measure, "next": next_job}[args.what](args)


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
