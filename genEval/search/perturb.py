"""The perturbation loop: latent gradient ascent vetted by an oracle (paper Sec. 3.2, Algorithm 1).

For every source image ``x`` with label ``y`` (docs/method.md, "One sample"):

1. ``z0 = E(x)``; the search starts at ``z_0 = z0 + noise`` (seeded per sample, Gaussian with std
   ``start_noise`` x ``step_size`` per latent dim: the noise is measured in search steps); the oracle must
   accept ``D(z_0)`` (start check) or the sample is *not validatable*.
2. For ``t = 1..B``: ``g = grad_z CE(f(D(z_{t-1})), y)``; ``z_t = z_{t-1} + a * step(g) * M`` (gradient
   *ascent*); if the oracle rejects ``D(z_t)`` the step is discarded, the last accepted latent is kept and
   the sample stops.
3. A sample is *validated* when at least one step was accepted; its perturbed image is ``D(z_last)``.

:func:`perturb` is that algorithm, one decode per step: the image the oracle judges at step ``t`` is also
the classifier's input for the gradient of step ``t + 1``. The bookkeeping (the batch of rows, their step counters
and Adam moments, the host syncs) is :class:`genEval.search.rows.SearchRows`, the records are
:mod:`genEval.search.records`; every random draw of a sample is seeded from the sample's own seed (the driver derives
it from the run seed and the source id).
No I/O and no progress bar here: :func:`genEval.search.driver.evaluate` owns batching, writing and resuming.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from genEval.interfaces import (
    Classifier,
    Generator,
    Oracle,
    contract_checked_by_caller,
)
from genEval.runs.settings import UPDATE_RULES, SearchConfig  # noqa: F401 (their old home: imported from here)
from genEval.search.execution import compile_generator_regions
from genEval.search.records import Outcome, Sample, confidence
from genEval.search.rows import RANGE_TOL, REFERENCES, NonFiniteError, SearchRows

log = logging.getLogger(__name__)


__all__ = [
    "RANGE_TOL",
    "REFERENCES",
    "CompiledForward",
    "NonFiniteError",
    "Outcome",
    "Sample",
    "SearchConfig",
    "SearchRows",
    "confidence",
    "perturb",
    "search_forward",
    "step_function",
]


def search_forward(
    generator: Generator, classifier: Classifier, oracle: Oracle, z: Tensor, label: Tensor, reference: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The forward half of one search step for every row, with no host sync (compiled as one graph under
    ``compile=true``): ``x_t = D(z_t)``, the logits ``f(x_t)``, the per-row loss ``CE(f(x_t), y)`` whose
    gradient moves ``z``, and the oracle's verdict on ``x_t`` (accept, score, prediction) for the class it
    must keep seeing. Shapes: ``z`` (B, *latent), ``label``/``reference`` (B,) long; returns ``x`` (B, C, H, W)
    in [0, 1], logits (B, K), loss (B,) fp32, accept (B,) bool, scores (B,) float, predictions (B,) long."""
    x = generator.decode(z)  # x_t = D(z_t); its graph feeds the gradient of the next step
    logits = classifier(x)  # f(x_t)
    loss = F.cross_entropy(logits.float(), label, reduction="none")
    with torch.no_grad():
        verdict = oracle.judge(x.detach(), reference)  # does the oracle still see the class?
    return x, logits, loss, verdict.accept.bool(), verdict.scores, verdict.predictions


class CompiledForward:
    """:func:`search_forward` compiled as one graph for fixed shapes (``fullgraph=True``); ``options`` may name
    ``torch.compile`` keywords (``mode``, ``backend``). A role whose code cannot be traced whole (a graph break in
    a plug-in) does not stop the run: the step is compiled in pieces instead, with one warning naming the break."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = dict(options)
        self.fn = torch.compile(search_forward, fullgraph=True, dynamic=False, **self.options)
        self.whole = True

    def __call__(self, *args: Any) -> tuple[Tensor, ...]:
        try:
            return self.fn(*args)
        except torch._dynamo.exc.Unsupported as err:
            if not self.whole:
                raise
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            log.warning("compile: the search step does not compile as one graph (%s); compiling it in pieces.", reason)
            self.fn, self.whole = torch.compile(search_forward, dynamic=False, **self.options), False
            return self.fn(*args)


def step_function(compile: bool | Mapping[str, Any], generator: Generator) -> Any:
    """The forward half of the step as ``compile`` asks: eager (False); compiled as one graph (True, or
    ``torch.compile`` options such as ``mode`` and ``backend``); or, with ``scope="regional"``, eager around the
    generator's repeated decoder blocks, each compiled once per block type (:func:`compile_generator_regions`)."""
    if not compile:
        return search_forward
    options = {k: v for k, v in (compile.items() if isinstance(compile, Mapping) else ()) if v != "default"}
    if options.pop("scope", "full") == "regional":
        compile_generator_regions(generator, options)
        return search_forward
    return CompiledForward(options)


def perturb(
    samples: Iterable[Sample],
    classifier: Classifier,
    generator: Generator,
    oracle: Oracle,
    cfg: SearchConfig,
    *,
    batch_size: int = 64,
    mask: Tensor | None = None,
    device: torch.device | str = "cpu",
    reference: str = "label",
    compile: bool | Mapping[str, Any] = False,
) -> Iterator[Outcome]:
    """Run Algorithm 1 over a stream of samples, ``batch_size`` rows at a time; yields one Outcome per sample
    as soon as it stops (not in input order). ``mask``: optional 0/1 tensor broadcastable to one latent
    (paper 3.2.1 sparse style dims); it limits both the update and the start noise. ``reference``: the class
    the oracle must keep seeing, the true ``label`` or its own verdict on the clean image. ``compile``: compile
    the step (True, or ``torch.compile`` options and ``scope``: :func:`step_function`); the batch then keeps its size
    to the end, so it compiles once.

    A step makes one host sync (:meth:`SearchRows.sync`: which rows go on, which stopped, what went wrong),
    plus one when samples stop (their records come back to the host in one transfer)."""
    rows = SearchRows(
        samples, classifier, generator, oracle, cfg, batch_size, mask, torch.device(device), reference, bool(compile)
    )
    forward = step_function(compile, generator)
    while rows.refill():  # rows that stopped take the next sources: z_0 = E(x) + noise, t = 0
        with contract_checked_by_caller():  # the loop checks x itself, without a host sync (SearchRows.judge)
            x, logits, loss, accept, scores, preds = forward(
                generator, classifier, oracle, rows.z, rows.label, rows.reference
            )
        rows.judge(x.detach(), logits.detach(), loss.detach(), accept, scores, preds)  # t = 0: start check; t >= 1:
        if rows.sync():  # accept, or reject + stop. True while some row takes another step
            (g,) = torch.autograd.grad((loss * rows.searching).sum(), rows.z)  # grad_z CE(f(D(z_t)), y)
            rows.step(g)  # z_{t+1} = z_t + a * step(g) * M on the rows still searching
        yield from rows.finished()
