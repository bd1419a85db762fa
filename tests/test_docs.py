"""The docs say what the code does (issue 36 item 4): every command block of README.md and docs/*.md runs, the
generated tables (hooks, service routes, config options) match the code, and no docstring cites a file the project
lacks.

The convention for code blocks (CONTRIBUTING.md): a fenced ```bash or ```python block is a command, and this test
runs it, in a fresh folder per page, blocks of one page in order (a later block may read what an earlier one
wrote), with this checkout's ``geneval`` and ``python``. HTML comments on the lines right above the fence (unseen
on the site and on GitHub, so readers copy only the command) may say why not, or when:

* ``<!-- needs: <what> (...) -->``: the block runs only where that is available: ``assets`` (../shared/assets) and
  ``gpu`` (CUDA); never here: ``network``, ``imagenet``, ``cluster``, ``server`` (it serves until interrupted),
  ``ci`` (a step of .ci/run, which runs it), ``measurement`` (a benchmark, run by hand).
* ``<!-- slow: <why> -->``: the block runs with ``-m slow`` only.

The same markers as the block's leading comment lines (``# needs: ...``, ``# slow: ...``) are still read, for pages
not yet moved to the comments (README.md); the pages of the docs site (docs/*.md) carry none in their blocks.

README's two commands are run by .ci/run, exactly as written (tests/commands/test_cli.py checks that).
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.support.assets import ASSETS, ROOT

PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(bash|python)\n(.*?)^```", re.M | re.S)
#: A marker in an HTML comment of its own line, right above a fence: ``<!-- needs: assets (why) -->``.
COMMENT = re.compile(r"^<!--\s*((?:needs|slow):.*?)\s*-->$")
#: A marker as a block's leading comment line (the older form).
IN_BLOCK = re.compile(r"^# (?:needs|slow):")
#: What a block may need, and whether this machine has it.
NEEDS = {
    "assets": ASSETS.exists,
    "gpu": torch.cuda.is_available,
    "network": lambda: False,  # tests never reach the internet
    "imagenet": lambda: False,
    "cluster": lambda: False,
    "server": lambda: False,
    "ci": lambda: False,
    "measurement": lambda: False,
}
TWO_COMMANDS = "## The two commands"


@dataclass(frozen=True)
class Block:
    """A command block: its page, line, language and code; ``needs`` (nothing when it runs everywhere) and
    ``slow``."""

    page: str
    line: int
    language: str
    code: str
    needs: tuple[str, ...] = ()
    slow: bool = False

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def _needs(head: list[str], where: str) -> tuple[str, ...]:
    """What the ``# needs: a, b and c (why)`` lines of a block's head name."""
    said = " ".join(re.sub(r"\(.*", "", ln.removeprefix("# needs:")) for ln in head if ln.startswith("# needs:"))
    needs = tuple(w for w in re.split(r"[\s,]+|\band\b", said) if w)
    unknown = [w for w in needs if w not in NEEDS]
    if unknown:
        raise ValueError(f"{where}: unknown '# needs:' {unknown}; known: {', '.join(NEEDS)}")
    return needs


def _markers(text: str, m: re.Match) -> list[str]:
    """A block's markers as ``# needs: ...`` / ``# slow: ...`` lines: from the HTML comments right above its fence,
    then from its own leading comment lines."""
    above = list(
        itertools.takewhile(
            lambda c: c is not None, (COMMENT.match(ln) for ln in reversed(text[: m.start()].splitlines()))
        )
    )
    inside = itertools.takewhile(lambda ln: ln.startswith("#"), m[2].splitlines())
    return [f"# {c[1]}" for c in reversed(above)] + list(inside)


def blocks(text: str, page: str) -> list[Block]:
    """The command blocks of a page, in order, with what each needs (the convention of the module docstring)."""
    start = text.find(TWO_COMMANDS) if page == "README.md" else -1
    end = (text.find("\n## ", start + 1) % (len(text) + 1)) if start >= 0 else -1  # -1 (last section): the end
    found, in_two = [], 0
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        head = _markers(text, m)
        needs = _needs(head, f"{page}:{line}")
        if start < m.start() < end:  # README's two commands: .ci/run runs them as written
            in_two += 1
            needs = needs or (("ci",) if in_two <= 2 else ())
        found.append(Block(page, line, m[1], m[2], needs, any(ln.startswith("# slow") for ln in head)))
    return found


def all_blocks() -> list[Block]:
    return [b for p in PAGES for b in blocks(p.read_text(), str(p.relative_to(ROOT)))]


def _params():
    return [pytest.param(b, id=str(b), marks=[pytest.mark.slow] if b.slow else []) for b in all_blocks()]


@pytest.fixture(scope="module")
def shell_env(tmp_path_factory, digits_cache) -> dict[str, str]:
    """``geneval`` and ``python`` of this checkout first on PATH, the session's cache (the digits demo trained
    once), no downloads."""
    bin_dir = tmp_path_factory.mktemp("bin")
    (bin_dir / "geneval").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m genEval.cli "$@"\n')
    (bin_dir / "geneval").chmod(0o755)
    # A wrapper, not a symlink: a symlink to the venv's own symlinked interpreter loses the venv (its pyvenv.cfg is
    # looked for beside the link), and `python` would then be the base interpreter without the project's packages.
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "python").chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "GENEVAL_CACHE": str(digits_cache),
        "GENEVAL_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
    }


_FOLDERS: dict[str, Path] = {}


@pytest.mark.parametrize("block", _params())
def test_every_command_block_runs(block, shell_env, tmp_path_factory):
    missing = [n for n in block.needs if not NEEDS[n]()]
    if missing:
        pytest.skip(f"{block} needs {', '.join(missing)}")
    folder = _FOLDERS.setdefault(block.page, tmp_path_factory.mktemp(re.sub(r"\W", "_", block.page)))
    command = (
        ["bash", "-euo", "pipefail", "-c", block.code] if block.language == "bash" else ["python", "-c", block.code]
    )
    r = subprocess.run(command, cwd=folder, env=shell_env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, f"{block} failed ({r.returncode}):\n{block.code}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"


def test_the_block_convention_reads_needs_slow_and_the_two_commands():
    page = (
        "# t\n\n## The two commands\n\n```bash\npip install -e .\n```\n\n```bash\npip install -e '.[test]'\n```\n\n"
        "## Then\n\n```bash\n# needs: assets, gpu (why)\ngeneval\n```\n\n```python\n# slow: minutes\nprint(1)\n```\n"
        "\n```bash\ngeneval --help\n```\n\n```text\nnot a command\n```\n"
    )
    got = [(b.language, b.needs, b.slow) for b in blocks(page, "README.md")]
    assert got == [
        ("bash", ("ci",), False),
        ("bash", ("ci",), False),
        ("bash", ("assets", "gpu"), False),
        ("python", (), True),
        ("bash", (), False),
    ]
    assert [b.line for b in blocks(page, "README.md")][2] == 15
    both = blocks("```bash\n# needs: assets (the JPEGs)\n# slow: two models\ngeneval compare\n```\n", "docs/x.md")
    assert [(b.needs, b.slow, b.line) for b in both] == [(("assets",), True, 1)]
    with pytest.raises(ValueError, match=r"unknown '# needs:' \['coffee'\]"):
        blocks("```bash\n# needs: coffee\nls\n```\n", "x.md")


def test_markers_sit_in_html_comments_above_the_fence_and_the_site_shows_none():
    page = (
        "# t\n\n<!-- needs: assets (the JPEGs) -->\n<!-- slow: two models -->\n```bash\n# a comment for readers\n"
        "geneval compare\n```\n\n<!-- an ordinary comment -->\n```bash\ngeneval --help\n```\n\n"
        "<!-- needs: coffee -->\ntext between\n\n```bash\nls\n```\n"
    )
    got = [(b.needs, b.slow, b.line) for b in blocks(page, "docs/x.md")]
    assert got == [(("assets",), True, 5), ((), False, 11), ((), False, 18)]  # only comments right above count
    with pytest.raises(ValueError, match=r"unknown '# needs:' \['coffee'\]"):
        blocks("<!-- needs: coffee -->\n```bash\nls\n```\n", "x.md")
    shown = [
        f"{p.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
        for p in sorted((ROOT / "docs").glob("*.md"))
        for text in [p.read_text()]
        for m in FENCE.finditer(text)
        if any(IN_BLOCK.match(ln) for ln in m[2].splitlines())
    ]
    assert not shown, f"move these markers into an HTML comment above the fence: {shown}"


def _hooks_module():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_tables_match_the_code():
    """The hook table (interfaces.HOOKS), the route table (the app's openapi()) and the config options (conf/) in
    docs/ are what `python docs/hooks.py --write` writes now; MkDocs' build fails the same way."""
    hooks = _hooks_module()
    assert not hooks.stale(), "run `python docs/hooks.py --write`"
    pages = {p.name: p.read_text() for p in [*(ROOT / "docs").glob("*.md"), *hooks.PAGES_BESIDE]}
    marked = {m["name"] for text in pages.values() for m in hooks.MARK.finditer(text)}
    assert marked == set(hooks.TABLES), "every generated table appears in a page"


def test_a_stale_table_is_found_and_rewritten(tmp_path):
    """A hook the docs do not list, a route that moved: the check names the page, --write fixes it."""
    hooks = _hooks_module()
    from genEval.interfaces import HOOKS

    table = hooks.hooks_table()
    assert all(f"| `{name}` |" in table for name in HOOKS)
    (tmp_path / "page.md").write_text(
        f"x\n<!-- generated: hooks -->\n{table.rsplit(chr(10), 1)[0]}\n<!-- end generated -->\n"
    )
    (tmp_path / "other.md").write_text(f"<!-- generated: routes -->\n{hooks.routes_table()}\n<!-- end generated -->\n")
    assert hooks.stale(tmp_path) == ["page.md"]
    assert hooks.write(tmp_path) == ["page.md"] and hooks.stale(tmp_path) == []
    assert "| GET | `/api/health` |" in (tmp_path / "other.md").read_text()
    (tmp_path / "bad.md").write_text("<!-- generated: nothing -->\n<!-- end generated -->\n")
    with pytest.raises(KeyError, match="unknown generated table 'nothing'"):
        hooks.stale(tmp_path)


#: Files outside the project that docstrings and comments once cited (the project's brief, not its text).
FOREIGN = re.compile(r"STYLE\.md|METHOD\.md|digest\.md|\.\./seeds|\.\./shared/docs|shared/assets/README|README \"")


def test_no_docstring_cites_a_file_the_project_lacks():
    code = [*ROOT.glob("genEval/**/*.py"), *ROOT.glob("generators/*.py"), *ROOT.glob("oracles/**/*.py")]
    code += [*ROOT.glob("genEval/conf/**/*.yaml"), *ROOT.glob("benchmarks/**/*.py")]
    bad = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in code
        for n, ln in enumerate(p.read_text().splitlines(), 1)
        if FOREIGN.search(ln)
    ]
    assert not bad, "cite the project's own docs (docs/method.md, docs/architecture.md, ...): " + ", ".join(bad)
    cited = {m for p in code for m in re.findall(r"docs/[a-z-]+\.md", p.read_text())}
    assert cited and all((ROOT / c).is_file() for c in cited), sorted(c for c in cited if not (ROOT / c).is_file())


def test_the_layer_map_names_every_module_top_down():
    """docs/architecture.md's map: every module of genEval/, generators/ and oracles/ once, the library's folders in
    the layer test's order, each row with its docstring's first sentence."""
    hooks = _hooks_module()
    rows = [r.split(" | ") for r in hooks.layers_table().splitlines()[2:]]
    named = [f"{folder.strip('`').rstrip('/')}/{module.strip('`')}" for _, folder, module, _ in rows]
    code = sorted(p.relative_to(ROOT).as_posix() for pkg in ("genEval", "generators", "oracles")
                  for p in (ROOT / pkg).rglob("*.py"))  # fmt: skip
    assert sorted(named) == code and len(named) == len(set(named))
    library = hooks._test_constant("LIBRARY")  # the layer test's literal, read as the map's generator reads it
    folders = [f for _, f, _, _ in rows if f.startswith("`genEval/") and f.strip("`/").split("/")[-1] in library]
    order = list(dict.fromkeys(f.strip("`/").split("/")[-1] for f in folders))
    assert order == list(library)
    snapshot = {m.strip("`"): what for _, f, m, what in rows if f == "`genEval/snapshots/`"}
    assert snapshot["manifest.py"].startswith("A snapshot's format (paper App. O)")
