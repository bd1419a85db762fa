"""The start of each sample's search (paper Sec. 3.2, Algorithm 1, step 1; App. E for the FGSM start):
:class:`SourceQueue` prepares the sources that enter :class:`genEval.search.rows.SearchRows` ``n`` at a time (so a
compiled step sees one shape): the classifier's and the oracle's clean predictions, the clean confidence, the
optional FGSM start, ``z0 = E(x)``, the seeded start noise ``z_0 = z0 + noise`` and the prediction on the noiseless
reconstruction ``D(E(x))`` (RA). Every draw is seeded from the sample's own seed, never from its batch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from genEval.interfaces import Classifier, Generator, Oracle
from genEval.runs.settings import SearchConfig
from genEval.search.records import Sample, confidence

REFERENCES = ("label", "clean_prediction")


class SourceQueue:
    """The prepared sources waiting for a row, read from ``samples`` ``n`` at a time as :meth:`take` runs low.

    ``reference``: the class the oracle must keep seeing (``label``, or its verdict on the clean image).
    ``mask``: the optional 0/1 style mask (broadcastable to one latent); it is checked against the first latent and
    then held on the latents' device and dtype (:attr:`mask`, read by the step). ``exhausted``: ``samples`` ran out.
    """

    def __init__(
        self,
        samples: Iterable[Sample],
        classifier: Classifier,
        generator: Generator,
        oracle: Oracle,
        cfg: SearchConfig,
        n: int,
        mask: Tensor | None,
        device: torch.device,
        reference: str = "label",
    ) -> None:
        if reference not in REFERENCES:
            raise ValueError(f"unknown oracle reference {reference!r}; choose one of {', '.join(REFERENCES)}.")
        self.pending, self.ready = iter(samples), deque()
        self.classifier, self.generator, self.oracle, self.cfg = classifier, generator, oracle, cfg
        self.n, self.dev, self.reference = n, device, reference
        self.mask, self.mask_checked = mask, mask is None
        self.exhausted = False

    def _prepare(self, batch: list[Sample]) -> list[dict[str, Any]]:
        """Clean prediction, start latent and noiseless-reconstruction prediction for a chunk of samples."""
        x = torch.stack([s.x for s in batch]).to(self.dev)
        y = torch.tensor([s.label for s in batch], device=self.dev)
        with torch.no_grad():
            clean_logits = self.classifier(x)
            clean_pred = clean_logits.argmax(1)
            oracle_clean = self.oracle.judge(x, y).predictions.to(self.dev)  # the oracle's own verdict on x
            clean_top_p, clean_top_c, clean_entropy, _ = confidence(clean_logits)
        x_in = x
        if self.cfg.fgsm_start > 0:  # paper App. E: start from an FGSM image
            xg = x.detach().clone().requires_grad_(True)
            (g_x,) = torch.autograd.grad(F.cross_entropy(self.classifier(xg), y, reduction="sum"), xg)
            x_in = (x + self.cfg.fgsm_start * g_x.sign()).clamp(0, 1)
        with torch.no_grad():
            z0 = self.generator.encode(x_in)
        self._check_mask(z0)
        z_start = z0
        if self.cfg.start_noise > 0 and self.cfg.step_size > 0:  # only the dims the search may move get noise
            noise = torch.stack(
                [
                    torch.randn(z0.shape[1:], generator=torch.Generator().manual_seed(s.seed), dtype=z0.dtype)
                    for s in batch
                ]
            ).to(self.dev)
            scale = self.cfg.start_noise * self.cfg.step_size  # std per dim: start_noise steps of the search
            z_start = z0 + scale * (noise if self.mask is None else noise * self.mask)
            with torch.no_grad():  # RA is measured on the noiseless reconstruction D(E(x))
                recon_pred = self.classifier(self.generator.decode(z0)).argmax(1)
        else:
            recon_pred = None  # the start image is the noiseless reconstruction: its prediction comes at t = 0
        reference = y if self.reference == "label" else oracle_clean
        return [
            {
                "sample": s,
                "label": y[i],
                "z0": z0[i],
                "z_start": z_start[i],
                "clean_pred": clean_pred[i],
                "oracle_clean_pred": oracle_clean[i],
                "reference": reference[i],
                "recon_pred": None if recon_pred is None else recon_pred[i],
                "clean_top_p": clean_top_p[i],
                "clean_top_c": clean_top_c[i],
                "clean_entropy": clean_entropy[i],
                "num_classes": int(clean_logits.shape[1]),
            }
            for i, s in enumerate(batch)
        ]

    def _check_mask(self, z0: Tensor) -> None:
        if self.mask_checked:
            return
        mask = self.mask.to(device=z0.device, dtype=z0.dtype)
        try:
            ok_shape = torch.broadcast_shapes(mask.shape, z0.shape[1:]) == z0.shape[1:]
        except RuntimeError:
            ok_shape = False
        if not ok_shape:
            raise ValueError(
                f"mask shape {tuple(mask.shape)} does not match the latent shape "
                f"{tuple(z0.shape[1:])}; refit the mask for this generator and image size."
            )
        self.mask, self.mask_checked = mask, True

    def take(self, k: int) -> list[dict[str, Any]]:
        """Up to ``k`` prepared sources, preparing ``n`` at a time (static shapes) as the queue runs low."""
        while len(self.ready) < k and not self.exhausted:
            chunk = [s for _, s in zip(range(self.n), self.pending)]
            self.exhausted = len(chunk) < self.n
            if chunk:
                self.ready.extend(self._prepare(chunk))
        return [self.ready.popleft() for _ in range(min(k, len(self.ready)))]
