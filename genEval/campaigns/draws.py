"""A data set's draw for one repetition or round of a comparison: its seed, and how many sources it takes.

A dynamic benchmark draws fresh sources per repetition (docs/method.md, "Why a generated test set"); every model of
repetition ``r`` must get the same draw to stay paired. The engine asks the data through two optional hooks
(:data:`genEval.interfaces.HOOKS`): ``with_seed(seed)`` re-draws the random ``limit`` subset from ``seed``, and
``with_limit(n)`` draws ``n`` sources (a round of ``stop=settled`` draws its ``round_sources``: the count is a
parameter of the draw, not an edited config). Data without a hook keep what they draw.
"""

from __future__ import annotations

import logging
from typing import Any

from genEval.interfaces import component_id, hook

log = logging.getLogger(__name__)


def data_for_seed(data: Any, seed: int) -> tuple[Any, bool]:
    """The data set of one repetition and whether it was re-drawn with ``seed``.

    ``data.with_seed(seed)`` when the data object has that method (re-drawn unless it returns itself),
    ``data(seed)`` when ``data`` is a factory (a callable that is not itself a data set), else ``data``
    unchanged (``False``).
    """
    with_seed = hook(data, "with_seed")
    if callable(with_seed):
        drawn = with_seed(int(seed))
        return drawn, drawn is not data  # the same object back: nothing to re-draw (subset=first, fixed seed)
    if callable(data) and not hasattr(data, "__getitem__"):
        return data(int(seed)), True
    return data, False


def with_sources(data: Any, n: int) -> Any:
    """``data`` drawing ``n`` sources per draw (``data.with_limit(n)``); data without the hook (a toy data set, or
    a factory ``seed -> data``) are returned as they are: they draw what they draw, and each run records how many."""
    with_limit = hook(data, "with_limit")
    if not callable(with_limit):
        return data
    limited = with_limit(int(n))
    if limited is not data:
        log.info("%s draws %d sources per round", component_id(data), n)
    return limited


def source_ids(data: Any) -> list[str]:
    """Every source id of ``data``, without reading images when it can tell them (``source_id(i)``)."""
    get = hook(data, "source_id")
    return [str(get(i)) if callable(get) else str(data[i][2]) for i in range(len(data))]
