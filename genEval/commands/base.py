"""What every command shares (docs/architecture.md, "Layers": commands): the error policy, the one instantiation
helper, the bundles a command's config makes. :mod:`genEval.commands` re-exports every name here.

Every ``geneval`` command is a function ``run_<name>(cfg)`` in one module of this package, one module per
command group, registered with :func:`command` under its name in :data:`genEval.commands.registry.COMMANDS`. This is
the only layer that sees a Hydra ``DictConfig``, prints, or chooses an exit code; the library below takes objects and
returns data.

* :func:`command` wraps a command once: user errors (a bad value, a missing file, anything raised while a
  component is built) become one paragraph ``geneval <command>: error: <message>`` on stderr and exit status 2,
  never a traceback (``HYDRA_FULL_ERROR=1`` shows it, as for Hydra's own errors). SIGTERM and SIGINT stop a command
  cleanly (:mod:`genEval.runs.stopping`: a run directory keeps its finished samples and its lock is released) and exit
  with 143 and 130.
* :func:`build` is the one instantiation helper: it checks the node's keys and value types against its
  ``_target_`` first (:mod:`genEval.commands.settings`), then calls Hydra ``instantiate`` and turns whatever
  the component raises into a :class:`BuildError` that names the role (a setting's error names its config key).
* :func:`build_data` builds the data set with the tested classifier's class names when the data set maps folders
  onto classes by name and its config names no classes.
* :func:`config_nodes` (:func:`classifier_nodes`) turns a list or mapping of config names into config nodes,
  finding the names on Hydra's search path like ``geneval classifier=<name>`` does; :func:`classifier_factories`
  makes them factories.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.experimental.callback import Callback
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from genEval.commands.early import plain
from genEval.commands.policy import BuildError, error_message
from genEval.commands.registry import CONF_DIR
from genEval.commands.settings import check_node, parameters, target_of
from genEval.comparisons.executors import EvaluationsFailed
from genEval.comparisons.settings import STOP_DEFAULTS, ComparisonSettings, StopRule
from genEval.fileio import ensure_writable_dir
from genEval.interfaces import SettingError, component_id, hook
from genEval.runs.recording import RunOutput
from genEval.scores.run_scores import Scoring
from genEval.search.perturb import NonFiniteError

#: The config keys of the scoring and output bundles: the groups conf/scoring and conf/output, which conf/config.yaml
#: and conf/compare.yaml compose at their top level (``n_boot=200``, ``save_images=true``).
SCORING_FIELDS = tuple(Scoring.__dataclass_fields__)
OUTPUT_FIELDS = tuple(f for f in RunOutput.__dataclass_fields__ if f != "dir")

log = logging.getLogger("genEval")
#: Exceptions that mean "the user asked for something that cannot work": message, exit 2 (see
#: :func:`genEval.commands.policy.user_errors`, which this module's imports complete).
USER_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    OSError,
    ImportError,
    NonFiniteError,
    BuildError,
    EvaluationsFailed,
)


class CheckOutputDir(Callback):
    """Hydra makes the run directory and writes ``.hydra/`` and its log there before a command starts, so a directory
    that cannot be written (read-only, forbidden, a full disk) would end in Hydra's traceback. This callback
    (``hydra.callbacks`` in ``conf/config.yaml``) checks it first and turns the problem into one
    ``geneval: error:`` paragraph naming the directory, exit status 2."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(OmegaConf.select(config, "hydra.run.dir"))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(OmegaConf.select(config, "hydra.sweep.dir"))

    @staticmethod
    def _check(where: Any) -> None:
        if where is None or os.environ.get("HYDRA_FULL_ERROR") == "1":
            return
        try:
            ensure_writable_dir(str(where), probe_bytes=4096)
        except OSError as err:
            print(f"geneval: error: {error_message(err)}", file=sys.stderr)
            sys.exit(2)


def build(cfg: DictConfig, role: str, **kwargs: Any) -> Any:
    """Instantiate one component from its config node (the single instantiation helper).

    ``role`` is the config key of the node (``data``, ``classifiers.r20``): errors name it. Keys the ``_target_``
    does not take and values of the wrong type are refused before anything is built
    (:func:`genEval.commands.settings.check_node`); whatever building raises becomes a :class:`BuildError`
    ``while building <role>: <the component's message>``, with a setting's error under its config key
    (``data.limit must be ...``). ``kwargs`` are passed to the target on top of the config.
    """
    check_node(cfg, role)
    try:
        return instantiate(cfg, _convert_="partial", **kwargs)
    except Exception as err:  # noqa: BLE001 - every failure to build is reported as one teaching paragraph
        raise _build_error(err, cfg, role) from _unwrapped(err)


def _unwrapped(err: BaseException) -> BaseException:
    """The error the component itself raised (Hydra wraps it in InstantiationExceptions, one per nested node)."""
    while isinstance(err, InstantiationException) and err.__cause__ is not None:
        err = err.__cause__
    return err


def _build_error(err: BaseException, node: DictConfig, role: str) -> BaseException:
    cause = _unwrapped(err)
    if isinstance(cause, SettingError):
        return cause.under(_node_key(err, node, role))
    return BuildError(f"while building {role}: {error_message(cause)}")


def _node_key(err: BaseException, node: DictConfig, role: str) -> str:
    """The config key of the (possibly nested) node whose target raised. Hydra writes the node's key in its
    config as ``full_key: <key>`` on the last line of its wrapper; it is re-rooted at ``role``, the key of
    ``node`` on the command line."""
    found = re.search(r"full_key: (\S+)\s*$", str(err)) if isinstance(err, InstantiationException) else None
    if not found:
        return role
    # OmegaConf writes list items as [i]; the command line (and this message) as .i
    key, base = (re.sub(r"\[(\d+)\]", r".\1", k) for k in (found.group(1), node._get_full_key(None)))
    if base and key.startswith(base):
        return role + key[len(base) :]
    return role


def build_data(cfg: DictConfig, classifier: Any, role: str = "data") -> Any:
    """Build the data set of ``cfg`` for ``classifier``: when the data set maps sub-folders onto classes by name
    (its target takes ``known_classes``, as :class:`genEval.data.ImageFolderData` does), the config names no
    classes (``class_names: null``) and the classifier knows the classes it was trained on
    (``classifier.class_names``), the folders are mapped onto the classifier's class indices
    (``ship/`` -> 8 for a CIFAR-10 model), instead of being numbered 0..k-1."""
    known = hook(classifier, "class_names")
    target = target_of(cfg) if "_target_" in cfg else None
    takes = target is not None and "known_classes" in parameters(target)[0]
    if known and takes and cfg.get("class_names") is None and cfg.get("known_classes") is None:
        who = component_id(classifier)
        return build(cfg, role, known_classes=list(known), known_from=f"classifier {who}")
    return build(cfg, role)


def scoring_from(cfg: DictConfig) -> Scoring:
    """The scoring settings of a command's config (conf/scoring: ``interval``, ``n_boot``, ``gap_warn_points``,
    ``oracle_warn_accuracy`` at the top level) as the bundle ``genEval.evaluate`` takes."""
    return Scoring.coerce({k: plain(cfg[k]) for k in SCORING_FIELDS if k in cfg})


def output_from(cfg: DictConfig, run_dir: str | Path | None) -> RunOutput:
    """What a run of a command's config writes and shows (conf/output: ``save_latents``, ``save_images``,
    ``grid_size``, ``progress``, ``log_interval`` at the top level), into ``run_dir``."""
    return RunOutput(run_dir, **{k: plain(cfg[k]) for k in OUTPUT_FIELDS if k in cfg})


def comparison_settings_from(cfg: DictConfig) -> ComparisonSettings:
    """How ``geneval compare`` aggregates (``baselines``, ``er_min_r2``, ``er.scale``, ``er.floor``, ``n_boot``,
    ``rank_by``, ``label_free.sensitivity``, and the stop rule: ``stop``, ``round_sources``, ``max_sources``,
    ``confidence``, ``margin``, ``resolution``, ``familywise``, ``boundary``, ``spending`` and ``rule``; the bootstrap
    seed and level at their defaults) as the one object compare, ablation and re-ranking take."""
    given = {k: plain(cfg[k]) for k in ("baselines", "er_min_r2", "n_boot", "rank_by") if cfg.get(k) is not None}
    rule = {k: plain(cfg[k]) for k in (*STOP_DEFAULTS, "rule") if cfg.get(k) is not None}
    er = cfg.get("er") or {}  # er.scale (logit | probit) and er.floor (percent), docs/comparing.md
    given |= {f"er_{k}": plain(er[k]) for k in ("scale", "floor") if er.get(k) is not None}
    sensitivity = plain((cfg.get("label_free") or {}).get("sensitivity", False))  # docs/scores.md
    return ComparisonSettings(**given, sequential=StopRule(**rule), label_free_sensitivity=sensitivity)


def hydra_output_dir() -> Path | None:
    """The Hydra run directory under ``@hydra.main``; None under ``compose`` (tests, notebooks), also when an earlier
    ``compose(return_hydra_config=True)`` left Hydra's config set without a run directory."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf.errors import MissingMandatoryValue

    try:
        return Path(HydraConfig.get().runtime.output_dir)
    except (ValueError, MissingMandatoryValue):
        return None


def require(cfg: DictConfig, key: str, cmd: str, example: str) -> Any:
    """``cfg[key]``, or a teaching error when it is missing or empty."""
    value = cfg.get(key) if not OmegaConf.is_missing(cfg, key) else None
    if value is None or (isinstance(value, (ListConfig, DictConfig)) and len(value) == 0):
        raise ValueError(f"geneval {cmd} needs {key}=...; e.g. geneval {cmd} {example}")
    return value


def searchpath(cfg: DictConfig | None = None) -> list[str]:
    """The ``hydra.searchpath`` in effect: the running Hydra app's (``hydra.searchpath=[file://...]`` on the
    command line or in the primary config), else ``cfg.hydra.searchpath`` (``compose(..., return_hydra_config=True)``),
    else none."""
    try:
        found = HydraConfig.get().searchpath
    except ValueError:
        found = OmegaConf.select(cfg, "hydra.searchpath", default=None) if cfg is not None else None
    return [str(p) for p in (found or [])]


@contextlib.contextmanager
def _hydra_ready() -> Iterator[None]:
    """Hydra's compose API ready: the running app's (inside ``@hydra.main`` or ``initialize*``), else this package's
    configs for the duration of the block."""
    if GlobalHydra.instance().is_initialized():
        yield
        return
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


def _searchpath_override(paths: list[str]) -> list[str]:
    if not paths:
        return []
    quoted = ",".join("'" + p.replace("\\", "\\\\").replace("'", "\\'") + "'" for p in paths)
    return [f"hydra.searchpath=[{quoted}]"]


def group_options(group: str, paths: list[str]) -> list[str]:
    """The options of config group ``group`` on Hydra's search path (the package's configs plus ``paths``)."""
    with _hydra_ready():
        loader = GlobalHydra.instance().config_loader()
        return sorted(set(loader.get_group_options(group, overrides=_searchpath_override(paths))))


def group_option(group: str, name: str, paths: list[str]) -> DictConfig:
    """The config of option ``name`` of group ``group``, found on Hydra's search path exactly as
    ``geneval <group>=<name>`` finds it (the package's ``conf/<group>/<name>.yaml`` or one in a
    ``hydra.searchpath`` folder), not yet resolved."""
    with _hydra_ready():
        composed = compose(overrides=[f"+{group}={name}", *_searchpath_override(paths)])
    return composed[group]


def config_nodes(cfg: DictConfig, key: str, group: str) -> dict[str, DictConfig]:
    """``cfg[key]`` (a dotted key such as ``zoo.classifiers`` works too): a list of ``conf/<group>`` option names,
    or a mapping name -> such a name or a config node with ``_target_``. Returns name -> config node. Names are
    found on Hydra's config search path exactly like a single run finds ``<group>=<name>`` (the package's configs
    and every ``hydra.searchpath`` folder), and their interpolations (``${assets}``) resolve against ``cfg``'s top
    level.
    """
    spec = OmegaConf.select(cfg, key)
    paths = searchpath(cfg)
    if spec is None or len(spec) == 0:
        raise ValueError(
            f"{key} is empty; list {group} configs, e.g. {key}=[{','.join(group_options(group, paths)[:2])}] "
            f"(available: {', '.join(group_options(group, paths))})."
        )
    if isinstance(spec, str):
        spec = ListConfig([spec])
    pairs = list(spec.items()) if isinstance(spec, DictConfig) else [(str(s), s) for s in spec]
    nodes: dict[str, DictConfig] = {}
    available: list[str] | None = None
    for name, value in pairs:
        if str(name) in nodes:
            raise ValueError(f"{key} names {name!r} twice; give each {group} once.")
        if isinstance(value, str):
            available = group_options(group, paths) if available is None else available
            if value not in available:
                where = f" (search path: {', '.join(paths)})" if paths else ""
                raise ValueError(
                    f"unknown {group} config {value!r} in {key}; available: {', '.join(available)}{where} "
                    "(or give a mapping name -> config with _target_; configs of your own are found through "
                    "'hydra.searchpath=[file:///path/to/conf]' with a <conf>/" + group + "/<name>.yaml)."
                )
            root = copy.deepcopy(cfg)
            with open_dict(root):
                root[f"_{group}_{name}"] = group_option(group, value, paths)
            nodes[str(name)] = root[f"_{group}_{name}"]
        elif isinstance(value, DictConfig) and "_target_" in value:
            nodes[str(name)] = value
        else:
            raise ValueError(
                f"{key}.{name} must name a conf/{group} config ({', '.join(group_options(group, paths))}) or be a "
                f"config with _target_; got {value!r}."
            )
    return nodes


def classifier_nodes(cfg: DictConfig, key: str) -> dict[str, DictConfig]:
    """``cfg[key]`` as name -> classifier config node (:func:`config_nodes` for the ``classifier`` group), so
    ``classifiers=[cifar_resnet20,my_cnn]`` finds the package's configs and the user's own on the search path."""
    return config_nodes(cfg, key, "classifier")


def classifier_factories(nodes: dict[str, DictConfig], key: str) -> dict[str, Callable[[], Any]]:
    """name -> zero-argument factory building that component when called (one model in memory at a time)."""
    return {name: functools.partial(build, node, f"{key}.{name}") for name, node in nodes.items()}
