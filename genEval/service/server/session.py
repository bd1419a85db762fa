"""The one session factory every store of the service shares: the engine of a SQLite or PostgreSQL database, its
read and write transactions, and its clock.

* **Transactions.** :meth:`Sessions.read` and :meth:`Sessions.write` yield a SQLAlchemy session inside one
  transaction; rows leave it as the frozen records of :mod:`genEval.service.records` (:func:`record`), so callers
  hold no session. SQLite: every write transaction is ``BEGIN IMMEDIATE`` (one writer at a time, no upgrade
  deadlock), WAL lets readers (the pages) run while a worker writes, and a busy timeout waits for the writer.
  PostgreSQL: a pooled engine that checks a connection before use and gives up connecting after 5 s.
* **One clock.** Every stored time is UNIX seconds from the database's clock (:meth:`Sessions.now`: PostgreSQL's
  ``now()``, SQLite's ``julianday('now')``), never a worker's own: a worker whose clock runs ahead cannot see
  another worker's live lease as expired (docs/service.md: a worker 30 s ahead took live jobs from the others).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Session

#: The database's clock in UNIX seconds, per dialect (PostgreSQL: the transaction's start; SQLite: the statement's).
CLOCK = {
    "postgresql": func.extract("epoch", func.now()),
    "sqlite": (func.julianday("now") - 2440587.5) * 86400.0,
}


class Base(DeclarativeBase):
    """The tables of every slice (each slice's rows are declared in its own module)."""


def record(cls: type, row: Any) -> Any:
    """The frozen record ``cls`` (:mod:`genEval.service.records`) of an ORM ``row``: the fields they share."""
    return cls(**{f.name: getattr(row, f.name) for f in fields(cls)})


def sqlite_url(path: str | Path) -> str:
    return f"sqlite:///{Path(path).expanduser().resolve()}"


def _sqlite_setup(engine: Engine) -> None:
    """WAL, a busy timeout, and ``BEGIN IMMEDIATE`` for write transactions (see the module docstring)."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn, _record) -> None:  # pragma: no cover - exercised by every SQLite test
        dbapi_conn.isolation_level = None  # pysqlite's own BEGIN handling off: the "begin" hook emits it
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("geneval_write") else "BEGIN")


class Sessions:
    """Transactions on the database at ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``): see the module
    docstring."""

    def __init__(self, url: str) -> None:
        if not isinstance(url, str) or "://" not in url:
            raise ValueError(
                f"db must be a database URL such as sqlite:///path/geneval.db or "
                f"postgresql+psycopg://user@host/dbname, got {url!r}."
            )
        self.url = url
        if url.startswith("sqlite"):
            self.engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
            _sqlite_setup(self.engine)
        elif url.startswith("postgresql"):
            self.engine = create_engine(
                url, pool_pre_ping=True, pool_size=10, max_overflow=20, connect_args={"connect_timeout": 5}
            )
        else:
            raise ValueError(
                f"unsupported database {url.split('://')[0]!r}; use sqlite:///... or postgresql+psycopg://..."
            )
        self.writer = self.engine.execution_options(geneval_write=True)
        self.clock = CLOCK[self.dialect]

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def display_url(self) -> str:
        """The URL with any password hidden (for printing)."""
        return self.engine.url.render_as_string(hide_password=True)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def read(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as s, s.begin():
            yield s

    @contextmanager
    def write(self) -> Iterator[Session]:
        with Session(self.writer, expire_on_commit=False) as s, s.begin():
            yield s

    def now_in(self, s: Session) -> float:
        """The database's time (UNIX seconds) inside the transaction of ``s``."""
        return float(s.execute(select(self.clock)).scalar_one())

    def now(self) -> float:
        """The database's clock: UNIX seconds (the one clock every stored time is taken on)."""
        with self.read() as s:
            return self.now_in(s)

    def ping(self) -> None:
        with self.read() as s:
            s.execute(select(1))
