"""Delta log checkpoints written beside the next batch, not inside the commit that made one due.

Delta checkpoints a table's log in the commit whose version is a multiple of the table's
``delta.checkpointInterval`` (10 by default): Spark jobs that read the table's state and write
it as Parquet, then the cleanup of expired log files, 1 to 4 s on a small table, paid by the
batch that made the commit. A pipeline that commits to a table in every batch pays it in every
tenth batch (the p95 of its batch time), and a batch that commits to many tables crosses the
interval in all of them at once.

lakehouse's own commits (:func:`lakehouse.delta._engine.commit_on`) leave Delta's checkpoint
hook out and hand the checkpoint to this module (:func:`schedule`): one worker thread per
process writes it while the next batch runs, through the same ``DeltaLog.checkpoint`` with the
snapshot of the version that made it due. That changes:

* nothing a reader sees: a checkpoint indexes the log, it is not part of the table; until it
  is written, a reader replays a few more commit files, as it does between checkpoints anyway;
* nothing in the exactly-once argument: no decision reads a checkpoint, and a process that
  dies while one is written leaves either none or a complete one (Delta writes its file whole,
  by rename or by one PUT, and only then ``_last_checkpoint``); the table's next due version
  writes another;
* when the work runs: the checkpoint's Spark jobs share the executors with the next batch's
  (their job group is :data:`JOB_GROUP`).

A table whose checkpoint is queued and not yet started gets the newer version instead: one
checkpoint per table in the queue. :func:`drain` waits for the queue to empty; a query's end
calls it, and so does the process's exit, so a bounded run ends with the checkpoints its
commits made due, as before. The Spark setting :data:`DEFER_CONF` = ``"false"`` keeps Delta's
checkpoint inside the commit.
"""

from __future__ import annotations

import atexit
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakehouse.delta import _engine
from lakehouse.delta.log import _first_line
from lakehouse.failpoints import failpoint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFER_CONF", "JOB_GROUP", "deferred", "drain", "schedule"]

log = logging.getLogger("lakehouse.delta")

#: "false": Delta writes a checkpoint inside the commit that makes it due, as its writer does.
DEFER_CONF = "spark.lakehouse.deferCheckpoints"
#: The Spark job group of the checkpoints' jobs (the Spark UI shows it; batch costs skip it).
JOB_GROUP = "lakehouse-checkpoint"


@dataclass(frozen=True, slots=True)
class _Due:
    spark: SparkSession
    log: Any  # the table's DeltaLog
    version: int
    #: the micro-batch whose commit made it due (the failpoint's batch)
    batch_id: int


_cond = threading.Condition()
_queue: dict[str, _Due] = {}  # table URI -> its due checkpoint, in the order first queued
_busy = 0  # checkpoints taken off the queue and not finished
_worker: threading.Thread | None = None


def deferred(spark: SparkSession) -> bool:
    """Whether this session's commits leave their checkpoints to :func:`schedule`."""
    return str(spark.conf.get(DEFER_CONF, "true")).strip().lower() != "false"


def schedule(spark: SparkSession, jlog: Any, uri: str, version: int, *, batch_id: int) -> None:
    """Queue the checkpoint of the table at ``uri`` (its ``DeltaLog`` ``jlog``) at ``version``;
    a checkpoint of the table still in the queue is replaced by this one. Returns at once."""
    global _worker
    with _cond:
        _queue.pop(uri, None)
        _queue[uri] = _Due(spark, jlog, version, batch_id)
        if _worker is None or not _worker.is_alive():
            # a daemon: a process that exits without drain() is never held by a checkpoint
            _worker = threading.Thread(target=_work, name="lakehouse-checkpointer", daemon=True)
            _worker.start()
        _cond.notify_all()


def drain(timeout: float | None = None) -> bool:
    """Wait until every queued checkpoint is written (or has failed, with a warning). False
    when ``timeout`` seconds passed first."""
    with _cond:
        return _cond.wait_for(lambda: not _queue and _busy == 0, timeout)


def _work() -> None:
    global _busy
    while True:
        with _cond:
            _cond.wait_for(lambda: bool(_queue))
            uri = next(iter(_queue))
            due = _queue.pop(uri)
            _busy += 1
        try:
            _checkpoint(uri, due)
        except Exception as e:  # a checkpoint is maintenance: the commit stands, as in Delta
            if due.spark.sparkContext._jsc is None:  # the session stopped: nothing to write
                log.debug("Delta table %s: checkpoint at version %d dropped", uri, due.version)
            else:
                log.warning(
                    "Delta table %s: checkpoint at version %d not written (readers replay "
                    "more of its log until the next one): %s",
                    uri,
                    due.version,
                    _first_line(e),
                )
        finally:
            with _cond:
                _busy -= 1
                _cond.notify_all()


def _checkpoint(uri: str, due: _Due) -> None:
    spark = due.spark
    sc = spark.sparkContext
    if sc._jsc is None:
        raise RuntimeError("the Spark session stopped")
    failpoint("delta.checkpoint", due.batch_id)
    # the JVM keeps the active session and the job group per thread: this one's are its own
    _engine._class(spark, "org.apache.spark.sql.SparkSession").setActiveSession(
        spark._jsparkSession
    )
    sc.setJobGroup(JOB_GROUP, f"Delta checkpoint of {uri} at version {due.version}")
    snapshot = _engine.snapshot_at(spark, due.log, due.version)
    due.log.checkpoint(snapshot, _engine._none(spark))
    log.debug("Delta table %s: checkpoint at version %d written", uri, due.version)


atexit.register(drain)
