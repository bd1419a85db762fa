"""``run.lock``: a lease naming the one process that writes a run directory, which outlives no owner.

A run directory is written by one process at a time, possibly one of many workers on many hosts sharing a
filesystem. The lock file holds its owner's identity and a lease:

* ``host``, ``pid``, ``token`` (random, written at creation: a new process that happens to get the old pid, such as
  pid 1 of a restarted container, is never mistaken for the owner), ``started``, ``heartbeat`` and ``lease_s``;
* ``boot_id`` and ``pidns`` (Linux): the kernel boot and pid namespace the pid belongs to, and ``proc_start`` (the
  process's start time in clock ticks), so that a pid is only ever checked where it means the same process.

The owner renews its lease from a background thread every ``lease_s / 4`` (at most every 30 s) while it holds
the lock, by touching its own lock file through the descriptor it keeps open (``futimens``): the lock's heartbeat is
the file's change time (``st_ctime``, which the filesystem sets and no one can set back or ahead), and its contents
never change once written. A heartbeat therefore cannot overwrite anyone's lock: if another process took the lock
over meanwhile, the name ``run.lock`` holds the new owner's file and the touch lands on the old one, which no one
reads (docs/scale-out.md: a heartbeat that read the lock, found its token and then renamed its own file over it,
replaced the lock of the process that had taken over between the two). Another process judges a lock it finds:

* **stale** when its heartbeat is older than its lease (from any host: the owner stopped, or its machine was lost);
  when its heartbeat is more than :data:`FUTURE_TOLERANCE_S` in the future (a clock running ahead, or a forged
  lock, would otherwise block a takeover for as long as it is ahead) and the file itself has not been rewritten for
  a lease (a live owner rewrites it every quarter lease, whatever its clock says), with a warning naming the skew;
  when it is empty or unreadable (a full disk or a crash while it was created); or, on the same host, kernel boot
  and pid namespace, when its process is gone or its pid now belongs to another process;
* **live** otherwise: it is refused with the owner named (:class:`RunDirectoryBusy`), after waiting up to
  ``wait_s`` seconds for it to become stale (a re-queued service job waits for the lease of the worker that died).

Taking a lock is atomic, so two processes never both own one:

* a new lock is written to a temporary file and hard-linked to ``run.lock`` (``link`` fails when the name exists:
  create-exclusive with the content already in place, so nobody ever reads a half-written lock of ours);
* a stale lock is taken over by the one process that creates ``run.lock.takeover-<its token>.<k>`` first (again
  create-exclusive); holding that marker, it checks that ``run.lock`` still holds the stale token and renames its
  own lock file over it. Tokens are never reused, so once replaced a stale lock cannot be replaced a second time.
  A marker whose holder died in the microseconds between creating it and renaming (older than
  :data:`MARKER_TIMEOUT_S`) is passed over for the next ``k``. Nothing is ever deleted and then created.

A takeover re-judges the lock once it holds the marker (a lock renewed meanwhile is left alone). Releasing removes
the lock only while ``run.lock`` is still this process's file; a heartbeat that finds another file there marks the
lock :attr:`RunLock.lost` (this process was stalled past its lease and someone took over), and the run writer stops
writing. A lock written by a genEval from before (a ``heartbeat`` it rewrote) is still judged by that field. Clocks
of hosts sharing a directory should be NTP-synced (the lease is minutes; the skew should be seconds).

The lease is ``GENEVAL_LOCK_LEASE_S`` seconds (default :data:`DEFAULT_LEASE_S`); :func:`configure` sets the lease,
the wait and the host name this process uses (a service worker uses its own lease and ``host``).
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import json
import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from genEval.fileio import default_file_mode

log = logging.getLogger(__name__)

LOCK = "run.lock"
#: Default lease: a lock whose heartbeat is older than this may be taken over from any host.
DEFAULT_LEASE_S = 180.0
ENV_LEASE = "GENEVAL_LOCK_LEASE_S"
#: A takeover marker older than this belongs to a process that died mid-takeover; the next one is used.
MARKER_TIMEOUT_S = 30.0
#: A heartbeat further in the future than this is suspect (a clock ahead of ours, or a forged lock): the lock is then
#: judged by when its file was last rewritten instead (see :func:`stale_reason`).
FUTURE_TOLERANCE_S = 10.0
_NO_LINK = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK}


class RunDirectoryBusy(FileExistsError):
    """Another live process is writing this run directory (or this process lost its lock to another)."""


@dataclass
class _Defaults:
    lease_s: float | None = None
    wait_s: float = 0.0
    host: str | None = None


_DEFAULTS = _Defaults()
_HELD: set[str] = set()  # tokens of the locks this process holds


def configure(*, lease_s: float | None = None, wait_s: float | None = None, host: str | None = None) -> None:
    """Set this process's lock settings: the lease its locks declare, how long to wait for a live lock to go
    stale before refusing, and the host name its locks give (None leaves a setting as it is)."""
    if lease_s is not None:
        _DEFAULTS.lease_s = _check_lease(lease_s, "lease_s")
    if wait_s is not None:
        _DEFAULTS.wait_s = max(0.0, float(wait_s))
    if host is not None:
        _DEFAULTS.host = str(host)


def _check_lease(value: Any, what: str) -> float:
    try:
        lease = float(value)
    except (TypeError, ValueError):
        lease = -1.0
    if not lease > 0:
        raise ValueError(f"{what} must be a positive number of seconds (the run.lock lease), got {value!r}; e.g. 180.")
    return lease


def lease_seconds() -> float:
    """The lease of this process's locks: :func:`configure`'s, else ``GENEVAL_LOCK_LEASE_S``, else the default."""
    if _DEFAULTS.lease_s is not None:
        return _DEFAULTS.lease_s
    env = os.environ.get(ENV_LEASE)
    return DEFAULT_LEASE_S if not env else _check_lease(env, ENV_LEASE)


def host_name() -> str:
    return _DEFAULTS.host or socket.gethostname()


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _proc_start(pid: int) -> str | None:
    """Start time of process ``pid`` (clock ticks since boot; Linux), which tells a reused pid apart."""
    stat = _read_text(f"/proc/{pid}/stat")
    if not stat:
        return None
    try:
        return stat.rsplit(")", 1)[1].split()[19]
    except IndexError:
        return None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


@dataclass(frozen=True)
class LockOwner:
    """What ``run.lock`` says about its owner (see the module docstring)."""

    host: str
    pid: int
    token: str
    started: float
    heartbeat: float
    lease_s: float
    boot_id: str | None = None
    pidns: str | None = None
    proc_start: str | None = None
    beats: bool = True  # False: a lock of an older genEval, which never refreshes a heartbeat
    file_time: float | None = None  # when the lock file was last written (its mtime), where it was read from a file
    touch: bool = True  # the heartbeat is the file's change time (False: a lock that rewrote a heartbeat field)

    @classmethod
    def me(cls, token: str, lease_s: float, started: float | None = None) -> LockOwner:
        now = time.time()
        return cls(
            host=host_name(),
            pid=os.getpid(),
            token=token,
            started=now if started is None else started,
            heartbeat=now,
            lease_s=lease_s,
            boot_id=_read_text("/proc/sys/kernel/random/boot_id"),
            pidns=_pid_namespace(),
            proc_start=_proc_start(os.getpid()),
        )

    @classmethod
    def parse(cls, raw: bytes, mtime: float | None = None, ctime: float | None = None) -> LockOwner | None:
        """The owner a lock file names, or None when it is empty, not JSON or lacks the owner's identity. Its
        heartbeat is the file's change time ``ctime`` (a lock that says ``"beat": "touch"``), else the ``heartbeat``
        it holds; a lock of an older genEval (pid, host, since) has none: the file's time ``mtime`` stands for it."""
        try:
            d = json.loads(raw.decode("utf-8"))
            pid, host = int(d["pid"]), str(d["host"])
        except (UnicodeDecodeError, ValueError, KeyError, TypeError):
            return None
        since = float(d.get("started") or d.get("since") or mtime or 0.0)
        touch = d.get("beat") == "touch" and ctime is not None
        return cls(
            host=host,
            pid=pid,
            token=str(d.get("token") or ""),
            started=since,
            heartbeat=float(ctime) if touch else float(d.get("heartbeat") or mtime or since),
            touch=touch,
            beats="heartbeat" in d,
            lease_s=float(d.get("lease_s") or DEFAULT_LEASE_S),
            boot_id=d.get("boot_id"),
            pidns=d.get("pidns"),
            proc_start=d.get("proc_start"),
            file_time=ctime if touch else mtime,
        )

    def to_bytes(self, touch: bool = True) -> bytes:
        """The lock file's contents; ``touch`` False: as an older genEval wrote it (its ``heartbeat``
        field is the heartbeat, rewritten by its owner)."""
        fields = {k: v for k, v in asdict(self).items() if k not in ("beats", "file_time", "touch")}
        head = {"version": 2, "beat": "touch"} if touch else {"version": 1}
        return (json.dumps({**head, **fields}, indent=1) + "\n").encode()

    def describe(self, now: float | None = None) -> str:
        age = (time.time() if now is None else now) - self.heartbeat
        return (
            f"process {self.pid} on host {self.host!r} (lock taken {_ago(now, self.started)}, last heartbeat "
            f"{age:.0f}s ago, lease {self.lease_s:g}s)"
        )

    def same_machine(self) -> bool:
        """Whether this lock's pid can be checked here: same host name, kernel boot and pid namespace."""
        me = LockOwner.me("", 1.0)
        if self.host != me.host:
            return False
        # a lock of an older genEval records neither: its host name is all there is to go by
        return all(
            theirs is None or mine == theirs for mine, theirs in ((me.boot_id, self.boot_id), (me.pidns, self.pidns))
        )


def _ago(now: float | None, then: float) -> str:
    return f"{(time.time() if now is None else now) - then:.0f}s ago"


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_reason(owner: LockOwner | None, now: float | None = None) -> str | None:
    """Why a lock may be taken over (None: its owner is alive, or may be). ``owner`` None: unreadable lock."""
    now = time.time() if now is None else now
    if owner is None:
        return "it is empty or unreadable (left by a full disk or a crash while it was written)"
    here = owner.same_machine()
    ahead = owner.heartbeat - now
    if ahead > FUTURE_TOLERANCE_S and owner.file_time is not None:  # a skewed clock: trust the file's time instead
        quiet = now - owner.file_time
        if quiet > owner.lease_s:
            return (
                f"its heartbeat is {ahead:.0f}s in the future (the clock of host {owner.host!r} is {ahead:.0f}s ahead "
                f"of this one's, or the lock was forged), and the file has not been rewritten for {quiet:.0f}s, longer "
                f"than its lease of {owner.lease_s:g}s"
            )
    elif (owner.beats or not here) and now - owner.heartbeat > owner.lease_s:  # an older genEval's lock: its pid
        return f"its heartbeat is {now - owner.heartbeat:.0f}s old, older than its lease of {owner.lease_s:g}s"
    if owner.token and owner.token in _HELD:
        return None  # this very process holds it (through another writer)
    if not here:
        return None
    if owner.pid == os.getpid():
        return f"its pid {owner.pid} is now this process's (a restart reused it); its token is not this process's"
    if not _alive(owner.pid):
        return f"process {owner.pid} is no longer running"
    if owner.proc_start is not None and _proc_start(owner.pid) not in (None, owner.proc_start):
        return f"pid {owner.pid} now belongs to another process (started later)"
    return None


def _write_new(path: Path, data: bytes) -> Path:
    """``data`` in a new temporary file next to ``path`` (fsynced), for linking or renaming into place."""
    tmp = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, default_file_mode())
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _replace(path: Path, data: bytes) -> None:
    """Put ``data`` at ``path`` in one rename (readers see the old lock or the new one, never half of one)."""
    tmp = _write_new(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def create_exclusive(path: Path, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists (False then). The content is complete before the name
    appears (a hard link of a finished temporary file); filesystems without hard links get ``O_EXCL``."""
    tmp = _write_new(path, data)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError as err:
        if err.errno not in _NO_LINK:
            raise
    finally:
        tmp.unlink(missing_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, default_file_mode())
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return True


def _read(path: Path) -> tuple[bytes, os.stat_result] | None:
    """The bytes and status of ``path``, or None when it does not exist."""
    try:
        with open(path, "rb") as fh:
            return fh.read(), os.fstat(fh.fileno())
    except FileNotFoundError:
        return None


def _owner(raw: bytes, st: os.stat_result) -> LockOwner | None:
    """The owner of a lock file read as ``raw`` with status ``st`` (its times are the heartbeat)."""
    return LockOwner.parse(raw, st.st_mtime, st.st_ctime)


def _generation(raw: bytes, st: os.stat_result) -> str:
    """The name of one lock file's life: its token, or (an unreadable lock, or one of an older genEval) a digest of
    its bytes, inode and time."""
    owner = LockOwner.parse(raw)
    if owner is not None and owner.token:
        return owner.token
    return "x" + hashlib.sha256(raw + f"{st.st_ino}:{st.st_mtime_ns}".encode()).hexdigest()[:24]


class RunLock:
    """The lock of one run directory: :meth:`acquire`, then :meth:`release` (see the module docstring).

    ``lease_s``: the lease this lock declares (default :func:`lease_seconds`); ``wait_s``: how long
    :meth:`acquire` waits for a live lock to go stale before raising :class:`RunDirectoryBusy` (default: the
    :func:`configure`\\ d wait, 0).
    """

    def __init__(self, directory: str | Path, *, lease_s: float | None = None, wait_s: float | None = None) -> None:
        self.dir = Path(directory)
        self.path = self.dir / LOCK
        self.lease_s = lease_seconds() if lease_s is None else _check_lease(lease_s, "lease_s")
        self.wait_s = _DEFAULTS.wait_s if wait_s is None else max(0.0, float(wait_s))
        self.token = secrets.token_hex(16)
        self.owner: LockOwner | None = None
        self.lost_to: LockOwner | None = None
        self._lost = False
        self._fd: int | None = None  # this lock's own file, open: the heartbeat touches it, never the name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def lost(self) -> bool:
        """Whether another process took this lock over (this process stalled past its lease)."""
        return self._lost

    @property
    def beat_s(self) -> float:
        return min(30.0, max(0.05, self.lease_s / 4))

    # ------------------------------------------------------------------------------------------ taking
    def acquire(self) -> LockOwner | None:
        """Take the lock (creating it, or taking over a stale one with a warning naming its old owner). Returns
        the previous owner when a stale lock was taken over. Raises :class:`RunDirectoryBusy` naming the owner of
        a live lock that stayed live for ``wait_s`` seconds."""
        deadline = time.monotonic() + self.wait_s
        waited = False
        while True:
            found = _read(self.path)
            if found is None:
                if self._create():
                    return None
                continue
            raw, st = found
            owner = _owner(raw, st)
            if owner is None and not waited:  # a lock being created by a filesystem without hard links
                time.sleep(0.05)
                waited = True
                continue
            why = stale_reason(owner)
            if why is None:
                left = deadline - time.monotonic()
                if left > 0:
                    time.sleep(min(left, self.beat_s, 1.0))
                    continue
                raise RunDirectoryBusy(self._busy_message(owner))
            taken = self._take_over(_generation(raw, st))
            if taken is None:
                continue  # another process took it first (or is taking it): look again
            who = "an unreadable lock" if owner is None else f"the stale lock of {owner.describe()}"
            log.warning("run directory %s: taking over %s: %s", self.dir, who, why)
            return owner

    def _busy_message(self, owner: LockOwner) -> str:
        if owner.token in _HELD:
            return (
                f"run directory '{self.dir}' is already being written by this process (another writer holds its "
                f"{LOCK}); finish or close that run first, or use another directory."
            )
        now = time.time()
        future = owner.heartbeat - now > FUTURE_TOLERANCE_S and owner.file_time is not None
        stale_in = owner.lease_s - (now - (owner.file_time if future else owner.heartbeat))
        return (
            f"run directory '{self.dir}' is being written by {owner.describe()} (its {LOCK}). Wait for it, or use "
            f"another hydra.run.dir; if that process has stopped, its lock is taken over automatically once its "
            f"heartbeat is older than its lease (in {max(0.0, stale_in):.0f}s)."
        )

    def _mine(self) -> LockOwner:
        return LockOwner.me(self.token, self.lease_s, started=self.owner.started if self.owner else None)

    def _create(self) -> bool:
        me = self._mine()
        if not create_exclusive(self.path, me.to_bytes()):
            return False
        self._held(me)
        return True

    def _take_over(self, generation: str) -> bool | None:
        """Replace the stale lock of ``generation`` holding its takeover marker; None when another process holds
        the marker or already replaced that lock."""
        for k in itertools.count():
            marker = self.dir / f"{LOCK}.takeover-{generation}.{k}"
            me = self._mine()
            if create_exclusive(marker, me.to_bytes()):
                break
            held = _read(marker)
            if held is None:
                continue  # cleaned up by the winner just now: that generation is gone
            holder = LockOwner.parse(held[0])
            started = holder.started if holder is not None else held[1].st_mtime
            if time.time() - started < MARKER_TIMEOUT_S:
                time.sleep(0.005)
                return None
        won = False
        try:
            current = _read(self.path)
            if current is None or _generation(*current) != generation or stale_reason(_owner(*current)) is None:
                return None  # replaced, or renewed since it was judged stale: not ours to take
            _replace(self.path, me.to_bytes())
            won = True
            self._held(me)
            return True
        finally:
            if won:
                for old in self.dir.glob(f"{LOCK}.takeover-{generation}.*"):
                    old.unlink(missing_ok=True)
            else:
                marker.unlink(missing_ok=True)

    def _held(self, me: LockOwner) -> None:
        self.owner = me
        fd = os.open(self.path, os.O_RDONLY)
        with open(fd, "rb", closefd=False) as fh:
            if (LockOwner.parse(fh.read()) or me).token != self.token:  # replaced already: not ours after all
                os.close(fd)
                self._lost = True
                return
        self._fd = fd
        _HELD.add(self.token)
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name=f"geneval-lock-{self.dir.name}", daemon=True)
        self._thread.start()

    # -------------------------------------------------------------------------------------- holding
    def _beat(self) -> None:
        while not self._stop.wait(self.beat_s):
            try:
                if not self.refresh():
                    return
            except OSError as err:  # a full disk or a lost mount: keep trying, the lease has slack
                log.warning("run directory %s: could not refresh %s (%s)", self.dir, LOCK, err)

    def refresh(self) -> bool:
        """Renew the lease: touch this lock's own file (see the module docstring); False (and :attr:`lost`) when
        ``run.lock`` is no longer that file (another process took it over, or it was removed)."""
        if self.owner is None or self._lost or self._fd is None:
            return False
        found = _read(self.path)
        mine = os.fstat(self._fd)
        if found is None or (found[1].st_dev, found[1].st_ino) != (mine.st_dev, mine.st_ino):
            current = None if found is None else _owner(*found)
            self._lost, self.lost_to = True, current
            log.error(
                "run directory %s: this process lost its %s to %s; it stops writing there",
                self.dir,
                LOCK,
                "nobody (the lock was removed)" if current is None else current.describe(),
            )
            return False
        try:
            os.utime(self._fd)  # this file only: had run.lock been replaced since, the touch lands on the old one
        except (NotImplementedError, TypeError):  # no futimens here: the name (a touch never changes an owner)
            os.utime(self.path)
        self.owner = _owner(*(_read(self.path) or found)) or self.owner
        return True

    def check(self) -> None:
        """Raise :class:`RunDirectoryBusy` when this process lost the lock (it must stop writing)."""
        if self._lost:
            who = "a process that found it stale" if self.lost_to is None else self.lost_to.describe()
            raise RunDirectoryBusy(
                f"run directory '{self.dir}': this process's {LOCK} was taken over by {who}, because this "
                f"process's heartbeat stopped for longer than its lease ({self.lease_s:g}s). It stops writing so "
                "that two processes never write one directory; rerun it when the other one is done."
            )

    def release(self) -> None:
        """Stop the heartbeat and remove the lock if ``run.lock`` is still this process's file."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None
        _HELD.discard(self.token)
        fd, self._fd = self._fd, None
        if self.owner is None or fd is None:
            self.owner = None
            return
        self.owner = None
        try:
            mine = os.fstat(fd)
            found = _read(self.path)
            if found is not None and (found[1].st_dev, found[1].st_ino) == (mine.st_dev, mine.st_ino):
                self.path.unlink(missing_ok=True)
        finally:
            os.close(fd)
