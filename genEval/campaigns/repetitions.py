"""Run every model ``repetitions`` times with shared seeds: the evaluations behind a comparison.

A dynamic benchmark draws new samples every run, so a ranking is only worth as much as its stability across
fresh runs (docs/method.md, "Rank stability"). Repetition ``r`` therefore uses the **same seed for every model**
(same source images, same start noise) and a **fresh seed per repetition**; the seeds are recorded in each
run's ``results.json`` under ``config.comparison``. :func:`genEval.campaigns.run.run_campaign` aggregates the runs.

Fresh sources per repetition (docs/method.md): repetitions that only differ by the start noise measure nothing
about sampling. The data are therefore re-drawn per repetition through one documented hook,
:func:`genEval.campaigns.draws.data_for_seed`: a data object with a ``with_seed(seed) -> data`` method (the same data
options with the subset seed replaced, e.g. ``data.subset=random`` with ``data.limit``), or a factory ``seed -> data``
(what ``geneval compare`` passes when the data config has a ``seed`` key). All models of repetition ``r``
get the same draw (seed ``r``), so they stay paired. Data without either keep their sources, and the
comparison says so (its repetitions then share their sources; see :mod:`genEval.comparisons.aggregate`).

Where the evaluations run is an executor's business (:mod:`genEval.campaigns.executors`): the models and seeds
become one task per (model, repetition) (:class:`~genEval.campaigns.executors.EvalTask`), evaluated by a
:class:`RepetitionRunner` one after the other here (the default), or as Ray tasks or Slurm jobs, with the same result.

``mask=auto`` (paper 3.2.1): one mask per (data set, generator), fitted once with a named reference model
(:func:`fit_comparison_mask`: :func:`genEval.search.driver.evaluate` with the :class:`~genEval.masks.AutoMask`
into ``<out_dir>/mask``) and reused for every model and repetition; its fit samples are scored by no model.
"""

from __future__ import annotations

import logging
import re
import secrets
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from genEval.campaigns.draws import data_for_seed, source_ids
from genEval.campaigns.executors import EvalTask, Executor, LocalExecutor
from genEval.campaigns.plan import EvaluationPlan, Setup
from genEval.data.base import SubsetData
from genEval.interfaces import build_entry
from genEval.masks import AutoMask, FixedMask, StyleMask
from genEval.runs.reader import read_samples
from genEval.runs.recording import RunOutput
from genEval.scores.run_scores import Scoring
from genEval.search.driver import evaluate
from genEval.search.execution import Execution
from genEval.search.perturb import SearchConfig

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


def derive_seeds(seed: int | None, repetitions: int) -> list[int]:
    """One seed per repetition: fresh ones for ``seed=None``, else derived reproducibly from ``seed``."""
    if seed is None:
        return [secrets.randbits(31) for _ in range(repetitions)]
    return [int(np.random.SeedSequence([int(seed), r]).generate_state(1)[0] & 0x7FFFFFFF) for r in range(repetitions)]


def repetition_seeds(seeds: Sequence[int] | int | None, repetitions: int) -> list[int]:
    """``seeds`` as one seed per repetition: a list (checked), an int to derive them, or None for fresh ones."""
    if not isinstance(repetitions, int) or repetitions < 1:
        raise ValueError(f"repetitions must be an integer >= 1, got {repetitions!r}.")
    if seeds is None or isinstance(seeds, int):
        return derive_seeds(seeds, repetitions)
    out = [int(s) for s in seeds]
    if len(out) != repetitions:
        raise ValueError(
            f"got {len(out)} seeds for {repetitions} repetitions; give one seed per repetition, an "
            "int to derive them, or null for fresh ones."
        )
    return out


def check_model_names(names: Sequence[Any]) -> None:
    """Model names become directory names: letters, digits and ``_.+-``, starting with a letter or digit."""
    if not names:
        raise ValueError("compare needs at least one classifier: classifiers={name: classifier, ...}.")
    bad = [n for n in names if not NAME_RE.match(str(n))]
    if bad:
        raise ValueError(
            f"model names {bad} are not usable as directory names; use letters, digits and _.+- "
            "(starting with a letter or digit), e.g. resnet20."
        )


@dataclass(frozen=True)
class ComparisonMask:
    """The one style mask of a comparison: fitted with ``reference`` on its fit samples ``fit_ids``."""

    mask: StyleMask
    reference: str
    fit_ids: frozenset[str]
    path: str

    @property
    def mask_id(self) -> str:
        return f"auto:{self.reference}:{self.mask.sha256[:16]}"

    def record(self) -> dict:
        return {"reference": self.reference, "id": self.mask_id, "path": self.path, "fit_samples": len(self.fit_ids)}

    def scored_part(self, data: Any) -> SubsetData:
        """``data`` without the samples the mask was fitted on (no scored image helped choose its mask)."""
        keep = [i for i, sid in enumerate(source_ids(data)) if sid not in self.fit_ids]
        return SubsetData(data, keep, "mask-scored")


def fit_comparison_mask(
    auto: AutoMask,
    reference: str,
    classifier: Any,
    data: Any,
    generator: Any,
    oracle: Any,
    search: SearchConfig,
    seed: int,
    out_dir: str | Path,
    *,
    execution: Execution | None = None,
    output: RunOutput | None = None,
    scoring: Scoring | None = None,
    oracle_reference: str | None = None,
) -> ComparisonMask:
    """Fit the comparison's one mask: ``evaluate(reference, data, mask=auto)`` into ``<out_dir>/mask`` (a dense
    pass over the fit samples, the fit, then the reference's masked run on the rest), then read the mask and
    the fit samples back from there. ``execution``, ``output`` (its directory is ``<out_dir>/mask``), ``scoring``
    and ``oracle_reference`` (evaluate's ``reference``): what the run is evaluated with."""
    where = Path(out_dir) / "mask"
    log.info("compare: mask=auto fitted once with reference model %s into %s", reference, where)
    out = replace(RunOutput.coerce(output), dir=where)
    evaluate(
        classifier,
        data,
        generator,
        oracle,
        search,
        seed=seed,
        execution=execution,
        mask=auto,
        output=out,
        scoring=scoring,
        reference=oracle_reference,
    )
    fitted = StyleMask.load(where / "style_mask.safetensors")
    fit_ids = frozenset(str(r.source_id) for r in read_samples(where / "mask_fit"))
    return ComparisonMask(fitted, reference, fit_ids, str(where / "style_mask.safetensors"))


def _record(
    name: str,
    r: int,
    seed: int,
    models: list[str],
    repetitions: int,
    base: Mapping | None,
    search: SearchConfig,
    data_seeded: bool,
    mask: ComparisonMask | None,
    extra: Mapping | None = None,
) -> dict:
    """The config recorded in a run's results.json: the caller's (or the search) plus who/which repetition,
    the data seed of the repetition (None: the data were not re-drawn), the comparison's mask and ``extra``
    (e.g. the generator's name in a generator ablation)."""
    cfg = dict(base or {"search": asdict(search)})
    cfg["comparison"] = {
        "model": name,
        "repetition": r,
        "seed": seed,
        "repetitions": repetitions,
        "models": models,
        "data_seed": seed if data_seeded else None,
        **({"mask": mask.record()} if mask is not None else {}),
        **(extra or {}),
    }
    return cfg


@dataclass
class RepetitionRunner:
    """Evaluates one task of a comparison (:class:`~genEval.campaigns.executors.EvalTask`): ``genEval.evaluate`` of
    the task's model on the data drawn from its repetition's seed (:func:`~genEval.campaigns.draws.data_for_seed`;
    without the mask's fit samples under ``mask``), into the task's run directory.

    An executor ships it (pickled) to its workers, where each task builds its classifier from its factory and
    re-draws its data. In one process, consecutive tasks of one model share one build, released before the next
    model is built (one model in memory at a time).
    """

    classifiers: Mapping[str, Any]
    data: Any
    generator: Any
    oracle: Any
    search: SearchConfig
    fitted: ComparisonMask | None
    mask: Any
    execution: Execution | None
    output: RunOutput
    scoring: Scoring | None
    reference: str | None
    _built: tuple[str, Any] | None = field(default=None, init=False, repr=False)

    def __call__(self, task: EvalTask) -> str:
        data, _ = data_for_seed(self.data, task.seed)
        if self.fitted is not None:
            data = self.fitted.scored_part(data)
        evaluate(
            self._classifier(task.model),
            data,
            self.generator,
            self.oracle,
            self.search,
            seed=task.seed,
            mask=self.mask,
            execution=self.execution,
            output=replace(self.output, dir=task.run_dir),
            scoring=self.scoring,
            reference=self.reference,
            config=task.config,
        )
        return task.run_dir

    def _classifier(self, name: str) -> Any:
        if self._built is None or self._built[0] != name:
            self._built = None  # the previous model goes before the next one is built
            self._built = (name, build_entry(self.classifiers[name]))
        return self._built[1]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_built": None}  # a worker builds its own model


def evaluate_repetitions(
    models: Mapping[str, Any | Callable[[], Any]],
    setup: Setup,
    plan: EvaluationPlan,
    seeds: Sequence[int],
    out_dir: str | Path,
    *,
    record: Mapping | None = None,
    executor: Executor | None = None,
    first_repetition: int = 0,
) -> dict[str, list[str]]:
    """Evaluate every model once per seed into ``<out_dir>/runs/<model>/rep<r>``; returns model -> run dirs.

    ``models``: name -> classifier, or name -> zero-argument factory (built when its turn comes and released after
    its repetitions, so one model is in memory at a time). ``setup``: the data (re-drawn per repetition,
    :func:`genEval.campaigns.draws.data_for_seed`), generator, oracle, search (None: the plan's) and the config recorded
    per model. ``plan``: what every run is evaluated with; an :class:`AutoMask` is fitted once with the model
    ``plan.mask_reference`` (:func:`fit_comparison_mask`) and reused for all; per-run progress is off (``plan.progress``
    shows the comparison's). ``record``: extra entries of every run's ``config.comparison`` record. ``executor``: where
    the (model, repetition) evaluations run (:mod:`genEval.campaigns.executors`; None: one after the other in this
    process). ``first_repetition``: the index of the first seed's repetition (a round of ``stop=settled`` runs one
    repetition at a time: ``rep<r>``).
    """
    names, mask = [str(n) for n in models], plan.mask
    check_model_names(names)
    if isinstance(mask, AutoMask) and plan.mask_reference not in names:
        raise ValueError(
            f"mask=auto in a comparison fits one mask with a reference model: set mask_reference to "
            f"one of {', '.join(names)} (got {plan.mask_reference!r})."
        )
    search = SearchConfig.coerce(plan.search if setup.search is None else setup.search)
    output = replace(RunOutput.coerce(plan.output), progress=False)
    show = sys.stderr.isatty() if plan.progress is None else bool(plan.progress)
    log.info("compare: %d models x %d repetitions, seeds %s, out_dir=%s", len(names), len(seeds), list(seeds), out_dir)
    drawn = [data_for_seed(setup.data, s) for s in seeds]
    datas, seeded = [d for d, _ in drawn], all(ok for _, ok in drawn)
    if not seeded and len(seeds) > 1:
        log.warning(
            "compare: the data have no with_seed(seed) hook, so every repetition evaluates the same "
            "sources (set data.subset=random with data.limit for fresh draws)."
        )
    fitted = None
    if isinstance(mask, AutoMask):
        ref = plan.mask_reference
        fitted = fit_comparison_mask(
            mask,
            ref,
            build_entry(models[ref]),
            datas[0],
            setup.generator,
            setup.oracle,
            search,
            seeds[0],
            out_dir,
            execution=plan.execution,
            output=output,
            scoring=plan.scoring,
            oracle_reference=plan.reference,
        )
        mask = FixedMask(fitted.mask.as_tensor(), fitted.mask_id)
    runner = RepetitionRunner(
        dict(zip(names, models.values())), setup.data, setup.generator, setup.oracle, search, fitted, mask,
        plan.execution, output, plan.scoring, plan.reference,
    )  # fmt: skip
    total = first_repetition + len(seeds)
    tasks = [
        EvalTask(name, r, seed, str(Path(out_dir) / "runs" / name / f"rep{r}"), _record(
            name, r, seed, names, total, (setup.run_configs or {}).get(name), search, seeded, fitted, record))
        for name in names
        for r, seed in enumerate(seeds, start=first_repetition)
    ]  # fmt: skip
    (executor or LocalExecutor()).run(runner, tasks, workdir=out_dir, progress=show)
    return {name: [t.run_dir for t in tasks if t.model == name] for name in names}
