"""Untrusted model files are opened in a child process with a time limit, a memory limit and no network.

``torch.jit.load`` runs a TorchScript archive's ``__setstate__`` methods, and does so holding the GIL: one that never
returns freezes every thread of the process that loads it (issue 37: a 2 KB upload froze the whole server, which
then ignored SIGINT). :func:`run_isolated` therefore calls a check function in a fresh interpreter
(``python -m genEval.sandbox``) which, before it imports anything of the project or torch:

* limits its memory with ``RLIMIT_DATA`` (the heap and anonymous mappings, where torch allocates; ``RLIMIT_AS`` would
  also count the shared libraries torch maps, about 2 GB of address space) and its CPU time with ``RLIMIT_CPU`` (a
  backstop to the parent's clock), and writes no core file;
* has no network: a new user and network namespace (Linux ``unshare``) where the kernel allows one, and in any case
  an audit hook that refuses every socket Python code would open;
* dies with the process that started it (Linux ``PR_SET_PDEATHSIG``), sees no GPU and runs one thread.

The parent waits on its own clock and kills the child's whole process group when the time limit passes. The answer
comes back as one JSON line on a pipe of its own (what the checked code prints goes to a bounded log, whose last
lines name a crash). :func:`stop_all` kills every running check at once (``geneval serve`` on SIGINT).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

#: The most a check's log (its stdout and stderr) may grow (RLIMIT_FSIZE).
LOG_BYTES = 1 << 20
_RUNNING: set[subprocess.Popen] = set()
_RUNNING_LOCK = threading.Lock()
_STOPPING = threading.Event()
_CLONE_NEWUSER, _CLONE_NEWNET, _PR_SET_PDEATHSIG = 0x10000000, 0x40000000, 1
_OUT_OF_MEMORY = ("can't allocate memory", "cannot allocate memory", "std::bad_alloc", "out of memory")


@dataclass(frozen=True)
class Limits:
    """A check's limits: wall-clock seconds and MiB of memory, and the names of the settings that raise them (for
    the messages)."""

    timeout_s: float = 60.0
    memory_mb: int = 4096
    timeout_setting: str = "check_timeout_s"
    memory_setting: str = "check_memory_mb"

    def __post_init__(self) -> None:
        if not float(self.timeout_s) > 0:
            raise ValueError(f"{self.timeout_setting} must be a positive number of seconds, got {self.timeout_s!r}.")
        if not int(self.memory_mb) >= 256:
            raise ValueError(
                f"{self.memory_setting} must be at least 256 (MiB; importing torch alone takes ~200), "
                f"got {self.memory_mb!r}."
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


def stop_all() -> int:
    """Kill every running check (and every one started from now on); returns how many were running."""
    _STOPPING.set()
    with _RUNNING_LOCK:
        procs = list(_RUNNING)
    for proc in procs:
        _kill(proc)
    return len(procs)


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the child leads its own group: whatever it started goes too


def _child_env() -> dict[str, str]:
    drop = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
    env = {k: v for k, v in os.environ.items() if k.lower() not in drop}
    one = {k: "1" for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "HF_HUB_OFFLINE")}
    return env | one | {"CUDA_VISIBLE_DEVICES": "", "PYTHONDONTWRITEBYTECODE": "1"}


def run_isolated(target: str, *args: Any, limits: Limits = Limits(), what: str = "the check") -> Any:
    """Call ``target`` (``"package.module:function"``) with the JSON-able ``args`` in a sandboxed child (see the module
    docstring) and return what it returned (JSON-able). Raises :class:`LimitExceeded` past a limit, :class:`CheckFailed`
    with the function's own message when it raised, :class:`CheckStopped` when :func:`stop_all` ended it; ``what``
    names the check in those messages ("the model file's check")."""
    if _STOPPING.is_set():
        raise CheckStopped(f"{what} was not started: the process is shutting down.")
    read, write = os.pipe()
    cmd = [sys.executable, "-m", "genEval.sandbox", str(write), str(os.getpid()), target, json.dumps(list(args))]
    cmd += [str(float(limits.timeout_s)), str(int(limits.memory_mb))]
    with tempfile.TemporaryFile() as log:
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(write,),
                env=_child_env(),
                start_new_session=True,
            )
        finally:
            os.close(write)
        with _RUNNING_LOCK:
            _RUNNING.add(proc)
        try:
            answer, timed_out = _collect(proc, read, float(limits.timeout_s))
        finally:
            with _RUNNING_LOCK:
                _RUNNING.discard(proc)
            os.close(read)
        log.seek(max(0, log.seek(0, os.SEEK_END) - 2000))
        tail = log.read().decode("utf-8", "replace")
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
            _kill(proc)
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
def die_with_parent(parent_pid: int) -> None:
    """End this process when its parent does (Linux ``PR_SET_PDEATHSIG``; elsewhere a thread watching for
    re-parenting), so that a killed parent leaves no orphan behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):

        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(1)


def _no_network() -> str:
    """Cut this process off the network: a namespace of its own where the kernel allows (then it has no interface
    but a down loopback), and an audit hook refusing sockets either way. Returns which applied."""
    how = "audit hook"
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) == 0:
            how = "network namespace and audit hook"

    def refuse(event: str, _args: tuple) -> None:
        if event.startswith("socket.") and event != "socket.gethostname":
            raise PermissionError(f"no network in a model file's check ({event})")

    sys.addaudithook(refuse)
    return how


def _limit(memory_mb: int, cpu_s: float) -> None:
    mem = int(memory_mb) << 20
    resource.setrlimit(resource.RLIMIT_DATA, (mem, mem))
    cpu = int(cpu_s) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (LOG_BYTES, LOG_BYTES))


def _out_of_memory(err: BaseException) -> bool:
    return isinstance(err, MemoryError) or any(m in str(err).lower() for m in _OUT_OF_MEMORY)


def _child(argv: list[str]) -> None:
    fd, parent, target, args = int(argv[0]), int(argv[1]), argv[2], json.loads(argv[3])
    timeout_s, memory_mb = float(argv[4]), int(argv[5])
    die_with_parent(parent)
    _limit(memory_mb, timeout_s)
    _no_network()
    module, _, name = target.partition(":")
    try:
        answer = {"ok": getattr(importlib.import_module(module), name)(*args)}
    except BaseException as err:  # noqa: BLE001 - everything the checked file makes the code raise is the answer
        if _out_of_memory(err):
            answer = {"limit": "memory"}
        else:
            answer = {"error": type(err).__name__, "message": str(err)[:2000]}
    try:
        os.write(fd, (json.dumps(answer) + "\n").encode())
    finally:
        os._exit(0)  # no interpreter teardown: nothing of the checked file runs after its answer


if __name__ == "__main__":
    _child(sys.argv[1:])
