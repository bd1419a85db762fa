"""The state one server process works with: database, service directory, benchmarks.

Shared by the JSON API (:mod:`genEval.service.api`) and the HTML pages (:mod:`genEval.service.pages`).
Everything durable is in the database and under ``home``; leaderboard standings are read from the database,
where workers store them when jobs finish (:mod:`genEval.service.leaderboard`).
"""

from __future__ import annotations

import tarfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from genEval.fileio import atomic_write, ensure_writable_dir
from genEval.reports.report import write_report
from genEval.service.benchmarks import Benchmark
from genEval.service.db import WORKER_RETENTION_S, Database, JobInfo
from genEval.service.leaderboard import Standings, read_standings
from genEval.snapshots.format import export_snapshot

MiB = 1024 * 1024


class UnknownVersion(LookupError):
    """A leaderboard asked for a version of a benchmark that was never registered (the API answers 404)."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Settings:
    """Server settings. ``home``: the service directory (database file for SQLite, uploads, run directories,
    snapshots). ``max_upload_bytes``: the largest model file accepted. ``n_boot``: bootstrap resamples of the
    leaderboard's intervals and marks, used by the server's in-process workers. ``max_json_bytes``: the largest
    request body other than an upload. ``worker_retention_s``: how long stopped or gone workers stay listed."""

    home: Path
    max_upload_bytes: int = 512 * MiB
    default_benchmark: str | None = None
    n_boot: int = 1000
    max_json_bytes: int = MiB
    worker_retention_s: float = WORKER_RETENTION_S


@dataclass
class Service:
    """Database + directory + the benchmarks this server offers (name -> current preset) + the registered
    classifier configs a submission may name (name -> resolved config)."""

    db: Database
    settings: Settings
    benchmarks: dict[str, Benchmark]
    classifiers: dict[str, dict]
    _export_lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        if not self.benchmarks:
            raise ValueError("the service needs at least one benchmark (conf/benchmark/*.yaml).")
        default = self.settings.default_benchmark
        if default is not None and default not in self.benchmarks:
            raise ValueError(
                f"default benchmark {default!r} is not among the loaded ones: {', '.join(self.benchmarks)}."
            )
        ensure_writable_dir(self.home / "uploads")
        for b in self.benchmarks.values():
            self.db.register_benchmark(b.name, b.version, b.title, b.record())

    @property
    def home(self) -> Path:
        return self.settings.home

    @property
    def default_benchmark(self) -> str:
        return self.settings.default_benchmark or next(iter(self.benchmarks))

    def benchmark(self, name: str) -> Benchmark:
        if name not in self.benchmarks:
            raise KeyError(f"unknown benchmark {name!r}; available: {', '.join(self.benchmarks)}.")
        return self.benchmarks[name]

    def standings(self, name: str, version: str | None = None, **page) -> Standings:
        """The stored standings of benchmark ``name`` at ``version`` (default: the current preset's); ``page``:
        ``sort``, ``descending``, ``limit``, ``offset``, ``every_mark`` (:func:`read_standings`). Raises
        :class:`UnknownVersion` for a version never registered."""
        if version is not None and version != self.benchmark(name).version:
            known = [v.version for v in self.db.benchmark_versions(name)]
            if version not in known:
                shown = version if len(version) <= 64 else version[:64] + "..."
                raise UnknownVersion(
                    f"benchmark {name} has no version {shown!r}; its versions: {', '.join(known)} (newest first)."
                )
        return read_standings(self.db, name, version or self.benchmark(name).version, **page)

    def rep_dir(self, job: JobInfo, rep: int) -> Path:
        return job.rep_dir(self.home, rep)

    def report(self, job: JobInfo, rep: int) -> Path:
        """The run's report.html (the worker writes it; made here when missing)."""
        path = self.rep_dir(job, rep) / "report.html"
        if not path.is_file():
            write_report(self.rep_dir(job, rep), path)
        return path

    def snapshot_tar(self, job: JobInfo, rep: int) -> Path:
        """The run's generated images as a snapshot (genEval.snapshots.format.export_snapshot, image-folder format),
        packed into one tar under ``home/snapshots`` (made once, then served from there)."""
        out = self.home / "snapshots" / job.id
        tar_path = out / f"rep{rep}.tar"
        with self._export_lock:
            if not tar_path.is_file():
                snap = export_snapshot(self.rep_dir(job, rep), out / f"rep{rep}", overwrite=True)

                def pack(fh) -> None:
                    with tarfile.open(fileobj=fh, mode="w") as tar:
                        tar.add(snap, arcname=f"{job.name}-rep{rep}-snapshot")

                atomic_write(tar_path, pack)
        return tar_path
