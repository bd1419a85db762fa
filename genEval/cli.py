"""``geneval``: the command line. It only dispatches (docs/architecture.md, "Layers": the top one).

``geneval [overrides]`` runs the main job (conf/config.yaml); ``geneval <command> [overrides]`` runs one of
the commands registered in :mod:`genEval.commands` (each composes ``conf/<config>.yaml``). Hydra parses
the overrides; the command layer builds objects, calls the library, prints and picks the exit code.
``--help`` shows genEval's help template (``conf/hydra/help/geneval.yaml``, :mod:`genEval.commands.helptext`): the
commands, the most used overrides and the config groups; after a command, that command's purpose and keys.
"""

from __future__ import annotations

import sys

import hydra

from genEval.commands import CONF_DIR, REGISTRY
from genEval.commands import audit as _audit  # noqa: F401
from genEval.commands import compare as _compare  # noqa: F401  (each import registers its commands)
from genEval.commands import evaluate as _evaluate  # noqa: F401
from genEval.commands import helptext as _helptext  # noqa: F401  (the resolver of the help template)
from genEval.commands import mask as _mask  # noqa: F401
from genEval.commands import merge as _merge  # noqa: F401
from genEval.commands import report as _report  # noqa: F401
from genEval.commands import serve as _serve  # noqa: F401
from genEval.commands import snapshot as _snapshot  # noqa: F401
from genEval.commands import train as _train  # noqa: F401

__all__ = ["CONF_DIR", "main"]


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    cmd = "evaluate"
    if args and args[0] in REGISTRY and args[0] != "evaluate":
        cmd = args.pop(0)
    elif args and not args[0].startswith("-") and "=" not in args[0]:
        names = ", ".join(n for n in REGISTRY if n != "evaluate")
        print(
            f"geneval: unknown command {args[0]!r}; commands: {names} (or Hydra overrides such as data=cifar10_jpg).",
            file=sys.stderr,
        )
        sys.exit(2)
    config_name, fn = REGISTRY[cmd]
    if "--help" in args or "-h" in args:
        args.append("hydra/help=geneval")
    sys.argv = [f"geneval {cmd}" if cmd != "evaluate" else "geneval", *args]
    hydra.main(config_path=str(CONF_DIR), config_name=config_name, version_base="1.3")(fn)()


if __name__ == "__main__":
    main()
