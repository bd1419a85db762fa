"""The per-sample records of the search (paper Sec. 3.2, Algorithm 1; docs/scores.md): :class:`Sample` in,
:class:`Outcome` out, the classifier's :func:`confidence` kept with each, and :func:`read_outcomes`, which brings the
records of the rows that stopped back to the host in one transfer (:class:`genEval.search.rows.SearchRows` calls it;
each host sync stalls a GPU until the host has read).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from genEval.interfaces import Generator, hook
from genEval.scores.outcomes import TOP_K, SampleRecord

#: The per-row numbers an Outcome records (with the oracle score and the distances).
_RECORDED = (
    "label",
    "reference",
    "oracle_clean_pred",
    "clean_pred",
    "recon_pred",
    "start_ok",
    "accepted",
    "rejected_at",
    "first_fooled",
    "final_pred",
    "oracle_start_pred",
)


#: The clean image's confidence, computed when a source is prepared and copied into its row.
CLEAN = ("clean_top_p", "clean_top_c", "clean_entropy")
#: The per-row confidence read back with a finished sample's record, in the record's order.
_CONFIDENCE = (*CLEAN, "final_top_p", "final_top_c", "final_entropy", "final_probs", "oracle_final_pred")
#: Decimals of the probabilities and entropies a record keeps (float32 carries about 7 significant digits).
_DECIMALS = 6


def confidence(logits: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The classifier's confidence in its answer for a batch of logits (B, K): the top-``min(TOP_K, K)`` softmax
    probabilities (B, k) in descending order and their classes (B, k), the softmax's entropy (B,) in nats (0 for a
    one-hot answer, ln K for a uniform one) and the softmax itself (B, K), all in fp32 (records: docs/scores.md)."""
    probs = logits.detach().float().softmax(1)
    top_p, top_c = probs.topk(min(TOP_K, probs.shape[1]), dim=1)
    entropy = -torch.special.xlogy(probs, probs).sum(1)
    return top_p, top_c, entropy, probs


def _rounded(values: list[float]) -> tuple[float, ...]:
    return tuple(round(float(v), _DECIMALS) for v in values)


@dataclass(frozen=True)
class Sample:
    """One source image entering the search.

    ``x``: (C, H, W) float in [0, 1]; ``label``: the true class ``y``; ``seed``: seeds every random draw of
    this sample (the driver derives it from the run seed and the source id); ``index``: the sample's
    position in the data set (records are sorted by it).
    """

    x: Tensor
    label: int
    source_id: str
    seed: int
    index: int = 0


@dataclass(frozen=True, kw_only=True)
class Outcome(SampleRecord):
    """What the search did to one sample: its :class:`~genEval.scores.outcomes.SampleRecord` (the per-sample record
    of ``samples.jsonl``; :meth:`record` gives it alone) with its tensors, on the CPU.

    ``reference``: the class the oracle had to keep seeing (``label``, or its own verdict on the clean image,
    ``oracle_clean_pred``, under ``reference="clean_prediction"``). ``image``: ``D(z_last_accepted)`` (the start
    image ``D(z_0)`` when nothing was accepted); ``final_pred`` is the classifier's class for ``image``.
    ``recon_pred``: its class for the noiseless reconstruction ``D(E(x))`` (RA). ``latent`` / ``start_latent``: the
    final latent and ``E(x)`` as the decoder sees them: snapped to the codebook when the generator quantises
    (``generator.decoded_latents``, e.g. VQGAN ``straight_through``), so a style mask is fitted on the quantised
    latents the paper decodes (Sec. 3.2.1).
    """

    original: Tensor
    image: Tensor
    start_image: Tensor
    latent: Tensor
    start_latent: Tensor


def read_outcomes(slots: dict[str, Any], rows: list[int], pick: Tensor, generator: Generator) -> Iterator[Outcome]:
    """The :class:`Outcome` of each of ``rows`` (positions in the per-row tensors ``slots`` of
    :class:`~genEval.search.rows.SearchRows`; ``pick``: the same positions as a long tensor on their device), in
    that order. Images and latents are copied to the host
    asynchronously, and reading the per-row numbers (one table) waits for all of it: one transfer. The latents
    are the ones the decoder sees (``generator.decoded_latents`` when it quantises)."""
    s = slots
    as_decoded = hook(generator, "decoded_latents")
    quantised = callable(as_decoded)  # keep the latents a quantising decoder sees (on the device, once)
    final_z, z0 = s["final_z"][pick], s["z0"][pick]
    final_x, start_x = s["final_x"][pick], s["start_x"][pick]
    dz, dx = (final_z - s["z_start"][pick]).flatten(1), (final_x - start_x).flatten(1)
    numbers = [s[k][pick].double() for k in _RECORDED] + [
        s["oracle_score"][pick].double(),
        dz.norm(dim=1).double(),
        dx.norm(dim=1).double(),
        dx.abs().amax(1).double() if dx.shape[1] else torch.zeros(len(rows), device=pick.device, dtype=torch.float64),
    ]
    spans = {}  # the confidence columns of the table: name -> (first column, width)
    for name in _CONFIDENCE:
        col = s[name][pick].double()
        col = col[:, None] if col.ndim == 1 else col
        spans[name] = (len(numbers), col.shape[1])
        numbers += list(col.unbind(1))
    tensors = [
        t.detach().to("cpu", non_blocking=True)
        for t in (
            final_x,
            start_x,
            as_decoded(final_z) if quantised else final_z,
            as_decoded(z0) if quantised else z0,
        )
    ]
    table = torch.stack(numbers, 1).tolist()  # the one wait: the copies above were queued before it
    for j, row in enumerate(rows):
        sample, values = s["samples"][row], table[j]
        ints = dict(zip(_RECORDED, values))
        conf = {name: values[a : a + w] for name, (a, w) in spans.items()}
        yield Outcome(
            source_id=sample.source_id,
            index=sample.index,
            label=int(ints["label"]),
            reference=int(ints["reference"]),
            oracle_clean_pred=int(ints["oracle_clean_pred"]),
            clean_pred=int(ints["clean_pred"]),
            recon_pred=int(ints["recon_pred"]),
            start_ok=bool(ints["start_ok"]),
            validated=int(ints["accepted"]) > 0,
            accepted_steps=int(ints["accepted"]),
            rejected_at=int(ints["rejected_at"]),
            first_fooled=int(ints["first_fooled"]),
            final_pred=int(ints["final_pred"]),
            oracle_start_pred=int(ints["oracle_start_pred"]),
            oracle_score=values[len(_RECORDED)],
            latent_dist=values[len(_RECORDED) + 1],
            image_dist=values[len(_RECORDED) + 2],
            image_linf=values[len(_RECORDED) + 3],
            clean_top_probs=_rounded(conf["clean_top_p"]),
            clean_top_classes=tuple(int(c) for c in conf["clean_top_c"]),
            clean_entropy=_rounded(conf["clean_entropy"])[0],
            final_top_probs=_rounded(conf["final_top_p"]),
            final_top_classes=tuple(int(c) for c in conf["final_top_c"]),
            final_entropy=_rounded(conf["final_entropy"])[0],
            final_probs=_rounded(conf["final_probs"]) if conf["final_probs"] else None,
            oracle_final_pred=int(conf["oracle_final_pred"][0]),
            original=sample.x,
            image=tensors[0][j],
            start_image=tensors[1][j],
            latent=tensors[2][j],
            start_latent=tensors[3][j],
        )
