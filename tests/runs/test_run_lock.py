"""run.lock is a lease (genEval/runs/lock.py): a live owner is refused by name, a stale one is taken over from any
host with a warning naming it, an unreadable lock is stale, a reused pid is not the owner, the heartbeat keeps a
long run live, and two processes racing for one stale lock never both win.

"Another host" is a lock file that names another host: its pid cannot be checked here, only its heartbeat.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from genEval import evaluate
from genEval.runs import lock as run_lock
from genEval.runs.lock import LOCK, LockOwner, RunDirectoryBusy, RunLock
from tests.support.toys import LinearClassifier, ModelOracle, SigmoidGenerator, toy_data


def _owner(**kw) -> LockOwner:
    """A lock owner as another process would write it (fresh heartbeat, a token of its own)."""
    base = LockOwner.me("f" * 32, 60.0)
    return replace(base, **kw)


def _write(d: Path, owner: LockOwner | bytes) -> None:
    """A lock file that states its heartbeat (as genEval wrote them before issue 41, and as a forger would: the
    heartbeat of today's locks is the file's change time, which no one can set)."""
    d.mkdir(parents=True, exist_ok=True)
    (d / LOCK).write_bytes(owner if isinstance(owner, bytes) else owner.to_bytes(touch=False))


def _token(d: Path) -> str:
    return json.loads((d / LOCK).read_text())["token"]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_live_lock_on_another_host_is_refused_naming_its_owner(tmp_path):
    _write(tmp_path, _owner(host="node-a", pid=4242, boot_id="other", pidns=None))
    with pytest.raises(RunDirectoryBusy, match=r"being written by process 4242 on host 'node-a'.*taken over auto"):
        RunLock(tmp_path).acquire()
    assert _token(tmp_path) == "f" * 32  # untouched


def test_a_lock_whose_heartbeat_is_older_than_its_lease_is_taken_over_from_any_host(tmp_path, caplog):
    old = time.time() - 200
    _write(tmp_path, _owner(host="node-a", pid=4242, boot_id="other", heartbeat=old, started=old - 50))
    lock = RunLock(tmp_path)
    previous = lock.acquire()
    try:
        assert previous.host == "node-a" and previous.pid == 4242
        assert _token(tmp_path) == lock.token
        assert "taking over the stale lock of process 4242 on host 'node-a'" in caplog.text
        assert "heartbeat is 200s old, older than its lease of 60s" in caplog.text
    finally:
        lock.release()
    assert not (tmp_path / LOCK).exists()
    assert not list(tmp_path.glob(f"{LOCK}.*")), "takeover markers and temporary files are cleaned up"


def test_a_heartbeat_from_the_future_is_suspect_and_taken_over_after_one_lease(tmp_path, caplog):
    """Issue 37: a lock stamped an hour ahead (a clock running ahead, or a forged file) blocked a takeover for 3,775 s.
    Past the tolerance it is judged by when its file was last written: taken over one lease later, naming the skew."""
    ahead = time.time() + 3600
    _write(tmp_path, _owner(host="node-a", pid=4242, boot_id="other", heartbeat=ahead, lease_s=0.5))
    with pytest.raises(RunDirectoryBusy, match="taken over automatically"):
        RunLock(tmp_path).acquire()  # at once: the file was written a moment ago
    t0 = time.monotonic()
    lock = RunLock(tmp_path, wait_s=30)
    previous = lock.acquire()
    try:
        assert previous.pid == 4242 and time.monotonic() - t0 < 10
        skew = r"heartbeat is 3\d{3}s in the future \(the clock of host 'node-a' is 3\d{3}s ahead"
        assert re.search(skew, caplog.text)
        assert "not been rewritten for" in caplog.text
    finally:
        lock.release()


def test_a_live_owner_whose_clock_runs_ahead_keeps_its_lock(tmp_path):
    """The file's time is the judge, not our clock against theirs: an owner that keeps rewriting its lock (every quarter
    lease) keeps it, however far ahead its heartbeat is."""
    owner = _owner(host="node-a", pid=4242, boot_id="other", heartbeat=time.time() + 3600, lease_s=0.5)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(0.1):
            _write(tmp_path, owner)

    _write(tmp_path, owner)
    beating = threading.Thread(target=beat, daemon=True)
    beating.start()
    try:
        with pytest.raises(RunDirectoryBusy, match="process 4242 on host 'node-a'"):
            RunLock(tmp_path, wait_s=2).acquire()
    finally:
        stop.set()
        beating.join()
    assert _token(tmp_path) == "f" * 32


@pytest.mark.parametrize("content", [b"", b"{", b"null", b'{"pid": 1}', b"\x00\x00\x00"])
def test_an_empty_or_unreadable_lock_is_stale_not_an_owner_called_none(tmp_path, caplog, content):
    _write(tmp_path, content)  # what a full disk at start, or a crash while the lock was written, leaves
    lock = RunLock(tmp_path)
    assert lock.acquire() is None
    lock.release()
    assert "taking over an unreadable lock" in caplog.text and "None" not in caplog.text


def test_a_dead_process_on_this_host_leaves_a_stale_lock(tmp_path, caplog):
    pid = _dead_pid()
    _write(tmp_path, _owner(pid=pid))
    lock = RunLock(tmp_path)
    lock.acquire()
    lock.release()
    assert f"process {pid} is no longer running" in caplog.text


def test_a_reused_pid_is_not_mistaken_for_the_owner(tmp_path, caplog):
    # A container restarted as pid 1 (here: this very process) finds the lock its predecessor left: same pid, but
    # not its token, so the owner is gone and the lock is taken over at once.
    _write(tmp_path, _owner(pid=os.getpid(), proc_start="1"))
    lock = RunLock(tmp_path)
    lock.acquire()
    lock.release()
    assert "is now this process's (a restart reused it)" in caplog.text
    # A live process that got the owner's pid later (another start time) is not the owner either ...
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _write(tmp_path / "b", _owner(pid=sleeper.pid, proc_start="1"))
        other = RunLock(tmp_path / "b")
        other.acquire()
        other.release()
        assert f"pid {sleeper.pid} now belongs to another process" in caplog.text
        # ... while the process that really wrote the lock is the owner.
        _write(tmp_path / "c", _owner(pid=sleeper.pid, proc_start=run_lock._proc_start(sleeper.pid)))
        with pytest.raises(RunDirectoryBusy, match=rf"process {sleeper.pid} on host"):
            RunLock(tmp_path / "c").acquire()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_pid_of_another_pid_namespace_is_judged_by_its_heartbeat_only(tmp_path):
    # pid 1 of another container on this host: nothing here says whether it runs, so its lease decides
    _write(tmp_path, _owner(pid=1, pidns="pid:[1]"))
    with pytest.raises(RunDirectoryBusy, match="process 1 on host"):
        RunLock(tmp_path).acquire()
    _write(tmp_path, _owner(pid=1, pidns="pid:[1]", heartbeat=time.time() - 61))
    lock = RunLock(tmp_path)
    lock.acquire()
    lock.release()


def test_the_heartbeat_keeps_a_long_run_live_and_a_waiting_writer_gets_it_once_stale(tmp_path):
    owner = RunLock(tmp_path, lease_s=0.4)
    owner.acquire()
    written, first = (tmp_path / LOCK).read_bytes(), (tmp_path / LOCK).stat().st_ctime
    time.sleep(1.0)  # 2.5 leases: without the heartbeat the lock would be stale
    assert (tmp_path / LOCK).stat().st_ctime > first  # the heartbeat touches the file ...
    assert (tmp_path / LOCK).read_bytes() == written  # ... and never rewrites it
    with pytest.raises(RunDirectoryBusy):
        RunLock(tmp_path).acquire()
    owner._stop.set()  # the owner hangs (its heartbeat stops) but does not release
    owner._thread.join()
    waiter = RunLock(tmp_path, wait_s=5)
    t0 = time.monotonic()
    waiter.acquire()  # waits for the lease to run out, then takes over
    assert time.monotonic() - t0 < 4
    assert not owner.refresh() and owner.lost  # the stalled owner learns it lost the lock ...
    with pytest.raises(RunDirectoryBusy, match="was taken over by"):
        owner.check()  # ... and must stop writing
    owner.release()  # releasing a lost lock leaves the new owner's alone
    assert _token(tmp_path) == waiter.token
    waiter.release()
    assert not (tmp_path / LOCK).exists()


def test_a_run_refuses_a_live_lock_and_releases_its_own(tmp_path):
    roles = dict(
        classifier=LinearClassifier(seed=0), generator=SigmoidGenerator(), oracle=ModelOracle(LinearClassifier(seed=1))
    )
    search = {"budget": 2, "step_size": 0.3}
    _write(tmp_path, _owner(host="node-a", boot_id="other"))
    with pytest.raises(RunDirectoryBusy, match="on host 'node-a'"):
        evaluate(data=toy_data(8), search=search, seed=0, output=tmp_path, **roles)
    _write(tmp_path, _owner(host="node-a", boot_id="other", heartbeat=time.time() - 3600))
    evaluate(data=toy_data(8), search=search, seed=0, output=tmp_path, **roles)
    assert (tmp_path / "results.json").is_file() and not (tmp_path / LOCK).exists()


# ---------------------------------------------------------------------------------------------- the race
ROUNDS = 210


def _racer(root: str, rounds: int, barrier, start, results) -> None:
    """One of two processes taking the stale lock of each round's directory at the same instant: both spin until
    the start time the test set, then one of them lags by a random fraction of a millisecond, so that every
    interleaving of two takeovers (each a few hundred microseconds) comes up."""
    import random

    from genEval.runs.lock import RunDirectoryBusy, RunLock

    rng = random.Random(os.getpid())
    for r in range(rounds):
        barrier.wait()
        lock = RunLock(Path(root) / f"r{r}", lease_s=60)
        go = start.value + rng.random() * 0.0015
        while time.time() < go:
            pass
        try:
            lock.acquire()
            results.put((r, lock.token))
        except RunDirectoryBusy:
            results.put((r, None))
        barrier.wait()  # the test has read the lock file
        lock.release()


def _stale(kind: int, dead: int) -> LockOwner | bytes:
    if kind == 0:
        return _owner(pid=dead)  # a dead process on this host
    if kind == 1:
        return _owner(host="node-a", boot_id="other", heartbeat=time.time() - 600)  # another host, lease over
    return b""  # an empty lock (a full disk at start)


def test_two_processes_racing_for_a_stale_lock_never_both_win(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    barrier, start, results = ctx.Barrier(3), ctx.Value("d", 0.0), ctx.Queue()
    racers = [ctx.Process(target=_racer, args=(str(tmp_path), ROUNDS, barrier, start, results)) for _ in range(2)]
    for p in racers:
        p.start()
    dead, double, none, wrong = _dead_pid(), 0, 0, 0
    try:
        for r in range(ROUNDS):
            _write(tmp_path / f"r{r}", _stale(r % 3, dead))
            start.value = time.time() + 0.02
            barrier.wait(timeout=120)
            tokens = [results.get(timeout=120)[1] for _ in range(2)]
            winners = [t for t in tokens if t is not None]
            double += len(winners) > 1
            none += not winners
            wrong += bool(winners) and _token(tmp_path / f"r{r}") != winners[0]
            barrier.wait(timeout=120)
    finally:
        for p in racers:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert (double, none, wrong) == (0, 0, 0), f"{ROUNDS} races: {double} double owners, {none} without owner"
    assert all(p.exitcode == 0 for p in racers)


def test_a_lock_of_an_older_genEval_is_judged_by_its_process_on_this_host(tmp_path):
    # pid and host only, no heartbeat: an older genEval that may still be writing; its process decides, however old
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _write(tmp_path, json.dumps({"pid": sleeper.pid, "host": LockOwner.me("", 1).host}).encode())
        hour_ago = time.time() - 3600
        os.utime(tmp_path / LOCK, (hour_ago, hour_ago))
        with pytest.raises(RunDirectoryBusy, match=rf"process {sleeper.pid} on host"):
            RunLock(tmp_path).acquire()
    finally:
        sleeper.kill()
        sleeper.wait()
    lock = RunLock(tmp_path)
    lock.acquire()  # its process is gone now
    lock.release()
    _write(tmp_path, json.dumps({"pid": 4242, "host": "node-a"}).encode())  # on another host: its file's age
    os.utime(tmp_path / LOCK, (time.time() - 3600, time.time() - 3600))
    lock = RunLock(tmp_path)
    assert lock.acquire().host == "node-a"
    lock.release()


def test_a_stalled_heartbeat_never_overwrites_the_lock_another_process_took_over_meanwhile(tmp_path, monkeypatch):
    """Issue 41 (X14): an owner stalled past its lease read its lock (its token, still), then the lock was taken over,
    then its heartbeat wrote its own lock over the new owner's and kept it; the new owner gave up. Now a heartbeat
    touches its own file only, so the lock taken over meanwhile stays the new owner's, and the stalled one learns it
    lost."""
    old = RunLock(tmp_path, lease_s=0.3)
    old.acquire()
    old._stop.set()  # its heartbeat thread stalls ...
    old._thread.join()
    time.sleep(0.6)  # ... past its lease
    new = RunLock(tmp_path, lease_s=30)
    real, armed = run_lock._read, [True]

    def stalled(path):  # the takeover lands between the stalled heartbeat's read of the lock and its write
        found = real(path)
        if armed.pop() if armed else False:
            new.acquire()
        return found

    monkeypatch.setattr(run_lock, "_read", stalled)
    old.refresh()
    monkeypatch.undo()
    try:
        assert _token(tmp_path) == new.token  # not overwritten
        assert new.refresh() and not new.lost
        assert not old.refresh() and old.lost
    finally:
        old.release()
        new.release()
    assert not (tmp_path / LOCK).exists()


def test_a_lock_whose_owner_stopped_touching_it_goes_stale_by_its_file_time(tmp_path):
    """Today's locks carry no heartbeat to forge: it is the file's change time. A lock left by an owner whose
    heartbeat stopped (on any host) is taken over once that time is older than the lease."""
    owner = RunLock(tmp_path, lease_s=0.3)
    owner.acquire()
    owner._stop.set()
    owner._thread.join()
    found = LockOwner.parse((tmp_path / LOCK).read_bytes(), ctime=(tmp_path / LOCK).stat().st_ctime)
    assert found.touch and found.heartbeat == (tmp_path / LOCK).stat().st_ctime
    waiter = RunLock(tmp_path, wait_s=5)
    waiter.acquire()
    try:
        assert _token(tmp_path) == waiter.token and not owner.refresh()
    finally:
        waiter.release()
        owner.release()
