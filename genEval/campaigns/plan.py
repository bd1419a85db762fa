"""What a campaign runs: the plan every run gets, the design that says which runs, and the setup they run on.

A comparison (paper Tables 1-3, App. N) evaluates several models on the same fresh sources and ranks them; an
ablation (paper Table 3) repeats that under several values of one setting. Three frozen objects say all of it:

* :class:`EvaluationPlan`: what every run of the campaign is evaluated with (:func:`genEval.evaluate`'s bundles:
  the search, the mask, execution, output and scoring settings, the oracle's reference), the same for every model,
  repetition, round and ablation value;
* :class:`Design`: which runs: the models (name -> classifier or factory), the repetitions and their seeds, the
  aggregation and stop rule (:class:`~genEval.comparisons.settings.ComparisonSettings`, whose ``sequential`` is the
  :class:`~genEval.comparisons.settings.StopRule` with its round size), the executor, the output folder, and the
  setting an ablation varies;
* :class:`Setup`: the components one comparison runs on (data, generator, oracle), one per ablation value.

:func:`genEval.campaigns.run.run_campaign` takes the three.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from genEval.campaigns.executors import Executor
from genEval.comparisons.settings import ComparisonSettings, StopRule
from genEval.runs.recording import RunOutput
from genEval.scores.run_scores import Scoring
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig


@dataclass(frozen=True)
class EvaluationPlan:
    """What every run of a campaign gets (:func:`genEval.evaluate`).

    ``search``: the search (a :class:`SearchConfig` or its mapping; None: the defaults). ``mask``: any
    ``genEval.evaluate`` mask; an :class:`~genEval.masks.AutoMask` is fitted once with the model ``mask_reference``
    and reused for every model. ``execution``, ``output`` (its directory is each run's own; per-run progress is off)
    and ``scoring`` (its bootstrap is the design's ``settings.n_boot``): the run bundles. ``reference``: what the
    oracle keeps (evaluate's ``reference``). ``progress``: the campaign's progress bar (None: on a terminal)."""

    search: SearchConfig | Mapping | None = None
    mask: Any = None
    mask_reference: str | None = None
    execution: Execution | None = None
    output: RunOutput | None = None
    scoring: Scoring | None = None
    reference: str | None = None
    progress: bool | None = True

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        *,
        search: SearchConfig | Mapping | None = None,
        mask: Any = None,
        execution: Execution | None = None,
        output: RunOutput | None = None,
        reference: str | None = None,
    ) -> EvaluationPlan:
        """The plan of an evaluation config as a benchmark preset, and so a service job, spells it
        (``conf/benchmark/*.yaml``, docs/service.md): its ``search`` node, and the run bundles' keys at its top level
        (``batch_size: 64``, ``precision: fp32`` of :class:`Execution`; ``n_boot``, ``interval`` of :class:`Scoring`;
        ``grid_size`` of :class:`RunOutput`). The roles are not built here.

        ``execution`` and ``output``: the bundles those keys refine: a key the config sets (not null) takes the place of
        the given bundle's (a worker's ``execution``: its device and compile stay, the preset's batch size and precision
        win; the service's ``output``), a key it leaves out keeps it. ``search`` given (a built one) takes the place of
        the config's; ``mask`` and ``reference`` are the plan's own. Each bundle validates its own values (a bad one is
        refused naming its key).
        """
        execution, output = Execution.coerce(execution), RunOutput.coerce(output)
        return cls(
            search=SearchConfig.coerce(config.get("search") if search is None else search),
            mask=mask,
            execution=replace(execution, **_set_in(config, Execution)),
            output=replace(output, **_set_in(config, RunOutput)),
            scoring=Scoring.coerce(config),  # its own reading of a flat config (null oracle_warn_accuracy: never warn)
            reference=reference,
        )


def _set_in(config: Mapping[str, Any], bundle: type) -> dict[str, Any]:
    """The fields of ``bundle`` (a settings dataclass) that ``config`` sets at its top level, null left out."""
    return {f.name: config[f.name] for f in fields(bundle) if f.init and config.get(f.name) is not None}


@dataclass(frozen=True)
class Setup:
    """The components one comparison runs on. ``data``: a data set (re-drawn per repetition through its
    ``with_seed`` hook, :mod:`genEval.campaigns.draws`) or a factory ``seed -> data``; ``generator`` and ``oracle``: the
    component or a zero-argument factory (built after the checks: a generator factory may train). ``search``: this
    setup's search (an ablation of a search key), None: the plan's. ``run_configs``: per model, the config recorded
    in its runs' ``results.json``."""

    data: Any
    generator: Any
    oracle: Any
    search: SearchConfig | Mapping | None = None
    run_configs: Mapping[str, dict] | None = None


@dataclass(frozen=True)
class Design:
    """Which runs a campaign makes, and where.

    ``models``: name -> classifier, or name -> zero-argument factory (built when its turn comes, one in memory at a
    time); names become directory names. ``repetitions`` and ``seeds``: ``stop=fixed`` evaluates every model once
    per seed (a list, one per repetition; an int to derive them; None: fresh ones), the same seed for every model of
    a repetition. ``settings``: how the runs are aggregated, with the stop rule ``settings.sequential``
    (``stop=settled`` runs rounds of ``round_sources`` fresh sources; ``seeds`` is then the base seed, an int or
    None). ``executor``: where the (model, repetition) evaluations run (:mod:`genEval.campaigns.executors`; None:
    one after the other here). ``out_dir``: the campaign's folder (runs under ``runs/<model>/rep<r>``).
    ``allow_self_judging``: compare models that are part of the oracle (else refused before any run). ``ablate``:
    the setting the setups of an ablation differ in (``"generator"``, ``"search.budget"``, ...), None for one
    comparison."""

    models: Mapping[str, Any]
    out_dir: str | Path
    repetitions: int = 1
    seeds: Sequence[int] | int | None = None
    settings: ComparisonSettings = field(default_factory=ComparisonSettings)
    executor: Executor | None = None
    allow_self_judging: bool = False
    ablate: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "settings", ComparisonSettings.coerce(self.settings))

    @property
    def rule(self) -> StopRule:
        """The stop rule, every field set (``settings.sequential.filled()``)."""
        return self.settings.sequential.filled()

    @property
    def names(self) -> list[str]:
        return [str(m) for m in self.models]
