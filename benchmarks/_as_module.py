"""``python benchmarks/<study>.py``, the spelling earlier issues' commands use, for a study that imports
:mod:`benchmarks.harness`: run as a file, ``benchmarks`` is not importable (the folder of the file is first on the
path, not the checkout), so the study calls :func:`rerun` before its imports, which replaces the process with
``python -P -m benchmarks.<study>`` and the same arguments. The checkout goes on ``PYTHONPATH`` after what is there
already (no ``sys.path`` edit), and ``-P`` keeps the working folder off the path, so a ``PYTHONPATH`` that names
another checkout's ``genEval`` still wins, as it did for the file; the working folder stays, so relative paths in the
arguments mean what they meant."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def rerun(file: str) -> None:
    """Replace this process with ``python -P -m benchmarks.<stem of file>`` and this process's arguments."""
    path = Path(file).resolve()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(path.parents[1])) if p)
    os.execve(sys.executable, [sys.executable, "-P", "-m", f"benchmarks.{path.stem}", *sys.argv[1:]], env)
