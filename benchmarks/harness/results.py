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

The page is the blocks of every result, in ``position`` order, separated by one blank line. A new measurement is
recorded from what its study printed: ``python -m benchmarks.<study> ... > out.md``, then ``python -m
benchmarks.harness.results --study <study> --device <device> [--env torch=2.11.0 ...] < out.md`` (the next
position; add the command as a ``bash`` block and the notes by hand where it printed none). Written by hand, not by a
templating library: the rendering is a join of strings whose exact output the check compares byte for byte.

Every study records itself too: its ``__main__`` is ``raise SystemExit(results.run(main, __file__))``, and
``python -m benchmarks.<study> ... --results [ROOT]`` records what the run printed (also shown as it comes) as
``ROOT/<study>/<date>-<device>.json`` (ROOT: ``benchmarks/results``) once the study has finished without an error:
the command as a ``bash`` block, then the printed tables (:func:`blocks_from_markdown`; output without a markdown table
is kept as one ``text`` block), with the seed, the versions (Python, torch, genEval, the checkout's commit) and the
device in ``environment``. An existing file is refused before the study starts; an interrupted or failed run writes
nothing.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
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


def blocks_from_markdown(text: str) -> list[dict]:
    """Markdown -> blocks (the inverse of joining :func:`block_markdown` with blank lines): chunks between blank
    lines outside code fences; a fence is a code block, a chunk of ``|`` lines under a ``|---|`` rule is a table when
    :func:`table_markdown` writes it back exactly (else it stays notes), and consecutive prose chunks are one notes
    block. How ``benchmarks/RESULTS.md``'s prose became the result files, and how a study's printed tables become
    one."""
    chunks: list[list[str]] = [[]]
    fence = False
    for line in text.strip("\n").split("\n"):
        fence ^= line.startswith("```")
        if line or fence:
            chunks[-1].append(line)
        elif chunks[-1]:
            chunks.append([])
    blocks: list[dict] = []
    for chunk in (c for c in chunks if c):
        if chunk[0].startswith("```"):
            blocks.append({"code": chunk[0][3:], "text": "\n".join(chunk[1:-1])})
            continue
        lines = "\n".join(chunk)
        if len(chunk) >= 2 and all(ln.startswith("|") for ln in chunk) and re.fullmatch(r"\|(---\|)+", chunk[1]):
            table = {"columns": split_row(chunk[0]), "rows": [[cell_value(c) for c in split_row(r)] for r in chunk[2:]]}
            if all(len(r) == len(table["columns"]) for r in table["rows"]) and table_markdown(table) == lines:
                blocks.append({"table": table})
                continue
        if blocks and "notes" in blocks[-1]:
            blocks[-1] = {"notes": f"{blocks[-1]['notes']}\n\n{lines}"}
        else:
            blocks.append({"notes": lines})
    return blocks


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


def record(markdown: str, study: str, device: str, date: str, environment: dict, root: Path = RESULTS_DIR) -> Path:
    """A new result from a study's printed markdown, at the end of the page (the next position), its commands taken
    from its ``bash`` blocks. Refuses to replace a result already recorded for that study, day and device."""
    blocks = blocks_from_markdown(markdown)
    commands = tuple(c for b in blocks if b.get("code") == "bash" for c in bash_commands(b["text"]))
    position = max((r.position for r in load_all(root)), default=0) + 1
    result = Result(study, date, device, position, commands, environment, tuple(blocks))
    if (Path(root) / result.path_name).exists():
        raise FileExistsError(f"{result.path_name} is recorded already; edit it, or record under another --device")
    return write(result, root)


def write(result: Result, root: Path = RESULTS_DIR) -> Path:
    """Write ``result`` to its file atomically (a temporary file, then a rename: never a half-written result)."""
    path = Path(root) / result.path_name
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(result.to_dict(), indent=1, ensure_ascii=False) + "\n").encode())
    return path


class _Tee(io.TextIOBase):
    """Writes to ``out`` and keeps a copy (what the study printed, shown as it comes)."""

    def __init__(self, out) -> None:
        self.out, self.kept = out, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


def _option(args: list[str], name: str) -> str | None:
    """The value of ``--name value`` or ``--name=value`` in ``args`` (the last one), else None."""
    found = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            found = args[i + 1]
        elif a.startswith(name + "="):
            found = a.split("=", 1)[1]
    return found


def take_results_option(args: list[str]) -> tuple[Path | None, list[str]]:
    """``--results [ROOT]`` / ``--results=ROOT`` taken off ``args``: (ROOT, or the default for a bare flag, or None
    when absent; the other arguments)."""
    root, rest, i = None, [], 0
    while i < len(args):
        a = args[i]
        if a == "--results":
            has_value = i + 1 < len(args) and not args[i + 1].startswith("-")
            root, i = (Path(args[i + 1]) if has_value else RESULTS_DIR), i + (2 if has_value else 1)
            continue
        if a.startswith("--results="):
            root = Path(a.split("=", 1)[1])
        else:
            rest.append(a)
        i += 1
    return root, rest


def device_name(device: str | None) -> str:
    """A short name of the machine a study ran on: ``cpu``, or the GPU's name (``nvidia-h200``) for ``cuda``/``auto``
    where one is there."""
    import torch

    if (device or "auto") == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if not str(device).startswith("cuda"):
        return re.sub(r"[^a-z0-9]+", "-", str(device).lower()).strip("-")
    name = torch.cuda.get_device_name(torch.device(device))
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def environment(seed: str | None) -> dict:
    """What a recorded run states of itself: the seed (``--seed``, else the study's own), the versions, the commit."""
    import torch

    import genEval

    root = Path(__file__).resolve().parents[2]
    commit = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True).stdout
    return {
        "seed": seed if seed is not None else "the study's default",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "genEval": getattr(genEval, "__version__", "unknown"),
        "commit": (commit + ("+changes" if dirty.strip() else "")) or "not a git checkout",
        "machine": platform.platform(),
    }


def run(main: Callable[[], int | None], file: str, argv: list[str] | None = None) -> int:
    """Run a study's ``main`` (it reads ``sys.argv``), recording what it printed when ``--results`` is given (see the
    module docstring): the exit code (a refused ``--results`` is 2, naming the file)."""
    args = list(sys.argv[1:] if argv is None else argv)
    root, rest = take_results_option(args)
    sys.argv[1:] = rest
    if root is None or {"-h", "--help"} & set(rest):
        return _code(main)
    study = Path(file).stem
    date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    device = device_name(_option(rest, "--device"))
    target = Path(root) / study / f"{date}-{device}.json"
    if target.exists():
        print(f"--results: {target} is recorded already; give another --results ROOT, or move it", file=sys.stderr)
        return 2
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        code = _code(main)
    if code != 0:
        return code
    printed = tee.kept.getvalue()
    command = shlex.join(["python", "-m", f"benchmarks.{study}", *rest])
    body = printed if re.search(r"^\|(---\|)+$", printed, re.M) else f"```text\n{printed.strip()}\n```"
    path = record(f"```bash\n{command}\n```\n\n{body}", study, device, date, environment(_option(rest, "--seed")), root)
    print(f"recorded {path}", file=sys.stderr)
    return 0


def _code(main: Callable[[], int | None]) -> int:
    try:
        code = main()
    except SystemExit as stop:
        code = stop.code
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.harness.results --study S --device D [--env key=value ...] < printed.md``: record."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--study", required=True, help="the study's module name, e.g. throughput")
    ap.add_argument("--device", required=True, help="a short name of the machine, e.g. cpu, nvidia-h200")
    ap.add_argument("--date", default=datetime.datetime.now(datetime.timezone.utc).date().isoformat())
    ap.add_argument("--env", nargs="*", default=[], help="key=value facts of the environment, as the record states")
    ap.add_argument("--root", type=Path, default=RESULTS_DIR)
    args = ap.parse_args(argv)
    bad = [e for e in args.env if "=" not in e]
    if bad:
        ap.error(f"--env takes key=value, got {bad}")
    env = dict(e.split("=", 1) for e in args.env)
    path = record(sys.stdin.read(), args.study, args.device, args.date, env, args.root)
    print(f"recorded {path}; now run `python docs/hooks.py --write`")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
