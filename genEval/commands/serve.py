"""The service commands (genEval/service/): ``geneval serve``, ``geneval worker``, ``geneval token`` and
``geneval submit``, registered here without loading the service stack.

``serve``, ``worker`` and ``token`` need FastAPI, uvicorn and SQLAlchemy, which come with the ``[service]`` extra
(``pip install "geneval-fmr[service]"``): their work is in :mod:`genEval.commands.server`, imported by
:func:`service_stack` only when one of them runs, so that ``geneval`` and every other command start without the
stack and work where it is not installed; without it these three say, in one line, what to install. ``submit`` is
a client (httpx) and needs no extra.

Building from configs (the benchmark presets, the registered classifiers, a job's components) is in
:mod:`genEval.commands.presets`; its names are importable from here too.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

from omegaconf import DictConfig

from genEval.commands import command, plain, require
from genEval.commands.presets import (  # importable from here, as before the split
    SERVER_ENV,
    SERVICE,
    _compose,
    build_components,
    job_runner,
    load_benchmarks,
    registered_classifiers,
)
from genEval.comparisons.ranking import DEFAULT_RANK_BY
from genEval.scores.text import headline, score_table
from genEval.service.client import ServiceClient

__all__ = [
    "INSTALL",
    "SERVER_ENV",
    "SERVICE",
    "SERVICE_STACK",
    "_compose",
    "build_components",
    "job_runner",
    "load_benchmarks",
    "registered_classifiers",
    "service_stack",
]

#: How to get the service stack.
INSTALL = 'pip install "geneval-fmr[service]"'
#: The import names of the ``[service]`` extra's packages that ``serve``, ``worker`` and ``token`` need; psycopg, also
#: in the extra, only with a PostgreSQL ``db=``.
SERVICE_STACK = ("fastapi", "uvicorn", "sqlalchemy", "python_multipart")


def service_stack(cfg: DictConfig | None = None) -> ModuleType:
    """:mod:`genEval.commands.server`, imported now; where a package of the ``[service]`` extra that ``cfg`` needs is
    missing, an ImportError naming it and the one line that installs the extra (the command prints it, exit 2)."""
    postgres = cfg is not None and str(cfg.get("db") or "").startswith("postgresql")
    needed = (*SERVICE_STACK, "psycopg") if postgres else SERVICE_STACK
    missing = next((name for name in needed if not _installed(name)), None)
    if missing is None:
        try:
            return importlib.import_module("genEval.commands.server")
        except ModuleNotFoundError as err:
            if (err.name or "").split(".")[0] not in needed:
                raise
            missing = err.name.split(".")[0]
    raise ImportError(f"the service needs the [service] extra ({missing} is not installed): {INSTALL}")


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder that refuses the name, or a half-imported module
        return False


@command("serve")
def run_serve(cfg: DictConfig) -> None:
    """Start the HTTP service (and ``workers`` in-process workers) until interrupted."""
    service_stack(cfg).serve(cfg)


@command("worker")
def run_worker(cfg: DictConfig) -> int:
    """Claim and evaluate jobs from the database until interrupted (or idle, with exit_when_idle=true)."""
    return service_stack(cfg).worker(cfg)


@command("token")
def run_token(cfg: DictConfig) -> None:
    """Create (name=, role=), list (list=true) or revoke (revoke=<id>) API tokens."""
    service_stack(cfg).token(cfg)


class Progress:
    """What ``geneval submit wait=true`` prints while it follows a job: a line when the status changes or more images
    are done, never a count below one already shown (the worker may report a repetition's count, then the next one's
    from 0, then none while it finishes: the user reads one count that only grows)."""

    def __init__(self) -> None:
        self.status: str | None = None
        self.done = -1

    def line(self, job: dict) -> str | None:
        """The line to print for this poll of ``job``, or None when nothing new happened."""
        status, total = job["status"], job.get("images_total")
        done = max(self.done, int(job.get("images_done") or 0))
        if status == self.status and (done == self.done or not total):
            return None
        self.status, self.done = status, done
        eta = job.get("eta_s")
        counted = f": {done}/{total} images" if total and status == "running" else ""
        return f"  {status}{counted}" + (f", about {eta:.0f}s left" if eta and status == "running" else "")


def job_summary(job: dict, results: list[dict], url: str) -> list[str]:
    """The end of ``geneval submit wait=true``: per repetition the headline and table of scores ``geneval`` prints
    (:mod:`genEval.scores.text`), then where to see the job."""
    lines = []
    for rep, res in enumerate(results):
        seed = res.get("seed")
        head = f"{job.get('name')} on {job.get('benchmark')}" + (
            f", repetition {rep} (seed {seed})" if seed is not None else ""
        )
        lines += [
            f"{head}: {headline(res.get('scores') or {}, DEFAULT_RANK_BY)}",
            *score_table(res.get("scores") or {}),
        ]
        lines += [f"  warning: {w}" for w in res.get("warnings") or []]
    lines += [f"job page: {url}/jobs/{job['id']}", f"next:\n  open {url}/jobs/{job['id']}/report   (its report)"]
    return lines


@command("submit")
def run_submit(cfg: DictConfig) -> dict:
    """Upload (when model.file is set) and submit a model; with wait=true follow the job to its end and print its
    scores as ``geneval`` does."""
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
        progress = Progress()

        def show(j: dict) -> None:
            line = progress.line(j)
            if line is not None:
                print(line, flush=True)

        job = client.wait(job["id"], timeout_s=float(cfg.timeout_s), on_update=show)
        if job["status"] != "done":
            print(f"geneval submit: job {job['id']} {job['status']}: {job.get('error') or ''}", file=sys.stderr)
            sys.exit(1)
        results = [client.results(job["id"], rep["repetition"]) for rep in job["result"]["repetitions"]]
    print("\n".join(job_summary(job, results, client.url)))
    return job
