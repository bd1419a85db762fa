"""The service commands (genEval/service/): ``geneval serve``, ``geneval worker``, ``geneval submit``,
``geneval token``.

This module turns their configs (conf/serve.yaml, worker.yaml, submit.yaml, token.yaml) into service
objects: it composes the benchmark presets of ``conf/benchmark/``, lists the classifier configs a
submission may name, and provides the one builder (:func:`build_components`) that turns a job's stored
config into the objects ``genEval.evaluate`` takes, through the command layer's :func:`build`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import sys
from pathlib import Path
from typing import Any

import uvicorn
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from genEval.commands import (
    CONF_DIR,
    build,
    build_data,
    classifier_nodes,
    command,
    config_options,
    execution_from,
    plain,
    require,
)
from genEval.commands.checks import Style, check_run
from genEval.comparisons.judging import oracle_members
from genEval.fileio import ensure_writable_dir
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from genEval.service.api import create_app
from genEval.service.benchmarks import Benchmark
from genEval.service.client import ServiceClient
from genEval.service.core import MiB, Service, Settings
from genEval.service.db import Database, sqlite_url
from genEval.service.execute import Components, run_job
from genEval.service.worker import Worker, run_worker_in_thread, stop_worker_on_signals, stopped_by

log = logging.getLogger(__name__)
SERVICE = Style("service")
#: Server settings a benchmark preset may ask for (``benchmark.server_settings``), with the variable that sets them.
SERVER_ENV = {"imagenet_root": "GENEVAL_IMAGENET_ROOT"}


# ------------------------------------------------------------------------------------ building
def build_components(config: dict) -> Components:
    """A job's stored config (plain dicts) -> the objects of one evaluation (runs in the worker's child).

    The submitted classifier is checked against the benchmark's data (its classes) before anything is built, and
    refused when the oracle holds its weights (a member of the judge has PA 100 by construction)."""
    cfg = OmegaConf.create(config)
    check_run(cfg, classifiers={"classifier": cfg.classifier}, generators={"generator": cfg.generator}, style=SERVICE)
    classifier = build(cfg.classifier, "classifier")
    oracle = build(cfg.oracle, "oracle")
    if oracle_members({"model": classifier}, oracle):
        raise ValueError(
            f"the submitted model is part of this benchmark's oracle ({getattr(oracle, 'name', 'the judge')}): the "
            "oracle keeps only images its members still classify correctly, so the model's PA would be 100 and its "
            "FMR meaningless by construction. Submit a model the oracle does not contain."
        )
    return Components(
        classifier=classifier,
        data=build_data(cfg.data, classifier),
        generator=build(cfg.generator, "generator"),
        oracle=oracle,
        search=SearchConfig.coerce(config["search"]),
        mask=build(cfg.mask, "mask"),
    )


def job_runner(execution: Execution):
    """What a worker's child runs for a job (picklable: module-level functions and a dataclass)."""
    return functools.partial(run_job, build=build_components, execution=execution)


def _compose(config_name: str) -> DictConfig:
    if GlobalHydra.instance().is_initialized():  # inside `geneval serve` (hydra.main)
        return compose(config_name=config_name)
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):  # tests, notebooks
        return compose(config_name=config_name)


def load_benchmarks(names: list[str] | None = None, server: dict | None = None) -> dict[str, Benchmark]:
    """The presets ``conf/benchmark/<name>.yaml``, composed, completed and checked.

    A preset's ``benchmark.server_settings`` (preset key -> setting of ``server``, e.g. ``data.root: imagenet_root``)
    take their values from the server's configuration; then the preset's data, generator, oracle and mask are checked
    against each other and its files looked for (:func:`genEval.commands.checks.check_run`). A named preset that
    misses a setting or fails a check is refused (ValueError naming it); with ``names=None`` every preset is offered
    that passes, and the others are left out with a warning."""
    available = config_options("benchmark")
    wanted = available if names is None else [str(n) for n in names]
    unknown = [n for n in wanted if n not in available]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; available: {', '.join(available)} (conf/benchmark/).")
    out = {}
    for name in wanted:
        try:
            out[name] = _benchmark(name, server or {})
        except (ValueError, OSError) as err:
            if names is not None:
                raise
            log.warning("not offered: %s", err)
    return out


def _benchmark(name: str, server: dict) -> Benchmark:
    config = plain(_compose(f"benchmark/{name}"))
    config.pop("classifier", None)  # a data preset's matching classifier: a submission takes its place
    meta = config.get("benchmark") or {}
    for key, setting in (meta.pop("server_settings", None) or {}).items():
        value = server.get(setting)
        if value in (None, ""):
            raise ValueError(
                f"benchmark {name} needs the server setting {setting} (its {key}): e.g. geneval serve "
                f"{setting}=/path/to/folder 'benchmarks=[{name}]' (or set {SERVER_ENV.get(setting, setting)}); "
                "without it, leave the benchmark out."
            )
        parent, _, last = key.rpartition(".")
        node = config
        for part in parent.split(".") if parent else ():
            node = node[part]
        node[last] = value
    cfg = OmegaConf.create(config)
    try:
        check_run(cfg, classifiers={}, generators={"generator": cfg.generator}, style=SERVICE)
    except (ValueError, OSError) as err:
        raise type(err)(f"benchmark {name}: {err}") from err
    return Benchmark.from_config(name, config)


def registered_classifiers(assets: str | None) -> dict[str, dict]:
    """conf/classifier configs that need no further value (no ``???``), resolved: what ``kind=config`` names."""
    names = config_options("classifier")
    nodes = classifier_nodes(OmegaConf.create({"assets": assets, "names": names}), "names")
    return {n: plain(node) for n, node in nodes.items() if not OmegaConf.missing_keys(node)}


def open_db(cfg: DictConfig) -> tuple[Path, Database]:
    """The service directory and database of a serve/worker/token config (SQLite under home by default)."""
    home = ensure_writable_dir(Path(str(cfg.home)).expanduser().resolve())
    return home, Database(str(cfg.db) if cfg.get("db") else sqlite_url(home / "geneval.db"))


def _worker(cfg: DictConfig, db: Database, home: Path, **extra: Any) -> Worker:
    execution = execution_from(cfg)  # the worker's device, precision, compile: every job it runs gets them
    return Worker(
        db,
        home,
        job_runner(execution),
        device=execution.device,
        lease_s=float(cfg.lease_s),
        heartbeat_s=float(cfg.heartbeat_s),
        poll_s=float(cfg.poll_s),
        max_attempts=int(cfg.max_attempts),
        n_boot=int(cfg.n_boot),
        stop_timeout_s=float(cfg.get("stop_timeout_s", 30)),
        retention_s=float(cfg.get("worker_retention_s", 86400)),
        **extra,
    )


def _db_arg(cfg: DictConfig) -> str:
    return f" db={cfg.db}" if cfg.get("db") else ""


# ------------------------------------------------------------------------------------ commands
@command("serve", config="serve")
def run_serve(cfg: DictConfig) -> None:
    """Start the HTTP service (and ``workers`` in-process workers) until interrupted."""
    home, db = open_db(cfg)
    settings = Settings(
        home=home,
        max_upload_bytes=int(float(cfg.max_upload_mb) * MiB),
        default_benchmark=cfg.get("default_benchmark"),
        n_boot=int(cfg.n_boot),
        max_json_bytes=int(float(cfg.get("max_request_kb", 1024)) * 1024),
        worker_retention_s=float(cfg.get("worker_retention_s", 86400)),
    )
    server = {k: cfg.get(k) for k in SERVER_ENV}
    benchmarks = load_benchmarks(list(cfg.benchmarks) if cfg.get("benchmarks") else None, server)
    if settings.default_benchmark not in benchmarks:
        settings = dataclasses.replace(settings, default_benchmark=next(iter(benchmarks)))
    service = Service(db, settings, benchmarks, registered_classifiers(cfg.get("assets")))
    app = create_app(service)
    url = f"http://{cfg.host}:{cfg.port}"
    print(f"genEval service: home {home} (database {db.display_url()}, run directories {home / 'runs'})")
    print("benchmarks: " + ", ".join(f"{b.name} (version {b.version})" for b in benchmarks.values()))
    print(f"create an API token:  geneval token home={home}{_db_arg(cfg)} name=<you> role=admin")
    print(
        f"more workers:         geneval worker home={home}{_db_arg(cfg)}"
        + ("" if db.dialect == "postgresql" else "   (same machine; use PostgreSQL for several machines)")
    )
    print(f"leaderboard {url}/  API docs {url}/docs", flush=True)
    workers = [_worker(cfg, db, home) for _ in range(int(cfg.workers))]
    threads = [run_worker_in_thread(w) for w in workers]
    try:
        uvicorn.run(app, host=str(cfg.host), port=int(cfg.port), log_level=str(cfg.log_level))
    finally:
        for w in workers:
            w.stop()
        for t in threads:
            t.join(timeout=60)
        db.close()


@command("worker", config="worker")
def run_worker(cfg: DictConfig) -> int:
    """Claim and evaluate jobs from the database until interrupted (or idle, with exit_when_idle=true)."""
    home, db = open_db(cfg)
    worker = _worker(
        cfg,
        db,
        home,
        exit_when_idle=bool(cfg.exit_when_idle),
        max_jobs=None if cfg.get("max_jobs") is None else int(cfg.max_jobs),
        host=cfg.get("host"),
    )
    print(f"genEval worker {worker.id}: database {db.display_url()}, home {home}, device {worker.device}", flush=True)
    with stop_worker_on_signals(worker):  # SIGTERM/SIGINT: hand the running job back, then exit 143/130
        n = worker.run()
    print(f"genEval worker {worker.id}: ran {n} job(s)", flush=True)
    db.close()
    if (stop := stopped_by(worker)) is not None:
        raise stop
    return n


@command("token", config="token")
def run_token(cfg: DictConfig) -> None:
    """Create (name=, role=), list (list=true) or revoke (revoke=<id>) API tokens."""
    _, db = open_db(cfg)
    if cfg.get("list"):
        for t in db.list_tokens():
            print(f"{t.id}  {t.role:<9}  {t.name}" + ("  (revoked)" if t.revoked_at else ""))
    elif cfg.get("revoke"):
        if not db.revoke_token(str(cfg.revoke)):
            raise ValueError(f"no live token with id {cfg.revoke!r}; see `geneval token list=true`.")
        print(f"revoked token {cfg.revoke}")
    else:
        name = require(cfg, "name", "token", "name=alice role=submitter")
        secret, info = db.create_token(str(name), str(cfg.role))
        print(
            f"API token for {info.name} (role {info.role}, id {info.id}). It is shown only now; only its sha256 "
            f"is stored:\n{secret}"
        )
    db.close()


@command("submit", config="submit")
def run_submit(cfg: DictConfig) -> dict:
    """Upload (when model.file is set) and submit a model; with wait=true follow the job to its end."""
    name = require(cfg, "name", "submit", "name=my-model model.kind=config model.name=digits_cnn")
    if not cfg.get("token"):
        raise ValueError(
            "geneval submit needs an API token: token=<token> or GENEVAL_TOKEN=<token> (an admin "
            "creates one with `geneval token name=<you> role=submitter`)."
        )
    model = {k: v for k, v in plain(cfg.model).items() if v is not None and k != "file"}
    with ServiceClient(str(cfg.url), str(cfg.token)) as client:
        if cfg.model.get("file"):
            up = client.upload(str(cfg.model.file))
            print(f"uploaded {up['filename']} ({up['kind']}, {up['size']} bytes, sha256 {up['sha256'][:16]}...)")
            model["upload"] = up["id"]
        job = client.submit(str(cfg.bench), str(name), model, plain(cfg.overrides) or {})
        print(f"job {job['id']} queued: {client.url}/jobs/{job['id']}", flush=True)
        if not cfg.wait:
            return job
        shown = {"status": None}

        def show(j: dict) -> None:
            line = (j["status"], j.get("images_done"))
            if line != shown["status"]:
                total = j.get("images_total")
                eta = j.get("eta_s")
                print(
                    f"  {j['status']}"
                    + (f": {j['images_done']}/{total} images" if total else "")
                    + (f", about {eta:.0f}s left" if eta else ""),
                    flush=True,
                )
                shown["status"] = line

        job = client.wait(job["id"], timeout_s=float(cfg.timeout_s), on_update=show)
    if job["status"] != "done":
        print(f"geneval submit: job {job['id']} {job['status']}: {job.get('error') or ''}", file=sys.stderr)
        sys.exit(1)
    for rep in job["result"]["repetitions"]:
        print(json.dumps({"repetition": rep["repetition"], "seed": rep["seed"], **rep["metrics"]}))
    return job
