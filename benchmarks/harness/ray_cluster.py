"""A real Ray cluster on this machine for the tests and ``python -m benchmarks.cluster``: ``ray start --head
--block`` bound to 127.0.0.1 with its own temporary directory and free ports, stopped (only it) when the block ends.

``--block`` keeps every process of the cluster under the one ``ray start`` process, in a session of its own: SIGTERM
to it stops them all (with the drain wait set to 0), and SIGKILL to its process group cleans up whatever is left,
without touching any other Ray on the machine. ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray use the loopback
address it was given instead of resolving 127.0.0.1 to the host's public address; the drivers that join get the same
variable and ``RAY_ADDRESS`` (what ``address: auto`` connects to).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.net import free_port

ROOT = Path(__file__).resolve().parents[2]

#: The offline digits default at its smallest (the unsharded run), and as 2 shards through the Ray launcher preset.
TINY = ("seed=0", "data.limit=20", "search.budget=1", "progress=false")
SHARDS = ("-m", "hydra/launcher=ray_cpus", "shard.count=2", "shard.index=range(2)", *TINY)
#: A comparison of three digits models (two are the oracle's members: allowed, so that no model needs training) x 2
#: repetitions.
COMPARE = (
    "compare",
    "classifiers=[digits_cnn,digits_mlp,digits_wide_cnn]",
    "allow_self_judging=true",
    "data.limit=12",
    "search.budget=4",
    "search.update=sign",
    "search.step_size=0.1",
    "repetitions=2",
    "seed=0",
    "n_boot=100",
    "progress=false",
    "report=false",
)


@dataclass(frozen=True)
class RayCluster:
    """A running local cluster: its address, and the environment a driver joining it needs."""

    address: str
    env: dict[str, str]
    temp_dir: Path
    pid: int


@contextlib.contextmanager
def local_ray_cluster(
    num_cpus: int = 2, env: dict[str, str] | None = None, timeout_s: float = 180
) -> Iterator[RayCluster]:
    """Start a head node with ``num_cpus`` CPUs and no GPU; its workers inherit ``env`` (on top of this process's
    environment). Yields a :class:`RayCluster`; stops it on exit."""
    temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short: Ray's socket paths must stay under 108 bytes
    port, client_port, agent_port = free_port(), free_port(), free_port()
    base = {
        **os.environ,
        **(env or {}),
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # keep 127.0.0.1 (else Ray binds the host's reachable address)
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",  # SIGTERM stops the node at once (no 30 s drain)
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    log = open(temp / "ray-start.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--node-ip-address=127.0.0.1"]
        + [f"--port={port}", f"--ray-client-server-port={client_port}", f"--dashboard-agent-listen-port={agent_port}"]
        + [f"--num-cpus={num_cpus}", "--num-gpus=0", f"--temp-dir={temp}", "--include-dashboard=false"]
        + ["--disable-usage-stats", f"--object-store-memory={200 * 2**20}"],
        env=base,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: stopped as a whole, nothing else
    )
    try:
        deadline = time.time() + timeout_s
        while "Ray runtime started" not in (temp / "ray-start.log").read_text():
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"ray start failed or hung:\n{(temp / 'ray-start.log').read_text()[-3000:]}")
            time.sleep(0.2)
        address = f"127.0.0.1:{port}"
        yield RayCluster(address, {**base, "RAY_ADDRESS": address}, temp, proc.pid)
    finally:
        stop(proc)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to ``ray start --block`` (it stops the processes it started), then SIGKILL to its process group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def start(args: list[str], env: dict[str, str], logs: Path) -> subprocess.Popen:
    """``geneval *args`` in the background, its output in ``logs``.out/.err."""
    return subprocess.Popen(
        [sys.executable, "-m", "genEval.cli", *args],
        cwd=ROOT,
        env=env,
        stdout=open(f"{logs}.out", "w"),  # noqa: SIM115 - the child holds them
        stderr=open(f"{logs}.err", "w"),  # noqa: SIM115
    )


def kill_mid_run(run_dir_glob: str, root: Path, proc: subprocess.Popen, samples: int) -> int:
    """Wait until the run directory matching ``run_dir_glob`` under ``root`` has ``samples`` finished samples but no
    results, then SIGKILL the process that holds its run.lock (a Ray worker); returns its pid."""
    deadline = time.time() + 900
    while time.time() < deadline and proc.poll() is None:
        for d in root.glob(run_dir_glob):
            pid = _owner_mid_run(d, samples)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                return pid
        time.sleep(0.02)
    raise AssertionError(f"{run_dir_glob} under {root} finished (or the command ended) before it could be killed")


def _owner_mid_run(run_dir: Path, samples: int) -> int | None:
    """The pid of the Ray worker writing ``run_dir`` once it has ``samples`` samples flushed and no results yet."""
    try:
        if (run_dir / "results.json").exists() or len(
            (run_dir / "samples.partial.jsonl").read_text().splitlines()
        ) < samples:
            return None
        pid = int(json.loads((run_dir / "run.lock").read_text())["pid"])
        title = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except (OSError, ValueError, KeyError):  # not there yet, or just finished
        return None
    assert title.startswith("ray::"), f"run.lock names pid {pid} ({title!r}), not a Ray worker"
    return pid
