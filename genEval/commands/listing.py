"""``geneval list <what>`` and ``geneval runs <folder>``: what there is to choose, what has run (docs/recipes.md).

``list`` names the presets of a config group, one line each (timm's ``list_models``): classifiers, generators,
oracles, benchmarks, presets (the experiments over every role) or any other group (``geneval list data``), each with
the first line of its config's comment (a benchmark: its title); ``--filter`` keeps the names that contain the text
(or match it, with ``*`` and ``?``). ``runs`` is the index of the run directories under a folder
(:func:`genEval.runs.index.index_runs`): when each finished, what ran, its headline, its path. Both read files only:
no torch, no model.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig

from genEval.commands import CONF_DIR, command, config_options
from genEval.commands.compose import did_you_mean, nearest
from genEval.commands.registry import group_names
from genEval.runs.index import index_runs
from genEval.scores.definitions import SCORE
from genEval.scores.text import aligned

#: What ``geneval list`` names -> the config group.
KINDS = {
    "classifiers": "classifier",
    "generators": "generator",
    "oracles": "oracle",
    "benchmarks": "benchmark",
    "presets": "experiment",
}


def _groups() -> list[str]:
    return group_names()


def describe(group: str, name: str, width: int = 100) -> str:
    """One line about preset ``group/name``: a benchmark's title, else the first line of the file's comment."""
    path = CONF_DIR / group / f"{name}.yaml"
    text = path.read_text(encoding="utf-8")
    if group == "benchmark":
        title = ((yaml.safe_load(text) or {}).get("benchmark") or {}).get("title")
        if title:
            return str(title)
    for line in text.splitlines():
        if line.startswith("#") and "@package" not in line:
            line = line.lstrip("# ").strip()
            return line if len(line) <= width else line[: width - 3].rstrip() + "..."
        if line.strip() and not line.startswith("#"):
            break
    return ""


def matches(name: str, pattern: str | None) -> bool:
    """``pattern`` is in ``name`` (case-insensitive), or, with ``*``, ``?`` or ``[``, matches it (fnmatch)."""
    if not pattern:
        return True
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatch(name.lower(), pattern.lower())
    return pattern.lower() in name.lower()


@command("list")
def run_list(cfg: DictConfig) -> list[str]:
    """``geneval list classifiers [--filter resnet]``: one line per preset."""
    what = cfg.get("what")
    if what is None:
        lines = [(kind, f"{len(config_options(group))} presets (conf/{group}/)") for kind, group in KINDS.items()]
        print("geneval list <what>: " + ", ".join(KINDS) + " (or any config group: " + ", ".join(_groups()) + ")")
        print("\n".join(aligned(lines)))
        return []
    what = str(what)
    group = KINDS.get(what, what)
    if group not in _groups():
        known = [*KINDS, *_groups()]
        raise ValueError(f"geneval list {what}: nothing of that name{did_you_mean(nearest(what, known))} "
                         f"Lists: {', '.join(KINDS)}, or a config group: {', '.join(_groups())}.")  # fmt: skip
    names = [n for n in config_options(group) if matches(n, cfg.get("filter"))]
    if not names:
        print(f"no {what} matches --filter {cfg.get('filter')!r} (geneval list {what} lists them all)")
        return []
    print("\n".join(aligned([(n, describe(group, n)) for n in names], indent="")))
    return names


@command("runs")
def run_runs(cfg: DictConfig) -> list[dict[str, Any]]:
    """``geneval runs runs/``: the run directories under a folder, newest first."""
    rank_by = str(cfg.rank_by)
    if rank_by not in SCORE:
        raise ValueError(f"rank_by={rank_by!r} is not a score; e.g. rank_by=fmr_validated (any of {', '.join(SCORE)}).")
    folder = Path(str(cfg.folder))
    entries = index_runs(folder, rank_by)
    if cfg.get("limit"):
        entries = entries[: int(cfg.limit)]
    if not entries:
        print(f"no run directories under {folder} (a run directory holds results.json, or run.json while it runs)")
        return []
    rows = [("finished", "what", "headline", "run directory")]
    for e in entries:
        when = e.when.strftime("%Y-%m-%d %H:%M") if e.finished else "running/stopped"
        rows.append((when, e.what, e.headline, str(e.path)))
    print(f"{len(entries)} run(s) under {folder}, newest first; the headline is {SCORE[rank_by].label}:")
    print("\n".join(aligned(rows)))
    print(f"next:  geneval report {entries[0].path}   (its report.html)")
    return [{"path": str(e.path), "what": e.what, "headline": e.headline} for e in entries]
