"""Which commands exist: name, module, config and one-line summary of every ``geneval`` command, known before any
command module is imported (docs/architecture.md, "Layers": commands).

The command line dispatches from this table, answers ``geneval --help`` from it and refuses a mistyped command with
the nearest names, all without importing a command's module (and with it torch, scipy or httpx); a command's module
is imported when the command runs (:data:`REGISTRY` imports it on lookup). Each module registers its functions with
:func:`genEval.commands.base.command` under the names listed here.

A :class:`Command` also says how it runs: ``run_dir`` commands (the main job, ``compare``, ...) go through
``@hydra.main``, which makes their run directory (``outputs/<date>/<time>`` unless ``hydra.run.dir`` or, for
compare, ``out_dir`` names one) with its log and ``.hydra/``; the others are composed in place and write only their
own files (docs/extending.md). ``path``: the key a first positional argument sets (``geneval report runs/cifar`` is
``geneval report input=runs/cifar``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The Hydra configs travel inside the package (a wheel carries them); ``conf/`` at the top of a checkout is a
#: link to this folder, where users and docs look for them.
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


@dataclass(frozen=True)
class Command:
    """One ``geneval`` command: ``module`` of :mod:`genEval.commands` that defines it, ``config``
    (``conf/<config>.yaml``), ``summary`` (its line in ``geneval --help``), ``path`` (the key of a positional
    argument, or None), ``run_dir`` (Hydra makes it a run directory), ``run_dir_key`` (a key that, when set, names
    that run directory, e.g. compare's ``out_dir``) and ``flags`` (its own ``--flag value`` options, read as
    ``flag=value``)."""

    name: str
    module: str
    config: str
    summary: str
    path: str | None = None
    run_dir: bool = False
    run_dir_key: str | None = None
    flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.summary or "\n" in self.summary:
            raise ValueError(f"command {self.name!r} needs a one-line summary for geneval --help, got {self.summary!r}")

    @property
    def prog(self) -> str:
        """How its messages name it: ``geneval`` for the main job, else ``geneval <name>``."""
        return "geneval" if self.name == "evaluate" else f"geneval {self.name}"


#: Every command, in the order ``geneval --help`` lists them (``evaluate`` is the main job, ``geneval [overrides]``).
COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        Command(
            "evaluate",
            "evaluate",
            "config",
            "evaluate one classifier: SA, RA, VR, PA and FMR with 95% intervals (the main job)",
            run_dir=True,
        ),
        Command(
            "compare",
            "compare",
            "compare",
            "rank classifiers under the same data, generator, oracle and seeds: leaderboard, ER, Kendall tau",
            run_dir=True,
            run_dir_key="out_dir",
        ),
        Command(
            "report", "report", "report", "write one self-contained report.html for a run or a comparison", "input"
        ),
        Command(
            "runs", "listing", "runs", "an index of the run directories under a folder: what, when, headline", "folder"
        ),
        Command(
            "list",
            "listing",
            "list",
            "the names of classifiers, generators, oracles, benchmarks or presets, one line each",
            "what",
            flags=("filter",),
        ),
        Command(
            "export",
            "snapshot",
            "export",
            "freeze a run's perturbed images as a static snapshot (imagefolder or webdataset)",
            "run",
        ),
        Command(
            "verify",
            "snapshot",
            "verify",
            "check a snapshot's files and counts against its manifest (exit 1 when tampered)",
            "snapshot",
        ),
        Command("score", "snapshot", "score", "score any classifier on a frozen snapshot", "snapshot"),
        Command(
            "transfer",
            "snapshot",
            "transfer",
            "source x target accuracy matrix of snapshots (paper Table 6)",
            run_dir=True,
        ),
        Command(
            "filter", "snapshot", "filter", "keep the snapshot images that fool surrogate models (ImageNet-A recipe)"
        ),
        Command(
            "fit-mask",
            "mask",
            "fit_mask",
            "fit the sparse style mask (L1 logistic regression) from a run saved with save_latents=true",
            "run",
        ),
        Command(
            "audit",
            "audit",
            "audit",
            "check the oracle by hand: a page of validated pairs to mark, then store the agreement",
            "run",
        ),
        Command(
            "merge",
            "merge",
            "merge",
            "merge the shards of a run into the run directory an unsharded run would have written",
        ),
        Command(
            "train-generator",
            "train",
            "train_generator",
            "train a small taming VQ generator on your data (resumable; held-out PSNR)",
            run_dir=True,
        ),
        Command(
            "serve",
            "serve",
            "serve",
            "run the HTTP service: submissions, workers, leaderboards (the [service] extra)",
            run_dir=True,
        ),
        Command(
            "worker",
            "serve",
            "worker",
            "claim and evaluate the service's queued jobs (the [service] extra)",
            run_dir=True,
        ),
        Command("token", "serve", "token", "create, list or revoke the service's API tokens (the [service] extra)"),
        Command("submit", "serve", "submit", "submit a model to a genEval service and follow its job"),
    )
}
#: Command name -> its one-line summary, which ``geneval --help`` lists (:mod:`genEval.commands.helptext`).
SUMMARIES: dict[str, str] = {name: c.summary for name, c in COMMANDS.items()}


def group_names() -> list[str]:
    """The config groups a user picks from (``conf/<group>/``): not Hydra's own, nor ``_shortcuts/`` (the short
    spellings the settings bundles pull in, :mod:`genEval.commands.bundles`)."""
    return sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra" and p.name[0] != "_")


def config_options(group: str) -> list[str]:
    """The option names of a config group shipped with the package (``conf/<group>/*.yaml``)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


class Registry(Mapping):
    """Command name -> ``(config name, function)``: what :func:`genEval.commands.base.command` registered. Looking
    up a command of :data:`COMMANDS` imports its module first; iterating lists the names without importing any."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[str, Callable[..., Any]]] = {}
        self._checks: dict[str, Callable[..., Any]] = {}

    def add(self, name: str, config: str, fn: Callable[..., Any], check: Callable[..., Any] | None = None) -> None:
        self._entries[name] = (config, fn)
        if check is not None:
            self._checks[name] = check

    def _load(self, name: str) -> None:
        if name not in self._entries and name in COMMANDS:
            importlib.import_module(f"{__package__}.{COMMANDS[name].module}")  # it registers itself

    def __getitem__(self, name: str) -> tuple[str, Callable[..., Any]]:
        self._load(name)
        return self._entries[name]

    def check(self, name: str) -> Callable[..., Any] | None:
        """The checks ``name`` runs before it builds anything (the command line runs them before Hydra makes a run
        directory, so a refused run leaves none), or None."""
        self._load(name)
        return self._checks.get(name)

    def pop(self, name: str) -> tuple[str, Callable[..., Any]]:
        """Unregister ``name`` (a plug-in's or a test's command); returns what it was registered as."""
        self._checks.pop(name, None)
        return self._entries.pop(name)

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (n for n in self._entries if n not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS) + sum(n not in COMMANDS for n in self._entries)


#: The registered commands (see :class:`Registry`).
REGISTRY = Registry()
