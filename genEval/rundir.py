"""The run directory: the one module that writes *and* reads it (STYLE.md "Results are data").

A run directory holds:

* ``results.json`` - schema version, scores with intervals, per-class table, seed, resolved config,
  component ids, package versions, environment, timings. Written last: its presence marks a complete run.
* ``samples.jsonl`` - one record per sample (source id, label, predictions, steps, distances...).
  While the run is in progress it grows as ``samples.partial.jsonl`` and is renamed at the end.
* ``grid.png`` - originals over perturbed images for a few samples.

Every final file is written to a temporary name in the same directory and renamed (atomic on POSIX).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from genEval.fileio import atomic_write_bytes
from genEval.stats import Scores

SCHEMA_VERSION = 1
PACKAGES = ("geneval", "torch", "torchvision", "hydra-core", "open_clip_torch", "timm", "diffusers",
            "scikit-learn", "taming-transformers-rom1504", "numpy", "scipy", "safetensors", "pillow")


@dataclass(frozen=True)
class SampleRecord:
    """Per-sample outcome (METHOD.md "records per sample"). Steps: -1 means "never"."""

    source_id: str
    label: int
    clean_pred: int
    recon_pred: int
    start_ok: bool
    validated: bool
    accepted_steps: int
    rejected_at: int
    first_fooled: int
    final_pred: int
    oracle_start_pred: int
    oracle_score: float
    latent_dist: float
    image_dist: float
    image_linf: float


@dataclass(frozen=True)
class EvalResult:
    """The result of one evaluation: what ``genEval.evaluate`` returns and the CLI writes."""

    scores: Scores
    per_class: list[dict]
    seed: int
    seed_drawn: bool
    components: dict[str, str]
    class_names: list[str]
    config: dict[str, Any]
    versions: dict[str, str]
    environment: dict[str, Any]
    timings: dict[str, float]
    warnings: list[str] = field(default_factory=list)
    run_dir: str | None = None
    samples: list[SampleRecord] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of everything but the per-sample records (those go to samples.jsonl)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "scores": self.scores.to_dict(),
            "per_class": self.per_class,
            "seed": self.seed,
            "seed_drawn": self.seed_drawn,
            "components": self.components,
            "class_names": self.class_names,
            "config": self.config,
            "versions": self.versions,
            "environment": self.environment,
            "timings": self.timings,
            "warnings": self.warnings,
            "run_dir": self.run_dir,
        }

    @property
    def metrics(self) -> dict[str, float | None]:
        """Point values in percent: ``{"sa": ..., "ra": ..., "vr": ..., "pa": ..., "fmr": ...}``."""
        s = self.scores
        return {"sa": s.sa.value, "ra": s.ra.value, "vr": s.vr.value, "pa": s.pa.value,
                "fmr": s.fmr.value, "fmr_chance_corrected": s.fmr_chance_corrected.value}

    def summary(self) -> str:
        """The one-screen summary printed at the end of a run."""
        s = self.scores
        lines = [
            f"genEval  seed={self.seed}{' (drawn)' if self.seed_drawn else ''}  n={s.n}  classes={s.num_classes}",
            f"  classifier: {self.components.get('classifier')}",
            f"  generator:  {self.components.get('generator')}",
            f"  oracle:     {self.components.get('oracle')}",
            "  score (95% CI)",
            f"  SA   {s.sa.fmt()}   ({s.n_clean_correct}/{s.n})",
            f"  RA   {s.ra.fmt()}   (accuracy on reconstructions)",
            f"  VR   {s.vr.fmt()}   ({s.n_validated}/{s.n} validated, {s.n_validatable} passed the start check)",
            f"  PA   {s.pa.fmt()}   ({s.n_perturbed_correct}/{s.n_validated})",
            f"  FMR  {s.fmr.fmt()}",
            f"  FMR chance-corrected  {s.fmr_chance_corrected.fmt()}",
        ]
        if "total_s" in self.timings:
            lines.append(f"  time {self.timings['total_s']:.1f}s")
        lines += [f"  WARNING: {w}" for w in self.warnings]
        if self.run_dir:
            lines.append(f"  run directory: {self.run_dir}")
        return "\n".join(lines)


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def environment(device: str) -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {"platform": platform.platform(), "device": device,
                           "torch_threads": torch.get_num_threads()}
    if device.startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return env


class SampleWriter:
    """Appends sample records as JSON lines to ``samples.partial.jsonl``; ``finish()`` renames it."""

    def __init__(self, run_dir: Path) -> None:
        self.final = run_dir / "samples.jsonl"
        self.partial = run_dir / "samples.partial.jsonl"
        self._fh = open(self.partial, "w", encoding="utf-8")

    def write(self, records: list[SampleRecord]) -> None:
        for r in records:
            self._fh.write(json.dumps(asdict(r), allow_nan=False) + "\n")
        self._fh.flush()

    def finish(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        os.replace(self.partial, self.final)

    def abort(self) -> None:
        if not self._fh.closed:
            self._fh.close()


def save_grid(path: Path, originals, perturbed, nrow: int = 8) -> None:
    """Originals (row pairs: top original, bottom perturbed) as one PNG, written atomically."""
    import torch
    from PIL import Image
    from torchvision.utils import make_grid

    from genEval.interfaces import resize_images

    k = min(len(originals), nrow)
    if k == 0:
        return
    size = tuple(perturbed.shape[-2:])
    a = resize_images(originals[:k].float(), size)
    b = perturbed[:k].float()
    if a.shape[1] != b.shape[1]:
        a, b = (t.expand(-1, 3, -1, -1) if t.shape[1] == 1 else t for t in (a, b))
    scale = max(1, 64 // size[0])
    both = torch.cat([a, b])
    if scale > 1:
        both = torch.nn.functional.interpolate(both, scale_factor=scale, mode="nearest")
    grid = make_grid(both, nrow=k, padding=2, pad_value=1.0)
    arr = (grid.clamp(0, 1).mul(255).round().byte().permute(1, 2, 0).numpy())
    img = Image.fromarray(arr.squeeze(-1) if arr.shape[-1] == 1 else arr)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    atomic_write_bytes(path, buf.getvalue())


def config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _save_tensors(path: Path, tensors: dict[str, Any], validated, source_ids: list[str], **meta: str) -> None:
    """One safetensors file per run artefact: tensors + per-sample ``validated`` + source ids, atomically."""
    import torch
    from safetensors.torch import save

    tensors = {k: v.contiguous() for k, v in tensors.items()}
    tensors["validated"] = validated.to(torch.uint8)
    meta = {"source_ids": json.dumps(source_ids), "schema_version": str(SCHEMA_VERSION), **meta}
    atomic_write_bytes(path, save(tensors, metadata=meta))


def _load_tensors(path: str | Path, flag: str) -> dict[str, Any]:
    from safetensors import safe_open

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no {p.stem} file at '{p}'; rerun the evaluation with {flag}=true.")
    with safe_open(str(p), framework="pt") as fh:
        meta = fh.metadata() or {}
        out: dict[str, Any] = {k: fh.get_tensor(k) for k in fh.keys()}
    out["validated"] = out["validated"].bool()
    out["source_ids"] = json.loads(meta.pop("source_ids", "[]"))
    out.update({k: v for k, v in meta.items() if k != "schema_version"})
    return out


def save_latent_file(path: Path, start, final, validated, source_ids: list[str], generator: str) -> None:
    """``latents.safetensors``: ``start`` = E(x) and ``final`` = last accepted z, (N, *latent_shape)."""
    _save_tensors(path, {"start": start, "final": final}, validated, source_ids, generator=generator)


def load_latent_file(path: str | Path) -> dict[str, Any]:
    """Inverse of :func:`save_latent_file`: tensors plus ``source_ids`` and ``generator``."""
    out = _load_tensors(path, "save_latents")
    out.setdefault("generator", "")
    return out


def to_uint8(images) -> Any:
    """[0,1] float images -> uint8 (round to nearest), the lossless-PNG representation of a snapshot."""
    import torch

    return images.clamp(0, 1).mul(255).round().to(dtype=torch.uint8)


def save_image_file(path: Path, images: dict[str, list], validated, source_ids: list[str], labels) -> None:
    """``images.safetensors``: uint8 ``original`` and ``perturbed`` images (lists of batches; sizes may differ
    between the two, never within one), ``validated`` and ``labels`` per sample, source ids in metadata."""
    import torch

    tensors = {k: torch.cat(v) for k, v in images.items()}
    tensors["labels"] = labels.to(torch.int64)
    _save_tensors(path, tensors, validated, source_ids)


def load_image_file(path: str | Path) -> dict[str, Any]:
    """Inverse of :func:`save_image_file`."""
    return _load_tensors(path, "save_images")


# ------------------------------------------------------------------------------------------ reading
def read_results(run_dir: str | Path) -> dict:
    """``results.json`` of a finished run as a dict."""
    p = Path(run_dir) / "results.json"
    if not p.is_file():
        raise FileNotFoundError(
            f"'{run_dir}' has no results.json: not a finished genEval run directory (an interrupted run "
            "leaves samples.partial.jsonl and no results.json; rerun it to resume). Pass run directories "
            "made by `geneval` or `geneval compare`, or a folder containing them.")
    return json.loads(p.read_text(encoding="utf-8"))


def read_samples(run_dir: str | Path) -> list[dict]:
    """Per-sample records of a finished run (``samples.jsonl``), in the run's sample order."""
    p = Path(run_dir) / "samples.jsonl"
    if not p.is_file():
        raise FileNotFoundError(
            f"run directory '{run_dir}' has no samples.jsonl; it is not a finished genEval run "
            "(an interrupted run leaves samples.partial.jsonl and no results.json).")
    with open(p, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def find_run_dirs(paths: Sequence[str | Path]) -> list[Path]:
    """Expand paths: a run directory (has results.json) stays; any other directory is searched for runs."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw).expanduser()
        if (p / "results.json").is_file():
            out.append(p)
        elif p.is_dir():
            found = sorted(q.parent for q in p.rglob("results.json"))
            if not found:
                raise FileNotFoundError(f"no finished run (results.json) under '{p}'.")
            out += found
        else:
            raise FileNotFoundError(f"run directory '{p}' does not exist.")
    return out
