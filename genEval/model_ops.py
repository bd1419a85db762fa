"""What a model file's graph calls, and the calls genEval refuses before the file is loaded: a classifier needs no
file, no process and no network (docs/service.md, "The sandbox").

A TorchScript archive carries its code as TorchScript source (``code/**/*.py``), which ``torch.jit.load`` compiles and
whose ``__setstate__`` methods it runs while loading; a ``torch.export`` archive carries its graph as JSON
(``models/<name>.json``), plus two kinds of Python text torch evaluates: the sizes of dynamic dimensions (read back
with ``sympy.sympify``, an ``eval``) and guard expressions (compiled with ``exec`` into the module ``.module()``
returns, and run on every call). Before anything loads the file, :func:`refuse_unsafe_ops` reads both from the zip,
without running them, and refuses, naming what it found:

* an op that touches files, processes or the network: by name (:data:`DENIED_OPS`: ``aten::from_file`` maps any file,
  ``aten::save`` writes one, ``debugprims::load_tensor`` reads one, the RPC primitives reach other processes), by
  namespace (:data:`DENIED_NAMESPACES`: the distributed collectives) or by schema (any op with an argument named like
  a file or a path, so an op added to torch later is refused too);
* a TorchScript class that defines ``__setstate__`` (code run while loading) unless it is one of torch's own quantized
  modules (:data:`SETSTATE_ALLOWED`), and a C++ custom class (``__torch__.torch.classes``) outside
  :data:`CUSTOM_CLASSES_ALLOWED`;
* a torch.export size or guard expression that is not plain arithmetic on sizes (:func:`check_expression`: an AST
  allowlist; ``__import__('os')`` or ``open(...)`` in one would run when the program is loaded or called).

After loading (in the sandbox), :func:`refuse_loaded_ops` walks every method's inlined graph of a TorchScript module,
the ops themselves rather than their spelling. This is defence in depth: the sandbox (:mod:`genEval.sandbox`) is what
keeps a file from the machine; these checks keep a file that asks for the machine from ever being accepted.
:func:`check_model_file` runs both, and the checks of :func:`genEval.checkpoints.probe_model_file`, in a sandboxed
child (what the service's upload check and ``classifier=torchscript`` call).
"""

from __future__ import annotations

import ast
import functools
import json
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from genEval.checkpoints import (
    TORCH_EXPORT,
    TORCHSCRIPT,
    archive_kind,
    error_reason,
    probe_model_file,
)
from genEval.sandbox import Limits, out_of_memory, readable, run_isolated

#: Ops refused by name, with what they do.
DENIED_OPS = {
    "aten::from_file": "maps a file into a tensor (it reads, or with shared=True writes, any file)",
    "aten::save": "writes a file",
    "debugprims::load_tensor": "reads a file",
    "prim::rpc_async": "calls another process",
    "prim::rpc_sync": "calls another process",
    "prim::rpc_remote": "calls another process",
    "aten::to_here": "fetches a value from another process",
}
#: Op namespaces refused whole (collective communication and RPC reach other processes over the network).
DENIED_NAMESPACES = ("c10d", "_c10d_functional", "_c10d_functional_autograd", "rpc", "dist_rpc", "dist_autograd")
#: Argument names that make an op refused (an op that takes a file name touches files).
_FILE_ARGS = re.compile(r"^(file|filename|file_name|filepath|path|dirname|directory|url|uri|address|host)$")
#: TorchScript classes (by qualified-name prefix) that may define ``__setstate__``: torch's quantized modules.
SETSTATE_ALLOWED = ("__torch__.torch.ao.nn.quantized.", "__torch__.torch.nn.quantized.")
#: C++ custom classes a classifier may hold: quantized layers' packed weights.
CUSTOM_CLASSES_ALLOWED = (
    "quantized.LinearPackedParamsBase",
    "quantized.Conv2dPackedParamsBase",
    "quantized.Conv3dPackedParamsBase",
    "quantized.EmbeddingPackedParamsBase",
)
#: Names a torch.export size expression may use besides size symbols (torch's own sympy functions, sympy's basics).
SYMPY_NAMES = frozenset(
    "Symbol Integer Rational Float Max Min Abs Mod Eq Ne Lt Le Gt Ge And Or Not oo zoo nan true false True False "
    "floor ceiling sqrt FloorDiv ModularIndexing Where PythonMod CleanDiv CeilToInt FloorToInt CeilDiv LShift RShift "
    "PowByNatural FloatPow FloatTrueDiv IntTrueDiv IsNonOverlappingAndDenseIndicator TruncToFloat TruncToInt "
    "RoundToInt RoundDecimal ToFloat Identity".split()
)
#: Names and attributes a torch.export guard may use: the inputs (``L['x']``), their sizes and torch's math helpers.
GUARD_NAMES = frozenset({"L", "math", "inf", *SYMPY_NAMES})
GUARD_ATTRIBUTES = frozenset({"size", "stride", "storage_offset", "dim", "isnan", "isinf", "inf", "floor", "ceil"})
_NAME = re.compile(r"[A-Za-z_]\w{0,63}")  # a symbol's or an input's name, the only strings an expression holds
_SYMBOL = re.compile(r"^[a-z]{1,4}\d+$")  # s77, u0: torch's names for dynamic sizes
_EXPR_NODES = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Call, ast.keyword, ast.Name, ast.Load,
    ast.Constant, ast.Subscript, ast.Attribute, ast.operator, ast.unaryop, ast.boolop, ast.cmpop, ast.Tuple,
)  # fmt: skip


class UnsafeModel(ValueError):
    """A model file that asks for what a classifier never needs (the message names it and why it is refused)."""


@functools.lru_cache(maxsize=1)
def _file_ops() -> dict[str, str]:
    """Registered ops with an argument named like a file or a path (torch's own registry)."""
    import torch

    out = {}
    for schema in torch._C._jit_get_all_schemas():
        for arg in schema.arguments:
            if _FILE_ARGS.match(arg.name) and "str" in str(arg.type):
                out[schema.name] = f"takes a {arg.name} (it touches files or the network)"
                break
    return out


def why_denied(op: str) -> str | None:
    """Why the op ``ns::name`` (an overload suffix ``.out`` ignored) is refused; None when a classifier may call it."""
    base = op.split(".")[0]
    namespace = base.split("::")[0]
    if base in DENIED_OPS:
        return DENIED_OPS[base]
    if namespace in DENIED_NAMESPACES:
        return "communicates with other processes"
    return _file_ops().get(base)


def _refuse(what: str, why: str) -> UnsafeModel:
    return UnsafeModel(
        f"the model file {what}, which {why}: a classifier needs no file, process or network, so genEval refuses "
        "it. Save the model's forward pass alone (no file reads or writes, no custom __setstate__, no RPC)."
    )


# ------------------------------------------------------------------------------------------------- TorchScript
def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _op_of(name: str) -> str | None:
    """The op a dotted name of TorchScript source calls: ``torch.from_file`` -> ``aten::from_file``,
    ``ops.ns.f`` / ``torch.ops.ns.f`` -> ``ns::f``; None for anything else."""
    parts = name.split(".")
    if parts[:2] == ["torch", "ops"]:
        parts = parts[1:]
    if parts[0] == "ops" and len(parts) >= 3:
        return f"{parts[1]}::{parts[2]}"
    if parts[0] == "torch" and len(parts) == 2:
        return f"aten::{parts[1]}"
    return None


def _code_files(zf: zipfile.ZipFile) -> Iterator[tuple[str, str]]:
    """(qualified module name, source) of every TorchScript source file in an archive."""
    for info in zf.infolist():
        inner = PurePosixPath(info.filename).parts[1:]
        if len(inner) >= 2 and inner[0] == "code" and info.filename.endswith(".py"):
            yield ".".join(inner[1:])[: -len(".py")], zf.read(info).decode("utf-8", "replace")


def scan_torchscript(path: str | Path) -> None:
    """Refuse a TorchScript archive whose source calls a denied op (named first), refers to a custom class outside the
    allowlist or defines ``__setstate__`` outside it (:class:`UnsafeModel`); reads the source, runs none of it."""
    ops: list[tuple[str, str]] = []
    classes: list[str] = []
    setstate: list[str] = []
    with zipfile.ZipFile(path) as zf:
        for module, source in _code_files(zf):
            try:
                tree = ast.parse(source)
            except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
                raise UnsafeModel(f"the model file's TorchScript source {module} does not parse ({err}).") from None
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
                    if "__setstate__" in methods and not f"{module}.{node.name}".startswith(SETSTATE_ALLOWED):
                        setstate.append(f"{module}.{node.name}")
                name = _dotted(node) if isinstance(node, ast.Attribute) else None
                if name is not None and ".torch.classes." in f".{name}.":
                    if (cls := name.split(".torch.classes.", 1)[1]) not in CUSTOM_CLASSES_ALLOWED:
                        classes.append(cls)
                elif name is not None and (op := _op_of(name)) is not None and why_denied(op) is not None:
                    ops.append((op, module))
    if ops:
        raise _refuse(f"calls {ops[0][0]} (in {ops[0][1]})", why_denied(ops[0][0]))
    if classes:
        raise _refuse(f"uses the custom class {classes[0]}", "is outside genEval's allowlist of custom classes")
    if setstate:
        raise _refuse(f"defines {setstate[0]}.__setstate__", "runs while the file loads and can do anything")


def _graph_ops(graph: Any) -> Iterator[str]:
    for node in graph.nodes():
        yield node.kind()
        for block in node.blocks():
            yield from _graph_ops(block)


def refuse_loaded_ops(module: Any) -> None:
    """Refuse a loaded TorchScript module any of whose methods (inlined, every block) calls a denied op."""
    for name, sub in module.named_modules():
        for method in sub._c._method_names():
            for op in _graph_ops(sub._c._get_method(method).inlined_graph):
                if (why := why_denied(op)) is not None:
                    where = f"{name}.{method}" if name else method
                    raise _refuse(f"calls {op} (in {where})", why)


# ------------------------------------------------------------------------------------------------- torch.export
def check_expression(text: str, guard: bool) -> None:
    """Refuse a torch.export size expression (``guard`` False, read by ``sympy.sympify``) or guard (``guard`` True,
    compiled by ``exec``) that is not plain arithmetic: only numbers, size symbols or ``L[...]`` inputs, comparisons,
    the allowed function names and (guards) size attributes; never an attribute of anything else, a dunder, a string
    but a symbol's or an input's name, a lambda or a comprehension."""
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise _refuse(f"holds an expression that is not Python ({text[:80]!r})", "torch would evaluate") from None
    for node in ast.walk(tree):
        bad = None
        if not isinstance(node, _EXPR_NODES):
            bad = type(node).__name__
        elif isinstance(node, ast.Name) and node.id not in (GUARD_NAMES if guard else SYMPY_NAMES):
            bad = None if (not guard and _SYMBOL.match(node.id)) else f"the name {node.id}"
        elif isinstance(node, ast.Attribute) and (not guard or node.attr not in GUARD_ATTRIBUTES):
            bad = f"the attribute {node.attr}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and not _NAME.fullmatch(node.value):
            bad = "a string"
        elif isinstance(node, ast.Subscript) and not guard:
            bad = "an index"
        if bad is not None:
            what = "a guard" if guard else "a size expression"
            raise _refuse(f"holds {what} using {bad} ({text[:80]!r})", "torch would run when it loads or calls it")


def _walk_json(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield k, v
            yield from _walk_json(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk_json(v)


def scan_exported(path: str | Path) -> None:
    """Refuse a torch.export archive whose graph calls a denied op, or whose size expressions or guards are more than
    arithmetic (:class:`UnsafeModel`); reads the JSON, evaluates none of it."""
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            inner = PurePosixPath(info.filename).parts[1:]
            if not (len(inner) == 2 and inner[0] == "models" and inner[1].endswith(".json")):
                continue
            try:
                program = json.loads(zf.read(info))
            except ValueError as err:
                raise UnsafeModel(f"the model file's program {inner[1]} is not valid JSON ({err}).") from None
            for key, value in _walk_json(program):
                if key == "target" and isinstance(value, str) and value.startswith("torch.ops."):
                    parts = value.split(".")
                    op = f"{parts[2]}::{parts[3]}" if len(parts) >= 4 else value
                    if (why := why_denied(op)) is not None:
                        raise _refuse(f"calls {op}", why)
                elif key == "expr_str" and isinstance(value, str):
                    check_expression(value, guard=False)
                elif key == "guards_code" and isinstance(value, list):
                    for guard in value:
                        check_expression(str(guard), guard=True)
            for name in (program.get("range_constraints") or {}) if isinstance(program, dict) else ():
                check_expression(str(name), guard=False)


def refuse_unsafe_ops(path: str | Path, kind: str) -> None:
    """Refuse a ``torchscript`` or ``torch.export`` model file that asks for files, processes or the network, before
    it is loaded (see the module docstring); other kinds hold no code."""
    if kind == TORCHSCRIPT:
        scan_torchscript(path)
    elif kind == TORCH_EXPORT:
        scan_exported(path)


# ------------------------------------------------------------------------------------------------- the check
def probe(path: str, kind: str | None = None) -> dict:
    """:func:`genEval.checkpoints.probe_model_file` with the op checks around it: the source or graph before loading,
    and a TorchScript module's loaded graphs after. Run only in a sandbox (:func:`check_model_file`)."""
    import warnings

    import torch

    kind, answer = archive_kind(path, kind)
    if answer is not None:
        return answer
    refuse_unsafe_ops(path, kind)
    if kind != TORCHSCRIPT:
        return probe_model_file(path, kind)
    with warnings.catch_warnings():  # torch >= 2.9 deprecates jit in favour of export; jit still works
        warnings.simplefilter("ignore", FutureWarning)
        try:
            module = torch.jit.load(path, map_location="cpu")
        except Exception as err:  # torch raises RuntimeError and friends with the reason
            if out_of_memory(err):
                raise MemoryError(str(err)) from None  # the sandbox names the memory limit and its setting
            raise ValueError(f"'{path}' is not a loadable TorchScript archive ({error_reason(err, 200)}).") from None
    refuse_loaded_ops(module)
    return {"kind": kind, "forward": hasattr(module, "forward")}


def check_model_file(
    path: str | Path,
    kind: str | None = None,
    limits: Limits | None = None,
    what: str = "the model file's check",
    isolation: str = "auto",
    hidden: tuple[str, ...] = (),
) -> dict:
    """:func:`probe` in a sandboxed child that sees the file alone, read-only (:func:`genEval.sandbox.run_isolated`;
    ``limits`` default 60 s and 4 GiB; ``isolation`` and ``hidden`` as there). Raises
    :class:`genEval.sandbox.LimitExceeded` or :class:`genEval.sandbox.CheckFailed` (ValueErrors) with the reason; an
    :class:`UnsafeModel` comes back as a CheckFailed of kind ``UnsafeModel``."""
    with readable(path) as seen:
        answer = run_isolated(
            "genEval.model_ops:probe", str(seen), kind, limits=limits or Limits(), what=what, isolation=isolation,
            read_only=(str(seen),), hidden=hidden,
        )  # fmt: skip
    if seen != Path(path):  # an answer that names the private copy names the user's file instead
        answer = {k: v.replace(str(seen), str(path)) if isinstance(v, str) else v for k, v in answer.items()}
    return answer
