"""What an isolated child of :mod:`genEval.sandbox` sees: its :class:`View` (the files it is given) and bubblewrap's
mount options for it (:func:`bwrap_args`): the system and the interpreter read-only, its import path
(:func:`import_roots`), the view's own paths, a hidden path inside any of them covered, a scratch ``/tmp``. Split from
:mod:`genEval.sandbox` (which starts and limits the child) to keep each module one job; bubblewrap itself does the
isolating, this only lists what to mount."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class View:
    """What an isolated child sees besides the system, the interpreter and its import path: ``read_only`` and
    ``writable`` paths (each at its own path, so configs need no rewriting), device nodes (``devices``, e.g. a
    GPU's), and a scratch ``/tmp`` of ``scratch_mb`` MiB. ``hidden``: paths it must never see (the service's home): an
    import-path entry inside or above one is left out, and so is any given path above one (a path *inside* one, such
    as an upload, is given on purpose)."""

    read_only: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    scratch_mb: int = 256


def _within(path: str, other: str) -> bool:
    """``path`` is ``other`` or inside it."""
    return path == other or path.startswith(other.rstrip("/") + "/")


def _implicit_cwd() -> str | None:
    """The working folder when Python put it first on ``sys.path`` itself (``python -m``, ``-c``, the REPL; not
    when ``PYTHONPATH`` names it too), else None."""
    if not sys.path or sys.flags.safe_path:
        return None
    cwd, first = os.getcwd(), os.path.abspath(sys.path[0] or os.curdir)
    named = {os.path.abspath(p or os.curdir) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    return cwd if first == cwd and cwd not in named else None


def import_roots(hidden: Sequence[str] = ()) -> list[str]:
    """The directories a child imports from, in this process's order: its ``sys.path`` (that exist), then the folders
    holding genEval's own packages (an editable install finds them through a hook, not a path), minus any inside a
    ``hidden`` path (a service started in its home has that home on its path; a hidden path inside an entry is
    covered by the sandbox instead), and minus the working folder that ``python -m``/``-c`` put first on the path
    (the folder a service was started in is not code the child needs: the child would see its files)."""
    import importlib.util

    out: list[str] = []
    implicit = _implicit_cwd()
    for entry in sys.path:
        p = os.path.abspath(entry or os.curdir)
        if os.path.isdir(p) and p not in out and p != implicit:
            out.append(p)
    for name in ("genEval", "generators", "oracles"):
        with contextlib.suppress(ImportError, ValueError):
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.origin:
                top = str(Path(spec.origin).resolve().parents[1])
                if top not in out:
                    out.append(top)
    hide = [os.path.abspath(h) for h in hidden]
    return [p for p in out if p != "/" and not any(_within(p, h) for h in hide)]


def _interpreter_dirs(python: str) -> list[str]:
    """The interpreter's installation (a virtual environment and the Python it was made from)."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    dirs |= {str(Path(os.path.abspath(python)).parents[1]), str(Path(os.path.realpath(python)).parents[1])}
    return sorted(d for d in dirs if d and d != "/" and os.path.isdir(d))


def _outermost(paths: Iterable[str]) -> list[str]:
    """``paths`` without those inside another one (binding the outer one shows them), shortest first."""
    out: list[str] = []
    for p in sorted(set(paths), key=lambda s: (s.count("/"), s)):
        if not any(_within(p, o) for o in out):
            out.append(p)
    return out


def bwrap_args(view: View, roots: Sequence[str], python: str) -> list[str]:
    """bubblewrap's options for ``view`` (see the module docstring): the system, the interpreter and ``roots``
    read-only, a hidden path inside them covered by an empty tmpfs, the view's own paths (one inside a hidden path,
    such as an upload, after the cover), a scratch ``/tmp``, and every namespace but the user's (:func:`_command`)."""
    args = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    args += ["--die-with-parent", "--new-session", "--as-pid-1", "--proc", "/proc", "--dev", "/dev"]
    args += ["--size", str(int(view.scratch_mb) << 20), "--perms", "1777", "--tmpfs", "/tmp"]
    system = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
    for name in system:
        top = Path("/") / name
        if top.is_symlink():
            args += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            args += ["--ro-bind", str(top), str(top)]
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives"):
        args += ["--ro-bind-try", etc, etc]  # how the dynamic loader finds libraries: no secrets
    hide = [os.path.abspath(h) for h in view.hidden]
    given = [os.path.abspath(p) for p in (*view.read_only, *view.writable)]
    if "/" in given:
        raise ValueError("a sandbox may not be given the whole filesystem (/).")
    inside = [p for p in (os.path.abspath(q) for q in view.read_only) if any(_within(p, h) for h in hide)]
    outer = [*_interpreter_dirs(python), *roots, *(p for p in map(os.path.abspath, view.read_only) if p not in inside)]
    outer = [p for p in _outermost(q for q in outer if os.path.exists(q)) if not any(p == h for h in hide)]
    outer = [p for p in outer if not any(_within(p, "/" + n) for n in system)]
    covers = [h for h in hide if os.path.exists(h) and any(_within(h, b) for b in outer)]
    rw = _outermost(os.path.abspath(p) for p in view.writable)

    def missing(d: str) -> bool:  # a directory the sandbox does not have yet (bubblewrap makes it 0700 otherwise)
        return not any(_within(d, b) for b in outer) or any(_within(d, c) for c in covers)

    def dirs(paths: Iterable[str], made: set[str]) -> list[str]:
        out = []
        for d in sorted({str(a) for p in paths for a in Path(p).parents}, key=lambda s: (s.count("/"), s)):
            if d not in ("/", "/tmp") and d not in made and missing(d) and not any(d == c for c in covers):
                out += ["--perms", "0755", "--dir", d]
                made.add(d)
        return out

    made: set[str] = set()
    args += dirs(outer, made)
    for p in outer:
        args += ["--ro-bind", p, p]
    for c in covers:  # a hidden folder inside what the child sees: an empty tmpfs in its place (read-only below)
        args += ["--perms", "0755", "--tmpfs", c] if os.path.isdir(c) else ["--ro-bind", "/dev/null", c]
    args += dirs([*inside, *rw], made)
    for p in inside:
        args += ["--ro-bind", p, p]
    for p in rw:
        args += ["--bind", p, p]
    for c in covers:
        args += ["--remount-ro", c] if os.path.isdir(c) else []
    for dev in view.devices:
        args += ["--dev-bind-try", dev, dev]
    return [*args, "--chdir", "/tmp"]
