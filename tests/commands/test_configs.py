"""Every ``conf/**.yaml`` composes and instantiates (issue 13: configs mirror code).

The options of the plug-in groups (generator, oracle, classifier) are built and checked by the conformance suite,
``tests/contracts``. The other groups' options are built here from the same catalogue (``tests/support/options.py``):
those whose real data cannot exist offline with small stand-ins (``tests/support/stand_ins.py``: idx files, a fake
CIFAR-10 batch, image folders, a style mask); everything else as configured. A new option in a group must be listed
in the catalogue (with no overrides when it needs none), so an option that does not instantiate cannot slip in.
"""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from genEval.commands import CONF_DIR, build, config_options
from genEval.interfaces import ImageDataset
from genEval.search.perturb import SearchConfig
from tests.support.assets import ASSETS
from tests.support.options import OPTIONS, OTHER_GROUPS, options
from tests.support.stand_ins import DATA_BUILDERS, write_stand_ins


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> dict[str, str]:
    return write_stand_ins(tmp_path_factory.mktemp("stand-ins"), DATA_BUILDERS)


def test_every_option_is_catalogued():
    for group in OTHER_GROUPS:
        listed = sorted(o.name for o in OPTIONS if o.group == group)
        assert listed == config_options(group), f"conf/{group}: list every option in tests/support/options.py"


def _compose(config: str, overrides: list[str]):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose(config, overrides=overrides)


def _build_role(group: str, node):
    if group == "search":
        return SearchConfig.coerce(OmegaConf.to_container(node, resolve=True))
    return build(node, group)


@pytest.mark.parametrize("option", options(*OTHER_GROUPS))
def test_every_option_composes_and_instantiates(option, stand_ins, monkeypatch):
    group, name = option.group, option.name
    if option.assets and not ASSETS.exists():
        pytest.skip(f"conf/{group}/{name}.yaml reads ../shared/assets, which is absent")
    if (group, name) == ("data", "cifar10"):  # the fake batch cannot match torchvision's md5 of the real one
        import torchvision

        monkeypatch.setattr(torchvision.datasets.CIFAR10, "_check_integrity", lambda self: True)
        monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *a, **k: True)
    cfg = _compose(option.composed_in, option.command_line(stand_ins))
    obj = _build_role(group, cfg[group])
    if group == "data":
        assert isinstance(obj, ImageDataset), f"{group}={name} built {type(obj).__name__}"
    if group == "protocol":
        assert callable(obj.wrap) and len(obj.indices) == 200, f"{group}={name} built {obj!r}"


def test_experiment_presets_compose_and_instantiate_every_role():
    if not ASSETS.exists():
        pytest.skip("the experiment presets read ../shared/assets, which is absent")
    for name in config_options("experiment"):
        cfg = _compose("config", [f"experiment={name}"])
        for group in ("data", "classifier", "generator", "oracle", "mask", "search"):
            _build_role(group, cfg[group])


@pytest.mark.parametrize("config", sorted(p.stem for p in CONF_DIR.glob("*.yaml")))
def test_every_command_config_composes_and_its_role_nodes_instantiate(config):
    cfg = _compose(config, [])
    for group in ("data", "generator", "oracle", "mask", "search"):
        if group in cfg and cfg[group] is not None and (group == "search" or "_target_" in cfg[group]):
            if group == "data" and not ASSETS.exists() and "asset:" in str(OmegaConf.to_yaml(cfg[group])):
                continue
            _build_role(group, cfg[group])
