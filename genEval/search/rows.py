"""The batch the perturbation loop works on (paper Sec. 3.2, Algorithm 1; :func:`genEval.search.perturb.perturb`):
:class:`SearchRows`, a batch of rows that always stays full (a row whose sample stops takes the next source; under
``compile`` the batch keeps its size to the very end, so a run compiles once), per-row step counters and Adam
moments, and the per-sample records (:class:`Sample` in, :class:`Outcome` out). A step reads one small table back
to the host (which rows go on, which stopped, what went wrong) and, when samples stop, their records in one
transfer: at most two host syncs a step (issue 26), since each sync stalls a GPU until the host has read. Every
random draw of a sample is seeded from the sample's own seed, so results do not depend on which samples share a
batch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from genEval.interfaces import (
    Classifier,
    Generator,
    Oracle,
    component_id,
    hook,
)
from genEval.runs.settings import SearchConfig
from genEval.scores.outcomes import FULL_VECTOR_CLASSES, TOP_K, SampleRecord
from genEval.search.execution import check_batch_size

REFERENCES = ("label", "clean_prediction")

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
_CLEAN = ("clean_top_p", "clean_top_c", "clean_entropy")
#: The per-row confidence read back with a finished sample's record (issue 44), in the record's order.
_CONFIDENCE = (*_CLEAN, "final_top_p", "final_top_c", "final_entropy", "final_probs", "oracle_final_pred")
#: Decimals of the probabilities and entropies a record keeps (float32 carries about 7 significant digits).
_DECIMALS = 6


def confidence(logits: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The classifier's confidence in its answer for a batch of logits (B, K): the top-``min(TOP_K, K)`` softmax
    probabilities (B, k) in descending order and their classes (B, k), the softmax's entropy (B,) in nats (0 for a
    one-hot answer, ln K for a uniform one) and the softmax itself (B, K), all in fp32 (records: issue 44)."""
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


class NonFiniteError(FloatingPointError):
    """The loss or gradient became NaN/inf for some samples."""


#: Tolerance of the [0, 1] range check of the decoded images (as :func:`genEval.interfaces.check_images`).
RANGE_TOL = 1e-4


class SearchRows:
    """The batch :func:`perturb` works on: ``n`` rows, each holding one sample at its own step ``t``.

    Per row: the latent ``z`` being judged (a leaf that requires grad), the step ``t`` of that latent
    (0 = the start), Adam moments, and the running record (last accepted latent and image, predictions,
    steps). ``searching`` marks rows that take another step; ``done`` rows are emitted by :meth:`finished`
    and refilled with new sources by :meth:`refill`. New sources are prepared (clean prediction, optional
    FGSM start, encoding, seeded noise, the noiseless reconstruction's prediction) ``n`` at a time.

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
        if reference not in REFERENCES:
            raise ValueError(f"unknown oracle reference {reference!r}; choose one of {', '.join(REFERENCES)}.")
        self.pending, self.ready = iter(samples), deque()
        self.classifier, self.generator, self.oracle, self.cfg = classifier, generator, oracle, cfg
        self.n, self.dev, self.reference_mode = check_batch_size(batch_size, nullable=False), device, reference
        self.mask, self.mask_checked, self.static = mask, mask is None, static
        self.exhausted = False
        self.slots: dict[str, Any] | None = None  # per-row tensors, allocated at the first refill
        self.alive: list[bool] = []  # host mirror: which rows hold a sample
        self.done: list[int] = []  # rows whose sample stopped at this step (from the last sync)
        self.go_on = False
        self.grad_checked = True  # the last gradient's finiteness was read back (at the sync after it)

    # ------------------------------------------------------------------------------------- preparing sources
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
        reference = y if self.reference_mode == "label" else oracle_clean
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

    def _take(self, k: int) -> list[dict[str, Any]]:
        """Up to ``k`` prepared sources, preparing ``n`` at a time (static shapes) as the queue runs low."""
        while len(self.ready) < k and not self.exhausted:
            chunk = [s for _, s in zip(range(self.n), self.pending)]
            self.exhausted = len(chunk) < self.n
            if chunk:
                self.ready.extend(self._prepare(chunk))
        return [self.ready.popleft() for _ in range(min(k, len(self.ready)))]

    # ------------------------------------------------------------------------------------------------ rows
    def _allocate(self, first: dict[str, Any], n: int) -> None:
        z, dev = first["z0"], self.dev
        s: dict[str, Any] = {k: torch.full((n,), -1, dtype=torch.long, device=dev) for k in _LONGS}
        for k in ("label", "reference"):  # a free row still goes through the step: give it a valid class
            s[k].zero_()
        for k in ("alive", "start_ok", "recon_known", "searching", *_FLAGS):
            s[k] = torch.zeros(n, dtype=torch.bool, device=dev)
        s["oracle_score"], s["samples"] = torch.zeros(n, device=dev), [None] * n
        k, classes = first["clean_top_p"].shape[0], first["num_classes"]  # the classifier's confidence (issue 44)
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
            fresh = self._take(self.n)
            if not fresh:
                return False
            self._allocate(fresh[0], self.n if self.static else len(fresh))
        else:
            fresh = self._take(self.alive.count(False))
            if not self.static and self.exhausted and not self.ready and not fresh:
                self._compact()
        s = self.slots
        s["z"] = s["z"].detach()
        if fresh:
            rows = [i for i, alive in enumerate(self.alive) if not alive][: len(fresh)]
            idx = torch.tensor(rows, device=self.dev)
            known = [item["recon_pred"] is not None for item in fresh]
            for k in ("label", "reference", "clean_pred", "oracle_clean_pred", "z0", "z_start", *_CLEAN):
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
        top_p, top_c, entropy, probs = confidence(logits)  # the kept image's softmax (issue 44)
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
        if self.mask is not None:
            d = d * self.mask
        with torch.no_grad():
            s["z"] = torch.where(self._rows(on, g), s["z"] + cfg.step_size * d, s["z"]).detach()
        s["t"] = s["t"] + on.long()

    def finished(self) -> Iterator[Outcome]:
        """Emit the rows whose sample stopped at this step (and free them for refilling). Their records come
        back to the host in one transfer: images and latents are copied asynchronously, and reading the
        per-row numbers waits for all of it."""
        rows, self.done = self.done, []
        if not rows:
            return
        s = self.slots
        pick = torch.tensor(rows, device=self.dev)
        s["alive"][pick] = False
        for row in rows:
            self.alive[row] = False
        as_decoded = hook(self.generator, "decoded_latents")
        quantised = callable(as_decoded)  # keep the latents a quantising decoder sees (on the device, once)
        final_z, z0 = s["final_z"][pick], s["z0"][pick]
        final_x, start_x = s["final_x"][pick], s["start_x"][pick]
        dz, dx = (final_z - s["z_start"][pick]).flatten(1), (final_x - start_x).flatten(1)
        numbers = [s[k][pick].double() for k in _RECORDED] + [
            s["oracle_score"][pick].double(),
            dz.norm(dim=1).double(),
            dx.norm(dim=1).double(),
            dx.abs().amax(1).double() if dx.shape[1] else torch.zeros(len(rows), device=self.dev, dtype=torch.float64),
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

    @staticmethod
    def _rows(on: Tensor, like: Tensor) -> Tensor:
        """A (B,) row mask shaped to broadcast over ``like`` (B, ...)."""
        return on.view(-1, *[1] * (like.ndim - 1))
