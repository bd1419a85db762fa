"""Before a command runs: its config composed, checked without torch, then checked by the command itself, all before
anything is built or written (docs/configuration.md).

:func:`prepare` is what the command line calls once it knows the command: a mistyped key or preset is refused by
:func:`genEval.commands.compose.compose_config` with the nearest names, a bad setting by
:func:`genEval.commands.early.early_checks` before torch is imported, and a mismatch of the presets (classes, image
sizes, missing weights) by the command's own check, registered with ``command(..., check=...)``. Hydra makes the run
directory of a ``run_dir`` command only after all of these passed, so a refused run leaves none.
"""

from __future__ import annotations

import os

from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from genEval.commands.compose import CommandLineError, compose_config, job_config
from genEval.commands.early import early_checks, one_paragraph, refuse
from genEval.commands.logs import log_to_stderr
from genEval.commands.registry import REGISTRY, Command


def prepare(spec: Command, overrides: list[str]) -> DictConfig:
    """The config command ``spec`` runs with, composed from ``overrides`` and checked; a refusal is one
    ``<prog>: error:`` paragraph and exit status 2 (``HYDRA_FULL_ERROR=1`` raises it instead)."""
    try:
        cfg = compose_config(spec.config, overrides, spec.prog)
        early_checks(spec.name, cfg)
    except (CommandLineError, ValueError, OmegaConfBaseException) as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        refuse(spec.prog, one_paragraph(err))
    task = job_config(cfg)
    log_to_stderr()  # a run_dir command's logging is Hydra's from here on (hydra/job_logging=geneval)
    check = REGISTRY.check(spec.name)
    if check is not None:
        check(task)  # under the command's error policy: exits 2 itself
    return task
