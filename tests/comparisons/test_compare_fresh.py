"""compare with fresh sources per repetition (issue 10 section 3) and one mask per comparison (section 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genEval.campaigns import Design, EvaluationPlan, Setup, run_campaign
from genEval.campaigns.draws import data_for_seed
from genEval.comparisons.settings import ComparisonSettings
from genEval.data.standard import DigitsData
from genEval.runs import read_results, read_samples
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from genEval.style_mask import AutoMask, StyleMask
from tests.support.comparisons import PlainPool, ToyPool
from tests.support.toys import AcceptAllOracle, LinearClassifier, SigmoidGenerator

SEARCH = SearchConfig(budget=3, step_size=0.3, update="sign", start_noise=0.0)
MODELS = ("lin0", "lin1")


def models() -> dict:
    return {m: LinearClassifier(12, 3, seed=i) for i, m in enumerate(MODELS)}


def sources(out: Path, model: str, rep: int) -> set[str]:
    return {r.source_id for r in read_samples(out / "runs" / model / f"rep{rep}")}


def compare_toys(data, out: Path, search: SearchConfig = SEARCH, n_boot: int = 30, **kw):
    """The two linear models on ``data`` with the sigmoid generator, an accept-all oracle, seeds 5 and 6."""
    design = Design(models(), out, repetitions=2, seeds=[5, 6], settings=ComparisonSettings(n_boot=n_boot))
    plan = EvaluationPlan(search, progress=False, **kw)
    return run_campaign(plan, design, Setup(data, SigmoidGenerator(), AcceptAllOracle()))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    out = tmp_path_factory.mktemp("fresh")
    return compare_toys(ToyPool(limit=20), out, n_boot=100, execution=Execution(batch_size=10)), out


def test_every_repetition_draws_fresh_sources_shared_by_all_models(fresh):
    comp, out = fresh
    rep0, rep1 = sources(out, "lin0", 0), sources(out, "lin0", 1)
    assert rep0 == {ToyPool(limit=20, seed=5).source_id(i) for i in range(20)}  # drawn with the repetition seed
    assert rep1 == {ToyPool(limit=20, seed=6).source_id(i) for i in range(20)} and rep0 != rep1
    assert sources(out, "lin1", 0) == rep0 and sources(out, "lin1", 1) == rep1  # paired within a repetition
    res = read_results(out / "runs" / "lin1" / "rep1")
    assert res.config.comparison.data_seed == 6 and comp.settings.data_seeds == [5, 6]
    s = comp.stability
    assert s.sources_resampled is True and not any("same source images" in w for w in comp.warnings)
    assert s.tau_bootstrap.n_sources == len(rep0 | rep1) and s.tau_bootstrap.n_boot == 100
    d = [x for x in comp.differences if x.metric == "sa"][0]
    assert d.paired and d.n_sources == len(rep0 | rep1)  # paired per repetition, over both draws


def test_data_without_the_hook_keep_their_sources_and_the_comparison_says_so(tmp_path):
    data = PlainPool(limit=12)
    assert data_for_seed(data, 3) == (data, False)
    noisy = SearchConfig(budget=3, step_size=0.3, update="sign", start_noise=1.0)  # repetitions differ by noise only
    comp = compare_toys(data, tmp_path, noisy, execution=Execution(batch_size=12))
    assert sources(tmp_path, "lin0", 0) == sources(tmp_path, "lin0", 1)
    assert comp.stability.sources_resampled is False and comp.settings.data_seeds == [None, None]
    assert any("every repetition evaluated the same source images" in w for w in comp.warnings)


def test_conf_data_re_draw_their_subset_per_repetition_unless_told_not_to():
    def ids(d):
        return [d.source_id(i) for i in range(len(d))]

    data = DigitsData(limit=20)
    (a, seeded), (b, _) = data_for_seed(data, 7), data_for_seed(data, 8)
    assert seeded and ids(a) != ids(b) and ids(a) == ids(data_for_seed(data, 7)[0])
    for fixed in (DigitsData(limit=20, subset="first"), DigitsData(limit=20, subset_seed=3)):
        assert data_for_seed(fixed, 7) == (fixed, False)  # one set of sources in every repetition


def test_mask_auto_fits_one_mask_with_the_reference_and_reuses_it(tmp_path):
    auto = AutoMask(fit_fraction=0.5, C=100.0)
    comp = compare_toys(
        ToyPool(limit=24), tmp_path, execution=Execution(batch_size=12), mask=auto, mask_reference="lin1"
    )
    mask = StyleMask.load(tmp_path / "mask" / "style_mask.safetensors")
    fit_ids = {r.source_id for r in read_samples(tmp_path / "mask" / "mask_fit")}
    assert 10 <= len(fit_ids) <= 14  # half of each class (rounded), stratified by split_for_auto
    assert read_results(tmp_path / "mask").components["classifier"] == "linear1"  # the reference's runs
    assert list((tmp_path / "mask").rglob("style_mask.safetensors")) == [tmp_path / "mask" / "style_mask.safetensors"]
    assert not list((tmp_path / "runs").rglob("mask_fit"))  # no model fitted its own mask
    for m in MODELS:
        for r in (0, 1):
            res = json.loads((tmp_path / "runs" / m / f"rep{r}" / "results.json").read_text())
            assert res["components"]["mask"] == f"auto:lin1:{mask.sha256[:16]}"
            assert not sources(tmp_path, m, r) & fit_ids  # no fit sample is scored
        assert sources(tmp_path, m, 0) == sources(tmp_path, "lin0", 0)
    assert comp.settings.mask == {
        "reference": "lin1",
        "id": f"auto:lin1:{mask.sha256[:16]}",
        "path": str(tmp_path / "mask" / "style_mask.safetensors"),
        "fit_samples": len(fit_ids),
    }
    assert any("fitted once with reference model lin1" in n for n in comp.notes())
    row = comp.row("lin0")
    assert row.rejected_per_sample == 0.0 and row.steps_per_sample == 3.0 and row.time_s > 0  # next to run time


def test_mask_auto_needs_a_named_reference(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"mask=auto in a comparison fits one mask with a reference model: set "
        r"mask_reference to one of lin0, lin1 \(got None\)",
    ):
        run_campaign(
            EvaluationPlan(SEARCH, mask=AutoMask(), progress=False),
            Design(models(), tmp_path),
            Setup(ToyPool(limit=12), SigmoidGenerator(), AcceptAllOracle()),
        )
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mask").exists()
