"""No model judged by itself: refuse to compare a classifier that is (part of) the oracle.

The oracle vetoes every step that changes its own verdict, so with ``rule=all`` every accepted image is one each
member of the oracle still classifies correctly: a compared model that is a member has PA = 100 by construction,
and its FMR says nothing about it (the offline default used to rank two such models; docs/comparing.md). A compared
model is a member when a module inside the oracle holds exactly its weights: the same tensors, in the same order and
shapes, whatever the wrapper's key names (a ``ClassifierOracle`` around the same ``ImageClassifier``, or around
its bare network). Weights, not config spellings, decide, so two configs that build the same model are caught
and two seeds of one architecture are not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from genEval.interfaces import component_id

log = logging.getLogger(__name__)


def _tensors(module: nn.Module) -> list[torch.Tensor]:
    return [t for t in module.state_dict().values() if isinstance(t, torch.Tensor)]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(a, b)
    )


def _judges(oracle: Any) -> list[nn.Module]:
    """The modules inside the oracle that hold weights (the oracle itself when it is a module)."""
    if not isinstance(oracle, nn.Module):
        return []
    return [m for m in oracle.modules() if _tensors(m)]


def oracle_members(
    classifiers: Mapping[str, Any], oracle: Any, build: Callable[[Any], Any] = lambda entry: entry
) -> list[str]:
    """Names of the classifiers whose weights some module inside ``oracle`` holds. ``build`` turns an entry of
    ``classifiers`` into the model (a factory is called; the model is released before the next one is built).

    An oracle that is not an ``nn.Module`` (an external judge) holds no weights to compare, so nothing matches.
    """
    judges = _judges(oracle)
    if not judges:
        return []
    signatures: dict[int, list[tuple]] = {}
    found = []
    for name, entry in classifiers.items():
        model = build(entry)
        own = _tensors(model) if isinstance(model, nn.Module) else []
        del model
        if not own:
            continue
        shape = [tuple(t.shape) for t in own]
        for judge in judges:
            sig = signatures.setdefault(id(judge), [tuple(t.shape) for t in _tensors(judge)])
            if sig == shape and _same(own, _tensors(judge)):
                found.append(str(name))
                break
    return found


def check_not_judging(
    classifiers: Mapping[str, Any],
    oracle: Any,
    allow: bool = False,
    build: Callable[[Any], Any] = lambda entry: entry,
) -> list[str]:
    """Refuse (ValueError naming them) to compare models that are members of ``oracle``, unless ``allow``; returns
    the members found (logged as a warning when allowed)."""
    members = oracle_members(classifiers, oracle, build)
    if members and not allow:
        who = component_id(oracle)
        raise ValueError(
            f"{', '.join(members)} {'is' if len(members) == 1 else 'are'} part of the oracle ({who}): the oracle keeps "
            "only images its members still classify correctly, so their PA is 100 and their FMR meaningless by "
            "construction. Compare models the oracle does not contain (the oracle zoo's members are other "
            "architectures or seeds), pick another oracle, or set allow_self_judging=true to compare them anyway."
        )
    if members:
        log.warning("allow_self_judging: %s judged by an oracle that contains them (PA 100 by construction)", members)
    return members
