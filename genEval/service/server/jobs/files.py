"""A finished job's files: each repetition's run directory, its results.json and report, and its generated images
as a snapshot tar (made once, then served from ``home/snapshots``)."""

from __future__ import annotations

import tarfile
import threading
from pathlib import Path

from genEval.fileio import atomic_write
from genEval.reports.report import write_report
from genEval.service.records import JobInfo
from genEval.service.refusals import Conflict, NotFound
from genEval.service.server.jobs.desk import JobDesk
from genEval.snapshots.export import export_snapshot
from genEval.snapshots.manifest import SnapshotError


class RunFiles:
    """The files of the jobs of ``jobs`` under the service home ``home``."""

    def __init__(self, jobs: JobDesk, home: Path) -> None:
        self.jobs, self.home = jobs, home
        self._export_lock = threading.Lock()

    def rep_dir(self, job: JobInfo, rep: int) -> Path:
        return job.rep_dir(self.home, rep)

    def finished_run(self, job_id: str, rep: int, what: str = "results exist") -> tuple[JobInfo, Path]:
        """A done job and the run directory of its repetition ``rep`` (:class:`Conflict` before it is done)."""
        job = self.jobs.job(job_id)
        if job.status != "done":
            raise Conflict(f"job {job_id} is {job.status}; its {what} once it is done.")
        try:
            return job, self.rep_dir(job, rep)
        except IndexError as err:
            raise NotFound(str(err)) from None

    def results_file(self, job_id: str, rep: int) -> Path:
        """The results.json of a done job's repetition."""
        return self.finished_run(job_id, rep)[1] / "results.json"

    def report_file(self, job_id: str, rep: int) -> Path:
        """The report.html of a done job's repetition."""
        job, _ = self.finished_run(job_id, rep, what="report exists")
        return self.report(job, rep)

    def report(self, job: JobInfo, rep: int) -> Path:
        """The run's report.html (the worker writes it; made here when missing)."""
        path = self.rep_dir(job, rep) / "report.html"
        if not path.is_file():
            write_report(self.rep_dir(job, rep), path)
        return path

    def snapshot(self, job_id: str, rep: int) -> tuple[JobInfo, Path]:
        """A done job's repetition as a snapshot tar (:meth:`snapshot_tar`); :class:`Conflict` when it has none."""
        job, _ = self.finished_run(job_id, rep)
        try:
            return job, self.snapshot_tar(job, rep)
        except (SnapshotError, FileNotFoundError) as err:
            raise Conflict(f"no snapshot for this run: {err}") from None

    def snapshot_tar(self, job: JobInfo, rep: int) -> Path:
        """The run's generated images as a snapshot (genEval.snapshots.export.export_snapshot, image-folder format),
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
