"""The command line as a user runs it: ``geneval`` in a subprocess of this checkout, the one error paragraph it
ends with on bad input, and what a finished run directory decided and scored (``samples.jsonl``, ``results.json``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.assets import ROOT
from tests.support.toys import records

#: The fields of a record that say what the search decided (equal however the run was batched, sharded or resumed).
DECISIONS = (
    "source_id",
    "index",
    "start_ok",
    "validated",
    "accepted_steps",
    "rejected_at",
    "first_fooled",
    "final_pred",
    "recon_pred",
    "clean_pred",
    "oracle_start_pred",
)


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


def decisions(run_dir: Path) -> list[tuple]:
    """Each record's :data:`DECISIONS`, in the file's order."""
    return [tuple(r[k] for k in DECISIONS) for r in records(run_dir)]


def scores(run_dir: Path) -> tuple[dict, list]:
    """A finished run's scores and per-class table (``results.json``)."""
    res = json.loads((run_dir / "results.json").read_text())
    return res["scores"], res["per_class"]
