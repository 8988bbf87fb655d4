"""Writer leases: at most one live job writes a table.

A job that writes tables (the CDC ingest its build tables; a join its output and pending
tables) first takes a *writer lease* on each of them: a small JSON file
``<table>/_lakehouse/writer-lease.json`` (Delta readers and ``VACUUM`` ignore paths that
start with ``_``) naming the job (command, pipeline id, query name, host, process id,
checkpoint, start time) and carrying a heartbeat that the running job refreshes.

Contract:

* **Exclusive start.** :func:`acquire` creates the lease files atomically (``O_EXCL`` on
  local paths). A lease that another job still holds (heartbeat younger than its timeout)
  makes :func:`acquire` raise :class:`~lakehouse.errors.WriterLeaseError` naming that job;
  nothing is written and no lease of the set is kept.
* **Dead holders.** A lease whose heartbeat is older than its timeout is stale and is taken
  over. A lease held by a process of *this* machine that no longer exists (a SIGKILLed job)
  is stale at once. A lease held by a query of *this* process that has stopped is too.
* **Explicit take-over.** ``take_over=True`` takes even a live lease (the operator says the
  other job is gone, or must give way). The job that lost it stops at its next micro-batch
  (see the fence below) instead of writing.
* **Fence.** :meth:`WriterLease.check` runs before every micro-batch: when a lease file no
  longer names this job, it raises :class:`~lakehouse.errors.WriterLeaseError` and the batch
  writes nothing. It narrows, but cannot close, the window of a take-over during a batch:
  that is what Delta's optimistic concurrency and the application transaction ids cover
  (see :mod:`lakehouse.delta.write`).
* **Release.** The lease files are deleted when the query stops (the watcher thread sees it
  inactive) or the process exits normally; never when they already name another job.

Object stores offer no ``O_EXCL``; there the create is check-then-write and two jobs started
within the same moment can both believe they hold the lease until the fence stops one of
them at its first batch.

Dead-letter tables are not leased: they are append-only, every row names its pipeline, and
an ingest and a join may share one.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from lakehouse.errors import WriterLeaseError
from lakehouse.storage import filesystem, local_path

#: Directory inside a table that holds lakehouse's own files (ignored by Delta readers).
LEASE_DIR = "_lakehouse"
#: The lease file's name inside :data:`LEASE_DIR`.
LEASE_FILE = "writer-lease.json"
#: Default lease timeout: a lease whose heartbeat is older is stale.
DEFAULT_TIMEOUT_MS = 60_000


def _now_ms() -> int:
    return int(time.time() * 1000)


def _machine_id() -> str:
    """This machine: host name plus the kernel's boot id (a reboot makes every pid stale)."""
    boot = ""
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as fh:
        boot = fh.read().strip()
    return f"{socket.gethostname()}/{boot}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


def _format_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True, kw_only=True)
class LeaseRecord:
    """What a lease file holds: the holder's identity and its last heartbeat.

    Attributes:
        token: unique id of this holding (one per :func:`acquire`).
        command: ``ingest`` or ``join``.
        pipeline_id: the pipeline's id (its Delta transaction app id).
        query_name: the streaming query's name.
        host: host name of the holder's machine.
        machine: host name and boot id; process ids are compared only on the same machine.
        pid: the holder's process id.
        checkpoint: the holder's checkpoint location.
        started_at_ms: when the lease was taken (epoch ms).
        heartbeat_ms: last heartbeat (epoch ms).
        timeout_ms: the lease is stale when ``heartbeat_ms`` is older than this.
    """

    token: str
    command: str
    pipeline_id: str
    query_name: str
    host: str
    machine: str
    pid: int
    checkpoint: str
    started_at_ms: int
    heartbeat_ms: int
    timeout_ms: int

    def describe(self) -> str:
        """The holder, for humans: ``ingest 'rates' (pid 4242 on host h1, checkpoint ...)``."""
        return (
            f"{self.command} {self.pipeline_id!r} (query {self.query_name!r}, pid {self.pid} on "
            f"host {self.host}, checkpoint {self.checkpoint}, started "
            f"{_format_ms(self.started_at_ms)}, last heartbeat {_format_ms(self.heartbeat_ms)})"
        )

    def to_json(self) -> bytes:
        """The file contents."""
        return json.dumps(asdict(self), indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes) -> LeaseRecord:
        """Parse a lease file. Raises ValueError (or KeyError/TypeError) when it is not one."""
        raw = json.loads(data)
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__})


def lease_path(table_uri: str) -> str:
    """Where the writer lease of a table lives."""
    return f"{table_uri.rstrip('/')}/{LEASE_DIR}/{LEASE_FILE}"


# ------------------------------------------------------------------------------- storage


class _Files:
    """Small-file access: ``os`` on local paths (atomic create and replace), pyarrow.fs on
    object-store URIs (check-then-write: see the module docstring)."""

    def __init__(self, path: str) -> None:
        local = local_path(path)
        self.remote = local is None
        self.path = path if local is None else local

    def _fs(self) -> tuple[Any, str]:
        return filesystem(self.path)

    def read(self) -> tuple[bytes, float] | None:
        """Contents and modification time (epoch s), or None when absent."""
        if self.remote:
            import pyarrow.fs as pafs

            fs, p = self._fs()
            info = fs.get_file_info(p)
            if info.type == pafs.FileType.NotFound:
                return None
            with fs.open_input_stream(p) as fh:
                data = fh.read()
            mtime = info.mtime.timestamp() if info.mtime is not None else time.time()
            return data, mtime
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
                return data, os.fstat(fh.fileno()).st_mtime
        except FileNotFoundError:
            return None

    def create(self, data: bytes) -> bool:
        """Create the file with ``data`` unless it exists; True when created."""
        if self.remote:
            fs, p = self._fs()
            fs.create_dir(p.rsplit("/", 1)[0], recursive=True)
            if self.read() is not None:
                return False
            with fs.open_output_stream(p) as fh:
                fh.write(data)
            return True
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return True

    def replace(self, data: bytes) -> None:
        """Write the file whole (readers see the old or the new contents, never a part)."""
        if self.remote:
            fs, p = self._fs()
            with fs.open_output_stream(p) as fh:
                fh.write(data)
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = f"{self.path}.{uuid.uuid4().hex[:8]}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def delete(self) -> None:
        """Remove the file; absent is fine."""
        if self.remote:
            fs, p = self._fs()
            with contextlib.suppress(FileNotFoundError, OSError):
                fs.delete_file(p)
            return
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)


# ------------------------------------------------------------------------------- holding

#: Leases taken by this process, by token; the value says whether its query is still active.
_HELD: dict[str, Callable[[], bool]] = {}
_HELD_LOCK = threading.Lock()


def _read_record(files: _Files) -> tuple[LeaseRecord | None, float] | None:
    """``(record, mtime)``; record None when the file is unreadable (e.g. half written)."""
    found = files.read()
    if found is None:
        return None
    data, mtime = found
    try:
        return LeaseRecord.from_json(data), mtime
    except (ValueError, KeyError, TypeError):
        return None, mtime


def holder_state(record: LeaseRecord, *, now_ms: int | None = None) -> str | None:
    """Why ``record`` no longer holds its table (``None``: it is live).

    Stale when its heartbeat is older than its timeout; when its process is gone from this
    machine; or when it is a lease of this process whose query stopped.
    """
    now = _now_ms() if now_ms is None else now_ms
    # The most precise reason first: a holder known dead on this machine.
    if record.machine == _machine_id():
        if record.pid == os.getpid():
            with _HELD_LOCK:
                active = _HELD.get(record.token)
            if active is None or not active():
                return "its query in this process has stopped"
        elif not _pid_alive(record.pid):
            return f"its process {record.pid} no longer runs on this machine"
    age = now - record.heartbeat_ms
    if age > record.timeout_ms:
        return f"its last heartbeat is {age / 1000:.0f} s old (timeout {record.timeout_ms} ms)"
    return None


class WriterLease:
    """The writer leases of one job on a set of tables (see the module docstring).

    Obtain with :func:`acquire`. Call :meth:`check` before each micro-batch,
    :meth:`watch` once the query runs, :meth:`release` when it stops (the watcher does).
    """

    def __init__(self, record: LeaseRecord, tables: Sequence[str], taken_from: list[str]) -> None:
        self.record = record
        self.tables = tuple(tables)
        #: Descriptions of the live or stale holders this lease replaced (for a notice).
        self.taken_from = taken_from
        self._lost: str | None = None
        self._released = False
        self._lock = threading.Lock()
        self._stop = threading.Event()

    @property
    def token(self) -> str:
        """This holding's unique id."""
        return self.record.token

    @property
    def released(self) -> bool:
        """Whether :meth:`release` has run (the job gave the tables back)."""
        return self._released

    def _lost_message(self, table: str, now: LeaseRecord | None) -> str:
        who = now.describe() if now is not None else "nobody (the lease file was removed)"
        return (
            f"{self.record.command} {self.record.pipeline_id!r} no longer holds the writer lease "
            f"of table {table!r}: it is now held by {who}. This job stops without writing "
            "(another job took the table over, e.g. with --take-over); restart it only after "
            "that job has stopped."
        )

    def check(self) -> None:
        """The fence: raise unless every lease file still names this job.

        Raises:
            WriterLeaseError: a lease was taken over (or removed), or released already.
        """
        if self._lost is not None:
            raise WriterLeaseError(self._lost, table_uri=self.tables[0])
        for table in self.tables:
            found = _read_record(_Files(lease_path(table)))
            record = found[0] if found is not None else None
            if record is None or record.token != self.token:
                self._lost = self._lost_message(table, record)
                raise WriterLeaseError(self._lost, table_uri=table)

    def heartbeat(self) -> None:
        """Refresh the heartbeat in every lease file that still names this job.

        A file that names another job is left alone and the loss is remembered, so the
        next :meth:`check` stops the query.
        """
        with self._lock:
            if self._released:
                return
            self.record = LeaseRecord(**{**asdict(self.record), "heartbeat_ms": _now_ms()})
            for table in self.tables:
                files = _Files(lease_path(table))
                found = _read_record(files)
                current = found[0] if found is not None else None
                if current is None or current.token != self.token:
                    if self._lost is None:
                        self._lost = self._lost_message(table, current)
                    continue
                files.replace(self.record.to_json())

    def release(self) -> None:
        """Delete the lease files that still name this job; idempotent."""
        with self._lock:
            if self._released:
                return
            self._released = True
            self._stop.set()
            _drop(self.tables, self.token)
        with contextlib.suppress(ValueError):
            _LEASES.remove(self)

    def watch(
        self,
        is_active: Callable[[], bool],
        *,
        on_lost: Callable[[str], None] | None = None,
        poll_s: float = 1.0,
    ) -> None:
        """Start the daemon thread that heartbeats while ``is_active()`` and releases after.

        Heartbeats every quarter of the timeout; polls ``is_active`` every ``poll_s``. When a
        heartbeat finds the lease taken over, it records the loss (see :func:`lost`), calls
        ``on_lost`` with the message (the runner stops the query there, so a job that lost
        its lease stops within a quarter of the timeout even without a batch) and ends.
        """
        with _HELD_LOCK:
            _HELD[self.token] = is_active
        interval_s = self.record.timeout_ms / 4000

        def run() -> None:
            last = time.monotonic()
            while not self._stop.wait(poll_s):
                try:
                    active = is_active()
                except Exception:
                    # Unknown (a JVM call failed): keep the lease. Releasing it while the
                    # query may still run would let a second writer in; a process that is
                    # ending releases it at exit.
                    active = True
                if not active:
                    break
                if time.monotonic() - last >= interval_s:
                    # a failed heartbeat (storage hiccup) is retried next round; the lease
                    # only goes stale after the whole timeout without one
                    with contextlib.suppress(OSError):
                        self.heartbeat()
                    last = time.monotonic()
                    if self._lost is not None:
                        _LOST.append(self._lost)
                        if on_lost is not None:
                            with contextlib.suppress(Exception):
                                on_lost(self._lost)
                        break
            self.release()

        threading.Thread(
            target=run, name=f"lakehouse-lease-{self.record.pipeline_id}", daemon=True
        ).start()


#: Every lease this process took, so a normal exit releases them (SIGKILL cannot).
_LEASES: list[WriterLease] = []
#: Messages of leases this process lost to a take-over (see :func:`lost`).
_LOST: list[str] = []


def lost() -> str | None:
    """Why a query of this process was stopped by its lease watcher (taken over), or None.

    The CLI turns it into the command's error after the query has stopped.
    """
    return _LOST[-1] if _LOST else None


def _release_all_at_exit() -> None:
    for lease in list(_LEASES):
        with contextlib.suppress(Exception):
            lease.release()


atexit.register(_release_all_at_exit)


def acquire(
    tables: Iterable[str],
    *,
    command: str,
    pipeline_id: str,
    query_name: str,
    checkpoint: str,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    take_over: bool = False,
) -> WriterLease:
    """Take the writer lease of every table, or none of them.

    Tables are leased in sorted order (two jobs with overlapping sets cannot each hold a
    part). Until :meth:`WriterLease.watch` registers the query, the lease counts as held by
    this process.

    Raises:
        WriterLeaseError: another job holds a live lease on one of the tables (and not
            ``take_over``); the message names that job and how to proceed.
    """
    unique = sorted({t.rstrip("/") for t in tables})
    now = _now_ms()
    record = LeaseRecord(
        token=uuid.uuid4().hex,
        command=command,
        pipeline_id=pipeline_id,
        query_name=query_name,
        host=socket.gethostname(),
        machine=_machine_id(),
        pid=os.getpid(),
        checkpoint=checkpoint,
        started_at_ms=now,
        heartbeat_ms=now,
        timeout_ms=timeout_ms,
    )
    lease = WriterLease(record, unique, [])
    with _HELD_LOCK:
        _HELD[record.token] = lambda: True  # held while starting; watch() replaces it
    taken: list[str] = []
    try:
        for table in unique:
            files = _Files(lease_path(table))
            while not files.create(record.to_json()):
                found = _read_record(files)
                if found is None:
                    continue  # released meanwhile: try the create again
                other, mtime = found
                if other is None:
                    # unreadable: a holder that died while creating it, or one writing it now
                    if (time.time() - mtime) * 1000 <= timeout_ms and not take_over:
                        raise WriterLeaseError(
                            f"table {table!r} has an unreadable writer lease "
                            f"({lease_path(table)}) written {time.time() - mtime:.0f} s ago; "
                            f"another job may be starting. Retry after {timeout_ms} ms, or "
                            "start with --take-over if no other job writes this table.",
                            table_uri=table,
                        )
                    files.replace(record.to_json())
                    lease.taken_from.append(f"an unreadable lease of {table!r}")
                    break
                why_stale = holder_state(other)
                if why_stale is None and not take_over:
                    raise WriterLeaseError(_held_message(table, other), table_uri=table)
                files.replace(record.to_json())
                state = "live, taken over" if why_stale is None else f"stale: {why_stale}"
                lease.taken_from.append(f"{other.describe()} on {table!r} ({state})")
                break
            taken.append(table)
    except BaseException:
        _drop(taken, record.token)
        raise
    _LEASES.append(lease)
    return lease


def _drop(tables: Iterable[str], token: str) -> None:
    """Delete the lease files of ``tables`` that still name ``token`` (a file another job
    has taken over since is left alone) and forget the token in this process."""
    for table in tables:
        files = _Files(lease_path(table))
        found = _read_record(files)
        if found is not None and found[0] is not None and found[0].token == token:
            files.delete()
    with _HELD_LOCK:
        _HELD.pop(token, None)


def ensure_free(tables: Iterable[str], *, take_over: bool = False) -> None:
    """Refuse early, before anything starts (a Spark session takes seconds to minutes), when
    another job holds a live lease on one of ``tables``; takes nothing. :func:`acquire`
    decides for good when the query starts.

    Raises:
        WriterLeaseError: as :func:`acquire` would.
    """
    if take_over:
        return
    for table in sorted({t.rstrip("/") for t in tables}):
        other = read_lease(table)
        if other is not None and holder_state(other) is None:
            raise WriterLeaseError(_held_message(table, other), table_uri=table)


def _held_message(table: str, other: LeaseRecord) -> str:
    return (
        f"table {table!r} is being written by another job: {other.describe()}. Two writers on "
        "one table are refused. Stop that job first; if it is dead on another machine, its "
        f"lease goes stale {other.timeout_ms} ms after its last heartbeat; or start this one "
        "with --take-over (the other job then stops at its next heartbeat or batch)."
    )


def read_lease(table_uri: str) -> LeaseRecord | None:
    """The current writer lease of a table (live or stale), or None (for ``status``)."""
    found = _read_record(_Files(lease_path(table_uri)))
    return found[0] if found is not None else None
