"""The command layer (docs/architecture.md, "Layers": commands): config in, objects built, library called, text out.

Every ``geneval`` command is a function ``run_<name>(cfg)`` in one module of this package, one module per
command group, listed in :data:`~genEval.commands.registry.COMMANDS` and registered with :func:`command`. This is
the only layer that sees a Hydra ``DictConfig``, prints, or chooses an exit code; the library below takes objects
and returns data.

* :mod:`genEval.commands.registry`: which commands exist (name, module, config, summary), known before any of them
  is imported, so ``geneval --help`` and a mistyped command answer at once (docs/getting-started.md).
* :mod:`genEval.commands.early`: the checks that need no torch (a command's own settings, the execution settings).
* :mod:`genEval.commands.bundles`: the settings bundles (``execution``, ``scoring``, ``output``) built from their
  nodes like any role, with their short spellings (``device=``, ``n_boot=``) interpolated from the top level.
* :mod:`genEval.commands.compose`: the command line composed into a config, with errors that suggest the fix.
* :mod:`genEval.commands.policy`: :func:`command` registers a command and wraps it once: user errors (a bad value, a
  missing file, anything raised while a component is built) become one paragraph
  ``geneval <command>: error: <message>`` on stderr and exit status 2, never a traceback (``HYDRA_FULL_ERROR=1``
  shows it, as for Hydra's own errors); SIGTERM and SIGINT stop a command cleanly (:mod:`genEval.runs.stopping`: a
  run directory keeps its finished samples and its lock is released) and exit with 143 and 130.
* :mod:`genEval.commands.base`: what commands that build components share. :func:`build` is the one instantiation
  helper: it checks the node's keys and value types against its ``_target_`` first
  (:mod:`genEval.commands.settings`), then calls Hydra ``instantiate`` and turns whatever the component raises into
  a :class:`BuildError` that names the role (a setting's error names its config key). :func:`build_data` builds
  the data set with the tested classifier's class names when the data set maps folders onto classes by name and its
  config names no classes. :func:`config_nodes` (:func:`classifier_nodes`) turns a list or mapping of config names
  into config nodes, finding the names on Hydra's search path like ``geneval classifier=<name>`` does;
  :func:`classifier_factories` makes them factories.

The names of ``base``, ``early`` and ``policy`` are importable from here as before (``from genEval.commands import
build``); they are loaded on first use (``lazy_loader``, scientific Python's SPEC 1), since ``base`` brings torch.
"""

from __future__ import annotations

import lazy_loader

from genEval.commands.registry import COMMANDS, CONF_DIR, REGISTRY, SUMMARIES, Command, config_options

__getattr__, __dir__, _lazy = lazy_loader.attach(
    __name__,
    submod_attrs={
        "base": [
            "CheckOutputDir",
            "USER_ERRORS",
            "build",
            "build_data",
            "classifier_factories",
            "classifier_nodes",
            "config_nodes",
            "group_option",
            "group_options",
            "hydra_output_dir",
            "log",
            "require",
            "searchpath",
        ],
        "bundles": ["bundle", "execution_bundle"],
        "early": ["one_paragraph", "plain", "refuse"],
        "policy": ["BuildError", "command", "error_message", "guarded", "use_assets", "user_errors"],
    },
)
__all__ = ["COMMANDS", "CONF_DIR", "REGISTRY", "SUMMARIES", "Command", "config_options", *_lazy]
