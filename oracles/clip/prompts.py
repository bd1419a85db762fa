"""The CLIP oracle's prompts (paper Sec. 3.2: ``"an image of {class}"``) and their zero-shot head.

``templates`` is a list of prompts with ``{}`` or ``{class}``, or a named set: ``paper`` (the paper's
"an image of {class}"), ``openai`` (the 80 ImageNet prompts of Radford et al. 2021, from
``open_clip.zero_shot_metadata``) or ``simple`` (open_clip's 7-prompt subset of those). Every class gets the mean
of the normalised text embeddings of its prompts, re-normalised (Radford et al. 2021, Sec. 3.1.4;
``open_clip.build_zero_shot_classifier``): :func:`encode_prompts`.

:class:`PromptCache`: the zero-shot head of 1,000 ImageNet classes x 80 templates is 80,000 text-encoder passes
(minutes on a GPU-less machine), so the ``(C, D)`` class-embedding matrix is kept on disk in
``$GENEVAL_CACHE/clip_prompts`` (safetensors), keyed by the model, its weights (the pretrained tag, the sha256 of a
checkpoint file, or of the text tower's parameters when there is no file), the activation (QuickGELU or GELU), the
class names, the templates, the precision and open_clip's version.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save as save_safetensors
from torch import Tensor, nn

from genEval.checkpoints import cache_dir
from genEval.fileio import atomic_write_bytes, sha256_file

log = logging.getLogger(__name__)

PAPER_TEMPLATE = "an image of {}"
TEMPLATE_SETS = ("paper", "openai", "simple")
_TEXT_CHUNK = 512  # prompts per text-encoder call: bounds memory for 1000 classes x 80 templates
_PROGRESS_EVERY = 10.0  # seconds between progress lines while encoding prompts
PROMPT_CACHE = "clip_prompts"  # sub-folder of genEval's cache holding class-embedding matrices
_CACHE_FORMAT = 1


def named_templates(name: str) -> tuple[str, ...]:
    """A named prompt set as ``{}`` templates: ``paper``, ``openai`` (80) or ``simple`` (7)."""
    if name == "paper":
        return (PAPER_TEMPLATE,)
    from open_clip import zero_shot_metadata

    sets = {
        "openai": zero_shot_metadata.OPENAI_IMAGENET_TEMPLATES,
        "simple": zero_shot_metadata.SIMPLE_IMAGENET_TEMPLATES,
    }
    return tuple(t("{}") for t in sets[name])  # open_clip stores them as one-argument callables


def check_templates(templates: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(templates, str):
        templates = named_templates(templates) if templates in TEMPLATE_SETS else (templates,)
    templates = tuple(templates) if templates is not None else ()
    if not templates:
        raise ValueError(
            "CLIPOracle: templates is empty; give at least one prompt template such as "
            f"'{PAPER_TEMPLATE}' (the paper's prompt)."
        )
    for t in templates:
        if not isinstance(t, str) or ("{}" not in t and "{class}" not in t):
            raise ValueError(
                f"CLIPOracle: template {t!r} has no class placeholder; write '{{}}' or "
                f"'{{class}}' where the class name goes, e.g. '{PAPER_TEMPLATE}', or name a set: "
                f"{', '.join(TEMPLATE_SETS)}."
            )
    return templates


def fill_template(template: str, class_name: str) -> str:
    """Put ``class_name`` where ``{}`` or ``{class}`` stands (other braces are left alone)."""
    return template.replace("{class}", class_name).replace("{}", class_name)


def encode_prompts(
    model: nn.Module, tokenizer, names: list[str], templates: tuple[str, ...], device: torch.device, who: str
) -> Tensor:
    """Encode every prompt of ``names`` x ``templates`` (open_clip's ``build_zero_shot_classifier``, a slice of classes
    at a time) and log the progress with an ETA every ``_PROGRESS_EVERY`` seconds. Returns (C, D) float32,
    L2-normalised rows."""
    import open_clip

    fills = [lambda c, t=t: fill_template(t, c) for t in templates]  # "{class}" too, other braces kept
    per_call = max(1, _TEXT_CHUNK // len(templates))
    total = len(names) * len(templates)
    heads, start = [], time.perf_counter()
    last = start
    for first in range(0, len(names), per_call):
        chunk = names[first : first + per_call]
        heads.append(
            open_clip.build_zero_shot_classifier(
                model, tokenizer, chunk, fills, device=device, num_classes_per_batch=per_call
            ).float()
        )  # (D, len(chunk))
        now, done = time.perf_counter(), (first + len(chunk)) * len(templates)
        if now - last >= _PROGRESS_EVERY and done < total:
            rate = done / (now - start)
            log.info(
                "oracle %s: encoded %d/%d prompts (%.0f prompts/s), ETA %s",
                who,
                done,
                total,
                rate,
                _duration((total - done) / rate),
            )
            last = now
    log.info("oracle %s: encoded %d prompts in %s", who, total, _duration(time.perf_counter() - start))
    return F.normalize(torch.cat(heads, dim=1).T, dim=-1).contiguous()


@dataclass(frozen=True)
class PromptCache:
    """The on-disk cache of one oracle's class embeddings: one safetensors file per (model, weights, activation,
    precision, open_clip version, templates, class names), whose metadata holds that key in full (a file whose key
    differs is never trusted)."""

    model: nn.Module
    model_name: str
    source: str
    weights_file: Path | None
    precision: str
    templates: tuple[str, ...]

    def weights_id(self) -> str:
        """What identifies the weights: the tag, the sha256 of the checkpoint file, else of the text tower."""
        if self.weights_file is not None:
            return f"file-sha256:{sha256_file(self.weights_file)}"
        if self.source not in ("random", "hub", "local"):
            return f"tag:{self.source}"
        h = hashlib.sha256()
        for k, v in sorted(self.model.state_dict().items()):
            if not k.startswith("visual."):  # the image tower plays no part in the class embeddings
                h.update(k.encode())
                h.update(v.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
        return f"text-tower-sha256:{h.hexdigest()}"

    def entry(self, names: tuple[str, ...]) -> tuple[Path, dict[str, str]]:
        """The cache file of ``names`` under these settings, and the metadata it must carry."""
        import open_clip

        quick = any(type(m).__name__ == "QuickGELU" for m in self.model.modules())
        key = {
            "format": _CACHE_FORMAT,
            "model": self.model_name,
            "weights": self.weights_id(),
            "activation": "quick_gelu" if quick else "gelu",
            "precision": self.precision,
            "weights_dtype": str(self.model.logit_scale.dtype).removeprefix("torch."),  # converted by precision=bf16
            "open_clip": getattr(open_clip, "__version__", ""),
            "templates": list(self.templates),
            "class_names": list(names),
        }
        text = json.dumps(key, sort_keys=True, ensure_ascii=False)
        digest = hashlib.sha256(text.encode()).hexdigest()[:32]
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", self.model_name)
        name = f"{stem}-{len(names)}x{len(self.templates)}-{digest}.safetensors"
        return cache_dir(PROMPT_CACHE) / name, {"key": text}

    @staticmethod
    def write(path: Path, meta: dict[str, str], embeddings: Tensor) -> None:
        """Keep ``embeddings`` (C, D) at ``path`` with its key (written atomically)."""
        atomic_write_bytes(path, save_safetensors({"class_embeddings": embeddings.cpu().contiguous()}, metadata=meta))

    @staticmethod
    def read(path: Path, meta: dict[str, str], n_classes: int) -> Tensor | None:
        """The cached (C, D) class embeddings at ``path`` when its key matches ``meta`` exactly, else None (a damaged
        file is reported and recomputed)."""
        if not path.is_file():
            return None
        try:
            with safe_open(str(path), framework="pt") as fh:
                if (fh.metadata() or {}).get("key") != meta["key"]:
                    return None  # a digest collision, or a file from elsewhere: never trust it
                emb = fh.get_tensor("class_embeddings")
        except Exception as err:  # a truncated or foreign file: safetensors raises several types
            log.warning("CLIP prompt cache %s is unreadable (%s); encoding the prompts again", path, err)
            return None
        return emb.float() if emb.ndim == 2 and emb.shape[0] == n_classes else None


def _duration(seconds: float) -> str:
    seconds = max(0.0, float(seconds))
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
