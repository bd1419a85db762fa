"""``EvaluationPlan.from_config`` (issue 45): a benchmark preset's (and so a service job's) evaluation config resolves
once into the typed bundles every run is evaluated with; the preset's keys refine the given bundles."""

from __future__ import annotations

import pytest

from genEval.campaigns import EvaluationPlan
from genEval.runs.settings import RunOutput
from genEval.search.execution_settings import Execution

#: A job config as ``Benchmark.apply_overrides`` makes one (the roles but the search left out: not read here).
CONFIG = {"search": {"budget": 5}, "batch_size": 20, "precision": "fp32", "n_boot": 50, "interval": "clopper-pearson",
          "grid_size": 4, "gap_warn_points": 12.5, "num_workers": None}  # fmt: skip


def test_the_presets_keys_take_the_place_of_the_workers_and_the_rest_stays():
    worker = Execution(device="cpu", precision="bf16", compile=True, num_workers=2)
    plan = EvaluationPlan.from_config(CONFIG, execution=worker, output=RunOutput(save_images=True, progress=False))
    ex = plan.execution
    assert (ex.device, ex.compile, ex.precision, ex.batch_size, ex.num_workers) == ("cpu", True, "fp32", 20, 2)
    assert (plan.scoring.n_boot, plan.scoring.interval, plan.scoring.gap_warn_points) == (50, "clopper-pearson", 12.5)
    out = plan.output
    assert (out.grid_size, out.save_images, out.progress, out.dir) == (4, True, False, None)
    assert plan.search.budget == 5 and plan.search.step_size == EvaluationPlan.from_config({}).search.step_size


def test_without_given_bundles_the_defaults_take_the_presets_keys():
    plan = EvaluationPlan.from_config({"batch_size": 8})
    assert plan.execution == Execution(batch_size=8) and plan.output == RunOutput()
    assert plan.scoring.n_boot == 1000 and plan.mask is None and plan.search.budget == 50


def test_a_given_search_and_mask_take_the_place_of_the_configs():
    plan = EvaluationPlan.from_config(CONFIG, search={"budget": 2}, mask="m", reference="label")
    assert (plan.search.budget, plan.mask, plan.reference) == (2, "m", "label")


@pytest.mark.parametrize(
    "key, value, message",
    [("batch_size", 0, "batch_size"), ("n_boot", 0, "n_boot"), ("precision", "fp8", "precision"),
     ("grid_size", -1, "grid_size")],
)  # fmt: skip
def test_a_bad_value_is_refused_naming_its_key(key, value, message):
    with pytest.raises(ValueError, match=message):
        EvaluationPlan.from_config({**CONFIG, key: value})
