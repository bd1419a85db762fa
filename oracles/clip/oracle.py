"""CLIP zero-shot oracle (paper Sec. 3.2 and Sec. 4: OpenAI CLIP ViT-B/32 judges each perturbed image
with the prompt ``"an image of {class}"``; docs/method.md, "The actors").

The zero-shot head follows Radford et al. (2021, Sec. 3.1.4): every class gets the mean of the
normalised text embeddings of its prompts (one per template), re-normalised
(``open_clip.build_zero_shot_classifier``); an image's logits are ``logit_scale * <image embedding,
class embedding>``. The oracle accepts an image when the argmax is the reference class (the true label, or
with ``reference="clean_prediction"`` its own verdict on the clean image) and, optionally, its softmax
probability reaches ``threshold``.

``templates``: the prompts, or a named set (``paper``, ``openai``, ``simple``): :mod:`oracles.clip.prompts`, which
also keeps the class embeddings on disk (``prompt_cache=True``, :class:`~oracles.clip.prompts.PromptCache`). The
prompts are logged when the oracle is prepared (templates and the prompts of the first classes; every prompt at
DEBUG level), and a warning says when class names look like WordNet ids or bare numbers, which CLIP cannot read.

Models come from open_clip (:mod:`oracles.clip.loading`): ``pretrained`` is an open_clip tag (e.g. ``openai``), a
local checkpoint file, or ``None`` for random initialisation (tests); without the hub, a tag's weights come from the
local Hugging Face cache or construction stops at once naming ``oracle.pretrained=<local file>``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from genEval.interfaces import OLD_PRECISIONS, Judgement, check_images, precision_name
from oracles.classifier import check_labels, check_reference, check_threshold, judgement_from_logits
from oracles.clip.loading import load_model
from oracles.clip.prompts import PAPER_TEMPLATE, PromptCache, check_templates, encode_prompts, fill_template

log = logging.getLogger(__name__)

_UNREADABLE = re.compile(r"^(n\d{8}|\d+)$")  # WordNet ids (ImageNet folders) and bare numbers
PRECISIONS = ("fp32", "fp16", "bf16")


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

        self.templates = check_templates(templates)
        self.threshold = check_threshold(threshold, "CLIPOracle")
        self.reference = check_reference(reference, "CLIPOracle")
        if str(precision).removeprefix("torch.") in OLD_PRECISIONS:  # float32 | bfloat16 | float16: deprecated
            precision = precision_name(precision, "oracle.precision")
        if precision not in PRECISIONS:
            raise ValueError(f"CLIPOracle: unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}.")
        self.precision = precision
        self.prompt_cache = bool(prompt_cache)
        loaded = load_model(model_name, pretrained, precision, cache_dir, quick_gelu)
        model, self.model_name, self.source = loaded.model, loaded.model_name, loaded.source
        self.disk_cache = PromptCache(
            model, self.model_name, self.source, loaded.weights_file, precision, self.templates
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
        path, meta = self.disk_cache.entry(key[0]) if self.prompt_cache else (None, {})
        emb = PromptCache.read(path, meta, len(key[0])) if path is not None else None
        if emb is not None:
            log.info("oracle %s: class embeddings of %d prompts read from the cache %s", self.name, self._n(key), path)
        else:
            emb = self._encode(list(key[0]))
            if path is not None:
                PromptCache.write(path, meta, emb)
                log.info("oracle %s: class embeddings cached in %s", self.name, path)
        emb = emb.to(self.mean.device)
        self.text_cache[key] = emb
        return emb

    def _n(self, key: tuple[tuple[str, ...], tuple[str, ...]]) -> int:
        return len(key[0]) * len(key[1])

    def _encode(self, names: list[str]) -> Tensor:
        """(C, D) float32 class embeddings of ``names``, encoded now (:func:`oracles.clip.prompts.encode_prompts`)."""
        log.info(
            "oracle %s: encoding %d prompts (%d classes x %d templates) on %s%s",
            self.name,
            len(names) * len(self.templates),
            len(names),
            len(self.templates),
            self.mean.device,
            "; cached for the next start" if self.prompt_cache else "",
        )
        return encode_prompts(self.model, self.tokenizer, names, self.templates, self.mean.device, self.name)

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
