"""Run a campaign: one comparison, a comparison in rounds until its ranking is settled, or an ablation.

:func:`run_campaign` is the one entry point (``geneval compare`` calls it; so can a notebook). It reads as the
design it runs, as a plain loop:

* ``stop=fixed`` (the paper's Table 2 comparisons): every model of the design evaluated once per repetition seed
  (:func:`~genEval.campaigns.repetitions.evaluate_repetitions`), then aggregated
  (:func:`genEval.comparisons.aggregate.aggregate`);
* ``stop=settled`` (docs/comparing.md): rounds of ``round_sources`` fresh, paired sources, each only for the models of
  open adjacent pairs, until every adjacent pair is settled (:func:`~genEval.campaigns.rounds.run_rounds`); the
  round's source count goes to the data's draw (:func:`genEval.campaigns.draws.with_sources`);
* an ablation (paper Table 3; docs/comparing.md): the comparison under every value of one setting (``design.ablate``;
  one :class:`~genEval.campaigns.plan.Setup` per value) with the same seeds, hence the same sources per repetition and
  the same start noise, then the rank agreement between the values
  (:func:`genEval.comparisons.ablation.build_ablation`), written by
  :func:`~genEval.comparisons.ablation.write_ablation`.

Before any run, models that are part of an oracle are refused (:func:`genEval.comparisons.judging.check_not_judging`)
unless ``design.allow_self_judging``, and what a design cannot run is refused with the fix.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from genEval.campaigns.draws import with_sources
from genEval.campaigns.plan import Design, EvaluationPlan, Setup
from genEval.campaigns.repetitions import check_model_names, evaluate_repetitions, repetition_seeds
from genEval.campaigns.rounds import run_rounds
from genEval.comparisons.ablation import GeneratorAblation, build_ablation, write_ablation
from genEval.comparisons.aggregate import aggregate
from genEval.comparisons.judging import check_not_judging
from genEval.comparisons.leaderboard import Comparison
from genEval.comparisons.loading import load_runs
from genEval.comparisons.ranking import DEFAULT_RANK_BY
from genEval.interfaces import build_entry
from genEval.masks import AutoMask
from genEval.scores.run_scores import Scoring

log = logging.getLogger(__name__)


def run_campaign(
    plan: EvaluationPlan, design: Design, setup: Setup | Mapping[str, Setup]
) -> Comparison | GeneratorAblation:
    """Run ``design`` with ``plan`` on ``setup`` (see the module docstring) and write its runs and comparison files
    into ``design.out_dir``. ``setup``: one :class:`Setup` (a comparison), or value label -> :class:`Setup` (an
    ablation of ``design.ablate``). Returns the :class:`Comparison` (or the :class:`GeneratorAblation`)."""
    if isinstance(setup, Mapping):
        return _ablation(plan, design, setup)
    if design.ablate is not None:
        raise ValueError(
            f"ablate={design.ablate!r} compares the comparison under several values: give one Setup per value "
            "({label: Setup(...)}), or ablate=None for one comparison."
        )
    return _comparison(plan, design, setup, {}, _check(plan, design, setup))


def _check(plan: EvaluationPlan, design: Design, setup: Setup) -> list[str]:
    """Refuse what ``design`` cannot run, before any evaluation; returns the self-judged models (allowed ones)."""
    settings, names = design.settings, design.names
    check_model_names(names)
    baselines = settings.baseline_list
    if baselines is not None and (unknown := set(baselines) - set(names)):
        raise ValueError(f"baselines {sorted(unknown)} are not among the classifiers ({', '.join(names)}).")
    if settings.rank_by == "er" and not baselines:
        raise ValueError(
            "rank_by=er ranks by effective robustness, which is fitted on baseline models: name them with "
            f"baselines=[...], or rank by another score (e.g. rank_by={DEFAULT_RANK_BY})."
        )
    if design.rule.settled_mode:
        _check_settled(plan, design)
    return check_not_judging(design.models, setup.oracle, design.allow_self_judging, build_entry)


def _check_settled(plan: EvaluationPlan, design: Design) -> None:
    """What ``stop=settled`` cannot run with, refused before any evaluation."""
    seeds = design.seeds
    if seeds is not None and not isinstance(seeds, int):
        raise ValueError(
            f"stop=settled derives one seed per round from seed=<int> (or a fresh one); seeds={list(seeds)} fixes "
            "the repetitions of stop=fixed. Pass seed=<int>, or stop=fixed."
        )
    if isinstance(plan.mask, AutoMask):
        raise ValueError(
            "stop=settled with mask=auto would fit a mask on the first round's sources, which later rounds may draw "
            "again; fit the mask first (geneval fit_mask ...) and pass it as mask=<its path>, or use stop=fixed."
        )
    if design.settings.rank_by == "er":
        raise ValueError(
            "stop=settled judges pairs by a per-source score, and rank_by=er is fitted across models; rank by a "
            f"score (e.g. rank_by={DEFAULT_RANK_BY}) or use stop=fixed."
        )


def _comparison(
    plan: EvaluationPlan, design: Design, setup: Setup, extra: Mapping[str, Any], judged: list[str]
) -> Comparison:
    """One comparison (checked; ``judged``: the self-judged models allowed): the runs of ``design`` (every run's
    ``config.comparison`` gets ``extra``), then their aggregate; in rounds under ``stop=settled``."""
    settings, rule = design.settings, design.rule
    baselines = settings.baseline_list
    plan = replace(plan, scoring=replace(Scoring.coerce(plan.scoring), n_boot=settings.n_boot))
    record = {**extra, **({"baselines": baselines} if baselines else {}), "sequential": rule.to_dict()}
    record |= {"self_judged": judged} if judged else {}  # every look and re-ranking warns about them
    setup = replace(setup, generator=build_entry(setup.generator))  # after the checks: a factory may train
    if rule.settled_mode:
        setup = replace(setup, data=with_sources(setup.data, rule.round_sources), run_configs=_limited(setup, rule))
        return run_rounds(plan, design, setup, record)
    seeds = repetition_seeds(design.seeds, design.repetitions)
    dirs = evaluate_repetitions(design.models, setup, plan, seeds, design.out_dir, record=record,
                                executor=design.executor)  # fmt: skip
    return aggregate(dirs, settings.with_seeds(seeds), out_dir=design.out_dir)


def _limited(setup: Setup, rule: Any) -> Mapping[str, dict] | None:
    """The recorded configs with the round's draw as it ran (``data.limit`` = ``round_sources``)."""
    if setup.run_configs is None:
        return None
    return {
        m: {**c, "data": {**c["data"], "limit": rule.round_sources}} if isinstance(c.get("data"), Mapping) else c
        for m, c in setup.run_configs.items()
    }


def _ablation(plan: EvaluationPlan, design: Design, setups: Mapping[str, Setup]) -> GeneratorAblation:
    """The comparison under every value of ``design.ablate`` with the same seeds, then the ablation."""
    key, names = design.ablate, [str(v) for v in setups]
    if key is None:
        raise ValueError(
            f"{len(names)} setups ({', '.join(names)}) are an ablation: name the setting they differ in "
            "(Design(ablate='generator'), or the key, e.g. 'search.budget')."
        )
    if len(names) < 2 and key == "generator":
        raise ValueError(
            f"generators={names}: a generator ablation needs at least 2 generators (for one, use generator=...)."
        )
    if len(names) < 2:
        raise ValueError(f"an ablation of {key} needs at least 2 values, got {names}.")
    if design.rule.settled_mode:
        raise ValueError(
            "stop=settled runs one comparison in rounds; an ablation runs a fixed design: use stop=fixed with it, "
            "or compare under one value."
        )
    check_model_names(names)
    distinct = {id(s.oracle): s for s in setups.values()}
    judged = {i: _check(plan, design, s) for i, s in distinct.items()}  # every oracle, before any run
    seeds = repetition_seeds(design.seeds, design.repetitions)
    sub = "generators" if key == "generator" else "settings"
    record = {"generators": names} if key == "generator" else {"ablation_key": key, "ablation_values": names}
    comps: dict[str, Comparison] = {}
    for name, setup in setups.items():
        log.info("%s ablation: %s (%d of %d)", key, name, len(comps) + 1, len(names))
        value = {"generator": name} if key == "generator" else {"ablation_value": name}
        one = replace(design, out_dir=Path(design.out_dir) / sub / name, seeds=seeds, ablate=None)
        comps[name] = _comparison(plan, one, setup, {**record, **value}, judged[id(setup.oracle)])
    runs = {g: load_runs([d for m in c.models for d in c.runs[m]]) for g, c in comps.items()}
    ab = build_ablation(runs, design.settings.with_seeds(seeds), comparisons=comps, key=key)
    return write_ablation(ab, design.out_dir)
