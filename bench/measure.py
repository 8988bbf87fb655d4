"""Timing, CPU and memory measurement of one engine run, and the subprocess that isolates it.

Every engine runs in its own Python subprocess (:func:`run_isolated`), so its peak memory is
its own: the parent polls the child's whole process tree (for Spark: the driver's Python, the
JVM it starts and the Python workers the JVM forks) every :data:`POLL_S` seconds and records
the largest sum of resident set sizes. Shared pages are counted once per process, so for
Spark the figure is an upper bound. Inside the child, :func:`repeat` runs the operation once
as a warm-up and then ``runs`` times, recording for each run the wall time and the CPU time
of the child's process tree (user + system, children included). On a machine shared with
other work the wall time grows with the load; the CPU time much less, so both are reported.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

POLL_S = 0.05
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
REPO = Path(__file__).resolve().parent.parent


def _proc_table() -> dict[int, tuple[int, float, int]]:
    """pid -> (parent pid, CPU seconds incl. reaped children, RSS bytes)."""
    table: dict[int, tuple[int, float, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        cpu = sum(int(x) for x in fields[11:15]) / _TICK  # utime stime cutime cstime
        table[int(name)] = (int(fields[1]), cpu, int(fields[21]) * _PAGE)
    return table


def tree_usage(root: int) -> tuple[float, int]:
    """CPU seconds and resident bytes of ``root`` and all its descendants now."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    cpu, rss, stack = 0.0, 0, [root]
    while stack:
        pid = stack.pop()
        if pid in table:
            cpu += table[pid][1]
            rss += table[pid][2]
        stack.extend(children.get(pid, []))
    return cpu, rss


@dataclass(frozen=True, slots=True)
class Runs:
    """Timed runs of one operation after a warm-up.

    Attributes:
        wall_s: wall-clock seconds of each run.
        cpu_s: CPU seconds of each run (the process tree, user + system).
        result: what the last run returned (a checksum, for the correctness check).
    """

    wall_s: list[float]
    cpu_s: list[float]
    result: Any = None

    @property
    def min_s(self) -> float:
        """Fastest run."""
        return min(self.wall_s)

    @property
    def median_s(self) -> float:
        """Median run."""
        return statistics.median(self.wall_s)


def repeat(op: Callable[[], Any], *, runs: int, warmup: int = 1) -> Runs:
    """Run ``op`` ``warmup`` times untimed, then ``runs`` times timed."""
    for _ in range(warmup):
        op()
    walls: list[float] = []
    cpus: list[float] = []
    result = None
    me = os.getpid()
    for _ in range(runs):
        cpu0, _ = tree_usage(me)
        t0 = time.perf_counter()
        result = op()
        walls.append(time.perf_counter() - t0)
        cpus.append(tree_usage(me)[0] - cpu0)
    return Runs(walls, cpus, result)


@dataclass(slots=True)
class Isolated:
    """What an isolated child reported, plus what the parent observed.

    Attributes:
        ok: the child exited with 0 and printed a result.
        result: the child's JSON result.
        peak_rss_bytes: the largest resident size of the child's process tree.
        seconds: the child's whole lifetime (start-up included).
        error: the tail of the child's stderr when it failed.
    """

    ok: bool
    result: dict[str, Any] = field(default_factory=dict)
    peak_rss_bytes: int = 0
    seconds: float = 0.0
    error: str = ""


RESULT_PREFIX = "BENCH-RESULT "


def run_isolated(
    module: str, spec: Mapping[str, Any], *, timeout_s: float, log: Path | None = None
) -> Isolated:
    """Run ``python -m <module> '<spec as JSON>'`` and poll its process tree's memory.

    The child prints one line ``BENCH-RESULT {json}`` (see :func:`emit`). The child runs in
    the repository root with the root on ``PYTHONPATH`` (Spark's Python workers import
    ``bench`` and ``lakehouse`` from there). On timeout the child's process group is killed.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.monotonic()
    with open(log or os.devnull, "ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, json.dumps(dict(spec))],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
        )
        peak = 0
        stop = threading.Event()

        def poll() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, tree_usage(proc.pid)[1])
                stop.wait(POLL_S)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.communicate()
            stop.set()
            poller.join()
            return Isolated(False, peak_rss_bytes=peak, error=f"timed out after {timeout_s} s")
        finally:
            stop.set()
            poller.join()
    seconds = time.monotonic() - started
    lines = [x for x in out.decode(errors="replace").splitlines() if x.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        tail = ""
        if log is not None and log.exists():
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        return Isolated(False, peak_rss_bytes=peak, seconds=seconds, error=tail or "no result")
    return Isolated(True, json.loads(lines[-1][len(RESULT_PREFIX) :]), peak, seconds)


def timed_lakehouse(*args: str) -> tuple[float, str]:
    """Run the installed ``lakehouse`` command as a person runs it (a new process, one line
    per batch); returns its wall-clock seconds and its stderr. Raises when it fails."""
    started = time.monotonic()
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "lakehouse"), *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "4000"},
    )
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"lakehouse {' '.join(args)} failed: {proc.stderr[-3000:]}")
    return seconds, proc.stderr


def emit(result: Mapping[str, Any]) -> None:
    """Print the child's result line (the parent reads the last one)."""
    print(RESULT_PREFIX + json.dumps(result, default=_json_default), flush=True)


def runs_dict(runs: Runs) -> dict[str, Any]:
    """A :class:`Runs` as JSON-ready data."""
    return {**asdict(runs), "min_s": runs.min_s, "median_s": runs.median_s}


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {value!r}")
