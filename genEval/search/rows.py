"""The batch the perturbation loop works on (paper Sec. 3.2, Algorithm 1; :func:`genEval.search.perturb.perturb`):
:class:`SearchRows`, a batch of rows that always stays full (a row whose sample stops takes the next source from
its :class:`~genEval.search.starts.SourceQueue`; under ``compile`` the batch keeps its size to the very end, so a run
compiles once), with per-row step counters and Adam moments. A step reads one small table back to the host (which
rows go on, which stopped, what went wrong) and, when samples stop, their records in one transfer
(:func:`genEval.search.records.read_outcomes`): at most two host syncs a step (docs/benchmarks.md), since each sync
stalls a GPU until the host has read. Every random draw of a sample is seeded from the sample's own seed, so results do
not depend on which samples share a batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import Tensor

from genEval.interfaces import Classifier, Generator, Oracle, component_id
from genEval.runs.settings import SearchConfig
from genEval.scores.outcomes import FULL_VECTOR_CLASSES
from genEval.search.execution import check_batch_size
from genEval.search.records import CLEAN, Outcome, Sample, confidence, read_outcomes
from genEval.search.starts import REFERENCES, SourceQueue

__all__ = ["RANGE_TOL", "REFERENCES", "NonFiniteError", "SearchRows"]

#: Per-row whole numbers of the search state (-1: not yet / never).
_LONGS = (
    "label",
    "reference",
    "oracle_clean_pred",
    "t",
    "clean_pred",
    "recon_pred",
    "accepted",
    "rejected_at",
    "first_fooled",
    "final_pred",
    "oracle_start_pred",
    "oracle_final_pred",
)
#: What went wrong in a row, read back by :meth:`SearchRows.sync` (in this order).
_FLAGS = ("bad_grad", "bad_loss", "nan_x", "range_x")


class NonFiniteError(FloatingPointError):
    """The loss or gradient became NaN/inf for some samples."""


#: Tolerance of the [0, 1] range check of the decoded images (as :func:`genEval.interfaces.check_images`).
RANGE_TOL = 1e-4


class SearchRows:
    """The batch :func:`perturb` works on: ``n`` rows, each holding one sample at its own step ``t``.

    Per row: the latent ``z`` being judged (a leaf that requires grad), the step ``t`` of that latent
    (0 = the start), Adam moments, and the running record (last accepted latent and image, predictions,
    steps). ``searching`` marks rows that take another step; ``done`` rows are emitted by :meth:`finished`
    and refilled by :meth:`refill` from :attr:`sources` (:class:`~genEval.search.starts.SourceQueue`: clean
    prediction, optional FGSM start, encoding, seeded noise, the noiseless reconstruction's prediction).

    All per-row state lives on the device; the host keeps a mirror of which rows hold a sample (``alive``),
    refreshed by the step's one transfer (:meth:`sync`). ``static``: the batch keeps ``n`` rows to the end
    (free rows are masked, never dropped), so a compiled step sees one shape.
    """

    def __init__(
        self,
        samples: Iterable[Sample],
        classifier: Classifier,
        generator: Generator,
        oracle: Oracle,
        cfg: SearchConfig,
        batch_size: int,
        mask: Tensor | None,
        device: torch.device,
        reference: str = "label",
        static: bool = False,
    ) -> None:
        self.classifier, self.generator, self.cfg = classifier, generator, cfg
        self.n, self.dev, self.static = check_batch_size(batch_size, nullable=False), device, static
        self.sources = SourceQueue(samples, classifier, generator, oracle, cfg, self.n, mask, device, reference)
        self.slots: dict[str, Any] | None = None  # per-row tensors, allocated at the first refill
        self.alive: list[bool] = []  # host mirror: which rows hold a sample
        self.done: list[int] = []  # rows whose sample stopped at this step (from the last sync)

    # ------------------------------------------------------------------------------------------------ rows
    def _allocate(self, first: dict[str, Any], n: int) -> None:
        z, dev = first["z0"], self.dev
        s: dict[str, Any] = {k: torch.full((n,), -1, dtype=torch.long, device=dev) for k in _LONGS}
        for k in ("label", "reference"):  # a free row still goes through the step: give it a valid class
            s[k].zero_()
        for k in ("alive", "start_ok", "recon_known", "searching", *_FLAGS):
            s[k] = torch.zeros(n, dtype=torch.bool, device=dev)
        s["oracle_score"], s["samples"] = torch.zeros(n, device=dev), [None] * n
        k, classes = first["clean_top_p"].shape[0], first["num_classes"]  # the classifier's confidence (docs/scores.md)
        for side in ("clean", "final"):
            s[f"{side}_top_p"] = torch.zeros((n, k), device=dev)
            s[f"{side}_top_c"] = torch.zeros((n, k), dtype=torch.long, device=dev)
            s[f"{side}_entropy"] = torch.zeros(n, device=dev)
        s["final_probs"] = torch.zeros((n, classes if classes <= FULL_VECTOR_CLASSES else 0), device=dev)
        for k in ("z", "m", "v", "z0", "z_start", "final_z"):
            s[k] = z.new_zeros((n, *z.shape))
        with torch.no_grad():
            x_shape = tuple(self.generator.decode(z[None]).shape[1:])  # D(z) may differ in size from x
        for k in ("start_x", "final_x"):
            s[k] = torch.zeros((n, *x_shape), device=dev)
        self.slots, self.alive = s, [False] * n

    def refill(self) -> bool:
        """Put new sources into the rows that are free; False when no row is left to work on. Reads only the
        host mirror of the rows (no sync); preparing a chunk of new sources is the only device work that waits."""
        if self.slots is None:
            fresh = self.sources.take(self.n)
            if not fresh:
                return False
            self._allocate(fresh[0], self.n if self.static else len(fresh))
        else:
            fresh = self.sources.take(self.alive.count(False))
            if not self.static and self.sources.exhausted and not self.sources.ready and not fresh:
                self._compact()
        s = self.slots
        s["z"] = s["z"].detach()
        if fresh:
            rows = [i for i, alive in enumerate(self.alive) if not alive][: len(fresh)]
            idx = torch.tensor(rows, device=self.dev)
            known = [item["recon_pred"] is not None for item in fresh]
            for k in ("label", "reference", "clean_pred", "oracle_clean_pred", "z0", "z_start", *CLEAN):
                s[k][idx] = torch.stack([item[k] for item in fresh])
            s["recon_known"][idx] = torch.tensor(known, device=self.dev)
            s["recon_pred"][idx] = torch.stack(
                [item["recon_pred"] if k else item["clean_pred"] for item, k in zip(fresh, known)]
            )  # a placeholder where recon_known is False
            s["z"][idx] = s["z_start"][idx]
            for k, v in (("t", 0), ("accepted", 0), ("rejected_at", -1), ("first_fooled", -1), ("m", 0), ("v", 0)):
                s[k][idx] = v
            s["alive"][idx] = True
            for row, item in zip(rows, fresh):
                s["samples"][row], self.alive[row] = item["sample"], True
        if not any(self.alive):
            return False
        s["z"] = s["z"].requires_grad_(self.cfg.budget > 0)
        return True

    def _compact(self) -> None:
        """No sources are left: drop the rows that finished so the tail does not run half-empty batches
        (not under ``static``, where a new shape would mean a new compilation)."""
        keep = [i for i, alive in enumerate(self.alive) if alive]
        if len(keep) in (0, len(self.alive)) or len(keep) > len(self.alive) // 2:
            return
        idx = torch.tensor(keep, device=self.dev)
        self.slots = {k: ([v[i] for i in keep] if k == "samples" else v[idx]) for k, v in self.slots.items()}
        self.alive = [True] * len(keep)

    @property
    def z(self) -> Tensor:
        return self.slots["z"]

    @property
    def label(self) -> Tensor:
        return self.slots["label"]

    @property
    def reference(self) -> Tensor:
        return self.slots["reference"]

    @property
    def searching(self) -> Tensor:
        return self.slots["searching"].to(self.z.dtype)

    def judge(self, x: Tensor, logits: Tensor, loss: Tensor, accept: Tensor, scores: Tensor, preds: Tensor) -> None:
        """Record what the oracle and the classifier said about ``x = D(z_t)`` and decide who goes on; also
        mark, for :meth:`sync`, losses that are not finite and images outside the [0, 1] contract (on the
        device: no sync here)."""
        s, cfg = self.slots, self.cfg
        pred, ok, alive, t = logits.argmax(1), accept.to(self.dev), s["alive"], s["t"]
        start, step = alive & (t == 0), alive & (t > 0)
        s["start_ok"] = torch.where(start, ok, s["start_ok"])
        s["oracle_start_pred"] = torch.where(start, preds.to(self.dev), s["oracle_start_pred"])
        s["recon_pred"] = torch.where(start & ~s["recon_known"], pred, s["recon_pred"])
        s["start_x"] = torch.where(self._rows(start, x), x, s["start_x"])
        keep = start | (step & ok)  # the start image, or an accepted step, becomes the sample's current result
        s["accepted"] = torch.where(step & ok, t, s["accepted"])
        s["final_pred"] = torch.where(keep, pred, s["final_pred"])
        s["final_x"] = torch.where(self._rows(keep, x), x, s["final_x"])
        s["final_z"] = torch.where(self._rows(keep, s["z"]), s["z"].detach(), s["final_z"])
        s["oracle_score"] = torch.where(keep, scores.to(self.dev).float(), s["oracle_score"])
        s["oracle_final_pred"] = torch.where(keep, preds.to(self.dev), s["oracle_final_pred"])
        top_p, top_c, entropy, probs = confidence(logits)  # the kept image's softmax (docs/scores.md)
        s["final_top_p"] = torch.where(keep[:, None], top_p, s["final_top_p"])
        s["final_top_c"] = torch.where(keep[:, None], top_c, s["final_top_c"])
        s["final_entropy"] = torch.where(keep, entropy, s["final_entropy"])
        if s["final_probs"].shape[1]:
            s["final_probs"] = torch.where(keep[:, None], probs, s["final_probs"])
        fooled = step & ok & (pred != s["label"])
        s["first_fooled"] = torch.where(fooled & (s["first_fooled"] < 0), t, s["first_fooled"])
        s["rejected_at"] = torch.where(step & ~ok, t, s["rejected_at"])
        go_on = (start & ok) | (step & ok & (t < cfg.budget))
        if cfg.early_stop:
            go_on &= ~fooled
        s["searching"] = go_on & (t < cfg.budget)
        s["bad_loss"] = s["searching"] & ~torch.isfinite(loss)
        flat = x.flatten(1)
        finite = torch.isfinite(flat).all(1)
        s["nan_x"] = alive & ~finite
        s["range_x"] = alive & finite & ~((flat >= -RANGE_TOL) & (flat <= 1 + RANGE_TOL)).all(1)

    def sync(self) -> bool:
        """The step's one host sync: which rows go on, which stopped, and whether the last gradient, this
        step's losses or its images broke (raising :class:`NonFiniteError` or the [0, 1] contract's error,
        naming the samples). Returns True while some row takes another step."""
        s = self.slots
        flags = torch.stack([s["searching"], s["alive"] & ~s["searching"], *(s[k] for k in _FLAGS)]).tolist()
        searching, done, bad_grad, bad_loss, nan_x, range_x = flags
        for flags, what in ((bad_grad, "gradient"), (bad_loss, "loss"), (nan_x, "image")):
            if any(flags):
                raise NonFiniteError(
                    f"non-finite {what} for sample(s) {self._names(flags)}. Lower search.step_size, use "
                    "search.update=sign, or check the classifier/generator for overflow (e.g. turn off reduced "
                    "precision)."
                )
        if any(range_x):
            raise ValueError(
                f"generator {component_id(self.generator)}: decoded images must "
                f"lie in [0, 1] (samples {self._names(range_x)}); genEval's contract is float images in [0, 1]: "
                "clamp the decoder's output into [0, 1] inside the generator."
            )
        self.done = [i for i, d in enumerate(done) if d]
        return any(searching)

    def _names(self, flags: list[bool]) -> str:
        names = [self.slots["samples"][i].source_id for i, f in enumerate(flags) if f]
        return f"{names[:10]}{' ...' if len(names) > 10 else ''}"

    def step(self, g: Tensor) -> None:
        """``z <- z + a * step(g) * M`` on the searching rows; ``step`` is Adam (per-row moments and bias
        correction at each row's own step count), plain SGD or the sign of the gradient. Whether ``g`` is finite
        is read back at the next :meth:`sync`, before anything the step led to is recorded."""
        s, cfg = self.slots, self.cfg
        on = s["searching"]
        s["bad_grad"] = on & ~torch.isfinite(g.detach().flatten(1)).all(1)
        t = (s["t"] + 1).clamp(min=1).to(g.dtype)
        if cfg.update == "adam":
            b1, b2 = cfg.adam_betas
            rows = self._rows(on, g)
            s["m"] = torch.where(rows, b1 * s["m"] + (1 - b1) * g, s["m"])
            s["v"] = torch.where(rows, b2 * s["v"] + (1 - b2) * g * g, s["v"])
            bc1, bc2 = (1 - b1**t).view(-1, *[1] * (g.ndim - 1)), (1 - b2**t).view(-1, *[1] * (g.ndim - 1))
            d = (s["m"] / bc1) / ((s["v"] / bc2).sqrt() + cfg.adam_eps)
        else:
            d = g if cfg.update == "sgd" else g.sign()
        if self.sources.mask is not None:
            d = d * self.sources.mask
        with torch.no_grad():
            s["z"] = torch.where(self._rows(on, g), s["z"] + cfg.step_size * d, s["z"]).detach()
        s["t"] = s["t"] + on.long()

    def finished(self) -> Iterator[Outcome]:
        """Emit the rows whose sample stopped at this step (and free them for refilling), their records read back
        in one transfer (:func:`~genEval.search.records.read_outcomes`)."""
        rows, self.done = self.done, []
        if not rows:
            return
        pick = torch.tensor(rows, device=self.dev)
        self.slots["alive"][pick] = False
        for row in rows:
            self.alive[row] = False
        yield from read_outcomes(self.slots, rows, pick, self.generator)

    @staticmethod
    def _rows(on: Tensor, like: Tensor) -> Tensor:
        """A (B,) row mask shaped to broadcast over ``like`` (B, ...)."""
        return on.view(-1, *[1] * (like.ndim - 1))
