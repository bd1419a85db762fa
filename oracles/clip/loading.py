"""The open_clip model of the CLIP oracle (:class:`oracles.clip.CLIPOracle`): an architecture by name, with an
official pretrained tag's weights, a local checkpoint file, or random weights (tests).

A tag's weights are taken from the local Hugging Face cache when the hub cannot be reached (or
``HF_HUB_OFFLINE=1``); when they are not there either, loading stops at once (one ``HEAD`` request, no download
retries) with a :class:`genEval.checkpoints.WeightsUnavailable` naming ``oracle.pretrained=<local file>``. All open_clip
loading details are fenced in this file.
"""

from __future__ import annotations

import difflib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from genEval.checkpoints import WeightsUnavailable, hub_problem, require_file

log = logging.getLogger(__name__)

_CHECKPOINT_SUFFIXES = (".bin", ".pt", ".pth", ".safetensors", ".ckpt", ".npz")


@dataclass(frozen=True)
class LoadedModel:
    """An open_clip model and where its weights came from."""

    model: nn.Module
    model_name: str  # open_clip's spelling ("ViT-B/32" -> "ViT-B-32"); hf-hub: / local-dir: names unchanged
    source: str  # the pretrained tag, the checkpoint's file name, "random", "hub" or "local"
    weights_file: Path | None  # a checkpoint file whose sha256 identifies the weights


def load_model(
    model_name: str, pretrained: str | None, precision: str, cache_dir: str | None, quick_gelu: bool | None
) -> LoadedModel:
    """The open_clip model ``model_name`` with ``pretrained`` weights (a tag, a checkpoint file or None), in open_clip's
    ``precision``; a wrong name, tag or file is a ValueError naming the close matches or the fix."""
    import open_clip

    model_name = str(model_name)
    weights_file: Path | None = None  # a checkpoint file whose sha256 identifies the weights
    pretrained = None if pretrained in (None, "", "none", "None") else str(pretrained)
    schema = model_name.startswith(("hf-hub:", "local-dir:"))
    if not schema and model_name.replace("/", "-") not in open_clip.list_models():
        close = difflib.get_close_matches(model_name, open_clip.list_models(), n=8, cutoff=0.4)
        raise ValueError(
            f"CLIPOracle: open_clip has no model named {model_name!r}. Close matches: "
            f"{', '.join(close) if close else '(none)'}. See open_clip.list_models() for all "
            f"{len(open_clip.list_models())} names, e.g. oracle.model_name=ViT-B-32."
        )
    model_name = model_name if schema else model_name.replace("/", "-")

    kwargs: dict = {"precision": precision, "cache_dir": cache_dir}
    tag_cfg = {} if schema or pretrained is None else open_clip.get_pretrained_cfg(model_name, pretrained)
    if schema:
        source = "hub" if model_name.startswith("hf-hub:") else "local"
        model = open_clip.create_model(model_name, **kwargs)
    elif pretrained is None:
        source = "random"
        log.warning("CLIPOracle %s: no pretrained weights (pretrained=None); the judge is random.", model_name)
        model = open_clip.create_model(model_name, pretrained=None, force_quick_gelu=bool(quick_gelu), **kwargs)
    elif tag_cfg:
        source = pretrained
        model = _create_from_tag(open_clip, model_name, pretrained, tag_cfg, quick_gelu, kwargs)
    elif pretrained.endswith(_CHECKPOINT_SUFFIXES) or os.sep in pretrained or os.path.exists(pretrained):
        path = require_file(
            pretrained,
            f"CLIP checkpoint for {model_name}",
            "Pass an existing open_clip checkpoint file via oracle.pretrained=/path/to/"
            "open_clip_pytorch_model.bin, or a pretrained tag from open_clip.list_pretrained().",
        )
        source = path.name
        weights_file = path
        try:
            model = open_clip.create_model(
                model_name, pretrained=str(path), force_quick_gelu=bool(quick_gelu), **kwargs
            )
        except RuntimeError as err:
            raise ValueError(
                f"CLIPOracle: checkpoint '{path}' does not fit open_clip model {model_name} "
                f"({str(err).splitlines()[0][:300]}). Check that oracle.model_name matches the "
                "architecture the checkpoint was trained with."
            ) from err
    else:
        tags = open_clip.list_pretrained_tags_by_model(model_name)
        raise ValueError(
            f"CLIPOracle: {pretrained!r} is neither a pretrained tag of {model_name} nor a "
            f"checkpoint file. Tags available for {model_name}: "
            f"{', '.join(tags) if tags else '(none: pass a checkpoint file path)'}. "
            "All (model, tag) pairs: open_clip.list_pretrained()."
        )
    return LoadedModel(model, model_name, source, weights_file)


def _create_from_tag(
    open_clip, model_name: str, tag: str, tag_cfg: dict, quick_gelu: bool | None, kwargs: dict
) -> nn.Module:
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
                f"CLIPOracle: the '{tag}' weights of {model_name} are not on this machine and cannot be "
                f"downloaded from {where}: {problem}. Download the checkpoint on a machine with internet access "
                f"and pass the local file with {fix}, or set oracle.cache_dir to a folder that already holds "
                "the download."
            )
        log.warning("CLIPOracle %s: %s; using the cached '%s' weights %s", model_name, problem, tag, local)
        pre = {k: tag_cfg[k] for k in ("mean", "std", "interpolation", "resize_mode") if k in tag_cfg}
        return open_clip.create_model(
            model_name, pretrained=str(local), force_quick_gelu=force, force_preprocess_cfg=pre, **kwargs
        )
    try:
        open_clip.download_pretrained(tag_cfg, cache_dir=kwargs.get("cache_dir"))
    except Exception as err:  # the hub answered but the download failed: huggingface_hub raises many types
        reason = (str(err).splitlines() or [""])[0][:200]
        raise WeightsUnavailable(
            f"CLIPOracle: cannot download the '{tag}' weights of {model_name} from {where} "
            f"({type(err).__name__}: {reason}). Download the checkpoint on a machine with internet access and "
            f"pass the local file with {fix}, or set oracle.cache_dir to a folder that already holds the download."
        ) from err
    return open_clip.create_model(model_name, pretrained=tag, force_quick_gelu=force, **kwargs)


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
