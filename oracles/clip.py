"""CLIP zero-shot oracle (paper Sec. 3.2 and Sec. 4: OpenAI CLIP ViT-B/32 judges each perturbed image
with the prompt ``"an image of {class}"``; docs/method.md, "The actors").

The zero-shot head follows Radford et al. (2021, Sec. 3.1.4): every class gets the mean of the
normalised text embeddings of its prompts (one per template), re-normalised
(``open_clip.build_zero_shot_classifier``); an image's logits are ``logit_scale * <image embedding,
class embedding>``. The oracle accepts an image when the argmax is the reference class (the true label, or
with ``reference="clean_prediction"`` its own verdict on the clean image) and, optionally, its softmax
probability reaches ``threshold``.

``templates`` is a list of prompts with ``{}`` or ``{class}``, or a named set: ``paper`` (the paper's
"an image of {class}"), ``openai`` (the 80 ImageNet prompts of Radford et al. 2021, from
``open_clip.zero_shot_metadata``) or ``simple`` (open_clip's 7-prompt subset of those). The prompts are
logged when the oracle is prepared (templates and the prompts of the first classes; every prompt at DEBUG
level), and a warning says when class names look like WordNet ids or bare numbers, which CLIP cannot read.

Models come from open_clip: ``pretrained`` is an open_clip tag (e.g. ``openai``), a local
checkpoint file, or ``None`` for random initialisation (tests). A tag's weights are taken from the local
Hugging Face cache when the hub cannot be reached (or ``HF_HUB_OFFLINE=1``); when they are not there either,
construction stops at once (one ``HEAD`` request, no download retries) with a
:class:`genEval.checkpoints.WeightsUnavailable` naming ``oracle.pretrained=<local file>``.

Prompt cache: the zero-shot head of 1,000 ImageNet classes x 80 templates is 80,000 text-encoder passes (minutes
on a GPU-less machine). With ``prompt_cache=True`` the ``(C, D)`` class-embedding matrix is kept on disk in
``$GENEVAL_CACHE/clip_prompts`` (safetensors), keyed by the model, its weights (the pretrained tag, the sha256 of
a checkpoint file, or of the text tower's parameters when there is no file), the activation (QuickGELU or GELU),
the class names, the templates, the precision and open_clip's version; encoding logs its progress with an ETA.
All open_clip API details are fenced in this file.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save as save_safetensors
from torch import Tensor, nn

from genEval.checkpoints import WeightsUnavailable, cache_dir, hub_problem, require_file
from genEval.fileio import atomic_write_bytes, sha256_file
from genEval.interfaces import OLD_PRECISIONS, Judgement, check_images, precision_name
from oracles.classifier import check_labels, check_reference, check_threshold, judgement_from_logits

log = logging.getLogger(__name__)

PAPER_TEMPLATE = "an image of {}"
TEMPLATE_SETS = ("paper", "openai", "simple")
_UNREADABLE = re.compile(r"^(n\d{8}|\d+)$")  # WordNet ids (ImageNet folders) and bare numbers
PRECISIONS = ("fp32", "fp16", "bf16")
_CHECKPOINT_SUFFIXES = (".bin", ".pt", ".pth", ".safetensors", ".ckpt", ".npz")
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


def _check_templates(templates: str | Sequence[str]) -> tuple[str, ...]:
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


class CLIPOracle(nn.Module):
    """Zero-shot CLIP judge built with open_clip.

    Args:
        model_name: an open_clip architecture (``open_clip.list_models()``), e.g. ``"ViT-B-32"``;
            ``"hf-hub:org/repo"`` and ``"local-dir:/path"`` are passed to open_clip unchanged.
        pretrained: an open_clip pretrained tag for that model (``open_clip.list_pretrained()``),
            a local checkpoint file (``open_clip_pytorch_model.bin`` / ``.safetensors``), or ``None``
            for random weights (tests only).
        templates: prompt templates with ``{}`` or ``{class}`` (class embeddings average over them), or a
            named set: ``paper``, ``openai`` (80 prompts), ``simple`` (7).
        threshold: when set, acceptance also needs p(true class) >= threshold (in ``[0, 1]``).
        cache_dir: where open_clip caches downloaded weights (``None``: the Hugging Face cache).
        precision: ``fp32``, ``fp16`` or ``bf16`` (open_clip's mixed low precision).
        quick_gelu: use QuickGELU activations. ``None`` follows the pretrained tag (OpenAI weights
            need QuickGELU; open_clip's plain ``ViT-B-32`` config does not use it). Set it to
            ``true`` when ``pretrained`` is a local copy of OpenAI weights.
        reference: ``label`` (keep seeing the true class) or ``clean_prediction`` (keep its own verdict
            on the clean image); read by the driver.
        prompt_cache: keep the class embeddings on disk (``$GENEVAL_CACHE/clip_prompts``) and reuse them at the
            next start with the same model, weights, class names, templates and precision.
    """

    def __init__(
        self,
        model_name: str = "ViT-B-32",
        pretrained: str | None = "openai",
        templates: str | Sequence[str] = (PAPER_TEMPLATE,),
        threshold: float | None = None,
        cache_dir: str | None = None,
        precision: str = "fp32",
        quick_gelu: bool | None = None,
        reference: str = "label",
        prompt_cache: bool = True,
    ) -> None:
        super().__init__()
        import open_clip

        self.templates = _check_templates(templates)
        self.threshold = check_threshold(threshold, "CLIPOracle")
        self.reference = check_reference(reference, "CLIPOracle")
        if str(precision).removeprefix("torch.") in OLD_PRECISIONS:  # float32 | bfloat16 | float16: deprecated
            precision = precision_name(precision, "oracle.precision")
        if precision not in PRECISIONS:
            raise ValueError(f"CLIPOracle: unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}.")
        self.model_name = str(model_name)
        self.precision = precision
        self.prompt_cache = bool(prompt_cache)
        self._weights_file: Path | None = None  # a checkpoint file whose sha256 identifies the weights
        pretrained = None if pretrained in (None, "", "none", "None") else str(pretrained)
        schema = self.model_name.startswith(("hf-hub:", "local-dir:"))
        if not schema and self.model_name.replace("/", "-") not in open_clip.list_models():
            close = difflib.get_close_matches(self.model_name, open_clip.list_models(), n=8, cutoff=0.4)
            raise ValueError(
                f"CLIPOracle: open_clip has no model named {self.model_name!r}. Close matches: "
                f"{', '.join(close) if close else '(none)'}. See open_clip.list_models() for all "
                f"{len(open_clip.list_models())} names, e.g. oracle.model_name=ViT-B-32."
            )
        self.model_name = self.model_name if schema else self.model_name.replace("/", "-")

        kwargs: dict = {"precision": precision, "cache_dir": cache_dir}
        tag_cfg = {} if schema or pretrained is None else open_clip.get_pretrained_cfg(self.model_name, pretrained)
        if schema:
            self.source = "hub" if self.model_name.startswith("hf-hub:") else "local"
            model = open_clip.create_model(self.model_name, **kwargs)
        elif pretrained is None:
            self.source = "random"
            log.warning("CLIPOracle %s: no pretrained weights (pretrained=None); the judge is random.", self.model_name)
            model = open_clip.create_model(
                self.model_name, pretrained=None, force_quick_gelu=bool(quick_gelu), **kwargs
            )
        elif tag_cfg:
            self.source = pretrained
            model = self._create_from_tag(open_clip, pretrained, tag_cfg, quick_gelu, kwargs)
        elif pretrained.endswith(_CHECKPOINT_SUFFIXES) or os.sep in pretrained or os.path.exists(pretrained):
            path = require_file(
                pretrained,
                f"CLIP checkpoint for {self.model_name}",
                "Pass an existing open_clip checkpoint file via oracle.pretrained=/path/to/"
                "open_clip_pytorch_model.bin, or a pretrained tag from open_clip.list_pretrained().",
            )
            self.source = path.name
            self._weights_file = path
            try:
                model = open_clip.create_model(
                    self.model_name, pretrained=str(path), force_quick_gelu=bool(quick_gelu), **kwargs
                )
            except RuntimeError as err:
                raise ValueError(
                    f"CLIPOracle: checkpoint '{path}' does not fit open_clip model {self.model_name} "
                    f"({str(err).splitlines()[0][:300]}). Check that oracle.model_name matches the "
                    "architecture the checkpoint was trained with."
                ) from err
        else:
            tags = open_clip.list_pretrained_tags_by_model(self.model_name)
            raise ValueError(
                f"CLIPOracle: {pretrained!r} is neither a pretrained tag of {self.model_name} nor a "
                f"checkpoint file. Tags available for {self.model_name}: "
                f"{', '.join(tags) if tags else '(none: pass a checkpoint file path)'}. "
                "All (model, tag) pairs: open_clip.list_pretrained()."
            )

        self.name = f"clip:{self.model_name}:{self.source}"
        model.eval().requires_grad_(False)
        self.model = model
        self.tokenizer = open_clip.get_tokenizer(self.model_name)
        self.input_dtype = open_clip.get_input_dtype(precision) or torch.float32

        pp = open_clip.get_model_preprocess_cfg(model)
        size = pp.get("size", getattr(model.visual, "image_size", 224))
        self.image_size = (size, size) if isinstance(size, int) else tuple(int(s) for s in size)
        self.interpolation = "bilinear" if pp.get("interpolation") == "bilinear" else "bicubic"
        self.resize_mode = pp.get("resize_mode", "shortest")
        mean = pp.get("mean") or getattr(model.visual, "image_mean", None) or open_clip.OPENAI_DATASET_MEAN
        std = pp.get("std") or getattr(model.visual, "image_std", None) or open_clip.OPENAI_DATASET_STD
        as_buffer = lambda v: torch.tensor(v, dtype=torch.float32).view(1, -1, 1, 1)  # noqa: E731
        self.register_buffer("mean", as_buffer(mean), persistent=False)
        self.register_buffer("std", as_buffer(std), persistent=False)

        # (class names, templates) -> (C, D) normalised class embeddings; text is encoded once per key.
        self.text_cache: dict[tuple[tuple[str, ...], tuple[str, ...]], Tensor] = {}
        self.class_names: tuple[str, ...] | None = None

    def _create_from_tag(self, open_clip, tag: str, tag_cfg: dict, quick_gelu: bool | None, kwargs: dict) -> nn.Module:
        """The model with an official tag's weights: downloaded (or refreshed) when the hub answers, else the copy in
        the local Hugging Face cache, else a :class:`WeightsUnavailable` within seconds."""
        hub = tag_cfg.get("hf_hub", "").rstrip("/")
        where = f"https://huggingface.co/{hub}" if hub else tag_cfg.get("url", "its URL")
        needs_quick_gelu = bool(tag_cfg.get("quick_gelu", False))
        force = needs_quick_gelu if quick_gelu is None else bool(quick_gelu)
        fix = "oracle.pretrained=/path/to/open_clip_pytorch_model.bin"
        if needs_quick_gelu:
            fix += " oracle.quick_gelu=true"
        problem = hub_problem(None if hub else tag_cfg.get("url"))
        if problem is not None:
            local = _cached_tag_file(tag_cfg, kwargs.get("cache_dir"))
            if local is None:
                raise WeightsUnavailable(
                    f"CLIPOracle: the '{tag}' weights of {self.model_name} are not on this machine and cannot be "
                    f"downloaded from {where}: {problem}. Download the checkpoint on a machine with internet access "
                    f"and pass the local file with {fix}, or set oracle.cache_dir to a folder that already holds "
                    "the download."
                )
            log.warning("CLIPOracle %s: %s; using the cached '%s' weights %s", self.model_name, problem, tag, local)
            pre = {k: tag_cfg[k] for k in ("mean", "std", "interpolation", "resize_mode") if k in tag_cfg}
            return open_clip.create_model(
                self.model_name, pretrained=str(local), force_quick_gelu=force, force_preprocess_cfg=pre, **kwargs
            )
        try:
            open_clip.download_pretrained(tag_cfg, cache_dir=kwargs.get("cache_dir"))
        except Exception as err:  # the hub answered but the download failed: huggingface_hub raises many types
            reason = (str(err).splitlines() or [""])[0][:200]
            raise WeightsUnavailable(
                f"CLIPOracle: cannot download the '{tag}' weights of {self.model_name} from {where} "
                f"({type(err).__name__}: {reason}). Download the checkpoint on a machine with internet access and "
                f"pass the local file with {fix}, or set oracle.cache_dir to a folder that already holds the download."
            ) from err
        return open_clip.create_model(self.model_name, pretrained=tag, force_quick_gelu=force, **kwargs)

    # ----------------------------------------------------------------------------------------- text
    @torch.no_grad()
    def class_embeddings(self, class_names: Sequence[str]) -> Tensor:
        """(C, D) zero-shot head for ``class_names``: mean over templates of normalised text embeddings,
        re-normalised. Computed once per (class list, templates) and kept in ``text_cache``; with
        ``prompt_cache`` also on disk, so the next start with the same key reads it instead of encoding."""
        key = (tuple(str(c) for c in class_names), self.templates)
        cached = self.text_cache.get(key)
        if cached is not None:
            return cached
        path, meta = self._prompt_cache_entry(key[0]) if self.prompt_cache else (None, {})
        emb = _read_prompt_cache(path, meta, len(key[0])) if path is not None else None
        if emb is not None:
            log.info("oracle %s: class embeddings of %d prompts read from the cache %s", self.name, self._n(key), path)
        else:
            emb = self._encode(list(key[0]))
            if path is not None:
                atomic_write_bytes(path, save_safetensors({"class_embeddings": emb.cpu().contiguous()}, metadata=meta))
                log.info("oracle %s: class embeddings cached in %s", self.name, path)
        emb = emb.to(self.mean.device)
        self.text_cache[key] = emb
        return emb

    def _n(self, key: tuple[tuple[str, ...], tuple[str, ...]]) -> int:
        return len(key[0]) * len(key[1])

    def _encode(self, names: list[str]) -> Tensor:
        """Encode every prompt (open_clip's ``build_zero_shot_classifier``, a slice of classes at a time) and log
        the progress with an ETA every ``_PROGRESS_EVERY`` seconds. Returns (C, D) float32."""
        import open_clip

        fills = [lambda c, t=t: fill_template(t, c) for t in self.templates]  # "{class}" too, other braces kept
        per_call = max(1, _TEXT_CHUNK // len(self.templates))
        total = len(names) * len(self.templates)
        log.info(
            "oracle %s: encoding %d prompts (%d classes x %d templates) on %s%s",
            self.name,
            total,
            len(names),
            len(self.templates),
            self.mean.device,
            "; cached for the next start" if self.prompt_cache else "",
        )
        heads, start = [], time.perf_counter()
        last = start
        for first in range(0, len(names), per_call):
            chunk = names[first : first + per_call]
            heads.append(
                open_clip.build_zero_shot_classifier(
                    self.model, self.tokenizer, chunk, fills, device=self.mean.device, num_classes_per_batch=per_call
                ).float()
            )  # (D, len(chunk))
            now, done = time.perf_counter(), (first + len(chunk)) * len(self.templates)
            if now - last >= _PROGRESS_EVERY and done < total:
                rate = done / (now - start)
                log.info(
                    "oracle %s: encoded %d/%d prompts (%.0f prompts/s), ETA %s",
                    self.name,
                    done,
                    total,
                    rate,
                    _duration((total - done) / rate),
                )
                last = now
        log.info("oracle %s: encoded %d prompts in %s", self.name, total, _duration(time.perf_counter() - start))
        return F.normalize(torch.cat(heads, dim=1).T, dim=-1).contiguous()

    def _weights_id(self) -> str:
        """What identifies the weights: the tag, the sha256 of the checkpoint file, else of the text tower."""
        if self._weights_file is not None:
            return f"file-sha256:{sha256_file(self._weights_file)}"
        if self.source not in ("random", "hub", "local"):
            return f"tag:{self.source}"
        h = hashlib.sha256()
        for k, v in sorted(self.model.state_dict().items()):
            if not k.startswith("visual."):  # the image tower plays no part in the class embeddings
                h.update(k.encode())
                h.update(v.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
        return f"text-tower-sha256:{h.hexdigest()}"

    def _prompt_cache_entry(self, names: tuple[str, ...]) -> tuple[Path, dict[str, str]]:
        """The cache file of ``names`` under this oracle's settings, and the metadata it must carry."""
        import open_clip

        quick = any(type(m).__name__ == "QuickGELU" for m in self.model.modules())
        key = {
            "format": _CACHE_FORMAT,
            "model": self.model_name,
            "weights": self._weights_id(),
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

    def prompts(self, class_name: str) -> list[str]:
        """The prompts whose text embeddings make up ``class_name``'s zero-shot weight."""
        return [fill_template(t, str(class_name)) for t in self.templates]

    def prepare(self, class_names: list[str]) -> None:
        """Compute (or fetch from the cache) the class embeddings of ``class_names``."""
        names = list(class_names) if class_names is not None else []
        if not names:
            raise ValueError(
                f"oracle {self.name}: prepare() needs the dataset's class names, got none. Set data.class_names."
            )
        bad = [c for c in names if not isinstance(c, str) or not c.strip()]
        if bad:
            raise ValueError(
                f"oracle {self.name}: class names must be non-empty strings (CLIP reads them "
                f"in its prompts), got {bad[:5]!r}. Set data.class_names to readable names."
            )
        twice = sorted({c for c in names if names.count(c) > 1})
        if twice:
            raise ValueError(
                f"oracle {self.name}: the class names {twice} occur more than once; their prompts "
                "would be identical and the zero-shot head could not tell those classes apart. Give "
                "each class its own name in data.class_names."
            )
        self._log_prompts(names)
        self.class_embeddings(names)
        self.class_names = tuple(names)

    def _log_prompts(self, names: list[str]) -> None:
        unreadable = [c for c in names if _UNREADABLE.match(c.strip())]
        if unreadable:
            log.warning(
                "oracle %s: %d of %d class names look like WordNet ids or bare numbers (%s); CLIP reads "
                "them as text, so prompts such as %r carry no meaning. Map ImageNet wnid folders to names "
                "with data=imagenet, or set data.class_names to words (e.g. 'zero', 'one', ... for digits).",
                self.name,
                len(unreadable),
                len(names),
                ", ".join(unreadable[:5]),
                fill_template(self.templates[0], unreadable[0]),
            )
        log.info(
            "oracle %s: %d classes x %d templates = %d prompts; templates: %s",
            self.name,
            len(names),
            len(self.templates),
            len(names) * len(self.templates),
            list(self.templates),
        )
        for c in names[:5]:
            log.info("oracle %s: prompts of %r: %s", self.name, c, self.prompts(c))
        for c in names[5:]:
            log.debug("oracle %s: prompts of %r: %s", self.name, c, self.prompts(c))

    # --------------------------------------------------------------------------------------- images
    def preprocess(self, images: Tensor) -> Tensor:
        """[0, 1] images (B, 1 or 3, H, W) -> the model's input size and normalisation (B, 3, h, w)."""
        x = images.to(self.mean.device, torch.float32)
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        elif x.shape[1] != 3:
            raise ValueError(f"oracle {self.name}: expected 1 or 3 image channels, got {x.shape[1]}.")
        th, tw = self.image_size
        h, w = x.shape[-2:]
        if (h, w) != (th, tw):
            if self.resize_mode == "squash":
                size = (th, tw)
            else:  # "shortest" (CLIP's resize + centre crop) or "longest" (resize + centre pad)
                pick = min if self.resize_mode == "shortest" else max
                scale = pick(th / h, tw / w)
                size = (max(1, round(h * scale)), max(1, round(w * scale)))
            antialias = size[0] < h or size[1] < w
            x = F.interpolate(x, size=size, mode=self.interpolation, align_corners=False, antialias=antialias).clamp(
                0, 1
            )
            x = _center_crop_or_pad(x, th, tw)
        # open_clip's own precision sets the input dtype; with fp32 there, follow the weights (genEval's
        # precision=bf16 converts the whole oracle, buffers included: genEval.search.execution)
        dtype = self.input_dtype if self.input_dtype != torch.float32 else self.mean.dtype
        return ((x - self.mean) / self.std).to(dtype)

    @torch.no_grad()
    def logits(self, images: Tensor) -> Tensor:
        """(B, C) zero-shot logits for the prepared classes."""
        if self.class_names is None:
            raise RuntimeError(
                f"oracle {self.name}: call prepare(class_names) before judge(); the zero-shot "
                "head needs the dataset's class names."
            )
        text = self.class_embeddings(self.class_names)
        img = F.normalize(self.model.encode_image(self.preprocess(images)).float(), dim=-1)
        scale = self.model.logit_scale.exp().float()
        return scale * img @ text.to(img.device).T

    @torch.no_grad()
    def judge(self, images: Tensor, labels: Tensor) -> Judgement:
        """Judge ``images`` (B, C, H, W) in [0, 1] against ``labels`` (B,) long."""
        check_images(images, f"oracle {self.name}")
        n = None if self.class_names is None else len(self.class_names)
        labels = check_labels(labels, images.shape[0], n, f"oracle {self.name}")
        out = judgement_from_logits(self.logits(images), labels, self.threshold)
        dev = images.device
        return Judgement(out.accept.to(dev), out.scores.to(dev), out.predictions.to(dev))

    def _apply(self, fn, *args, **kwargs):
        # Keep cached class embeddings on the model's device when the oracle is moved.
        out = super()._apply(fn, *args, **kwargs)
        cache = getattr(self, "text_cache", {})
        self.text_cache = {k: v.to(self.mean.device) for k, v in cache.items()}
        return out

    def extra_repr(self) -> str:
        more = [f"... ({len(self.templates)} templates)"] if len(self.templates) > 4 else []
        shown = list(self.templates[:4]) + more
        return (
            f"name={self.name!r}, templates={shown!r}, threshold={self.threshold}, "
            f"reference={self.reference!r}, precision={self.precision!r}, image_size={self.image_size}, "
            f"interpolation={self.interpolation!r}, prompt_cache={self.prompt_cache}"
        )

    def __repr__(self) -> str:  # the full open_clip module tree would drown the settings
        return f"{type(self).__name__}({self.extra_repr()})"


def _center_crop_or_pad(x: Tensor, th: int, tw: int) -> Tensor:
    """Centre-crop (or zero-pad) ``x`` (B, C, H, W) to (th, tw)."""
    h, w = x.shape[-2:]
    if h < th or w < tw:
        ph, pw = max(0, th - h), max(0, tw - w)
        x = F.pad(x, (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2))
        h, w = x.shape[-2:]
    top, left = (h - th) // 2, (w - tw) // 2
    return x[..., top : top + th, left : left + tw]


def _cached_tag_file(tag_cfg: dict, cache_dir: str | None) -> Path | None:
    """The local copy of a tag's weights in the Hugging Face cache (no network), or None.

    Looks for the files open_clip's ``download_pretrained`` fetches: the safetensors alternative first, then the
    named file (``open_clip_pytorch_model.bin`` when the tag names only the repository).
    """
    from huggingface_hub import try_to_load_from_cache
    from open_clip.pretrained import HF_SAFE_WEIGHTS_NAME, HF_WEIGHTS_NAME

    hub = tag_cfg.get("hf_hub", "")
    if not hub:
        return None
    repo, filename = os.path.split(hub)
    filename = filename or HF_WEIGHTS_NAME
    candidates = [HF_SAFE_WEIGHTS_NAME] if filename == HF_WEIGHTS_NAME else []
    if filename != HF_WEIGHTS_NAME and filename.endswith((".bin", ".pth")):
        candidates.append(filename[:-4] + ".safetensors")
    for name in [*candidates, filename]:
        found = try_to_load_from_cache(repo, name, cache_dir=cache_dir)
        if isinstance(found, str) and os.path.isfile(found):
            return Path(found)
    return None


def _read_prompt_cache(path: Path, meta: dict[str, str], n_classes: int) -> Tensor | None:
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
