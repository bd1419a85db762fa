"""Issue 19: the score that orders a comparison (rank_by), no model judged by itself, the generator ablation, and
classifier names found on Hydra's search path by `geneval compare`."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from scipy import stats as sps
from scipy.special import logit
from torch import nn

from genEval.campaigns import Design, EvaluationPlan, Setup, run_campaign
from genEval.commands import CONF_DIR, classifier_nodes, config_nodes
from genEval.comparisons.ablation import (
    GeneratorAblation,
    aggregate_ablation,
    load_comparison,
    runs_by_generator,
)
from genEval.comparisons.aggregate import aggregate
from genEval.comparisons.judging import oracle_members
from genEval.comparisons.leaderboard import CONFIDENCE_COLUMNS, Comparison
from genEval.comparisons.settings import ComparisonSettings
from genEval.reports.report import expected_figures, render_report
from genEval.search.perturb import SearchConfig
from tests.support.assets import ROOT
from tests.support.comparisons import ToyPool
from tests.support.ranking_runs import SPEC, Z_ROBUST, write_ranking_runs
from tests.support.toys import AcceptAllOracle, LinearClassifier, ModelOracle, SigmoidGenerator

OLD_COLUMNS = ["model", "rank_fmr", "rank_sa", "rank_diff", "baseline", "repetitions", "n", "n_validated"]


def _csv(text: str) -> tuple[list[str], list[dict]]:
    reader = csv.DictReader(io.StringIO(text))
    return list(reader.fieldnames or []), list(reader)


# ------------------------------------------------------------------------------------------ rank_by
def test_default_ranks_by_fmr_v_where_fmr_puts_the_weaker_model_first(tmp_path):
    runs = write_ranking_runs(tmp_path)
    comp = aggregate([runs], out_dir=tmp_path / "v", settings=ComparisonSettings(n_boot=200))
    weak = comp.row("weak")
    assert weak["sa"].value == 60.0 and weak["fmr"].value == pytest.approx(250 / 3)
    assert weak["fmr_validated"].value == pytest.approx(50.0)
    assert comp.rank_by == "fmr_validated" and comp.models == ["mid", "strong", "weak"]
    assert [r.rank for r in comp.leaderboard] == [1, 2, 3]
    assert {r.model: r.rank_fmr for r in comp.leaderboard} == {"mid": 1, "weak": 2, "strong": 3}
    assert comp.settings.rank_reason.startswith("FMR_v = 100 PA / SA_v compares like with like")
    assert comp.notes()[0].startswith("ranked by FMR_v: FMR_v = 100 PA / SA_v")
    # the FMR_v ranking (mid, strong, weak) against the FMR ranking (mid, weak, strong): 2 of 3 pairs agree
    s = comp.stability
    assert s.score == "fmr_validated" and s.tau_rank_fmr == pytest.approx(1 / 3)
    assert s.tau_bootstrap.score == "fmr_validated"
    # leaderboard.csv keeps its columns, in leaderboard order, with the rank and its score last (then the settled rank)
    head, rows = _csv((tmp_path / "v" / "leaderboard.csv").read_text())
    # then the columns added later, each after the ones before it: the rank, its score and the settled rank, then
    # issue 44's confidence columns (a reader of an older file finds every column where it was)
    later = head[head.index("rank") :]
    assert head[: len(OLD_COLUMNS)] == OLD_COLUMNS and later[:3] == ["rank", "rank_by", "tied_rank"]
    assert later[3:] == list(CONFIDENCE_COLUMNS)[1:] and "ood_auroc" in later
    assert "fmr" in head and "fmr_validated" in head and head.index("fmr") < head.index("er")
    assert [(r["model"], r["rank"], r["rank_fmr"], r["rank_by"]) for r in rows] == [
        ("mid", "1", "1", "fmr_validated"),
        ("strong", "2", "3", "fmr_validated"),
        ("weak", "3", "2", "fmr_validated"),
    ]
    md = (tmp_path / "v" / "leaderboard.md").read_text()
    assert "Ranked by FMR_v (rank_by=fmr_validated): FMR_v = 100 PA / SA_v" in md
    assert "| rank | model | FMR | FMR_v |" in md and "| 3 | weak | 83.33" in md
    summary = comp.summary()
    assert "# = rank by FMR_v (rank_by=fmr_validated)" in summary
    assert summary.index(" 1 mid ") < summary.index(" 2 strong ") < summary.index(" 3 weak ")
    again = Comparison.load(tmp_path / "v")
    assert again.to_dict() == comp.to_dict() and again.rank_by == "fmr_validated"

    by_fmr = aggregate([runs], settings=ComparisonSettings(n_boot=200, rank_by="fmr"))
    assert by_fmr.models == ["mid", "weak", "strong"] and by_fmr.stability.score == "fmr"
    assert [r.rank for r in by_fmr.leaderboard] == [r.rank_fmr for r in by_fmr.leaderboard] == [1, 2, 3]
    by_sa = aggregate([runs], settings=ComparisonSettings(n_boot=50, rank_by="sa"))
    assert by_sa.models == ["strong", "mid", "weak"] and "not a robustness score" in by_sa.settings.rank_reason
    # the report states the ranking score and why
    html, _ = render_report(comp)
    assert 'id="ranked-by"' in html and "<strong>Ranked by FMR_v</strong>" in html
    assert "Kendall tau (FMR_v rankings)" not in html  # one repetition: no tau between repetitions


def test_comparisons_written_before_rank_by_load_as_ranked_by_fmr(tmp_path):
    runs = write_ranking_runs(tmp_path)
    d = aggregate([runs], settings=ComparisonSettings(n_boot=20, rank_by="fmr")).to_dict()
    for row in d["leaderboard"]:
        del row["rank"]
    for key in ("rank_by", "rank_reason"):
        del d["settings"][key]
    for key in ("score", "tau_rank_fmr"):
        del d["stability"][key]
    old = Comparison.from_dict(d)
    assert old.rank_by == "fmr" and [r.rank for r in old.leaderboard] == [1, 2, 3]


def test_rank_by_er_orders_by_effective_robustness_and_errors_teach(tmp_path):
    runs = write_ranking_runs(tmp_path, models={**SPEC, "z_robust": Z_ROBUST})
    comp = aggregate(
        [runs],
        settings=ComparisonSettings(baselines=["strong", "mid", "weak"], er_min_r2=0.0, n_boot=100, rank_by="er"),
    )
    # ER: PA minus the least-squares line through (logit SA, logit PA) of the three baselines, in points
    sa = {"strong": 100.0, "weak": 60.0, "mid": 90.0, "z_robust": 60.0}
    pa = {"strong": 200 / 3, "weak": 50.0, "mid": 250 / 3, "z_robust": 250 / 3}
    x = {m: logit(np.clip(v / 100, 1e-3, 1 - 1e-3)) for m, v in sa.items()}
    w, b = np.polyfit(
        [x[m] for m in ("strong", "weak", "mid")], [logit(pa[m] / 100) for m in ("strong", "weak", "mid")], 1
    )
    er = {m: pa[m] - 100 / (1 + np.exp(-(w * x[m] + b))) for m in sa}
    assert er["z_robust"] > er["mid"]  # z_robust first by ER, though mid is first by PA (a tie, broken by name)
    assert comp.models == sorted(er, key=er.get, reverse=True) == ["z_robust", "mid", "strong", "weak"]
    assert [r.er for r in comp.leaderboard] == pytest.approx(sorted(er.values(), reverse=True))
    assert comp.rank_by == "er" and comp.stability.score == "er"
    assert aggregate([runs], settings=ComparisonSettings(n_boot=20, rank_by="pa")).models[:2] == ["mid", "z_robust"]
    with pytest.raises(ValueError, match=r"rank_by=er ranks by effective robustness.*baselines=\[\.\.\.\]"):
        aggregate([runs], settings=ComparisonSettings(n_boot=10, rank_by="er"))
    with pytest.raises(ValueError, match=r"rank_by=er, but effective robustness is not reported here: ER not reported"):
        aggregate(
            [runs],
            settings=ComparisonSettings(baselines=["strong", "mid", "weak"], er_min_r2=1.0, n_boot=10, rank_by="er"),
        )
    with pytest.raises(ValueError, match=r"unknown rank_by='fmrv'; rank by one of sa, ra, vr, pa, fmr, .*er"):
        aggregate([runs], settings=ComparisonSettings(n_boot=10, rank_by="fmrv"))


# ------------------------------------------------------------------------------------------ self-judging
def toy_roles(n: int = 18):
    """8x8 grey images labelled by the oracle's model itself (seed 7), so its start check passes."""
    x = torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    judge = LinearClassifier(64, 3, seed=7)
    with torch.no_grad():
        y = judge(x).argmax(1).tolist()
    from tests.support.toys import ListDataset

    return ListDataset(x, y, ["a", "b", "c"]), SigmoidGenerator(), ModelOracle(judge)


def test_a_model_inside_the_oracle_is_refused_before_any_run_unless_allowed(tmp_path):
    data, gen, oracle = toy_roles()
    models = {"lin1": LinearClassifier(64, 3, seed=1), "judge": lambda: LinearClassifier(64, 3, seed=7)}
    plan = EvaluationPlan(SearchConfig(budget=3, step_size=0.05, update="sign", start_noise=0.1), progress=False)
    settings = ComparisonSettings(n_boot=20)
    with pytest.raises(ValueError, match=r"judge is part of the oracle \(oracle\(linear7\)\).*allow_self_judging=true"):
        run_campaign(plan, Design(models, tmp_path / "refused", settings=settings), Setup(data, gen, oracle))
    assert not (tmp_path / "refused").exists()  # refused before any run
    allowed = Design(models, tmp_path / "ok", settings=settings, allow_self_judging=True)
    comp = run_campaign(plan, allowed, Setup(data, gen, oracle))
    assert comp.row("judge")["pa"].value == 100.0 and comp.row("lin1")["pa"].value < 100.0
    said = [w for w in comp.warnings if "member of the oracle" in w]
    assert len(said) == 1 and said[0].startswith("judge is a member") and "PA is 100 by construction" in said[0]
    again = aggregate(comp.runs, settings=ComparisonSettings(n_boot=20))  # re-ranked from the stored runs: still said
    assert [w for w in again.warnings if "member of the oracle" in w] == said


def test_oracle_members_are_found_by_their_weights():
    judge = LinearClassifier(64, 3, seed=7)
    zoo = nn.ModuleList([ModelOracle(LinearClassifier(64, 3, seed=5)), ModelOracle(judge)])
    same_weights = LinearClassifier(64, 3, seed=7)  # another object, built again: the same model
    wrapped = nn.Sequential(LinearClassifier(64, 3, seed=5))  # the bare network inside a wrapper of other names
    found = oracle_members(
        {"same": same_weights, "other_seed": LinearClassifier(64, 3, seed=8), "wrapped": wrapped}, zoo
    )
    assert found == ["same", "wrapped"]
    assert oracle_members({"same": same_weights}, AcceptAllOracle()) == []  # an external judge holds no weights


# ------------------------------------------------------------------------------------------ generator ablation
class TemperedSigmoid(SigmoidGenerator):
    """x = sigmoid(z / t): the same images as SigmoidGenerator, another latent geometry (steps move t times less)."""

    def __init__(self, t: float) -> None:
        super().__init__()
        self.t, self.name = t, f"sigmoid_t{t}"

    def encode(self, x):
        return super().encode(x) * self.t

    def decode(self, z):
        return super().decode(z / self.t)


ABLATION_MODELS = ("lin0", "lin1", "lin2", "lin3")


@pytest.fixture(scope="module")
def ablation(tmp_path_factory):
    out = tmp_path_factory.mktemp("ablation")
    data, oracle = ToyPool(limit=30), AcceptAllOracle()
    setups = {
        "sigmoid": Setup(data, SigmoidGenerator(), oracle),
        "tempered": Setup(data, lambda: TemperedSigmoid(3.0), oracle),
    }
    models = {m: LinearClassifier(12, 3, seed=i) for i, m in enumerate(ABLATION_MODELS)}
    settings = ComparisonSettings(baselines=["lin0", "lin1", "lin2"], n_boot=200)
    design = Design(models, out, repetitions=2, seeds=[5, 6], settings=settings, ablate="generator")
    plan = EvaluationPlan(SearchConfig(budget=3, step_size=0.3, update="sign", start_noise=0.0), progress=False)
    ab = run_campaign(plan, design, setups)
    return ab, out


def test_ablation_runs_the_same_sources_and_seeds_under_every_generator(ablation):
    ab, out = ablation
    assert ab.generators == ["sigmoid", "tempered"] and ab.repetition_seeds == [5, 6]
    for m in ABLATION_MODELS:
        for r in (0, 1):
            recs = {}
            for g in ab.generators:
                d = out / "generators" / g / "runs" / m / f"rep{r}"
                res = json.loads((d / "results.json").read_text())
                assert res["seed"] == [5, 6][r] and res["config"]["comparison"]["generator"] == g
                recs[g] = {json.loads(x)["source_id"] for x in (d / "samples.jsonl").read_text().splitlines()}
            assert (
                recs["sigmoid"]
                == recs["tempered"]
                == {ToyPool(limit=30, seed=[5, 6][r]).source_id(i) for i in range(30)}
            )
    for g in ab.generators:
        assert (out / "generators" / g / "leaderboard.csv").is_file()
        assert ab.comparisons[g].settings.components["generator"].startswith("sigmoid")


def test_ablation_rank_agreement_and_dependent_models_match_the_per_generator_leaderboards(ablation):
    ab, out = ablation
    per = {}
    for g in ab.generators:
        _, rows = _csv((out / "generators" / g / "leaderboard.csv").read_text())
        per[g] = {r["model"]: (float(r["fmr_validated"]), int(r["rank"])) for r in rows}
    a, b = (np.array([per[g][m][0] for m in ABLATION_MODELS]) for g in ab.generators)
    assert not np.allclose(a, b)  # the generators do change the scores
    (agree,) = ab.agreement
    assert (agree.a, agree.b) == ("sigmoid", "tempered")
    assert agree.tau == pytest.approx(sps.kendalltau(a, b).statistic)
    assert agree.n_models == 4 and agree.n_defined > 150 and -1 <= agree.low <= agree.high <= 1
    assert "shared by every generator" in agree.method
    for m in ab.models:
        ranks = {g: per[g][m.model][1] for g in ab.generators}
        assert m.ranks == ranks and m.depends == (len(set(ranks.values())) > 1)
        assert 0.0 <= m.share_changed <= 1.0
        if m.depends:
            assert m.share_changed > 0
    assert ab.dependent == [m.model for m in ab.models if m.depends]
    assert set(ab.dependent) == {"lin1", "lin2"}  # these two swap ranks 2 and 3 under the tempered generator
    assert any("rank depends on the generator" in n for n in ab.notes())


def test_ablation_files_report_and_re_ranking(ablation, tmp_path):
    ab, out = ablation
    loaded = load_comparison(out)
    assert isinstance(loaded, GeneratorAblation) and loaded.to_dict() == ab.to_dict()
    with pytest.raises(ValueError, match=r"holds a generator ablation"):
        Comparison.load(out)
    head, rows = _csv((out / "leaderboard.csv").read_text())
    single, _ = _csv((out / "generators" / "sigmoid" / "leaderboard.csv").read_text())
    assert head == [*single, "generator"] and len(rows) == 8
    assert [r["generator"] for r in rows] == ["sigmoid"] * 4 + ["tempered"] * 4
    md = (out / "leaderboard.md").read_text()
    assert "## Ranks by generator" in md and "## Rank agreement" in md and "## Leaderboard under tempered" in md
    html, n = render_report(out)
    assert n == 1 and expected_figures(html) == 1 and html.count("<img ") == 1
    assert "Rankings side by side" in html and "<strong>Ranked by FMR_v</strong>" in html
    assert "Kendall tau" in html and "sigmoid" in html and "tempered" in html
    # re-ranking the same runs: grouped by their recorded generator, ranked by FMR this time
    groups = runs_by_generator([out])
    assert sorted(groups) == ["sigmoid", "tempered"]
    again = aggregate_ablation(
        groups, out_dir=tmp_path / "again", settings=ComparisonSettings(n_boot=50, rank_by="fmr")
    )
    assert again.rank_by == "fmr" and again.comparisons["tempered"].rank_by == "fmr"
    for g in ab.generators:
        assert {r.model: r["fmr"].value for r in again.comparisons[g].leaderboard} == pytest.approx(
            {r.model: r["fmr"].value for r in ab.comparisons[g].leaderboard}
        )
    assert (tmp_path / "again" / "generators" / "tempered" / "comparison.json").is_file()
    # ER is fitted again on the baselines the runs record (none were named when re-ranking)
    for g in ab.generators:
        first, later = ab.comparisons[g], again.comparisons[g]
        assert later.settings.baselines == first.settings.baselines == ["lin0", "lin1", "lin2"]
        assert {r.model: r.er for r in later.leaderboard} == pytest.approx({r.model: r.er for r in first.leaderboard})


def test_ablation_needs_two_generators_and_the_same_models(tmp_path):
    with pytest.raises(ValueError, match=r"generators=\['sigmoid'\]: a generator ablation needs at least 2"):
        run_campaign(
            EvaluationPlan(),
            Design({"a": LinearClassifier(12, 3)}, tmp_path, ablate="generator"),
            {"sigmoid": Setup(ToyPool(), SigmoidGenerator(), AcceptAllOracle())},
        )
    write_ranking_runs(tmp_path / "g1", generator="g1")
    write_ranking_runs(tmp_path / "g2", generator="g2")
    (tmp_path / "g2" / "runs" / "weak").rename(tmp_path / "weak-elsewhere")
    with pytest.raises(ValueError, match=r"generator g2 has models \['mid', 'strong'\] but g1 has"):
        aggregate_ablation({"g1": [tmp_path / "g1"], "g2": [tmp_path / "g2"]}, settings=ComparisonSettings(n_boot=10))


# ------------------------------------------------------------------------------------------ Hydra's search path
def _user_conf(root: Path) -> Path:
    conf = root / "conf"
    (conf / "classifier").mkdir(parents=True)
    (conf / "generator").mkdir()
    (conf / "classifier" / "my_cnn.yaml").write_text(
        "_target_: genEval.classifiers.digits_classifier\narch: cnn\nseed: 5\nepochs: 2\n"
    )
    (conf / "generator" / "identity_8px.yaml").write_text(
        "_target_: generators.identity.IdentityGenerator\nimage_size: 8\n"
    )
    return conf


def test_classifier_names_are_found_on_the_search_path_like_a_single_run(tmp_path):
    conf = _user_conf(tmp_path)
    overrides = [
        "classifiers=[my_cnn,digits_cnn]",
        "generators=[identity,identity_8px]",
        f"hydra.searchpath=[file://{conf}]",
    ]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("compare", overrides=overrides, return_hydra_config=True)
        single = compose("config", overrides=["classifier=my_cnn", f"hydra.searchpath=[file://{conf}]"])
    nodes = classifier_nodes(cfg, "classifiers")
    assert list(nodes) == ["my_cnn", "digits_cnn"] and dict(nodes["my_cnn"]) == dict(single.classifier)
    assert nodes["my_cnn"].seed == 5 and nodes["digits_cnn"].seed == 0
    gens = config_nodes(cfg, "generators", "generator")
    assert gens["identity_8px"].image_size == 8
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        without = compose("compare", overrides=["classifiers=[my_cnn]"])
    with pytest.raises(ValueError, match=r"unknown classifier config 'my_cnn' in classifiers; available: .*digits_cnn"):
        classifier_nodes(without, "classifiers")


def test_cli_compares_own_classifiers_under_two_generators_as_written(tmp_path):
    """`geneval compare 'classifiers=[my_cnn,digits_cnn]' 'hydra.searchpath=[file:///path/conf]'
    'generators=[...]' data.limit=... repetitions=1` (the issue's interface, with small settings)."""
    conf = _user_conf(tmp_path)
    out = tmp_path / "out"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "genEval.cli",
            "compare",
            "classifiers=[my_cnn,digits_cnn]",
            f"hydra.searchpath=[file://{conf}]",
            "generators=[identity,identity_8px]",
            "data.limit=10",
            "repetitions=1",
            "search.budget=2",
            "seed=4",
            "n_boot=50",
            "device=cpu",
            f"hydra.run.dir={out}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "genEval generator ablation  2 models x 2 generators" in r.stdout
    ab = load_comparison(out)
    assert isinstance(ab, GeneratorAblation) and ab.generators == ["identity", "identity_8px"]
    res = json.loads((out / "generators" / "identity_8px" / "runs" / "my_cnn" / "rep0" / "results.json").read_text())
    assert res["config"]["classifier"]["seed"] == 5 and res["config"]["generator"]["image_size"] == 8
    head, rows = _csv((out / "leaderboard.csv").read_text())
    assert head[-1] == "generator" and len(rows) == 4
    assert expected_figures((out / "report.html").read_text()) == 1
    assert (out / "generators" / "identity" / "report.html").is_file()
