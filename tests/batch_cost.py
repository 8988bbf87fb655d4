"""What one piece of driver code cost Spark and Delta: jobs run and table logs read.

Used by the tests that hold the per-batch cost down and by the benchmarks that report it::

    with BatchCost(spark) as cost:
        operator.process(raw, batch_id)
    cost.jobs, cost.delta_jobs, cost.log_reads   # e.g. 2, 3, {"/t/out": 1, ...}

Jobs are counted through a Spark job group set for the block (jobs Delta starts on its own
threads inherit it); a job whose description starts with ``Delta:`` is Delta rebuilding a
table's state from its log (file list, app transactions), the rest are lakehouse's own.
Log reads are :data:`lakehouse.delta.LOG_READS`: each ``DeltaLog.update`` lakehouse
asks for. py4j calls are the round trips between the Python driver and the JVM made while a
``BatchCost`` is open, from any thread, py4j's releases of the JVM objects Python dropped
included (those come from its own thread, a little after the drop).
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

from lakehouse import delta

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_groups = itertools.count()
_calls = [0]  # py4j round trips while a BatchCost is open (from any thread: under the lock)
_open = [0]  # BatchCost blocks open
_count_lock = threading.Lock()


def _count_py4j_calls() -> None:
    """Count py4j's round trips (``_calls``) while a BatchCost is open; set up once per
    process."""
    from py4j.clientserver import ClientServerConnection

    with _count_lock:
        send = ClientServerConnection.send_command
        if getattr(send, "_lakehouse_counted", False):
            return

        def counted(self: Any, command: str, *args: Any, **kwargs: Any) -> Any:
            if _open[0]:
                with _count_lock:
                    _calls[0] += 1
            return send(self, command, *args, **kwargs)

        counted._lakehouse_counted = True  # type: ignore[attr-defined]
        ClientServerConnection.send_command = counted  # type: ignore[method-assign]


def _calls_so_far() -> int:
    with _count_lock:
        return _calls[0]


@dataclass
class BatchCost:
    """Counts Spark jobs and Delta log reads of the ``with`` block (module docstring).

    Attributes:
        jobs: lakehouse's own jobs (parsing, joining, writing data).
        delta_jobs: Delta's jobs (state reconstruction, file listing for a query).
        log_reads: per table URI, the times its log was read.
        descriptions: each job's description, in job id order.
        tasks: each job's tasks run (its stages' tasks, none of a stage it skipped), in job
            id order.
        compiles: the classes Spark's code generation compiled (Janino), in this JVM: a
            batch that compiles none ran code compiled for an earlier batch.
        py4j_calls: round trips between the Python driver and the JVM (module docstring).
    """

    spark: SparkSession
    jobs: int = 0
    delta_jobs: int = 0
    log_reads: dict[str, int] = field(default_factory=dict)
    descriptions: list[str] = field(default_factory=list)
    tasks: list[int] = field(default_factory=list)
    compiles: int = 0
    py4j_calls: int = 0

    def __enter__(self) -> BatchCost:
        _count_py4j_calls()
        self._group = f"lakehouse-cost-{next(_groups)}"
        self._reads = Counter(delta.LOG_READS)
        self.spark.sparkContext.setJobGroup(self._group, self._group)
        self._compiles = self._compiled()
        _open[0] += 1
        self._calls = _calls_so_far()
        return self

    def _compiled(self) -> int:
        jvm = self.spark.sparkContext._jvm  # type: ignore[attr-defined]
        metrics = jvm.org.apache.spark.metrics.source.CodegenMetrics
        return int(metrics.METRIC_COMPILATION_TIME().getCount())

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.py4j_calls = _calls_so_far() - self._calls
        _open[0] -= 1
        sc = self.spark.sparkContext
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
        store = sc._jsc.sc().statusStore()  # type: ignore[union-attr]
        for job_id in sorted(sc.statusTracker().getJobIdsForGroup(self._group)):
            job = store.job(job_id)
            description = str(job.description())
            seconds = ""
            start, end = job.submissionTime(), job.completionTime()
            if start.isDefined() and end.isDefined():
                seconds = f" | {(end.get().getTime() - start.get().getTime()) / 1000:.2f} s"
            self.descriptions.append(f"{description} | {job.name()}{seconds}")
            self.tasks.append(int(job.numCompletedTasks()))
            if "Delta:" in description:
                self.delta_jobs += 1
            else:
                self.jobs += 1
        self.compiles = self._compiled() - self._compiles
        after = Counter(delta.LOG_READS)
        self.log_reads = {
            uri: n - self._reads[uri] for uri, n in after.items() if n > self._reads[uri]
        }

    @property
    def total_jobs(self) -> int:
        return self.jobs + self.delta_jobs
