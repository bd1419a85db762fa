"""Fixtures of the conformance suite: the stand-in files (written once per session) and each option built once
(``plugin``), from its config composed as ``geneval <group>=<name> ...`` composes it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from genEval.commands import CONF_DIR, build
from tests.support.assets import ASSETS
from tests.support.options import Option
from tests.support.stand_ins import write_stand_ins


@pytest.fixture(scope="session")
def stand_ins(tmp_path_factory) -> dict[str, str]:
    return write_stand_ins(tmp_path_factory.mktemp("contract-stand-ins"))


def option_config(option: Option, stand_ins: dict[str, str]) -> DictConfig:
    """The option's config node, composed with the main job's config (so interpolations such as
    ``${data.image_size}`` resolve as on the command line)."""
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=option.command_line(stand_ins))[option.group]


class Built:
    """An option's config node and the object built from it (once per session)."""

    def __init__(self, option: Option, node: DictConfig, obj: Any) -> None:
        self.option, self.node, self.obj = option, node, obj

    def images(self, batch: int = 2, seed: int = 0) -> torch.Tensor:
        """Probe images ``(batch, channels, size, size)`` in ``[0, 1]``."""
        o = self.option
        return torch.rand(batch, o.channels, o.size, o.size, generator=torch.Generator().manual_seed(seed))


_BUILT: dict[str, Built] = {}


@pytest.fixture
def plugin(request, stand_ins) -> Built:
    """The parametrised option (``option``), built; skipped with the reason when it reads absent assets."""
    option: Option = request.getfixturevalue("option")
    if option.assets and not ASSETS.exists():
        pytest.skip(f"conf/{option.group}/{option.name}.yaml reads ../shared/assets, which is absent")
    key = str(option)
    if key not in _BUILT:
        node = option_config(option, stand_ins)
        _BUILT[key] = Built(option, node, build(node, option.group))
    return _BUILT[key]


@pytest.fixture(scope="session", autouse=True)
def _release_built():
    yield
    _BUILT.clear()
