"""The tables of the docs that the code writes: the plug-in hooks (``genEval.interfaces.HOOKS``), the service's
routes (its FastAPI app's ``openapi()``), the config groups with their options (``conf/<group>/*.yaml``, each
described by the first sentence of its comment) and the layer map (every module by layer and folder, with the first
sentence of its docstring), and the benchmark results (``benchmarks/RESULTS.md``, rendered from
``benchmarks/results/<study>/<date>-<device>.json`` by :mod:`benchmarks.harness.results`).

A page holds each table between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``, committed, so it reads
the same on GitHub as on the site. ``python docs/hooks.py --write`` rewrites them from the code; as an MkDocs hook
(``hooks:`` in mkdocs.yml) this module fails the build when one no longer matches the code, and
``tests/test_docs.py`` fails the same way.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MARK = re.compile(r"(<!-- generated: (?P<name>[a-z_]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _type(annotation: object) -> str:
    """A hook's type as a reader writes it: ``Callable[[Tensor], Tensor] | None``, ``Literal['label', ...]``."""
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation)
    text = re.sub(r"\b(?:typing|collections\.abc|torch)\.", "", text)
    return re.sub(r"Optional\[(.*)\]$", r"\1 | None", text)


def hooks_table() -> str:
    """Every optional hook the engine reads: on which roles, its default, the type its value must have, and what it
    does."""
    from genEval.interfaces import HOOKS

    rows = ["| hook | on | default | type | what it does |", "|---|---|---|---|---|"]
    for h in HOOKS.values():
        rows.append(
            f"| `{h.name}` | {', '.join(h.roles)} | `{h.default!r}` | `{_cell(_type(h.type))}` | {_cell(h.meaning)} |"
        )
    return "\n".join(rows)


def routes_table() -> str:
    """Every route of the service's app (its OpenAPI schema): method, path, and the first sentence of its docs."""
    from genEval.service.server.app import create_app

    spec = create_app(None).openapi()  # the schema needs the routes only, not a running service
    rows = ["| method | path | what |", "|---|---|---|"]
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            what = (op.get("description") or op.get("summary") or "").strip().split("\n\n")[0]
            rows.append(f"| {method.upper()} | `{path}` | {_cell(what)} |")
    return "\n".join(rows)


#: The end of a sentence: a full stop before a capital, not after an abbreviation ("et al.", "Sec.", "e.g.").
SENTENCE_END = re.compile(r"(?<!\bal)(?<!\bSec)(?<!e\.g)(?<!i\.e)(?<!\bApp)(?<!\bcf)(?<!\bvs)\.\s+(?=[A-Z])")


def _described(path: Path, limit: int = 150) -> str:
    """The first sentence of a config file's leading comment (what the option is), at most ``limit`` characters."""
    words = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith("# @package"):
            words.append(line.lstrip("#").strip())
    text = " ".join(w for w in words if w)
    sentence = SENTENCE_END.split(text, maxsplit=1)[0].rstrip(".:;, ")
    return sentence if len(sentence) <= limit else sentence[: limit - 3].rsplit(" ", 1)[0] + " ..."


def groups_table() -> str:
    """Every config group and option under conf/, with the first line of the option's comment."""
    from genEval.commands import CONF_DIR
    from genEval.commands.registry import group_names

    rows = ["| group | option | what |", "|---|---|---|"]
    for group in (CONF_DIR / name for name in group_names()):
        for option in sorted(group.glob("*.yaml")):
            rows.append(f"| `{group.name}` | `{option.stem}` | {_cell(_described(option))} |")
    return "\n".join(rows)


def _test_constant(name: str) -> object:
    """The literal ``name`` of tests/test_layers.py (read, not imported: the docs do not run the tests)."""
    import ast

    tree = ast.parse((ROOT / "tests" / "test_layers.py").read_text())
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == name and node.value is not None:
            return ast.literal_eval(node.value)
    raise KeyError(f"tests/test_layers.py defines no literal {name}")


def _module_line(path: Path, limit: int = 140) -> str:
    """The first sentence of a module's docstring (what it is for), at most ``limit`` characters."""
    import ast

    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    text = " ".join(doc.split("\n\n")[0].split())
    sentence = SENTENCE_END.split(text, maxsplit=1)[0].rstrip(".:;, ")
    return sentence if len(sentence) <= limit else sentence[: limit - 3].rsplit(" ", 1)[0] + " ..."


def layers_table() -> str:
    """The layer map: every module of the house, top-down, by layer and folder (the library's folders in the order
    of the layer test's ``LIBRARY``, the foundation from its ``FOUNDATION``), each with its docstring's first
    sentence. Generated, so it names every module and cannot drift from the folders."""
    pkg = ROOT / "genEval"
    library = [str(f) for f in _test_constant("LIBRARY")]  # type: ignore[union-attr]
    foundation = sorted(str(m).split(".")[-1] for m in _test_constant("FOUNDATION"))  # type: ignore[union-attr]
    places = [("commands", "genEval", [pkg / "cli.py"]), ("commands", "genEval/commands", None)]
    places += [("library", f"genEval/{f}", None) for f in library]
    places += [("backends", d, None) for d in ("generators", "oracles", "genEval/classifiers", "genEval/data")]
    places += [("foundation", "genEval", [pkg / f"{m}.py" for m in foundation])]
    placed = {"cli", *foundation}
    top = [p for p in sorted(pkg.glob("*.py")) if p.stem not in placed]  # the package itself and old import paths
    places.insert(2, ("library", "genEval", top))
    rows = ["| layer | folder | module | what it is for |", "|---|---|---|---|"]
    for layer, folder, files in places:
        for path in files or sorted((ROOT / folder).rglob("*.py")):
            module = path.relative_to(ROOT / folder).as_posix()
            rows.append(f"| {layer} | `{folder}/` | `{module}` | {_cell(_module_line(path))} |")
    return "\n".join(rows)


def results_table() -> str:
    """Every benchmark result (``benchmarks/results/*/*.json``) as the page ``benchmarks/RESULTS.md`` shows it.

    ``benchmarks`` is a folder of the checkout, not an installed package, so its results module is loaded from its
    file (this hook also runs under MkDocs, whose import path need not hold the checkout)."""
    name = "benchmarks.harness.results"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "harness" / "results.py")
        sys.modules[name] = module = importlib.util.module_from_spec(spec)  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[name].page()


TABLES: dict[str, Callable[[], str]] = {
    "hooks": hooks_table,
    "routes": routes_table,
    "groups": groups_table,
    "layers": layers_table,
    "results": results_table,
}
#: Pages outside docs/ with generated tables, checked and rewritten with the docs (named relative to the checkout).
PAGES_BESIDE = (ROOT / "benchmarks" / "RESULTS.md",)


def regenerated(text: str) -> str:
    """``text`` with every generated table rewritten from the code (an unknown table name is an error)."""

    def fill(m: re.Match) -> str:
        name = m["name"]
        if name not in TABLES:
            raise KeyError(f"unknown generated table {name!r}; known: {', '.join(TABLES)}")
        return f"{m[1]}{TABLES[name]()}\n{m[4]}"

    return MARK.sub(fill, text)


def _pages(docs: Path) -> dict[str, Path]:
    """The pages with generated tables: ``docs``' pages by their name in it, and (for the project's docs) the pages
    beside them, by their path in the checkout."""
    pages = {str(p.relative_to(docs)): p for p in sorted(docs.rglob("*.md"))}
    return pages | ({str(p.relative_to(ROOT)): p for p in PAGES_BESIDE} if docs.resolve() == DOCS else {})


def stale(docs: Path = DOCS) -> list[str]:
    """The pages whose generated tables differ from what the code writes now."""
    return [name for name, p in _pages(docs).items() if regenerated(p.read_text()) != p.read_text()]


def write(docs: Path = DOCS) -> list[str]:
    """Rewrite the generated tables in place; the pages changed."""
    changed = stale(docs)
    pages = _pages(docs)
    for name in changed:
        pages[name].write_text(regenerated(pages[name].read_text()))
    return changed


def on_pre_build(config, **_) -> None:
    """MkDocs hook: stop the build when a generated table is stale (the docs would say what the code does not)."""
    from mkdocs.exceptions import PluginError

    pages = stale(Path(config["docs_dir"]))
    if pages:
        raise PluginError(
            f"generated tables in {', '.join(pages)} do not match the code; run `python docs/hooks.py --write`."
        )


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        print("\n".join(f"rewrote {p}" for p in write()) or "every generated table is current")
    elif sys.argv[1:] == ["--check"]:
        bad = stale()
        print("\n".join(f"stale: {p}" for p in bad) or "every generated table is current")
        sys.exit(1 if bad else 0)
    else:
        sys.exit("usage: python docs/hooks.py --write | --check")
