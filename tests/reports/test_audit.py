"""The oracle audit (genEval/reports/audit.py, `geneval audit`): the page, its draw, the answers, and a real browser."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import re
import shutil
import subprocess
import sys
from html import unescape
from pathlib import Path
from statistics import NormalDist
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import DictConfig, OmegaConf
from PIL import Image
from torch import nn

from genEval import evaluate
from genEval.commands.audit import run_audit
from genEval.reports.audit import agreement, draw_validated, record_audit, write_audit
from genEval.runs import RunDir, read_samples
from genEval.runs.recording import RunOutput
from genEval.scores.run_scores import Scoring
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from tests.support.assets import ROOT
from tests.support.service import CHROMIUM_FLAGS
from tests.support.toys import LinearClassifier, ListDataset, ModelOracle, SigmoidGenerator

CHROMIUM = next((p for p in (shutil.which("chromium"), "/usr/bin/chromium") if p and Path(p).exists()), None)
EXTERNAL = re.compile(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", re.IGNORECASE)
SEARCH = SearchConfig(budget=4, step_size=0.05, update="sign")
CLASSES = ["ant", "bee", "cat"]


def toy_run(
    out: Path,
    x: torch.Tensor,
    classifier: nn.Module,
    oracle_model: nn.Module,
    generator: nn.Module,
    save_images: bool = True,
) -> Path:
    """A finished run whose oracle is a fixed linear model; labels are that model's own predictions, so every
    start check passes and samples are validated until a step changes the oracle's class."""
    with torch.no_grad():
        y = oracle_model(x).argmax(1).tolist()
    evaluate(
        classifier=classifier,
        data=ListDataset(x, y, CLASSES),
        generator=generator,
        oracle=ModelOracle(oracle_model),
        search=SEARCH,
        seed=1,
        execution=Execution(batch_size=16),
        output=RunOutput(out, save_images=save_images, progress=False),
        scoring=Scoring(n_boot=20),
    )
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    x = torch.rand(40, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    return toy_run(
        tmp_path_factory.mktemp("audit") / "run",
        x,
        LinearClassifier(192, 3, seed=0),
        LinearClassifier(192, 3, seed=7),
        SigmoidGenerator(),
    )


@pytest.fixture
def audited(run, tmp_path) -> Path:
    """A copy of the run with a 10-pair audit page (seed 3), so each test may change its results.json."""
    d = tmp_path / "run"
    shutil.copytree(run, d)
    write_audit(d, 10, seed=3)
    return d


def answers_file(run_dir: Path, path: Path, values: list[str], **edit) -> Path:
    """An answers file as the page writes it, answering the drawn pairs in order with ``values``."""
    drawn = json.loads((run_dir / "audit_samples.json").read_text())
    ids = drawn["sample_ids"]
    doc = {
        "kind": "geneval-oracle-audit-answers",
        "schema_version": 1,
        "run_id": drawn["run_id"],
        "run_dir": drawn["run_dir"],
        "seed": drawn["seed"],
        "n": drawn["n"],
        "sample_ids": ids,
        "answers": dict(zip(ids, values)),
        "auditor": "tester",
        "saved": "2026-01-01T00:00:00.000Z",
        **edit,
    }
    path.write_text(json.dumps(doc))
    return path


def wilson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval from its formula (independent of scipy), in percent."""
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100 * (centre - half), 100 * (centre + half)


def page_pairs(html: str) -> list[dict]:
    """Each pair section of the page: its sample id and its two images decoded from the inline PNGs."""
    out = []
    for sid, body in re.findall(
        r'<section class="pair" id="pair-\d+" data-index="\d+" data-sid="([^"]+)"'
        r"(.*?)</section>",
        html,
        re.S,
    ):
        pngs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', body)
        imgs = [np.asarray(Image.open(io.BytesIO(base64.b64decode(b)))) for b in pngs]
        sizes = re.findall(r'width="(\d+)" height="(\d+)"', body)
        out.append({"sid": sid, "images": imgs, "sizes": sizes, "body": body})
    return out


# ----------------------------------------------------------------------------------------------- the page
def test_page_shows_n_validated_pairs_offline_with_their_images(audited):
    html = (audited / "audit.html").read_text()
    listed = json.loads((audited / "audit_samples.json").read_text())
    pairs = page_pairs(html)
    assert len(pairs) == 10 == listed["n"] and html.count("<img ") == 20
    assert '<meta name="geneval-audit-pairs" content="10">' in html
    assert [p["sid"] for p in pairs] == listed["sample_ids"] and listed["seed"] == 3
    records = {r.source_id: r for r in read_samples(audited)}
    assert all(records[p["sid"]].validated for p in pairs)
    assert len(set(listed["sample_ids"])) == 10
    # no external resource of any kind; the images are the saved uint8 tensors of those very samples
    assert not EXTERNAL.search(html) and "http://" not in html and "https://" not in html
    assert all(src.startswith("data:image/png;base64,") for src in re.findall(r'src="([^"]*)"', html))
    saved = RunDir(audited).tensors("images")
    row = {sid: i for i, sid in enumerate(saved["source_ids"])}
    for p in pairs:
        i = row[p["sid"]]
        assert np.array_equal(p["images"][0], saved["original"][i].permute(1, 2, 0).numpy())
        assert np.array_equal(p["images"][1], saved["perturbed"][i].permute(1, 2, 0).numpy())
        assert p["sizes"] == [("192", "192"), ("192", "192")]  # one stated size for both
        assert f"class <b>{CLASSES[records[p['sid']].label]}</b>" in p["body"]
    assert "width of <b>192 CSS pixels</b>" in html and "original 8×8, perturbed 8×8" in html


def test_the_csp_forbids_requests_and_allows_only_the_inline_script(audited):
    html = (audited / "audit.html").read_text()
    csp = unescape(re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html).group(1))
    assert "default-src 'none'" in csp and "img-src data:" in csp
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    assert len(scripts) == 1  # plus the JSON data block, which is not executed
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp


def test_draw_is_seeded_validated_only_and_a_prefix():
    records = [SimpleNamespace(source_id=f"s{i}", validated=i % 3 != 0) for i in range(30)]
    a, b = draw_validated(records, 8, seed=5), draw_validated(records, 8, seed=5)
    assert a == b and len(a) == 8 and all(r.validated for r in a)
    assert [r.source_id for r in draw_validated(records, 8, seed=6)] != [r.source_id for r in a]
    every = draw_validated(records, 100, seed=5)  # more asked than validated: all 20 of them
    assert len(every) == 20 and every[:8] == a
    with pytest.raises(ValueError, match=r"n=0: an audit needs at least one pair"):
        draw_validated(records, 0, seed=5)
    with pytest.raises(ValueError, match=r"no validated samples \(VR = 0\)"):
        draw_validated([SimpleNamespace(source_id="s0", validated=False)], 5, seed=5)


class UpsampleGenerator(nn.Module):
    """Latents at twice the image size: D(z) is 16 x 16 for 8 x 8 originals (as TAEF2 gives 64 px for 32 px)."""

    name = "upsample"
    downsample = 1

    def encode(self, x):
        return torch.logit(nn.functional.interpolate(x, scale_factor=2, mode="nearest").clamp(1e-4, 1 - 1e-4))

    def decode(self, z):
        return torch.sigmoid(z)


class Pooled(nn.Module):
    """A linear model that owns its resize (any size -> 8 x 8), like every classifier here."""

    def __init__(self, seed: int):
        super().__init__()
        self.lin, self.name = LinearClassifier(64, 3, seed=seed), f"pooled{seed}"

    def forward(self, x):
        return self.lin(nn.functional.adaptive_avg_pool2d(x, 8))


def test_grey_images_of_different_sizes_are_shown_at_one_width(tmp_path):
    x = torch.rand(12, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    d = toy_run(tmp_path / "run", x, Pooled(0), Pooled(7), UpsampleGenerator())
    files = write_audit(d, 4, seed=0, width=96, out=tmp_path / "page" / "check.html")
    assert files.samples == tmp_path / "page" / "check_samples.json" and files.samples.is_file()
    html = files.page.read_text()
    pairs = page_pairs(html)
    assert len(pairs) == len(files.sheet.pairs) == 4
    for p in pairs:
        assert p["images"][0].shape == (8, 8) and p["images"][1].shape == (16, 16)  # greyscale, native sizes
        assert p["sizes"] == [("96", "96"), ("96", "96")]
    assert "original 8×8, perturbed 16×16" in html and html.count('class="px"') == 8
    assert "tested model (" not in html  # predictions are hidden unless asked for (they could prime the person)
    shown = write_audit(d, 4, seed=0, show_predictions=True).page.read_text()
    for p, meta in zip(page_pairs(shown), files.sheet.sample_list()["pairs"]):
        said = f"<b>{meta['clean_pred']}</b> on the original,\n<b>{meta['final_pred']}</b> on the perturbed"
        assert said in p["body"]


def test_page_errors_name_the_fix(run, tmp_path):
    x = torch.rand(6, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    bare = toy_run(
        tmp_path / "bare",
        x,
        LinearClassifier(192, 3, seed=0),
        LinearClassifier(192, 3, seed=7),
        SigmoidGenerator(),
        save_images=False,
    )
    with pytest.raises(FileNotFoundError, match=r"saved no images .*save_images=true"):
        write_audit(bare, 3, seed=0)
    assert not (bare / "audit.html").exists() and not (bare / "audit_samples.json").exists()
    with pytest.raises(ValueError, match=r"out=.*page.txt must name an .html file"):
        write_audit(run, 3, seed=0, out=tmp_path / "page.txt")
    with pytest.raises(ValueError, match=r"width=4 is outside 16..2048"):
        write_audit(run, 3, seed=0, width=4)


# ----------------------------------------------------------------------------------------------- the answers
def test_agreement_is_same_over_judged_with_a_wilson_interval():
    e = agreement({"same": 7, "changed": 2, "unsure": 1})
    low, high = wilson(7, 9)
    assert (e.k, e.n, e.method) == (7, 9, "wilson")
    assert e.value == pytest.approx(100 * 7 / 9) and e.low == pytest.approx(low) and e.high == pytest.approx(high)
    assert (round(e.low, 2), round(e.high, 2)) == (45.26, 93.68)
    none = agreement({"same": 0, "changed": 0, "unsure": 4})
    assert none.value is None and none.n == 0 and "no 'same' or 'changed' answer" in none.reason


def test_record_audit_stores_a_self_describing_entry_and_keeps_the_rest(audited, tmp_path):
    before = json.loads((audited / "results.json").read_text())
    path = answers_file(audited, tmp_path / "answers.json", ["same"] * 7 + ["changed"] * 2 + ["unsure"])
    result = record_audit(audited, path)
    after = json.loads((audited / "results.json").read_text())
    entry = after.pop("oracle_audit")
    assert after == before  # every other key kept as it was
    drawn = json.loads((audited / "audit_samples.json").read_text())["sample_ids"]
    low, high = wilson(7, 9)
    assert entry["value"] == pytest.approx(700 / 9) and (entry["n"], entry["k"]) == (9, 7)
    assert entry["low"] == pytest.approx(low) and entry["high"] == pytest.approx(high)
    assert entry["method"] == "wilson" and entry["level"] == 0.95
    assert "among the pairs not marked 'unsure'" in entry["definition"]
    assert entry["counts"] == {"same": 7, "changed": 2, "unsure": 1, "unanswered": 0} and entry["pairs"] == 10
    assert entry["answers_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert entry["changed_ids"] == drawn[7:9] and entry["unsure_ids"] == drawn[9:]
    assert entry["seed"] == 3 and entry["auditor"] == "tester" and re.match(r"\d{4}-\d\d-\d\dT", entry["date"])
    assert result.to_dict() == entry
    # a second audit replaces the first; unanswered pairs are counted, not judged
    record_audit(audited, answers_file(audited, tmp_path / "again.json", ["changed", "same"]))
    again = json.loads((audited / "results.json").read_text())["oracle_audit"]
    assert (again["k"], again["n"], again["counts"]["unanswered"]) == (1, 2, 8)


def _other_run(run: Path, tmp: Path) -> str:
    x = torch.rand(40, 3, 8, 8, generator=torch.Generator().manual_seed(9))
    other = toy_run(
        tmp / "other", x, LinearClassifier(192, 3, seed=0), LinearClassifier(192, 3, seed=7), SigmoidGenerator()
    )
    return json.loads(write_audit(other, 10, seed=3).samples.read_text())["run_id"]


BAD = {
    "another run": (
        lambda d, ids, tmp: {"run_id": _other_run(d, tmp)},
        r"belongs to run [0-9a-f]{12} .* but .* is run",
    ),
    "unknown id": (
        lambda d, ids, tmp: {"answers": {ids[0]: "same", "toy/9999": "changed"}},
        r"sample ids that are not samples of run .*\['toy/9999'\]",
    ),
    "bad value": (
        lambda d, ids, tmp: {"answers": {ids[0]: "maybe"}},
        r"the answer 'maybe' for sample .* is not one of same, changed, unsure",
    ),
    "edited list": (lambda d, ids, tmp: {"sample_ids": ids[::-1]}, r"sample list is not the draw of seed 3"),
    "not drawn": (
        lambda d, ids, tmp: {"answers": {next(f"toy/{i:04d}" for i in range(40) if f"toy/{i:04d}" not in ids): "same"}},
        r"answers samples that were not drawn for this audit \(seed 3\)",
    ),
    "no kind": (lambda d, ids, tmp: {"kind": "something"}, r"is not a genEval audit answers file"),
    "no seed": (lambda d, ids, tmp: {"seed": "3"}, r"lacks 'seed' \(or it is not a int\)"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_answers_are_refused_with_the_reason_and_nothing_written(audited, tmp_path, case):
    edit, msg = BAD[case]
    ids = json.loads((audited / "audit_samples.json").read_text())["sample_ids"]
    path = answers_file(audited, tmp_path / "answers.json", ["same"] * 10, **edit(audited, ids, tmp_path))
    before = (audited / "results.json").read_bytes()
    with pytest.raises(ValueError, match=msg):
        record_audit(audited, path)
    assert (audited / "results.json").read_bytes() == before


def test_answers_that_are_not_json_or_missing(audited, tmp_path):
    (tmp_path / "a.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"is not JSON .*pass the file the audit page downloaded"):
        record_audit(audited, tmp_path / "a.json")
    with pytest.raises(FileNotFoundError, match=r"answers file .*nope.json' does not exist"):
        record_audit(audited, tmp_path / "nope.json")


def test_command_line_writes_the_page_scores_answers_and_exits_2_on_bad_ones(run, tmp_path, capsys):
    d = tmp_path / "run"
    shutil.copytree(run, d)
    made = subprocess.run(
        [sys.executable, "-m", "genEval.cli", "audit", f"run={d}", "n=5", "seed=11"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )  # the command is registered in cli.py
    assert made.returncode == 0, made.stderr
    assert f"audit page with 5 of 40 validated pairs (seed 11) written to {d / 'audit.html'}" in made.stdout
    assert len(page_pairs((d / "audit.html").read_text())) == 5

    def cfg(answers: Path) -> DictConfig:
        return OmegaConf.merge(OmegaConf.load(ROOT / "conf" / "audit.yaml"), {"run": str(d), "answers": str(answers)})

    path = answers_file(d, tmp_path / "answers.json", ["same", "same", "changed", "unsure", "same"])
    entry = run_audit(cfg(path))
    out = capsys.readouterr().out
    assert "agreement with the oracle  75.00 [" in out and "same 3  changed 1  unsure 1  unanswered 0" in out
    assert json.loads((d / "results.json").read_text())["oracle_audit"] == entry and entry["k"] == 3
    with pytest.raises(SystemExit) as stop:
        run_audit(cfg(answers_file(d, tmp_path / "bad.json", ["nope"])))
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("geneval audit: error: answers file") and "'nope'" in err
    with pytest.raises(SystemExit):
        run_audit(OmegaConf.load(ROOT / "conf" / "audit.yaml"))
    assert "geneval audit needs run=..." in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------- a real browser
@pytest.mark.skipif(
    CHROMIUM is None,
    reason="no headless browser: install the Debian package `chromium` "
    "(apt-get install -y chromium) to render audit.html",
)
def test_audit_page_in_headless_chromium_records_a_click(audited, tmp_path):
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="the browser test drives Chromium with playwright (pip install '.[test]')"
    )
    ids = json.loads((audited / "audit_samples.json").read_text())["sample_ids"]
    events: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=CHROMIUM_FLAGS,
        )
        try:
            page = browser.new_context(accept_downloads=True, viewport={"width": 1100, "height": 1300}).new_page()
            page.on("console", lambda m: events.append(f"console {m.type}: {m.text}"))
            page.on("pageerror", lambda e: events.append(f"error: {e}"))
            page.on("request", lambda r: events.append(f"request {r.url}") if not r.url.startswith("file:") else None)
            page.goto((audited / "audit.html").as_uri())
            assert page.locator("section.pair").count() == 10
            assert page.evaluate("Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
            assert page.locator("#pair-0.current").count() == 1  # the script ran (the CSP let it)
            page.click("#pair-2 label.changed")
            assert page.is_checked('#pair-2 input[value="changed"]')
            assert page.evaluate("window.genevalAudit.payload().answers") == {ids[2]: "changed"}
            assert page.text_content("#progress") == "1 / 10 answered"
            page.keyboard.press("3")  # the clicked pair is the current one: now unsure, then on to the next open one
            page.keyboard.press("1")
            assert page.evaluate("window.genevalAudit.payload().answers") == {ids[2]: "unsure", ids[3]: "same"}
            page.click("#pair-2 label.changed")
            with page.expect_download() as download:
                page.click("#download")
            saved = tmp_path / download.value.suggested_filename
            download.value.save_as(saved)
            page.screenshot(path=tmp_path / "audit.png")
        finally:
            browser.close()
    assert not events, events  # no console message, no script error, no request beyond the page itself
    doc = json.loads(saved.read_text())
    assert doc["answers"] == {ids[2]: "changed", ids[3]: "same"} and doc["sample_ids"] == ids and doc["seed"] == 3
    result = record_audit(audited, saved)  # the downloaded file is what `geneval audit answers=` takes
    assert (result.agreement.k, result.agreement.n, result.counts["unanswered"]) == (1, 2, 8)
    with Image.open(tmp_path / "audit.png") as im:
        lo, hi = im.convert("L").getextrema()
        assert im.size == (1100, 1300) and hi - lo > 100  # not a blank page
