"""What an ingest batch of Debezium heartbeats alone costs, before and after such a batch
stopped committing to its build tables (issue 14).

``python -m bench.heartbeats '{"batches": 20, "repeats": 2}'``: one local Spark session; per
repeat and mode, a new build table whose snapshot (24 rows, its final one ``last``) sets the
marker in batch 0, then ``batches`` micro-batches of one heartbeat each, handed to
``BuildSink.process`` as the Kafka source would. ``before`` is the sink as it was: every batch
appends a commit (the plan's ``changes_nothing`` forced off); ``after`` is the sink as it is.
The modes alternate, so both see the same load. Prints seconds per heartbeat batch (median)
and the versions the heartbeats added.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lakehouse import delta
from lakehouse.dimension import BuildSink, BuildTarget, SnapshotOptions
from lakehouse.dimension import sink as sink_module
from lakehouse.sources.schema import RAW_SCHEMA_DDL
from lakehouse.testing import DebeziumTable

DATA = "dbserver1.public.rates"
BEATS = "__debezium-heartbeat.dbserver1"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _heartbeat(ts_ms: int) -> tuple[bytes, bytes]:
    key = {"schema": {"type": "struct"}, "payload": {"serverName": "dbserver1"}}
    value = {
        "schema": {"type": "struct", "name": "io.debezium.connector.common.Heartbeat"},
        "payload": {"ts_ms": ts_ms},
    }
    return json.dumps(key).encode(), json.dumps(value).encode()


@contextlib.contextmanager
def _committing_every_batch() -> Iterator[None]:
    """The sink as it was before: no batch is a no-op."""
    plan = sink_module.plan_commit

    def every_batch_commits(**kwargs: Any) -> Any:
        return dataclasses.replace(plan(**kwargs), changes_nothing=False)

    sink_module.plan_commit = every_batch_commits  # type: ignore[assignment]
    try:
        yield
    finally:
        sink_module.plan_commit = plan


def _run(spark: Any, directory: Path, batches: int) -> tuple[list[float], int]:
    """Batch 0 sets the marker; then ``batches`` heartbeat batches. Returns their seconds and
    the versions they added."""
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(RAW_SCHEMA_DDL)
    uri = str(directory / "rates")
    target = BuildTarget(
        uri,
        source_table="public.rates",
        snapshot=SnapshotOptions(heartbeat_topic=BEATS),
    )
    sink = BuildSink(
        [target], dead_letter_table=str(directory / "dlq"), pipeline_id="bench-heartbeats"
    )
    table = DebeziumTable("public", "rates", key="currency", start_ms=1_700_000_000_000)
    snapshot = table.snapshot([{"currency": f"C{i:02d}", "rate": "1.5"} for i in range(24)])
    now = T0
    rows = []
    for offset, m in enumerate(snapshot):
        now += timedelta(milliseconds=10)
        rows.append((m.key_bytes(), m.value_bytes(), DATA, 0, offset, now, 0))
    sink.process(spark.createDataFrame(rows, schema), 0)
    before = delta.snapshot(uri).version
    seconds = []
    for batch in range(1, batches + 1):
        now += timedelta(seconds=1)
        key, value = _heartbeat(int(now.timestamp() * 1000))
        df = spark.createDataFrame([(key, value, BEATS, 0, batch - 1, now, 0)], schema)
        started = time.perf_counter()
        sink.process(df, batch)
        seconds.append(time.perf_counter() - started)
    return seconds, delta.snapshot(uri).version - before


def main(argv: list[str]) -> None:
    options = json.loads(argv[1]) if len(argv) > 1 else {}
    batches, repeats = int(options.get("batches", 20)), int(options.get("repeats", 2))
    from lakehouse.spark import get_spark

    spark = get_spark(app_name="bench-heartbeats", conf={"spark.sql.shuffle.partitions": "2"})
    results: dict[str, list[float]] = {"before": [], "after": []}
    versions: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench-heartbeats-") as tmp:
        for repeat in range(repeats):
            for mode in ("before", "after"):
                directory = Path(tmp) / f"{mode}-{repeat}"
                if mode == "before":
                    with _committing_every_batch():
                        seconds, added = _run(spark, directory, batches)
                else:
                    seconds, added = _run(spark, directory, batches)
                results[mode] += seconds
                versions[mode] = added
    before, after = (statistics.median(results[m]) for m in ("before", "after"))
    print(f"{batches} heartbeat batches x {repeats} repeats, median seconds per batch:")
    print(f"  before (every batch commits): {before:.2f} s, {versions['before']} versions added")
    print(f"  after (no-op batches commit nothing): {after:.2f} s, {versions['after']} added")
    print(f"  after / before: {after / before:.2f}")


if __name__ == "__main__":
    main(sys.argv)
