"""What the service commands build from configs, without the service stack (no web framework, no database).

The benchmark presets of ``conf/benchmark/`` composed and checked (:func:`load_benchmarks`), the classifier configs a
submission may name (:func:`registered_classifiers`), and the one builder that turns a job's stored config into the
objects ``genEval.evaluate`` takes (:func:`build_components`, run in a worker's child process through the command
layer's :func:`build`). ``geneval serve`` and ``geneval worker`` (:mod:`genEval.commands.server`) use them; so can
a notebook or a test that has no service installed.
"""

from __future__ import annotations

import functools
import logging

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from genEval.commands import CONF_DIR, build, build_data, classifier_nodes, config_options, plain
from genEval.commands.bundles import PLAIN_NODES, settings_of
from genEval.commands.checks import Style, check_run
from genEval.comparisons.judging import oracle_members
from genEval.interfaces import hook
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig
from genEval.service.benchmarks import Benchmark
from genEval.service.execute import Components, run_job

log = logging.getLogger(__name__)
SERVICE = Style("service")
#: Server settings a benchmark preset may ask for (``benchmark.server_settings``), with the variable that sets them.
SERVER_ENV = {"imagenet_root": "GENEVAL_IMAGENET_ROOT"}


def build_components(config: dict) -> Components:
    """A job's stored config (plain dicts) -> the objects of one evaluation (runs in the worker's child).

    The submitted classifier is checked against the benchmark's data (its classes) before anything is built, and
    refused when the oracle holds its weights (a member of the judge has PA 100 by construction)."""
    cfg = OmegaConf.create(config)
    check_run(cfg, classifiers={"classifier": cfg.classifier}, generators={"generator": cfg.generator}, style=SERVICE)
    classifier = build(cfg.classifier, "classifier")
    oracle = build(cfg.oracle, "oracle")
    if oracle_members({"model": classifier}, oracle):
        raise ValueError(
            f"the submitted model is part of this benchmark's oracle ({hook(oracle, 'name') or 'the judge'}): the "
            "oracle keeps only images its members still classify correctly, so the model's PA would be 100 and its "
            "FMR meaningless by construction. Submit a model the oracle does not contain."
        )
    return Components(
        classifier=classifier,
        data=build_data(cfg.data, classifier),
        generator=build(cfg.generator, "generator"),
        oracle=oracle,
        search=SearchConfig.coerce(config["search"]),
        mask=build(cfg.mask, "mask"),
    )


def job_runner(execution: Execution):
    """What a worker's child runs for a job (picklable: module-level functions and a dataclass)."""
    return functools.partial(run_job, build=build_components, execution=execution)


def _compose(config_name: str) -> DictConfig:
    if GlobalHydra.instance().is_initialized():  # inside `geneval serve` (hydra.main)
        return compose(config_name=config_name)
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):  # tests, notebooks
        return compose(config_name=config_name)


def load_benchmarks(names: list[str] | None = None, server: dict | None = None) -> dict[str, Benchmark]:
    """The presets ``conf/benchmark/<name>.yaml``, composed, completed and checked.

    A preset's ``benchmark.server_settings`` (preset key -> setting of ``server``, e.g. ``data.root: imagenet_root``)
    take their values from the server's configuration; then the preset's data, generator, oracle and mask are checked
    against each other and its files looked for (:func:`genEval.commands.checks.check_run`). A named preset that
    misses a setting or fails a check is refused (ValueError naming it); with ``names=None`` every preset is offered
    that passes, and the others are left out with a warning."""
    available = config_options("benchmark")
    wanted = available if names is None else [str(n) for n in names]
    unknown = [n for n in wanted if n not in available]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; available: {', '.join(available)} (conf/benchmark/).")
    out = {}
    for name in wanted:
        try:
            out[name] = _benchmark(name, server or {})
        except (ValueError, OSError) as err:
            if names is not None:
                raise
            log.warning("not offered: %s", err)
    return out


def _benchmark(name: str, server: dict) -> Benchmark:
    config = plain(_compose(f"benchmark/{name}"))
    config.pop("classifier", None)  # a data preset's matching classifier: a submission takes its place
    for key in PLAIN_NODES:  # a job stores (and its runs record) the search's keys, as before it was a node
        config[key] = settings_of(config[key])
    meta = config.get("benchmark") or {}
    for key, setting in (meta.pop("server_settings", None) or {}).items():
        value = server.get(setting)
        if value in (None, ""):
            raise ValueError(
                f"benchmark {name} needs the server setting {setting} (its {key}): e.g. geneval serve "
                f"{setting}=/path/to/folder 'benchmarks=[{name}]' (or set {SERVER_ENV.get(setting, setting)}); "
                "without it, leave the benchmark out."
            )
        parent, _, last = key.rpartition(".")
        node = config
        for part in parent.split(".") if parent else ():
            node = node[part]
        node[last] = value
    cfg = OmegaConf.create(config)
    try:
        check_run(cfg, classifiers={}, generators={"generator": cfg.generator}, style=SERVICE)
    except (ValueError, OSError) as err:
        raise type(err)(f"benchmark {name}: {err}") from err
    return Benchmark.from_config(name, config)


def registered_classifiers(assets: str | None) -> dict[str, dict]:
    """conf/classifier configs that need no further value (no ``???``), resolved: what ``kind=config`` names."""
    names = config_options("classifier")
    nodes = classifier_nodes(OmegaConf.create({"assets": assets, "names": names}), "names")
    return {n: plain(node) for n, node in nodes.items() if not OmegaConf.missing_keys(node)}
