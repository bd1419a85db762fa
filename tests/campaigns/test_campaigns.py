"""Campaigns (issue 45): ``run_campaign(plan, design, setup)`` is what ``geneval compare`` runs. A fixed and a
settled design given the objects the command builds give the comparison the command gives; a settled round's
source count reaches the data's draw (``with_limit``), not the config; what a design cannot run is refused first."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from genEval.campaigns import Design, EvaluationPlan, Setup, run_campaign
from genEval.campaigns.draws import data_for_seed, with_sources
from genEval.commands import CONF_DIR, build, classifier_factories, classifier_nodes, plain
from genEval.commands.compare import run_compare
from genEval.comparisons.settings import ComparisonSettings, StopRule
from genEval.data import DigitsData
from genEval.runs.reader import RunDir, read_samples
from genEval.search.perturb import SearchConfig
from tests.support.comparisons import ToyPool, verdicts
from tests.support.toys import AcceptAllOracle, LinearClassifier, SigmoidGenerator

COMMON = ["classifiers=[digits_cnn,digits_mlp]", "allow_self_judging=true", "search.budget=1", "n_boot=20",
          "report=false", "progress=false", "seed=0"]  # fmt: skip


def _command(out: Path, *overrides: str):
    """``geneval compare`` with ``overrides`` into ``out``, and the config it ran."""
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("compare", overrides=[*COMMON, *overrides, f"out_dir={out}"])
    run_compare(cfg)
    return cfg


def _campaign(cfg, out: Path, settings: ComparisonSettings):
    """The same comparison from a notebook: the roles built from the same config nodes, the library's defaults for
    everything else, one call."""
    models = classifier_factories(classifier_nodes(cfg, "classifiers"), "classifiers")
    plan = EvaluationPlan(SearchConfig.coerce(plain(cfg.search)), progress=False)
    design = Design(models, out, repetitions=int(cfg.repetitions), seeds=0, settings=settings, allow_self_judging=True)
    setup = Setup(build(cfg.data, "data"), functools.partial(build, cfg.generator, "generator"), build(cfg.oracle, "o"))
    return run_campaign(plan, design, setup)


def test_a_fixed_design_gives_the_comparison_the_command_gives(digits_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("GENEVAL_CACHE", str(digits_cache))
    cfg = _command(tmp_path / "cmd", "data.limit=6", "repetitions=2")
    comp = _campaign(cfg, tmp_path / "lib", ComparisonSettings(n_boot=20))
    assert comp.settings.repetitions == 2 and len(comp.models) == 2
    assert verdicts(tmp_path / "lib") == verdicts(tmp_path / "cmd")


def test_a_settled_design_gives_the_comparison_the_command_gives(digits_cache, tmp_path, monkeypatch):
    """The command leaves ``data.limit`` as given (here: all 540 test digits); every round draws ``round_sources``
    of them through the data's ``with_limit``, and the runs record the limit they drew."""
    monkeypatch.setenv("GENEVAL_CACHE", str(digits_cache))
    cfg = _command(tmp_path / "cmd", "stop=settled", "round_sources=8", "max_sources=16", "data.limit=null")
    assert cfg.data.limit is None  # not edited to size a round
    rule = StopRule(stop="settled", round_sources=8, max_sources=16)
    comp = _campaign(cfg, tmp_path / "lib", ComparisonSettings(n_boot=20, sequential=rule))
    assert verdicts(tmp_path / "lib") == verdicts(tmp_path / "cmd")
    assert comp.settled.rule["round_sources"] == 8 and comp.settled.stopped
    for out in (tmp_path / "cmd", tmp_path / "lib"):
        run = out / "runs" / "digits_cnn" / "rep0"
        assert len(read_samples(run)) == 8 and RunDir(run).identity.sources.selection["limit"] == 8
    assert RunDir(tmp_path / "cmd" / "runs" / "digits_cnn" / "rep0").results.config.values["data"]["limit"] == 8


def test_with_limit_draws_what_data_limit_draws():
    """A known answer: the whole test split limited to n draws, for every seed, the sources ``data.limit=n`` draws."""
    whole, eight = DigitsData(limit=None), DigitsData(limit=8)
    limited = with_sources(whole, 8)
    assert limited is not whole and whole.limit is None and len(whole) == 540  # the original is left as it was
    ids = lambda d: [d.source_id(i) for i in range(len(d))]  # noqa: E731
    assert ids(limited) == ids(eight) and limited.subset_info() == eight.subset_info()  # drawn now, before any seed
    for seed in (0, 3):
        a, _ = data_for_seed(limited, seed)
        b, _ = data_for_seed(eight, seed)
        assert ids(a) == ids(b)
    assert with_sources(eight, 8) is eight
    pool = ToyPool(limit=12)  # no with_limit hook: kept as it is
    assert with_sources(pool, 12) is pool


def test_what_a_design_cannot_run_is_refused_before_any_run(tmp_path):
    models = {"a": LinearClassifier(12, 3), "b": LinearClassifier(12, 3, seed=1)}
    setup = Setup(ToyPool(limit=12), SigmoidGenerator(), AcceptAllOracle())
    plan = EvaluationPlan(progress=False)
    with pytest.raises(ValueError, match=r"3 setups \(x, y, z\) are an ablation: name the setting"):
        run_campaign(plan, Design(models, tmp_path), {"x": setup, "y": setup, "z": setup})
    with pytest.raises(ValueError, match=r"ablate='search.budget' compares the comparison under several values"):
        run_campaign(plan, Design(models, tmp_path, ablate="search.budget"), setup)
    with pytest.raises(ValueError, match=r"an ablation of search.budget needs at least 2 values, got \['x'\]"):
        run_campaign(plan, Design(models, tmp_path, ablate="search.budget"), {"x": setup})
    settled = ComparisonSettings(sequential=StopRule(stop="settled", round_sources=4, max_sources=8))
    with pytest.raises(ValueError, match=r"stop=settled runs one comparison in rounds; an ablation runs a fixed"):
        run_campaign(plan, Design(models, tmp_path, settings=settled, ablate="g"), {"x": setup, "y": setup})
    with pytest.raises(ValueError, match=r"stop=settled derives one seed per round from seed=<int>"):
        run_campaign(plan, Design(models, tmp_path, seeds=[1, 2], settings=settled), setup)
    assert not list(tmp_path.iterdir())  # every refusal came before anything was written
