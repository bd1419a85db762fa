"""The service database: the only state the server and its workers share (SQLite or PostgreSQL).

Tables: ``tokens`` (hashed API tokens), ``benchmarks`` (every registered benchmark version), ``uploads``
(submitted model files), ``jobs`` (one submission each), ``workers`` (who is alive) and ``standings`` (one
leaderboard row per finished job: its scores and whom it is significantly better than). Methods return
frozen dataclasses, never ORM objects, so callers hold no session.

Standings are stored, not recomputed per page view (:mod:`genEval.service.leaderboard` computes them in the
worker): a job becomes ``done`` in the same transaction that stores its standing row and adds its name to the
rows of the models that beat it (:meth:`Database.finish_job`). Those transactions are serialised per benchmark
version (PostgreSQL: a row lock on the version's ``benchmarks`` row; SQLite: one writer at a time), so a job that
finishes while another is being compared sees it as done and compares itself with it afterwards
(:meth:`Database.add_marks`).

Job life cycle: ``queued -> running -> done | failed | cancelled``. A worker *claims* a queued job
atomically, holds it under a *lease* it renews with every heartbeat (with its progress), and finishes it;
a job whose lease ran out (its worker was killed or its machine lost) is put back in the queue by
:meth:`Database.requeue_expired`, up to ``max_attempts`` times, and re-run with the same seeds.

The claim (:meth:`Database.claim_job`):

* PostgreSQL: ``SELECT ... FOR UPDATE SKIP LOCKED`` picks the oldest queued job no other transaction holds,
  and the same transaction marks it running: concurrent workers never get the same row and never wait.
* SQLite: every write transaction is ``BEGIN IMMEDIATE`` (one writer at a time, no upgrade deadlock), and
  the claim is a conditional ``UPDATE ... WHERE id = :id AND status = 'queued'`` whose row count tells
  whether this worker won; a lost race moves on to the next job. WAL mode lets readers (the web pages)
  run while a worker writes. SQLite is for one machine; workers on several machines need PostgreSQL.

A model's name is unique per benchmark version among its queued, running and done jobs, enforced by the database
(a partial unique index, :mod:`genEval.service.schema`): two servers submitting one name at the same instant get
one job and one :class:`NameTaken`, and an admin's re-queue of a failed or cancelled job is refused the same way
when its name was taken since. Workers are listed with their state (:meth:`Database.list_workers`): one not seen
within its lease is ``gone``, and one stopped or gone for ``retention_s`` is dropped.

A job's ``error`` is the reason its submitter sees (no paths, hosts, pids or tracebacks:
:func:`genEval.service.errors.public_reason`); ``error_detail`` keeps the full text for admins.

Times are UNIX seconds from one clock, the database's (:meth:`Database.now`: PostgreSQL's ``now()``, SQLite's
``julianday('now')``), never a worker's own: a worker whose clock runs ahead cannot see another worker's live lease
as expired (issue 37: a worker 30 s ahead took live jobs from the others), and every lease, heartbeat, job and worker
time compares with times taken on the same clock.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, delete, event, func, or_, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from genEval.service.auth import check_role, hash_token, new_token
from genEval.service.records import (  # noqa: F401 (the views and names callers import from here)
    ACTIVE,
    FINAL,
    MARK_NAMES,
    NAMED,
    STATUSES,
    WORKER_RETENTION_S,
    BenchmarkVersion,
    BoardRow,
    JobInfo,
    NameTaken,
    QuotaExceeded,
    StandingInfo,
    TokenInfo,
    UploadInfo,
    WorkerInfo,
    new_id,
)
from genEval.service.schema import (
    Base,
    BenchmarkRow,
    JobRow,
    StandingRow,
    TokenRow,
    UploadRow,
    WorkerRow,
    _view,
    upgrade,
)


def _marks(better_than: Mapping[str, Sequence[str]]) -> dict:
    return {m: {"count": len(v), "first": sorted(v)[:MARK_NAMES]} for m, v in better_than.items()}


#: The database's clock in UNIX seconds, per dialect (PostgreSQL: the transaction's start; SQLite: the statement's).
_CLOCK = {
    "postgresql": func.extract("epoch", func.now()),
    "sqlite": (func.julianday("now") - 2440587.5) * 86400.0,
}


def _at(now: float) -> float:
    """A value of :meth:`Database._holder_update` that is the database's time itself."""
    return now


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


class Database:
    """The service database at ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``); tables are
    created when missing."""

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
        self._writer = self.engine.execution_options(geneval_write=True)
        self._clock = _CLOCK[self.dialect]
        Base.metadata.create_all(self._writer)
        upgrade(self._writer)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def display_url(self) -> str:
        """The URL with any password hidden (for printing)."""
        return self.engine.url.render_as_string(hide_password=True)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as s, s.begin():
            yield s

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with Session(self._writer, expire_on_commit=False) as s, s.begin():
            yield s

    def ping(self) -> None:
        with self._read() as s:
            s.execute(select(1))

    def _now(self, s: Session) -> float:
        return float(s.execute(select(self._clock)).scalar_one())

    def now(self) -> float:
        """The database's clock: UNIX seconds (the one clock every stored time is taken on)."""
        with self._read() as s:
            return self._now(s)

    # -------------------------------------------------------------------------------------- tokens
    def create_token(self, name: str, role: str) -> tuple[str, TokenInfo]:
        """A new token for ``name`` with ``role``: returns the secret (show it once) and its record."""
        check_role(role)
        if not name or len(name) > 200:
            raise ValueError("a token needs a name (who holds it), at most 200 characters.")
        secret = new_token()
        row = TokenRow(id=new_id(), name=name, role=role, token_sha256=hash_token(secret))
        with self._write() as s:
            row.created_at = self._now(s)
            s.add(row)
        return secret, _view(TokenInfo, row)

    def token_for(self, secret: str) -> TokenInfo | None:
        """The live (not revoked) token whose secret this is, or None."""
        with self._read() as s:
            row = s.scalars(select(TokenRow).where(TokenRow.token_sha256 == hash_token(secret))).first()
            return None if row is None or row.revoked_at is not None else _view(TokenInfo, row)

    def list_tokens(self) -> list[TokenInfo]:
        with self._read() as s:
            return [_view(TokenInfo, r) for r in s.scalars(select(TokenRow).order_by(TokenRow.created_at))]

    def revoke_token(self, token_id: str) -> bool:
        with self._write() as s:
            res = s.execute(
                update(TokenRow)
                .where(TokenRow.id == token_id, TokenRow.revoked_at.is_(None))
                .values(revoked_at=self._now(s))
            )
            return res.rowcount == 1

    # ---------------------------------------------------------------------------------- benchmarks
    def register_benchmark(self, name: str, version: str, title: str, config: dict) -> BenchmarkVersion:
        """Record a benchmark version (idempotent: an already registered version keeps its date)."""
        with self._write() as s:
            row = s.get(BenchmarkRow, (name, version))
            if row is None:
                row = BenchmarkRow(name=name, version=version, title=title, config=config, registered_at=self._now(s))
                s.add(row)
            return _view(BenchmarkVersion, row)

    def benchmark_versions(self, name: str) -> list[BenchmarkVersion]:
        """Every registered version of ``name``, newest first."""
        with self._read() as s:
            rows = s.scalars(
                select(BenchmarkRow).where(BenchmarkRow.name == name).order_by(BenchmarkRow.registered_at.desc())
            )
            return [_view(BenchmarkVersion, r) for r in rows]

    # ------------------------------------------------------------------------------------- uploads
    def add_upload(self, owner_id: str, kind: str, sha256: str, size: int, filename: str, path: str) -> UploadInfo:
        row = UploadRow(
            id=new_id(),
            owner_id=owner_id,
            kind=kind,
            sha256=sha256,
            size=size,
            filename=filename,
            path=path,
        )
        with self._write() as s:
            row.created_at = self._now(s)
            s.add(row)
        return _view(UploadInfo, row)

    def get_upload(self, upload_id: str) -> UploadInfo | None:
        with self._read() as s:
            row = s.get(UploadRow, upload_id)
            return None if row is None else _view(UploadInfo, row)

    # ---------------------------------------------------------------------------------------- jobs
    def submit_job(
        self,
        *,
        benchmark: str,
        benchmark_version: str,
        name: str,
        owner: TokenInfo,
        model: dict,
        config: dict,
        overrides: dict,
        seeds: list[int],
        upload_path: str | None,
        max_active: int = 0,
    ) -> JobInfo:
        """Queue a job. Raises :class:`NameTaken` when ``name`` already has a queued, running or finished job
        in this benchmark version (one leaderboard row per model), and :class:`QuotaExceeded` when ``owner`` already
        has ``max_active`` jobs queued or running (0: no limit; counted in the same transaction, with the token's row
        locked on PostgreSQL, so simultaneous submits cannot pass it together)."""
        job_id = new_id()
        row = JobRow(
            id=job_id,
            benchmark=benchmark,
            benchmark_version=benchmark_version,
            name=name,
            owner_id=owner.id,
            owner_name=owner.name,
            model=model,
            config=config,
            overrides=overrides,
            seeds=list(seeds),
            run_dir=f"runs/{benchmark}/{job_id}",
            upload_path=upload_path,
            status="queued",
            attempts=0,
            images_done=0,
        )
        try:
            with self._write() as s:
                if max_active:
                    self._check_quota(s, owner, max_active)
                self._check_name(s, benchmark, benchmark_version, name)
                row.created_at = self._now(s)
                s.add(row)
        except IntegrityError:  # submitted at the same instant elsewhere: the unique index of names refused it
            with self._read() as s:
                self._check_name(s, benchmark, benchmark_version, name)
            raise
        return _view(JobInfo, row)

    def _check_quota(self, s: Session, owner: TokenInfo, max_active: int) -> None:
        if self.dialect == "postgresql":  # one submit of a token at a time (SQLite's writers are serial already)
            s.execute(select(TokenRow.id).where(TokenRow.id == owner.id).with_for_update())
        active = s.execute(
            select(func.count()).select_from(JobRow).where(JobRow.owner_id == owner.id, JobRow.status.in_(ACTIVE))
        ).scalar_one()
        if active >= max_active:
            raise QuotaExceeded(
                f"token {owner.name!r} has {active} jobs queued or running, its limit (server setting "
                "max_active_jobs); submit more once some have finished."
            )

    @staticmethod
    def _check_name(s: Session, benchmark: str, version: str, name: str, but: str | None = None) -> None:
        """Raise :class:`NameTaken` when another queued, running or done job of the version has ``name``."""
        q = select(JobRow.id).where(
            JobRow.benchmark == benchmark,
            JobRow.benchmark_version == version,
            JobRow.name == name,
            JobRow.status.in_(NAMED),
        )
        taken = s.scalars(q if but is None else q.where(JobRow.id != but)).first()
        if taken is not None:
            raise NameTaken(
                f"benchmark {benchmark} already has a model named {name!r} (job {taken}); choose another name."
            )

    def get_job(self, job_id: str) -> JobInfo | None:
        with self._read() as s:
            row = s.get(JobRow, job_id)
            return None if row is None else _view(JobInfo, row)

    def list_jobs(
        self, status: str | None = None, benchmark: str | None = None, version: str | None = None, limit: int = 1000
    ) -> list[JobInfo]:
        """Jobs, newest first, filtered by status, benchmark and version."""
        q = select(JobRow)
        if status is not None:
            q = q.where(JobRow.status == status)
        if benchmark is not None:
            q = q.where(JobRow.benchmark == benchmark)
        if version is not None:
            q = q.where(JobRow.benchmark_version == version)
        with self._read() as s:
            return [_view(JobInfo, r) for r in s.scalars(q.order_by(JobRow.created_at.desc()).limit(limit))]

    def count_jobs(self, benchmark: str | None = None, version: str | None = None) -> dict[str, int]:
        """Jobs per status (of one benchmark and version when given)."""
        q = select(JobRow.status, func.count())
        if benchmark is not None:
            q = q.where(JobRow.benchmark == benchmark)
        if version is not None:
            q = q.where(JobRow.benchmark_version == version)
        with self._read() as s:
            got = dict(s.execute(q.group_by(JobRow.status)).all())
        return {st: int(got.get(st, 0)) for st in STATUSES}

    def claim_job(self, worker_id: str, lease_s: float) -> JobInfo | None:
        """Atomically take the oldest queued job for ``worker_id`` (see the module docstring), or None."""
        if self.dialect == "postgresql":
            with self._write() as s:
                row = s.scalars(
                    select(JobRow)
                    .where(JobRow.status == "queued")
                    .order_by(JobRow.created_at, JobRow.id)
                    .limit(1)
                    .with_for_update(skip_locked=True)
                ).first()
                if row is None:
                    return None
                now = self._now(s)
                row.status, row.worker_id, row.started_at = "running", worker_id, now
                row.heartbeat_at, row.lease_expires_at, row.attempts = now, now + lease_s, row.attempts + 1
                row.images_done, row.eta_s, row.error = 0, None, None
                return _view(JobInfo, row)
        skipped: set[str] = set()
        while True:
            with self._write() as s:
                q = select(JobRow.id).where(JobRow.status == "queued").order_by(JobRow.created_at, JobRow.id)
                cand = next((j for j in s.scalars(q.limit(len(skipped) + 1)) if j not in skipped), None)
                if cand is None:
                    return None
                now = self._now(s)
                res = s.execute(
                    update(JobRow)
                    .where(JobRow.id == cand, JobRow.status == "queued")
                    .values(
                        status="running",
                        worker_id=worker_id,
                        started_at=now,
                        heartbeat_at=now,
                        lease_expires_at=now + lease_s,
                        attempts=JobRow.attempts + 1,
                        images_done=0,
                        eta_s=None,
                        error=None,
                    )
                )
                if res.rowcount == 1:
                    return _view(JobInfo, s.get(JobRow, cand))
            skipped.add(cand)  # another worker won this one: try the next

    def _holder_update(self, job_id: str, holder: str, **values: Any) -> bool:
        """Update a running job only while worker ``holder`` still holds it; False when it lost the job (it was
        cancelled, or re-queued after its lease ran out). A callable value is called with the database's time."""
        with self._write() as s:
            now = self._now(s)
            res = s.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.worker_id == holder, JobRow.status == "running")
                .values(**{k: v(now) if callable(v) else v for k, v in values.items()})
            )
            return res.rowcount == 1

    def heartbeat(
        self,
        job_id: str,
        worker_id: str,
        lease_s: float,
        images_done: int | None = None,
        images_total: int | None = None,
        eta_s: float | None = None,
    ) -> bool:
        """Renew the lease and record progress; False when the worker no longer holds the job."""
        values: dict[str, Any] = {"heartbeat_at": _at, "lease_expires_at": lambda now: now + lease_s, "eta_s": eta_s}
        if images_done is not None:
            values["images_done"] = images_done
        if images_total is not None:
            values["images_total"] = images_total
        return self._holder_update(job_id, worker_id, **values)

    def finish_job(
        self,
        job_id: str,
        worker_id: str,
        result: dict,
        images: int | None = None,
        standing: StandingInfo | None = None,
        beaten_by: Mapping[str, Sequence[str]] | None = None,
    ) -> bool:
        """Mark a held job done with its result summary (and ``images`` evaluated in all); with ``standing``, store
        its leaderboard row in the same transaction and add its name under each metric of ``beaten_by`` (job id
        -> metrics) to those jobs' rows. False (and nothing stored) when the worker no longer holds the job."""
        extra = {} if images is None else {"images_done": images, "images_total": images}
        with self._write() as s:
            now = self._now(s)
            job = s.get(JobRow, job_id)
            if job is None:
                return False
            self._lock_version(s, job.benchmark, job.benchmark_version)
            res = s.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.worker_id == worker_id, JobRow.status == "running")
                .values(status="done", finished_at=now, result=result, eta_s=0.0, lease_expires_at=None, **extra)
            )
            if res.rowcount != 1:
                return False
            if standing is not None:
                self._store_standing(s, replace(standing, finished_at=now), beaten_by or {})
            return True

    # ----------------------------------------------------------------------------------- standings
    def _lock_version(self, s: Session, benchmark: str, version: str) -> None:
        """Serialise the writers of one benchmark version's standings (PostgreSQL row lock; SQLite's write
        transactions are serial already)."""
        if self.dialect == "postgresql":
            s.execute(
                select(BenchmarkRow.name)
                .where(BenchmarkRow.name == benchmark, BenchmarkRow.version == version)
                .with_for_update()
            )

    @staticmethod
    def _add_names(s: Session, job_id: str, metric: str, names: Sequence[str]) -> None:
        row = s.get(StandingRow, job_id)
        if row is None:
            return
        better = {k: list(v) for k, v in (row.better_than or {}).items()}
        have = better.setdefault(metric, [])
        have += [n for n in names if n not in have]  # idempotent: a pair compared twice is marked once
        row.better_than = better  # a new object: SQLAlchemy's JSON type does not see in-place changes
        row.marks = _marks(better)

    def _store_standing(self, s: Session, standing: StandingInfo, beaten_by: Mapping[str, Sequence[str]]) -> None:
        values = {f.name: getattr(standing, f.name) for f in fields(StandingInfo)}
        s.merge(StandingRow(**values, marks=_marks(standing.better_than)))
        for other, metrics in beaten_by.items():
            for metric in metrics:
                self._add_names(s, other, metric, [standing.name])

    def add_standing(self, standing: StandingInfo, beaten_by: Mapping[str, Sequence[str]] | None = None) -> bool:
        """Store the row of a job that is already done (a job finished before standings were stored); False when
        the job is not done."""
        with self._write() as s:
            self._lock_version(s, standing.benchmark, standing.version)
            job = s.get(JobRow, standing.job_id)
            if job is None or job.status != "done":
                return False
            self._store_standing(s, replace(standing, finished_at=job.finished_at), beaten_by or {})
            return True

    def add_marks(self, benchmark: str, version: str, marks: Sequence[tuple[str, str, str]]) -> None:
        """Add significance marks ``(winner job id, metric, loser name)`` to stored rows (idempotent)."""
        if not marks:
            return
        with self._write() as s:
            self._lock_version(s, benchmark, version)
            for winner, metric, loser in marks:
                self._add_names(s, winner, metric, [loser])

    def standings(self, benchmark: str, version: str) -> list[StandingInfo]:
        """The stored rows of one benchmark version, oldest first."""
        with self._read() as s:
            rows = s.scalars(
                select(StandingRow)
                .where(StandingRow.benchmark == benchmark, StandingRow.version == version)
                .order_by(StandingRow.finished_at, StandingRow.job_id)
            )
            return [_view(StandingInfo, r) for r in rows]

    def board(
        self,
        benchmark: str,
        version: str,
        sort: str = "fmr",
        descending: bool = True,
        limit: int | None = None,
        offset: int = 0,
        every_mark: bool = False,
    ) -> tuple[int, list[BoardRow]]:
        """The ranked rows of a version (those with scores), ordered and paged by the database: ``sort`` is a score
        key (``fmr``, ``sa``, ...; rows where it is undefined come last), ``name``, ``date`` or ``repetitions``.
        Returns the number of ranked rows and the page; ``every_mark`` adds the full ``better_than`` lists."""
        order = {"name": func.lower(StandingRow.name), "date": StandingRow.finished_at}.get(sort)
        if sort == "repetitions":
            order = StandingRow.repetitions
        if order is None:
            order = StandingRow.scores[(sort, "value")].as_float()  # JSON path: SQLite json_extract, PostgreSQL #>>
        where = (
            StandingRow.benchmark == benchmark,
            StandingRow.version == version,
            StandingRow.scores.is_not(None),
        )
        cols = [
            StandingRow.job_id,
            StandingRow.name,
            StandingRow.finished_at,
            StandingRow.repetitions,
            StandingRow.scores,
            StandingRow.marks,
        ]
        if every_mark:
            cols.append(StandingRow.better_than)
        q = (
            select(*cols)
            .where(*where)
            .order_by(order.is_(None), order.desc() if descending else order.asc(), StandingRow.job_id)
            .offset(offset)
        )
        if limit is not None:
            q = q.limit(limit)
        with self._read() as s:
            total = int(s.execute(select(func.count()).select_from(StandingRow).where(*where)).scalar_one())
            rows = [BoardRow(*r[:6], r[6] if every_mark else None) for r in s.execute(q)]
        return total, rows

    def board_notes(self, benchmark: str, version: str) -> tuple[list[str], list[str]]:
        """The interval notes and warnings of every stored row of a version (short texts; most rows have none)."""
        with self._read() as s:
            got = s.execute(
                select(StandingRow.interval_note, StandingRow.warnings).where(
                    StandingRow.benchmark == benchmark, StandingRow.version == version
                )
            ).all()
        return [n for n, _ in got if n], [w for _, ws in got for w in ws or []]

    def unranked_jobs(self, benchmark: str | None = None, version: str | None = None) -> list[JobInfo]:
        """Done jobs without a stored standing row (finished before standings were stored), oldest first."""
        q = (
            select(JobRow)
            .outerjoin(StandingRow, StandingRow.job_id == JobRow.id)
            .where(JobRow.status == "done", StandingRow.job_id.is_(None))
        )
        if benchmark is not None:
            q = q.where(JobRow.benchmark == benchmark)
        if version is not None:
            q = q.where(JobRow.benchmark_version == version)
        with self._read() as s:
            return [_view(JobInfo, r) for r in s.scalars(q.order_by(JobRow.finished_at, JobRow.id))]

    def count_unranked(self, benchmark: str, version: str) -> int:
        """How many done jobs of a version have no stored row yet (the page says so)."""
        q = (
            select(func.count())
            .select_from(JobRow)
            .outerjoin(StandingRow, StandingRow.job_id == JobRow.id)
            .where(
                JobRow.status == "done",
                JobRow.benchmark == benchmark,
                JobRow.benchmark_version == version,
                StandingRow.job_id.is_(None),
            )
        )
        with self._read() as s:
            return int(s.execute(q).scalar_one())

    def fail_job(self, job_id: str, worker_id: str, error: str, detail: str | None = None) -> bool:
        """Mark a held job failed: ``error`` is the reason its submitter sees, ``detail`` the full text (admins)."""
        return self._holder_update(
            job_id,
            worker_id,
            status="failed",
            finished_at=_at,
            error=error,
            error_detail=detail if detail is not None else error,
            eta_s=None,
            lease_expires_at=None,
        )

    def release_job(self, job_id: str, worker_id: str) -> bool:
        """Put a job this worker holds back in the queue (a worker shutting down cleanly)."""
        return self._holder_update(
            job_id,
            worker_id,
            status="queued",
            worker_id=None,
            lease_expires_at=None,
            eta_s=None,
            attempts=JobRow.attempts - 1,
        )

    def cancel_job(self, job_id: str) -> JobInfo | None:
        """Cancel a queued or running job (a running job's worker stops it at its next heartbeat). Returns the
        job, or None when it does not exist; a finished job is returned unchanged."""
        with self._write() as s:
            s.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.status.in_(ACTIVE))
                .values(status="cancelled", finished_at=self._now(s), eta_s=None, lease_expires_at=None)
            )
            row = s.get(JobRow, job_id)
            return None if row is None else _view(JobInfo, row)

    def requeue_job(self, job_id: str) -> JobInfo | None:
        """Put a failed or cancelled job back in the queue with its seeds (admin); None when it is missing. Raises
        :class:`NameTaken` when another job has taken its name since (the name rule holds for re-queues too)."""
        try:
            with self._write() as s:
                row = s.get(JobRow, job_id)
                if row is None:
                    return None
                if row.status in ("failed", "cancelled"):
                    self._check_name(s, row.benchmark, row.benchmark_version, row.name, but=job_id)
                    s.execute(
                        update(JobRow)
                        .where(JobRow.id == job_id, JobRow.status.in_(("failed", "cancelled")))
                        .values(
                            status="queued",
                            worker_id=None,
                            finished_at=None,
                            error=None,
                            error_detail=None,
                            attempts=0,
                            images_done=0,
                            eta_s=None,
                            lease_expires_at=None,
                        )
                    )
                    s.refresh(row)
                return _view(JobInfo, row)
        except IntegrityError:  # the name was taken at the same instant
            with self._read() as s:
                row = s.get(JobRow, job_id)
                self._check_name(s, row.benchmark, row.benchmark_version, row.name, but=job_id)
            raise

    def requeue_expired(self, max_attempts: int) -> list[tuple[str, str]]:
        """Jobs whose worker stopped renewing its lease go back to the queue (same seeds, same run
        directory), or fail once they used ``max_attempts``. Returns ``(job id, new status)`` pairs."""
        out = []
        with self._write() as s:
            now = self._now(s)
            rows = s.scalars(select(JobRow).where(JobRow.status == "running", JobRow.lease_expires_at < now)).all()
            for row in rows:
                lost = row.worker_id
                if row.attempts >= max_attempts:
                    row.status, row.finished_at, row.eta_s = "failed", now, None
                    row.error = (
                        f"the worker running this job stopped responding {row.attempts} times; giving up. An admin "
                        "can re-queue it."
                    )
                    row.error_detail = f"{row.error} (last worker: {lost})"
                else:
                    row.status, row.worker_id, row.eta_s = "queued", None, None
                    row.error = "re-queued: its worker stopped renewing its lease (it was stopped or its machine lost)"
                    row.error_detail = f"re-queued: worker {lost} stopped renewing its lease"
                row.lease_expires_at = None
                out.append((row.id, row.status))
        return out

    # ------------------------------------------------------------------------------------- workers
    def register_worker(self, worker_id: str, host: str, pid: int, device: str, lease_s: float | None = None) -> None:
        """Record a worker that starts; ``lease_s``: it counts as gone when not seen for this long."""
        with self._write() as s:
            now = self._now(s)
            s.merge(
                WorkerRow(
                    id=worker_id,
                    host=host,
                    pid=pid,
                    device=device,
                    started_at=now,
                    last_seen=now,
                    job_id=None,
                    stopped_at=None,
                    lease_s=lease_s,
                )
            )

    def worker_seen(self, worker_id: str, job_id: str | None) -> None:
        with self._write() as s:
            s.execute(update(WorkerRow).where(WorkerRow.id == worker_id).values(last_seen=self._now(s), job_id=job_id))

    def worker_stopped(self, worker_id: str) -> None:
        with self._write() as s:
            s.execute(update(WorkerRow).where(WorkerRow.id == worker_id).values(stopped_at=self._now(s), job_id=None))

    def list_workers(self, retention_s: float = WORKER_RETENTION_S) -> list[WorkerInfo]:
        """Workers seen within ``retention_s`` (stopped and gone ones included: :meth:`WorkerInfo.state` tells),
        oldest first."""
        with self._read() as s:
            q = select(WorkerRow).where(WorkerRow.last_seen >= self._now(s) - retention_s)
            return [_view(WorkerInfo, r) for r in s.scalars(q.order_by(WorkerRow.started_at))]

    def live_workers(self) -> int:
        """How many workers are neither stopped nor gone (by the database's clock)."""
        now = self.now()
        return sum(w.state(now) in ("busy", "idle") for w in self.list_workers())

    def prune_workers(self, retention_s: float = WORKER_RETENTION_S) -> int:
        """Drop the workers that stopped, or were last seen, more than ``retention_s`` ago; returns how many."""
        with self._write() as s:
            cutoff = self._now(s) - retention_s
            res = s.execute(
                delete(WorkerRow).where(
                    or_(WorkerRow.last_seen < cutoff, WorkerRow.stopped_at < cutoff),
                )
            )
            return res.rowcount
