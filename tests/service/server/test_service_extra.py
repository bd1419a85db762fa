"""The service as an extra (`pip install "geneval-fmr[service]"`) and its routes as documented in /openapi.json.

Without the extra, `geneval serve`, `worker` and `token` say in one line what to install (exit 2) and `geneval submit`
(a client) still works; the layer rules in tests/test_layers.py keep everything else from importing the stack.
Every API route's answer is in the OpenAPI schema: a pydantic model (a ``$ref``) for JSON answers; the HTML pages
(``text/html``) and the two files served as they are (a run's results.json, a snapshot tar) document their media
type and a plain schema instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import fastapi.routing
import pytest
from fastapi.routing import APIRoute
from hydra import compose, initialize_config_dir

from genEval.commands import CONF_DIR
from genEval.commands import serve as serve_commands
from genEval.commands.serve import load_benchmarks, registered_classifiers
from genEval.service.server.app import create_app
from genEval.service.server.database import Database, sqlite_url
from genEval.service.server.facade import Service, Settings
from tests.support.assets import ROOT

INSTALL = 'pip install "geneval-fmr[service]"'
#: A fresh interpreter in which the named packages cannot be imported, running `geneval <args>`.
HIDDEN = """
import sys

class Hidden:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {hidden!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Hidden())
from genEval.cli import main
main()
"""


def _geneval_without(hidden: tuple[str, ...], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    code = HIDDEN.format(hidden=set(hidden))
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_serve_without_the_service_stack_names_the_extra_in_one_line(tmp_path):
    done = _geneval_without(("fastapi",), "serve", f"home={tmp_path / 'svc'}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"geneval serve: error: the service needs the [service] extra (fastapi is not installed): {INSTALL}"
    ]


def test_submit_is_a_client_and_needs_no_extra(tmp_path):
    hidden = ("fastapi", "uvicorn", "sqlalchemy", "starlette", "pydantic", "psycopg", "python_multipart")
    done = _geneval_without(hidden, "submit", "name=x", "token=gev_x", "url=http://127.0.0.1:9", cwd=tmp_path)
    assert done.returncode == 2 and "cannot reach the genEval service" in done.stderr, done.stderr
    assert "extra" not in done.stderr


def _config(name: str, *overrides: str):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(config_name=name, overrides=list(overrides))


@pytest.mark.parametrize(
    "command, overrides, missing",
    [
        ("worker", [], "sqlalchemy"),
        ("token", ["name=alice"], "uvicorn"),
        ("token", ["db=postgresql+psycopg://u@localhost/x", "list=true"], "psycopg"),
    ],
)
def test_service_commands_without_a_package_of_the_extra(command, overrides, missing, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(serve_commands, "_installed", lambda name: name != missing)
    cfg = _config(command, f"home={tmp_path}", *overrides)
    with pytest.raises(SystemExit) as stop:
        getattr(serve_commands, f"run_{command}")(cfg)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"geneval {command}: error: the service needs the [service] extra ({missing} is not installed): {INSTALL}"
    ]


# ------------------------------------------------------------------------------------ the OpenAPI schema
#: Every route of the API and the pages, by method and path: the URLs clients and links use (none may go away).
ROUTES = {
    ("GET", "/api/health"),
    ("GET", "/api/benchmarks"),
    ("POST", "/api/benchmarks/{benchmark}/renew"),
    ("GET", "/api/classifiers"),
    ("GET", "/api/leaderboard/{benchmark}"),
    ("POST", "/api/uploads"),
    ("POST", "/api/jobs"),
    ("GET", "/api/jobs"),
    ("GET", "/api/jobs/{job_id}"),
    ("POST", "/api/jobs/{job_id}/cancel"),
    ("POST", "/api/jobs/{job_id}/requeue"),
    ("GET", "/api/jobs/{job_id}/results.json"),
    ("GET", "/api/jobs/{job_id}/snapshot"),
    ("GET", "/api/workers"),
    ("POST", "/api/tokens"),
    ("GET", "/api/tokens"),
    ("DELETE", "/api/tokens/{token_id}"),
    ("GET", "/"),
    ("GET", "/leaderboard/{name}"),
    ("GET", "/jobs/{job_id}"),
    ("GET", "/jobs/{job_id}/report"),
    ("GET", "/jobs/{job_id}/grid.png"),
}
#: Answers that are not JSON models, with their media type: HTML pages and files served as they are.
NOT_MODELS = {
    "/": "text/html",
    "/leaderboard/{name}": "text/html",
    "/jobs/{job_id}": "text/html",
    "/jobs/{job_id}/report": "text/html",
    "/jobs/{job_id}/grid.png": "image/png",
    "/api/jobs/{job_id}/results.json": "application/json",
    "/api/jobs/{job_id}/snapshot": "application/x-tar",
}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    home = tmp_path_factory.mktemp("svc")
    db = Database(sqlite_url(home / "geneval.db"))
    benchmarks = load_benchmarks(["digits_smoke"])
    yield create_app(Service(db, Settings(home=home), benchmarks, registered_classifiers(None)))
    db.close()


def _refs(schema: dict) -> list[str]:
    """The ``$ref``s of a response schema (an object, or an array of them)."""
    if "$ref" in schema:
        return [schema["$ref"]]
    return _refs(schema["items"]) if schema.get("type") == "array" and "items" in schema else []


def _served(app) -> set[tuple[str, str]]:
    """(method, path) of every APIRoute in ``app.routes`` that the schema should show. Newer FastAPI keeps an
    included router as one entry of ``app.routes`` and walks into it with ``iter_route_contexts``."""
    walk = getattr(fastapi.routing, "iter_route_contexts", None)
    routes = [(c.route, c.path) for c in walk(app.routes)] if walk else [(r, r.path) for r in app.routes]
    return {(m, path) for r, path in routes if isinstance(r, APIRoute) and r.include_in_schema for m in r.methods}


def test_openapi_documents_every_route_and_its_answer(app):
    doc = app.openapi()
    assert _served(app) == ROUTES
    assert {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops} == ROUTES
    components = doc["components"]["schemas"]
    for method, path in sorted(ROUTES):
        responses = doc["paths"][path][method.lower()]["responses"]
        ok = [code for code in responses if code.startswith("2")]
        assert len(ok) == 1, (method, path, list(responses))
        content = responses[ok[0]].get("content") or {}
        assert content and all("schema" in media for media in content.values()), (method, path, content)
        if path in NOT_MODELS:
            assert NOT_MODELS[path] in content, (method, path, content)
            continue
        refs = _refs(content["application/json"]["schema"])
        assert refs, f"{method} {path} answers JSON without a response model: {content}"
        assert all(ref.rsplit("/", 1)[-1] in components for ref in refs)
        assert "$ref" in responses["404"]["content"]["application/json"]["schema"]  # refusals are documented too


def test_the_service_stack_is_an_extra_that_the_test_extra_brings():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    stack = {"fastapi", "uvicorn", "sqlalchemy", "alembic", "psycopg", "python-multipart", "fastapi-offline"}

    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in requirements}

    assert not names(project["dependencies"]) & stack, "the service stack belongs in the [service] extra"
    assert names(project["optional-dependencies"]["service"]) == stack
    assert "geneval-fmr[service]" in project["optional-dependencies"]["test"]
