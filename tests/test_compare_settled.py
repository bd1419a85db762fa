"""``stop=settled`` (issue 33): comparisons in rounds of fresh paired sources until every adjacent pair is ordered or
equivalent, or ``max_sources``; tied ranks, the sources-needed estimate, resume, and re-ranking stored rounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from compare_toys import ConstantClass, LabelPool, PixelReader
from toys import AcceptAllOracle, SigmoidGenerator

from genEval.comparisons.aggregate import aggregate, compare
from genEval.comparisons.leaderboard import Comparison
from genEval.comparisons.rounds import round_seed
from genEval.comparisons.settings import ComparisonSettings, StopRule
from genEval.reports.report import write_report
from genEval.runs.rundir import read_results, read_samples
from genEval.search.perturb import SearchConfig

ROOT = Path(__file__).resolve().parents[1]
SEARCH = SearchConfig(budget=1, step_size=0.5, update="sign", start_noise=0.0)


def settled_compare(models: dict, out: Path, rule: StopRule, seed: int | None = 7, **kw) -> Comparison:
    settings = ComparisonSettings(n_boot=20, rank_by="sa", sequential=rule)
    data = LabelPool(pool=900, limit=rule.round_sources)
    return compare(
        models, data, SigmoidGenerator(), AcceptAllOracle(), SEARCH, out_dir=out, seeds=seed, settings=settings,
        progress=False, **kw,
    )  # fmt: skip


def _sources(out: Path, model: str, r: int) -> set[str]:
    return {rec.source_id for rec in read_samples(out / "runs" / model / f"rep{r}")}


def test_stops_after_the_round_that_orders_every_adjacent_pair(tmp_path):
    rule = StopRule(stop="settled", round_sources=60, max_sources=600, margin=1.0)
    comp = settled_compare({"reader": PixelReader(), "always0": ConstantClass(0)}, tmp_path, rule)
    s = comp.settled
    assert s.done and s.rounds == 1 and s.sources == 60 and "every adjacent pair settled after 1" in s.stopped
    assert [p.verdict for p in s.pairs] == ["ordered"] and s.pairs[0].a == "reader" and s.pairs[0].low > 0
    assert s.tied_ranks == {"reader": "1", "always0": "2"}
    assert not (tmp_path / "runs" / "reader" / "rep1").exists()  # no round after the settled look
    assert json.loads((tmp_path / "rounds.json").read_text())["seed"] == 7
    res = read_results(tmp_path / "runs" / "always0" / "rep0")
    assert res.config.comparison.seed == round_seed(7, 0) and res.config.comparison.sequential["stop"] == "settled"
    assert _sources(tmp_path, "reader", 0) == _sources(tmp_path, "always0", 0)  # paired
    on_disk = Comparison.load(tmp_path)
    assert on_disk.settled == s and on_disk.row("reader").tied_rank == "1"
    md = (tmp_path / "leaderboard.md").read_text()
    assert "settled ranking by SA" in md and "reader vs always0: SA difference" in md
    html = Path(write_report(comp)).read_text()
    assert 'id="settled"' in html and "reader vs always0: SA difference" in html and "<td>2</td></tr>" in html


def test_an_open_pair_runs_to_max_sources_with_fresh_rounds_and_an_estimate(tmp_path):
    rule = StopRule(stop="settled", round_sources=40, max_sources=120, margin=0.0)
    comp = settled_compare({"always0": ConstantClass(0), "always1": ConstantClass(1)}, tmp_path, rule)
    s = comp.settled
    assert s.rounds == 3 and s.sources == 120 and not s.done
    assert "max_sources=120 reached with 1 pair(s) still open" in s.stopped
    (pair,) = s.pairs
    assert pair.verdict == "open" and pair.low < 0 < pair.high
    assert pair.more_kind == "order" and (pair.more_sources is None or pair.more_sources > 0)
    assert s.tied_ranks == {"always0": "1–2", "always1": "1–2"} or s.tied_ranks == {"always1": "1–2", "always0": "1–2"}
    rounds = [_sources(tmp_path, "always0", r) for r in range(3)]
    assert rounds[0] != rounds[1] != rounds[2]  # fresh sources per round
    summary = comp.summary()
    assert "1 of 1 adjacent pairs still open" in summary and "1–2" in summary


def test_a_stopped_comparison_resumes_to_the_verdicts_of_an_uninterrupted_one(tmp_path):
    rule = StopRule(stop="settled", round_sources=40, max_sources=120, margin=0.0)
    full = settled_compare({"always0": ConstantClass(0), "always1": ConstantClass(1)}, tmp_path / "full", rule)

    builds = {"n": 0}

    def flaky() -> ConstantClass:  # its 2nd build is round 1, after always0 finished that round: stop mid-round
        builds["n"] += 1
        if builds["n"] == 2:
            raise KeyboardInterrupt
        return ConstantClass(1)

    out = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        settled_compare({"always0": lambda: ConstantClass(0), "always1": flaky}, out, rule)
    assert (out / "runs" / "always0" / "rep1" / "results.json").exists()
    assert not (out / "runs" / "always1" / "rep1").exists()
    resumed = settled_compare({"always0": ConstantClass(0), "always1": ConstantClass(1)}, out, rule, seed=None)
    assert resumed.settled.pairs == full.settled.pairs and resumed.settled.rounds == 3
    assert resumed.settings.repetition_seeds == full.settings.repetition_seeds
    with pytest.raises(ValueError, match="holds a stop=settled comparison with seed 7, not seed=8"):
        settled_compare({"always0": ConstantClass(0), "always1": ConstantClass(1)}, out, rule, seed=8)


def test_re_ranking_stored_rounds_gives_the_same_verdicts(tmp_path):
    rule = StopRule(stop="settled", round_sources=40, max_sources=80, margin=0.0)
    comp = settled_compare({"reader": PixelReader(), "always0": ConstantClass(0)}, tmp_path, rule)
    again = aggregate([tmp_path / "runs"], ComparisonSettings(n_boot=20, rank_by="sa"))
    assert again.settled.pairs == comp.settled.pairs and again.settled.rule == comp.settled.rule
    wider = aggregate([tmp_path / "runs"], ComparisonSettings(rank_by="sa", sequential=StopRule(confidence=0.999)))
    assert wider.settled.rule["confidence"] == 0.999 and wider.settled.pairs[0].low < comp.settled.pairs[0].low


def test_settled_refuses_what_it_cannot_run(tmp_path):
    rule = StopRule(stop="settled", round_sources=40, max_sources=80)
    models = {"reader": PixelReader(), "always0": ConstantClass(0)}
    with pytest.raises(ValueError, match=r"seeds=\[1, 2\] fixes the repetitions of stop=fixed"):
        settled_compare(models, tmp_path, rule, seed=[1, 2])
    with pytest.raises(ValueError, match="stop must be fixed | settled, got 'sometimes'"):
        StopRule(stop="sometimes")
    with pytest.raises(ValueError, match="max_sources must be >= round_sources"):
        StopRule(round_sources=200, max_sources=100)


def test_cli_settled_prints_the_verdicts(tmp_path, digits_cache):
    """The command line: stop=settled round_sources=... max_sources=... on the offline digits models (trained once
    per session by the digits_cache fixture; the identity generator keeps it quick)."""
    out = tmp_path / "cmp"
    proc = subprocess.run(
        [
            sys.executable, "-m", "genEval.cli", "compare", "stop=settled", "round_sources=30", "max_sources=60",
            "classifiers=[digits_cnn,digits_mlp]", "allow_self_judging=true", "generator=identity",
            "search.budget=1", "seed=1", "device=cpu", f"out_dir={out}", "report=false",
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "GENEVAL_CACHE": str(digits_cache)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "settled ranking by FMR_v" in proc.stdout and "digits_cnn vs digits_mlp" in proc.stdout
    comp = Comparison.load(out)
    assert comp.settled.sources in (30, 60) and comp.settled.rule["round_sources"] == 30
    assert len(read_samples(out / "runs" / "digits_cnn" / "rep0")) == 30  # data.limit = round_sources
