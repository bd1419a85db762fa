"""Cheap checks first (docs/assets.md): the pieces of a run are checked against each other from their configs alone,
before any of them is built, so a mismatch stops within seconds and not after minutes of prompt encoding, weight
downloads, first-use training or a scan of the data.

:func:`check_run` checks, in this order:

1. every ``asset:<path>`` in the configs is on this machine, or can be fetched now (:func:`genEval.assets.missing`);
2. every component that can tell (a ``check_available`` hook on its ``_target_``) can be built now: its weights
   are cached or downloadable;
3. the tested classifier's classes against the data's: their number, and their names (or label space) whenever both
   are known, and the same for every judge inside the oracle that knows its classes; a folder of one class is
   refused unless ``allow_one_class=true`` (every image is of that class: a model that always answers it scores 100);
4. the data's images (channels, size) against each generator: channels, and sides that are multiples of its
   down-sampling;
5. a style mask file's latent shape against the generator's latent shape for these images.

What a component is comes from the ``declare`` hook of its ``_target_`` (:mod:`genEval.declared`): computed from the
settings alone, listing at most the data's class folders. A mismatch is one ``ValueError`` naming the presets that fit
(found by declaring every option of the group on Hydra's search path). Anything a declaration leaves unknown is
left to the component's own checks when it is built.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from genEval.assets import is_asset, missing, resolve
from genEval.commands import group_option, group_options, plain, searchpath
from genEval.commands.settings import target_of
from genEval.declared import FAMILIES, ClassSet, Declaration
from genEval.interfaces import hook

#: Overrides that test a model of a label space no shipped preset covers without further settings.
FAMILY_HINTS = {
    "imagenet1k": (
        "classifier=timm classifier.name=resnet50.a1_in1k",
        "classifier=torchvision classifier.name=resnet50",
    )
}
_HYDRA_KEYS = {"_target_", "_convert_", "_recursive_", "_partial_", "_args_"}


@dataclass(frozen=True)
class Style:
    """How the command at hand names a role's presets in advice: ``classifier=a (or b, c)`` for ``geneval``,
    ``'classifiers=[a,b,c]'`` for ``geneval compare``, ``model.kind=config model.name=a`` for a service job."""

    command: str = "geneval"

    def presets(self, group: str, names: list[str]) -> str:
        if self.command == "compare" and group == "classifier":
            return f"'classifiers=[{','.join(names)}]'"
        if self.command == "service" and group == "classifier":
            return " or ".join(f"model.kind=config model.name={n}" for n in names[:3])
        return f"{group}={names[0]}" + (f" (or {', '.join(names[1:])})" if len(names) > 1 else "")


def check_run(
    cfg: DictConfig,
    *,
    classifiers: Mapping[str, DictConfig],
    generators: Mapping[str, DictConfig],
    style: Style = Style(),
) -> None:
    """Check the run of ``cfg`` (its ``data``, ``oracle`` and ``mask``) with the tested ``classifiers`` and the
    ``generators`` (config key -> node, e.g. ``{"classifier": cfg.classifier}``) before anything is built; raise one
    ``ValueError`` (or ``FileNotFoundError``) naming the mismatch and the presets that fit (module docstring)."""
    data, oracle, mask = cfg.get("data"), cfg.get("oracle"), cfg.get("mask")
    roles = {"data": data, **classifiers, **generators, "oracle": oracle, "mask": mask}
    roles = {k: v for k, v in roles.items() if isinstance(v, DictConfig)}
    for key, node in roles.items():
        _check_assets(node, key)
    for key, node in roles.items():
        for at, sub, target in _targets(node, key):
            check = hook(target, "check_available")
            args = _arguments(sub, target) if callable(check) else None
            if args is not None:
                check(config_key=at, **args)
    shape = declaration(data) or Declaration()
    if shape.classes is not None:
        _check_classes(cfg, classifiers, shape.classes, style)
        _check_one_class(cfg, shape.classes)
        if isinstance(oracle, DictConfig):
            _check_oracle(cfg, oracle, _labels(shape.classes, classifiers))
    for key, node in generators.items():
        _check_generator(cfg, key, node, shape, mask if isinstance(mask, DictConfig) else None)


# ------------------------------------------------------------------------------------------- declarations
def declaration(node: Any) -> Declaration | None:
    """What the component of config ``node`` will be (its target's ``declare`` hook), or None when its target has no
    hook or a setting is still missing (``???``)."""
    if not isinstance(node, DictConfig) or "_target_" not in node:
        return None
    target = target_of(node)
    declare = hook(target, "declare")
    args = _arguments(node, target) if callable(declare) else None
    return None if args is None else declare(**args)


def _arguments(node: DictConfig, target: Callable | None) -> dict[str, Any] | None:
    """The node's values (resolved, plain) with the target's defaults filled in; None when a value is missing."""
    if target is None or OmegaConf.missing_keys(node):
        return None
    given = {k: v for k, v in plain(node).items() if k not in _HYDRA_KEYS}
    try:
        bound = inspect.signature(target).bind_partial(**given)
    except (TypeError, ValueError):
        return None
    bound.apply_defaults()
    params = inspect.signature(target).parameters
    if any(
        p.default is p.empty and n not in given and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        for n, p in params.items()
    ):
        return None
    args = dict(bound.arguments)
    for name, p in params.items():  # **kwargs of the target arrive as their own keys
        if p.kind is p.VAR_KEYWORD:
            args.update(args.pop(name, {}))
    return args


def _targets(node: Any, key: str) -> Iterator[tuple[str, DictConfig, Callable]]:
    """``(config key, node, target)`` of every ``_target_`` node in ``node``'s tree, parents first."""
    if isinstance(node, DictConfig):
        target = target_of(node) if "_target_" in node else None
        if target is not None:
            yield key, node, target
        for k in node:
            if str(k) not in _HYDRA_KEYS and not OmegaConf.is_missing(node, k):
                yield from _targets(node[k], f"{key}.{k}")
    elif isinstance(node, ListConfig):
        for i, item in enumerate(node):
            yield from _targets(item, f"{key}.{i}")


def _judges(node: Any, key: str) -> Iterator[tuple[str, ClassSet]]:
    """The outermost nodes of ``node``'s tree that declare classes (an oracle's judges: a zoo's classifiers)."""
    decl = declaration(node)
    if decl is not None and decl.classes is not None:
        yield key, decl.classes
        return
    children = node.items() if isinstance(node, DictConfig) else enumerate(node) if isinstance(node, ListConfig) else ()
    for k, child in children:
        if str(k) not in _HYDRA_KEYS and isinstance(child, (DictConfig, ListConfig)):
            yield from _judges(child, f"{key}.{k}")


def _check_assets(node: Any, key: str) -> None:
    """Every ``asset:`` value in ``node`` is here or can be fetched now; else :func:`genEval.assets.resolve`'s error
    (which names the file, where it was looked for and how to get it)."""
    if isinstance(node, DictConfig):
        for k in node:
            if not OmegaConf.is_missing(node, k):
                _check_assets(node[k], f"{key}.{k}")
    elif isinstance(node, ListConfig):
        for i, item in enumerate(node):
            _check_assets(item, f"{key}.{i}")
    elif is_asset(node) and missing(str(node)):
        resolve(str(node))


# ------------------------------------------------------------------------------------------- classes
def _check_classes(cfg: DictConfig, classifiers: Mapping[str, DictConfig], data: ClassSet, style: Style) -> None:
    """Refuse tested classifiers whose classes are not the data's, naming the presets that fit."""
    wrong = []
    for key, node in classifiers.items():
        decl = declaration(node)
        why = decl.classes.mismatch(data) if decl is not None and decl.classes is not None else None
        if why is not None:
            wrong.append((key, decl.classes, why))
    if not wrong:
        return
    fits = _fitting_presets(cfg, "classifier", lambda d: _knows(d.classes, data))
    hints = FAMILY_HINTS.get(data.family or "", ())
    if fits:
        fix = f"Test a classifier trained on these classes: {style.presets('classifier', fits)}"
        fix += f", or e.g. {' or '.join(hints)}" if hints and style.command == "geneval" else ""
        if style.command == "compare":  # the data preset's oracle may hold some of them (cifar10_jpg: ResNet-32, -56)
            fix += (
                " (a model that is also a member of the oracle is refused as judged by itself: pick another oracle, "
                "e.g. oracle=clip_vit_b32, or allow_self_judging=true)"
            )
    elif hints:
        fix = f"Test a {_title(data)} classifier, e.g. " + " or ".join(hints)
    else:
        fix = "Test a classifier trained on these classes, or give data.class_names in the classifier's logit order"
    where = "an explicit classifier=... replaces the data preset's default" if style.command == "geneval" else ""
    data_name = choice(cfg, "data")
    groups: dict[tuple[ClassSet, str], list[str]] = {}
    for key, classes, why in wrong:
        groups.setdefault((classes, why), []).append(key)
    parts = []
    for (classes, why), keys in groups.items():
        who = f"classifier {choice(cfg, 'classifier')}" if keys == ["classifier"] else ", ".join(keys)
        parts.append(f"{who} {'was' if len(keys) == 1 else 'were'} trained on {classes.describe()} ({why})")
    head = "; ".join(parts) + f", but data {data_name} has {data.describe()}"
    them = "it would be tested on classes it does" if len(wrong) == 1 else "they would be tested on classes they do"
    raise ValueError(f"{head}: {them} not know. {fix}" + (f" ({where})." if where else "."))


def classifiers_for(cfg: DictConfig) -> list[str]:
    """The classifier presets that know the classes of ``cfg``'s data by name or label space (what a comparison on
    these data could test), from their declarations; [] when the data's classes are not known."""
    data = declaration(cfg.get("data"))
    if data is None or data.classes is None:
        return []
    return _fitting_presets(cfg, "classifier", lambda d: _knows(d.classes, data.classes))


def _check_one_class(cfg: DictConfig, data: ClassSet) -> None:
    """Refuse data of a single class folder unless ``allow_one_class=true``."""
    if data.names is None or len(data.names) != 1 or not data.mapped or cfg.get("allow_one_class", False):
        return
    raise ValueError(
        f"data {choice(cfg, 'data')} has one class folder ({data.names[0]}): every image is of that class, so SA, PA "
        "and FMR measure that class alone and a model that always answers it scores 100. Add the folders of the "
        "other classes, or set allow_one_class=true to run it anyway."
    )


def check_snapshot_classes(cfg: DictConfig, key: str, class_names: list[str], where: str) -> None:
    """Refuse to score the classifier of ``cfg[key]`` on a snapshot of other classes (``class_names``, the snapshot's
    manifest; ``where``: the snapshot), naming the classifier presets that fit, before the classifier is built."""
    node = cfg.get(key)
    decl = declaration(node) if isinstance(node, DictConfig) else None
    snapshot = ClassSet(class_names)
    why = decl.classes.mismatch(snapshot) if decl is not None and decl.classes is not None else None
    if why is None:
        return
    fits = _fitting_presets(cfg, "classifier", lambda d: d.classes is not None and d.classes.mismatch(snapshot) is None)
    fix = f"Score it with a classifier of these classes: {Style().presets('classifier', fits)}" if fits else (
        "Score it with a classifier trained on these classes")  # fmt: skip
    raise ValueError(
        f"classifier {choice(cfg, key)} was trained on {decl.classes.describe()} but snapshot {where} holds images "
        f"of {snapshot.describe()} ({why}): its accuracies would be meaningless. {fix}."
    )


def _check_oracle(cfg: DictConfig, oracle: DictConfig, data: ClassSet) -> None:
    """Refuse an oracle with a judge trained on other classes than the data's, naming the oracle presets that fit."""
    for key, classes in _judges(oracle, "oracle"):
        why = classes.mismatch(data)
        if why is None:
            continue
        exact = _fitting_presets(cfg, "oracle", None, judges=data)
        fix = (
            f"Use {Style().presets('oracle', exact)}, whose judges were trained on these classes"
            if exact
            else "Use an oracle trained on these classes, or oracle=clip (zero-shot: it reads any class names)"
        )
        raise ValueError(
            f"oracle {choice(cfg, 'oracle')} ({key}) was trained on {classes.describe()} but the data's classes are "
            f"{data.describe()} ({why}); it would judge images of classes it does not know. {fix} (an explicit "
            "oracle=... replaces the data preset's default)."
        )


def _labels(data: ClassSet, classifiers: Mapping[str, DictConfig]) -> ClassSet:
    """The classes the run labels its images with: folders mapped onto the one tested classifier's classes take those
    (``ship/`` becomes CIFAR-10's class 8), as :func:`genEval.commands.build_data` does; else the data's own."""
    if not data.mapped or len(classifiers) != 1:
        return data
    decl = declaration(next(iter(classifiers.values())))
    return decl.classes if decl is not None and decl.classes is not None and decl.classes.names else data


def _knows(classes: ClassSet | None, data: ClassSet) -> bool:
    """A model that knows the data's classes by name or label space (not only their number)."""
    return (
        classes is not None
        and (classes.names is not None or classes.family is not None)
        and classes.mismatch(data) is None
    )


def _title(classes: ClassSet) -> str:
    return FAMILIES.get(classes.family or "", "")


# ------------------------------------------------------------------------------------------- images
def _check_generator(cfg: DictConfig, key: str, node: DictConfig, data: Declaration, mask: DictConfig | None) -> None:
    """The data's channels and size against the generator; a mask's latent shape against its latents."""
    gen = declaration(node)
    if gen is None:
        return
    who = f"generator {choice(cfg, 'generator')}" if key == "generator" else key
    data_name = choice(cfg, "data")
    if gen.channels is not None and data.channels is not None and gen.channels != data.channels:
        fits = _fitting_presets(cfg, "generator", lambda d: d.channels in (None, data.channels))
        fix = (
            f"Use a generator for {data.channels}-channel images: {Style().presets('generator', fits)}"
            if fits
            else (f"Use a generator trained on {data.channels}-channel images")
        )
        raise ValueError(
            f"{who} takes {gen.channels}-channel images but data {data_name} gives {data.channels}-channel images. "
            f"{fix} (an explicit generator=... replaces the data preset's default)."
        )
    size = gen.size or data.size
    d = gen.downsample
    if size is not None and d and (size[0] % d or size[1] % d):
        near = max(d, round(size[0] / d) * d)
        raise ValueError(
            f"{who} down-samples by {d}, so image sides must be multiples of {d}, but data {data_name} gives "
            f"{size[0]}x{size[1]} px. Set generator.image_size={near} (or another multiple of {d}) to resize the "
            "images inside the generator."
        )
    fitted = declaration(mask)
    latents = gen.latent_shape(size) if size is not None else None
    if fitted is not None and fitted.latents is not None and latents is not None and latents != fitted.latents:
        raise ValueError(
            f"mask.path={mask.get('path')} was fitted for latents of shape {fitted.latents}, but {who} makes latents "
            f"of shape {latents} from these {size[0]}x{size[1]} images. A style mask only fits the generator and "
            "image size it was fitted for: refit it with geneval fit-mask on a run of this generator (or use "
            "mask=auto)."
        )


# ------------------------------------------------------------------------------------------- presets
def choice(cfg: DictConfig, group: str) -> str:
    """The preset of ``group`` the run composed (``digits_cnn``), else its target's last name."""
    # a config composed with return_hydra_config=True tells itself (and wins over a HydraConfig that an earlier
    # in-process run left set); under @hydra.main the hydra node is stripped and HydraConfig tells
    name = OmegaConf.select(cfg, f"hydra.runtime.choices.{group}", default=None)
    if name is None and OmegaConf.select(cfg, "hydra", default=None) is None:
        try:
            name = HydraConfig.get().runtime.choices.get(group)
        except ValueError:  # not under @hydra.main
            name = None
    if name:
        return str(name)
    node = cfg.get(group)
    if isinstance(node, DictConfig) and "_target_" in node:
        return str(node._target_).rsplit(".", 1)[-1]
    return group


def _fitting_presets(
    cfg: DictConfig,
    group: str,
    fits: Callable[[Declaration], bool] | None,
    judges: ClassSet | None = None,
) -> list[str]:
    """The options of ``group`` (on Hydra's search path) that need no further value and whose declaration ``fits``;
    for oracles (``judges``), those whose every judge knows these classes (at least one judge)."""
    paths = searchpath(cfg)
    root = copy.deepcopy(cfg)
    found = []
    for name in group_options(group, paths):
        try:
            with open_dict(root):
                root[f"_{group}_preset"] = group_option(group, name, paths)
            node = root[f"_{group}_preset"]
            if OmegaConf.missing_keys(node):
                continue
            if judges is not None:
                found_judges = list(_judges(node, group))
                ok = bool(found_judges) and all(c.mismatch(judges) is None for _, c in found_judges)
            else:
                decl = declaration(node)
                ok = decl is not None and fits(decl)
        except Exception:  # noqa: BLE001 - a preset that cannot even be declared here does not fit
            continue
        if ok:
            found.append(name)
    return found
