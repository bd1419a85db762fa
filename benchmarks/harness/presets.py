"""The shipped presets (``genEval/conf``) composed for a study, which sits beside the command layer, not above it:
Hydra composes the YAML, the library's :meth:`~genEval.service.benchmarks.Benchmark.from_config` makes a benchmark of
it and :func:`hydra.utils.instantiate` builds a role. Unlike ``genEval.commands.presets.load_benchmarks`` nothing is
checked against the machine (data folders, server settings): a study names presets that run anywhere
(``digits_*``); ``tests/benchmarks/test_harness.py`` checks that the versions agree with the command's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

import genEval
from genEval.service.benchmarks import Benchmark

#: The configs of the genEval that is imported (another checkout's, when a study measures one).
CONF_DIR = Path(genEval.__file__).resolve().parent / "conf"


def compose(name: str, overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """``conf/<name>.yaml`` with ``overrides`` (``key=value``), as ``geneval`` composes it."""
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name=name, overrides=list(overrides))


def benchmark(name: str) -> Benchmark:
    """The benchmark preset ``conf/benchmark/<name>.yaml`` (its data preset's classifier left out: a submission takes
    its place, as in the service). ValueError naming the preset for one that needs a server setting."""
    config = OmegaConf.to_container(compose(f"benchmark/{name}"), resolve=True)
    config.pop("classifier", None)
    if (config.get("benchmark") or {}).get("server_settings"):
        raise ValueError(f"benchmark {name} needs server settings; load it with `geneval serve benchmarks=[{name}]`")
    return Benchmark.from_config(name, config)


def classifier_config(name: str) -> dict:
    """The registered classifier ``conf/classifier/<name>.yaml``, resolved (what a job's ``kind=config`` names)."""
    return OmegaConf.to_container(compose(f"classifier/{name}").classifier, resolve=True)


def build(node: DictConfig) -> Any:
    """One role built from its config node (Hydra's ``instantiate``; the command layer adds its checks on top)."""
    return instantiate(node, _convert_="partial")
