"""``stop=settled`` (issues 33 and 40): comparisons in rounds of fresh paired sources, each round only for the models
of open adjacent pairs, until every adjacent pair is settled or ``max_sources``; tied ranks, the forecast, resume,
the leaderboard guarantee, and re-ranks that keep the rule the rounds ran with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from genEval.campaigns import Design, EvaluationPlan, Setup, run_campaign
from genEval.comparisons.aggregate import aggregate
from genEval.comparisons.leaderboard import Comparison
from genEval.comparisons.settings import ComparisonSettings, StopRule
from genEval.comparisons.settled import round_seed
from genEval.reports.report import write_report
from genEval.runs.rundir import read_results, read_samples
from genEval.search.perturb import SearchConfig
from tests.support.assets import ROOT
from tests.support.comparisons import ConstantClass, LabelPool, PixelReader
from tests.support.toys import AcceptAllOracle, SigmoidGenerator

SEARCH = SearchConfig(budget=1, step_size=0.5, update="sign", start_noise=0.0)


def settled_compare(models: dict, out: Path, rule: StopRule, seed=7) -> Comparison:
    settings = ComparisonSettings(n_boot=20, rank_by="sa", sequential=rule)
    data = LabelPool(pool=900, limit=rule.round_sources)
    design = Design(models, out, seeds=seed, settings=settings)
    return run_campaign(
        EvaluationPlan(SEARCH, progress=False), design, Setup(data, SigmoidGenerator(), AcceptAllOracle())
    )


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


def test_an_open_pair_runs_to_max_sources_with_fresh_rounds_and_a_forecast(tmp_path):
    rule = StopRule(stop="settled", round_sources=40, max_sources=120, margin=0.0, resolution=0.0)
    comp = settled_compare({"always0": ConstantClass(0), "always1": ConstantClass(1)}, tmp_path, rule)
    s = comp.settled
    assert s.rounds == 3 and s.sources == 120 and not s.done
    assert "max_sources=120 reached with 1 pair(s) still open" in s.stopped
    (pair,) = s.pairs
    assert pair.verdict == "open" and pair.low < 0 < pair.high and pair.low <= pair.value <= pair.high
    assert pair.p_low is None and "max_sources=120 reached" in pair.reason  # nothing left to forecast
    assert set(s.tied_ranks.values()) == {"1–2"}
    rounds = [_sources(tmp_path, "always0", r) for r in range(3)]
    assert rounds[0] != rounds[1] != rounds[2]  # fresh sources per round
    summary = comp.summary()
    assert "1 of 1 adjacent pairs still open" in summary and "1–2" in summary and "per pair at 95%" in summary
    after_one = aggregate([tmp_path / "runs" / m / "rep0" for m in ("always0", "always1")],
                          ComparisonSettings(n_boot=20, rank_by="sa"))  # fmt: skip
    first = after_one.settled.pairs[0]  # after the first round: the chance to be settled by max_sources
    assert first.verdict == "open" and 0 <= first.p_low <= first.p_high <= 1
    assert "likely to be settled by 120" in first.describe("SA")


def test_only_the_models_of_open_pairs_run_the_next_round(tmp_path):
    """The reader is ordered above both constant models after round 0; only the two constant models, whose pair stays
    open, run rounds 1 and 2 (issue 40, item 4): fewer model-sources than every model in every round."""
    rule = StopRule(stop="settled", round_sources=40, max_sources=120, margin=0.0, resolution=0.0)
    models = {"reader": PixelReader(), "always0": ConstantClass(0), "always1": ConstantClass(1)}
    s = settled_compare(models, tmp_path, rule).settled
    assert s.order[0] == "reader" and s.pairs[0].verdict == "ordered" and s.pairs[1].verdict == "open"
    assert s.model_sources == {"reader": 40, "always0": 120, "always1": 120}
    assert not (tmp_path / "runs" / "reader" / "rep1").exists() and (tmp_path / "runs" / "always1" / "rep2").exists()
    assert s.pairs[1].n_sources == 120 and s.pairs[0].n_sources == 40  # each pair on the rounds both ran
    assert "280 model-sources in all" in s.headline()
    again = aggregate([tmp_path / "runs"], ComparisonSettings(n_boot=20, rank_by="sa"))
    assert again.settled.pairs == s.pairs and again.settled.order == s.order  # a re-rank of unequal rounds


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


def test_re_ranking_stored_rounds_keeps_their_rule(tmp_path):
    """Issue 40, item 8: a re-rank judges stored rounds by the rule they ran with; another confidence is refused naming
    the recorded 0.95 unless rule=override, and then the verdicts say so; the recorded stop stays settled."""
    rule = StopRule(stop="settled", round_sources=40, max_sources=80, margin=0.0)
    comp = settled_compare({"reader": PixelReader(), "always0": ConstantClass(0)}, tmp_path, rule)
    again = aggregate([tmp_path / "runs"], ComparisonSettings(n_boot=20, rank_by="sa"))
    assert again.settled.pairs == comp.settled.pairs and again.settled.rule == comp.settled.rule
    assert again.settled.rule["stop"] == "settled" and not again.settled.rule_note
    with pytest.raises(ValueError, match=r"confidence must be the 0.95 these rounds recorded .* rule=override"):
        aggregate([tmp_path / "runs"], ComparisonSettings(rank_by="sa", sequential=StopRule(confidence=0.8)))
    with pytest.raises(ValueError, match="max_sources must be the 80 these rounds recorded"):
        aggregate([tmp_path / "runs"], ComparisonSettings(rank_by="sa", sequential=StopRule(max_sources=100000)))
    same = aggregate([tmp_path / "runs"], ComparisonSettings(rank_by="sa", sequential=StopRule(confidence=0.95)))
    assert same.settled.pairs == comp.settled.pairs  # the recorded value given again is not a change
    wider = aggregate(
        [tmp_path / "runs"], ComparisonSettings(rank_by="sa", sequential=StopRule(confidence=0.999, rule="override"))
    )
    assert wider.settled.rule["confidence"] == 0.999 and wider.settled.rule["stop"] == "settled"
    assert wider.settled.pairs[0].run_low < comp.settled.pairs[0].run_low
    assert "rule=override" in wider.settled.rule_note and "confidence=0.999 (recorded: 0.95)" in wider.summary()


def test_familywise_boards_say_which_guarantee_they_have(tmp_path):
    rule = StopRule(stop="settled", round_sources=40, max_sources=80, familywise=True)
    models = {"reader": PixelReader(), "always0": ConstantClass(0), "always1": ConstantClass(1)}
    comp = settled_compare(models, tmp_path, rule)
    s = comp.settled
    assert s.guarantee == "family-wise at 95% over the 2 adjacent pairs (Holm)" and s.guarantee in comp.summary()
    assert s.pairs[0].verdict == "ordered" and s.pairs[0].confidence > 0.95  # Holm's first step: alpha / 2
    assert s.rule["familywise"] is True


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
