"""What every plug-in owes the engine, whatever its role: its protocol, the declared type of every hook it has, and
a declaration (made from its settings before it is built) that describes the object built from them."""

from __future__ import annotations

import pytest
from omegaconf import DictConfig, ListConfig
from pydantic import TypeAdapter, ValidationError

from genEval.commands import config_options
from genEval.commands.checks import declaration
from genEval.commands.settings import target_of
from genEval.declared import normalised
from genEval.interfaces import HOOKS, Classifier, Generator, Oracle
from tests.support.options import GROUPS, OPTIONS, options

PROTOCOLS = {"generator": Generator, "oracle": Oracle, "classifier": Classifier}
#: Hooks read from the config's ``_target_`` (a class or factory), not from the built object.
TARGET_HOOKS = ("declare", "check_available")


def test_every_option_of_the_plugin_groups_is_catalogued():
    for group in GROUPS:
        listed = sorted(o.name for o in OPTIONS if o.group == group)
        assert listed == config_options(group), f"conf/{group}: list every option in tests/support/options.py"


@pytest.mark.parametrize("option", options())
def test_the_built_object_follows_its_protocol(option, plugin):
    assert isinstance(plugin.obj, PROTOCOLS[option.group]), f"{option} built {type(plugin.obj).__name__}"
    if option.group == "generator":
        assert isinstance(plugin.obj.name, str) and plugin.obj.name
        assert isinstance(plugin.obj.downsample, int) and plugin.obj.downsample >= 1
    if option.group == "classifier":
        assert isinstance(plugin.obj.num_classes, int) and plugin.obj.num_classes >= 1


def hook_problems(obj, target, role: str) -> list[str]:
    """Every hook of ``role`` that ``obj`` (or, for the target's hooks, ``target``) has with a value that does not
    satisfy the type HOOKS declares for it."""
    problems = []
    for h in HOOKS.values():
        owner = target if h.name in TARGET_HOOKS else obj
        if role not in h.roles or not hasattr(owner, h.name):
            continue
        try:
            TypeAdapter(h.type).validate_python(getattr(owner, h.name), strict=True)
        except ValidationError as err:
            problems.append(f"{h.name} = {getattr(owner, h.name)!r} is not {h.type}: {err.errors()[0]['msg']}")
    return problems


@pytest.mark.parametrize("option", options())
def test_every_hook_it_has_has_the_type_HOOKS_declares(option, plugin):
    problems = hook_problems(plugin.obj, target_of(plugin.node), option.group)
    assert not problems, f"{option}: " + "; ".join(problems)
    if option.group == "classifier" and getattr(plugin.obj, "class_names", None) is not None:
        assert len(plugin.obj.class_names) == plugin.obj.num_classes, "class_names must name every logit"


def test_a_hook_of_the_wrong_type_is_named():
    """The check above can fail: a classifier whose class_names is one string, a generator whose decoded_latents is
    not callable, an oracle with an unknown reference."""

    class Wrong:
        class_names, decoded_latents, reference, precision_mode = "cat", 3, "truth", "half"

    def named(role: str) -> list[str]:
        return [p.split(" =")[0] for p in hook_problems(Wrong(), None, role)]

    assert named("classifier") == ["class_names", "precision_mode"]
    assert named("generator") == ["precision_mode", "decoded_latents"]
    assert named("oracle") == ["precision_mode", "reference"]


def _judges(oracle) -> list:
    """The classifiers inside a built oracle that judge with fixed classes (a zoo's members), in config order."""
    from oracles.classifier import ClassifierOracle

    return [m.classifier for m in oracle.modules() if isinstance(m, ClassifierOracle)]


def _declared_judges(node) -> list:
    """The class sets the oracle's config declares for its judges, outermost first (as the cheap checks read them)."""
    decl = declaration(node)
    if decl is not None and decl.classes is not None:
        return [decl.classes]
    children = [node[k] for k in node if k != "_target_"] if isinstance(node, DictConfig) else []
    children = list(node) if isinstance(node, ListConfig) else children
    return [c for child in children for c in _declared_judges(child)]


def _classes_agree(declared, model) -> str | None:
    """Why a declared class set does not describe a built classifier ``model``, or None."""
    if declared.count is not None and declared.count != model.num_classes:
        return f"declares {declared.count} classes, built {model.num_classes} logits"
    names = getattr(model, "class_names", None)
    if declared.names is not None and names is not None:
        if [normalised(n) for n in declared.names] != [normalised(n) for n in names]:
            return f"declares the classes {list(declared.names)[:5]}..., built {list(names)[:5]}..."
    return None


@pytest.mark.parametrize("option", options())
def test_declare_agrees_with_the_built_object(option, plugin):
    """The cheap checks trust a declaration instead of building the object (genEval.declared): whatever it states
    must be true of what gets built. A field it leaves None is unknown and not checked."""
    obj, decl = plugin.obj, declaration(plugin.node)
    if option.group == "classifier":
        if decl is None or decl.classes is None:
            pytest.skip(f"{option} declares no classes")
        assert _classes_agree(decl.classes, obj) is None, f"{option} {_classes_agree(decl.classes, obj)}"
    elif option.group == "oracle":
        declared, judges = _declared_judges(plugin.node), _judges(obj)
        if not declared:  # no fixed classes: it takes the data's, whatever they are
            obj.prepare(["tench", "goldfish"])
            return
        assert len(declared) == len(judges), f"{option} declares {len(declared)} judges, built {len(judges)}"
        for d, j in zip(declared, judges, strict=True):
            assert _classes_agree(d, j) is None, f"{option}: a judge {_classes_agree(d, j)}"
    else:
        if decl is None:
            pytest.skip(f"{option} declares nothing")
        x = plugin.images()
        z = obj.encode(x)
        out = obj.decode(z)
        if decl.downsample is not None:
            assert obj.downsample == decl.downsample
        if decl.channels is not None:
            assert out.shape[1] == decl.channels, f"declares {decl.channels} channels, decodes {out.shape[1]}"
        if decl.size is not None:
            assert tuple(out.shape[-2:]) == decl.size, f"declares images of {decl.size}, decodes {out.shape[-2:]}"
        shape = decl.latent_shape(tuple(x.shape[-2:]))
        if shape is not None:
            assert tuple(z.shape[1:]) == shape, f"declares latents {shape}, encodes {tuple(z.shape[1:])}"
