"""Untrusted model files are opened, and evaluated, in a child process walled off from the machine: a filesystem of
its own, an unprivileged user, no network, and limits set before any of its Python runs.

``torch.jit.load`` runs a TorchScript archive's ``__setstate__`` methods, and TorchScript can call ATen ops such as
``aten::from_file`` (map any file) and ``aten::save`` (write one). Limits alone (docs/service.md) left such an archive
the server's files (an attack: it read the database password, and wrote a ``.pth`` file into site-packages that the next
interpreter ran). A child started here (:func:`launch`; :func:`run_isolated` for a check, the service worker for an
evaluation) is therefore:

* **isolated** with `bubblewrap <https://github.com/containers/bubblewrap>`_ (Debian ``bubblewrap``,
  ``/usr/bin/bwrap``), when it works on this machine (:func:`isolation_problem`). The child sees ``/usr``, the
  interpreter and the directories it imports from, read-only; the files it is given (:class:`View`: the model file
  read-only, a run directory writable) and a private scratch ``/tmp`` (a size-limited tmpfs); nothing else (not the
  service's home, its database, other jobs' files, ``/etc`` or ``/root``). It runs as ``nobody`` (uid 65534, no
  capabilities: as root, bubblewrap builds the sandbox and util-linux ``setpriv`` drops to the real uid 65534; as
  another user, a user namespace maps it), in new pid, ipc, uts and network namespaces (no interface but a
  loopback), in a session of its own, and dies with its parent (``--die-with-parent``, its death signal armed again
  after ``setpriv``, which clears it, and a lifeline pipe); :func:`kill` kills it itself, not only bubblewrap.
  bubblewrap is the well-kept tool for exactly this (Flatpak's sandbox; a few hundred lines of C, no daemon, no
  privileges needed), where Landlock needs a recent kernel and covers only the filesystem, and a seccomp filter
  alone none of it.
* **started clean**: ``python -I -S`` (no ``PYTHON*`` variables, no user site, no ``site`` module, so no ``.pth``
  file or ``sitecustomize`` runs), its import path given explicitly (:func:`import_roots`), its environment cut to
  the variables a job needs (:func:`child_env`: no tokens, passwords or proxies).
* **limited before it runs**: util-linux ``prlimit`` sets ``RLIMIT_DATA`` (the heap and anonymous mappings, where
  torch allocates; ``RLIMIT_AS`` would also count the ~2 GB of address space torch's libraries map), ``RLIMIT_CPU``
  (a backstop to the parent's clock), ``RLIMIT_FSIZE`` (a check's log) and no core file, then execs the rest; the
  child also keeps an audit hook refusing every socket Python code would open.

Where bubblewrap is not there or cannot create namespaces (a container without user namespaces, macOS),
``isolation="auto"`` runs the child with the limits alone, as before: the command layer then refuses untrusted
TorchScript and torch.export uploads unless the admin opts in (``geneval serve allow_unsandboxed_models=true``).
``isolation="bwrap"`` insists (:class:`IsolationUnavailable`), ``"none"`` never isolates. A child that is itself
in a sandbox (``GENEVAL_SANDBOXED``) runs the checks it starts without another one.

The parent of a check waits on its own clock and kills the child's whole process group when the time limit passes.
The answer comes back as one JSON line on a pipe of its own (what the checked code prints goes to a bounded log,
whose last lines name a crash). :func:`stop_all` kills every running child at once (``geneval serve`` on SIGINT).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genEval.sandbox_mounts import View, bwrap_args, import_roots

log = logging.getLogger(__name__)

#: The most a check's log (its stdout and stderr) may grow (RLIMIT_FSIZE).
LOG_BYTES = 1 << 20
#: How a child may be isolated (see the module docstring).
ISOLATION = ("auto", "bwrap", "none")
#: The smallest memory limit (MiB): set before the child's interpreter starts, it counts torch's import (~800 MiB).
MIN_MEMORY_MB = 1024
#: The user an isolated child runs as (``nobody``).
NOBODY = 65534
#: Set in an isolated child's environment: the checks it starts need no sandbox of their own.
INSIDE = "GENEVAL_SANDBOXED"
#: The interpreter children run (a test points it at a throwaway virtual environment's).
PYTHON = sys.executable
#: What a child runs first: its import path (argv[1], JSON), then ``module:function`` (argv[2]) with the rest.
BOOT = (
    "import sys, json, importlib; sys.path[:0] = json.loads(sys.argv[1]); m, _, f = sys.argv[2].partition(':'); "
    "getattr(importlib.import_module(m), f)(sys.argv[3:])"
)
#: Environment variables a child gets (by prefix), unless their name says they hold a secret.
_ENV_KEEP = ("GENEVAL_", "HF_", "TORCH", "CUDA_", "NVIDIA_", "OMP_", "MKL_", "OPENBLAS_", "LC_", "LANG", "TZ", "PATH")
_ENV_SECRET = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "KEY", "PROXY", "AUTH")
_RUNNING: set[subprocess.Popen] = set()
_RUNNING_LOCK = threading.Lock()
_STOPPING = threading.Event()
_CLONE_NEWUSER, _CLONE_NEWNET, _PR_SET_PDEATHSIG = 0x10000000, 0x40000000, 1
#: How torch's allocator, the C++ runtime and Python say the memory ran out.
_OUT_OF_MEMORY = (
    "can't allocate memory",
    "cannot allocate memory",
    "not enough memory",
    "std::bad_alloc",
    "out of memory",
)


@dataclass(frozen=True)
class Limits:
    """A child's limits: wall-clock seconds, MiB of memory (None: none), and the names of the settings that raise
    them (for the messages). ``cpu``: also limit its CPU time to the wall-clock limit (a check runs one thread; an
    evaluation does not); ``file_bytes``: the largest file it may write (a check's log; None: no limit)."""

    timeout_s: float = 60.0
    memory_mb: int | None = 4096
    timeout_setting: str = "check_timeout_s"
    memory_setting: str = "check_memory_mb"
    cpu: bool = True
    file_bytes: int | None = LOG_BYTES

    def __post_init__(self) -> None:
        if not float(self.timeout_s) > 0:
            raise ValueError(f"{self.timeout_setting} must be a positive number of seconds, got {self.timeout_s!r}.")
        if self.memory_mb is not None and not int(self.memory_mb) >= MIN_MEMORY_MB:
            raise ValueError(
                f"{self.memory_setting} must be at least {MIN_MEMORY_MB} (MiB: the limit holds from the child's first "
                f"instruction, and importing torch alone maps ~800 MiB of data), got {self.memory_mb!r}."
            )


class CheckFailed(ValueError):
    """The check function raised: the message is its own (``kind`` its exception type)."""

    def __init__(self, message: str, kind: str = "ValueError") -> None:
        super().__init__(message)
        self.kind = kind


class LimitExceeded(CheckFailed):
    """The check ran past its time limit, or its memory limit, and was stopped (``limit``: ``"time"`` or
    ``"memory"``); the message names the limit and the setting that raises it."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message, "LimitExceeded")
        self.limit = limit


class CheckStopped(RuntimeError):
    """The check was killed by :func:`stop_all` (the process is shutting down)."""


class IsolationUnavailable(RuntimeError):
    """``isolation="bwrap"`` was asked for where bubblewrap cannot isolate a child (the message says why)."""


def stop_all() -> int:
    """Kill every running child (and every one started from now on); returns how many were running."""
    _STOPPING.set()
    with _RUNNING_LOCK:
        procs = list(_RUNNING)
    for proc in procs:
        kill(proc)
    return len(procs)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux ``/proc``; an isolated child runs in a session and pid namespace of its own,
    out of its launcher's process group). Empty where there is no ``/proc``."""
    parents: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    with open(f"/proc/{entry}/stat", "rb") as fh:
                        parents.setdefault(int(fh.read().rsplit(b")", 1)[1].split()[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL a child started by :func:`launch` and everything it started: its process group, and every process
    below it (an isolated child leads a session of its own inside bubblewrap; a SIGKILL from outside its pid
    namespace reaches it even as that namespace's pid 1)."""
    for pid in _descendants(proc.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


# ------------------------------------------------------------------------------------------------- isolation
def _command(view: View | None, hidden_roots: Sequence[str], limits: Limits) -> list[str]:
    """The launcher in front of ``python -I -S``: prlimit, then (``view`` given) bubblewrap and the drop to nobody."""
    cmd: list[str] = []
    prlimit = shutil.which("prlimit")
    if prlimit:
        cmd = [prlimit, "--core=0"]
        if limits.memory_mb is not None:
            cmd.append(f"--data={int(limits.memory_mb) << 20}")
        if limits.cpu:
            cmd.append(f"--cpu={int(limits.timeout_s) + 1}:{int(limits.timeout_s) + 2}")
        if limits.file_bytes is not None:
            cmd.append(f"--fsize={int(limits.file_bytes)}")
        cmd.append("--")
    if view is None:
        return cmd
    cmd += [shutil.which("bwrap") or "bwrap", *bwrap_args(view, hidden_roots, PYTHON)]
    if os.geteuid() == 0:  # build the sandbox as root, then become the real, capability-less uid 65534
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--", shutil.which("setpriv") or "setpriv"]
        cmd += [f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all"]
        cmd += ["--bounding-set=-all", "--no-new-privs"]
    else:  # a user namespace maps this user to uid 65534 inside, without capabilities
        cmd += ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY)]
    return [*cmd, "--"]


def child_env(isolated: bool, extra: dict[str, str | None] | None = None) -> dict[str, str]:
    """A child's environment: this one's variables a job may need (:data:`_ENV_KEEP`, never one named like a secret),
    no GPU unless ``extra`` gives one, offline hubs; an isolated child's home and temp are its scratch ``/tmp``.
    ``extra`` comes last; a None in it leaves that variable out."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k.upper().startswith(_ENV_KEEP) and not any(s in k.upper() for s in _ENV_SECRET)
    }
    env |= {"HF_HUB_OFFLINE": "1", "GENEVAL_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1", "CUDA_VISIBLE_DEVICES": ""}
    env.setdefault("PATH", "/usr/bin:/bin")
    if isolated:
        env |= {"HOME": "/tmp", "TMPDIR": "/tmp", "USER": "nobody", "LOGNAME": "nobody", INSIDE: "1"}
    else:
        env |= {k: os.environ[k] for k in ("HOME", "TMPDIR", "USER", "LOGNAME") if k in os.environ}
    return {k: v for k, v in (env | (extra or {})).items() if v is not None}


@functools.cache
def _probe(bwrap: str | None, euid: int) -> str | None:
    if bwrap is None:
        return "bubblewrap is not installed (Debian: apt-get install bubblewrap)"
    if euid == 0 and shutil.which("setpriv") is None:
        return "util-linux's setpriv is not installed (it drops a root sandbox to uid 65534)"
    cmd = [*_command(View(), import_roots(), Limits(60, None)), PYTHON, "-I", "-S", "-c", "import sys"]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=60, env=child_env(True), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"bubblewrap did not start: {err}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"bubblewrap cannot make a sandbox here ({(said or ['exit code ' + str(done.returncode)])[-1][:300]})"
    return None


def isolation_problem() -> str | None:
    """Why an isolated child cannot be started on this machine (None: it can). Tried once per process (a child
    running ``import sys`` through the whole launcher)."""
    return _probe(shutil.which("bwrap"), os.geteuid())


def isolates(isolation: str) -> bool:
    """Whether a child started with ``isolation`` (:data:`ISOLATION`) is isolated here: ``bwrap`` (or raises
    :class:`IsolationUnavailable` naming the problem), ``auto`` when bubblewrap works and this process is not in a
    sandbox already, ``none`` never."""
    if isolation not in ISOLATION:
        raise ValueError(f"isolation must be one of {', '.join(ISOLATION)}, got {isolation!r}.")
    if isolation == "none" or (isolation == "auto" and os.environ.get(INSIDE)):
        return False
    problem = isolation_problem()
    if problem is not None and isolation == "bwrap":
        raise IsolationUnavailable(f"isolation=bwrap, but {problem}.")
    return problem is None


def _others_can_read(path: Path) -> bool:
    """Whether a user with no rights of its own (uid 65534) could open ``path``: the file world-readable, and every
    folder above it world-searchable."""
    p = path.absolute()
    return bool(p.stat().st_mode & 0o004) and all(d.stat().st_mode & 0o001 for d in p.parents)


@contextlib.contextmanager
def readable(path: str | Path) -> Iterator[Path]:
    """``path``, or where this process runs as root and others cannot read the file (it is not world-readable, or a
    folder above it is not world-searchable, such as a 0700 working folder whose path the child is given: the
    sandbox's uid 65534 could not open it), a private copy it can read, removed after; a check's error names
    ``path``, not the copy."""
    p = Path(path)
    if os.geteuid() != 0 or not p.is_file() or _others_can_read(p):
        yield p
        return
    with tempfile.TemporaryDirectory(prefix="geneval-check-") as tmp:
        copy = Path(tmp) / p.name
        shutil.copyfile(p, copy)
        os.chmod(copy, 0o644)
        try:
            yield copy
        except CheckFailed as err:  # the child names the file it opened: name the user's file instead
            err.args = (str(err).replace(str(copy), str(path)),)
            raise


def give_to_sandbox(path: str | Path) -> None:
    """Make a directory (and what it holds) writable for an isolated child: as root, owned by uid 65534 (the child's
    real uid); otherwise the user namespace maps this user to it already."""
    if os.geteuid() != 0:
        return
    for root, dirs, files in os.walk(path):
        for name in (root, *(os.path.join(root, n) for n in (*dirs, *files))):
            with contextlib.suppress(FileNotFoundError):
                os.lchown(name, NOBODY, NOBODY)


def launch(
    entry: str,
    args: Sequence[str],
    *,
    limits: Limits,
    view: View | None,
    env: dict[str, str | None] | None = None,
    track: bool = True,
    **popen: Any,
) -> subprocess.Popen:
    """Start ``entry`` (``"module:function"``, called with the list ``args``) in a fresh ``python -I -S`` behind the
    launcher (prlimit; bubblewrap when ``view`` is given), in a process group of its own, tracked for
    :func:`stop_all` unless ``track`` is False (an evaluation, which its worker stops and hands back itself).
    ``popen``: ``stdout``, ``stderr``, ``pass_fds``..."""
    if _STOPPING.is_set():
        raise CheckStopped("no child is started: the process is shutting down.")
    hidden = view.hidden if view is not None else ()
    roots = import_roots(hidden)
    cmd = [*_command(view, roots, limits), PYTHON, "-I", "-S", "-c", BOOT, json.dumps(roots), entry, *args]
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, env=child_env(view is not None, env), start_new_session=True, **popen
    )
    if track:
        with _RUNNING_LOCK:
            _RUNNING.add(proc)
    return proc


def forget(proc: subprocess.Popen) -> None:
    """Stop tracking a child that has ended."""
    with _RUNNING_LOCK:
        _RUNNING.discard(proc)


# ------------------------------------------------------------------------------------------------- a check
def run_isolated(
    target: str,
    *args: Any,
    limits: Limits = Limits(),
    what: str = "the check",
    isolation: str = "auto",
    read_only: Sequence[str | Path] = (),
    hidden: Sequence[str | Path] = (),
) -> Any:
    """Call ``target`` (``"package.module:function"``) with the JSON-able ``args`` in a sandboxed child (see the module
    docstring; ``read_only``: the files it may read, e.g. the model file; ``hidden``: what it must not see) and return
    what it returned (JSON-able). Raises :class:`LimitExceeded` past a limit, :class:`CheckFailed` with the function's
    own message when it raised, :class:`CheckStopped` when :func:`stop_all` ended it; ``what`` names the check in
    those messages ("the model file's check")."""
    if _STOPPING.is_set():
        raise CheckStopped(f"{what} was not started: the process is shutting down.")
    isolated = isolates(isolation)
    view = View(tuple(map(str, read_only)), hidden=tuple(map(str, hidden))) if isolated else None
    read, write = os.pipe()
    held, life = os.pipe()  # the child's lifeline: this process holds its write end until the check has ended
    argv = [str(write), "0" if isolated else str(os.getpid()), target, json.dumps(list(args))]
    argv += [str(float(limits.timeout_s)), str(limits.memory_mb or 0), "1" if shutil.which("prlimit") else "0"]
    argv.append(str(held))
    extra = {k: "1" for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    with tempfile.TemporaryFile() as out:
        try:
            proc = launch(
                "genEval.sandbox:_child", argv, limits=limits, view=view, env=extra, stdout=out, stderr=out,
                pass_fds=(write, held),
            )  # fmt: skip
        except BaseException:
            os.close(life)
            os.close(read)
            raise
        finally:
            os.close(write)
            os.close(held)
        try:
            answer, timed_out = _collect(proc, read, float(limits.timeout_s))
        finally:
            forget(proc)
            os.close(read)
            os.close(life)
        out.seek(max(0, out.seek(0, os.SEEK_END) - 2000))
        tail = out.read().decode("utf-8", "replace")
    return _answer(answer, timed_out, proc.returncode, tail, limits, what)


def _collect(proc: subprocess.Popen, read: int, timeout_s: float) -> tuple[bytes, bool]:
    """The child's answer (all it wrote on the pipe) and whether it ran out of time (then it was killed)."""
    deadline = time.monotonic() + timeout_s
    chunks = []
    os.set_blocking(read, False)
    while True:
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(read, 65536):
                chunks.append(chunk)
        if proc.poll() is not None:
            with contextlib.suppress(BlockingIOError):
                while chunk := os.read(read, 65536):
                    chunks.append(chunk)
            return b"".join(chunks), False
        if time.monotonic() >= deadline:
            kill(proc)
            proc.wait()
            return b"", True
        time.sleep(0.02)


def _answer(raw: bytes, timed_out: bool, code: int | None, tail: str, limits: Limits, what: str) -> Any:
    if timed_out:
        raise LimitExceeded(
            f"{what} ran past its time limit of {limits.timeout_s:g} s and was stopped (setting "
            f"{limits.timeout_setting}); a model file that loads in plain code takes seconds.",
            "time",
        )
    try:
        answer = json.loads(raw.decode("utf-8").strip().splitlines()[-1])
    except (ValueError, IndexError, UnicodeDecodeError):
        answer = None
    if _STOPPING.is_set() and answer is None:
        raise CheckStopped(f"{what} was stopped: the process is shutting down.")
    if isinstance(answer, dict) and "ok" in answer:
        return answer["ok"]
    if (isinstance(answer, dict) and answer.get("limit") == "memory") or any(m in tail.lower() for m in _OUT_OF_MEMORY):
        raise LimitExceeded(
            f"{what} ran out of its memory limit of {limits.memory_mb} MiB and was stopped (setting "
            f"{limits.memory_setting}).",
            "memory",
        )
    if isinstance(answer, dict) and "error" in answer:
        raise CheckFailed(str(answer.get("message", "")), str(answer["error"]))
    how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
    last = next((ln.strip() for ln in reversed(tail.splitlines()) if ln.strip()), "")
    raise CheckFailed(
        f"{what} crashed ({how}) without an answer"
        + (f": {last[:300]}" if last else "")
        + f". A crash can also mean the memory limit of {limits.memory_mb} MiB ({limits.memory_setting}).",
        "Crashed",
    )


# ------------------------------------------------------------------------------------------------- the child
def die_with_parent(parent_pid: int, lifeline: int | None = None) -> None:
    """End this process when its parent does (Linux ``PR_SET_PDEATHSIG``; elsewhere a thread watching for
    re-parenting), so that a killed parent leaves no orphan behind. ``parent_pid`` 0: an isolated child, whose
    parent (bubblewrap) is outside its pid namespace: the death signal is armed here again (``setpriv`` changing the
    uid cleared bubblewrap's), and ``lifeline``, the read end of a pipe only the process that started it holds, ends
    this one when it reads end-of-file (that process died, whatever happened to bubblewrap)."""
    if lifeline is not None:

        def hold() -> None:
            with contextlib.suppress(OSError):
                while os.read(lifeline, 1):
                    pass
            os._exit(1)

        threading.Thread(target=hold, name="geneval-lifeline", daemon=True).start()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        if parent_pid <= 0:
            return

        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()
    if parent_pid > 0 and os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(1)


def no_network() -> str:
    """Cut this process off the network: a namespace of its own where the kernel allows (then it has no interface
    but a down loopback), and an audit hook refusing sockets either way. Returns which applied."""
    how = "audit hook"
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) == 0:
            how = "network namespace and audit hook"

    def refuse(event: str, _args: tuple) -> None:
        if event.startswith("socket.") and event != "socket.gethostname":
            raise PermissionError(f"no network in a model file's check or evaluation ({event})")

    sys.addaudithook(refuse)
    return how


def limit(memory_mb: int | None, cpu_s: float | None, file_bytes: int | None = LOG_BYTES) -> None:
    """Set this process's limits (what prlimit does before a child starts, where prlimit is missing)."""
    if memory_mb:
        mem = int(memory_mb) << 20
        resource.setrlimit(resource.RLIMIT_DATA, (mem, mem))
    if cpu_s is not None:
        cpu = int(cpu_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if file_bytes is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))


def out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` says the memory ran out (a MemoryError, or torch's allocator's words for it)."""
    return isinstance(err, MemoryError) or any(m in str(err).lower() for m in _OUT_OF_MEMORY)


def _child(argv: list[str]) -> None:
    fd, parent, target, args = int(argv[0]), int(argv[1]), argv[2], json.loads(argv[3])
    timeout_s, memory_mb, launched = float(argv[4]), int(argv[5]), argv[6] == "1"
    die_with_parent(parent, int(argv[7]))
    if not launched:  # no prlimit on this platform: set the limits here, before the checked code runs
        limit(memory_mb, timeout_s)
    no_network()
    module, _, name = target.partition(":")
    try:
        answer = {"ok": getattr(importlib.import_module(module), name)(*args)}
    except BaseException as err:  # noqa: BLE001 - everything the checked file makes the code raise is the answer
        if out_of_memory(err):
            answer = {"limit": "memory"}
        else:
            answer = {"error": type(err).__name__, "message": str(err)[:2000]}
    try:
        os.write(fd, (json.dumps(answer) + "\n").encode())
    finally:
        os._exit(0)  # no interpreter teardown: nothing of the checked file runs after its answer
