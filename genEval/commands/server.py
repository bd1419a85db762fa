"""What runs ``geneval serve``, ``geneval worker`` and ``geneval token``: the service's server
(:mod:`genEval.service.server`: FastAPI, uvicorn, SQLAlchemy, the ``[service]`` extra). Like every module named
``server``, it needs the extra; every other module imports without it (``tests/test_layers.py``).

Only :func:`genEval.commands.serve.service_stack` imports this module, when one of those commands runs, so that
``geneval`` itself, and every other command, starts without the stack (and works where it is not installed).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import uvicorn
from omegaconf import DictConfig

from genEval.commands import bundle, execution_bundle, require
from genEval.commands.early import in_process_settings, worker_settings
from genEval.commands.presets import SERVER_ENV, job_runner, load_benchmarks, registered_classifiers
from genEval.fileio import ensure_writable_dir
from genEval.sandbox import stop_all
from genEval.service.server.app import create_app, proxy_options
from genEval.service.server.database import Database, sqlite_url
from genEval.service.server.facade import Service
from genEval.service.server.slow_clients import timed_h11
from genEval.service.server.supervisor import Supervisor
from genEval.service.server.worker import Worker, stop_worker_on_signals, stopped_by
from genEval.service.worker_settings import WorkerSettings


def home_of(cfg: DictConfig) -> Path:
    """The service directory a serve/worker/token config names (``home``), absolute."""
    return Path(str(cfg.home)).expanduser().resolve()


def open_db(cfg: DictConfig) -> tuple[Path, Database]:
    """The service directory and database of a serve/worker/token config (SQLite under home by default)."""
    home = ensure_writable_dir(home_of(cfg))
    return home, Database(str(cfg.db) if cfg.get("db") else sqlite_url(home / "geneval.db"))


def _worker(cfg: DictConfig, db: Database, home: Path, settings: WorkerSettings | None = None) -> Worker:
    """A worker of ``cfg`` (its execution: device, precision, compile, which every job it runs gets)."""
    execution = execution_bundle(cfg)
    return Worker(db, home, job_runner(execution), settings or worker_settings(cfg))


def _db_arg(cfg: DictConfig) -> str:
    return f" db={cfg.db}" if cfg.get("db") else ""


# ------------------------------------------------------------------------------------ commands
def serve(cfg: DictConfig) -> None:
    """Start the HTTP service (and ``workers`` in-process workers) until interrupted."""
    workers = in_process_settings(cfg)  # conf/worker: the in-process workers' lease, limits and sandbox
    settings = bundle(cfg, "server", home=home_of(cfg))  # conf/server: limits, quotas, sandbox (checked by Settings)
    home, db = open_db(cfg)  # after the checks: a refused setting leaves no database behind
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
    print(sandbox_line(service.uploads.sandbox), flush=True)
    print(f"leaderboard {url}/  API docs {url}/docs", flush=True)
    upkeep = Supervisor(
        db.queue, lambda: _worker(cfg, db, home, workers), int(cfg.workers), workers.max_attempts, workers.upkeep_s
    )
    protocol = timed_h11(float(cfg.get("header_timeout_s", 10)), float(cfg.get("body_timeout_s", 30)))
    config = uvicorn.Config(
        app,
        host=str(cfg.host),
        port=int(cfg.port),
        log_level=str(cfg.log_level),
        http=protocol,
        timeout_keep_alive=int(cfg.get("keep_alive_s", 5)),
        timeout_graceful_shutdown=int(cfg.get("shutdown_timeout_s", 10)),
        **proxy_options(cfg.get("forwarded_allow_ips")),
    )
    upkeep.start()
    try:
        _Server(config).run()
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT it handled once it has shut down: a clean stop
        pass
    finally:
        stop_all()
        upkeep.stop()
        db.close()


def sandbox_line(sandbox) -> str:
    """What ``geneval serve`` says at start about its sandbox (:class:`genEval.service.models.UploadSandbox`), and
    whether it can write its own install (a ``.pth`` file there would run in every interpreter it starts)."""
    if sandbox.code_problem is None:
        line = "sandbox: bubblewrap (uploads checked and jobs evaluated with no file but their own, as nobody, offline)"
    elif sandbox.allow_code:
        line = (
            f"sandbox: NONE ({sandbox.code_problem}); TorchScript and torch.export uploads are accepted anyway "
            "(allow_unsandboxed_models=true): their code runs with this server's files"
        )
    else:
        line = (
            f"sandbox: none ({sandbox.code_problem}); TorchScript and torch.export uploads are refused (install "
            "bubblewrap, or allow them with allow_unsandboxed_models=true)"
        )
    writable = [p for p in writable_install() if p]
    if writable:
        line += f"\nwarning: this server can write its own install ({writable[0]}); run it as a user that cannot"
    return line


def writable_install() -> list[str]:
    """The directories genEval and torch are imported from that this process may write (an install the service
    cannot write is one a model that escaped cannot change)."""
    import importlib.util

    out = []
    for name in ("genEval", "torch"):
        spec = importlib.util.find_spec(name)
        where = Path(spec.origin).parents[1] if spec and spec.origin else None
        if where is not None and os.access(where, os.W_OK):
            out.append(str(where))
    return out


class _Server(uvicorn.Server):
    """uvicorn's server, which on SIGINT/SIGTERM also kills the upload checks running in child processes (a request
    waiting for one then answers 503 at once, and the server stops without waiting out the check's time limit)."""

    def handle_exit(self, sig: int, frame: Any) -> None:
        stop_all()
        super().handle_exit(sig, frame)


def worker(cfg: DictConfig) -> int:
    """Claim and evaluate jobs from the database until interrupted (or idle, with exit_when_idle=true)."""
    settings = worker_settings(cfg, host=cfg.get("host"))
    home, db = open_db(cfg)
    w = _worker(cfg, db, home, settings)
    sandbox = "bubblewrap" if w.isolated else f"none ({w.isolation_problem})"
    print(f"genEval worker {w.id}: database {db.display_url()}, home {home}, device {settings.device}, "
          f"sandbox {sandbox}", flush=True)  # fmt: skip
    with stop_worker_on_signals(w):  # SIGTERM/SIGINT: hand the running job back, then exit 143/130
        n = w.run()
    print(f"genEval worker {w.id}: ran {n} job(s)", flush=True)
    db.close()
    if (stop := stopped_by(w)) is not None:
        raise stop
    return n


def token(cfg: DictConfig) -> None:
    """Create (name=, role=), list (list=true) or revoke (revoke=<id>) API tokens."""
    _, db = open_db(cfg)
    if cfg.get("list"):
        for t in db.tokens.all():
            print(f"{t.id}  {t.role:<9}  {t.name}" + ("  (revoked)" if t.revoked_at else ""))
    elif cfg.get("revoke"):
        if not db.tokens.revoke(str(cfg.revoke)):
            raise ValueError(f"no live token with id {cfg.revoke!r}; see `geneval token list=true`.")
        print(f"revoked token {cfg.revoke}")
    else:
        name = require(cfg, "name", "token", "name=alice role=submitter")
        secret, info = db.tokens.create(str(name), str(cfg.role))
        print(
            f"API token for {info.name} (role {info.role}, id {info.id}). It is shown only now; only its sha256 "
            f"is stored:\n{secret}"
        )
    db.close()
