"""A throwaway PostgreSQL cluster on 127.0.0.1 (the Debian ``postgresql`` server binaries), started and stopped at will:
a database outage for ``benchmarks/service_attacks.py`` and the PostgreSQL tests (``tests/support/service.py``)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from benchmarks.harness.net import free_port


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PgCluster:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (trust auth) in a temporary folder: :meth:`start`, :meth:`stop`
    (and start again: a database outage), :meth:`remove`. ``url`` is its server URL (add ``/<database>``).

    postgres refuses to run as root, so as root the cluster belongs to the ``postgres`` user (``runuser``).
    """

    def __init__(self) -> None:
        bindir = _pg_bin()
        if bindir is None:
            raise FileNotFoundError("PostgreSQL server binaries not installed (Debian: apt-get install postgresql)")
        self.bin, self.as_user = bindir, []
        self.root = Path(tempfile.mkdtemp(prefix="geneval-pg-"))
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")  # KeyError: no user to own the cluster
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.data, self.port = self.root / "data", free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}"
        initdb = [str(bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8"]
        subprocess.run([*self.as_user, *initdb, "--no-sync"], check=True, capture_output=True)

    def _ctl(self, *args: str, check: bool = True) -> None:
        ctl = [*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log")]
        subprocess.run([*ctl, *args], check=check, capture_output=True)

    def start(self) -> PgCluster:
        self._ctl("-w", "-o", f"-p {self.port} -h 127.0.0.1 -k {self.root} -F -c max_connections=200", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-w", "-m", mode, "stop", check=False)

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def create_database(self) -> str:
        """A fresh, empty database on the cluster: its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"{self.url}/{name}"
