"""Tested classifiers from files and libraries: CIFAR ResNets, timm and torchvision models by name, model files
(``torch.export`` programs and TorchScript, told apart by content), and any ``nn.Module`` Hydra builds. Each
factory returns a frozen :class:`~genEval.classifiers.base.ImageClassifier` (``[0, 1]`` images in, logits out).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from genEval.assets import offline
from genEval.checkpoints import (
    TORCH_EXPORT,
    TORCH_SAVE,
    WeightsUnavailable,
    error_reason,
    hub_problem,
    load_exported_program,
    require_file,
)
from genEval.classifiers.architectures import CifarResNet
from genEval.classifiers.base import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImageClassifier,
    as_size,
    closest,
    freeze,
    load_weights,
)
from genEval.data.standard import CIFAR10_CLASSES
from genEval.declared import ClassSet, Declaration, declared_by
from genEval.interfaces import SettingError
from genEval.model_ops import check_model_file
from genEval.sandbox import Limits

log = logging.getLogger(__name__)


def counted(num_classes: int | None, names: Sequence[str] | None = None) -> Declaration:
    """The declaration of a model with ``num_classes`` logits: a 1000-way model is read in the ImageNet-1k order
    (what every 1k classifier uses), ``names`` give the classes' names when known."""
    if num_classes is None:
        return Declaration()
    family = "imagenet1k" if int(num_classes) == 1000 else None
    return Declaration(classes=ClassSet(names, count=int(num_classes), family=family))


# --------------------------------------------------------------------------------------------- CIFAR
def _declare_cifar(num_classes: int = 10, **_: object) -> Declaration:
    if int(num_classes) == len(CIFAR10_CLASSES):
        return Declaration(classes=ClassSet(CIFAR10_CLASSES, family="cifar10"))
    return counted(num_classes)


@declared_by(_declare_cifar)
def cifar_resnet(
    depth: int = 20, checkpoint: str | Path | None = None, num_classes: int = 10, allow_pickle: bool = False
) -> ImageClassifier:
    """Option-A CIFAR ResNet (depth 20/32/44/56), 32 px input, ImageNet mean/std normalisation.

    ``checkpoint``: a state dict (akamaster's ``{'state_dict', 'best_prec1'}`` with ``module.`` prefixes
    works as is); ``None`` leaves the network randomly initialised (logged as a warning).
    """

    net = CifarResNet(int(depth), num_classes=int(num_classes))
    if checkpoint is not None:
        load_weights(
            net,
            checkpoint,
            what=f"CIFAR ResNet-{depth} checkpoint",
            allow_pickle=allow_pickle,
            hint="Set classifier.checkpoint to a .th/.pt/.safetensors state dict for this depth.",
        )
    else:
        log.warning("cifar_resnet(depth=%s) has no checkpoint: weights are random", depth)
    tag = Path(checkpoint).name if checkpoint is not None else "random"
    names = CIFAR10_CLASSES if int(num_classes) == len(CIFAR10_CLASSES) else None
    return freeze(
        ImageClassifier(
            net, num_classes, IMAGENET_MEAN, IMAGENET_STD, 32, name=f"cifar_resnet{depth}:{tag}", class_names=names
        )
    )


# ---------------------------------------------------------------------------------------------- timm
def _declare_timm(name: str, num_classes: int | None = None, **_: object) -> Declaration:
    """timm's pretrained config tells a model's classes without building it (1000 for ``*_in1k`` tags)."""
    if num_classes is None:
        import timm

        cfg = timm.models.get_pretrained_cfg(name) if timm.is_model(name) else None
        num_classes = getattr(cfg, "num_classes", None)
    return counted(num_classes)


@declared_by(_declare_timm)
def timm_classifier(
    name: str,
    pretrained: bool = False,
    checkpoint: str | Path | None = None,
    num_classes: int | None = None,
    allow_pickle: bool = False,
    input_size: int | Sequence[int] | None = None,
) -> ImageClassifier:
    """A timm model by name; mean/std/input size come from timm's data config for that model.

    ``pretrained=True`` downloads weights from timm's hub; offline, build with ``pretrained=false`` and
    give ``checkpoint`` (a state dict file). ``input_size`` overrides timm's (e.g. 32 for CIFAR models).
    """
    import timm

    if not timm.is_model(name):
        raise ValueError(
            f"unknown timm model '{name}'. Close names: {closest(name, timm.list_models())}. "
            "See timm.list_models() for all."
        )
    kwargs = {} if num_classes is None else {"num_classes": int(num_classes)}
    try:
        model = timm.create_model(name, pretrained=bool(pretrained), **kwargs)
    except Exception as err:
        if not pretrained:
            raise
        raise RuntimeError(
            f"timm could not load pretrained weights for '{name}' ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:200]}). Offline, set classifier.pretrained=false and "
            "classifier.checkpoint=<state dict file>."
        ) from err
    if checkpoint is not None:
        load_weights(model, checkpoint, what=f"timm '{name}' checkpoint", allow_pickle=allow_pickle)
    # timm >= 0.9 has resolve_model_data_config; older releases only resolve_data_config.
    if hasattr(timm.data, "resolve_model_data_config"):
        cfg = timm.data.resolve_model_data_config(model)
    else:
        cfg = timm.data.resolve_data_config({}, model=model)
    size = input_size if input_size is not None else cfg["input_size"]
    n = int(getattr(model, "num_classes", num_classes or 0))
    src = Path(checkpoint).name if checkpoint is not None else ("pretrained" if pretrained else "random")
    return freeze(ImageClassifier(model, n, cfg["mean"], cfg["std"], size, name=f"timm:{name}:{src}"))


# ------------------------------------------------------------------------------------------ torchvision
def _torchvision_weights(name: str, weights: str):
    """Resolve ``"DEFAULT"``/``"IMAGENET1K_V2"`` (for ``name``) or ``"ResNet50_Weights.IMAGENET1K_V2"``."""
    from torchvision.models import get_model_weights, get_weight

    if "." in weights:
        try:
            return get_weight(weights)
        except (ValueError, KeyError, AttributeError) as err:
            raise ValueError(f"unknown torchvision weights '{weights}'.") from err
    enum = get_model_weights(name)
    if weights not in enum.__members__:
        raise ValueError(f"torchvision model '{name}' has no weights '{weights}'; available: {list(enum.__members__)}.")
    return enum[weights]


def _declare_torchvision(
    name: str, weights: str | None = None, num_classes: int | None = None, **_: object
) -> Declaration:
    from torchvision.models import list_models

    if name not in list_models():
        return Declaration()  # building it names the close matches
    if weights is None or num_classes is not None:
        return counted(num_classes or 1000)
    categories = _torchvision_weights(name, str(weights)).meta.get("categories") or []
    return counted(len(categories) or 1000, categories or None)


def torchvision_weights_file(name: str, weights: str) -> tuple[str, Path]:
    """The download URL of torchvision ``name``'s ``weights`` and the file torch keeps it in
    (``$TORCH_HOME/hub/checkpoints/<file>``; torchvision loads that file without a request when it is there)."""
    url = _torchvision_weights(name, weights).url
    return url, Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(url)


def _torchvision_available(config_key: str, name: str, weights: str | None = None, **_: object) -> None:
    """Refuse, within seconds, weights that are neither in torch's cache nor downloadable now."""
    from torchvision.models import list_models

    if weights is None or name not in list_models():
        return
    url, path = torchvision_weights_file(name, str(weights))
    if path.is_file():
        return
    problem = "downloads are off (GENEVAL_OFFLINE / HF_HUB_OFFLINE)" if offline() else hub_problem(url)
    if problem is None:
        return
    raise WeightsUnavailable(
        f"the {weights} weights of torchvision's {name} ({config_key}) are not on this machine (looked for "
        f"'{path}') and cannot be downloaded: {problem}. Copy {path.name} from a machine with internet access "
        f"({url}) into '{path.parent}' (the torch hub cache, $TORCH_HOME), or test a local copy: "
        f"{config_key}.weights=null {config_key}.checkpoint=/path/to/{path.name}"
    )


@declared_by(_declare_torchvision, _torchvision_available)
def torchvision_classifier(
    name: str,
    weights: str | None = None,
    checkpoint: str | Path | None = None,
    num_classes: int | None = None,
    allow_pickle: bool = False,
    input_size: int | Sequence[int] | None = None,
) -> ImageClassifier:
    """A torchvision model by name (``torchvision.models.get_model``).

    With ``weights`` (e.g. ``"DEFAULT"``, ``"IMAGENET1K_V2"``) mean, std and crop size come from the
    weights' transforms and are downloaded by torchvision; otherwise ImageNet mean/std at 224 px, and
    ``checkpoint`` may supply a state dict.
    """
    from torchvision.models import get_model, list_models

    if name not in list_models():
        raise ValueError(f"unknown torchvision model '{name}'. Close names: {closest(name, list_models())}.")
    kwargs = {} if num_classes is None else {"num_classes": int(num_classes)}
    mean, std, size, n = IMAGENET_MEAN, IMAGENET_STD, 224, num_classes or 1000
    w = None
    if weights is not None:
        w = _torchvision_weights(name, str(weights))
        tf = w.transforms()
        mean, std, size = tuple(tf.mean), tuple(tf.std), as_size(list(tf.crop_size))
        n = num_classes or len(w.meta.get("categories") or []) or 1000
    try:
        model = get_model(name, weights=w, **kwargs)
    except Exception as err:
        if w is None:
            raise
        raise RuntimeError(
            f"torchvision could not load weights {w} for '{name}' ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:200]}). Offline, set classifier.weights=null and "
            "classifier.checkpoint=<state dict file>."
        ) from err
    if checkpoint is not None:
        load_weights(model, checkpoint, what=f"torchvision '{name}' checkpoint", allow_pickle=allow_pickle)
    src = Path(checkpoint).name if checkpoint is not None else (str(w) if w is not None else "random")
    return freeze(
        ImageClassifier(
            model, n, mean, std, input_size if input_size is not None else size, name=f"torchvision:{name}:{src}"
        )
    )


# ------------------------------------------------------------------------------------ model files
class ExportedModule(nn.Module):
    """The module of a ``torch.export`` program (``ExportedProgram.module()``) as a fixed function.

    ``train()``/``eval()`` leave the graph as it was exported (torch refuses to switch an exported graph's mode;
    export the model in eval mode). A program exported with a fixed batch size ``batch`` is called on chunks of
    that size, the last one padded with copies of its last image whose outputs are dropped, so any batch works
    and gradients reach only the real images.
    """

    def __init__(self, program: nn.Module, batch: int | None) -> None:
        super().__init__()
        self.program, self.batch = program, batch

    def train(self, mode: bool = True) -> ExportedModule:
        self.training = mode  # not passed on: the exported graph has no mode to switch
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.batch is None or x.shape[0] == self.batch:
            return self.program(x)
        outs = []
        for chunk in x.split(self.batch):
            n = chunk.shape[0]
            if n < self.batch:
                chunk = torch.cat([chunk, chunk[-1:].expand(self.batch - n, *chunk.shape[1:])])
            outs.append(self.program(chunk)[:n])
        return torch.cat(outs)


def _exported_model(path: Path) -> tuple[nn.Module, int | None, tuple[int, int] | None]:
    """A ``torch.export`` program as a module, the channel count and the (H, W) its one image input was exported
    with (None where a dimension is dynamic)."""
    program = load_exported_program(path, "torch.export model")
    user_inputs = list(program.graph_signature.user_inputs)
    if len(user_inputs) != 1:
        raise ValueError(
            f"the torch.export model '{path.name}' takes {len(user_inputs)} inputs ({', '.join(user_inputs)}); a "
            "classifier takes one batch of images (B, C, H, W). Export it with a single image input."
        )
    node = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name == user_inputs[0])
    shape = tuple(node.meta["val"].shape) if "val" in node.meta else ()
    if len(shape) != 4:
        raise ValueError(
            f"the torch.export model '{path.name}' was exported with an input of shape {shape}; a classifier takes "
            "images shaped (B, C, H, W). Export it with an example batch such as torch.rand(8, 3, 224, 224)."
        )
    fixed = [int(d) if isinstance(d, int) else None for d in shape]
    batch, channels = fixed[0], fixed[1]
    if batch is not None:
        log.warning(
            "torch.export model %s was exported with a fixed batch size of %d: it is run on chunks of %d images. "
            "Export with a dynamic batch (dynamic_shapes={'x': {0: torch.export.Dim('batch')}}) to run whole "
            "batches.",
            path.name,
            batch,
            batch,
        )
    size = (fixed[2], fixed[3]) if fixed[2] is not None and fixed[3] is not None else None
    return ExportedModule(program.module(), batch), channels, size


def _scripted_model(path: Path) -> nn.Module:
    with warnings.catch_warnings():  # torch >= 2.9 deprecates jit in favour of export; jit still works
        warnings.simplefilter("ignore", FutureWarning)
        try:
            return torch.jit.load(str(path), map_location="cpu")
        except Exception as err:  # noqa: BLE001 - torch raises RuntimeError and friends with the reason
            raise ValueError(
                f"'{path}' is not a loadable TorchScript archive ({error_reason(err, 200)}). Save the model with "
                "torch.export.save(torch.export.export(model, (example,)), path) or torch.jit.save(torch.jit."
                "script(model), path), or use classifier=module for a state dict."
            ) from err


def _input_channels(model: nn.Module, input_size: int | Sequence[int] | None) -> int | None:
    """Channels a model takes: from its first 4-D (conv) weight, else by a forward probe at ``input_size``
    (32 px when unset) with 3 and then 1 channel; None when neither tells."""
    for _, p in model.named_parameters():
        if p.ndim == 4:
            return int(p.shape[1])
    side = as_size(input_size) or 32
    hw = (side, side) if isinstance(side, int) else side
    for c in (3, 1):
        try:
            with torch.no_grad():
                model(torch.zeros(1, c, *hw))
            return c
        except RuntimeError:
            continue
    return None


def _declare_counted(num_classes: int | None = None, **_: object) -> Declaration:
    return counted(num_classes)


@declared_by(_declare_counted)
def torchscript_classifier(
    path: str | Path,
    num_classes: int,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    input_size: int | Sequence[int] | None = None,
    check_timeout_s: float = 300.0,
    check_memory_mb: int = 16384,
) -> ImageClassifier:
    """A model file taking normalised images: a ``torch.export`` program (``torch.export.save``, ``.pt2``) or a
    TorchScript module (``torch.jit.save``), told apart by the archive's layout, not its name; a plain
    ``torch.save`` pickle is refused. ``mean``/``std``/``input_size`` describe the preprocessing it was
    trained with.

    The file is first opened in a sandboxed child process (:func:`genEval.model_ops.check_model_file`: a time limit,
    ``check_timeout_s``, a memory limit, ``check_memory_mb``, no network, and where bubblewrap works no filesystem but
    the file): loading TorchScript runs the archive's code, and a file whose loading never returns or fills the memory
    is refused there, naming the limit, instead of freezing this process. A file whose code or graph calls an op that
    touches files, processes or the network is refused there too, before it is loaded, naming the op
    (:mod:`genEval.model_ops`). Only a file that passed there is loaded here.

    Without ``mean``/``std`` the channel count is read from the model (an exported program's input shape; a
    script's first convolution weight, or a forward probe): 3 channels get ImageNet's mean/std, 1 channel mean 0 /
    std 1 (no normalisation, with a warning naming ``classifier.mean``/``classifier.std``). An exported program
    with a fixed image size gets that size as ``input_size`` when none is given.
    """
    p = require_file(
        path,
        "model file (torch.export or TorchScript)",
        "Set classifier.path to a file saved with torch.export.save (.pt2) or torch.jit.save.",
    )
    limits = Limits(check_timeout_s, check_memory_mb, "classifier.check_timeout_s", "classifier.check_memory_mb")
    checked = check_model_file(p, None, limits, what=f"the check of model file '{p.name}'")
    kind = checked["kind"]
    if "refused" in checked:
        raise ValueError(checked["refused"])
    if kind == TORCH_SAVE or kind is None:
        raise ValueError(
            f"'{p}' is {'a torch.save archive (a pickle)' if kind == TORCH_SAVE else 'not a zip archive'}, neither a "
            "torch.export program nor TorchScript; pickles are never loaded (they run code). Save the model with "
            "torch.export.save(torch.export.export(model.eval(), (example,)), 'model.pt2'), or give its state dict "
            "to classifier=module / timm / torchvision."
        )
    if kind == TORCH_EXPORT:
        model, channels, exported_size = _exported_model(p)
        if input_size is None:
            input_size = exported_size
        elif exported_size is not None and as_size(input_size) not in (exported_size, exported_size[0]):
            raise SettingError(
                "input_size",
                input_size,
                f"the size the program was exported with ({exported_size[0]}x{exported_size[1]}) or null",
                f"[{exported_size[0]},{exported_size[1]}]",
            )
        tag, what = f"export:{p.name}", "torch.export model"
    else:
        model = _scripted_model(p)
        channels, tag, what = _input_channels(model, input_size), f"torchscript:{p.name}", "TorchScript model"
    if (mean is None) != (std is None):
        raise ValueError("give both classifier.mean and classifier.std (one entry per input channel), or neither.")
    if mean is None:
        if channels is None:
            raise ValueError(
                f"cannot tell how many channels the {what} '{p.name}' takes (no conv "
                "weight, and a probe with 3 and 1 channels failed). Set classifier.mean and "
                "classifier.std with one entry per channel (e.g. classifier.mean=[0.5] "
                "classifier.std=[0.5]) and classifier.input_size."
            )
        mean, std = (IMAGENET_MEAN, IMAGENET_STD) if channels == 3 else ((0.0,) * channels, (1.0,) * channels)
        if channels != 3:
            log.warning(
                "%s %s takes %d channel(s); no mean/std given, so images in [0, 1] are "
                "passed unnormalised. Set classifier.mean=[...] classifier.std=[...] to its training "
                "normalisation.",
                what,
                p.name,
                channels,
            )
    elif channels is not None and len(mean) != channels:
        raise ValueError(
            f"classifier.mean/std have {len(mean)} entries but the {what} '{p.name}' takes "
            f"{channels}-channel images; give {channels} entries (e.g. classifier.mean="
            f"[{', '.join(['0.5'] * channels)}])."
        )
    log.info("model file %s: a %s", p.name, what)
    return freeze(ImageClassifier(model, num_classes, mean, std, input_size, name=tag))


# --------------------------------------------------------------------------------------------- module
@declared_by(_declare_counted)
def module_classifier(
    module: nn.Module,
    num_classes: int,
    checkpoint: str | Path | None = None,
    mean: Sequence[float] = (0.0, 0.0, 0.0),
    std: Sequence[float] = (1.0, 1.0, 1.0),
    input_size: int | Sequence[int] | None = None,
    allow_pickle: bool = False,
    name: str | None = None,
) -> ImageClassifier:
    """Any ``nn.Module`` (Hydra builds it from ``module._target_``) plus an optional state dict file."""
    if not isinstance(module, nn.Module):
        raise TypeError(
            f"classifier.module must build an nn.Module, got {type(module).__name__}. Give it "
            "a `_target_:` naming the model class and its arguments."
        )
    if checkpoint is not None:
        load_weights(module, checkpoint, what=f"{type(module).__name__} checkpoint", allow_pickle=allow_pickle)
    tag = name or f"module:{type(module).__name__}:{Path(checkpoint).name if checkpoint else 'random'}"
    return freeze(ImageClassifier(module, num_classes, mean, std, input_size, name=tag))
