"""The ``standings`` table and its store: one leaderboard row per finished job (its scores and whom it is
significantly better than), computed by the worker that finished it (:mod:`~genEval.service.server.standings.compute`)
and read, ordered and paged by the database (:mod:`~genEval.service.server.standings.board`).

The transactions that write one benchmark version's rows are serialised (PostgreSQL: a row lock on the version's
``benchmarks`` row; SQLite: one writer at a time), so a job that finishes while another is being compared sees it as
done and compares itself with it afterwards (:meth:`StandingStore.set_marks`).

On a settled benchmark a model's row is rewritten with every round it finishes (its scores over more sources), and
the marks between it and every other model are set anew, both ways (a mark found on fewer rounds may no longer
hold): ``unbeaten_by`` of :meth:`StandingStore.store_in`, and ``present=False`` marks of :meth:`set_marks`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from sqlalchemy import JSON, Float, Integer, String, Text, func, select
from sqlalchemy.orm import Mapped, Session, defer, mapped_column

from genEval.comparisons.standing import Standing
from genEval.service.records import MARKED, Mark, SettledInfo, StandingInfo
from genEval.service.server.benchmarks.store import BenchmarkStore
from genEval.service.server.session import Base, Sessions


class StandingRow(Base):
    __tablename__ = "standings"
    job_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    benchmark: Mapped[str] = mapped_column(String(100), index=True)
    version: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(100))
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    run_dirs: Mapped[list] = mapped_column(JSON)
    repetitions: Mapped[int] = mapped_column(Integer)
    scores: Mapped[dict | None] = mapped_column(JSON(none_as_null=True), nullable=True)  # None: SQL NULL
    better_than: Mapped[dict] = mapped_column(JSON)
    warnings: Mapped[list] = mapped_column(JSON)
    interval_note: Mapped[str] = mapped_column(Text)
    computed_at: Mapped[float] = mapped_column(Float)
    #: metric -> {"count": n, "first": the first MARK_NAMES names in sorted order}: what a page shows of
    #: ``better_than`` without reading every name (``better_than`` grows with the square of the models).
    marks: Mapped[dict] = mapped_column(JSON)
    #: A settled benchmark's row: :meth:`SettledInfo.to_dict <genEval.service.records.SettledInfo.to_dict>`.
    settled: Mapped[dict | None] = mapped_column(JSON(none_as_null=True), nullable=True)


def _marks(better_than: Mapping[str, Sequence[str]]) -> dict:
    """The ``marks`` column of ``better_than``: score -> :meth:`Mark.to_dict`."""
    return {m: Mark.of(v).to_dict() for m, v in better_than.items()}


def _columns(info: StandingInfo) -> dict:
    """The table's columns of ``info``: its standing through :meth:`Standing.to_dict` (scores SQL NULL when it has
    none: an unranked row), its settled info through :meth:`SettledInfo.to_dict` and the marks of its ``better_than``.
    The standing's board-read keys (rank, sources, below) are computed when read, never stored."""
    st = info.standing.to_dict()
    return {
        "job_id": info.job_id,
        "benchmark": info.benchmark,
        "version": info.version,
        "name": st["name"],
        "finished_at": info.finished_at,
        "run_dirs": list(info.run_dirs),
        "repetitions": st["repetitions"],
        "scores": st["scores"] or None,
        "better_than": st["better_than"],
        "warnings": list(info.warnings),
        "interval_note": info.interval_note,
        "computed_at": info.computed_at,
        "marks": _marks(st["better_than"]),
        "settled": None if info.settled is None else info.settled.to_dict(),
    }


def _info(r: StandingRow, every_mark: bool = True, board: bool = False) -> StandingInfo:
    """The stored row ``r`` as a record, its standing read back through :meth:`Standing.from_dict` (a row stored by
    any earlier genEval reads); ``every_mark=False``: ``better_than`` left empty (not read), ``marks`` only;
    ``board``: ``better_than`` of every marked score (empty lists where none is stored), as the API lists them."""
    stored = (r.better_than or {}) if every_mark else {}
    better = (
        {k: list(stored.get(k, [])) for k in MARKED}
        if board and every_mark
        else {k: list(v) for k, v in stored.items()}
    )
    standing = Standing.from_dict(
        {"name": r.name, "repetitions": r.repetitions, "scores": r.scores, "better_than": better}
    )
    marks = {k: Mark.from_dict(m) if (m := (r.marks or {}).get(k)) else Mark() for k in MARKED}
    settled = None if r.settled is None else SettledInfo.from_dict(r.settled)
    return StandingInfo(
        r.job_id,
        r.benchmark,
        r.version,
        standing,
        r.finished_at,
        list(r.run_dirs or []),
        list(r.warnings or []),
        r.interval_note or "",
        r.computed_at,
        settled,
        marks,
    )


class StandingStore:
    """The ``standings`` table (the done jobs that have no row yet: :mod:`~genEval.service.server.finishing`)."""

    def __init__(self, sessions: Sessions, benchmarks: BenchmarkStore) -> None:
        self.sessions, self.lock = sessions, benchmarks.lock

    @staticmethod
    def _mark(s: Session, job_id: str, metric: str, name: str, present: bool = True) -> None:
        """Make the row of ``job_id`` list (or, ``present=False``, not list) ``name`` under ``metric``; idempotent: a
        pair compared twice is marked once."""
        row = s.get(StandingRow, job_id)
        if row is None:
            return
        better = {k: list(v) for k, v in (row.better_than or {}).items()}
        have = better.setdefault(metric, [])
        if (name in have) == present:
            return
        better[metric] = have + [name] if present else [n for n in have if n != name]
        row.better_than = better  # a new object: SQLAlchemy's JSON type does not see in-place changes
        row.marks = _marks(better)

    def store_in(
        self,
        s: Session,
        standing: StandingInfo,
        beaten_by: Mapping[str, Sequence[str]],
        unbeaten_by: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """Store ``standing`` (a new row, or a settled model's row over more rounds), add its name under each metric
        of ``beaten_by`` (job id -> metrics) to those rows and take it off each metric of ``unbeaten_by``."""
        s.merge(StandingRow(**_columns(standing)))
        for marks, present in ((beaten_by, True), (unbeaten_by or {}, False)):
            for other, metrics in marks.items():
                for metric in metrics:
                    self._mark(s, other, metric, standing.name, present)

    def mark_withdrawn_in(self, s: Session, job_id: str) -> None:
        """In the transaction of ``s``: mark the row of ``job_id`` (a settled model's submission) withdrawn, if it
        has one; it keeps its scores but leaves the settled order (:func:`.settled.withdrawn`)."""
        row = s.get(StandingRow, job_id)
        if row is not None:
            before = SettledInfo.from_dict(row.settled or {})
            row.settled = replace(before, withdrawn=True).to_dict()

    def set_marks(self, benchmark: str, version: str, marks: Sequence[tuple[str, str, str, bool]]) -> None:
        """Set significance marks ``(job id, metric, other's name, present)`` on stored rows (idempotent): the row
        of the job lists (present) or does not list the other model under the metric."""
        if not marks:
            return
        with self.sessions.write() as s:
            self.lock(s, benchmark, version)
            for job_id, metric, other, present in marks:
                self._mark(s, job_id, metric, other, present)

    def rows(self, benchmark: str, version: str) -> list[StandingInfo]:
        """The stored rows of one benchmark version, oldest first."""
        with self.sessions.read() as s:
            rows = s.scalars(
                select(StandingRow)
                .where(StandingRow.benchmark == benchmark, StandingRow.version == version)
                .order_by(StandingRow.finished_at, StandingRow.job_id)
            )
            return [_info(r) for r in rows]

    def board(
        self,
        benchmark: str,
        version: str,
        sort: str = "fmr",
        descending: bool = True,
        limit: int | None = None,
        offset: int = 0,
        every_mark: bool = False,
    ) -> tuple[int, list[StandingInfo]]:
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
        q = (
            self._board_query(every_mark)
            .where(*where)
            .order_by(order.is_(None), order.desc() if descending else order.asc(), StandingRow.job_id)
            .offset(offset)
        )
        if limit is not None:
            q = q.limit(limit)
        with self.sessions.read() as s:
            total = int(s.execute(select(func.count()).select_from(StandingRow).where(*where)).scalar_one())
            rows = [_info(r, every_mark, board=True) for r in s.scalars(q)]
        return total, rows

    def board_of(self, job_ids: Sequence[str], every_mark: bool = False) -> list[StandingInfo]:
        """The rows of ``job_ids``, in that order (a page of a leaderboard ordered elsewhere: a settled one)."""
        if not job_ids:
            return []
        q = self._board_query(every_mark).where(StandingRow.job_id.in_(list(job_ids)))
        with self.sessions.read() as s:
            got = {r.job_id: _info(r, every_mark, board=True) for r in s.scalars(q)}
        return [got[j] for j in job_ids if j in got]

    @staticmethod
    def _board_query(every_mark: bool):
        """The rows, without their ``better_than`` lists unless ``every_mark`` (they grow with the square of the
        models; the ``marks`` column holds what a page shows of them)."""
        q = select(StandingRow)
        return q if every_mark else q.options(defer(StandingRow.better_than))

    def notes(self, benchmark: str, version: str) -> tuple[list[str], list[str]]:
        """The interval notes and warnings of every stored row of a version (short texts; most rows have none)."""
        with self.sessions.read() as s:
            got = s.execute(
                select(StandingRow.interval_note, StandingRow.warnings).where(
                    StandingRow.benchmark == benchmark, StandingRow.version == version
                )
            ).all()
        return [n for n, _ in got if n], [w for _, ws in got for w in ws or []]
