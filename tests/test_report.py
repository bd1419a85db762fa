"""report.html: every section, offline (no external src/href), the figure count, and a headless browser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hand_runs import write_hand_runs
from toys import LinearClassifier, ListDataset, ModelOracle, SigmoidGenerator

from genEval.commands.report import run_report
from genEval.comparisons.aggregate import aggregate, compare
from genEval.comparisons.settings import ComparisonSettings
from genEval.reports.figures import pa_by_budget
from genEval.reports.report import SECTIONS, expected_figures, read_transfer, render_report, write_report
from genEval.runs.recording import RunOutput
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig

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
    comp = compare(
        {m: LinearClassifier(64, 3, seed=i) for i, m in enumerate(MODELS)},
        ListDataset(x, y, ["a", "b", "c"]),
        SigmoidGenerator(),
        ModelOracle(oracle_model),
        SearchConfig(budget=4, step_size=0.05, update="sign"),
        repetitions=2,
        seeds=[1, 2],
        out_dir=out,
        progress=False,
        execution=Execution(batch_size=8),
        settings=ComparisonSettings(n_boot=100),
        output=RunOutput(save_images=True),
    )
    write_report(comp)
    return comp, out


def expected_count(comp, with_images: bool, transfer: bool = False, rra: bool = True) -> int:
    """bars + PA-vs-budget + first-fooled + per-class (+ ER scatter) (+ the response-rate accuracy curves of runs
    that recorded their confidence) (+ transfer) (+ a grid per model)."""
    n = 4 + (comp.effective_robustness.w is not None) + transfer + rra
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


def test_single_run_report_and_missing_images(comparison_dir, tmp_path):
    _, out = comparison_dir
    run = tmp_path / "run"
    shutil.copytree(out / "runs" / "lin0" / "rep0", run)
    shutil.rmtree(run / "images")
    path = write_report(run)
    assert path == run / "report.html"
    text = path.read_text()
    for sid in SECTIONS:
        assert f'<section id="{sid}">' in text
    assert "run with <code>save_images=true</code>" in text
    assert "genEval run: lin0" in text and "needs several models" in text
    assert expected_figures(text) == text.count("<img ") == 5  # bars, budget, first-fooled, per-class, RRA curves
    assert not EXTERNAL.search(text)


def test_single_run_leaderboard_shows_the_runs_own_scores(comparison_dir, tmp_path):
    _, out = comparison_dir
    scores = json.loads((out / "runs" / "lin1" / "rep1" / "results.json").read_text())["scores"]
    text, _ = render_report(out / "runs" / "lin1" / "rep1")
    board = text[text.index('<section id="leaderboard">') : text.index('<section id="scores">')]
    for key in ("fmr", "sa", "pa"):
        e = scores[key]
        assert f'{e["value"]:.2f}<span class="ci">[{e["low"]:.2f}, {e["high"]:.2f}]</span>' in board
    assert "genEval run: lin1" in text and f'<td class="">{scores["n"]}</td>' in text


def test_comparison_report_shows_the_hand_computed_numbers(tmp_path):
    comp = aggregate(
        [write_hand_runs(tmp_path)],
        out_dir=tmp_path / "cmp",
        settings=ComparisonSettings(baselines=["A", "B", "C"], n_boot=50),
    )
    text, n = render_report(comp)
    board = text[text.index('<section id="leaderboard">') : text.index('<section id="scores">')]
    rows = re.findall(r'<td class="l">(\d)</td>\s*<td class="l">(\w) \(baseline\)</td>\s*<td>([\d.]+)<span', board)
    assert rows == [("1", "B", "75.00"), ("2", "C", "66.67"), ("3", "A", "62.50")]  # rank, model, FMR
    assert "<td>+2</td>" in board and "<td>-2</td>" in board  # rank_diff of B and A
    assert "<th>FMR_v</th>" in board and "<th>oracle clean</th>" in board and "<th>unchanged</th>" in board
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
    assert n == expected_figures(text) == text.count("<img ") == 5  # with the ER scatter; no images were saved


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
