"""`geneval token` and the refusals of `geneval submit` / `geneval worker`, as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from genEval.service.auth import hash_token
from genEval.service.server.database import Database, sqlite_url
from tests.support.assets import ROOT


def _geneval(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GENEVAL_SERVICE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "genEval.cli", *args], env=env, cwd=home, capture_output=True, text=True, timeout=600
    )


def test_token_create_list_revoke(tmp_path):
    made = _geneval("token", "name=alice", "role=admin", home=tmp_path)
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip().splitlines()[-1]
    # read the raw files before this process opens the database (closing another descriptor of an open
    # SQLite file drops its POSIX locks)
    stored = "".join(p.read_bytes().decode("latin-1") for p in tmp_path.glob("geneval.db*"))
    assert secret not in stored and hash_token(secret) in stored
    db = Database(sqlite_url(tmp_path / "geneval.db"))
    (info,) = db.tokens.all()
    assert info.name == "alice" and info.role == "admin" and db.tokens.find(secret).id == info.id
    listed = _geneval("token", "list=true", home=tmp_path)
    assert info.id in listed.stdout and "alice" in listed.stdout and secret not in listed.stdout
    assert _geneval("token", f"revoke={info.id}", home=tmp_path).returncode == 0
    assert db.tokens.find(secret) is None
    bad = _geneval("token", "name=bob", "role=root", home=tmp_path)
    assert bad.returncode == 2 and "unknown role 'root'" in bad.stderr
    db.close()


def test_submit_needs_a_token_and_a_reachable_server(tmp_path):
    env_free = _geneval("submit", "name=x", "token=null", home=tmp_path)
    assert env_free.returncode == 2 and "needs an API token" in env_free.stderr
    down = _geneval("submit", "name=x", "token=gev_x", "url=http://127.0.0.1:9", home=tmp_path)
    assert down.returncode == 2 and "cannot reach the genEval service" in down.stderr
