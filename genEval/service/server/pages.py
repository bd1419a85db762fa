"""Server-rendered HTML (jinja2 templates in ``templates/``), one router: the leaderboard of each benchmark, a job's
page, each run's report and its image grid. No scripts, fonts or styles from elsewhere: the pages work offline.
Sorting is server-side (``?sort=fmr&order=desc``), so the column links work without JavaScript; without ``sort`` the
rows follow the comparison's ranking score (``rank_by``, FMR_v by default), and the page says which and why. On a
settled benchmark (docs/service.md) the rows follow the settled order, ranks are tied ("2–3") where a pair of neighbours
is open or equivalent, and a column says the verdict on each row and the one below it (an open pair: the sources per
model that would settle it).

Readable at 1280 px: the leaderboard shows the compact score columns
(:func:`genEval.comparisons.leaderboard.score_columns`); every other score is one click away (a CSS-only toggle,
and a column sorted by stays shown), intervals never wrap, and the model column stays in view when the table
scrolls. A finished job's page opens with its headline (the ranking score with its interval and the counts it rests
on), then every score with its interval and the run's image grid; the model is named as submitted (a registered
config, or an architecture with its uploaded file's hash), and no page shows a path on the server.
"""

from __future__ import annotations

import time
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.templating import Jinja2Templates

from genEval.comparisons.leaderboard import score_columns
from genEval.comparisons.standing import Score
from genEval.runs.reader import read_results
from genEval.service.records import JobInfo, Mark, StandingInfo
from genEval.service.refusals import Conflict, Invalid, NotFound
from genEval.service.server.deps import Facade
from genEval.service.server.facade import Service
from genEval.service.server.jobs.files import own_file
from genEval.service.server.jobs.routes import file_answer
from genEval.service.server.standings.board import below_view, standings
from genEval.service.server.standings.compute import COLUMNS, LABELS, MARKED, RANK_BY, SORT_KEYS

router = APIRouter(tags=["pages"], default_response_class=HTMLResponse)
TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))


def _date(ts: float | None) -> str:
    return "" if ts is None else time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))


def _day(ts: float | None) -> str:
    return "" if ts is None else time.strftime("%Y-%m-%d", time.gmtime(ts))


def _cell(e: Score | None) -> dict:
    """A score as the pages show it: its value, its interval (one unbroken line under it) and the whole estimate."""
    e = e or Score()  # a row stored before the score existed
    return {
        "value": "–" if e.value is None else f"{e.value:.2f}",
        "interval": "" if e.low is None or e.high is None else f"[{e.low:.2f}, {e.high:.2f}]",
        "title": e.fmt(),
    }


#: Rows per leaderboard page (``?page=``); the API returns every row unless asked for a page.
PAGE_ROWS = 100


def _names(mark: Mark) -> str:
    """The first names of a mark (stored sorted) and how many more there are (the API lists them all)."""
    more = mark.count - len(mark.first)
    return ", ".join(mark.first) + (f" and {more} more" if more > 0 else "")


def _reports(row: StandingInfo) -> list[str]:
    """Each repetition's report; on a settled benchmark each round's, a job of its own (``runs/<benchmark>/<job
    id>/rep<r>``, the layout of :meth:`genEval.service.records.JobInfo.rep_dir`)."""
    if row.standing.rank is None:
        return [f"/jobs/{row.job_id}/report?rep={r}" for r in range(row.repetitions)]
    return [f"/jobs/{Path(d).parent.name}/report?rep={Path(d).name.removeprefix('rep')}" for d in row.run_dirs]


def _row(rank: int, row: StandingInfo) -> dict:
    s = row.standing
    cells = {k: _cell(s.scores.get(k)) for k in COLUMNS}
    marks = {m: row.marks.get(m) or Mark() for m in MARKED}
    better = [f"{LABELS[m]} > {_names(marks[m])}" for m in MARKED if marks[m].count]
    return {
        "rank": s.rank or rank,
        "below": below_view(row),
        "name": row.name,
        "job": row.job_id,
        "cells": cells,
        "reps": s.repetitions,
        "date": _day(row.finished_at),
        "finished": _date(row.finished_at),
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
    st = standings(service.db.leaderboard, service.catalog, name, version, **paging)
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
    compact, extended = score_columns(st.rank_by)
    context = {
        "bench": bench,
        "version": st.version,
        "current": st.version == bench.version,
        "rows": rows,
        "heads": {h["key"]: h for h in heads},
        "columns": COLUMNS,
        # shown by default: the compact columns, and the one sorted by; the others behind the "every score" toggle
        "extended": [k for k in COLUMNS if k in extended and k != sort],
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
        "reuse": service.catalog.reuse_budget(name, st.version),  # a settled version's budget (docs/scores.md)
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


def model_label(model: dict) -> str:
    """A submitted model as people name it: ``digits_cnn (registered config)``, ``resnet18 (timm, uploaded weights
    sha256 3f2a9c01e4b7…)``, ``TorchScript model (uploaded file sha256 …)``, with its class count and input size
    when given."""
    kind, name = model.get("kind", "?"), model.get("name")
    sha = f"sha256 {model['sha256'][:12]}…" if model.get("sha256") else "no upload recorded"
    if kind == "config":
        text = f"{name} (registered config)"
    elif kind == "torchscript":
        text = f"TorchScript / torch.export model (uploaded file {sha})"
    else:
        text = f"{name} ({kind}, uploaded weights {sha})"
    extra = [f"{model['num_classes']} classes" if model.get("num_classes") else ""]
    extra.append(f"input {model['input_size']} px" if model.get("input_size") else "")
    return text + "".join(f", {e}" for e in extra if e)


def _counts(ns: list[int], validated: list[int]) -> str:
    if len(ns) == 1:
        return f"on {ns[0]} sources, {validated[0]} validated"
    return (
        f"over {len(ns)} repetitions of {', '.join(map(str, ns))} sources ({', '.join(map(str, validated))} validated)"
    )


def _plain(path: Path) -> bool:
    """A plain file, not a link (a run directory is written by an untrusted model's sandboxed child)."""
    return path.is_file() and not path.is_symlink()


def _job_scores(svc: Service, job: JobInfo) -> dict:
    """A done job's headline, its scores (the leaderboard row when it pools several repetitions or rounds, then each
    repetition's own, from its results.json) and the repetitions that drew an image grid."""
    try:
        runs = [read_results(own_file(svc.files.rep_dir(job, r), "results.json").parent) for r in range(len(job.seeds))]
    except (OSError, ValueError, Conflict) as err:  # removed, unreadable or a link: the page says so, still renders
        return {"error": f"the results of this job cannot be read ({type(err).__name__}); ask the service's admin."}
    board = svc.db.standings.board_of([job.root_id])
    pooled = board[0].standing.scores if board and board[0].ranked and board[0].repetitions > 1 else None
    own = [{k: Score.of(e) for k, e in res.scores.estimates.items()} for res in runs]
    heads = (["leaderboard row (pooled)"] if pooled else []) + [
        f"repetition {r} (seed {res.seed})" for r, res in enumerate(runs)
    ]
    compact = score_columns(RANK_BY)[0]
    rows = [
        {
            "label": LABELS[k],
            "compact": k in compact,
            "cells": [_cell(c.get(k)) for c in ([pooled] if pooled else []) + own],
        }
        for k in COLUMNS
    ]
    counts = _counts([res.scores.n for res in runs], [res.scores.n_validated for res in runs])
    return {
        "headline": f"{LABELS[RANK_BY]} {((pooled or own[0]).get(RANK_BY) or Score()).fmt()} {counts}",
        "rank_label": LABELS[RANK_BY],
        "heads": heads,
        "rows": rows,
        "grids": [r for r in range(len(runs)) if _plain(svc.files.rep_dir(job, r) / "grid.png")],
    }


@router.get("/jobs/{job_id}")
def job_page(request: Request, job_id: str, svc: Facade):
    """A job's page: progress while it runs; once done, its headline, every score with its interval, the image grid
    of each repetition and its reports."""
    job = svc.jobs.job(job_id)
    pct = None if not job.images_total else 100.0 * job.images_done / job.images_total
    done = job.status == "done"
    context = {
        "job": job,
        "model": model_label(job.model),
        "pct": pct,
        "benchmarks": list(svc.benchmarks.values()),
        "created": _date(job.created_at),
        "finished": _date(job.finished_at),
        "reports": [f"/jobs/{job.id}/report?rep={r}" for r in range(len(job.seeds))] if done else [],
        "scores": _job_scores(svc, job) if done else None,
    }
    return TEMPLATES.TemplateResponse(request, "job.html", context)


@router.get(
    "/jobs/{job_id}/grid.png",
    **file_answer("image/png", {"type": "string", "format": "binary"}, "originals over their perturbed images"),
)
def grid(job_id: str, svc: Facade, rep: int = 0) -> FileResponse:
    """Repetition ``rep``'s ``grid.png``: validated originals (top row) over their perturbed images (bottom row)."""
    run = svc.files.finished_run(job_id, rep, what="image grid exists")[1]
    if not (run / "grid.png").is_file() and not (run / "grid.png").is_symlink():
        raise NotFound(f"job {job_id}'s repetition {rep} drew no image grid (no validated sample).")
    return FileResponse(own_file(run, "grid.png"), media_type="image/png")  # never through a link (docs/service.md)


@router.get("/jobs/{job_id}/report")
def report(job_id: str, svc: Facade, rep: int = 0):
    """The run's self-contained report (genEval.reports.report)."""
    return FileResponse(svc.files.report_file(job_id, rep), media_type="text/html")
