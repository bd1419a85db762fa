"""Benchmark results as data: one JSON file per study, day and device,
``benchmarks/results/<study>/<date>-<device>.json``, and the page ``benchmarks/RESULTS.md`` rendered from them
(``docs/hooks.py``'s ``results`` table: ``python docs/hooks.py --check`` fails when the page and the files differ,
``--write`` rewrites the page).

A result file (schema 1) holds:

* ``schema``: 1; ``study``: the module that measured (``python -m benchmarks.<study>``); ``date``: the day it was
  recorded (``YYYY-MM-DD``); ``device``: a short name of the machine (``cpu``, ``nvidia-h200``); the file's name is
  ``<study>/<date>-<device>.json``, checked on loading;
* ``position``: where it sits on the page (results render in this order);
* ``commands``: every command of its ``bash`` blocks, verbatim as recorded (a line continued with ``\\`` is one
  command), checked against the blocks on loading;
* ``environment``: what the record states of the machine and software (``machine``: its "Device:" sentence;
  ``torch``, ``commit`` where stated), never filled in later;
* ``blocks``: the text in page order, each one of ``{"notes": markdown}`` (prose and headings),
  ``{"code": lang, "text": ...}`` (a fenced block) and ``{"table": {"columns": [...], "rows": [[...]]}}``, whose cells
  are JSON numbers where the recorded text is exactly a number's shortest spelling (``2.64``, ``128``) and strings
  otherwise (``0.270``, ``1,268 s``, ``**not met**``), so that the page shows each number as it was recorded.

The page is the blocks of every result, in ``position`` order, separated by one blank line. Written by hand, not by a
templating library: the rendering is a join of strings whose exact output the check compares byte for byte.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from genEval.fileio import atomic_write_bytes

SCHEMA = 1
RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
INTEGER = re.compile(r"-?(0|[1-9]\d*)")
DECIMAL = re.compile(r"-?\d+\.\d+")
KEYS = ("schema", "study", "date", "device", "position", "commands", "environment", "blocks")


def cell_value(text: str) -> int | float | str:
    """A table cell as data: the number it spells when the text is exactly that number's shortest spelling, else the
    text (``"2.64"`` -> 2.64, ``"0.270"`` and ``"1,268"`` stay text: a number would lose how they were written)."""
    if INTEGER.fullmatch(text):
        return int(text)
    if DECIMAL.fullmatch(text) and repr(float(text)) == text:
        return float(text)
    return text


def cell_text(value: int | float | str) -> str:
    """The inverse of :func:`cell_value`."""
    return value if isinstance(value, str) else repr(value)


def split_row(line: str) -> list[str]:
    """``| a | b \\| c |`` -> ``["a", "b \\| c"]`` (an escaped bar stays inside its cell)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def table_markdown(table: dict) -> str:
    columns, rows = table["columns"], table["rows"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(cell_text(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def block_markdown(block: dict) -> str:
    """One block as the page shows it."""
    if "notes" in block:
        return block["notes"]
    if "code" in block:
        return f"```{block['code']}\n{block['text']}\n```"
    return table_markdown(block["table"])


def bash_commands(text: str) -> list[str]:
    """The commands of a bash block: its lines that are not comments, a ``\\``-continued line joined with the next."""
    commands, pending = [], ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line
        if line.endswith("\\"):
            pending += "\n"
            continue
        commands.append(pending)
        pending = ""
    return commands + ([pending] if pending else [])


@dataclass(frozen=True)
class Result:
    """One results file (see the module docstring for the schema)."""

    study: str
    date: str
    device: str
    position: int
    commands: tuple[str, ...]
    environment: dict
    blocks: tuple[dict, ...]

    def __post_init__(self) -> None:
        for key in ("study", "device"):
            if not NAME.fullmatch(getattr(self, key)):
                raise ValueError(f"{key} {getattr(self, key)!r} is not a short name (lower case, digits, '_', '-')")
        if not DATE.fullmatch(self.date):
            raise ValueError(f"date {self.date!r} is not YYYY-MM-DD")
        for i, block in enumerate(self.blocks):
            kinds = {"notes", "code", "table"} & set(block)
            if len(kinds) != 1:
                raise ValueError(f"block {i} of {self.path_name} has {sorted(block)}; one of notes, code, table")
            if "table" in block and any(len(r) != len(block["table"]["columns"]) for r in block["table"]["rows"]):
                raise ValueError(f"table in block {i} of {self.path_name} has a row whose length is not its columns'")
        found = [c for b in self.blocks if b.get("code") == "bash" for c in bash_commands(b["text"])]
        if list(self.commands) != found:
            raise ValueError(f"{self.path_name}: commands {list(self.commands)} are not its bash blocks' {found}")

    @property
    def path_name(self) -> str:
        """Where it lives under ``benchmarks/results/``."""
        return f"{self.study}/{self.date}-{self.device}.json"

    def markdown(self) -> str:
        return "\n\n".join(block_markdown(b) for b in self.blocks)

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "study": self.study, "date": self.date, "device": self.device,
                "position": self.position, "commands": list(self.commands), "environment": self.environment,
                "blocks": list(self.blocks)}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict) -> Result:
        if d.get("schema") != SCHEMA:
            raise ValueError(f"results schema {d.get('schema')!r}; this code reads schema {SCHEMA}")
        if missing := [k for k in KEYS if k not in d]:
            raise ValueError(f"a results file lacks {missing}; it needs {list(KEYS)}")
        if extra := sorted(set(d) - set(KEYS)):
            raise ValueError(f"a results file has unknown keys {extra}; known: {list(KEYS)}")
        return cls(d["study"], d["date"], d["device"], int(d["position"]), tuple(d["commands"]),
                   dict(d["environment"]), tuple(d["blocks"]))  # fmt: skip


def load(path: Path, root: Path = RESULTS_DIR) -> Result:
    """One file, checked against its name (a file moved or renamed by hand is refused, naming both)."""
    result = Result.from_dict(json.loads(Path(path).read_text()))
    where = Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    if where != result.path_name:
        raise ValueError(f"{path} holds the result of {result.path_name}; move it there or fix its fields")
    return result


def load_all(root: Path = RESULTS_DIR) -> list[Result]:
    """Every result under ``root``, in page order (``position``; two results at one position are refused)."""
    results = sorted((load(p, root) for p in sorted(Path(root).glob("*/*.json"))), key=lambda r: r.position)
    seen: dict[int, str] = {}
    for r in results:
        if r.position in seen:
            raise ValueError(f"{r.path_name} and {seen[r.position]} share position {r.position}; give one the next")
        seen[r.position] = r.path_name
    return results


def page(root: Path = RESULTS_DIR) -> str:
    """The generated part of ``benchmarks/RESULTS.md``: every result's blocks, in page order."""
    return "\n\n".join(r.markdown() for r in load_all(root))


def write(result: Result, root: Path = RESULTS_DIR) -> Path:
    """Write ``result`` to its file atomically (a temporary file, then a rename: never a half-written result)."""
    path = Path(root) / result.path_name
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(result.to_dict(), indent=1, ensure_ascii=False) + "\n").encode())
    return path
