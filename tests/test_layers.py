"""The house (docs/architecture.md): no import cycles, imports only go down the layers, command work only in the
command layer.

Layers, top-down: ``genEval.cli`` (dispatch) -> ``genEval.commands.*`` (config, printing, exit codes) ->
the library (``genEval.*``, one folder per job, in the order of :data:`LIBRARY`) -> backends (``generators.*``,
``oracles.*``, ``genEval.classifiers.*`` and ``genEval.data.*``). Imports are read from the source with ``ast``:
module level and inside functions, plus modules loaded by name (``importlib.import_module("...")``).
"""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.assets import ROOT

PACKAGES = ("genEval", "generators", "oracles")
TOP = {"genEval.cli"}
#: The engine's own backends: the tested classifiers and the data readers (packages, with every module in them).
BACKENDS_IN_ENGINE = ("genEval.classifiers", "genEval.data")
#: The library's folders (and its one-module jobs), top-down: a job imports only the jobs listed after it, so the
#: tree reads like docs/architecture.md's "Layers" and no two folders lean on each other.
LIBRARY = ("service", "reports", "campaigns", "comparisons", "snapshots", "search", "masks", "runs", "scores")
#: Old import paths kept for configs and notebooks (``_target_: genEval.style_mask.AutoMask``; the service's benchmark
#: versions hash those spellings): modules that only re-export, each belonging to the job it re-exports.
ALIASES = {"genEval.style_mask": "masks"}
#: The longest a module may be (lines), and the stricter limit of the jobs split one module a job (issue 28).
MAX_LINES, MAX_LINES_IN = 900, {"masks": 400}
# The bottom of the house: contracts and small helpers every layer may use.
FOUNDATION = {
    "genEval.interfaces",
    "genEval.declared",
    "genEval.checkpoints",
    "genEval.fileio",
    "genEval.assets",
    "genEval.kernels",  # NHWC modules and regional compilation: the generators and the execution settings share them
    "genEval.sandbox",
    "genEval.sandbox_mounts",  # what the sandbox's child sees (bubblewrap's mounts), the sandbox's own
    "genEval.model_ops",  # what a model file's graph calls: the checks of the sandbox's one caller, checkpoints' kin
    "genEval.validation",  # SettingError and the setting vocabularies, torch-free (the command line checks first)
}
# Function-local imports of the project's own modules, each with its reason (everything else is at the top).
LOCAL_IMPORTS_ALLOWED = {
    (
        "genEval",
        "genEval.search.driver",
    ): "`import genEval` stays cheap; genEval.evaluate loads the engine on first use",
    (
        "genEval",
        "genEval.interfaces",
    ): "`import genEval` stays cheap (no torch): genEval.Classifier & co. load the contracts on first use",
    (
        "genEval.commands.serve",
        "genEval.commands.server",
    ): "the service stack is the [service] extra: loaded when serve, worker or token runs (and named if missing)",
}
#: The service stack (the ``[service]`` extra and what comes only with it). The rule is by place, not by a list: a
#: module named ``server``, or in a package named so (the service's server, genEval/service/server/, and the command
#: module that runs it, genEval.commands.server, which genEval.commands.serve imports only when a service command
#: runs), may import it; every other module, and whatever it imports when it is imported, must load without it:
#: `pip install geneval-fmr` evaluates.
SERVICE_STACK = (
    "fastapi",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "psycopg",
    "multipart",
    "python_multipart",
    "starlette",
    "pydantic",
)
SERVER = "server"


def _server_side(module: str) -> bool:
    """Whether ``module`` is (in) a package named ``server``: the place of everything that needs the [service] extra."""
    return SERVER in module.split(".")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module an import of ``name`` loads (longest existing prefix), or None if third-party."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in MODULES:
            return ".".join(parts[:i])
    return None


def _imports(module: str) -> list[tuple[str, int, bool]]:
    """(imported project module, line, inside a function) for every import in ``module``'s source."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            local = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [f"{child.module}.{a.name}" for a in child.names]
            elif (
                isinstance(child, ast.Call)
                and getattr(child.func, "attr", getattr(child.func, "id", "")) == "import_module"
                and child.args
                and isinstance(child.args[0], ast.Constant)
            ):
                names = [str(child.args[0].value)]
            for n in names:
                target = _resolve(n)
                if target is not None and target != module:
                    found.append((target, child.lineno, in_function))
            visit(child, local)

    visit(tree, False)
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def test_the_modules_are_found():
    assert {
        "genEval.cli",
        "genEval.search.driver",
        "genEval.search.perturb",
        "genEval.commands",
        "generators.vqgan",
        "oracles.clip",
    } <= set(MODULES)
    assert any(t == "genEval.search.perturb" for t, _, _ in GRAPH["genEval.search.driver"])


def test_no_import_cycles():
    sorter = graphlib.TopologicalSorter({m: {t for t, _, _ in edges} for m, edges in GRAPH.items()})
    try:
        sorter.prepare()
    except graphlib.CycleError as err:
        cycle = err.args[1]
        lines = [f"{a} -> {b} (line {next(ln for t, ln, _ in GRAPH[a] if t == b)})" for a, b in zip(cycle, cycle[1:])]
        pytest.fail("import cycle: " + "; ".join(lines))


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _layer(module: str) -> int:
    if module in FOUNDATION:
        return 4
    if module in TOP:
        return 0
    if module.startswith("genEval.commands"):
        return 1
    if module.startswith(("generators", "oracles")) or _in(module, BACKENDS_IN_ENGINE):
        return 3
    return 2


def test_imports_only_go_down_the_layers():
    upward = sorted(
        {
            f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)}) at line {ln}"
            for m, edges in GRAPH.items()
            for t, ln, _ in edges
            if _layer(t) < _layer(m) and "genEval" not in (m, t)
        }
    )
    assert not upward, "\n".join(upward)


def _job(module: str) -> str | None:
    """The library job (folder, or one-module job) of a library module, else None."""
    if module in ALIASES:
        return ALIASES[module]
    parts = module.split(".")
    return parts[1] if _layer(module) == 2 and len(parts) > 1 and parts[1] in LIBRARY else None


def test_every_library_module_has_a_job():
    loose = sorted(m for m in MODULES if _layer(m) == 2 and m != "genEval" and _job(m) is None)
    assert not loose, f"library modules outside the jobs of LIBRARY (add a folder there, in order): {loose}"


def test_library_folders_only_import_the_jobs_below_them():
    upward = sorted(
        {
            f"{m} ({_job(m)}) imports {t} ({_job(t)}) at line {ln}"
            for m, edges in GRAPH.items()
            for t, ln, _ in edges
            if _job(m) and _job(t) and _job(t) != _job(m) and LIBRARY.index(_job(t)) < LIBRARY.index(_job(m))
        }
    )
    assert not upward, "a library folder imports one above it in LIBRARY:\n" + "\n".join(upward)


def test_backends_import_only_shared_helpers_of_the_engine():
    bad = sorted(
        {
            f"{m} imports {t} (line {ln})"
            for m, edges in GRAPH.items()
            if _layer(m) == 3
            for t, ln, _ in edges
            if t.startswith("genEval") and t not in FOUNDATION and not _in(t, BACKENDS_IN_ENGINE)
        }
    )
    assert not bad, "backends may use genEval.interfaces and small helpers only:\n" + "\n".join(bad)


def test_no_function_local_imports_of_the_projects_own_modules():
    local = sorted(
        {
            f"{m} imports {t} inside a function (line {ln})"
            for m, edges in GRAPH.items()
            for t, ln, inside in edges
            if inside and (m, t) not in LOCAL_IMPORTS_ALLOWED
        }
    )
    assert not local, "\n".join(local)


def test_command_work_stays_in_the_command_layer():
    """No print, sys.exit or DictConfig below the command layer (docs/architecture.md, "Habits": config flows one
    way)."""
    bad = []
    for m, path in MODULES.items():
        if _layer(m) <= 1:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                bad.append(f"{m}:{node.lineno} print()")
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "exit"
                and getattr(node.func.value, "id", None) == "sys"
            ):
                bad.append(f"{m}:{node.lineno} sys.exit()")
            if isinstance(node, ast.ImportFrom) and node.module == "omegaconf":
                bad.append(f"{m}:{node.lineno} imports omegaconf")
    assert not bad, "\n".join(bad)


def test_an_old_import_path_only_re_exports():
    """``genEval.style_mask`` (the ``_target_`` of conf/mask/*.yaml) defines nothing: the code lives in its job."""
    for alias, job in ALIASES.items():
        tree = ast.parse(MODULES[alias].read_text(encoding="utf-8"))
        defined = [
            getattr(node, "name", type(node).__name__)
            for node in tree.body
            if not isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr))
            and not (isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["__all__"])
        ]
        assert not defined, f"{alias} defines {defined}; it only re-exports genEval.{job}"
        assert {t for t, _, _ in GRAPH[alias]} == {f"genEval.{job}"}, f"{alias} re-exports genEval.{job} only"


def test_modules_stay_short():
    """No module over MAX_LINES lines; the mask jobs (fit, file format, configs, figure) one module each, shorter."""
    long = []
    for m, path in MODULES.items():
        limit = MAX_LINES_IN.get(_job(m) or "", MAX_LINES) if m not in ALIASES else MAX_LINES
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            long.append(f"{m}: {n} lines (at most {limit})")
    assert not long, "\n".join(long)


def test_the_mask_configs_mirror_conf_mask():
    """Every conf/mask/<name>.yaml names a config class of genEval.masks.configs (by its old or new path), and the
    masks package has one module for each job: the fit, the file format, the configs and the figure."""
    import yaml

    from genEval.masks import configs

    for path in sorted((ROOT / "genEval" / "conf" / "mask").glob("*.yaml")):
        target = yaml.safe_load(path.read_text())["_target_"]
        module, _, name = target.rpartition(".")
        assert module in ("genEval.style_mask", "genEval.masks", "genEval.masks.configs"), f"{path.name}: {target}"
        assert getattr(configs, name).__module__ == "genEval.masks.configs", f"{path.name}: {target}"
        assert callable(getattr(getattr(configs, name), "resolve", None)), f"{name} must resolve itself"
    assert {"genEval.masks.fit", "genEval.masks.format", "genEval.masks.configs", "genEval.masks.figure"} <= set(
        MODULES
    )


def _stack_imports(module: str) -> list[tuple[str, int]]:
    """(service-stack package, line) for each import of one that runs when ``module`` is imported (not inside a
    function)."""
    found = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            names = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [child.module]
            found.extend((n.split(".")[0], child.lineno) for n in names if n.split(".")[0] in SERVICE_STACK)
            visit(child)

    visit(ast.parse(MODULES[module].read_text(encoding="utf-8")))
    return found


def _loaded_with(module: str) -> dict[str, str]:
    """Every project module that importing ``module`` imports (module-level imports, followed), each with the
    module that imports it."""
    seen: dict[str, str] = {module: module}
    todo = [module]
    while todo:
        m = todo.pop()
        for t, _, inside in GRAPH[m]:
            if not inside and t not in seen:
                seen[t] = m
                todo.append(t)
    return seen


def test_only_server_packages_import_the_service_stack():
    """A module outside a package named ``server`` imports no service-stack package when it is imported, directly or
    through the project modules it imports (`pip install geneval-fmr`, without the [service] extra, evaluates)."""
    stack = {m: _stack_imports(m) for m in MODULES}
    bad = set()
    for m in MODULES:
        if _server_side(m):
            continue
        for loaded, by in _loaded_with(m).items():
            for package, line in stack[loaded]:
                via = "" if loaded == m else f" (through {loaded}, imported by {by})"
                bad.add(f"{m} loads {package}{via}: {loaded} line {line}")
    assert not bad, "the service stack is the [service] extra; import it only in a `server` package:\n" + "\n".join(
        sorted(bad)
    )


def test_server_packages_hold_only_what_needs_the_stack():
    """The other half of the rule: every module of a ``server`` package (its package files aside) loads the stack, so
    what needs no extra lives outside it, where `geneval submit` and the job runner can import it; and the service's
    server is such a package."""
    stack = {m: _stack_imports(m) for m in MODULES}
    server = [m for m in MODULES if _server_side(m) and MODULES[m].name != "__init__.py"]
    assert "genEval.service.server.app" in server and "genEval.commands.server" in server
    free = [m for m in server if not any(stack[loaded] for loaded in _loaded_with(m))]
    assert not free, f"these need no [service] extra; move them out of the server package: {free}"


# Imported inside the functions that use them (genEval/data/base.py): each costs about a second, which every command
# line start (and `geneval --help`) would pay.
SLOW_IMPORTS = ("torchvision", "matplotlib", "scipy.stats")


def test_the_command_line_starts_without_the_service_stack():
    """`geneval --help` imports neither the web framework nor the database library (the import-time rule above,
    checked in a fresh interpreter), nor the slow libraries a run only needs when it draws or tests."""
    code = (
        "import sys\n"
        "sys.argv = ['geneval', '--help']\n"
        "import genEval.cli\n"
        "try:\n"
        "    genEval.cli.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print('LOADED', sorted(m for m in {SERVICE_STACK!r} if m in sys.modules))\n"
        f"print('SLOW', sorted(m for m in {SLOW_IMPORTS!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "LOADED []" in out.stdout, out.stdout[-2000:]
    assert "SLOW []" in out.stdout, out.stdout[-2000:]


# ------------------------------------------------------------------------------------------ the tests' own house
TESTS = ROOT / "tests"
#: Test folders that mirror no library package, each with what it tests. Every other folder of tests/ has the path
#: of a package of the library (``tests/service/server/jobs`` tests ``genEval/service/server/jobs``).
TEST_FOLDERS = {
    "support": "what tests share (toys, hand-written runs, stand-ins, servers): the one place a test imports from",
    "contracts": "the plug-in contract (genEval/interfaces.py) and the conformance suite of every option",
    "foundation": "the foundation modules (FOUNDATION): assets, checkpoints, the sandbox, model files",
    "benchmarks": "the benchmarks/ package",
    "service/domain": "the service's modules outside its server (genEval/service/*.py)",
}


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def _mirrors_the_library(rel: str) -> bool:
    return (ROOT / "genEval" / rel).is_dir() or (rel.split("/")[0] in PACKAGES and (ROOT / rel).is_dir())


def test_the_tests_mirror_the_library():
    """tests/ is one package per folder, each folder the path of a library package (or one of TEST_FOLDERS); its only
    modules that are not tests (``test_*.py``), fixtures (``conftest.py``) or package files are tests/support/'s."""
    folders = sorted({p.parent.relative_to(TESTS).as_posix() for p in _test_files()} - {"."})
    stray = [
        f for f in folders if not _mirrors_the_library(f) and f not in TEST_FOLDERS and f.split("/")[0] != "support"
    ]
    assert not stray, f"test folders that mirror no library package (name the package's path): {stray}"
    not_packages = [f for f in ["."] + folders if not (TESTS / f / "__init__.py").is_file()]
    assert not not_packages, f"test folders without __init__.py (module names would collide): {not_packages}"
    loose = [
        p.relative_to(ROOT).as_posix()
        for p in _test_files()
        if not p.name.startswith("test_")
        and p.name not in ("conftest.py", "__init__.py")
        and p.relative_to(TESTS).parts[0] != "support"
    ]
    assert not loose, f"helper modules outside tests/support/ (move them there): {loose}"


def _test_imports(path: Path) -> list[tuple[str, int]]:
    """(imported name, line) of every import in ``path`` (any depth), relative ones as ``.name``; plus the modules a
    ``pytest_plugins`` names."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found += [(f"{base}.{a.name}" if node.module else base + a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytest_plugins" for t in node.targets):
            found += [(c.value, node.lineno) for c in ast.walk(node.value) if isinstance(c, ast.Constant)]
    return found


def _a_test_may_import(name: str) -> bool:
    """The library, third parties and tests.support: never another test module, a conftest or a relative import."""
    top = name.split(".")[0]
    if name.startswith(".") or top == "conftest" or top.startswith("test_"):
        return False
    return top != "tests" or name == "tests.support" or name.startswith("tests.support.")


def test_a_test_imports_only_tests_support_and_the_library():
    """A test module (and a helper of tests/support/) imports the library and :mod:`tests.support`, never another
    test module: what two tests share lives in tests/support/, and fixtures reach a folder through its conftest.py."""
    bad = [
        f"{p.relative_to(ROOT)}:{line} imports {name}"
        for p in _test_files()
        for name, line in _test_imports(p)
        if not _a_test_may_import(name)
    ]
    assert not bad, "import shared test code from tests.support only:\n" + "\n".join(bad)
