"""A benchmark preset's run settings (issue 45): every key a preset may fix beside its roles (``EVALUATE_KEYS``)
is a field of exactly one bundle of the :class:`~genEval.campaigns.plan.EvaluationPlan` its jobs are evaluated with,
and reaches it: none is admitted and then dropped."""

from __future__ import annotations

from dataclasses import fields

import pytest

from genEval.campaigns import EvaluationPlan
from genEval.runs.settings import RunOutput
from genEval.scores.scoring import Scoring
from genEval.search.execution_settings import Execution
from genEval.service.benchmarks import EVALUATE_KEYS

BUNDLES = {"execution": Execution, "scoring": Scoring, "output": RunOutput}
#: A value of each key other than its default, as a preset could give it.
GIVEN = {"batch_size": 7, "interval": "clopper-pearson", "n_boot": 33, "grid_size": 3, "gap_warn_points": 4.5,
         "num_workers": 2, "precision": "bf16", "role_precision": {"generator": "bf16"}}  # fmt: skip


def test_every_key_is_given_for():
    assert set(GIVEN) == set(EVALUATE_KEYS)


@pytest.mark.parametrize("key", EVALUATE_KEYS)
def test_a_preset_key_belongs_to_one_bundle_and_reaches_it(key):
    owners = [name for name, cls in BUNDLES.items() if key in {f.name for f in fields(cls)}]
    assert len(owners) == 1, f"{key} is a field of {owners or 'no bundle'}"
    plan = EvaluationPlan.from_config({key: GIVEN[key]})
    assert getattr(getattr(plan, owners[0]), key) == GIVEN[key]
    assert getattr(getattr(EvaluationPlan.from_config({}), owners[0]), key) != GIVEN[key]
