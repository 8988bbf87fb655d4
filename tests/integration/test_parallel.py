"""map_tables runs each piece in its caller's Spark context, on real Spark: the caller's local
properties (a copy per thread), its active session and its job tags, and Spark jobs of the
pieces carry the caller's job group."""

from __future__ import annotations

import threading
from typing import Any

from lakehouse.parallel import map_tables


def test_each_piece_runs_in_the_callers_spark_context(spark: Any) -> None:
    sc = spark.sparkContext
    jcontext = sc._jsc.sc()
    sc.setLocalProperty("lakehouse.test.caller", "yes")
    sc.setJobGroup("lakehouse-test-group", "pieces of one call")
    spark.addTag("lakehouse-test-tag")
    threads: set[int] = set()
    try:

        def piece(n: int) -> tuple[str | None, str | None, bool, bool, int]:
            threads.add(threading.get_ident())
            seen = jcontext.getLocalProperty("lakehouse.test.caller")
            group = jcontext.getLocalProperty("spark.jobGroup.id")
            # a piece that sets a property of its own leaves the next piece's view as the
            # caller's only where it restores it, as Spark's own jobs do
            jcontext.setLocalProperty("lakehouse.test.piece", str(n))
            mine = jcontext.getLocalProperty("lakehouse.test.piece") == str(n)
            jcontext.setLocalProperty("lakehouse.test.piece", None)
            active = spark._jvm.org.apache.spark.sql.SparkSession.getActiveSession()
            same = active.isDefined() and active.get().equals(spark._jsparkSession)
            rows = spark.range(n + 1).count()  # a Spark job from the piece's thread
            return seen, group, mine, same and "lakehouse-test-tag" in spark.getTags(), rows

        results = map_tables(spark, piece, list(range(12)), workers=3)
    finally:
        sc.setLocalProperty("lakehouse.test.caller", None)
        spark.removeTag("lakehouse-test-tag")
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    assert len(threads) > 1  # the pieces ran side by side, several on each thread
    assert results == [("yes", "lakehouse-test-group", True, True, n + 1) for n in range(12)]
    # the caller's own properties are untouched by what the pieces set on their threads
    assert jcontext.getLocalProperty("lakehouse.test.piece") is None


def test_a_failed_piece_is_raised_after_every_piece_ran(spark: Any) -> None:
    ran: list[int] = []
    lock = threading.Lock()

    def piece(n: int) -> int:
        with lock:
            ran.append(n)
        if n in (3, 5):
            raise ValueError(f"piece {n}")
        return n

    try:
        map_tables(spark, piece, list(range(8)), workers=2)
    except ValueError as e:
        assert str(e) == "piece 3"  # the first failed item, in the order of the items
    else:
        raise AssertionError("map_tables did not raise")
    assert sorted(ran) == list(range(8))
