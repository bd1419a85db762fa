"""The pages people read, made from toy runs in seconds: a comparison of linear classifiers (with saved images), a
service whose jobs were finished from toy runs the way a worker finishes them, and a Chromium page (Playwright
driving the system Chromium) that fetches the service's URLs from FastAPI's TestClient, so no server process is
needed and every request that leaves it is recorded.

Used by benchmarks/page_widths.py (which measures the same pages of any checkout) and, through
``tests/support/pages.py``, by tests/service/server/test_pages_browser.py.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import torch

from benchmarks.harness.toys import LinearClassifier, ListDataset, ModelOracle, SigmoidGenerator
from genEval.service.records import JobInfo

#: Model names as people write them (the longest is the 20 characters the terminal table keeps).
NAMES = ("digits_intervention", "digits_wide_cnn", "resnet20-augmix-long")
BASE = "http://geneval.test"  # the TestClient's origin as the browser sees it (never resolved: routed)

#: Chromium's flags for a headless page in a container (the pages here, tests/service/server/test_service_e2e.py).
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium() -> str | None:
    """The system Chromium (Debian: apt-get install chromium), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


def claim_smoke_job(svc, name: str, seed: int, model: str | None = None) -> tuple[JobInfo, JobInfo]:
    """Submit a ``digits_smoke`` job ``name`` (model ``model``, default ``name``) under a new submitter token and
    claim it as worker ``w``: (the job as submitted, as claimed), for a toy run recorded as a worker would."""
    owner = svc.db.tokens.create(f"{name}-owner", "submitter")[1]
    bench = svc.benchmarks["digits_smoke"]
    job = svc.db.jobs.submit(
        benchmark=bench.name,
        benchmark_version=bench.version,
        name=name,
        owner=owner,
        model={"kind": "config", "name": model or name},
        config={},
        overrides={},
        seeds=[seed],
        upload_path=None,
    )
    while (claimed := svc.db.queue.claim("w", 60)).id != job.id:
        pass
    return job, claimed


def image_data(n: int = 24, seed: int = 1) -> tuple[ListDataset, LinearClassifier]:
    """``n`` random 3x16x16 images labelled by a linear 'truth' model, and that model (the oracle's)."""
    truth = LinearClassifier(3 * 16 * 16, 3, seed=0)
    x = torch.rand(n, 3, 16, 16, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        y = truth(x).argmax(1).tolist()
    return ListDataset(x, y, ["airplane", "automobile", "bird"]), truth


def toy_comparison(out: Path, names: tuple[str, ...] = NAMES, repetitions: int = 2):
    """``geneval compare``'s library call on linear toys (a share of the truth model mixed into each), images
    saved: the comparison (written to ``out``)."""
    from genEval.campaigns import Design, EvaluationPlan, Setup, run_campaign
    from genEval.comparisons.settings import ComparisonSettings
    from genEval.runs.recording import RunOutput
    from genEval.search.execution import Execution
    from genEval.search.perturb import SearchConfig

    data, truth = image_data()
    plan = EvaluationPlan(
        SearchConfig(budget=3, step_size=0.05, update="sign"),
        progress=False,
        execution=Execution(batch_size=8),
        output=RunOutput(save_images=True),
    )
    models = {n: _blend(truth, i + 1) for i, n in enumerate(names)}
    design = Design(models, out, repetitions, list(range(1, repetitions + 1)), ComparisonSettings(n_boot=100))
    return run_campaign(plan, design, Setup(data, SigmoidGenerator(), ModelOracle(truth)))


def _blend(truth: LinearClassifier, seed: int) -> LinearClassifier:
    """A model right on most clean images: the truth's weights plus noise of scale ``seed / 4``."""
    m = LinearClassifier(3 * 16 * 16, 3, seed=seed)
    with torch.no_grad():
        m.l.weight.mul_(seed / 4).add_(truth.l.weight)
        m.l.bias.mul_(seed / 4).add_(truth.l.bias)
    m.name = f"blend{seed}"
    return m


def toy_service(home: Path, names: tuple[str, ...] = NAMES, n_boot: int = 100):
    """A service over SQLite in ``home`` with one finished job per name on digits_smoke (toy runs, recorded as a
    worker records them: results, grid.png, saved images, standings; the model they name, ``digits_cnn``, registered):
    the service and name -> job id."""
    from benchmarks.harness.presets import benchmark, classifier_config
    from genEval.service.server.database import Database, sqlite_url
    from genEval.service.server.facade import Service, Settings

    db = Database(sqlite_url(home / "geneval.db"))
    svc = Service(
        db,
        Settings(home=home, default_benchmark="digits_smoke", n_boot=n_boot),
        {"digits_smoke": benchmark("digits_smoke")},
        {"digits_cnn": classifier_config("digits_cnn")},
    )
    data, truth = image_data(24)
    ids = {
        n: _finish_toy_job(svc, n, _blend(truth, i + 1), data, ModelOracle(truth), i + 1) for i, n in enumerate(names)
    }
    return svc, ids


def _finish_toy_job(svc, name: str, classifier, data, oracle, seed: int) -> str:
    import genEval
    from genEval.runs.recording import RunOutput
    from genEval.scores.run_scores import Scoring
    from genEval.service.server.standings.compute import StandingsBuilder, record_finished

    job, claimed = claim_smoke_job(svc, name, seed, "digits_cnn")
    out = job.rep_dir(svc.home, 0)
    res = genEval.evaluate(
        classifier=classifier,
        data=data,
        generator=SigmoidGenerator(),
        oracle=oracle,
        search={"budget": 3, "step_size": 0.05, "update": "sign"},
        seed=seed,
        config={"comparison": {"model": name, "repetition": 0}},
        output=RunOutput(out, save_images=True, progress=False),
        scoring=Scoring(n_boot=svc.settings.n_boot),
    )
    result = {
        "repetitions": [
            {"repetition": 0, "seed": seed, "run_dir": f"{job.run_dir}/rep0", "n": res.scores.n, "metrics": res.metrics}
        ],
        "classifier": res.components.get("classifier"),
    }
    builder = StandingsBuilder(svc.db.leaderboard, svc.home, n_boot=svc.settings.n_boot)
    assert record_finished(svc.db, builder, claimed, "w", result)
    return job.id


@contextmanager
def browser(width: int = 1280, height: int = 900) -> Iterator:
    """A Playwright page in headless system Chromium, ``width`` px wide; None when Playwright or Chromium is
    missing."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
        try:
            yield b.new_context(viewport={"width": width, "height": height}).new_page()
        finally:
            b.close()


def route_to(page, client, outside: list[str]) -> None:
    """Serve :data:`BASE` from the TestClient ``client``; abort every other request, recording its URL in
    ``outside`` (data: URIs never reach the router)."""

    def handle(route) -> None:
        url = route.request.url
        if not url.startswith(BASE):
            outside.append(url)
            route.abort()
            return
        parts = urlsplit(url)
        r = client.get(parts.path + (f"?{parts.query}" if parts.query else ""))
        route.fulfill(status=r.status_code, headers=dict(r.headers), body=r.content)

    page.route("**/*", handle)


#: The layout of a page's main table at the page's width, as JavaScript computes it: its columns (shown, and in all),
#: whether it fits its container and the window, and the most lines any interval (``.ci``) breaks into.
TABLE_LAYOUT_JS = """(sel) => {
  const t = document.querySelector(sel);
  if (!t) return null;
  const box = t.parentElement;
  const lines = (el) => {
    const r = document.createRange(); r.selectNodeContents(el);
    return new Set(Array.from(r.getClientRects()).filter(q => q.width > 0).map(q => Math.round(q.top))).size;
  };
  const ci = Array.from(t.querySelectorAll('.ci'));
  return {
    columns: Array.from(t.querySelectorAll('thead tr:first-child th')).filter(
      th => getComputedStyle(th).display !== 'none').length,
    all_columns: t.querySelectorAll('thead tr:first-child th').length,
    table_width: Math.round(t.getBoundingClientRect().width),
    container_scroll: box.scrollWidth, container_client: box.clientWidth,
    page_scroll: document.documentElement.scrollWidth, page_client: document.documentElement.clientWidth,
    table_right: Math.round(t.getBoundingClientRect().right), window_width: window.innerWidth,
    interval_lines: ci.length ? Math.max(...ci.map(lines)) : 0,
  };
}"""
