"""The service's pages in a real browser at 1280 px (issue 42): headless system Chromium driven by Playwright, every
request answered by FastAPI's TestClient (tests/support/pages.py), so a request to any other host is caught. The job
page and the leaderboard fit the window with their intervals on one line, the leaderboard's toggle shows every
score and its model column stays in view when the table scrolls, and the API page renders offline. Screenshots go
to the test's tmp folder (benchmarks/page_widths.py keeps them for a person to look at)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from genEval.comparisons.leaderboard import score_columns
from genEval.service.server.app import create_app
from genEval.service.server.standings.compute import RANK_BY
from tests.support.pages import BASE, NAMES, TABLE_LAYOUT_JS, browser, chromium, route_to, toy_service

pytestmark = pytest.mark.skipif(
    chromium() is None, reason="no headless browser: install the Debian package `chromium` (apt-get install chromium)"
)
WIDTH = 1280


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    pytest.importorskip("playwright.sync_api", reason="the browser tests drive Chromium with playwright (.[test])")
    home = tmp_path_factory.mktemp("browser-home")
    svc, ids = toy_service(home)
    client = TestClient(create_app(svc))
    outside: list[str] = []
    with browser(WIDTH) as p:
        route_to(p, client, outside)
        errors: list[str] = []
        p.on("pageerror", lambda e: errors.append(str(e)))
        yield p, ids, outside, errors
    svc.db.close()


def _fits(lay: dict) -> bool:
    """The table fits its container and the window, and the page does not scroll sideways."""
    return (
        lay["container_scroll"] <= lay["container_client"]
        and lay["table_right"] <= lay["window_width"]
        and lay["page_scroll"] <= lay["page_client"]
    )


def test_the_job_page_fits_1280_px_with_its_headline_scores_and_grid(page, tmp_path):
    p, ids, outside, errors = page
    p.goto(f"{BASE}/jobs/{ids[NAMES[0]]}")
    p.screenshot(path=str(tmp_path / "job.png"), full_page=True)
    assert p.locator("#headline").inner_text().startswith("FMR_v ")
    lay = p.evaluate(TABLE_LAYOUT_JS, "#scores")
    assert _fits(lay) and lay["interval_lines"] == 1, lay
    grid = p.locator("figure.grid img")
    assert grid.count() == 1 and grid.evaluate("i => i.complete && i.naturalWidth > 0")
    assert not outside and not errors, (outside, errors)


def test_the_leaderboard_fits_1280_px_and_its_toggle_shows_every_score(page, tmp_path):
    p, _, outside, errors = page
    _, extended = score_columns(RANK_BY)
    p.goto(f"{BASE}/leaderboard/digits_smoke")
    p.screenshot(path=str(tmp_path / "leaderboard.png"), full_page=True)
    lay = p.evaluate(TABLE_LAYOUT_JS, "#leaderboard")
    assert _fits(lay) and lay["interval_lines"] == 1, lay
    assert lay["columns"] == lay["all_columns"] - len(extended)
    p.click("label[for=every-score]")
    wide = p.evaluate(TABLE_LAYOUT_JS, "#leaderboard")
    assert wide["columns"] == wide["all_columns"] and wide["interval_lines"] == 1
    assert wide["page_scroll"] <= wide["page_client"], wide  # the wider table scrolls in its box, not the page
    model = p.locator("#leaderboard tr[data-model] td.model").first
    before = model.bounding_box()["x"]
    p.eval_on_selector(".scroll", "box => { box.scrollLeft = 400; }")
    assert p.eval_on_selector(".scroll", "box => box.scrollLeft") > 0  # it did scroll
    assert model.bounding_box()["x"] == pytest.approx(before, abs=1)  # the model column stays in view
    p.screenshot(path=str(tmp_path / "leaderboard-every-score.png"), full_page=True)
    assert not outside and not errors, (outside, errors)


def test_the_api_page_renders_offline(page, tmp_path):
    p, _, outside, errors = page
    p.goto(f"{BASE}/docs")
    p.wait_for_selector(".opblock", timeout=30_000)
    p.screenshot(path=str(tmp_path / "docs.png"))
    assert p.locator(".opblock").count() >= 10 and "genEval service" in p.inner_text(".info")
    assert not outside and not errors, (outside, errors)
