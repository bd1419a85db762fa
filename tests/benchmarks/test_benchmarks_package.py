"""``benchmarks/`` as a package (issue 45): a study imports the library and ``benchmarks.harness``, never ``tests/``
or the command layer (``genEval.commands``), and never edits ``sys.path``; no test loads a benchmark from its file.
No study is excused (the shrink-only list of issue 45 ended empty): a study that measures another checkout runs it in
a child process (``benchmarks/harness/checkout.py``), and what a study shares with the tests lives in the harness."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The modules of tests/ a study could borrow (``tests.support...``, or a helper or test file by its bare name after a
#: ``sys.path`` edit).
TEST_MODULES = {p.stem for p in (ROOT / "tests").rglob("*.py") if p.stem != "__init__"} | {"tests"}
#: ``sys.path.insert(...)``, ``.append``, ``sys.path[:0] = ...``, ``sys.path = ...``, also inside a child's ``-c`` code.
SYS_PATH_EDIT = re.compile(r"sys\.path(\.insert|\.append|\.extend|\[[^\]]*\]\s*=|\s*=[^=])")


def _imported(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def broken_rules(path: Path) -> set[str]:
    """The package rules ``path`` breaks: ``sys.path``, ``tests``, ``genEval.commands``."""
    text = path.read_text()
    imported = _imported(ast.parse(text))
    rules = {"sys.path"} if SYS_PATH_EDIT.search(text) else set()
    if any(name.split(".")[0] in TEST_MODULES for name in imported):
        rules.add("tests")
    if any(name == "genEval.commands" or name.startswith("genEval.commands.") for name in imported):
        rules.add("genEval.commands")
    return rules


def test_the_rule_check_finds_each_kind_of_break(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nsys.path.insert(0, 'x')\nfrom tests.support.toys import LinearClassifier\n")
    assert broken_rules(bad) == {"sys.path", "tests"}
    bad.write_text("def f():\n    from genEval.commands.serve import load_benchmarks\n")
    assert broken_rules(bad) == {"genEval.commands"}
    bad.write_text("CODE = 'import sys; sys.path[:0] = [sys.argv[1]]'\n")
    assert broken_rules(bad) == {"sys.path"}
    good = tmp_path / "good.py"
    good.write_text("import sys\nfrom benchmarks.harness import roofline\nprint(sys.path[0], sys.path == [])\n")
    assert broken_rules(good) == set()


def test_studies_import_only_the_harness_and_the_library():
    found = {str(p.relative_to(ROOT)): r for p in sorted((ROOT / "benchmarks").rglob("*.py")) if (r := broken_rules(p))}
    assert not found, f"import the harness or the library instead (a child process for another checkout): {found}"


def _names_a_benchmark_file(node: ast.AST) -> bool:
    """A string that is ``benchmarks`` or a path to one of its files (a glob, which reads files, is not)."""
    text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""
    return text == "benchmarks" or (text.startswith("benchmarks/") and text.endswith(".py") and "*" not in text)


def loads_a_benchmark_by_path(path: Path) -> bool:
    """Whether ``path`` loads a module from a file (``spec_from_file_location``) and names a benchmark file anywhere
    (the path may be built in a constant far from the call)."""
    nodes = list(ast.walk(ast.parse(path.read_text())))
    loads = any(isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "spec_from_file_location" for n in nodes)
    return loads and any(_names_a_benchmark_file(n) for n in nodes)


def test_no_test_loads_a_benchmark_from_its_file(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        'import importlib.util\nS = ROOT / "benchmarks" / "x.py"\nimportlib.util.spec_from_file_location("x", S)\n'
    )
    assert loads_a_benchmark_by_path(probe)
    probe.write_text('import importlib.util\nimportlib.util.spec_from_file_location("h", "docs/hooks.py")\n')
    assert not loads_a_benchmark_by_path(probe)
    loaded = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").rglob("*.py")) if loads_a_benchmark_by_path(p)]
    assert not loaded, f"import these as benchmarks.<module> instead: {loaded}"


def _imports_the_package_at_module_level(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "benchmarks" for n in tree.body)


def _reruns_as_a_module(tree: ast.Module) -> bool:
    """A top-level ``if __name__ == "__main__" and not __package__:`` that calls ``_as_module.rerun(__file__)``."""
    for node in tree.body:
        if isinstance(node, ast.If) and "__package__" in ast.unparse(node.test):
            return "_as_module.rerun(__file__)" in ast.unparse(node)
    return False


def test_a_study_that_imports_the_harness_still_runs_as_a_file():
    """Earlier issues' commands say ``python benchmarks/throughput.py ...``: run as a file, ``benchmarks`` is not
    importable, so every study that imports it at module level first reruns itself as ``python -m benchmarks.<study>``
    (benchmarks/_as_module.py); the two of an Interface line (throughput, roofline) are run so."""
    studies = [p for p in sorted((ROOT / "benchmarks").glob("*.py")) if not p.name.startswith("_")]
    trees = {p.stem: ast.parse(p.read_text()) for p in studies}
    runnable = {s: t for s, t in trees.items() if "__main__" in ast.unparse(t)}  # not the old names' re-exports
    missing = [s for s, t in runnable.items() if _imports_the_package_at_module_level(t) and not _reruns_as_a_module(t)]
    assert not missing, f"add the rerun guard of benchmarks/_as_module.py to: {missing}"
    for study in ("throughput", "roofline"):
        done = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / f"{study}.py"), "--help"],
            capture_output=True, text=True, timeout=300, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        )  # fmt: skip
        assert done.returncode == 0 and "--device" in done.stdout, done.stderr[-2000:]
