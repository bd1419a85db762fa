"""A zoo of oracles that must agree (the ICLR 2024 version of the paper: "a zoo of foundation models"
replaces the single CLIP judge, so that one model's blind spot cannot validate a semantic change;
docs/method.md, "The actors" and "Choices the paper leaves open": all must agree by default).

Rules:

* ``all`` (default): an image is accepted only when every member accepts it.
* ``majority``: accepted when a strict majority of members accept it (more than half).

The zoo's score is the mean of the members' scores (each the member's probability for the true
label); its prediction is the majority vote of the members' predictions, ties going to the lowest
class index. An optional zoo-level ``threshold`` additionally requires the mean score to reach it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import torch
from torch import Tensor, nn

from genEval.interfaces import Judgement, SettingError
from oracles.classifier import check_reference, check_threshold

log = logging.getLogger(__name__)

RULES = ("all", "majority")


def majority_vote(predictions: Tensor) -> Tensor:
    """Most frequent class per column of ``predictions`` (M, B) long; ties go to the lowest class index."""
    votes = (predictions[:, None, :] == predictions[None, :, :]).sum(dim=1)  # (M, B): votes for member i's class
    most = votes == votes.max(dim=0, keepdim=True).values  # members whose class has the most votes
    # the lowest such class; no class count is read back to the host (the search step stays free of syncs)
    return torch.where(most, predictions, torch.iinfo(predictions.dtype).max).min(dim=0).values


class ZooOracle(nn.Module):
    """Several oracles judging together.

    Args:
        members: the judges, each an ``nn.Module`` with ``prepare``/``judge`` (registered in an
            ``nn.ModuleList`` so ``.to(device)`` moves them all).
        rule: ``"all"`` (every member must accept; paper default) or ``"majority"`` (strict majority).
        name: stable id for results; default ``"zoo(<rule>):[<member names>]"``.
        threshold: when set, acceptance also requires the mean member score >= threshold.
        reference: the class the zoo must keep seeing, ``label`` or ``clean_prediction`` (the zoo's own
            verdict on the clean image, i.e. its majority vote); the members' own settings are not used.
    """

    def __init__(
        self,
        members: Iterable[nn.Module],
        rule: str = "all",
        name: str | None = None,
        threshold: float | None = None,
        reference: str = "label",
    ) -> None:
        super().__init__()
        members = list(members) if members is not None else []
        if not members:
            raise ValueError(
                "ZooOracle needs at least one member oracle, got none. List them under "
                "oracle.members (e.g. ClassifierOracle or CLIPOracle configs)."
            )
        for i, m in enumerate(members):
            if (
                not isinstance(m, nn.Module)
                or not callable(getattr(m, "judge", None))
                or not callable(getattr(m, "prepare", None))
            ):
                raise TypeError(
                    f"ZooOracle member {i} is a {type(m).__name__}; members must be nn.Module "
                    "oracles with prepare(class_names) and judge(images, labels) (e.g. "
                    "oracles.classifier.ClassifierOracle, oracles.clip.CLIPOracle)."
                )
        if rule not in RULES:
            raise SettingError(
                "rule",
                rule,
                f"one of {', '.join(RULES)} ('all': every member must accept, 'majority': more than half must)",
                "all",
            )
        self.members = nn.ModuleList(members)
        self.rule = rule
        self.threshold = check_threshold(threshold, "ZooOracle")
        self.reference = check_reference(reference, "ZooOracle")
        member_names = [str(getattr(m, "name", type(m).__name__)) for m in members]
        self.name = name or f"zoo({rule}):[{', '.join(member_names)}]"

    def prepare(self, class_names: list[str]) -> None:
        """Prepare every member for ``class_names`` (each raises if it cannot handle them)."""
        for m in self.members:
            m.prepare(class_names)

    @torch.no_grad()
    def judge(self, images: Tensor, labels: Tensor) -> Judgement:
        """Combine the members' judgements on ``images`` (B, C, H, W) in [0, 1] with ``labels`` (B,)."""
        verdicts = [m.judge(images, labels) for m in self.members]
        device = verdicts[0].accept.device
        accepts = torch.stack([v.accept.to(device) for v in verdicts])  # (M, B)
        scores = torch.stack([v.scores.float().to(device) for v in verdicts]).mean(dim=0)
        predictions = majority_vote(torch.stack([v.predictions.long().to(device) for v in verdicts]))
        if self.rule == "all":
            accept = accepts.all(dim=0)
        else:
            accept = accepts.sum(dim=0) * 2 > len(self.members)
        if self.threshold is not None:
            accept = accept & (scores >= self.threshold)
        return Judgement(accept=accept, scores=scores, predictions=predictions)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, rule={self.rule!r}, threshold={self.threshold}, reference={self.reference!r}"
