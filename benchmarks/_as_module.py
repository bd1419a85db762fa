"""``python benchmarks/<study>.py``, the spelling earlier issues' commands use, for a study that imports
:mod:`benchmarks.harness`: run as a file, ``benchmarks`` is not importable (the folder of the file is first on the
path, not the checkout), so the study calls :func:`rerun` before its imports, which replaces the process with
``python -P -m benchmarks.<study>`` and the same arguments, its imports resolved as the file's were:

* ``benchmarks`` is the file's own package: first on ``PYTHONPATH`` is a folder holding only a link to it (no
  ``sys.path`` edit);
* the library comes from ``PYTHONPATH`` as given (``PYTHONPATH=/tmp/before python benchmarks/page_widths.py``
  measures that checkout's ``genEval``), then from this checkout, which goes last;
* ``-P`` keeps the working folder off the path, and the working folder stays, so relative paths in the arguments
  mean what they meant."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def rerun(file: str) -> None:
    """Replace this process with ``python -P -m benchmarks.<stem of file>`` and this process's arguments."""
    path = Path(file).resolve()
    own = Path(tempfile.mkdtemp(prefix="geneval-study-"))
    (own / "benchmarks").symlink_to(path.parent, target_is_directory=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(own), env.get("PYTHONPATH"), str(path.parents[1])) if p)
    os.execve(sys.executable, [sys.executable, "-P", "-m", f"benchmarks.{path.stem}", *sys.argv[1:]], env)
