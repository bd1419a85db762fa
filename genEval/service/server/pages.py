"""Server-rendered HTML (jinja2 templates in ``templates/``), one router: the leaderboard of each benchmark, a job's
status page and each run's report. No scripts, fonts or styles from elsewhere: the pages work offline.
Sorting is server-side (``?sort=fmr&order=desc``), so the column links work without JavaScript; without ``sort`` the
rows follow the comparison's ranking score (``rank_by``, FMR_v by default), and the page says which and why. On a
settled benchmark (issue 33) the rows follow the settled order, ranks are tied ("2–3") where a pair of neighbours is
open or equivalent, and a column says the verdict on each row and the one below it (an open pair: the sources per
model that would settle it).
"""

from __future__ import annotations

import time
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.templating import Jinja2Templates

from genEval.scores.definitions import SCORE
from genEval.scores.intervals import format_estimate
from genEval.scores.sequential import PairVerdict, points
from genEval.service.refusals import Invalid
from genEval.service.server.deps import Facade
from genEval.service.server.facade import Service
from genEval.service.server.standings.board import Row, standings
from genEval.service.server.standings.compute import COLUMNS, LABELS, MARKED, RANK_BY, SORT_KEYS

router = APIRouter(tags=["pages"], default_response_class=HTMLResponse)
TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))


def _date(ts: float | None) -> str:
    return "" if ts is None else time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))


#: Rows per leaderboard page (``?page=``); the API returns every row unless asked for a page.
PAGE_ROWS = 100


def _names(mark: dict) -> str:
    """The first names of a mark (stored sorted) and how many more there are (the API lists them all)."""
    more = mark["count"] - len(mark["first"])
    return ", ".join(mark["first"]) + (f" and {more} more" if more > 0 else "")


def _below(v: PairVerdict | None) -> dict | None:
    """The verdict on a row and the one below it, as the settled column shows it (the whole sentence as its title)."""
    if v is None:
        return None
    if v.verdict == "ordered":
        text = f"ordered above {v.b}"
    elif v.verdict == "equivalent":
        text = f"equivalent to {v.b} (within {points(v.margin)})"
    elif v.more_sources is not None:
        text = f"open vs {v.b}: ≈ {v.more_sources:,} more sources to {v.more_kind}"
    else:
        text = f"open vs {v.b} ({v.reason})" if v.reason else f"open vs {v.b}"
    return {"text": text, "verdict": v.verdict, "title": v.describe(SCORE[RANK_BY].label) if v.metric else text}


def _reports(row: Row) -> list[str]:
    """Each repetition's report; on a settled benchmark each round's, a job of its own (``runs/<benchmark>/<job
    id>/rep<r>``, the layout of :meth:`genEval.service.records.JobInfo.rep_dir`)."""
    if row.rank is None:
        return [f"/jobs/{row.job_id}/report?rep={r}" for r in range(row.standing.repetitions)]
    return [f"/jobs/{Path(d).parent.name}/report?rep={Path(d).name.removeprefix('rep')}" for d in row.run_dirs]


def _row(rank: int, row: Row) -> dict:
    s = row.standing
    cells = {}
    for k in COLUMNS:
        e = s.scores.get(k) or {"value": None, "low": None, "high": None}  # stored before the score existed
        cells[k] = {
            "value": "–" if e["value"] is None else f"{e['value']:.2f}",
            "interval": "" if e["low"] is None else f"[{e['low']:.2f}, {e['high']:.2f}]",
            "title": format_estimate(e),
        }
    better = [f"{LABELS[m]} > {_names(row.marks[m])}" for m in MARKED if row.marks[m]["count"]]
    return {
        "rank": row.rank or rank,
        "below": _below(row.below),
        "name": row.name,
        "job": row.job_id,
        "cells": cells,
        "reps": s.repetitions,
        "date": _date(row.finished_at),
        "better": better,
        "reports": _reports(row),
    }


def _leaderboard(
    request: Request, service: Service, name: str, sort: str | None, order: str, version: str | None, page: int = 1
):
    bench = service.catalog.offered(name)
    if (sort is not None and sort not in SORT_KEYS) or order not in ("asc", "desc"):
        raise Invalid(f"sort must be one of {', '.join(SORT_KEYS)} and order asc or desc.")
    if page < 1:
        raise Invalid(f"page must be 1 or more, got {page}.")
    # the ranking's order unless a column is chosen: the comparison library's ranking score (FMR_v), or the settled one
    sort = sort or ("rank" if bench.settled else RANK_BY)
    offset = (page - 1) * PAGE_ROWS
    paging = {"sort": sort, "descending": order == "desc", "limit": PAGE_ROWS, "offset": offset, "every_mark": False}
    st = standings(service.db, service.catalog, name, version, **paging)
    rows = [_row(offset + i + 1, r) for i, r in enumerate(st.rows)]
    here = f"?sort={sort}&order={order}" + (f"&version={version}" if version else "")
    pages = {
        "first": offset + 1 if rows else 0,
        "last": offset + len(rows),
        "prev": f"{here}&page={page - 1}" if page > 1 else None,
        "next": f"{here}&page={page + 1}" if offset + len(rows) < st.total else None,
    }
    heads = [
        {
            "key": k,
            "label": LABELS.get(k, k),
            "active": k == sort,
            "href": f"?sort={k}&order={'asc' if k == sort and order == 'desc' else 'desc'}"
            + (f"&version={version}" if version else ""),
        }
        for k in (*COLUMNS, "repetitions", "date", "name")
    ]
    counts = service.db.jobs.count(benchmark=name, version=st.version)
    context = {
        "bench": bench,
        "version": st.version,
        "current": st.version == bench.version,
        "rows": rows,
        "heads": {h["key"]: h for h in heads},
        "columns": COLUMNS,
        "note": st.interval_note,
        "ranked_by": {"label": LABELS[st.rank_by], "reason": st.rank_reason} if sort in (st.rank_by, "rank") else None,
        "stop": st.stop,
        "settled": st.settled,
        "warnings": st.warnings,
        "benchmarks": list(service.benchmarks.values()),
        "sort": sort,
        "order": order,
        "pending": st.pending,
        "total": st.total,
        "pages": pages,
        "queued": counts["queued"],
        "running": counts["running"],
        "versions": service.catalog.versions(name),
        "reuse": service.catalog.reuse_budget(name, st.version),  # a settled version's budget (issue 44)
    }
    return TEMPLATES.TemplateResponse(request, "leaderboard.html", context)


@router.get("/")
def index(
    request: Request,
    svc: Facade,
    sort: str | None = None,
    order: str = "desc",
    version: str | None = None,
    page: int = 1,
):
    """The leaderboard of the default benchmark."""
    return _leaderboard(request, svc, svc.catalog.default, sort, order, version, page)


@router.get("/leaderboard/{name}")
def leaderboard(
    request: Request,
    name: str,
    svc: Facade,
    sort: str | None = None,
    order: str = "desc",
    version: str | None = None,
    page: int = 1,
):
    """The leaderboard of benchmark ``name``, sorted and paged server-side."""
    return _leaderboard(request, svc, name, sort, order, version, page)


@router.get("/jobs/{job_id}")
def job_page(request: Request, job_id: str, svc: Facade):
    """A job's status page (progress while it runs, its reports once done)."""
    job = svc.jobs.job(job_id)
    pct = None if not job.images_total else 100.0 * job.images_done / job.images_total
    context = {
        "job": job,
        "pct": pct,
        "benchmarks": list(svc.benchmarks.values()),
        "created": _date(job.created_at),
        "finished": _date(job.finished_at),
        "reports": [f"/jobs/{job.id}/report?rep={r}" for r in range(len(job.seeds))] if job.status == "done" else [],
    }
    return TEMPLATES.TemplateResponse(request, "job.html", context)


@router.get("/jobs/{job_id}/report")
def report(job_id: str, svc: Facade, rep: int = 0):
    """The run's self-contained report (genEval.reports.report)."""
    return FileResponse(svc.files.report_file(job_id, rep), media_type="text/html")
