"""One job's evaluation child: the process a worker runs a job in (:mod:`genEval.service.server.worker`), started
through the sandbox's launcher (:func:`genEval.sandbox.launch`: ``python -I -S`` behind prlimit and, where it works,
bubblewrap), so that the model it evaluates, which may be a stranger's TorchScript, gets no more of the machine than
the job needs.

What the child sees (:func:`evaluation_view`): the interpreter and its imports, the caches and asset folders the
benchmark's components load from, and the files its config names, all read-only; the job's uploaded model file,
read-only; its own run directory ``<home>/runs/<benchmark>/<job>``, writable; a scratch ``/tmp``; and, on a GPU
worker, the GPU's device nodes. Not the rest of the service's home: its database, uploads and other jobs' runs. It
has no network, and its memory is limited (``job_memory_mb``) before it starts. The caches are read-only, so a
benchmark's weights must be on the machine before its first job (a component that would download or train them on
first use fails, naming the file).

The two ends talk over two pipes. The worker sends the task (its runner, the job, the home and the run lock's
settings) pickled: the worker trusts what it sends, the child what it receives. The child answers in JSON lines
(``{"kind": "total" | "rep", "value": n}`` as it goes, then ``{"kind": "done", "result": {...}}`` or ``{"kind":
"error", ...}``): the worker never unpickles anything the child, which runs the model, could have written. A byte
on the task pipe asks the child to stop: it raises SIGTERM in itself, so it keeps the samples it finished and
releases its run's lock (:mod:`genEval.runs.stopping`); the worker kills it after a grace. The pipe closing
without one means the worker died: the child ends at once, as with its death signal.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import pickle
import select
import signal
import struct
import subprocess
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from genEval.assets import asset_folders
from genEval.fileio import cache_dir, json_default
from genEval.runs import lock as run_lock
from genEval.runs.stopping import stop_on_signals
from genEval.sandbox import Limits, View, die_with_parent, forget, give_to_sandbox, kill, launch, no_network
from genEval.service.records import JobInfo

log = logging.getLogger(__name__)

#: The largest message a child may send (a result summary is kilobytes); a child that sends more is stopped.
MAX_MESSAGE = 16 << 20
#: Scratch ``/tmp`` of an evaluation (torch.compile's caches live there), MiB.
SCRATCH_MB = 2048


# ------------------------------------------------------------------------------------------------- what it sees
def cache_homes() -> dict[str, str]:
    """The caches a job's components read, by the variable that names each (set in the child, whose home is its
    scratch ``/tmp``): genEval's, Hugging Face's and torch's, as this process resolves them."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return {
        "GENEVAL_CACHE": str(Path(os.environ.get("GENEVAL_CACHE") or cache_dir()).expanduser()),
        "HF_HOME": str(Path(os.environ.get("HF_HOME") or base / "huggingface").expanduser()),
        "TORCH_HOME": str(Path(os.environ.get("TORCH_HOME") or base / "torch").expanduser()),
    }


def config_paths(config: Any, home: Path) -> Iterator[str]:
    """Absolute paths of existing files and folders a job's config names (a benchmark's data root, a local weights
    file), except those inside or above the service's ``home``."""
    if isinstance(config, dict):
        for value in config.values():
            yield from config_paths(value, home)
    elif isinstance(config, (list, tuple)):
        for value in config:
            yield from config_paths(value, home)
    elif isinstance(config, str) and config.startswith("/") and "\n" not in config and len(config) < 4096:
        p, h = os.path.abspath(config), str(home)
        near = p == h or p.startswith(h + "/") or h.startswith(p.rstrip("/") + "/")
        if p != "/" and not near and os.path.exists(p):
            yield p


def gpu_devices() -> tuple[str, ...]:
    """The device nodes an NVIDIA GPU is used through (none on a machine without one)."""
    return tuple(sorted({*glob.glob("/dev/nvidia*"), *glob.glob("/dev/dri")}))


def evaluation_view(job: JobInfo, home: Path, device: str = "auto") -> View:
    """What ``job``'s isolated child sees (see the module docstring); its run directory is made here and given to the
    sandbox's user."""
    run_dir = Path(home) / job.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    give_to_sandbox(run_dir)
    read_only = [*cache_homes().values(), *map(str, asset_folders()), *config_paths(job.config, Path(home))]
    if job.upload_path:
        read_only.append(str(Path(home) / job.upload_path))
    devices = () if device == "cpu" else gpu_devices()
    if devices:
        read_only.append("/sys")  # the driver reads the GPU's topology there
    return View(tuple(read_only), (str(run_dir),), (str(home),), devices, SCRATCH_MB)


def evaluation_env(device: str, isolated: bool) -> dict[str, str | None]:
    """Variables the child gets on top of :func:`genEval.sandbox.child_env`: the caches (an isolated child's home is
    its scratch), and the GPUs this worker sees (None: the variable is left out, every GPU)."""
    env: dict[str, str | None] = dict(cache_homes()) if isolated else {}
    if device != "cpu":
        env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    env["HF_HUB_OFFLINE"] = "1"
    return env


# ------------------------------------------------------------------------------------------------- the parent's end
class JobChild:
    """A running evaluation child (the worker's handle): :meth:`messages` reads what it said, :meth:`stop` asks it to
    stop, :meth:`kill` ends it, :meth:`close` lets go of it. ``view`` None: not isolated (limits only)."""

    def __init__(
        self,
        runner: Callable,
        job: JobInfo,
        home: Path,
        lock: dict,
        *,
        limits: Limits,
        view: View | None,
        env: dict[str, str | None] | None = None,
    ) -> None:
        task_r, self._task = os.pipe()
        self._out, out_w = os.pipe()
        self.isolated = view is not None
        try:
            self.proc = launch(
                "genEval.service.child:main", [str(task_r), str(out_w), "0" if self.isolated else str(os.getpid())],
                limits=limits, view=view, env=env, pass_fds=(task_r, out_w), track=False,
            )  # fmt: skip
        except BaseException:
            os.close(self._task)
            os.close(self._out)
            raise
        finally:
            os.close(task_r)
            os.close(out_w)
        self._buffer = b""
        self.oversized = False
        task = pickle.dumps((runner, job, str(home), lock))
        try:
            os.write(self._task, struct.pack("<Q", len(task)))
            view_of = memoryview(task)
            while view_of:
                view_of = view_of[os.write(self._task, view_of) :]
        except BrokenPipeError:
            pass  # it died before reading its task: it ends without an answer, and the worker says so
        os.set_blocking(self._out, False)

    @property
    def sentinel(self) -> int:
        return self._out

    def exited(self) -> bool:
        return self.proc.poll() is not None

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def messages(self, timeout: float) -> list[dict]:
        """The messages the child sent, waiting up to ``timeout`` seconds for the first; a line that is not a JSON
        object, or a message over :data:`MAX_MESSAGE`, ends the child (:attr:`oversized`)."""
        with contextlib.suppress(InterruptedError):
            select.select([self._out], [], [], max(0.0, timeout))
        while True:
            try:
                chunk = os.read(self._out, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                break
            self._buffer += chunk
            if len(self._buffer) > MAX_MESSAGE and b"\n" not in self._buffer:
                self.oversized = True
                self.kill()
                break
        *lines, self._buffer = self._buffer.split(b"\n")
        out = []
        for line in lines:
            try:
                msg = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                msg = None
            if isinstance(msg, dict) and isinstance(msg.get("kind"), str):
                out.append(msg)
        return out

    def stop(self, grace_s: float) -> None:
        """Ask the child to stop (it keeps its finished samples and releases its lock), SIGKILL after ``grace_s``."""
        with contextlib.suppress(OSError):
            os.write(self._task, b"s")
        with contextlib.suppress(OSError):
            os.close(self._task)
        self._task = -1
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        kill(self.proc)
        self.proc.wait()

    def close(self) -> None:
        forget(self.proc)
        for fd in (self._task, self._out):
            with contextlib.suppress(OSError):
                if fd >= 0:
                    os.close(fd)
        self._task = self._out = -1


# ------------------------------------------------------------------------------------------------- the child's end
def _read_task(fd: int) -> tuple:
    with os.fdopen(fd, "rb", closefd=False) as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        return pickle.loads(fh.read(size))  # the worker's own task: trusted  # noqa: S301


def _stop_when_asked(fd: int) -> None:
    """SIGTERM this process when the worker writes to the task pipe (:meth:`JobChild.stop`); end it at once when the
    pipe closes without a word (the worker died: the child dies with it, as its death signal would have it, and its
    run's lock is left to expire, never released by a process that no longer holds a job)."""

    def watch() -> None:
        try:
            asked = os.read(fd, 1)
        except OSError:
            asked = b""
        if asked:
            os.kill(os.getpid(), signal.SIGTERM)
        else:
            os._exit(1)

    threading.Thread(target=watch, name="geneval-stop-watch", daemon=True).start()


def main(argv: list[str]) -> None:
    """The child: read the task, run the runner (``runner(job, home, report)``), answer in JSON lines."""
    task_fd, out_fd, parent = int(argv[0]), int(argv[1]), int(argv[2])
    die_with_parent(parent)  # (its lifeline is the task pipe: _stop_when_asked)
    no_network()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    out = os.fdopen(out_fd, "wb", buffering=0)
    lock = threading.Lock()

    def send(message: dict) -> None:
        line = (json.dumps(message, default=json_default) + "\n").encode()
        with lock:
            out.write(line)

    try:
        runner, job, home, lock_settings = _read_task(task_fd)
        _stop_when_asked(task_fd)
        run_lock.configure(**lock_settings)
        with stop_on_signals():
            result = runner(job, Path(home), lambda kind, value: send({"kind": kind, "value": value}))
        send({"kind": "done", "result": result})
    except BaseException as err:  # everything the evaluation raises fails the job, not the worker
        send({"kind": "error", "type": type(err).__name__, "text": str(err), "traceback": traceback.format_exc()})
    finally:
        out.close()
