"""How wide and how readable the tables and pages are (issue 42, items 6, 7 and 9; a measurement, not a test).

    python -m benchmarks.page_widths --out /tmp/pages_after                         # this checkout
    python -m benchmarks.page_widths --code /tmp/before --out /tmp/pages_before     # another checkout
    python -m benchmarks.page_widths --out /tmp/pages_after --docs                  # also build the docs site, scan it

Made from toy runs in seconds (``benchmarks/harness/pages.py``: three linear classifiers with names as people write
them, 3x16x16 images, budget 3, two repetitions; a service with one finished job per model). ``--code`` measures
another checkout's ``genEval`` with this checkout's toys: the study reruns itself in a child whose ``PYTHONPATH``
puts that checkout's library first (``benchmarks/harness/checkout.py``). Prints one line per measurement:

* the terminal comparison (``Comparison.summary()``): the width of its score table and its widest line (a note),
  in characters;
* ``leaderboard.md``: the columns of its main table;
* the comparison's ``report.html``, a run's ``report.html`` (a run as ``geneval`` writes it: ``grid.png``, no
  ``images/``) and the service's leaderboard, job page, run report and ``/docs``, in headless Chromium 1280 px
  wide: the main table's columns (shown, and in all), whether it fits its container and the window, the most lines
  an interval breaks into, and the same with every column toggled on; what the run report says and draws
  (sections that need several models, the grid, the ticks of the step axes, which scores share an axis); what the
  job page shows; requests that left the page;
* with ``--docs`` (or ``--docs-only``): ``mkdocs build`` of the measured checkout into ``<out>/site``, every
  reference to another host that a page would load (stylesheets, scripts, fonts, images, ``@import``/``url()`` in
  CSS; a browser offline cannot fetch them), the markers shown in code blocks and the home page's first command.

Screenshots (1280 px) go to ``<out>/*.png``.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/page_widths.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import genEval
from benchmarks.harness import results
from benchmarks.harness.checkout import module_command, pythonpath
from benchmarks.harness.pages import BASE, NAMES, TABLE_LAYOUT_JS, browser, route_to, toy_comparison, toy_service

WIDTH = 1280
#: A report's main table: the leaderboard (a comparison's, or the one-row one of a run before issue 42) or a run's
#: table of scores.
MAIN_TABLE = "#main-table, #leaderboard table, table.scores"


def show(what: str, value) -> None:
    print(f"{what:<58} {json.dumps(value) if not isinstance(value, str) else value}", flush=True)


def capture_figures() -> list:
    """Every matplotlib figure the report draws, kept as (alt, figure) (the report module's PNG writer wrapped)."""
    from genEval.reports import figures

    seen, png = [], figures._png

    def keep(fig, alt, *args, **kwargs):
        seen.append((alt, fig))
        return png(fig, alt, *args, **kwargs)

    figures._png = keep
    return seen


def axes_of(seen: list, alt: str) -> list[dict]:
    fig = next((f for a, f in seen if a.startswith(alt)), None)
    if fig is None:
        return []
    out = []
    for ax in fig.axes:
        lo, hi = ax.get_xlim()
        ticks = [float(t) for t in ax.get_xticks() if lo - 1e-9 <= t <= hi + 1e-9]
        labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        out.append({"ylabel": ax.get_ylabel(), "xlabel": ax.get_xlabel(), "xticks": ticks, "xticklabels": labels})
    return out


def terminal_and_markdown(comp) -> None:
    lines = comp.summary().splitlines()
    rule = next(ln for ln in lines if ln and set(ln) == {"-"})  # the rule under the score table's header
    show("terminal comparison: score table width (characters)", len(rule))
    show("terminal comparison: widest line of the output", max(map(len, lines)))
    md = comp.markdown().splitlines()
    head = next(ln for ln in md if ln.startswith("| "))
    show("leaderboard.md: columns of the main table", head.count("|") - 1)


def measure_page(page, url: str, selector: str, shot: Path) -> dict | None:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(shot), full_page=True)
    return page.evaluate(TABLE_LAYOUT_JS, selector)


def layout_lines(what: str, lay: dict | None) -> None:
    if lay is None:
        show(f"{what}: main table", "not found")
        return
    show(f"{what}: columns shown (in all)", f"{lay['columns']} ({lay['all_columns']})")
    show(
        f"{what}: table fits its container / the window",
        f"{lay['container_scroll'] <= lay['container_client']} / {lay['table_right'] <= lay['window_width']} "
        f"(table {lay['table_width']} px, container {lay['container_client']} px, window {lay['window_width']} px, "
        f"page scrolls {lay['page_scroll']} > {lay['page_client']}: {lay['page_scroll'] > lay['page_client']})",
    )
    show(f"{what}: most lines of one interval", lay["interval_lines"])


def reports(out: Path, comp, seen: list) -> None:
    from genEval.reports.report import write_report

    page_path = write_report(comp)
    run = out / "run"
    shutil.copytree(Path(comp.out_dir) / "runs" / NAMES[0] / "rep0", run)
    shutil.rmtree(run / "images")  # a run as `geneval` writes it by default: grid.png, no images/
    (run / "report.html").unlink(missing_ok=True)
    seen.clear()
    run_report = write_report(run)
    text = run_report.read_text()
    show(
        "run report: notes that a section needs several models",
        len(re.findall(r"several models|only one model", text, re.I)),
    )
    show(
        "run report: says 'No images saved' (grid.png is there)",
        "No images saved" in text and (run / "grid.png").is_file(),
    )
    show("run report: image grids embedded", text.count('data-kind="images"'))
    budget = axes_of(seen, "PA against budget")
    show("run report: PA-vs-budget x ticks", budget[0]["xticks"] if budget else "no figure")
    ff = axes_of(seen, "histogram of first-fooled")
    show("run report: first-fooled x ticks", ff[0]["xticks"] if ff else "no figure")
    bars = axes_of(seen, "bar chart")
    show("run report: score axes (y label: scores)", [f"{a['ylabel']}: {', '.join(a['xticklabels'])}" for a in bars])
    with browser(WIDTH) as page:
        outside: list[str] = []
        page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
        layout_lines(
            "comparison report 1280 px",
            measure_page(page, page_path.as_uri(), MAIN_TABLE, out / "report_comparison.png"),
        )
        if page.locator("#every-score summary").count():  # the full table, behind its toggle
            page.click("#every-score summary")
            page.locator("#every-score").screenshot(path=str(out / "report_comparison_every_score.png"))
        layout_lines("run report 1280 px", measure_page(page, run_report.as_uri(), MAIN_TABLE, out / "report_run.png"))
        show("reports: requests beyond the file", outside)


def service(out: Path) -> None:
    from fastapi.testclient import TestClient

    from genEval.service.server.app import create_app

    home = out / "service-home"
    home.mkdir()
    svc, ids = toy_service(home)
    client = TestClient(create_app(svc))
    job = ids[NAMES[0]]
    with browser(WIDTH) as page:
        outside: list[str] = []
        route_to(page, client, outside)
        layout_lines(
            "service leaderboard 1280 px",
            measure_page(page, f"{BASE}/", "#leaderboard", out / "service_leaderboard.png"),
        )
        if page.locator("label[for=every-score]").count():  # every column, behind the toggle
            page.click("label[for=every-score]")
            layout_lines("service leaderboard, every score shown", page.evaluate(TABLE_LAYOUT_JS, "#leaderboard"))
            page.screenshot(path=str(out / "service_leaderboard_every_score.png"), full_page=True)
        page.goto(f"{BASE}/jobs/{job}")
        page.screenshot(path=str(out / "service_job.png"), full_page=True)
        html = page.content()
        show("job page: model shown as a Python dict", "{'kind'" in page.inner_text("body"))
        show("job page: shows FMR_v (the ranking score)", "FMR_v" in page.inner_text("body"))
        show("job page: images", page.locator("img").count())
        show("job page: server home path in the page", str(home) in html)
        page.goto(f"{BASE}/jobs/{job}/report")
        show("service run report: server home path in the page", str(home) in page.content())
        page.goto(f"{BASE}/docs")
        page.wait_for_timeout(1500)
        page.screenshot(path=str(out / "service_docs.png"))
        show("/docs: Swagger UI rendered (operations shown)", page.locator(".opblock").count())
        show("requests that left the service (blocked offline)", sorted(set(outside)))
    svc.db.close()


#: What a page loads from elsewhere: a stylesheet, script, image, font or frame by URL, or CSS @import / url().
LOADS = re.compile(
    r"""<(?:link|script|img|iframe|source)\b[^>]*\b(?:href|src)\s*=\s*["']?((?:https?:)?//[^"'\s>]+)"""
    r"""|@import\s+(?:url\()?["']?((?:https?:)?//[^"')\s]+)|url\(\s*["']?((?:https?:)?//[^"')\s]+)""",
    re.IGNORECASE,
)


def docs(out: Path) -> None:
    site, checkout = out / "site", Path(genEval.__file__).resolve().parents[1]  # the docs of the checkout measured
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=checkout,
        capture_output=True,
        text=True,
    )
    show("mkdocs build --strict", f"exit {r.returncode}" + ("" if r.returncode == 0 else ": " + r.stderr[-800:]))
    found: dict[str, set[str]] = {}
    for p in site.rglob("*"):
        if p.suffix in (".html", ".css", ".js") and p.is_file():
            for m in LOADS.finditer(p.read_text(errors="replace")):
                url = next(g for g in m.groups() if g)
                found.setdefault(re.sub(r"^(?:https?:)?//([^/]+).*", r"\1", url), set()).add(str(p.relative_to(site)))
    show("docs site: hosts its pages would load from", {h: len(v) for h, v in sorted(found.items())})
    index = (site / "index.html").read_text()
    show(
        "docs site: '# slow:' / '# needs:' markers shown in code",
        sum(
            len(re.findall(r"#\s*(?:slow|needs):", (s / "index.html").read_text()))
            for s in [site, *[d for d in site.iterdir() if (d / "index.html").is_file()]]
        ),
    )
    first = re.search(r"<pre\b.*?</pre>", index, re.S)
    lines = html.unescape(re.sub(r"<[^>]+>", "", first[0])).splitlines() if first else []
    command = next((ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")), "")
    show("docs home page: its first code block's command", command)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="where pages and screenshots go (default: a temp dir)")
    ap.add_argument("--docs", action="store_true", help="also build the docs site and scan it for external loads")
    ap.add_argument("--docs-only", action="store_true", help="only build and scan the docs site")
    ap.add_argument("--code", type=Path, default=None, help="measure this checkout's genEval (default: this one)")
    a = ap.parse_args()
    out = (a.out or Path(tempfile.mkdtemp(prefix="page-widths-"))).resolve()
    if a.code is not None:  # the same study in a child whose genEval is the other checkout's
        args = ["--out", str(out)] + ["--docs"] * a.docs + ["--docs-only"] * a.docs_only
        env = {**os.environ, "PYTHONPATH": pythonpath(a.code)}
        raise SystemExit(subprocess.run(module_command("benchmarks.page_widths", *args), env=env).returncode)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    show("genEval measured", str(Path(genEval.__file__).resolve().parent))
    if a.docs_only:
        docs(out)
        return
    seen = capture_figures()
    comp = toy_comparison(out / "comparison")
    terminal_and_markdown(comp)
    reports(out, comp, seen)
    service(out)
    if a.docs:
        docs(out)
    show("screenshots", str(out))


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
