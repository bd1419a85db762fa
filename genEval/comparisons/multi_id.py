"""Multi-ID effective robustness of a finished comparison (Shi et al. 2023, eq. 3; the fit is
:mod:`genEval.scores.multi_id`).

``geneval compare 'id_data=[digits,digits_noisy]'``: the first ID set is the search's own data (its SA is the
leaderboard's, over the repetitions' sources); every further set is scored by the campaign, each model classifying
all of its images once (:func:`genEval.campaigns.id_sets.score_id_sets`, written to
``<out_dir>/id_sets/<model>.json`` atomically and reused by a rerun with the same sets). :func:`attach_multi_id` fits
the line and the plane on the comparison's baselines and puts the :class:`~genEval.scores.multi_id.MultiIDFit` (with
bootstrap intervals: the comparison's sources and each ID set's images resampled) into the comparison. A model's
``family`` (its training-data group: ``families`` of the zoo, or ``families={model: group}``) groups the ER
summaries.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from genEval.comparisons.leaderboard import Comparison, write_comparison
from genEval.comparisons.loading import load_runs
from genEval.comparisons.settings import ComparisonSettings
from genEval.interfaces import component_id
from genEval.scores.intervals import model_draws
from genEval.scores.multi_id import fit_plane, needed_baselines, plane_intervals

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IDSetScores:
    """One model on one ID set: the set's name and data id, its source ids and whether the model was right on each."""

    name: str
    data: str
    ids: list[str]
    correct: np.ndarray

    @property
    def sa(self) -> float:
        return 100.0 * float(self.correct.mean()) if len(self.correct) else float("nan")


def check_plane_baselines(baselines: Sequence[str] | None, id_sets: Sequence[str]) -> None:
    """Refuse, before any run, a multi-ID comparison with fewer named baselines than its plane needs."""
    need, k = needed_baselines(len(id_sets)), len(id_sets)
    have = 0 if baselines is None else len(baselines)
    if have < need:
        raise ValueError(
            f"id_data={list(id_sets)}: a multi-ID plane over {k} ID sets has {k + 1} coefficients and needs at least "
            f"{need} baselines, but {have} are named ({', '.join(baselines or []) or 'none'}). Name at least {need} "
            "baselines (baselines=[...], standard models trained on the sets' distributions), or use fewer ID sets."
        )


def id_sets_file(out_dir: str | Path, model: str) -> Path:
    """Where a comparison keeps one model's ID-set scores."""
    return Path(out_dir) / "id_sets" / f"{model}.json"


def _parse(path: Path) -> dict[str, IDSetScores]:
    d = json.loads(path.read_text(encoding="utf-8"))
    return {n: IDSetScores(n, s["data"], list(s["ids"]), np.asarray(s["correct"], bool)) for n, s in d["sets"].items()}


def saved_id_sets(path: Path, sets: Mapping[str, Any]) -> dict[str, IDSetScores] | None:
    """The saved scores when they cover exactly these sets (same names and data ids), else None."""
    if not path.is_file():
        return None
    found = _parse(path)
    want = {n: component_id(data) for n, data in sets.items()}
    return found if {n: s.data for n, s in found.items()} == want else None


def load_id_sets(out_dir: str | Path, models: Sequence[str]) -> dict[str, dict[str, IDSetScores]]:
    """The ID-set scores a comparison saved (``<out_dir>/id_sets/<model>.json``), e.g. to refit the plane in other
    axes (:func:`attach_multi_id` with other settings)."""
    missing = [m for m in models if not id_sets_file(out_dir, m).is_file()]
    if missing:
        raise FileNotFoundError(f"no ID-set scores of {missing} under {Path(out_dir) / 'id_sets'}; run with id_data=.")
    return {m: _parse(id_sets_file(out_dir, m)) for m in models}


def _id_draws(scores: Sequence[IDSetScores], n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(B, M) SA of every model on one ID set in each bootstrap resample of that set's images (one resample for all
    models: paired)."""
    correct = np.stack([s.correct.astype(float) for s in scores], axis=1)  # (N, M), the same images in order
    counts = rng.multinomial(len(correct), np.full(len(correct), 1.0 / len(correct)), size=n_boot).astype(float)
    return 100.0 * counts @ correct / len(correct)


def attach_multi_id(
    comp: Comparison,
    id_scores: Mapping[str, Mapping[str, IDSetScores]],
    id_sets: Sequence[str],
    families: Mapping[str, str] | None = None,
    settings: ComparisonSettings | None = None,
    write: bool = True,
) -> Comparison:
    """The comparison with its multi-ID effective robustness (``comp.multi_id``); with ``write`` and an
    ``out_dir`` its files are rewritten. ``id_sets``: the names of all ID sets, the search's own first;
    ``id_scores``: model -> set name -> scores for the others."""
    settings = ComparisonSettings.coerce(settings)
    models = comp.models
    sets = [str(s) for s in id_sets]
    unknown = sorted(set(families or {}) - set(models))
    if unknown:
        raise ValueError(f"families name models that are not compared: {unknown}; models: {', '.join(models)}.")
    for m in models:
        missing = [s for s in sets[1:] if s not in id_scores.get(m, {})]
        if missing:
            raise ValueError(
                f"multi-ID: no scores of {m} on ID set(s) {missing}; score them with "
                "genEval.campaigns.id_sets.score_id_sets."
            )
    sa = [[comp.row(m)["sa"].value, *(id_scores[m][s].sa for s in sets[1:])] for m in models]
    fit = fit_plane(
        models,
        sets,
        sa,
        [comp.row(m)["pa"].value for m in models],
        comp.effective_robustness.baselines,
        [None if families is None else families.get(m) for m in models],
        scale=settings.er_scale,
        min_r2=settings.er_min_r2,
        floor=settings.er_floor,
    )
    runs = load_runs({m: [d for d in comp.runs[m] if (Path(d) / "results.json").is_file()] for m in models})
    num_classes = int(comp.settings.num_classes)
    reps = [[r.outcomes for r in runs[m]] for m in models]
    _, draws, g = model_draws(reps, num_classes, ("sa", "pa"), settings.n_boot, settings.seed)
    rng = np.random.default_rng([settings.seed, 43])
    extra = [_id_draws([id_scores[m][s] for m in models], len(draws), rng) for s in sets[1:]]
    sa_draws = np.stack([draws[:, :, 0], *extra], axis=2)  # (B, M, k)
    fit = plane_intervals(
        fit,
        sa_draws,
        draws[:, :, 1],
        settings.level,
        f"bootstrap({len(draws)}) over the {g} search sources (SA and PA) and each further ID set's images, plane "
        "refitted per resample",
    )
    comp = replace(comp, multi_id=fit)
    return write_comparison(comp, comp.out_dir) if write and comp.out_dir else comp
