"""The command line as a user runs it: ``geneval`` in a subprocess of this checkout, the one error paragraph it
ends with on bad input, and (from :mod:`benchmarks.harness.run_equality`, which the cluster study shares) what a
finished run directory decided and scored (``samples.jsonl``, ``results.json``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.harness.run_equality import DECISIONS, decisions, scores
from tests.support.assets import ROOT

__all__ = ["DECISIONS", "decisions", "geneval", "one_error_paragraph", "scores"]


def geneval(
    *args: str, cwd: Path = ROOT, env_extra: dict | None = None, timeout: int = 900, **kw
) -> subprocess.CompletedProcess:
    """``python -m genEval.cli *args`` in ``cwd`` (the checkout by default), its output captured as text; the
    environment is ``env`` (default: this one) with ``env_extra`` on top."""
    env = {**kw.pop("env", os.environ), **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "genEval.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        **kw,
    )


def one_error_paragraph(stderr: str, prog: str = "geneval") -> str:
    """The one error paragraph of ``stderr`` (log lines before it are allowed), checked to be the only one."""
    assert "Traceback" not in stderr, stderr
    errors = [ln for ln in stderr.splitlines() if ln.startswith(f"{prog}: error: ")]
    assert len(errors) == 1, stderr
    assert stderr.rstrip().endswith(errors[0]), stderr  # nothing after it: one paragraph
    return errors[0]
