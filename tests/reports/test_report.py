"""report.html: every section, offline (no external src/href), the figure count, and a headless browser."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from genEval.campaigns import Design, EvaluationPlan, Setup, run_campaign
from genEval.commands.report import run_report
from genEval.comparisons.aggregate import aggregate
from genEval.comparisons.leaderboard import score_columns
from genEval.comparisons.settings import ComparisonSettings
from genEval.reports.figures import pa_by_budget
from genEval.reports.report import (
    NEEDS_SEVERAL,
    SECTIONS,
    expected_figures,
    public_text,
    read_transfer,
    render_report,
    write_report,
)
from genEval.runs.recording import RunOutput
from genEval.scores.definitions import SCORE
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from tests.support.hand_runs import write_hand_runs
from tests.support.toys import LinearClassifier, ListDataset, ModelOracle, SigmoidGenerator

MODELS = ("lin0", "lin1")
CHROMIUM = next((p for p in (shutil.which("chromium"), "/usr/bin/chromium") if p and Path(p).exists()), None)
EXTERNAL = re.compile(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", re.IGNORECASE)


@pytest.fixture(scope="module")
def comparison_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    x = torch.rand(16, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    oracle_model = LinearClassifier(64, 3, seed=7)
    with torch.no_grad():
        y = oracle_model(x).argmax(1).tolist()
    plan = EvaluationPlan(
        SearchConfig(budget=4, step_size=0.05, update="sign"),
        progress=False,
        execution=Execution(batch_size=8),
        output=RunOutput(save_images=True),
    )
    models = {m: LinearClassifier(64, 3, seed=i) for i, m in enumerate(MODELS)}
    design = Design(models, out, repetitions=2, seeds=[1, 2], settings=ComparisonSettings(n_boot=100))
    comp = run_campaign(
        plan, design, Setup(ListDataset(x, y, ["a", "b", "c"]), SigmoidGenerator(), ModelOracle(oracle_model))
    )
    write_report(comp)
    return comp, out


def expected_count(comp, with_images: bool, transfer: bool = False, rra: bool = True) -> int:
    """bars + PA-vs-budget + first-fooled + per-class (+ ER scatter) (+ the response-rate accuracy curves of runs
    that recorded their confidence) (+ transfer) (+ a grid per model), and the sections of issue 43: the per-class
    difference heatmap (two or more models), multi-ID ER, the fixed shift."""
    n = 4 + (comp.effective_robustness.w is not None) + transfer + rra
    n += bool(comp.class_differences and comp.class_differences.pairs) + (comp.multi_id is not None)
    n += comp.fixed_shift is not None
    return n + (len(comp.models) if with_images else 0)


def test_comparison_report_has_every_section_and_no_external_resources(comparison_dir):
    comp, out = comparison_dir
    text = (out / "report.html").read_text()
    for sid in SECTIONS:
        assert f'<section id="{sid}">' in text
    assert not EXTERNAL.search(text)
    assert "http://" not in text and "https://" not in text
    assert "Content-Security-Policy" in text and "<script" not in text
    assert expected_figures(text) == text.count("<img ") == expected_count(comp, with_images=True)
    for m in MODELS:
        assert f"image grid for {m}: originals and perturbed images at their size, 8x8 px" in text
    assert "R^2 (logit space)" in text or "Not computed" in text
    assert "first fooled step is in [1, t]" in text  # the PA-vs-budget approximation is stated


def _run_copy(out, tmp_path, *, images: bool, grid: bool):
    """A copy of one of the comparison's runs, with or without its image tensors and its grid.png."""
    run = tmp_path / "run"
    shutil.copytree(out / "runs" / "lin0" / "rep0", run)
    if not images:
        shutil.rmtree(run / "images")
    if not grid:
        (run / "grid.png").unlink()
    return run


def test_a_run_report_leaves_out_what_needs_several_models(comparison_dir, tmp_path):
    _, out = comparison_dir
    run = _run_copy(out, tmp_path, images=False, grid=False)
    path = write_report(run)
    assert path == run / "report.html"
    text = path.read_text()
    shown = re.findall(r'<section id="([^"]+)">', text)
    assert shown == [s for s in SECTIONS if s not in (*NEEDS_SEVERAL, "transfer")]
    assert not re.search(r"several models|only one model", text, re.I)
    assert "run with <code>save_images=true</code>" in text  # neither image tensors nor grid.png
    assert "genEval run: lin0" in text
    assert expected_figures(text) == text.count("<img ") == 5  # bars, budget, first-fooled, per-class, RRA curves
    assert not EXTERNAL.search(text)


def test_a_run_report_embeds_the_grid_png_the_run_wrote(comparison_dir, tmp_path):
    _, out = comparison_dir
    run = _run_copy(out, tmp_path, images=False, grid=True)
    text, n = render_report(run)
    grid = base64.b64encode((run / "grid.png").read_bytes()).decode("ascii")
    assert 'data-kind="images" alt="grid.png of lin0: originals (top row) over their perturbed images' in text
    assert f'src="data:image/png;base64,{grid}"' in text and "No images saved" not in text
    assert n == expected_figures(text) == text.count("<img ") == 6  # the 4 figures, the RRA curves, the grid


def test_a_run_report_opens_with_its_headline_and_a_table_of_its_scores(comparison_dir, tmp_path):
    _, out = comparison_dir
    res = json.loads((out / "runs" / "lin1" / "rep1" / "results.json").read_text())
    scores = res["scores"]
    text, _ = render_report(out / "runs" / "lin1" / "rep1")
    e = scores["fmr_validated"]
    headline = (
        f"FMR_v {e['value']:.2f} [{e['low']:.2f}, {e['high']:.2f}] on {scores['n']} sources, "
        f"{scores['n_validated']} validated"
    )
    assert f'<p class="headline" id="headline">{headline}</p>' in text
    table = text[text.index('<section id="scores">') : text.index('<section id="budget">')]
    for key, label in (("fmr", "FMR"), ("sa", "SA"), ("pa", "PA")):
        e = scores[key]
        cell = f'{e["value"]:.2f}<span class="ci">[{e["low"]:.2f}, {e["high"]:.2f}]</span>'
        assert f'<td class="l">{label}</td><td class="">{cell}</td>' in table, key
    sa = scores["sa"]
    assert f'<td class="">{sa["k"]} of {sa["n"]}</td>' in table  # the counts a share rests on
    assert "genEval run: lin1" in text and "Run cost" in table


def test_a_report_names_no_path_of_the_machine_that_wrote_it(tmp_path):
    runs = write_hand_runs(tmp_path)
    res_path = runs / "A" / "rep0" / "results.json"
    res = json.loads(res_path.read_text())
    res["components"]["classifier"] = "TorchScriptClassifier(path='/srv/geneval/uploads/3f2a/model.pt', n=10)"
    res["components"]["data"] = "ImageFolder(root='~/data/cifar/test', limit=20)"
    res["warnings"] = ["weights read from /home/me/.cache/geneval/w.safetensors (1/255 of them moved)"]
    res_path.write_text(json.dumps(res))
    text, _ = render_report(runs / "A" / "rep0")
    assert "/srv/geneval" not in text and "~/data" not in text and "/home/me" not in text and str(runs) not in text
    assert "TorchScriptClassifier(path=&#39;…/model.pt&#39;, n=10)" in text and "…/test" in text
    assert "weights read from …/w.safetensors (1/255 of them moved)" in text
    assert '<td class="l">folder</td><td class="">rep0</td>' in text  # the folder by its name


def test_public_text_shortens_absolute_paths_and_nothing_else():
    assert public_text("/a/b/c.pt and ~/x/y and /tmp/") == "…/c.pt and …/y and …/"
    same = "1/255, PA / SA, http://host/a/b, data.subset=random, a/b/c, [0, 1]/2, /root"
    assert public_text(same) == same  # fractions, URLs, relative paths and a single part are left alone


def test_comparison_report_shows_the_hand_computed_numbers(tmp_path):
    comp = aggregate(
        [write_hand_runs(tmp_path)],
        out_dir=tmp_path / "cmp",
        settings=ComparisonSettings(baselines=["A", "B", "C"], n_boot=50),
    )
    text, n = render_report(comp)
    board = text[text.index('<section id="leaderboard">') : text.index('<section id="scores">')]
    compact_table, every = board.split('<details id="every-score">')
    row = r'<td class="l rank">(\d)</td>\s*<td class="l model">(\w) \(baseline\)</td>\s*<td>([\d.]+)<span'
    rows = [("1", "B", "75.00"), ("2", "C", "66.67"), ("3", "A", "62.50")]  # rank, model, FMR
    assert re.findall(row, compact_table) == re.findall(row, every) == rows
    compact, extended = score_columns(comp.rank_by)
    heads = re.findall(r"<th>([^<]+)</th>", compact_table)
    assert heads == [SCORE[k].short or SCORE[k].label for k in compact] + ["ER", "n", "settled rank"]
    assert "<td>+2</td>" in every and "<td>-2</td>" in every  # rank_diff of B and A, behind the toggle
    assert "<th>FMR_v</th>" in board and "<th>oracle clean</th>" in every and "<th>unchanged</th>" in every
    assert all(f"<th>{SCORE[k].short or SCORE[k].label}</th>" in every for k in extended)
    assert '<td class="l">B</td><td class="">0.000</td><td class="">3.00</td>' in board  # run cost
    stab = text[text.index('<section id="stability">') : text.index('<section id="label-free">')]
    assert '<td class="l">0 vs 1</td><td class="">-0.816</td>' in stab  # tau-b of the two repetitions
    assert '<td class="l">C</td><td class="">100.00</td><td class="">33.33</td>' in stab  # FMR per repetition
    t = comp.stability.tau_bootstrap
    cells = f'<td class="">{t.mean:.3f}</td><td class="">{t.median:.3f}</td><td class="">[{t.low:.3f}, {t.high:.3f}]'
    assert cells in stab and t.n_sources == 8
    label_free = text[text.index('<section id="label-free">') : text.index('<section id="differences">')]
    c = comp.row("C")  # the hand-computed measures: test_compare.py::test_hand_made_label_free_measures
    assert f'<td class="l">C</td><td class="">{c.softmax_corr:.3f}</td><td class="">{c.max_pred:.3f}</td>' in label_free
    assert '<td class="l">ATC-MC</td><td class="">+1.000</td><td class="">+1.000</td>' in label_free  # rho, tau_w vs PA
    assert "Spearman rho (SoftmaxCorr, PA) over 3 models:" in label_free
    conf = text[text.index('<section id="confidence">') : text.index('<section id="differences">')]
    assert 'alt="response-rate accuracy curves"' not in conf  # hand-made runs: no results.json confidence
    assert "No run recorded the classifier's confidence" in conf or "not recorded" in conf
    per_class = text[text.index('<section id="per-class">') : text.index('<section id="effective-robustness">')]
    # model B, class dog pooled over both repetitions: SA 4/8 with its Wilson interval
    assert re.search(
        r'<td class="l">B</td><td class="l">dog</td><td class="">8</td><td class="">50.00<span class="ci">'
        r"\[21\.52, 78\.48\]</span>",
        per_class,
    )
    assert (
        n == expected_figures(text) == text.count("<img ") == 6
    )  # with the ER scatter and the per-class difference heatmap; no images


def test_text_from_the_runs_is_escaped(tmp_path):
    runs = write_hand_runs(tmp_path)
    res_path = runs / "A" / "rep0" / "results.json"
    res = json.loads(res_path.read_text())
    res["components"]["data"] = "<script>alert(1)</script>"
    res["warnings"] = ["a <b>bold</b> & risky warning"]
    res_path.write_text(json.dumps(res))
    text, _ = render_report(runs / "A" / "rep0")
    assert "<script" not in text and "<b>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "a &lt;b&gt;bold&lt;/b&gt; &amp; risky" in text


LONG = (
    "source,target,n,pa,pa_low,pa_high,sa,sa_low,sa_high,fmr,self_generated,used_for_filtering,skipped\n"
    "lin0,lin0,16,12.5,5,30,80,60,90,15.6,True,False,False\n"
    "lin1,lin0,16,55,30,70,80,60,90,68.7,False,True,False\n"
    "lin0,lin1,16,40,20,60,70,50,85,57.1,False,False,False\n"
    "lin1,lin1,16,,,,,,,,True,False,True\n"
)


def test_read_transfer_long_and_wide_formats(tmp_path):
    (tmp_path / "long.csv").write_text(LONG)
    sources, targets, mat, marks = read_transfer(tmp_path / "long.csv")
    assert sources == targets == ["lin0", "lin1"]
    assert mat[0].tolist() == [12.5, 40.0] and mat[1, 0] == 55.0 and np.isnan(mat[1, 1])
    assert marks[(0, 0)] == "*" and marks[(1, 0)] == "f" and marks[(0, 1)] == ""
    (tmp_path / "wide.csv").write_text("source,a,b\nx,1,2\ny,3,\n")
    sources, targets, mat, marks = read_transfer(tmp_path / "wide.csv")
    assert (sources, targets, marks) == (["x", "y"], ["a", "b"], {}) and mat[1, 0] == 3.0
    (tmp_path / "bad.csv").write_text("source\n")
    with pytest.raises(ValueError, match=r"holds no transfer matrix"):
        read_transfer(tmp_path / "bad.csv")


def test_transfer_matrix_is_shown_when_transfer_csv_is_next_to_the_input(comparison_dir):
    comp, out = comparison_dir
    (out / "transfer.csv").write_text(LONG)
    try:
        text, n = render_report(out)
    finally:
        (out / "transfer.csv").unlink()
    assert n == expected_count(comp, with_images=True, transfer=True)
    assert "generated against \\ scored on" in text and "12.50*" in text and "55.00f" in text


def test_pa_by_budget_known_answer():
    recs = [SimpleNamespace(validated=True, first_fooled=f, recon_pred=0, label=0) for f in (1, 3, -1, -1)]
    recs.append(SimpleNamespace(validated=False, first_fooled=-1, recon_pred=1, label=0))  # not validated: not counted
    ts, pa = pa_by_budget(recs, 4)
    assert ts.tolist() == [0, 1, 2, 3, 4]
    assert pa.tolist() == [100.0, 75.0, 75.0, 50.0, 50.0]
    assert pa_by_budget([recs[-1]], 4)[1] is None


def test_run_report_errors(tmp_path, capsys):
    from omegaconf import OmegaConf

    with pytest.raises(SystemExit) as exc:
        run_report(OmegaConf.create({"input": "???", "out": None}))
    assert exc.value.code == 2 and "geneval report: error: geneval report needs input=" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_report(OmegaConf.create({"input": str(tmp_path), "out": None}))
    assert "is neither a run directory (results.json) nor a comparison directory" in capsys.readouterr().err


def test_run_report_writes_where_asked(comparison_dir, tmp_path, capsys):
    from omegaconf import OmegaConf

    _, out = comparison_dir
    target = tmp_path / "r" / "x.html"
    assert run_report(OmegaConf.create({"input": str(out), "out": str(target)})) == str(target)
    assert target.is_file() and "report written to" in capsys.readouterr().out


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="no headless browser: install the Debian package `chromium` "
    "(apt-get install -y chromium) to render report.html",
)
def test_report_renders_in_headless_chromium(comparison_dir, tmp_path):
    from PIL import Image

    comp, out = comparison_dir
    url = (out / "report.html").resolve().as_uri()
    base = [
        CHROMIUM,
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    n_img = len(re.findall(r"<img\b", dom.stdout)) + len(re.findall(r"<svg\b", dom.stdout))
    assert n_img == expected_count(comp, with_images=True)
    assert all(f'id="{sid}"' in dom.stdout for sid in SECTIONS)
    shot = tmp_path / "report.png"
    res = subprocess.run(
        [*base, f"--screenshot={shot}", "--window-size=1280,3000", url],
        capture_output=True,
        text=True,
        timeout=180,
    )
    log = dom.stderr + res.stderr
    bad = [line for line in log.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    assert not bad, bad  # no console errors, no blocked (external) requests
    assert shot.is_file() and shot.stat().st_size > 20_000
    with Image.open(shot) as im:
        lo, hi = im.convert("L").getextrema()
        assert im.size == (1280, 3000) and hi - lo > 100  # not a blank page


def test_grids_state_the_one_size_originals_and_perturbed_images_are_shown_at():
    from genEval.reports.figures import shown_at_one_size

    assert (
        shown_at_one_size((32, 32), (64, 64))
        == "originals (32x32 px) resized to the perturbed images' size (64x64 px) to be shown side by side"
    )
    assert shown_at_one_size((16, 16), (16, 16)) == "originals and perturbed images at their size, 16x16 px"


def _drawn(monkeypatch) -> list:
    """Every matplotlib figure the report module draws, as (alt, figure)."""
    from genEval.reports import figures

    seen, png = [], figures._png
    monkeypatch.setattr(figures, "_png", lambda fig, alt, *a, **k: (seen.append((alt, fig)), png(fig, alt, *a, **k))[1])
    return seen


def _ticks(axis) -> list[float]:
    lo, hi = sorted(axis.get_view_interval())
    return [float(t) for t in axis.get_ticklocs() if lo - 1e-9 <= t <= hi + 1e-9]


def test_step_and_count_axes_have_whole_ticks_and_fmr_has_its_own_axis(comparison_dir, monkeypatch):
    _, out = comparison_dir
    seen = _drawn(monkeypatch)
    render_report(out / "runs" / "lin0" / "rep0")  # budget 4: matplotlib's own ticks would be 0, 0.5, 1, ...
    fig = dict(seen)
    (budget,) = fig["PA against budget"].axes
    first = fig["histogram of first-fooled steps"].axes[0]
    for axis in (budget.xaxis, first.xaxis, first.yaxis):
        ticks = _ticks(axis)
        assert len(ticks) >= 2 and all(t == int(t) for t in ticks), ticks
    acc, ratio = next(f for alt, f in seen if alt.startswith("bar charts")).axes
    assert [t.get_text() for t in acc.get_xticklabels()] == ["SA", "SA_v", "PA"]
    assert [t.get_text() for t in ratio.get_xticklabels()] == ["FMR", "FMR_v"]
    assert acc.get_ylabel().startswith("accuracy") and "FMR" in ratio.get_ylabel() and acc.get_ylim() == (0, 105)


@pytest.mark.skipif(CHROMIUM is None, reason="no headless browser: install the Debian package `chromium`")
def test_reports_fit_1280_px_with_a_toggle_for_every_score_and_a_sticky_model_column(comparison_dir, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="the browser test drives Chromium with playwright")
    from tests.support.pages import CHROMIUM_FLAGS, TABLE_LAYOUT_JS

    comp, out = comparison_dir
    run = _run_copy(out, tmp_path, images=False, grid=True)
    write_report(run)
    requests: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            page.on("request", lambda r: requests.append(r.url) if not r.url.startswith(("file:", "data:")) else 0)
            for name, path, table in (("run", run, "table.scores"), ("comparison", out, "#main-table")):
                page.goto((path / "report.html").as_uri())
                page.screenshot(path=str(tmp_path / f"report-{name}.png"), full_page=True)
                lay = page.evaluate(TABLE_LAYOUT_JS, table)
                assert lay["container_scroll"] <= lay["container_client"], (name, lay)
                assert lay["page_scroll"] <= lay["page_client"] and lay["interval_lines"] == 1, (name, lay)
                assert page.evaluate("Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
            assert page.locator("#every-score table").is_hidden()
            page.click("#every-score summary")
            every = page.locator("#every-score .scroll")
            assert every.evaluate("b => b.scrollWidth > b.clientWidth")  # every score: wider than the page ...
            assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
            model = page.locator("#every-score td.model").first
            before = model.bounding_box()["x"]
            every.evaluate("b => { b.scrollLeft = 500; }")
            assert every.evaluate("b => b.scrollLeft") > 0
            assert model.bounding_box()["x"] == pytest.approx(before, abs=1)  # ... and its model column stays put
        finally:
            browser.close()
    assert not requests, requests
