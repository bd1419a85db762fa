"""The style mask file: one ``.safetensors`` holding the mask, its coefficients and its provenance (paper App. I).

:class:`StyleMask` is what :func:`genEval.masks.fit.fit_style_mask` returns and ``geneval fit-mask`` writes: the
0/1 mask of the style dims (the latent dims with a non-zero L1 weight), the weights on standardised latents, the
fit that made it, and the generator, latent shape and data set it was fitted on
(:meth:`StyleMask.check_compatible` refuses another generator or latent shape). The file is hashed
(``sha256`` over the tensors and every metadata field), so :meth:`StyleMask.load` refuses an edited file.

Format (``format = geneval-style-mask``, :data:`FORMAT_VERSION`): tensors ``mask`` (uint8) and ``coef`` (float32)
of the latent shape; every other field as a JSON string in the safetensors metadata.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save as safetensors_bytes
from torch import Tensor

from genEval.fileio import atomic_write_bytes

log = logging.getLogger(__name__)

FORMAT = "geneval-style-mask"
FORMAT_VERSION = 1


@dataclass(frozen=True, eq=False)
class StyleMask:
    """A fitted style mask and its provenance.

    ``mask``: bool tensor of the latent shape, True on style dims (non-zero weight).
    ``coef``: float32 tensor of the latent shape, the logistic-regression weights on *standardised* latents.
    ``sparsity``, ``heldout_accuracy``, ``train_accuracy``: percent. ``C``, ``solver``: the fit that made the
    mask; ``search_path``: every ``C`` tried when ``C`` was searched (empty when given).
    ``sha256``: hash of the mask and coefficient bytes plus all metadata; computed when empty, verified
    otherwise (so :meth:`load` detects an edited file). Use ``dataclasses.replace(m, ..., sha256="")`` to
    derive a modified mask.
    """

    mask: Tensor
    coef: Tensor
    intercept: float
    sparsity: float
    heldout_accuracy: float
    train_accuracy: float
    C: float
    solver: str
    generator: str
    latent_shape: tuple[int, ...]
    dataset: str
    n_samples: int
    n_train: int
    n_test: int
    seed: int
    created: str
    sklearn_version: str
    test_fraction: float = 0.2
    max_iter: int = 0
    converged: bool = True
    source: str = ""
    search_path: tuple[dict[str, Any], ...] = ()
    sha256: str = ""

    def __post_init__(self) -> None:
        mask = torch.as_tensor(self.mask).detach().cpu().bool().contiguous()
        coef = torch.as_tensor(self.coef).detach().cpu().to(torch.float32).contiguous()
        shape = tuple(int(s) for s in self.latent_shape)
        if tuple(mask.shape) != shape or tuple(coef.shape) != shape:
            raise ValueError(
                f"style mask tensors do not match latent_shape {shape}: mask "
                f"{tuple(mask.shape)}, coef {tuple(coef.shape)}."
            )
        object.__setattr__(self, "mask", mask)
        object.__setattr__(self, "coef", coef)
        object.__setattr__(self, "latent_shape", shape)
        object.__setattr__(self, "search_path", tuple(dict(p) for p in self.search_path))
        for key in ("intercept", "sparsity", "heldout_accuracy", "train_accuracy", "C", "test_fraction"):
            object.__setattr__(self, key, float(getattr(self, key)))
        for key in ("n_samples", "n_train", "n_test", "seed", "max_iter"):
            object.__setattr__(self, key, int(getattr(self, key)))
        object.__setattr__(self, "converged", bool(self.converged))
        digest = self._digest()
        if not self.sha256:
            object.__setattr__(self, "sha256", digest)
        elif self.sha256 != digest:
            raise ValueError(
                f"style mask hash mismatch: stored sha256 {self.sha256[:16]}... but the content "
                f"hashes to {digest[:16]}...; the mask or its metadata was modified or "
                "corrupted. Refit it with geneval fit-mask."
            )

    # ---- identity -------------------------------------------------------------------------------------
    def metadata(self) -> dict[str, Any]:
        """Every field but the tensors and the hash, as JSON-ready values."""
        out = {}
        for f in fields(self):
            if f.name in ("mask", "coef", "sha256"):
                continue
            v = getattr(self, f.name)
            out[f.name] = list(v) if isinstance(v, tuple) and f.name == "latent_shape" else v
        out["search_path"] = [dict(p) for p in self.search_path]
        return out

    def _digest(self) -> str:
        h = hashlib.sha256()
        h.update(f"{FORMAT}/{FORMAT_VERSION}".encode())
        h.update(self.mask.to(torch.uint8).numpy().tobytes())
        h.update(self.coef.numpy().tobytes())
        h.update(_canonical_json(self.metadata()).encode())
        return h.hexdigest()

    @property
    def n_selected(self) -> int:
        return int(self.mask.sum())

    @property
    def n_dims(self) -> int:
        return int(self.mask.numel())

    def __repr__(self) -> str:
        return (
            f"StyleMask(generator={self.generator!r}, dataset={self.dataset!r}, "
            f"latent_shape={self.latent_shape}, selected={self.n_selected}/{self.n_dims}, "
            f"sparsity={self.sparsity:.2f}%, heldout_accuracy={self.heldout_accuracy:.1f}%, "
            f"C={self.C:.4g}, solver={self.solver!r}, n_samples={self.n_samples}, "
            f"sha256={self.sha256[:12]})"
        )

    # ---- use ------------------------------------------------------------------------------------------
    def as_tensor(self) -> Tensor:
        """Float 0/1 tensor of the latent shape, for ``evaluate(..., mask=...)`` / ``perturb(mask=...)``."""
        return self.mask.to(torch.float32)

    def check_compatible(self, generator: str, latent_shape, dataset: str | None = None) -> None:
        """Refuse a run whose generator id or latent shape differs from the ones the mask was fitted for.

        A different ``dataset`` only logs a warning: the paper finds masks transfer poorly between data sets,
        but a mask fitted on one split of a data set legitimately serves another split of it.
        """
        shape = tuple(int(s) for s in latent_shape)
        if str(generator) != self.generator or shape != self.latent_shape:
            raise ValueError(
                f"mask was fitted for generator '{self.generator}' with latent shape {self.latent_shape}, "
                f"but this run uses generator '{generator}' with latent shape {shape}. A style mask only "
                "fits the generator and image size it was made for. Refit with geneval fit-mask on a run of "
                "this generator (or use mask=auto)."
            )
        if dataset is not None and str(dataset) != self.dataset:
            log.warning(
                "style mask %s was fitted on data set %r but this run uses %r; the paper (App. I) "
                "finds style dims differ between data sets, consider refitting.",
                self.sha256[:12],
                self.dataset,
                dataset,
            )

    # ---- storage --------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write one ``.safetensors`` file (``mask`` uint8, ``coef`` float32, metadata as JSON strings),
        atomically (temp file + rename). Returns the path."""
        p = Path(path).expanduser()
        p.parent.mkdir(parents=True, exist_ok=True)
        meta = {k: json.dumps(v, allow_nan=False) for k, v in self.metadata().items()}
        meta.update({"format": FORMAT, "format_version": str(FORMAT_VERSION), "sha256": self.sha256})
        data = safetensors_bytes({"mask": self.mask.to(torch.uint8), "coef": self.coef}, metadata=meta)
        atomic_write_bytes(p, data)
        log.info("saved %r to %s", self, p)
        return p

    @classmethod
    def load(cls, path: str | Path) -> StyleMask:
        """Read a mask written by :meth:`save` and verify its hash (an edited file raises ``ValueError``)."""
        p = Path(path).expanduser()
        if not p.is_file():
            raise FileNotFoundError(
                f"no style mask file at '{p}'. Fit one with geneval fit-mask (or "
                "genEval.masks.fit_mask_from_run) and pass its path as "
                "mask.path=..."
            )
        try:
            with safe_open(str(p), framework="pt") as fh:
                meta = dict(fh.metadata() or {})
                tensors = {k: fh.get_tensor(k) for k in fh.keys()}
        except Exception as err:  # safetensors raises its own error types for damaged headers
            raise ValueError(
                f"'{p}' is not a readable safetensors file ({err}); it is not a genEval style "
                "mask or it is damaged. Refit it with geneval fit-mask."
            ) from err
        if meta.get("format") != FORMAT or set(tensors) != {"mask", "coef"}:
            raise ValueError(
                f"'{p}' is not a genEval style mask (format={meta.get('format')!r}, tensors "
                f"{sorted(tensors)}); expected format {FORMAT!r} with tensors mask and coef."
            )
        version = int(meta.get("format_version", "0"))
        if version > FORMAT_VERSION:
            raise ValueError(
                f"'{p}' has style mask format version {version}, newer than this genEval reads "
                f"({FORMAT_VERSION}); upgrade genEval."
            )
        known = {f.name for f in fields(cls)} - {"mask", "coef", "sha256"}
        try:
            kwargs = {k: json.loads(v) for k, v in meta.items() if k in known}
        except json.JSONDecodeError as err:
            raise ValueError(f"style mask '{p}' has damaged metadata ({err}); refit it with geneval fit-mask.") from err
        kwargs["latent_shape"] = tuple(kwargs.get("latent_shape", tensors["mask"].shape))
        kwargs["search_path"] = tuple(kwargs.get("search_path", ()))
        try:
            return cls(
                mask=tensors["mask"].bool(), coef=tensors["coef"], sha256=meta.get("sha256", "") or "-", **kwargs
            )
        except (TypeError, ValueError) as err:
            raise ValueError(f"style mask '{p}' failed verification: {err}") from err


def _canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)
