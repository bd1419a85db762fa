"""The server's own upkeep: it re-queues jobs whose lease ran out, and keeps its in-process workers alive.

Workers re-queue expired jobs when they look for work, but a server whose workers all died (or that has none, with only
external workers that were lost) would leave a job ``running`` with an expired lease forever, and the jobs behind it
queued (docs/service.md). :class:`Supervisor` runs in ``geneval serve``: every ``every_s`` it re-queues the expired jobs
itself (by the database's clock: :meth:`genEval.service.server.jobs.queue.JobQueue.requeue_expired`), and starts a new
in-process worker for each one whose thread died (a worker lives through database outages, so a dead thread means a bug;
its traceback is logged). A database outage is logged once (:class:`~genEval.service.server.outages.Outage`) and the
upkeep goes on when the database is back."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from genEval.service.server.jobs.queue import JobQueue
from genEval.service.server.outages import UNREACHABLE, Outage
from genEval.service.server.worker import Worker

log = logging.getLogger(__name__)


class Supervisor:
    """``workers`` in-process workers made by ``make_worker()`` (a fresh id each), watched and re-made when their
    thread dies, plus the re-queueing of expired jobs in ``queue`` (the only store it uses) every ``every_s`` seconds
    (jobs that expired ``max_attempts`` times fail)."""

    def __init__(
        self, queue: JobQueue, make_worker: Callable[[], Worker], workers: int, max_attempts: int, every_s: float
    ) -> None:
        if not every_s > 0:
            raise ValueError(f"the upkeep interval must be positive, got {every_s!r}.")
        self.queue, self.make_worker = queue, make_worker
        self.max_attempts, self.every_s = int(max_attempts), float(every_s)
        self._stop = threading.Event()
        self.outage = Outage("server upkeep", self._stop)
        self.workers: list[Worker] = []
        self.threads: list[threading.Thread] = []
        self.restarts = 0
        for _ in range(int(workers)):
            self._start_worker()
        self._thread: threading.Thread | None = None

    def _start_worker(self, slot: int | None = None) -> None:
        worker = self.make_worker()
        thread = threading.Thread(target=self._run, args=(worker,), name=f"geneval-worker-{worker.id}", daemon=True)
        if slot is None:
            self.workers.append(worker)
            self.threads.append(thread)
        else:
            self.workers[slot], self.threads[slot] = worker, thread
        thread.start()

    @staticmethod
    def _run(worker: Worker) -> None:
        try:
            worker.run()
        except BaseException:  # the thread ends here; the next tick starts another worker
            log.exception("in-process worker %s died", worker.id)

    def start(self) -> Supervisor:
        self._thread = threading.Thread(target=self._loop, name="geneval-upkeep", daemon=True)
        self._thread.start()
        return self

    def alive(self) -> int:
        """How many in-process worker threads are running."""
        return sum(t.is_alive() for t in self.threads)

    def tick(self) -> None:
        """One round of upkeep: re-make dead workers, re-queue expired jobs."""
        for slot, thread in enumerate(self.threads):
            if not thread.is_alive() and not self._stop.is_set():
                self.restarts += 1
                log.error("in-process worker %s is not running; starting another", self.workers[slot].id)
                self._start_worker(slot)
        try:
            requeued = self.queue.requeue_expired(self.max_attempts)
        except UNREACHABLE as err:
            self.outage.failed(err)
            return
        self.outage.recovered()
        for job_id, status in requeued:
            log.warning("job %s lost its worker (its lease ran out): now %s", job_id, status)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the upkeep must outlive whatever one round meets
                log.exception("server upkeep failed; trying again in %gs", self.every_s)

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop the upkeep and every worker (a running job is handed back), waiting up to ``timeout_s`` for each."""
        self._stop.set()
        for worker in self.workers:
            worker.stop()
        for thread in [*self.threads, *([self._thread] if self._thread else [])]:
            thread.join(timeout=timeout_s)
