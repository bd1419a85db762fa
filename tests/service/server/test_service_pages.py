"""The service's pages say what a job scored (issue 42, item 6): the job page's headline, every score with its
interval, its image grid and the model as submitted; the leaderboard's compact columns with the rest behind a
toggle; the API page served offline; no server path on any public page. Through FastAPI's TestClient, on jobs
finished from toy runs (tests/support/pages.py), in seconds; the same pages in a real browser: test_pages_browser.py."""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient

from genEval.comparisons.leaderboard import score_columns
from genEval.service.server.app import create_app
from genEval.service.server.pages import model_label
from genEval.service.server.standings.compute import COLUMNS, LABELS, RANK_BY
from tests.support.pages import NAMES, toy_service


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    home = tmp_path_factory.mktemp("pages-home")
    svc, ids = toy_service(home)
    yield svc, ids, TestClient(create_app(svc))
    svc.db.close()


def _results(svc, job_id: str, rep: int = 0) -> dict:
    return json.loads((svc.files.rep_dir(svc.db.jobs.get(job_id), rep) / "results.json").read_text())


def test_the_job_page_opens_with_the_headline_then_every_score_and_the_grid(service):
    svc, ids, client = service
    job = ids[NAMES[0]]
    page = client.get(f"/jobs/{job}").text
    scores = _results(svc, job)["scores"]
    e = scores[RANK_BY]
    headline = (
        f"FMR_v {e['value']:.2f} [{e['low']:.2f}, {e['high']:.2f}] on {scores['n']} sources, "
        f"{scores['n_validated']} validated"
    )
    assert re.search(r'<p class="headline" id="headline">([^<]*)</p>', page)[1] == headline
    table = page[page.index('<table id="scores"') : page.index("</table>", page.index('<table id="scores"'))]
    for k in COLUMNS:  # every score, with its interval unbroken beside it
        est = scores[k]
        value = "–" if est["value"] is None else f"{est['value']:.2f}"
        interval = f"[{est['low']:.2f}, {est['high']:.2f}]" if est["low"] is not None else ""
        assert f'<th class="left">{LABELS[k]}</th><td title="' in table
        assert f'">{value} <span class="ci inline">{interval}</span></td>' in table, k
    assert '<td class="left" id="model">digits_cnn (registered config)</td>' in page
    assert "{&#39;kind&#39;" not in page and "{'kind'" not in page  # never the raw dict
    assert f'<img src="/jobs/{job}/grid.png?rep=0"' in page


def test_the_grid_route_serves_the_runs_grid_png(service):
    svc, ids, client = service
    job = ids[NAMES[1]]
    got = client.get(f"/jobs/{job}/grid.png?rep=0")
    assert got.status_code == 200 and got.headers["content-type"] == "image/png"
    assert got.content == (svc.files.rep_dir(svc.db.jobs.get(job), 0) / "grid.png").read_bytes()
    assert client.get(f"/jobs/{job}/grid.png?rep=3").status_code == 404
    assert client.get("/jobs/nope/grid.png").status_code == 404


def test_a_model_is_named_as_it_was_submitted():
    assert model_label({"kind": "config", "name": "digits_cnn"}) == "digits_cnn (registered config)"
    sha = "3f2a9c01e4b7" + "0" * 52
    assert (
        model_label({"kind": "timm", "name": "resnet18", "num_classes": 10, "input_size": 32, "sha256": sha})
        == "resnet18 (timm, uploaded weights sha256 3f2a9c01e4b7…), 10 classes, input 32 px"
    )
    assert model_label({"kind": "torchscript", "sha256": sha}) == (
        "TorchScript / torch.export model (uploaded file sha256 3f2a9c01e4b7…)"
    )


def _heads(page: str) -> dict[str, str]:
    """Column label -> the class of its header cell, from the leaderboard table."""
    thead = page[page.index('<table id="leaderboard">') : page.index("</thead>")]
    return {label: cls for cls, label in re.findall(r'<th class="([^"]*)"><a href="[^"]*">([^<]+)</a></th>', thead)}


def test_the_leaderboard_shows_the_compact_columns_and_keeps_the_rest_behind_the_toggle(service):
    _, _, client = service
    compact, extended = score_columns(RANK_BY)
    assert extended and set(compact) | set(extended) == set(COLUMNS)
    heads = _heads(client.get("/leaderboard/digits_smoke").text)
    assert all("ext" not in heads[LABELS[k]].split() for k in compact)
    assert all("ext" in heads[LABELS[k]].split() for k in extended)
    page = client.get("/leaderboard/digits_smoke").text
    assert f"every score ({len(extended)} more columns: " in page and 'id="every-score"' in page
    # a column sorted by is shown, whatever the toggle says
    sorted_by = extended[0]
    heads = _heads(client.get(f"/leaderboard/digits_smoke?sort={sorted_by}").text)
    assert heads[LABELS[sorted_by]].split() == ["active"]
    assert f"every score ({len(extended) - 1} more columns" in client.get(f"/?sort={sorted_by}").text


def test_no_public_page_shows_a_path_on_the_server(service):
    svc, ids, client = service
    job = ids[NAMES[2]]
    rep = svc.files.rep_dir(svc.db.jobs.get(job), 0)
    # a run whose recorded components and warnings name files under the service's home (an uploaded model)
    res = json.loads((rep / "results.json").read_text())
    res["components"]["classifier"] = f"TorchScriptClassifier(path='{svc.home}/uploads/ab12cd/model.pt')"
    res["warnings"] = [*res.get("warnings", []), f"weights read from {svc.home.resolve()}/cache/w.safetensors"]
    (rep / "results.json").write_text(json.dumps(res))
    (rep / "report.html").unlink(missing_ok=True)
    pages = ["/", "/leaderboard/digits_smoke", f"/jobs/{job}", f"/jobs/{job}/report"]
    for url in pages:
        text = client.get(url).text
        assert str(svc.home) not in text and str(svc.home.resolve()) not in text, url
    report = client.get(f"/jobs/{job}/report").text
    assert "TorchScriptClassifier(path=&#39;…/model.pt&#39;)" in report and "…/w.safetensors" in report


def test_the_api_page_loads_swagger_ui_from_the_server_itself(service):
    _, _, client = service
    docs = client.get("/docs").text
    assert "cdn.jsdelivr.net" not in docs and "fastapi.tiangolo.com" not in docs
    assets = re.findall(r"""(?:src|href)=["']?(/[^"'\s>]+)""", docs)
    assert "/static-offline-docs/swagger-ui-bundle.js" in assets and "/static-offline-docs/swagger-ui.css" in assets
    for url in assets:
        got = client.get(url)
        assert got.status_code == 200 and len(got.content) > 1000, url
    assert "cdn.jsdelivr.net" not in client.get("/redoc").text
