"""The ``benchmarks`` table and its store: every benchmark version a server has offered (a version is the hash of a
preset's config, :mod:`genEval.service.benchmarks`), with the config it stood for.

A version also keeps a secret drawn once, when it is first registered: the base of a settled benchmark's round
seeds (:meth:`BenchmarkStore.round_base`; round ``r``'s seed is :func:`genEval.comparisons.settled.round_seed` of it,
the same for every model of the version, so that all models' round ``r`` see the same sources). A secret rather than
the version hash: the hash is public (URLs, ``/api/benchmarks``), and seeds derived from it would tell anyone every
future round's images before any model ran them, where the secret leaves a round unknown until it first runs.

A settled version also keeps its *reuse budget* (docs/scores.md, :mod:`genEval.service.reuse`): the correctness
agreement of the models submitted to it and how many further submissions its shared rounds can take, recomputed by the
worker that finishes a job (:meth:`BenchmarkStore.set_reuse`; null until then, and for fixed benchmarks).
"""

from __future__ import annotations

import secrets

from sqlalchemy import JSON, Connection, Float, Integer, String, TypeDecorator, bindparam, select, text, update
from sqlalchemy.orm import Mapped, Session, mapped_column

from genEval.comparisons.settings import StopRule
from genEval.service.benchmarks import moved_versions
from genEval.service.records import BenchmarkVersion
from genEval.service.server.session import Base, Sessions, record


class StopRuleJSON(TypeDecorator):
    """A :class:`~genEval.comparisons.settings.StopRule` stored as its ``to_dict()`` JSON (null: a fixed benchmark),
    read back as a ``StopRule``."""

    impl = JSON(none_as_null=True)
    cache_ok = True

    def process_bind_param(self, value: StopRule | None, dialect) -> dict | None:
        return None if value is None else value.to_dict()

    def process_result_value(self, value: dict | None, dialect) -> StopRule | None:
        return None if value is None else StopRule.coerce(value)


class BenchmarkRow(Base):
    __tablename__ = "benchmarks"
    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    version: Mapped[str] = mapped_column(String(64), primary_key=True)
    title: Mapped[str] = mapped_column(String(300))
    config: Mapped[dict] = mapped_column(JSON)
    registered_at: Mapped[float] = mapped_column(Float)
    #: The secret base of the version's round seeds (drawn at registration; null in a database of an earlier genEval
    #: until first asked for).
    round_base: Mapped[int | None] = mapped_column(Integer, nullable=True)
    #: A settled version's reuse budget (genEval.scores.reuse.ReuseBudget as a dict; null: not computed yet).
    reuse: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    #: The version's comparison settings: a settled benchmark's stop rule (null: fixed; migration 0002).
    stop: Mapped[StopRule | None] = mapped_column(StopRuleJSON, nullable=True)


class BenchmarkStore:
    """The ``benchmarks`` table."""

    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions

    def register(self, name: str, version: str, title: str, config: dict) -> BenchmarkVersion:
        """Record a benchmark version (idempotent: an already registered version keeps its date); its stop rule,
        ``config["stop"]`` (:meth:`genEval.service.benchmarks.Benchmark.record`), goes to the typed ``stop``."""
        with self.sessions.write() as s:
            row = s.get(BenchmarkRow, (name, version))
            if row is None:
                stop = StopRule.coerce(config["stop"]) if config.get("stop") else None
                row = BenchmarkRow(name=name, version=version, title=title, config=config, stop=stop)
                row.round_base = secrets.randbits(31)
                row.registered_at = self.sessions.now_in(s)
                s.add(row)
            return record(BenchmarkVersion, row)

    def get(self, name: str, version: str) -> BenchmarkVersion | None:
        """The registered version, or None."""
        with self.sessions.read() as s:
            row = s.get(BenchmarkRow, (name, version))
            return None if row is None else record(BenchmarkVersion, row)

    def round_base(self, name: str, version: str) -> int:
        """The secret base of the version's round seeds (see the module docstring), drawn once and kept; a version
        registered by an earlier genEval draws it now (the first caller's draw wins). KeyError for an unregistered
        version."""
        with self.sessions.write() as s:
            s.execute(
                update(BenchmarkRow)
                .where(BenchmarkRow.name == name, BenchmarkRow.version == version, BenchmarkRow.round_base.is_(None))
                .values(round_base=secrets.randbits(31))
            )
            base = s.scalars(
                select(BenchmarkRow.round_base).where(BenchmarkRow.name == name, BenchmarkRow.version == version)
            ).first()
        if base is None:
            raise KeyError(f"benchmark {name} has no registered version {version!r}.")
        return int(base)

    def set_reuse(self, name: str, version: str, budget: dict) -> None:
        """Store the reuse budget of a registered version (the worker's, after a job of it finished)."""
        with self.sessions.write() as s:
            s.execute(
                update(BenchmarkRow)
                .where(BenchmarkRow.name == name, BenchmarkRow.version == version)
                .values(reuse=budget)
            )

    def reuse(self, name: str, version: str) -> dict | None:
        """The stored reuse budget of a version (None: not computed yet, or not registered)."""
        with self.sessions.read() as s:
            return s.scalars(
                select(BenchmarkRow.reuse).where(BenchmarkRow.name == name, BenchmarkRow.version == version)
            ).first()

    def versions(self, name: str) -> list[BenchmarkVersion]:
        """Every registered version of ``name``, newest first."""
        with self.sessions.read() as s:
            rows = s.scalars(
                select(BenchmarkRow).where(BenchmarkRow.name == name).order_by(BenchmarkRow.registered_at.desc())
            )
            return [record(BenchmarkVersion, r) for r in rows]

    def lock(self, s: Session, name: str, version: str) -> None:
        """Serialise the transactions that write one version's standings (a row lock on PostgreSQL; SQLite's write
        transactions are serial already): :mod:`~genEval.service.server.standings.store`."""
        if self.sessions.dialect == "postgresql":
            s.execute(
                select(BenchmarkRow.name)
                .where(BenchmarkRow.name == name, BenchmarkRow.version == version)
                .with_for_update()
            )


#: Every column that names a benchmark version: (table, column, the column naming its benchmark).
VERSION_COLUMNS = (
    ("benchmarks", "version", "name"),
    ("jobs", "benchmark_version", "benchmark"),
    ("standings", "version", "benchmark"),
    ("verdicts", "version", "benchmark"),
)


def remap_versions(connection: Connection) -> dict[tuple[str, str], str]:
    """Carry every stored benchmark version over to this genEval's version (docs/service.md), once: where a row of
    ``benchmarks`` has another version than its record gives now (:func:`genEval.service.benchmarks.moved_versions`: the
    hash before the canonical spec held the resolved YAML with import paths), that version is rewritten in every table
    that names it (:data:`VERSION_COLUMNS`), with the record's ``version`` and ``base_version``: the jobs, standings,
    verdicts, round secret and reuse budget of the old version are the new one's. Idempotent (a rerun finds nothing to
    change); returns ``{(name, old): new}``. Runs in the caller's transaction (``engine.begin()``), so a failure leaves
    every version as it was."""
    rows = connection.execute(text("SELECT name, version, config FROM benchmarks").columns(config=JSON)).all()
    moved = moved_versions(rows)
    for (name, old), new in moved.items():
        for table, column, owner in VERSION_COLUMNS:
            connection.execute(
                text(f"UPDATE {table} SET {column} = :new WHERE {owner} = :name AND {column} = :old"),
                {"new": new, "name": name, "old": old},
            )
    store = text("UPDATE benchmarks SET config = :record WHERE name = :name AND version = :version").bindparams(
        bindparam("record", type_=JSON)
    )
    for name, old, stored in rows:
        version = moved.get((name, old), old)
        base = moved.get((name, stored.get("base_version")), stored.get("base_version"))
        if version != old or base != stored.get("base_version"):
            fresh = {**stored, "version": version, "base_version": base}
            connection.execute(store, {"record": fresh, "name": name, "version": version})
    return moved
