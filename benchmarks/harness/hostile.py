"""Hostile model files and job runners of issue 41's attacks: measured by benchmarks/service_attacks.py and kept as
regressions by the tests (tests/foundation/test_sandbox.py, tests/service/server/test_service_sandbox.py, through
``tests/support/sandbox.py``).

The TorchScript modules live in this file because ``torch.jit.script`` reads a class's source from its module; the
runners are module-level functions because a worker sends its runner to a child process (pickled by reference).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import zipfile
from pathlib import Path
from typing import Tuple  # noqa: UP035 - TorchScript's own type annotations

import torch

from genEval.service.records import JobInfo


class ReadsAFile(torch.nn.Module):
    """E1: ``__setstate__`` maps the file ``path`` (``torch.from_file``, an ATen op) into a buffer while the archive
    loads; ``forward`` returns its first bytes, so whoever runs the model reads the file."""

    def __init__(self, path: str, size: int = 16) -> None:
        super().__init__()
        self.path, self.size = path, size
        self.register_buffer("leak", torch.zeros(size, dtype=torch.uint8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)[:, :10] * 0 + self.leak[:10].float()

    @torch.jit.export
    def __getstate__(self) -> Tuple[str, int, bool]:  # noqa: UP006
        return (self.path, self.size, self.training)

    @torch.jit.export
    def __setstate__(self, state: Tuple[str, int, bool]) -> None:  # noqa: UP006
        self.path, self.size, self.training = state[0], state[1], state[2]
        self.leak = torch.from_file(state[0], False, state[1], dtype=torch.uint8)


class WritesAFile(torch.nn.Module):
    """E2: ``__setstate__`` maps ``path`` shared (``torch.from_file(shared=True)`` creates and writes the file) and
    copies ``payload`` into it: a ``.pth`` file in site-packages runs in every interpreter started after."""

    def __init__(self, path: str, payload: bytes) -> None:
        super().__init__()
        self.path = path
        self.register_buffer("payload", torch.tensor(list(payload), dtype=torch.uint8))
        self.register_buffer("written", torch.zeros(0, dtype=torch.uint8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)[:, :10]

    @torch.jit.export
    def __getstate__(self) -> Tuple[str, torch.Tensor, bool]:  # noqa: UP006
        return (self.path, self.payload, self.training)

    @torch.jit.export
    def __setstate__(self, state: Tuple[str, torch.Tensor, bool]) -> None:  # noqa: UP006
        self.path, self.payload, self.training = state[0], state[1], state[2]
        mapped = torch.from_file(state[0], True, state[1].numel(), dtype=torch.uint8)
        mapped.copy_(state[1])
        self.written = mapped  # kept, or TorchScript drops the write as dead code


class ReadsInForward(torch.nn.Module):
    """A model with no ``__setstate__`` whose forward reads a file (refused by its op, before and after loading)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)[:, :10] + torch.from_file(self.path, False, 10, dtype=torch.uint8).float()


class HangsInForward(torch.nn.Module):
    """E4: loads fine, passes every check; its forward never returns (TorchScript holding the GIL)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = 0
        while n >= 0:
            n = n + 1
        return x.flatten(1)[:, :10] * float(n)


def script(module: torch.nn.Module, path: Path) -> Path:
    """Save ``module`` scripted as TorchScript at ``path``."""
    torch.jit.save(torch.jit.script(module), str(path))
    return path


class TinyNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x).relu().mean((2, 3)))


def export_with_guard(path: Path, guard: str) -> Path:
    """E15 (new in issue 41): a torch.export program of :class:`TinyNet` whose ``guards_code`` holds ``guard``, a
    Python expression torch compiles into the module ``.module()`` returns and runs on every call."""
    batch = torch.export.Dim("batch", min=2)
    program = torch.export.export(TinyNet().eval(), (torch.rand(4, 3, 8, 8),), dynamic_shapes={"x": {0: batch}})
    plain = path.with_suffix(".plain.pt2")
    torch.export.save(program, str(plain))
    with zipfile.ZipFile(plain) as zi, zipfile.ZipFile(path, "w") as zo:
        for item in zi.infolist():
            data = zi.read(item.filename)
            if item.filename.endswith("models/model.json"):
                graph = json.loads(data)
                graph["guards_code"] = [guard]
                data = json.dumps(graph).encode()
            zo.writestr(item, data)
    plain.unlink()
    return path


# ------------------------------------------------------------------------------------------------- job runners
def snooping_runner(job: JobInfo, home: Path, report) -> dict:
    """What an evaluation child can reach: the service's database and home, its own run directory, a file outside
    it, the network. Returns what happened to each attempt."""
    report("total", 1)

    def attempt(fn) -> str:
        try:
            fn()
            return "ok"
        except Exception as err:  # noqa: BLE001 - the answer is what failed, and how
            return type(err).__name__

    run = job.rep_dir(home, 0)
    run.mkdir(parents=True, exist_ok=True)
    return {
        "read_db": attempt(lambda: (home / "geneval.db").read_bytes()),
        "read_upload": attempt(lambda: (home / "uploads" / "someone-else.pt").read_bytes()),
        "home": sorted(os.listdir(home)),
        "write_run_dir": attempt(lambda: (run / "probe.txt").write_text("mine")),
        "write_home": attempt(lambda: (home / "dropped.txt").write_text("x")),
        "write_site": attempt(lambda: Path(torch.__file__).with_name("dropped.pth").write_text("x")),
        "connect": attempt(lambda: socket.create_connection(("127.0.0.1", int(job.overrides.get("port", 9))), 2)),
        "uid": str(os.getuid()),
    }


def hanging_runner(job: JobInfo, home: Path, report) -> dict:
    """E4: a job whose model's forward never returns (a scripted loop, holding the GIL); says its pid in
    ``home/started-<job>`` where it may write there."""
    report("total", 1)
    with contextlib.suppress(OSError):
        (home / f"started-{job.id}").write_text(str(os.getpid()))
    model = torch.jit.script(HangsInForward())
    model(torch.zeros(1, 3, 8, 8))
    return {}


def slow_exit_runner(job: JobInfo, home: Path, report) -> dict:
    """E14: finishes at once, but its process takes 3 s to exit after answering (a thread the interpreter waits for at
    exit, as a slow teardown of a large model does); appends its job id to ``home/executions.log``."""
    report("total", 1)
    with open(home / "executions.log", "a", encoding="utf-8") as fh:
        fh.write(f"{job.id}\n")
    threading.Thread(target=time.sleep, args=(3.0,), daemon=False).start()
    return {"ran": job.id}


class Looping(torch.nn.Module):
    """A scripted module whose ``__setstate__`` (run by ``torch.jit.load``, holding the GIL) never returns."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    @torch.jit.export
    def __getstate__(self) -> Tuple[int, bool]:  # noqa: UP006
        return (self.n, self.training)

    @torch.jit.export
    def __setstate__(self, state: Tuple[int, bool]) -> None:  # noqa: UP006
        self.training = state[1]
        n = state[0]
        while n >= 0:
            n = n + 1
        self.n = n
