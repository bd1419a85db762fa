"""``python benchmarks/<study>.py``, the spelling earlier issues' commands use, for a study that imports
:mod:`benchmarks.harness`: run as a file, ``benchmarks`` is not importable (the folder of the file is first on the
path, not the checkout), so the study calls :func:`rerun` before its imports, which replaces the process with
``python -m benchmarks.<study>`` and the same arguments. The checkout goes on ``PYTHONPATH`` (no ``sys.path``
edit) and the working folder stays, so relative paths in the arguments mean what they meant."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def rerun(file: str) -> None:
    """Replace this process with ``python -m benchmarks.<stem of file>`` and this process's arguments."""
    path = Path(file).resolve()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(path.parents[1]), env.get("PYTHONPATH")) if p)
    os.execve(sys.executable, [sys.executable, "-m", f"benchmarks.{path.stem}", *sys.argv[1:]], env)
