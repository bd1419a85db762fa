"""The checks a command runs before it imports torch (docs/configuration.md): its own settings, the execution settings
(device spelling, batch size, precision, memory format, compile), the search (``search.budget``...), and that the
folder a command reads exists, so that ``geneval batch_size=0`` or ``geneval report runs/nope`` answers in a fraction
of a second, before any model is built and before Hydra makes a run directory.

What needs the components (the keys of each ``_target_``, the classes of the presets, whether CUDA is there) is the
command's own check, registered with :func:`genEval.commands.base.command` (``check=``) and run next, still before
anything is built. Both run again inside the command (a notebook or test that calls it directly gets them too).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from omegaconf import DictConfig, ListConfig, OmegaConf

from genEval.commands.bundles import bundle, execution_bundle
from genEval.commands.settings import Setting, check_settings
from genEval.runs.settings import SearchConfig
from genEval.search.execution_settings import Execution, refuse_cuda_without_driver
from genEval.service.worker_settings import WorkerSettings

#: The main job's own settings (conf/config.yaml), checked before anything is built; its bundles (execution,
#: scoring, output) check themselves when :func:`genEval.commands.bundles.bundle` builds them.
RUN_SETTINGS = {
    "seed": Setting(int, "0", low=0, nullable=True, note="null draws a fresh seed and records it"),
    "shard.index": Setting(int, "0", low=0, nullable=True),
    "shard.count": Setting(int, "4", low=1, nullable=True),
    "report": Setting(bool, "false"),
    "allow_one_class": Setting(bool, "true"),
    "ood_data": Setting(
        str, "/data/ood_images", nullable=True, note="a folder of images of classes outside the label set"
    ),
}


def plain(cfg: Any) -> Any:
    """A resolved plain-Python copy of a config node (dicts and lists), for the library and for records."""
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, (DictConfig, ListConfig)) else cfg


def one_paragraph(text: str) -> str:
    """``text`` on one paragraph: line breaks and runs of spaces become one space (a message from deep inside a
    library may span lines; the user reads one error)."""
    return re.sub(r"\s+", " ", str(text)).strip()


def refuse(prog: str, message: str) -> NoReturn:
    """The one way a command refuses: one paragraph ``<prog>: error: <message>`` on stderr, exit status 2."""
    print(f"{prog}: error: {one_paragraph(message)}", file=sys.stderr)
    sys.exit(2)


def _run(cfg: DictConfig) -> None:
    check_settings(cfg, RUN_SETTINGS)
    execution_bundle(cfg)
    bundle(cfg, "scoring")
    bundle(cfg, "output")
    if "search" in cfg:
        SearchConfig.coerce(plain(cfg.search))  # search.budget=abc: refused before torch (the paper's Eq. 2 loop)


def _snapshot_scoring(cfg: DictConfig) -> None:
    """``score``, ``transfer``, ``filter``: their scoring bundle (``interval=``) and their own device and batch size,
    checked as the main job checks its execution's."""
    if "scoring" in cfg:
        bundle(cfg, "scoring")
    refuse_cuda_without_driver(
        Execution.coerce({k: plain(cfg[k]) for k in ("device", "batch_size") if k in cfg}).device
    )


#: The folder a command reads (its positional path's key) -> what it must be, named in the refusal.
READS = {
    "report": ("input", "run or comparison directory", "a run directory (results.json) or a comparison directory"),
    "export": ("run", "run directory", "the directory of a finished geneval run"),
    "fit-mask": ("run", "run directory", "the directory of a finished geneval run"),
    "audit": ("run", "run directory", "the directory of a finished geneval run"),
    "verify": ("snapshot", "snapshot directory", "a snapshot directory (made by geneval export)"),
    "score": ("snapshot", "snapshot directory", "a snapshot directory (made by geneval export)"),
}


def _reads(name: str, cfg: DictConfig) -> None:
    """A folder the command reads must exist: ``geneval report runs/nope`` is refused here, before torch is imported
    (docs/configuration.md). A key left unset is the command's to refuse (it names the key)."""
    key, noun, fix = READS[name]
    value = cfg.get(key) if key in cfg and not OmegaConf.is_missing(cfg, key) else None
    if value not in (None, "", "???") and not Path(str(value)).expanduser().is_dir():
        raise ValueError(f"{noun} '{Path(str(value)).expanduser()}' does not exist; pass {fix}.")


def one_model(name: str) -> str:
    """The refusal of a comparison given one model (ranking one model is ``geneval``'s job, not ``compare``'s)."""
    return (
        f"geneval compare ranks two or more models; it was given one ({name}). Evaluate one model with "
        f"geneval classifier={name}, or compare it with another: geneval compare 'classifiers=[{name},digits_mlp]'."
    )


def _compare(cfg: DictConfig) -> None:
    """``compare``'s execution settings, and one model given by name (``'classifiers=[digits_cnn]'``) refused before
    torch (a zoo of one is refused by the command's own check, which reads the zoo)."""
    execution_bundle(cfg)
    given = cfg.get("classifiers")
    if cfg.get("runs") or not isinstance(given, (ListConfig, DictConfig)) or len(given) != 1:
        return
    if isinstance(given, ListConfig):
        name = given[0] if isinstance(given[0], str) else "<model>"
    else:
        key = next(iter(given))
        name = given[key] if isinstance(given[key], str) else str(key)
    raise ValueError(one_model(str(name)))


def worker_settings(cfg: DictConfig, host: str | None = None) -> WorkerSettings:
    """The :class:`~genEval.service.worker_settings.WorkerSettings` of a serve/worker config: the node
    ``worker`` (``conf/worker/``), with the device of its execution (``conf/execution/``) and the name the worker
    gives itself (the worker command's ``host=``; None: the machine's hostname)."""
    return bundle(cfg, "worker", device=execution_bundle(cfg).device, host=host)


def in_process_settings(cfg: DictConfig) -> WorkerSettings:
    """The settings of ``geneval serve``'s in-process workers (:func:`worker_settings`): they run until the server
    stops, so the batch worker's ``exit_when_idle=true`` and ``max_jobs=N`` are refused there, naming the command
    they belong to (an in-process worker that ended would be restarted as dead, over and over)."""
    settings = worker_settings(cfg)
    for key, value in (("exit_when_idle", settings.exit_when_idle), ("max_jobs", settings.max_jobs)):
        if value not in (False, None):
            raise ValueError(
                f"{key} is a setting of `geneval worker` (a batch worker that stops), not of geneval serve's "
                f"in-process workers, which run until the server stops; leave it out, or start `geneval worker "
                f"{key}=...` beside a `geneval serve workers=0`."
            )
    return settings


def _both(*checks: Callable[[DictConfig], None]) -> Callable[[DictConfig], None]:
    def run(cfg: DictConfig) -> None:
        for check in checks:
            check(cfg)

    return run


def _reading(name: str) -> Callable[[DictConfig], None]:
    return lambda cfg: _reads(name, cfg)


#: Command name -> its torch-free checks.
EARLY: Mapping[str, Callable[[DictConfig], None]] = {
    "evaluate": _run,
    "compare": _compare,
    "worker": worker_settings,
    "serve": in_process_settings,
    "score": _both(_reading("score"), _snapshot_scoring),
    "transfer": _snapshot_scoring,
    "filter": _snapshot_scoring,
    **{name: _reading(name) for name in READS if name != "score"},
}


def early_checks(name: str, cfg: DictConfig) -> None:
    """Run command ``name``'s torch-free checks on its composed config; a bad value raises a SettingError."""
    check = EARLY.get(name)
    if check is not None:
        check(cfg)
