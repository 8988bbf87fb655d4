"""Driver-side work on several tables at once, each piece in the Spark context of its caller.

A micro-batch that touches many tables spends most of each table's time waiting: on py4j
calls, on Delta's log, on small Spark jobs that leave the executors idle between them. Run on
threads, those waits overlap and Spark schedules the tables' jobs side by side.

Every piece runs as its caller would have run it: the caller's Spark local properties (job
group and description, scheduler pool; a copy per thread, as Spark keeps per-thread state such
as the running SQL execution there), its active Spark session and job tags (the JVM keeps
those per thread too), and its ``contextvars`` (:func:`lakehouse.delta.batch_scope`'s
snapshots). What a thread takes from the caller is set once per thread, not per piece: each
py4j call is a round trip, and a batch over many tables makes pieces by the hundred.
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
    from py4j.java_gateway import JavaClass

    # what a piece's thread takes from the caller's, read once per call here: each py4j call
    # per piece is a round trip, and resolving a JVM name (``jvm.org.apache...``) is one per
    # package step, each a failed class lookup over the whole class path
    sc = spark.sparkContext
    jcontext = sc._jsc.sc()
    properties = jcontext.getLocalProperties().clone()
    tags = spark.getTags()
    jsession = spark._jsparkSession
    set_active = JavaClass(
        "org.apache.spark.sql.SparkSession",
        sc._gateway._gateway_client,  # type: ignore[union-attr]
    ).setActiveSession

    def thread_context() -> None:
        # the JVM keeps the local properties, the active session and the job tags per thread.
        # A copy of the properties per thread: Spark keeps per-thread state in them (the
        # running SQL execution), which threads running side by side must not share; a piece
        # after another on the same thread finds them as the caller left them (Spark and Delta
        # restore what they set in them, as on any thread that runs one job after another)
        jcontext.setLocalProperties(properties.clone())
        set_active(jsession)
        for tag in tags:
            spark.addTag(tag)

    with ThreadPoolExecutor(
        max_workers=min(workers, len(items)), initializer=thread_context
    ) as pool:
        futures = [pool.submit(contextvars.copy_context().run, work, item) for item in items]
        errors = [f.exception() for f in futures]  # waits for every piece
    for error in errors:
        if error is not None:
            raise error
    return [f.result() for f in futures]
