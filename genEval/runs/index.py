"""An index of the run directories under a folder: what ran, when, its headline (``geneval runs``; docs/recipes.md).

Read from the JSON files alone, without torch (docs/run-directory.md): a finished run has ``results.json``; one still
running or stopped has ``run.json`` and a ``samples.partial.jsonl`` of the samples finished so far. What ran is named
as the user named it: the presets of Hydra's ``.hydra/hydra.yaml`` (``classifier=digits_intervention``) where the run
was started by ``geneval``, else the components' ids that ``results.json`` records; a comparison's runs sit under
``runs/<model>/rep<r>``, so their path names the model.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from genEval.scores.text import headline

#: The files of a run directory (docs/run-directory.md).
RESULTS, SAMPLES, PARTIAL, RUN = "results.json", "samples.jsonl", "samples.partial.jsonl", "run.json"
#: The roles a run's "what" names, in this order.
ROLES = ("classifier", "data", "generator", "oracle")


@dataclass(frozen=True)
class RunEntry:
    """One run directory: ``path``; ``when`` (the time its ``results.json``, else ``run.json``, was last written);
    ``roles`` (role -> preset or component id); ``finished``; ``headline`` (the ranking score line, or for an
    unfinished run how many samples it has); ``seed``."""

    path: Path
    when: datetime
    roles: Mapping[str, str]
    finished: bool
    headline: str
    seed: int | None = None

    @property
    def what(self) -> str:
        """``digits_cnn on digits`` (the tested classifier and the data)."""
        clf, data = self.roles.get("classifier"), self.roles.get("data")
        return f"{clf or '?'} on {data or '?'}"


def _json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _presets(run: Path) -> dict[str, str]:
    """The presets Hydra recorded for the run (``.hydra/hydra.yaml``: ``hydra.runtime.choices``), when it has them."""
    try:
        hydra = yaml.safe_load((run / ".hydra" / "hydra.yaml").read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return {}
    choices = ((hydra.get("hydra") or {}).get("runtime") or {}).get("choices") or {}
    return {k: str(v) for k, v in choices.items() if k in ROLES and v is not None}


def _lines(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return 0


def read_entry(run: Path, rank_by: str) -> RunEntry | None:
    """The entry of run directory ``run`` (None when it holds neither ``results.json`` nor ``run.json``);
    ``rank_by``: the score its headline shows."""
    results, started = _json(run / RESULTS), _json(run / RUN)
    if results is None and started is None:
        return None
    stamp = run / (RESULTS if results is not None else RUN)
    when = datetime.fromtimestamp(stamp.stat().st_mtime).astimezone()
    identity = (results or {}).get("identity") or (started or {}).get("identity") or {}
    components = (results or {}).get("components") or identity.get("components") or {}
    roles = {r: str(components[r]) for r in ROLES if components.get(r)} | _presets(run)
    seed = (results or {}).get("seed", identity.get("seed"))
    if results is not None:
        line = headline(results.get("scores") or {}, rank_by)
    else:
        line = f"unfinished: {_lines(run / PARTIAL)} samples recorded (rerun its command to resume it)"
    return RunEntry(run, when, roles, results is not None, line, None if seed is None else int(seed))


def _candidates(folder: Path) -> Iterator[Path]:
    """Every directory under ``folder`` (itself included) holding ``results.json`` or ``run.json``."""
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if RESULTS in files or RUN in files:
            yield Path(root)


def index_runs(folder: str | Path, rank_by: str = "fmr_validated") -> list[RunEntry]:
    """The runs under ``folder``, newest first. A folder that does not exist is a FileNotFoundError naming it."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"'{root}' is not a folder; give the folder that holds your run directories.")
    entries = [e for run in _candidates(root) if (e := read_entry(run, rank_by)) is not None]
    return sorted(entries, key=lambda e: (e.when, str(e.path)), reverse=True)
