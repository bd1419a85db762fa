"""A settled version's reuse budget (docs/scores.md; Miller 2022 ch. 3; :mod:`genEval.scores.reuse`): from the finished
models' per-source correctness on the version's shared rounds, computed by the worker after each job it finishes and
stored with the version (:meth:`~genEval.service.server.benchmarks.store.BenchmarkStore.set_reuse`), so a page or
``GET /api/benchmarks`` reads it instead of re-reading every run.

A point of the shared test set is one source of one round (``"<round>:<source id>"``: round ``r`` of every model drew
the same sources); a model's query on it is its 0-1 loss on the source's final (perturbed) image, the per-source
outcome behind its PA and FMR.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from genEval.runs.reader import RunDir
from genEval.scores.reuse import DELTA, EPSILON, reuse_budget


def correctness(rounds: Sequence[RunDir]) -> dict[str, bool]:
    """A model's correctness on each point of the shared rounds: ``"<round>:<source id>"`` -> final image right."""
    return {f"{r}:{rec.source_id}": rec.final_pred == rec.label for r, run in enumerate(rounds) for rec in run.samples}


def version_budget(models: Mapping[str, Sequence[RunDir]], reuse: Mapping[str, Any] | None) -> dict[str, Any]:
    """The reuse budget (:class:`~genEval.scores.reuse.ReuseBudget` as a dict, with its one-line ``text``) of the
    models (job id -> their rounds' runs) at the version's ``reuse`` epsilon and delta (defaults 0.01 and 0.05)."""
    settings = dict(reuse or {})
    budget = reuse_budget(
        {m: correctness(runs) for m, runs in models.items()},
        float(settings.get("epsilon", EPSILON)),
        float(settings.get("delta", DELTA)),
    )
    return budget.to_dict() | {"text": budget.describe()}
