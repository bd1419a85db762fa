"""The further ID sets of a multi-ID comparison, scored (Shi et al. 2023, eq. 3: every model's clean accuracy on
every ID set; the fit is :func:`genEval.comparisons.multi_id.attach_multi_id`).

``geneval compare 'id_data=[digits,digits_noisy]'``: the first ID set is the search's own data; every further set is
scored here, each model classifying all of its images once, written to ``<out_dir>/id_sets/<model>.json``
atomically and reused by a rerun with the same sets.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from genEval.campaigns.clean_scoring import check_classes, image_batches, per_model, predict_correct
from genEval.comparisons.multi_id import IDSetScores, id_sets_file, saved_id_sets
from genEval.fileio import atomic_write_json
from genEval.interfaces import hook
from genEval.search.execution import Execution

log = logging.getLogger(__name__)


def score_id_sets(
    classifiers: Mapping[str, Any],
    id_sets: Mapping[str, Any],
    out_dir: str | Path,
    execution: Execution | None = None,
    batch_size: int = 256,
) -> dict[str, dict[str, IDSetScores]]:
    """Every model's clean predictions on every set of ``id_sets`` (name -> data set), written per model to
    ``<out_dir>/id_sets/<model>.json``; a model whose file already holds these sets is not scored again. Each set's
    images are read once and held for all models (ID test sets are test-set sized; a corrupted set is corrupted
    once)."""

    batches: dict[str, list] = {}  # a set's images, read (and corrupted) once for every model

    def read(set_name: str, data: Any) -> list:
        if set_name not in batches:
            batches[set_name] = list(image_batches(data, batch_size))
        return batches[set_name]

    def score(name: str, clf: Any, device: Any) -> dict[str, IDSetScores]:
        out = {}
        for set_name, data in id_sets.items():
            check_classes(name, clf, list(data.class_names), f"ID set {set_name}")
            ids, correct = [], []
            for x, y, sid in read(set_name, data):
                correct.append(predict_correct(clf, x, y, device))
                ids += sid
            out[set_name] = IDSetScores(set_name, str(hook(data, "name") or set_name), ids, np.concatenate(correct))
            log.info("multi-ID: %s has SA %.2f on %s (%d images)", name, out[set_name].sa, set_name, len(ids))
        atomic_write_json(
            id_sets_file(out_dir, name),
            {
                "model": name,
                "sets": {
                    s.name: {"data": s.data, "ids": s.ids, "correct": s.correct.astype(int).tolist()}
                    for s in out.values()
                },
            },
        )
        return out

    done = {m: r for m in classifiers if (r := saved_id_sets(id_sets_file(out_dir, m), id_sets)) is not None}
    todo = {m: e for m, e in classifiers.items() if m not in done}
    if done:
        log.info("multi-ID: ID-set scores of %s read back from %s/id_sets", ", ".join(done), out_dir)
    id_sets_file(out_dir, "x").parent.mkdir(parents=True, exist_ok=True)
    return {**done, **per_model(todo, score, execution)}
