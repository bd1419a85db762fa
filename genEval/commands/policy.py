"""The one error policy of every command, and its registration (docs/architecture.md, "Habits": errors teach).

:func:`command` registers a command's function under its name in :data:`genEval.commands.registry.COMMANDS` and
wraps it once (:func:`guarded`): a user error (a bad value, a missing file, anything raised while a component is
built) becomes one paragraph ``geneval <command>: error: <message>`` on stderr and exit status 2, never a traceback
(``HYDRA_FULL_ERROR=1`` shows it, as for Hydra's own errors); SIGTERM and SIGINT stop it cleanly
(:mod:`genEval.runs.stopping`: a run directory keeps its finished samples and its lock is released) and exit with 143
and 130. Light on purpose (no torch): commands that read files only, such as ``geneval list``, register here too.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.errors import InstantiationException
from omegaconf import DictConfig

from genEval.commands.early import one_paragraph, refuse
from genEval.commands.registry import COMMANDS, REGISTRY, SUMMARIES
from genEval.runs.stopping import Interrupted, stop_on_signals


class BuildError(ValueError):
    """A component (classifier, data, generator, oracle, mask, ...) could not be built from its config; the message
    names the role and says why (the component's own message, not Hydra's wrapper); ``__cause__`` is the error the
    component raised. A ValueError: the configured values cannot be built."""


#: User errors defined in modules a command may never import (torch comes with them): (module, class).
#: NonFiniteError: the search's loss became NaN; EvaluationsFailed lists the evaluations of a comparison that failed
#: on a cluster, and how to run only those again.
LOADED_USER_ERRORS = (
    ("genEval.search.perturb", "NonFiniteError"),
    ("genEval.campaigns.executors", "EvaluationsFailed"),
)


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "the user asked for something that cannot work": message, exit 2. OSError covers a
    missing file, a full disk and an unreachable host; ImportError a missing optional dependency. The classes of
    :data:`LOADED_USER_ERRORS` are taken where their module is loaded: an error of a module never imported cannot
    have been raised, and a command that needs no torch does not import it to say so."""
    loaded = tuple(getattr(sys.modules[m], n) for m, n in LOADED_USER_ERRORS if m in sys.modules)
    return (ValueError, OSError, ImportError, BuildError, *loaded)


def error_message(err: BaseException) -> str:
    """What the user reads for ``err``: Hydra's instantiation wrapper is looked through to the error the
    component raised; an error that is not self-explanatory (no message, or not a user error) gets its type."""
    while isinstance(err, InstantiationException) and err.__cause__ is not None:
        err = err.__cause__
    text = str(err)
    if isinstance(err, InstantiationException):
        text = _hydra_text(text)
    if isinstance(err, KeyError) and len(err.args) == 1:
        text = str(err.args[0])  # KeyError's str() adds quotes
    if not text or not isinstance(err, user_errors()):
        text = f"{type(err).__name__}: {text}" if text else type(err).__name__
    return one_paragraph(text)


def _hydra_text(text: str) -> str:
    """Hydra's own instantiation message without its advice about environment variables and its key line."""
    text = re.sub(r",? ?set env var HYDRA_FULL_ERROR=1 to see chained exception\.?", ".", text)
    return re.sub(r"\s*full_key: \S+\s*$", "", text)


Checked = Callable[[DictConfig], Any]


def command(
    name: str, config: str | None = None, summary: str | None = None, check: Checked | None = None
) -> Callable[[Checked], Checked]:
    """Register ``fn`` as ``geneval <name>`` and give it the one error policy: a user error prints one paragraph
    ``geneval <name>: error: ...`` and exits with status 2.

    A command of :data:`~genEval.commands.registry.COMMANDS` takes its config (``conf/<config>.yaml``) and its
    one-line summary from there; another (a plug-in's) gives both. ``check``: what the command checks before it
    builds anything (the command line runs it before Hydra makes a run directory, so a refused run leaves none; the
    command calls it again itself), under the same error policy."""
    known = COMMANDS.get(name)
    if known is not None:
        config = known.config
    elif not summary or "\n" in summary:
        raise ValueError(f"command {name!r} needs a one-line summary for geneval --help, got {summary!r}")
    else:
        SUMMARIES[name] = summary
    prog = known.prog if known is not None else f"geneval {name}"

    def wrap(fn: Checked) -> Checked:
        run = guarded(fn, prog)
        REGISTRY.add(name, str(config or name), run, guarded(check, prog) if check is not None else None)
        return run

    return wrap


def guarded(fn: Checked, prog: str) -> Checked:
    """``fn(cfg)`` under the error policy: a user error is one ``<prog>: error:`` paragraph and exit 2; SIGTERM and
    SIGINT stop it cleanly (exit 143 and 130)."""

    @functools.wraps(fn)
    def run(cfg: DictConfig) -> Any:
        logging.raiseExceptions = False  # a log file on a full disk must not print tracebacks over the error
        try:
            with stop_on_signals():
                use_assets(cfg)
                return fn(cfg)
        except Interrupted as stop:
            print(
                f"{prog}: stopped by {stop.name}: a run directory it was writing keeps the samples finished so "
                "far and its run.lock is released; run the same command again to resume it.",
                file=sys.stderr,
            )
            sys.exit(stop.exit_code)
        except BrokenPipeError:
            raise  # the reader of stdout left (`| head`): not the user's mistake; the command line ends quietly
        except (*user_errors(), InstantiationException) as err:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            refuse(prog, error_message(err))

    return run


def use_assets(cfg: DictConfig) -> None:
    """``assets=<folder>`` on the command line: where ``asset:<path>`` files are looked for first in this
    process and the ones it starts (:mod:`genEval.assets` reads ``GENEVAL_ASSETS``)."""
    folder = cfg.get("assets") if isinstance(cfg, DictConfig) else None
    if folder:
        os.environ["GENEVAL_ASSETS"] = str(Path(str(folder)).expanduser())
