"""The soak's pipeline processes: start, SIGKILL, restart, stop cleanly, and measure memory.

Each pipeline is the real CLI (``python -m lakehouse.cli ingest|join -c lakehouse.toml ...``)
in its own session (process group), so one SIGKILL of the group takes the driver, its JVM and
the JVM's Python workers down at once, as when a machine or container dies. Each start
(*incarnation*) logs to its own file; the batch lines the CLI prints there are counted.

Memory is the resident set size (``/proc/PID/stat``, field ``rss``) summed over the process
tree rooted at the driver, split into the driver (Python), the JVM (``java``) and the rest
(Spark's Python workers).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
_BATCH_LINE = re.compile(r"^(?:ingest|join) batch (\d+):")


@dataclass(frozen=True, slots=True)
class ProcInfo:
    """One process of a pipeline's tree."""

    pid: int
    ppid: int
    comm: str
    rss_bytes: int


def process_table() -> dict[int, ProcInfo]:
    """Every process visible in ``/proc`` (processes that vanish while reading are skipped)."""
    out: dict[int, ProcInfo] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # comm is in parentheses and may contain spaces and parentheses: split at the last ')'
        left, _, rest = text.rpartition(")")
        comm = left.partition("(")[2]
        fields = rest.split()
        # fields[0] is the state (field 3 of stat); ppid is field 4, rss field 24
        out[int(entry)] = ProcInfo(int(entry), int(fields[1]), comm, int(fields[21]) * PAGE_SIZE)
    return out


def descendants(root: int, table: dict[int, ProcInfo]) -> list[ProcInfo]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    out: list[ProcInfo] = []
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid in table:
            out.append(table[pid])
        stack.extend(children.get(pid, ()))
    return out


@dataclass(frozen=True, slots=True)
class RssSample:
    """Memory of one pipeline at one moment, in bytes."""

    at_s: float  # seconds since the soak started
    role: str
    incarnation: int
    since_start_s: float
    driver: int
    jvm: int
    workers: int
    processes: int

    @property
    def total(self) -> int:
        """The whole tree."""
        return self.driver + self.jvm + self.workers


@dataclass
class Pipeline:
    """One long-lived pipeline process and its history.

    Attributes:
        role: ``ingest``, ``rowtime`` or ``proctime``.
        argv: the command line (without the interpreter).
        logs: the directory of the incarnations' log files.
    """

    role: str
    argv: list[str]
    logs: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    incarnation: int = 0
    started_at: float = 0.0
    batches: int = 0
    batches_total: int = 0
    last_line: str = ""
    replays: int = 0
    exits: list[dict[str, object]] = field(default_factory=list)
    _log_pos: int = 0
    _log_buf: str = ""

    @property
    def log_path(self) -> Path:
        """The current incarnation's log file."""
        return self.logs / f"{self.role}-{self.incarnation}.log"

    @property
    def running(self) -> bool:
        """Whether the current incarnation is alive."""
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start a new incarnation."""
        self.incarnation += 1
        self.batches = 0
        self._log_pos, self._log_buf = 0, ""
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,  # its own process group: one killpg takes all of it
            )
        self.started_at = time.monotonic()

    def tree(self, table: dict[int, ProcInfo] | None = None) -> list[ProcInfo]:
        """The current incarnation's processes (empty when it is not running)."""
        if self.proc is None:
            return []
        return descendants(self.proc.pid, table if table is not None else process_table())

    def kill(self) -> list[int]:
        """SIGKILL the whole incarnation (its process group, and any descendant that left it);
        wait until every one of its processes is gone. Returns the pids killed."""
        assert self.proc is not None
        pids = [p.pid for p in self.tree()]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()
        _wait_gone(pids, timeout_s=60)
        self.poll_log()
        return pids

    def stop(self, timeout_s: float) -> int | None:
        """Stop cleanly: SIGINT to the driver (the CLI stops the query, which keeps its
        checkpoint valid) and wait. Returns the exit code, or None when it had to be
        SIGKILLed after ``timeout_s``."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        pids = [p.pid for p in self.tree()]
        self.proc.send_signal(signal.SIGINT)
        try:
            code: int | None = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            code = None
        # the JVM exits when the driver's gateway connection closes; give it a moment
        leftover = _wait_gone(pids, timeout_s=30)
        for pid in leftover:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.poll_log()
        return code

    def poll_log(self) -> None:
        """Read what the incarnation logged since the last call: count batch lines."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_pos)
                chunk = f.read()
        except OSError:
            return
        self._log_pos += len(chunk)
        self._log_buf += chunk.decode(errors="replace")
        *lines, self._log_buf = self._log_buf.split("\n")
        for line in lines:
            if _BATCH_LINE.match(line):
                self.batches += 1
                self.batches_total += 1
                self.last_line = line.strip()
                if "replay" in line:
                    self.replays += 1

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the current incarnation's log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def sample(self, at_s: float, table: dict[int, ProcInfo]) -> RssSample | None:
        """The current incarnation's memory, or None when it is not running."""
        if not self.running:
            return None
        assert self.proc is not None
        driver = jvm = workers = 0
        procs = self.tree(table)
        for p in procs:
            if p.pid == self.proc.pid:
                driver += p.rss_bytes
            elif p.comm == "java":
                jvm += p.rss_bytes
            else:
                workers += p.rss_bytes
        return RssSample(
            at_s=at_s,
            role=self.role,
            incarnation=self.incarnation,
            since_start_s=time.monotonic() - self.started_at,
            driver=driver,
            jvm=jvm,
            workers=workers,
            processes=len(procs),
        )


def _wait_gone(pids: list[int], *, timeout_s: float) -> list[int]:
    """Wait (bounded) until none of ``pids`` exists; returns those still alive."""
    deadline = time.monotonic() + timeout_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _alive(p)]
        if alive:
            time.sleep(0.1)
    return alive


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie is dead; its parent (the JVM, also killed) reaps it
