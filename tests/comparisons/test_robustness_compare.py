"""Issue 43 on real toy comparisons: multi-ID ER attached from scored ID sets, the fixed-shift column, the ablation
of any setting, and per-class differences (known answers from hand-made outcomes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from scipy import stats as sps
from torch import nn

from genEval.campaigns import Design, EvaluationPlan, Setup, run_campaign
from genEval.campaigns.fixed_shift import attach_fixed_shift, score_corruptions
from genEval.campaigns.id_sets import score_id_sets
from genEval.commands import CONF_DIR
from genEval.commands.robustness import ablation_spec, id_set_names, value_label, variants
from genEval.comparisons.ablation import (
    GeneratorAblation,
    aggregate_ablation,
    load_comparison,
    runs_by_generator,
)
from genEval.comparisons.leaderboard import Comparison
from genEval.comparisons.multi_id import attach_multi_id, check_plane_baselines
from genEval.comparisons.settings import ComparisonSettings
from genEval.scores.class_differences import ClassDifferences, class_differences
from genEval.scores.outcomes import Outcomes
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from tests.support.comparisons import ToyPool
from tests.support.toys import AcceptAllOracle, LinearClassifier, SigmoidGenerator

SEARCH = SearchConfig(budget=3, step_size=0.05, update="sign", start_noise=0.1)
MODELS = ("lin0", "lin1", "lin2", "lin3", "const")
SETTINGS = ComparisonSettings(baselines=["lin0", "lin1", "lin2", "lin3"], n_boot=60, er_min_r2=0.0)


class ConstantClassifier(nn.Module):
    """Predicts class 0 for every image: right exactly on the class-0 sources, whatever is done to the images."""

    num_classes, name = 3, "const"

    def forward(self, x):
        return 0.0 * x.flatten(1).sum(1, keepdim=True) + torch.tensor([[1.0, 0.0, 0.0]])  # differentiable, flat


def _factories(calls):
    def factory(name, seed):
        def build():
            calls[name] = calls.get(name, 0) + 1
            return ConstantClassifier() if name == "const" else LinearClassifier(12, 3, seed=seed)

        return build

    return {m: factory(m, i) for i, m in enumerate(MODELS)}


@pytest.fixture(scope="module")
def comp(tmp_path_factory):
    out = tmp_path_factory.mktemp("robust")
    calls = {}
    c = run_campaign(
        EvaluationPlan(SEARCH, progress=False, execution=Execution(batch_size=12)),
        Design(_factories(calls), out, repetitions=2, seeds=[5, 6], settings=SETTINGS),
        Setup(ToyPool(limit=24), SigmoidGenerator(), AcceptAllOracle()),
    )
    return c, calls


def test_multi_id_from_scored_id_sets(comp, tmp_path):
    c, _ = comp
    calls = {}
    second = ToyPool(pool=60, limit=30, seed=99)
    scores = score_id_sets(_factories(calls), {"pool99": second}, c.out_dir)
    # SA on the second set, by hand
    x = torch.stack([second[i][0] for i in range(len(second))])
    y = torch.tensor([second[i][1] for i in range(len(second))])
    want = 100 * float((LinearClassifier(12, 3, seed=1)(x).argmax(1) == y).float().mean())
    assert scores["lin1"]["pool99"].sa == pytest.approx(want)
    saved = json.loads((Path(c.out_dir) / "id_sets" / "lin1.json").read_text())
    assert saved["sets"]["pool99"]["data"] == "toypool" and len(saved["sets"]["pool99"]["correct"]) == 30
    again = score_id_sets(_factories(calls), {"pool99": second}, c.out_dir)
    assert calls == {m: 1 for m in MODELS} and again["lin1"]["pool99"].sa == pytest.approx(want)  # read back
    fams = {"lin0": "a", "lin1": "a", "lin2": "b", "lin3": "b", "const": "c"}
    got = attach_multi_id(c, scores, ["toypool", "pool99"], fams, SETTINGS)
    m = got.multi_id
    assert m.id_sets == ["toypool", "pool99"] and m.models == got.models and m.families == [fams[k] for k in got.models]
    assert [row[0] for row in m.sa] == [got.row(k)["sa"].value for k in got.models]
    assert m.sa[got.models.index("lin1")][1] == pytest.approx(want)
    assert m.fitted_on == [k != "const" for k in got.models] and len(m.er_low) == len(MODELS)
    assert "bootstrap(60) over the" in m.interval
    back = Comparison.load(got.out_dir)
    assert back.multi_id == m
    assert "## Multi-ID effective robustness (logit space" in (Path(got.out_dir) / "leaderboard.md").read_text()
    assert any(n.startswith("multi-ID effective robustness over 2 ID sets") for n in got.notes())
    with pytest.raises(ValueError, match=r"families name models that are not compared: \['zzz'\]"):
        attach_multi_id(c, scores, ["toypool", "pool99"], {"zzz": "a"}, SETTINGS)
    with pytest.raises(ValueError, match=r"needs at least 4 baselines, but 3 are named"):
        check_plane_baselines(["a", "b", "c"], ["x", "y"])


def test_fixed_shift_known_answers_and_tau(comp):
    c, _ = comp
    calls = {}
    names, sev = ["gaussian_noise", "contrast"], [1, 5]
    scores = score_corruptions(
        _factories(calls), ToyPool(limit=24), [5, 6], c.out_dir, corruptions=names, severities=sev, seed=3
    )
    assert scores.correct["lin0"].shape == (48, 2, 2)
    got = attach_fixed_shift(c, scores, SETTINGS)
    fs = got.fixed_shift
    # the constant model is right on the class-0 sources only, under every corruption and severity
    labels = [ToyPool(limit=24, seed=s)[i][1] for s in (5, 6) for i in range(24)]
    share0 = 100 * np.mean(np.asarray(labels) == 0)
    const = fs.row("const")
    assert const.overall.value == pytest.approx(share0) and all(
        v == pytest.approx(share0) for v in const.corruptions.values()
    )
    for r in fs.rows:  # per-corruption accuracy = the mean of the recorded outcomes; overall = their mean
        corr = scores.correct[r.model]
        assert [r.corruptions[n] for n in names] == pytest.approx(list(100 * corr.mean(axis=(0, 2))))
        assert r.overall.value == pytest.approx(100 * corr.mean())
        assert r.fmr_validated.value == pytest.approx(got.row(r.model)["fmr_validated"].value)
        assert r.overall.low <= r.overall.value <= r.overall.high
    f = [r.fmr_validated.value for r in fs.rows]
    o = [r.overall.value for r in fs.rows]
    assert fs.tau.value == pytest.approx(sps.kendalltau(f, o).statistic)
    assert fs.families == {"noise": ["gaussian_noise"], "digital": ["contrast"]} and fs.n_sources <= 48
    assert "## Fixed shift beside FMR_v" in (Path(got.out_dir) / "leaderboard.md").read_text()
    assert Comparison.load(got.out_dir).fixed_shift == fs
    # the same settings again: read back, no model built
    before = dict(calls)
    score_corruptions(
        _factories(calls), ToyPool(limit=24), [5, 6], c.out_dir, corruptions=names, severities=sev, seed=3
    )
    assert calls == before


def test_ablation_of_any_setting(tmp_path):
    calls = {}
    setups = {
        label: Setup(ToyPool(limit=20), SigmoidGenerator(), AcceptAllOracle(), search=s)
        for label, s in (("budget-1", SearchConfig(budget=1, step_size=0.05)), ("budget-4", SEARCH))
    }
    models = {k: v for k, v in _factories(calls).items() if k != "const"}
    design = Design(models, tmp_path, seeds=[5], settings=ComparisonSettings(n_boot=40), ablate="search.budget")
    ab = run_campaign(EvaluationPlan(progress=False), design, setups)
    assert ab.key == "search.budget" and ab.values == ["budget-1", "budget-4"] and ab.kind == "ablation"
    assert (tmp_path / "settings" / "budget-4" / "comparison.json").is_file()
    assert ab.comparisons["budget-4"].settings.search["budget"] == 3
    loaded = load_comparison(tmp_path)
    assert isinstance(loaded, GeneratorAblation) and loaded.key == "search.budget" and loaded.to_dict() == ab.to_dict()
    md = (tmp_path / "leaderboard.md").read_text()
    assert "# genEval search.budget ablation" in md and "rank depends on the search.budget" in md
    groups = runs_by_generator([tmp_path / "settings"])
    assert sorted(groups) == ["budget-1", "budget-4"]
    again = aggregate_ablation(groups, settings=ComparisonSettings(n_boot=40))
    assert again.key == "search.budget" and [a.tau for a in again.agreement] == pytest.approx(
        [a.tau for a in ab.agreement]
    )


def _compose(overrides):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("compare", overrides=overrides, return_hydra_config=True)


def test_ablate_and_id_data_keys_are_checked():
    key, values = ablation_spec(_compose(["ablate={search.budget:[10,50]}"]))
    assert (key, values) == ("search.budget", [10, 50])
    cfg = _compose(["ablate={search.budget:[10,50]}"])
    v = variants(cfg, key, values)
    assert list(v) == ["budget-10", "budget-50"] and v["budget-50"].search.budget == 50
    assert v["budget-10"].search.step_size == cfg.search.step_size
    assert value_label("oracle.templates", ["a {}", "b {}"], 1) == "templates-2"
    oracles = variants(cfg, "oracle", ["digits_zoo", "classifier"])
    assert oracles["oracle-classifier"].oracle._target_ != oracles["oracle-digits_zoo"].oracle._target_
    with pytest.raises(ValueError, match=r"needs at least 2 values of search.budget"):
        ablation_spec(_compose(["ablate={search.budget:[10]}"]))
    with pytest.raises(ValueError, match=r"the config has no key 'search.budgett'"):
        ablation_spec(_compose(["ablate={search.budgett:[1,2]}"]))
    assert id_set_names(_compose(["id_data=[digits,digits_noisy]"])) == ["digits", "digits_noisy"]
    with pytest.raises(ValueError, match=r"the first ID set is the one the search uses, but data=digits"):
        id_set_names(_compose(["id_data=[digits_noisy,digits]"]))
    with pytest.raises(ValueError, match=r"needs at least 2 ID sets"):
        id_set_names(_compose(["id_data=[digits]"]))


def _outcomes(ids, labels, final):
    n = len(ids)
    one = np.ones(n, bool)
    return Outcomes(ids, labels, one, one, one, one, np.asarray(final, bool), ~one, one, one, ~one)


def test_per_class_differences_known_answer():
    # 300 sources in classes 0/1/2; both models right on every clean image (SA_v = 100), so FMR_v = PA. On class 1,
    # b is right on half; on class 2, a is wrong on a fifth: a is better overall, driven by class 1 alone. (100 a
    # class: with 20 a class, 16/20 against 20/20 is not separated once no interval is narrower than its evidence)
    ids = [f"s{i:03d}" for i in range(300)]
    labels = [i % 3 for i in range(300)]
    a = _outcomes(ids, labels, [lab != 2 or i % 5 != 2 for i, lab in enumerate(labels)])
    b = _outcomes(ids, labels, [lab != 1 or i % 2 == 0 for i, lab in enumerate(labels)])
    diffs = class_differences(["a", "b"], {"a": [a], "b": [b]}, ["zero", "one", "two"], 3, n_boot=300)
    rows = {r.name: r for r in diffs.rows}
    assert rows["zero"].value == pytest.approx(0.0) and rows["one"].value == pytest.approx(50.0)
    assert rows["two"].value == pytest.approx(-20.0) and rows["two"].high < 0  # separated, against the overall sign
    assert rows["one"].low > 0 and rows["one"].drives and not rows["zero"].drives and not rows["two"].drives
    assert rows["one"].weight == pytest.approx(1 / 3) and rows["one"].contribution == pytest.approx(50 / 3)
    (pair,) = diffs.pairs
    assert pair.value == pytest.approx((100 + 100 + 80) / 3 - (100 + 50 + 100) / 3) and pair.drivers == ["one"]
    labels_, mat, sep = diffs.matrix()
    assert labels_ == ["a - b"] and mat.tolist() == [pytest.approx([0.0, 50.0, -20.0])]
    assert sep.tolist() == [[False, True, True]]
    assert ClassDifferences.from_dict(json.loads(json.dumps(diffs.to_dict()))) == diffs


def test_every_comparison_carries_per_class_differences_and_ratio_intervals(comp):
    c, _ = comp
    assert c.class_differences is not None and len(c.class_differences.pairs) == 10  # 5 models: 10 pairs
    row = c.per_class["lin0"][0]
    assert {"fmr_low", "fmr_high", "fmr_validated_low", "fmr_validated_high"} <= set(row)
    if row["fmr_validated"] is not None and row["fmr_validated_low"] is not None:
        assert row["fmr_validated_low"] <= row["fmr_validated"] <= row["fmr_validated_high"]


def test_report_shows_the_new_sections_with_their_figures(comp, tmp_path):
    from genEval.reports.report import expected_figures, render_report

    c, _ = comp
    calls = {}
    second = ToyPool(pool=60, limit=30, seed=99)
    with_id = attach_multi_id(c, score_id_sets(_factories(calls), {"p": second}, tmp_path), ["toypool", "p"])
    scores = score_corruptions(_factories(calls), ToyPool(limit=24), [5, 6], tmp_path, corruptions=["contrast"])
    both = attach_fixed_shift(with_id, scores, SETTINGS, write=False)
    html, n = render_report(both)
    assert expected_figures(html) == n == html.count("<img ")
    for sid in ("multi-id", "fixed-shift", "class-differences"):
        assert f'<section id="{sid}">' in html and f'href="#{sid}"' in html
    assert "heatmap of per-class FMR_v differences" in html and "FMR_v against corruption accuracy" in html
    assert "multi-ID against single-ID effective robustness" in html
    plain, n_plain = render_report(c)
    assert n_plain == n - 2 and "Not computed: geneval compare shift=corruptions" in plain
