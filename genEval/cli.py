"""``geneval``: the command line. It only dispatches (docs/architecture.md, "Layers": the top one): which command,
which config, which overrides.

``geneval [overrides]`` runs the main job (conf/config.yaml); ``geneval <command> [path] [overrides]`` runs one of
the commands of :data:`genEval.commands.registry.COMMANDS`. Dispatch comes first and imports nothing heavy, so that
``--help``, a mistyped command and a refused setting answer at once (docs/configuration.md): a command's modules, and
with them torch, scipy or httpx, are imported only when it runs.

1. The command: the first argument, when it names one; a bare word that names none is refused with the nearest
   names. ``--help`` / ``-h``: the help of the command (:mod:`genEval.commands.helptext`), printed at once.
2. The arguments: ``--key=value`` is read as ``key=value`` with a one-line note (Hydra's own flags, such as
   ``--cfg``, stay flags); a first argument without ``=`` is the command's path (``geneval report runs/cifar`` is
   ``geneval report input=runs/cifar``).
3. The config, composed and checked before anything is built or written (:mod:`genEval.commands.compose`, then
   :mod:`genEval.commands.early` without torch, then the command's own checks): a mistyped key gets "did you mean";
   a refused run leaves no run directory.
4. The run: commands that make a run directory go through ``@hydra.main`` (its run directory, ``.hydra/`` and log,
   with short log lines on stderr: ``hydra/job_logging=geneval``); the others run on the composed config and write
   only their own files, no ``outputs/`` folder. A multirun (``-m``) and Hydra's own flags go to Hydra unchanged.

``OMP_WAIT_POLICY=PASSIVE`` is set for the process unless the environment sets it (before torch is imported): torch's
OpenMP threads otherwise spin while they wait, which on a busy 2-core machine made the offline demo's search several
times slower and costlier in CPU than one thread (``python benchmarks/demo_training.py --search``;
benchmarks/RESULTS.md, "The first hour").
"""

from __future__ import annotations

import os
import sys

import hydra

from genEval.commands.compose import did_you_mean, nearest
from genEval.commands.early import refuse
from genEval.commands.helptext import help_text
from genEval.commands.preflight import prepare
from genEval.commands.registry import COMMANDS, CONF_DIR, REGISTRY, Command

__all__ = ["CONF_DIR", "main"]

#: Hydra's own long flags that take ``=value`` (``--config-name=x``): left to Hydra.
HYDRA_FLAGS = ("config-path", "config-name", "config-dir", "cfg", "package", "info", "experimental-rerun")
#: The overrides that give a command run through Hydra geneval's logging (short lines on stderr).
LOGGING = ("hydra/job_logging=geneval", "hydra/hydra_logging=geneval")


def _command(args: list[str]) -> tuple[Command, list[str]]:
    """The command the arguments name, and the rest; a bare first word that names no command is refused."""
    if args and args[0] in COMMANDS:
        return COMMANDS[args[0]], args[1:]
    if args and not args[0].startswith("-") and "=" not in args[0]:
        names = [n for n in COMMANDS if n != "evaluate"]
        refuse(
            "geneval",
            f"unknown command {args[0]!r}{did_you_mean(nearest(args[0], names))} Commands: {', '.join(names)} "
            "(`geneval --help` says what each does); or Hydra overrides such as data=cifar10_jpg.",
        )
    return COMMANDS["evaluate"], args


def _quoted(value: str) -> str:
    """``value`` as one quoted Hydra value (a path with spaces, commas or ``=`` in it stays one value)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _arguments(spec: Command, args: list[str]) -> list[str]:
    """``--key=value`` -> ``key=value`` (a note on stderr; a command's own flags, e.g. list's ``--filter``, without
    one), and a first bare word -> ``<path key>=<word>``."""
    out: list[str] = []
    rest = iter(args)
    for arg in rest:
        name, eq, value = arg[2:].partition("=")
        if arg.startswith("--") and name in spec.flags:
            out.append(f"{name}={_quoted(value if eq else next(rest, ''))}")
        elif arg.startswith("--") and eq and name not in HYDRA_FLAGS:
            note = f"read {arg} as {name}={value} (settings are key=value, no dashes)"
            print(f"{spec.prog}: note: {note}", file=sys.stderr)
            out.append(f"{name}={value}")
        else:
            out.append(arg)
    bare = [i for i, a in enumerate(out) if "=" not in a and not a.startswith("-")]
    if spec.path and bare and bare[0] == 0:
        out[0] = f"{spec.path}={_quoted(out[0])}"
    return out


def _overrides_for_hydra(spec: Command, args: list[str], run_dir: str | None) -> list[str]:
    given = {a.split("=", 1)[0].lstrip("+~") for a in args}
    extra = [o for o in LOGGING if o.split("=", 1)[0] not in given]
    if run_dir and "hydra.run.dir" not in given:
        extra.append(f"hydra.run.dir={_quoted(run_dir)}")  # compare out_dir=X: its log and .hydra/ go there too
    return [*args, *extra]


def main(argv: list[str] | None = None) -> None:
    """``geneval``'s entry point; a reader that stops early (``geneval list classifiers | head``) ends it quietly,
    as the Python docs advise for a closed pipe (stdout pointed at devnull, so the exit does not complain again)."""
    try:
        _main(argv)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


def _main(argv: list[str] | None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    spec, args = _command(args)
    if "--help" in args or "-h" in args:
        print(help_text(spec.name))
        sys.exit(0)
    args = _arguments(spec, args)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported (module docstring)
    run_dir = None
    if not any(a.startswith("-") for a in args):  # a multirun or Hydra's own flags: Hydra composes
        cfg = prepare(spec, args)
        if not spec.run_dir:
            REGISTRY[spec.name][1](cfg)
            return
        run_dir = cfg.get(spec.run_dir_key) if spec.run_dir_key else None
    config, fn = REGISTRY[spec.name]
    sys.argv = [spec.prog, *_overrides_for_hydra(spec, args, None if run_dir is None else str(run_dir))]
    hydra.main(config_path=str(CONF_DIR), config_name=config, version_base="1.3")(fn)()


if __name__ == "__main__":
    main()
