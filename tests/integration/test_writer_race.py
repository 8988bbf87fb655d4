"""Two writers racing on one Delta table, with no lease to keep them apart.

The writer lease (``lakehouse.lease``) normally stops a second job from starting. These tests
bypass it: two threads append the same micro-batches to one table at the same moment, with
the same application transaction id (two instances of one pipeline). Delta's optimistic
concurrency and the transaction ids must make every batch land exactly once: the loser's
commit conflicts, and it finds the batch already recorded and skips it.
"""

from __future__ import annotations

import threading

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from lakehouse import delta
from lakehouse.delta import WriteResult

pytestmark = [pytest.mark.spark]

SCHEMA = StructType(
    [
        StructField("batch", LongType()),
        StructField("writer", StringType()),
        StructField("i", LongType()),
    ]
)
BATCHES = 3
ROWS = 3


def _race(spark, uri: str, app_ids: tuple[str, str]) -> dict[str, list[WriteResult]]:
    """Both writers append batches 0..BATCHES-1; before each batch they wait for each other,
    so both check the table's transaction state before either commits."""
    results: dict[str, list[WriteResult]] = {"a": [], "b": []}
    errors: list[BaseException] = []
    barrier = threading.Barrier(2, timeout=300)

    def writer(name: str, app_id: str) -> None:
        try:
            for batch in range(BATCHES):
                df = spark.createDataFrame([(batch, name, i) for i in range(ROWS)], SCHEMA)
                barrier.wait()
                results[name].append(delta.append(df, uri, txn=(app_id, batch)))
        except BaseException as e:  # surfaced by the assertion below
            errors.append(e)
            barrier.abort()

    threads = [
        threading.Thread(target=writer, args=(name, app_id))
        for name, app_id in zip(("a", "b"), app_ids, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


def test_same_app_id_racing_writers_commit_each_batch_exactly_once(spark, tmp_path):
    uri = str(tmp_path / "table")
    delta.create_table(uri, SCHEMA)
    results = _race(spark, uri, ("pipeline", "pipeline"))

    rows = delta.read(spark, uri).collect()
    per_batch = {}
    for r in rows:
        per_batch.setdefault(r.batch, set()).add(r.writer)
    # every batch is in the table once, written by one of the two (never both, never none)
    assert sorted(per_batch) == list(range(BATCHES))
    assert all(len(writers) == 1 for writers in per_batch.values()), per_batch
    assert len(rows) == BATCHES * ROWS
    # for each batch exactly one writer committed and the other skipped
    for batch in range(BATCHES):
        skipped = [results[w][batch].skipped for w in ("a", "b")]
        assert sorted(skipped) == [False, True], (batch, skipped)
    assert delta.transaction_version(uri, "pipeline") == BATCHES - 1
    # one data commit per batch: the create, then BATCHES appends
    assert delta.latest_version(uri) == BATCHES
