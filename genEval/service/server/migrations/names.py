"""The unique index of active names and rounds (:mod:`~genEval.service.server.jobs.rows`), made when a database
can hold it: a database of an earlier genEval may already hold two active jobs of one name (accepted by a genEval
without the index); it keeps working without the index, with an error in the log naming them, and every start tries
again, so the index is made once an admin has cancelled all but one of each."""

from __future__ import annotations

import logging

import sqlalchemy as sa
from sqlalchemy.engine import Connection

log = logging.getLogger("genEval.service.server.migrations")
#: The statuses that hold a name (the index's condition).
NAMED_SQL = "status IN ('queued', 'running', 'done')"


def make_name_index(bind: Connection, index: sa.Index) -> bool:
    """Create ``index`` unless active jobs share a name and round (then log them and return False)."""
    dupes = bind.execute(
        sa.text(
            f"SELECT benchmark, benchmark_version, name, COUNT(*) FROM jobs WHERE {NAMED_SQL} "
            "GROUP BY benchmark, benchmark_version, name, round HAVING COUNT(*) > 1"
        )
    ).all()
    if not dupes:
        index.create(bind)
        return True
    shown = "; ".join(f"{b} {v} {n!r} x{c}" for b, v, n, c in dupes[:10])
    log.error(
        "database: several active jobs share a name (%s), so the unique index of names (%s) cannot be made; "
        "cancel all but one of each (POST /api/jobs/<id>/cancel) and restart",
        shown,
        index.name,
    )
    return False
