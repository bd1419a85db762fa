"""``geneval compare [overrides]`` (conf/compare.yaml): run and compare classifiers, or aggregate ``runs=[...]``.

The path runs top-down: this module turns the config into objects (classifier factories from the zoo or from
``conf/classifier`` names found on Hydra's search path, data, generator(s), oracle, search, mask), builds the
:class:`~genEval.campaigns.plan.EvaluationPlan` (what every run gets), the :class:`~genEval.campaigns.plan.Design`
(which runs) and the :class:`~genEval.campaigns.plan.Setup` (one per value of ``generators=[...]`` or ``ablate=``),
calls :func:`genEval.campaigns.run.run_campaign` (or the aggregations for existing runs), which writes the runs and
the comparison files, then writes ``report.html`` (:func:`genEval.reports.report.write_report`) and prints the
leaderboard.

Which models: ``classifiers=null`` (default) compares the zoo (``conf/zoo/<name>.yaml``: ``zoo.classifiers``) with
its baselines (``zoo.baselines``) unless ``baselines=`` says otherwise; ``classifiers=[...]`` replaces both (ER is
then fitted only on ``baselines=`` named explicitly). A data preset listed under ``data_zoos`` brings its own zoo when
the command line chooses none (``geneval compare data=cifar10_jpg``: the shared CIFAR-10 ResNets), as it brings its
matching oracle and generator; a zoo may allow self-judging (``allow_self_judging: true`` in the zoo).

Where the evaluations run: ``executor=local`` (default), ``ray`` or ``slurm`` (``conf/executor/``), built here and
handed to the campaign's design (:mod:`genEval.campaigns.executors`); it is left out of each
run's recorded config, so a comparison resumes and aggregates the same wherever its runs ran.

Fresh sources per repetition: the data are built once, and every data set of ``conf/data`` re-draws its ``data.limit``
subset from a seed (``with_seed``, ``data.subset=random``); :mod:`genEval.campaigns.repetitions` calls it with the
repetition's seed, shared by every model of that repetition (and, in a generator ablation, by every generator).
``data.subset=first`` or a fixed ``data.subset_seed`` keeps the same sources in every repetition (the comparison then
says so).

``stop=settled`` (docs/comparing.md) runs rounds of ``round_sources`` fresh sources (the data draw that many:
:func:`genEval.campaigns.draws.with_sources`) until every adjacent pair of the ranking is ordered or equivalent within
``margin`` (:mod:`genEval.campaigns.rounds`); rerun
with ``out_dir=<its folder>`` to continue a stopped one.
"""

from __future__ import annotations

import copy
import functools
import logging
from dataclasses import replace
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from genEval.campaigns import Design, EvaluationPlan, Setup, run_campaign
from genEval.commands import (
    CONF_DIR,
    build,
    bundle,
    classifier_factories,
    classifier_nodes,
    command,
    config_nodes,
    execution_bundle,
    hydra_output_dir,
    plain,
    robustness,
)
from genEval.commands.bundles import recorded
from genEval.commands.checks import Style, check_run, choice
from genEval.commands.early import one_model
from genEval.commands.tracking import tracked
from genEval.comparisons.ablation import GeneratorAblation, aggregate_ablation, runs_by_generator
from genEval.comparisons.aggregate import aggregate
from genEval.comparisons.leaderboard import Comparison
from genEval.comparisons.settings import ComparisonSettings
from genEval.reports.report import write_report
from genEval.runs.shards import resolve_run_dir
from genEval.search.perturb import SearchConfig

log = logging.getLogger(__name__)

#: Keys of conf/compare.yaml that describe the comparison rather than one run (left out of each run's record).
_NOT_RUN_KEYS = (
    "classifiers",
    "generators",
    "zoo",
    "hydra",
    "tracking",
    "executor",
    "data_zoos",
    "ablate",  # each value's runs record the config of that value
    "id_data",
    "families",
    "shift",
    "corruptions",
    "label_free",  # the label-free measures' sensitivity protocol
)


def _command_line(cfg: DictConfig) -> list[str]:
    """The overrides given on the command line (``hydra.overrides.task``), from Hydra's config under ``@hydra.main``,
    else from ``cfg.hydra`` (``compose(..., return_hydra_config=True)``); [] when neither tells."""
    from hydra.core.hydra_config import HydraConfig

    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:
        return list(OmegaConf.select(cfg, "hydra.overrides.task", default=None) or [])


def _data_zoo(cfg: DictConfig) -> None:
    """Swap in the zoo of the data preset (``data_zoos``) when neither the zoo nor the classifiers were chosen."""
    name = (cfg.get("data_zoos") or {}).get(choice(cfg, "data"))
    given = {o.lstrip("+~").split("=", 1)[0].split(".", 1)[0] for o in _command_line(cfg)}
    if name is None or cfg.get("classifiers") is not None or "zoo" in given:
        return
    path = CONF_DIR / "zoo" / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"data_zoos names zoo {name!r} for data={choice(cfg, 'data')}, but {path} does not exist.")
    log.info(
        "compare: data=%s compares its zoo %s (zoo=... or classifiers=... picks others)", choice(cfg, "data"), name
    )
    with open_dict(cfg):
        cfg.zoo = OmegaConf.load(path)


def _self_judging(cfg: DictConfig) -> bool:
    """``allow_self_judging``, or the compared zoo's own ``allow_self_judging``."""
    zoo = cfg.get("zoo") if cfg.get("classifiers") is None else None
    return bool(cfg.get("allow_self_judging", False)) or bool(zoo is not None and zoo.get("allow_self_judging"))


def _models(cfg: DictConfig) -> tuple[dict[str, DictConfig], list[str] | None]:
    """The compared classifiers (name -> config node) and the ER baselines: the zoo's, or the user's list."""
    given = bundle(cfg, "comparison").baselines  # baselines= (or comparison.baselines=)
    explicit = None if given is None else list(given)
    if cfg.get("classifiers") is not None:
        return classifier_nodes(cfg, "classifiers"), explicit
    zoo = cfg.get("zoo")
    if zoo is None or not zoo.get("classifiers"):
        raise ValueError(
            "nothing to compare: classifiers=null and no zoo; pick a zoo (zoo=digits_interventions, "
            "conf/zoo/) or list classifiers, e.g. 'classifiers=[digits_cnn,digits_mlp]'."
        )
    nodes = config_nodes(cfg, "zoo.classifiers", "classifier")
    zoo_baselines = None if zoo.get("baselines") is None else [str(b) for b in zoo.baselines]
    return nodes, explicit if explicit is not None else zoo_baselines


def _generators(cfg: DictConfig) -> dict[str, DictConfig] | None:
    spec = cfg.get("generators")
    if spec is None:
        return None
    if isinstance(spec, (ListConfig, DictConfig)) and len(spec) < 2:
        raise ValueError(
            f"generators={list(spec)}: a generator ablation needs at least 2 generators; for one, use "
            "generator=<name> (or generators=null)."
        )
    return config_nodes(cfg, "generators", "generator")


def _run_configs(cfg: DictConfig, nodes: dict[str, DictConfig], generator: DictConfig | None = None) -> dict:
    """Per model, the config recorded in its runs' results.json: the comparison's settings and its classifier."""
    shared = {k: v for k, v in recorded(cfg).items() if k not in _NOT_RUN_KEYS}
    if generator is not None:
        shared["generator"] = plain(generator)
    return {name: {**shared, "classifier": plain(node)} for name, node in nodes.items()}


def _evaluate_kwargs(cfg: DictConfig) -> dict[str, Any]:
    """The bundles every run of the comparison gets (its directory and bootstrap come from the comparison)."""
    return dict(
        execution=execution_bundle(cfg),  # device, batch size, precision, compile: the same for every model and run
        output=bundle(cfg, "output"),
        scoring=bundle(cfg, "scoring"),
    )


def _run_models(cfg: DictConfig, settings: ComparisonSettings, out_dir: str) -> Comparison | GeneratorAblation:
    """Evaluate every classifier ``cfg.repetitions`` times (under every generator of ``generators=``), or in rounds
    until the ranking is settled (``stop=settled``), then compare."""
    nodes, baselines = _models(cfg)
    generators = _generators(cfg)
    ablation = robustness.ablation_spec(cfg)
    if ablation is not None and generators is not None:
        raise ValueError(
            "generators=[...] is the generator ablation and ablate={...} an ablation of any key: give one of them "
            "(ablate={generator:[a,b]} is generators=[a,b])."
        )
    robustness.check_extras(cfg, baselines, ablation is not None or generators is not None)
    rule = settings.sequential.filled()
    if rule.settled_mode:
        if generators is not None or ablation is not None:
            raise ValueError(
                "stop=settled runs one comparison in rounds; a generator ablation (generators=[...]) runs a fixed "
                "design: use stop=fixed with it, or compare under one generator."
            )
    models_key = "classifiers" if cfg.get("classifiers") is not None else "zoo.classifiers"
    check_run(  # every model, generator and the oracle against the data, before anything is built
        cfg,
        classifiers={f"{models_key}.{n}": node for n, node in nodes.items()},
        generators={"generator": cfg.generator}
        if generators is None
        else {f"generators.{g}": n for g, n in generators.items()},
        style=Style("compare"),
    )
    mask = build(cfg.mask, "mask") if cfg.get("mask") is not None else None
    plan = EvaluationPlan(
        search=SearchConfig.coerce(plain(cfg.search)),
        mask=mask,
        mask_reference=None if cfg.get("mask_reference") is None else str(cfg.mask_reference),
        progress=bundle(cfg, "output").progress,
        **_evaluate_kwargs(cfg),
    )
    factories = classifier_factories(nodes, "classifiers")
    design = Design(
        models=factories,
        out_dir=out_dir,
        repetitions=int(cfg.repetitions),
        seeds=list(cfg.seeds) if cfg.get("seeds") is not None else cfg.get("seed"),
        settings=replace(settings, baselines=baselines),
        executor=build(cfg.executor, "executor") if cfg.get("executor") is not None else None,
        allow_self_judging=_self_judging(cfg),
    )
    if ablation is not None:
        return _reports(cfg, run_campaign(plan, replace(design, ablate=ablation[0]), _ablate(cfg, ablation, nodes)))
    data, oracle = build(cfg.data, "data"), build(cfg.oracle, "oracle")
    if generators is None:
        generator = functools.partial(build, cfg.generator, "generator")  # built after the checks
        comp = run_campaign(plan, design, Setup(data, generator, oracle, run_configs=_run_configs(cfg, nodes)))
        return robustness.add_extras(cfg, comp, design.settings, factories, data)
    builds = classifier_factories(generators, "generators")  # each built when its turn comes
    setups = {g: Setup(data, builds[g], oracle, run_configs=_run_configs(cfg, nodes, n)) for g, n in generators.items()}
    return _reports(cfg, run_campaign(plan, replace(design, ablate="generator"), setups))


def _reports(cfg: DictConfig, ab: GeneratorAblation) -> GeneratorAblation:
    """Every value's comparison of an ablation gets its ``report.html`` (unless ``report=false``)."""
    for comp in ab.comparisons.values() if cfg.get("report", True) else ():
        write_report(comp)
    return ab


def _ablate(cfg: DictConfig, ablation: tuple[str, list], nodes: dict) -> dict[str, Setup]:
    """``ablate={key: [values]}``: one setup per value (its data, generator, oracle and search; checked first)."""
    key, values = ablation
    if key.split(".")[0] == "mask":
        raise ValueError("ablate={mask: [...]}: the mask is fitted per comparison; compare mask presets one at a time.")
    variants = robustness.variants(cfg, key, values)
    for label, v in variants.items():  # every value's pieces checked before anything is built
        check_run(
            v,
            classifiers={f"classifiers.{n}": node for n, node in nodes.items()},
            generators={f"ablate.{label}.generator": v.generator},
            style=Style("compare"),
        )
    return {
        label: Setup(
            data=build(v.data, "data"),
            generator=functools.partial(build, v.generator, "generator"),
            oracle=build(v.oracle, "oracle"),
            search=SearchConfig.coerce(plain(v.search)),
            run_configs=_run_configs(v, nodes),
        )
        for label, v in variants.items()
    }


def _aggregate_runs(cfg: DictConfig, settings: ComparisonSettings, out_dir: str) -> Comparison | GeneratorAblation:
    """Aggregate (re-rank) existing runs; runs made by a generator ablation give an ablation again."""
    robustness.check_extras(cfg, None, False)
    runs = cfg.runs
    paths = [str(resolve_run_dir(r)) for r in ([runs] if isinstance(runs, str) else runs)]  # a sweep: its merged run
    groups = runs_by_generator(paths)
    if len(groups) > 1:
        ab = aggregate_ablation(groups, settings, out_dir=out_dir)
        if cfg.get("report", True):
            for comp in ab.comparisons.values():
                write_report(comp)
        return ab
    return aggregate(paths, settings, out_dir=out_dir)


def check_compare(cfg: DictConfig) -> None:
    """Refuse a comparison of fewer than two models before anything is built (one model is ``geneval``'s job)."""
    if cfg.get("runs"):
        return
    cfg = copy.deepcopy(cfg)  # the data preset's zoo swapped in on a copy: the command does it again on its own
    _data_zoo(cfg)
    nodes, _ = _models(cfg)
    if len(nodes) < 2:
        name = next(iter(nodes), "<model>")
        given = cfg.get("classifiers")
        name = str(given[name]) if isinstance(given, DictConfig) and isinstance(given.get(name), str) else name
        raise ValueError(one_model(name))


@command("compare", check=check_compare)
def run_compare(cfg: DictConfig) -> str:
    check_compare(cfg)
    out_dir = cfg.get("out_dir") or str(hydra_output_dir())
    settings = bundle(cfg, "comparison")  # baselines, ER gate, bootstrap, rank_by, stop rule: checked once, here
    with tracked(cfg, f"compare on {choice(cfg, 'data')}", "compare") as track:  # tracking=mlflow: a parent run
        if not cfg.get("runs"):
            _data_zoo(cfg)
        result = _aggregate_runs(cfg, settings, out_dir) if cfg.get("runs") else _run_models(cfg, settings, out_dir)
        if cfg.get("report", True):
            write_report(result)
        track.comparison(result.out_dir, settings.rank_by)
    print(result.summary())
    return result.out_dir
