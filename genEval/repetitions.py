"""Run every model ``repetitions`` times with shared seeds: the evaluations behind a comparison.

A dynamic benchmark draws new samples every run, so a ranking is only worth as much as its stability across
fresh runs (``../seeds/digest.md`` 5.3.5). Repetition ``r`` therefore uses the **same seed for every model**
(same source images, same start noise) and a **fresh seed per repetition**; the seeds are recorded in each
run's ``results.json`` under ``config.comparison``. :func:`genEval.compare.compare` aggregates the runs.
"""

from __future__ import annotations

import inspect
import logging
import re
import secrets
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from genEval.driver import evaluate
from genEval.perturb import SearchConfig

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
        raise ValueError(f"got {len(out)} seeds for {repetitions} repetitions; give one seed per repetition, an "
                         "int to derive them, or null for fresh ones.")
    return out


def check_model_names(names: Sequence[Any]) -> None:
    """Model names become directory names: letters, digits and ``_.+-``, starting with a letter or digit."""
    if not names:
        raise ValueError("compare needs at least one classifier: classifiers={name: classifier, ...}.")
    bad = [n for n in names if not NAME_RE.match(str(n))]
    if bad:
        raise ValueError(f"model names {bad} are not usable as directory names; use letters, digits and _.+- "
                         "(starting with a letter or digit), e.g. resnet20.")


def _is_factory(obj: Any) -> bool:
    """A zero-argument callable that builds a classifier (not a classifier itself, which takes images)."""
    if isinstance(obj, torch.nn.Module) or not callable(obj):
        return False
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return False
    return all(p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in sig.parameters.values())


def _record(name: str, r: int, seed: int, models: list[str], repetitions: int, base: Mapping | None,
            search: SearchConfig) -> dict:
    """The config recorded in a run's results.json: the caller's (or the search) plus who/which repetition."""
    cfg = dict(base or {"search": asdict(search)})
    cfg["comparison"] = {"model": name, "repetition": r, "seed": seed, "repetitions": repetitions, "models": models}
    return cfg


def evaluate_repetitions(
    classifiers: Mapping[str, Any | Callable[[], Any]],
    data: Any,
    generator: Any,
    oracle: Any,
    search: SearchConfig | Mapping | None,
    seeds: Sequence[int],
    out_dir: str | Path,
    *,
    progress: bool | None = True,
    run_configs: Mapping[str, dict] | None = None,
    **evaluate_kwargs: Any,
) -> dict[str, list[str]]:
    """Evaluate every classifier once per seed into ``<out_dir>/runs/<model>/rep<r>``; returns model -> run dirs.

    ``classifiers``: name -> classifier, or name -> zero-argument factory (built when its turn comes and
    released after its repetitions, so one model is in memory at a time). ``run_configs``: per model, the
    config recorded in its results.json. Other keyword arguments go to :func:`genEval.evaluate`.
    """
    names = [str(n) for n in classifiers]
    check_model_names(names)
    for k in ("seed", "output_dir"):
        if k in evaluate_kwargs:
            raise ValueError(f"compare sets {k} itself (seeds=..., out_dir=...); do not pass {k}.")
    search = SearchConfig.coerce(search)
    evaluate_kwargs.setdefault("progress", False)
    show = sys.stderr.isatty() if progress is None else bool(progress)
    log.info("compare: %d models x %d repetitions, seeds %s, out_dir=%s", len(names), len(seeds), list(seeds), out_dir)
    dirs: dict[str, list[str]] = {}
    with tqdm(total=len(names) * len(seeds), desc="compare", unit="run", disable=not show, dynamic_ncols=True) as bar:
        for name, entry in zip(names, classifiers.values()):
            clf = entry() if _is_factory(entry) else entry
            for r, seed in enumerate(seeds):
                bar.set_postfix(model=name, rep=r)
                run_dir = Path(out_dir) / "runs" / name / f"rep{r}"
                config = _record(name, r, seed, names, len(seeds), (run_configs or {}).get(name), search)
                evaluate(clf, data, generator, oracle, search, seed=seed, output_dir=run_dir, config=config,
                         **evaluate_kwargs)
                dirs.setdefault(name, []).append(str(run_dir))
                bar.update(1)
            del clf
    return dirs
