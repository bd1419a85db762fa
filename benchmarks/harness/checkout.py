"""Another checkout's genEval under this checkout's studies, without a ``sys.path`` edit: a child process whose
``PYTHONPATH`` is a folder of links to the other checkout's top-level packages (``genEval``, ``oracles``), then this
checkout (for ``benchmarks``). Its ``tests/`` and ``benchmarks/`` are never linked, so an old checkout's copies
cannot shadow this one's harness; ``python -P`` keeps the working folder off the path."""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The folders of a checkout that are not the library.
NOT_LINKED = {"benchmarks", "tests", "docs"}


@functools.cache
def pythonpath(code: Path) -> str:
    """The ``PYTHONPATH`` of a child that imports ``code``'s library and this checkout's ``benchmarks`` (one folder
    of links per checkout and process)."""
    code = Path(code).resolve()
    if code == ROOT:
        return str(ROOT)
    packages = [p for p in code.iterdir() if (p / "__init__.py").is_file() and p.name not in NOT_LINKED]
    if not any(p.name == "genEval" for p in packages):
        raise ValueError(f"--code {code} holds no genEval/ package: give the root of a genEval checkout")
    links = Path(tempfile.mkdtemp(prefix="geneval-code-"))
    for package in packages:
        (links / package.name).symlink_to(package, target_is_directory=True)
    return f"{links}{os.pathsep}{ROOT}"


def module_command(module: str, *args: str) -> list[str]:
    """``python -P -m <module> args``: the child's imports come from its ``PYTHONPATH`` only."""
    return [sys.executable, "-P", "-m", module, *args]
