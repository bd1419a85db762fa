"""Library code points at the docs, not at a tracker (docs/architecture.md, "Habits"): a docstring, comment or template
in ``genEval/``, ``generators/`` or ``oracles/`` that explains *why* names the docs page with the feature
(``docs/scores.md``), never "issue 44", which names no tracker a reader can open; every page cited exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("genEval", "generators", "oracles")
#: "issue 44", "Issue 33", "issues 33 and 40" (not "tissue 4", not "an issue with")
ISSUE = re.compile(r"\bissues? \d+", re.IGNORECASE)
DOCS_PAGE = re.compile(r"docs/[a-z-]+\.md")


def _code(root: Path) -> list[Path]:
    """The packages' Python files and the report's Jinja templates (their comments and the text they render)."""
    return [p for pkg in PACKAGES for ext in ("*.py", "*.j2") for p in sorted((root / pkg).rglob(ext))]


def issue_references(root: Path = ROOT) -> list[str]:
    """Each line of the packages' code (:func:`_code`) that cites an issue number, as ``path:line: text``."""
    return [
        f"{p.relative_to(root).as_posix()}:{n}: {line.strip()}"
        for p in _code(root)
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if ISSUE.search(line)
    ]


def test_the_scan_finds_issue_numbers_and_nothing_else(tmp_path):
    """A known answer: docstrings, comments and messages that cite an issue are found, words that merely hold one
    are not."""
    (tmp_path / "genEval").mkdir()
    (tmp_path / "genEval" / "page.html.j2").write_text("{#- the sections of issue 43 -#}\n<p>docs/scores.md</p>\n")
    (tmp_path / "genEval" / "m.py").write_text(
        '"""Scores (issue 10)."""\n'
        "x = 1  # Issue 33 said so\n"
        "# issues 33 and 40\n"
        'y = "tissue 4, an issue with it, docs/scores.md"\n'
    )
    assert issue_references(tmp_path) == [
        'genEval/m.py:1: """Scores (issue 10)."""',
        "genEval/m.py:2: x = 1  # Issue 33 said so",
        "genEval/m.py:3: # issues 33 and 40",
        "genEval/page.html.j2:1: {#- the sections of issue 43 -#}",
    ]


def test_no_library_code_cites_an_issue_number():
    found = issue_references()
    assert not found, "cite the docs page that explains the feature (docs/<page>.md) instead:\n" + "\n".join(found)


def test_every_docs_page_the_library_cites_exists():
    cited = {m for p in _code(ROOT) for m in DOCS_PAGE.findall(p.read_text(encoding="utf-8"))}
    missing = sorted(c for c in cited if not (ROOT / c).is_file())
    assert {"docs/scores.md", "docs/comparing.md", "docs/service.md"} <= cited and not missing, missing
