"""`geneval compare data=cifar10_jpg` compares the data preset's zoo (data_zoos in conf/compare.yaml) unless the
command line chooses a zoo or classifiers (issues 33 and 35 name that command as written)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from genEval.commands import CONF_DIR
from genEval.commands.compare import _data_zoo, _models, _self_judging


def composed(*overrides: str):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("compare", overrides=list(overrides), return_hydra_config=True)


def test_cifar_data_brings_the_cifar_resnets_which_may_judge_themselves():
    cfg = composed("data=cifar10_jpg", "stop=settled")
    _data_zoo(cfg)
    nodes, baselines = _models(cfg)
    assert list(nodes) == ["cifar_resnet20", "cifar_resnet32", "cifar_resnet56"]
    assert [n.depth for n in nodes.values()] == [20, 32, 56] and baselines is None
    assert _self_judging(cfg)  # ResNet-32 and -56 are the members of the data preset's oracle


@pytest.mark.parametrize(
    "overrides, first",
    [
        (("data=cifar10_jpg", "zoo=digits_interventions"), "erm_s0"),  # a zoo chosen on the command line wins
        (("data=cifar10_jpg", "zoo.title=mine"), "erm_s0"),  # so does any zoo key
        ((), "erm_s0"),  # the digits default is untouched
    ],
)
def test_a_chosen_zoo_or_other_data_keep_their_zoo(overrides, first):
    cfg = composed(*overrides)
    _data_zoo(cfg)
    assert next(iter(_models(cfg)[0])) == first and not _self_judging(cfg)


def test_chosen_classifiers_replace_the_data_zoo_and_its_self_judging():
    cfg = composed("data=cifar10_jpg", "classifiers=[cifar_resnet20,cifar_resnet32]")
    _data_zoo(cfg)
    assert list(_models(cfg)[0]) == ["cifar_resnet20", "cifar_resnet32"]
    assert not _self_judging(cfg)  # explicit models: allow_self_judging=true must be said
