"""CLIP zero-shot oracle (paper Sec. 3.2 and Sec. 4: OpenAI CLIP ViT-B/32 judges each perturbed image
with the prompt ``"an image of {class}"``; METHOD.md "Actors").

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
checkpoint file, or ``None`` for random initialisation (tests). All open_clip API details are
fenced in this file.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from genEval.checkpoints import require_file
from genEval.interfaces import Judgement, check_images
from oracles.classifier import check_labels, check_reference, check_threshold, judgement_from_logits

log = logging.getLogger(__name__)

PAPER_TEMPLATE = "an image of {}"
TEMPLATE_SETS = ("paper", "openai", "simple")
_UNREADABLE = re.compile(r"^(n\d{8}|\d+)$")  # WordNet ids (ImageNet folders) and bare numbers
PRECISIONS = ("fp32", "fp16", "bf16")
_CHECKPOINT_SUFFIXES = (".bin", ".pt", ".pth", ".safetensors", ".ckpt", ".npz")
_TEXT_CHUNK = 512  # prompts per text-encoder call: bounds memory for 1000 classes x 80 templates


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
    ) -> None:
        super().__init__()
        import open_clip

        self.templates = _check_templates(templates)
        self.threshold = check_threshold(threshold, "CLIPOracle")
        self.reference = check_reference(reference, "CLIPOracle")
        if precision not in PRECISIONS:
            raise ValueError(f"CLIPOracle: unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}.")
        self.model_name = str(model_name)
        self.precision = precision
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
        """Download (or find in the cache) the weights of an official tag, then build the model."""
        hub = tag_cfg.get("hf_hub", "").rstrip("/")
        where = f"https://huggingface.co/{hub}" if hub else tag_cfg.get("url", "its URL")
        needs_quick_gelu = bool(tag_cfg.get("quick_gelu", False))
        try:
            open_clip.download_pretrained(tag_cfg, cache_dir=kwargs.get("cache_dir"))
        except Exception as err:  # no network: huggingface_hub / urllib raise many different types
            fix = "oracle.pretrained=/path/to/open_clip_pytorch_model.bin"
            if needs_quick_gelu:
                fix += " oracle.quick_gelu=true"
            reason = (str(err).splitlines() or [""])[0][:200]
            raise RuntimeError(
                f"CLIPOracle: cannot download the '{tag}' weights of {self.model_name} from {where}: the "
                f"model hub is unreachable ({type(err).__name__}: {reason}). Download the checkpoint on a "
                f"machine with internet access and pass the local file with {fix}, or set "
                "oracle.cache_dir to a folder that already holds the download."
            ) from err
        force = needs_quick_gelu if quick_gelu is None else bool(quick_gelu)
        return open_clip.create_model(self.model_name, pretrained=tag, force_quick_gelu=force, **kwargs)

    # ----------------------------------------------------------------------------------------- text
    @torch.no_grad()
    def class_embeddings(self, class_names: Sequence[str]) -> Tensor:
        """(C, D) zero-shot head for ``class_names``: mean over templates of normalised text embeddings,
        re-normalised. Computed once per (class list, templates) and kept in ``text_cache``."""
        import open_clip

        key = (tuple(str(c) for c in class_names), self.templates)
        cached = self.text_cache.get(key)
        if cached is not None:
            return cached
        fills = [lambda c, t=t: fill_template(t, c) for t in self.templates]  # "{class}" too, other braces kept
        head = open_clip.build_zero_shot_classifier(
            self.model,
            self.tokenizer,
            list(key[0]),
            fills,
            device=self.mean.device,
            num_classes_per_batch=max(1, _TEXT_CHUNK // len(self.templates)),
        )  # (D, C)
        emb = F.normalize(head.T.float(), dim=-1)
        self.text_cache[key] = emb
        log.debug("%s: encoded %d prompts for %d classes", self.name, len(key[0]) * len(self.templates), len(key[0]))
        return emb

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
        return ((x - self.mean) / self.std).to(self.input_dtype)

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
            f"interpolation={self.interpolation!r}"
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
