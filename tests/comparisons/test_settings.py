"""The stop rule's one spelling (issue 45): :class:`StopRule` read from its ``to_dict()`` (a config node, a preset's
``sequential:`` block, a stored benchmark) and from the configs that carry it (a service job's
``comparison.sequential``, and the ``stop`` of jobs stored before that spelling)."""

from __future__ import annotations

import pytest

from genEval.comparisons.settings import ComparisonSettings, StopRule

RULE = StopRule(stop="settled", round_sources=40, max_sources=120, margin=1.0).filled()


def test_a_rule_reads_back_from_its_dict_and_a_partial_one_keeps_its_gaps():
    assert StopRule.coerce(RULE.to_dict()) == RULE and StopRule.coerce(RULE) is RULE
    assert StopRule.coerce(None) == StopRule() and StopRule.coerce({"margin": 2}).confidence is None
    assert ComparisonSettings(sequential=RULE.to_dict()).sequential == RULE


def test_an_unknown_or_bad_key_is_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown stop-rule setting\(s\) \['max_source'\]; known: stop, "):
        StopRule.coerce({"max_source": 120})
    with pytest.raises(ValueError, match="stop must be fixed | settled"):
        StopRule.coerce({"stop": "sometimes"})
    with pytest.raises(TypeError, match="a StopRule or a mapping of its fields, got 'settled'"):
        StopRule.coerce("settled")


@pytest.mark.parametrize(
    "config, expected",
    [
        ({"comparison": {"sequential": RULE.to_dict()}}, RULE),  # a job's config, as its runs record it
        ({"stop": RULE.to_dict()}, RULE),  # a job stored before the one spelling
        ({"comparison": {"sequential": RULE.to_dict()}, "stop": {"stop": "fixed"}}, RULE),  # the new one wins
        ({"stop": "fixed", "comparison": {"model": "m", "repetition": 0}}, None),  # a CLI run's shortcut, a fixed job
        ({}, None),
    ],
)
def test_the_rule_a_config_carries(config, expected):
    assert StopRule.carried_by(config) == expected
