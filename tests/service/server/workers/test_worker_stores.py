"""A worker works with the stores it is given (:class:`~genEval.service.server.worker.WorkerStores`: the queue, the
workers store, the standings builder, the finishing use case), not with the whole Database; and the server's upkeep
(:class:`~genEval.service.server.supervisor.Supervisor`) with the queue alone."""

from __future__ import annotations

import dataclasses
import time

from genEval.service.server.database import Database, sqlite_url
from genEval.service.server.supervisor import Supervisor
from genEval.service.server.worker import Worker, WorkerStores
from tests.support.service import record_runner, submit_job, worker_settings


def test_a_worker_finishes_a_job_through_the_finishing_use_case_it_is_given(tmp_path):
    db = Database(sqlite_url(tmp_path / "geneval.db"))
    job = submit_job(db, "alice")
    stores = WorkerStores.of(db, tmp_path, n_boot=20)
    finished: list[str] = []

    def finish(claimed, *args, **kwargs) -> bool:
        finished.append(claimed.id)
        return stores.finish(claimed, *args, **kwargs)

    worker = Worker(dataclasses.replace(stores, finish=finish), tmp_path, record_runner, worker_settings(
        heartbeat_s=0.5, poll_s=0.1, exit_when_idle=True))  # fmt: skip
    assert not hasattr(worker, "db")
    assert worker.run() == 1
    assert finished == [job]
    done = db.jobs.get(job)
    assert done.status == "done" and done.worker_id == worker.id and done.result == {"ran": job}
    assert [w.id for w in db.workers.list()] == [worker.id]  # registered through the workers store it was given
    db.close()


def test_the_upkeep_requeues_a_lost_job_through_the_queue_alone(tmp_path):
    db = Database(sqlite_url(tmp_path / "geneval.db"))
    job = submit_job(db, "bob")
    assert db.queue.claim("gone:1:deadbeef", lease_s=0.01).id == job
    upkeep = Supervisor(db.queue, lambda: None, workers=0, max_attempts=3, every_s=3600)
    time.sleep(0.1)
    upkeep.tick()
    assert db.jobs.get(job).status == "queued"
    db.close()
