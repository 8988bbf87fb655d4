"""Driver-side work on several tables at once, each piece in the Spark context of its caller.

A micro-batch that touches many tables spends most of each table's time waiting: on py4j
calls, on Delta's log, on small Spark jobs that leave the executors idle between them. Run on
threads, those waits overlap and Spark schedules the tables' jobs side by side.

Every piece runs as its caller would have run it: the caller's Spark local properties (job
group and description, scheduler pool; a copy per piece, as Spark keeps per-thread state such
as the running SQL execution there), its active Spark session (the JVM keeps that per thread
too), and its ``contextvars`` (:func:`lakehouse.delta.batch_scope`'s snapshots).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["map_tables"]


def map_tables(
    spark: SparkSession, work: Callable[[T], R], items: Sequence[T], *, workers: int
) -> list[R]:
    """``[work(item) for item in items]``, up to ``workers`` at once.

    Results are in the order of ``items``. Every piece started runs to its end before this
    returns or raises: a failure never leaves another table's write running behind the
    caller's back. When pieces fail, the exception of the first failed item (in ``items``
    order) is raised.

    With ``workers == 1`` or a single item, the pieces run on the calling thread, one by one.

    >>> from types import SimpleNamespace
    >>> map_tables(SimpleNamespace(), lambda n: n * n, [1, 2, 3], workers=1)
    [1, 4, 9]
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if workers == 1 or len(items) <= 1:
        return [work(item) for item in items]
    from pyspark.util import inheritable_thread_target

    # the JVM keeps the active session per thread: each piece's thread gets the caller's
    jsession = spark._jsparkSession
    jvm = spark.sparkContext._jvm
    assert jvm is not None

    def in_context(item: T) -> R:
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(jsession)
        return work(item)

    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        # wrapped on this thread, once per piece: each gets its own copy of the properties
        futures = [
            pool.submit(
                contextvars.copy_context().run, inheritable_thread_target(spark)(in_context), item
            )
            for item in items
        ]
        errors = [f.exception() for f in futures]  # waits for every piece
    for error in errors:
        if error is not None:
            raise error
    return [f.result() for f in futures]
