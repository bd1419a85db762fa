"""The worker: claim a job, run it in a child process, heartbeat its progress, record how it ended.

One worker per GPU (``geneval worker``), plus one inside ``geneval serve``. The loop:

1. put back jobs whose lease ran out (their worker died: ``JobQueue.requeue_expired``);
2. claim the oldest queued job atomically (``JobQueue.claim``);
3. run it in a *child process* (:class:`genEval.service.child.JobChild`: a fresh ``python -I -S`` behind the
   sandbox's launcher, so that a model that crashes, leaks memory, hangs or has to be cancelled takes only the child
   with it. With ``isolation`` (``auto``: where bubblewrap works) the child sees only what its job needs: the
   interpreter, the caches, its uploaded file read-only and its run directory writable, never the rest of the home
   (:func:`genEval.service.child.evaluation_view`); it has no network and at most ``job_memory_mb``, set before it
   starts. A TorchScript or torch.export job this worker cannot isolate fails, unless ``allow_unsandboxed_models``.
   The child dies with its worker (Linux ``PR_SET_PDEATHSIG``, bubblewrap's ``--die-with-parent``), so a killed
   worker never leaves an orphan writing into a run directory that another worker is about to re-run;
4. every ``heartbeat_s``: renew the lease and store progress (images done, ETA) read from the run directories; when
   the heartbeat finds the job no longer held (cancelled, or re-queued after a stall), stop the child (SIGTERM, then
   SIGKILL after ``cancel_grace_s``). A job past ``max_job_s`` seconds, or whose progress has not moved for
   ``stall_heartbeats`` heartbeats, is stopped the same way and fails, saying which. Once the child has answered,
   the lease is still renewed while it exits (at most ``exit_grace_s``, then SIGKILL): a finished job is never
   re-queued because its process was slow to tear down;
5. compute the job's leaderboard row (its scores and its significance marks against every stored model:
   :class:`genEval.service.server.standings.compute.StandingsBuilder`) while still renewing the lease, and store
   ``done`` with the result summary and that row in one transaction, so the leaderboard pages only read; or store
   ``failed`` with the error the evaluation raised.

Every database call of the loop goes through :class:`~genEval.service.server.outages.Outage`: during a database restart
or a lost connection it is retried with backoff (one warning when the outage starts, one line when it ends), so a worker
never dies of one; its evaluation runs on meanwhile, and the heartbeat that follows renews the lease.

At start (and every ``backfill_s`` while idle) a worker also stores the rows of done jobs that have none (jobs
finished by a worker from before standings were stored), and drops the workers gone for ``retention_s``.

A worker shutting down cleanly (:meth:`Worker.stop`; ``geneval worker`` on SIGTERM or SIGINT) sends SIGTERM to its
child, which flushes the samples it finished and releases the run directory's lock (:mod:`genEval.runs.stopping`)
within ``stop_timeout_s``; the job goes back to the queue without the attempt counting, and the worker is marked
stopped. A worker killed outright leaves its job to expire; the next worker, on any host, re-runs it into the same
run directory with the same seeds, taking over the run's lock once its lease (the dead worker's ``lease_s``) has
expired, and resumes from the samples already written.

A failed job's ``error`` holds the reason only (:func:`genEval.service.errors.public_reason`: no paths, hosts,
pids or tracebacks); the full text goes to this log and the job's ``error_detail`` (admins).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genEval.runs.stopping import Interrupted, stop_on_signals
from genEval.sandbox import CheckStopped, Limits, isolates, isolation_problem
from genEval.service.child import JobChild, evaluation_env, evaluation_view
from genEval.service.errors import public_reason
from genEval.service.records import JobInfo, new_id
from genEval.service.server.database import Database
from genEval.service.server.jobs.queue import JobQueue
from genEval.service.server.outages import UNREACHABLE, Outage, Stopped, short
from genEval.service.server.standings.compute import StandingsBuilder, StandingUpdate, record_finished
from genEval.service.server.workers.store import WorkerStore
from genEval.service.worker_settings import WorkerSettings

log = logging.getLogger(__name__)

#: Progress callback a runner gets: ``report("total", n_images)``, ``report("rep", r)``.
Report = Callable[[str, Any], None]
#: ``runner(job, home, report) -> result summary``; must be picklable (a module-level function or a
#: functools.partial of one): it is sent to the child process.
Runner = Callable[[JobInfo, Path, Report], dict]


def _lines(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


class Progress:
    """Images done and ETA of a running job, read from its run directories (the child reports the total
    and which repetition it is in; finished repetitions count fully, the current one by the lines of its
    ``samples.partial.jsonl``)."""

    def __init__(self, home: Path, job: JobInfo) -> None:
        self.home, self.job = home, job
        self.total: int | None = None
        self.rep = 0
        self.moves = 0  # messages the child sent: progress, even between two records
        self.started = time.time()

    def update(self, kind: str, value: Any) -> None:
        if kind == "total":
            self.total = int(value)
        elif kind == "rep":
            self.rep = int(value)

    def done(self) -> int:
        if not self.total:
            return 0
        per_rep = self.total // max(1, len(self.job.seeds))
        current = min(per_rep, _lines(self.job.rep_dir(self.home, self.rep) / "samples.partial.jsonl"))
        return self.rep * per_rep + current

    def eta(self, done: int) -> float | None:
        if not self.total or done <= 0:
            return None
        rate = done / max(1e-6, time.time() - self.started)
        return max(0.0, (self.total - done) / rate)


@dataclass(frozen=True)
class WorkerStores:
    """What a worker works with of the database, and nothing else of it: the ``queue`` it claims jobs from and renews
    their leases in (:class:`~genEval.service.server.jobs.queue.JobQueue`), the ``workers`` store it registers in,
    the ``standings`` builder that computes a finished job's row, ``finish`` (a job stored done with that row in one
    transaction, then its neighbours settled: :func:`~genEval.service.server.standings.compute.record_finished`,
    called as ``finish(job, worker_id, result, images, update=...)``), and ``url``, the database as the log shows it
    (no password)."""

    queue: JobQueue
    workers: WorkerStore
    standings: StandingsBuilder
    finish: Callable[..., bool]
    url: str

    @classmethod
    def of(cls, db: Database, home: Path, n_boot: int) -> WorkerStores:
        """The stores of ``db`` a worker uses (its standings bootstrapped ``n_boot`` times)."""
        standings = StandingsBuilder(db.leaderboard, home, n_boot=n_boot)
        return cls(db.queue, db.workers, standings, functools.partial(record_finished, db, standings), db.display_url())


class Worker:
    """Claims and runs jobs from ``db`` until stopped (or, with ``exit_when_idle``, until the queue is empty).

    ``db``: the stores it uses (:class:`WorkerStores`), or a :class:`~genEval.service.server.database.Database` to
    take them from. ``home``: the service directory (run directories and uploads live under it; shared by every
    worker and the server). ``runner``: what runs a job in the child (genEval.service.execute.run_job with the
    command layer's builder in production; tests pass cheap stand-ins). ``settings``: its lease, limits and
    sandbox (:class:`~genEval.service.worker_settings.WorkerSettings`, ``conf/worker``; None: the defaults).
    """

    def __init__(
        self, db: Database | WorkerStores, home: str | Path, runner: Runner, settings: WorkerSettings | None = None
    ) -> None:
        self.home, self.runner = Path(home), runner
        self.settings = s = WorkerSettings() if settings is None else settings  # checked there (each key named)
        self.stores = db if isinstance(db, WorkerStores) else WorkerStores.of(db, self.home, s.n_boot)
        self.host = str(s.host) if s.host else socket.gethostname()
        self.id = s.worker_id or f"{self.host}:{os.getpid()}:{new_id()[:8]}"
        self._next_backfill = 0.0
        self._stop = threading.Event()
        # every database call of the loop lives through outages (one log line each way)
        self.outage = Outage(f"worker {self.id}", self._stop, first_s=min(s.poll_s, 0.5), max_s=s.lease_s / 4)
        self._db = self.outage.call
        self.jobs_run = 0
        self.signal: int | None = None  # the signal that stopped this worker (stop_worker_on_signals)
        self.isolated = isolates(s.isolation)  # "bwrap" where it cannot be had: IsolationUnavailable, naming why
        self.isolation_problem = None if self.isolated else (isolation_problem() or f"isolation={s.isolation}")

    def stop(self) -> None:
        """Ask the loop to end; a running job is stopped (its finished samples kept, its lock released) and put back
        in the queue."""
        self._stop.set()

    def lock_settings(self) -> dict:
        """The run lock settings of this worker's evaluations: the lease is the job's, so a run's lock expires with
        its job's lease; a re-run waits up to two leases for the lock of a worker that died."""
        s = self.settings
        return {"lease_s": s.lease_s, "wait_s": 2 * s.lease_s + s.heartbeat_s, "host": self.host}

    def run(self) -> int:
        """The worker loop; returns the number of jobs it ran to an end (done or failed). Every database call in it
        is retried through an outage (:class:`~genEval.service.server.outages.Outage`), so the loop ends only when it is
        stopped (or idle, or at ``max_jobs``)."""
        try:
            s = self.settings
            self._db(self.stores.workers.register, self.id, self.host, os.getpid(), s.device, lease_s=s.lease_s)
            log.info("worker %s polling %s", self.id, self.stores.url)
            self._backfill()
            while not self._stop.is_set():
                job = self._db(self._claim)
                if job is None:
                    self._backfill()
                    if self.settings.exit_when_idle:
                        break
                    self._db(self.stores.workers.seen, self.id, None)
                    self._stop.wait(self.settings.poll_s)
                    continue
                self.run_claimed(job)
                if self.settings.max_jobs is not None and self.jobs_run >= self.settings.max_jobs:
                    break
        except Stopped:
            log.warning("worker %s stopped while the database was unreachable", self.id)
        finally:
            try:
                self.stores.workers.stopped(self.id)
            except UNREACHABLE as err:  # its lease tells the others it is gone
                log.warning("worker %s: could not record that it stopped (%s)", self.id, short(err))
        return self.jobs_run

    def _claim(self) -> JobInfo | None:
        """Put back the jobs whose lease ran out (by the database's clock), then claim the oldest queued one."""
        for job_id, status in self.stores.queue.requeue_expired(self.settings.max_attempts):
            log.warning("job %s lost its worker: now %s", job_id, status)
        return self.stores.queue.claim(self.id, self.settings.lease_s)

    def _backfill(self) -> None:
        """Rows for done jobs that have none, at most every ``backfill_s`` (a cheap query when there are none)."""
        if time.time() < self._next_backfill:
            return
        self._next_backfill = time.time() + self.settings.backfill_s
        try:
            self._db(self.stores.standings.backfill)
            self._db(self.stores.workers.prune, self.settings.retention_s)
        except Stopped:
            raise
        except Exception:  # noqa: BLE001 - a leaderboard problem must not stop a worker from running jobs
            log.exception("worker %s: storing the standings of earlier jobs failed", self.id)

    def _standing(self, job: JobInfo, progress: Progress) -> StandingUpdate | None:
        """The finished job's leaderboard row, computed in a thread while the lease is renewed (comparing with a
        thousand models takes seconds to minutes); None when the job was lost meanwhile."""
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["update"] = self._db(self.stores.standings.prepare, job)
            except Stopped:
                box["update"] = None
            except Exception as err:  # noqa: BLE001 - stored as the row's warning; the job itself is done
                log.exception("worker %s: computing the standings of job %s failed", self.id, job.id)
                box["update"] = self.stores.standings.unranked(job, f"{type(err).__name__}: {err}")

        thread = threading.Thread(target=work, name=f"geneval-standings-{job.id[:8]}", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(self.settings.heartbeat_s)
            if thread.is_alive() and not self._db(
                self.stores.queue.heartbeat,
                job.id,
                self.id,
                self.settings.lease_s,
                progress.total,
                progress.total,
                None,
            ):
                return None
        return box.get("update")

    def run_claimed(self, job: JobInfo) -> None:
        """Run one claimed job to its end (see the module docstring). Stopped while the database is unreachable, the
        evaluation is stopped and the job left to its lease (the server re-queues it once that has run out)."""
        log.info("worker %s: job %s (%s on %s, attempt %d)", self.id, job.id, job.name, job.benchmark, job.attempts)
        self._db(self.stores.workers.seen, self.id, job.id)
        unsandboxed = not self.isolated and job.model.get("kind") == "torchscript"
        if unsandboxed and not self.settings.allow_unsandboxed_models:
            reason = (
                f"this worker cannot run model code in a sandbox ({self.isolation_problem}); an admin can install "
                "bubblewrap on it or allow unsandboxed models (allow_unsandboxed_models=true)"
            )
            self.jobs_run += 1
            self._db(self.stores.queue.fail, job.id, self.id, reason, f"{reason} (worker {self.id})")
            return
        s = self.settings
        memory = (s.job_memory_mb or None, "job_memory_mb")
        limits = Limits(s.max_job_s or 1e9, memory[0], "max_job_s", memory[1], cpu=False, file_bytes=None)
        view = evaluation_view(job, self.home, self.settings.device) if self.isolated else None
        try:
            child = JobChild(
                self.runner, job, self.home, self.lock_settings(), limits=limits, view=view,
                env=evaluation_env(self.settings.device, self.isolated),
            )  # fmt: skip
        except CheckStopped:  # the process is shutting down: the job goes back, its attempt uncounted
            self._release(job)
            return
        try:
            self._follow(job, child)
        except Stopped:
            child.stop(self.settings.stop_timeout_s)
            raise
        finally:
            child.close()

    def _beat(self, job: JobInfo, progress: Progress) -> bool:
        """Renew the lease and store the progress; False when the job was lost (cancelled or re-queued)."""
        done = progress.done()
        beat = (job.id, self.id, self.settings.lease_s, done, progress.total, progress.eta(done))
        if not self._db(self.stores.queue.heartbeat, *beat):
            return False
        self._db(self.stores.workers.seen, self.id, job.id)
        return True

    def _follow(self, job: JobInfo, child: JobChild) -> None:
        """Heartbeat a running child until it answers, then record how it ended; stop it when the job was lost, the
        worker is stopping, it ran past ``max_job_s`` or its progress did not move for ``stall_heartbeats``."""
        progress = Progress(self.home, job)
        started = time.monotonic()
        next_beat, still, last = started + self.settings.heartbeat_s, 0, None
        outcome: tuple | None = None
        while outcome is None:
            for msg in child.messages(max(0.0, min(next_beat - time.monotonic(), 0.5))):
                progress.moves += 1
                outcome = outcome or _final(msg, progress)
            if child.oversized:
                return self._stopped(job, child, "the evaluation sent a message larger than the worker reads")
            if outcome is None and child.exited():
                outcome = next((o for m in child.messages(0.0) if (o := _final(m, progress))), None)
                outcome = outcome or ("died",)
            if outcome is not None:
                break
            if self._stop.is_set():
                child.stop(self.settings.stop_timeout_s)
                self._release(job)
                log.warning("worker %s stopping: job %s put back in the queue", self.id, job.id)
                return
            ran = time.monotonic() - started
            if self.settings.max_job_s and ran > self.settings.max_job_s:
                return self._stopped(
                    job,
                    child,
                    f"it ran past its time limit of {self.settings.max_job_s:g} s (server setting max_job_s)",
                )
            if time.monotonic() >= next_beat:
                if not self._beat(job, progress):
                    child.stop(self.settings.cancel_grace_s)
                    log.warning(
                        "worker %s: job %s was cancelled or re-queued; its evaluation was stopped", self.id, job.id
                    )
                    return
                now = (progress.done(), progress.total, progress.rep, progress.moves)
                still, last = (still + 1, last) if now == last else (0, now)
                if self.settings.stall_heartbeats and still >= self.settings.stall_heartbeats:
                    return self._stopped(
                        job, child, f"it stalled: its progress did not move for {still} heartbeats ({ran:.0f} s in; "
                        "server setting stall_heartbeats)",
                    )  # fmt: skip
                next_beat = time.monotonic() + self.settings.heartbeat_s
        if not self._await_exit(job, child, progress):
            log.warning("worker %s: job %s was cancelled or re-queued while its evaluation ended", self.id, job.id)
            return
        if outcome[0] == "error" and (self._stop.is_set() or outcome[1] == "Interrupted"):
            self._release(job)  # stopped, not failed: the next worker resumes it
            log.warning("worker %s: job %s was stopped and put back in the queue", self.id, job.id)
            return
        code = child.returncode
        if child.isolated and code is not None and code > 128:  # bubblewrap's status for a child killed by a signal
            code = 128 - code
        self._record(job, outcome, code, progress)

    def _await_exit(self, job: JobInfo, child: JobChild, progress: Progress) -> bool:
        """Wait for a child that has answered to exit, renewing the lease meanwhile (a finished job's lease must not
        run out while its process tears down: docs/service.md); SIGKILL after ``exit_grace_s``. False when the job was
        lost meanwhile."""
        deadline = time.monotonic() + self.settings.exit_grace_s
        while not child.exited():
            if time.monotonic() >= deadline:
                log.warning("worker %s: job %s answered but did not exit in %gs; killed", self.id, job.id,
                            self.settings.exit_grace_s)  # fmt: skip
                child.kill()
                break
            try:
                child.proc.wait(min(self.settings.heartbeat_s, max(0.01, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:  # still exiting: keep the job ours meanwhile
                if not self._beat(job, progress):
                    child.kill()
                    return False
        return True

    def _stopped(self, job: JobInfo, child: JobChild, why: str) -> None:
        """End a job's child now and fail the job with ``why`` (a limit it passed)."""
        child.stop(self.settings.cancel_grace_s)
        self.jobs_run += 1
        reason = f"the evaluation was stopped: {why}"
        log.error("worker %s: job %s failed: %s", self.id, job.id, reason)
        self._db(self.stores.queue.fail, job.id, self.id, reason, f"{reason} (worker {self.id})")

    def _record(self, job: JobInfo, outcome: tuple, exitcode: int | None, progress: Progress) -> None:
        self.jobs_run += 1
        if outcome[0] == "done":
            update = self._standing(job, progress)
            if update is None or not self._db(
                self.stores.finish, job, self.id, outcome[1], progress.total, update=update
            ):
                log.warning("worker %s: job %s finished after it was cancelled or re-queued", self.id, job.id)
                return
            log.info("worker %s: job %s done", self.id, job.id)
            return
        reason, detail = _failure(outcome, exitcode, job, self)
        self._db(self.stores.queue.fail, job.id, self.id, reason, detail)

    def _release(self, job: JobInfo) -> None:
        """Hand a job back to the queue when stopping: one try (a worker that stops does not wait out an outage;
        the job's lease runs out instead and the server re-queues it)."""
        try:
            self.stores.queue.release(job.id, self.id)
        except UNREACHABLE as err:
            log.warning(
                "worker %s: job %s is left to its lease (the database is unreachable: %s)", self.id, job.id, short(err)
            )


def _final(msg: dict, progress: Progress) -> tuple | None:
    """A child's message: progress (``total``, ``rep``) is noted; the final one (``done``, ``error``) returned."""
    kind = msg.get("kind")
    if kind == "done":
        return ("done", msg.get("result") if isinstance(msg.get("result"), dict) else {})
    if kind == "error":
        return ("error", str(msg.get("type")), str(msg.get("text")), str(msg.get("traceback")))
    if kind in ("total", "rep") and isinstance(msg.get("value"), int):
        progress.update(kind, msg["value"])
    return None


def _failure(outcome: tuple, exitcode: int | None, job: JobInfo, worker: Worker) -> tuple[str, str]:
    """The public reason and the admin's detail of a job whose child ended without a result: an ``error`` it
    reported (its memory limit named when it ran out), or its exit code or signal (logged here)."""
    if outcome[0] == "error":
        kind, text, tb = outcome[1], outcome[2], outcome[3]
        detail = f"{kind}: {text}"
        reason = public_reason(kind, text, hide=(worker.host, worker.id), upload=job.upload_path, home=worker.home)
        if worker.settings.job_memory_mb and (kind == "MemoryError" or "allocate memory" in text.lower()):
            reason = (
                f"the evaluation ran out of its memory limit of {worker.settings.job_memory_mb} MiB (server setting "
                f"job_memory_mb): {reason}"
            )
        log.error("worker %s: job %s failed: %s\n%s", worker.id, job.id, detail, tb)
        return reason, f"{detail} (worker {worker.id})\n{tb}"
    sig = -exitcode if exitcode is not None and exitcode < 0 else None
    reason = (
        f"the evaluation process was killed by signal {signal.Signals(sig).name} (out of memory?)"
        if sig
        else f"the evaluation process exited with code {exitcode} without a result"
    )
    log.error("worker %s: job %s failed: %s", worker.id, job.id, reason)
    return reason, f"{reason} (worker {worker.id})"


def stop_worker_on_signals(worker: Worker) -> Any:
    """A context in which SIGTERM and SIGINT stop ``worker`` cleanly (:meth:`Worker.stop`) instead of killing it;
    :attr:`Worker.signal` then holds the signal (the caller exits with its code)."""

    def stop(signum: int) -> None:
        worker.signal = signum
        worker.stop()

    return stop_on_signals(on_signal=stop)


def stopped_by(worker: Worker) -> Interrupted | None:
    """The :class:`~genEval.runs.stopping.Interrupted` to end with when a signal stopped ``worker``, else None."""
    return None if worker.signal is None else Interrupted(worker.signal)


def run_worker_in_thread(worker: Worker) -> threading.Thread:
    """Start ``worker.run`` in a daemon thread (the worker inside ``geneval serve``)."""
    thread = threading.Thread(target=worker.run, name=f"geneval-worker-{worker.id}", daemon=True)
    thread.start()
    return thread
