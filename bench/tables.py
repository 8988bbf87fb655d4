"""Delta tables and raw probe batches for the streaming measurements (2 and 3).

The build table is the project's own layout (:mod:`lakehouse.dimension.layout`), written through
:mod:`lakehouse.delta` with the commit metadata and snapshot marker the CDC sink writes, so
the operator reads it exactly as it reads a table the ingest produced. Raw probe batches are
parquet files in the sources' raw schema (:mod:`lakehouse.sources.schema`) whose ``value`` is
the probe row as JSON, so both the project's operator and the peer parse the same bytes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.workload import EPOCH0_MS, HORIZON_MS, Workload, build_table
from lakehouse.dimension.layout import (
    EVENT_TIME,
    INGESTED_AT,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TOPIC,
    META_BATCH_ID,
    META_MAX_EVENT_TIME,
    META_WATERMARK,
    OP,
    PROP_PRIMARY_KEY,
    PROP_SNAPSHOT_COMPLETE,
    PROP_TABLE_KIND,
    SEQ,
    SNAPSHOT,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Probe records' schema (DDL) as the operator and the peer parse them.
PROBE_SCHEMA = "id bigint, k bigint, ts bigint"


def write_build_table(
    spark: SparkSession,
    uri: str,
    w: Workload,
    *,
    batch_id: int = 0,
    latest_only: bool = False,
    watermark_ms: int | None = None,
) -> int:
    """Write the workload's build history as a versioned build table at ``uri``.

    With ``latest_only``, only each key's latest version is written: the one-row-per-key
    table a ``MERGE``-maintained dimension holds (the stream-static peer's static side).
    The commit's build watermark is the end of the time range (every probe time is covered)
    unless ``watermark_ms`` says otherwise. Returns the data commit's version; the snapshot
    marker is set after it.
    """
    from lakehouse import delta
    from lakehouse.dimension.marker import set_marker

    table = build_table(w)
    if latest_only:
        last = np.arange(w.versions - 1, w.build_rows, w.versions)
        table = table.take(pa.array(last))
    n = table.num_rows
    now = pa.scalar(int(time.time() * 1e6), pa.timestamp("us", tz="UTC"))
    arrow = pa.table(
        {
            "k": table["k"],
            "v": table["v"],
            OP: table[OP],
            EVENT_TIME: table[EVENT_TIME],
            SEQ: table[SEQ],
            SNAPSHOT: pa.array(np.asarray(table[OP]) == "r"),
            INGESTED_AT: pa.array(np.full(n, now.value), pa.timestamp("us", tz="UTC")),
            KAFKA_TOPIC: pa.nulls(n, pa.string()),
            KAFKA_PARTITION: pa.array(np.zeros(n, np.int32)),
            KAFKA_OFFSET: pa.array(np.arange(n, dtype=np.int64)),
        }
    )
    staging = Path(uri + ".staging.parquet")
    staging.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(arrow, staging)
    df = spark.read.parquet(str(staging))
    if not delta.table_exists(uri):
        delta.create_table(
            uri,
            df.schema,
            properties={
                PROP_PRIMARY_KEY: "k",
                PROP_SNAPSHOT_COMPLETE: "false",
                PROP_TABLE_KIND: "build",
            },
        )
    max_ms = EPOCH0_MS + HORIZON_MS
    result = delta.append(
        df,
        uri,
        txn=("bench-build", batch_id),
        metadata={
            META_BATCH_ID: batch_id,
            META_WATERMARK: max_ms if watermark_ms is None else watermark_ms,
            META_MAX_EVENT_TIME: max_ms,
        },
        max_files=4,
    )
    staging.unlink()
    set_marker(uri, signal="bench", data_version=result.version)
    return result.version


def probe_batch_file(
    path: str | Path, w: Workload, batch: int, rows: int, *, first_id: int = 0
) -> str:
    """Write one raw probe batch (``rows`` records, JSON values) as parquet; return its path.

    Keys and times are drawn like the workload's probe rows (seeded by ``batch``).
    """
    rng = np.random.default_rng([w.seed, 3, batch])
    keys = rng.integers(0, w.keys, rows)
    times = EPOCH0_MS + rng.integers(0, HORIZON_MS, rows)
    ids = np.arange(first_id, first_id + rows)
    values = [
        f'{{"id":{i},"k":{k},"ts":{t}}}'.encode()
        for i, k, t in zip(ids.tolist(), keys.tolist(), times.tolist(), strict=True)
    ]
    return write_raw(path, values, first_offset=first_id)


def write_raw(path: str | Path, values: list[bytes], *, first_offset: int = 0) -> str:
    """Write raw records (topic ``probe``, partition 0) with the given values as parquet."""
    from lakehouse.sources.schema import arrow_schema

    n = len(values)
    now_us = int(time.time() * 1e6)
    table = pa.table(
        {
            "key": pa.nulls(n, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": pa.array(["probe"] * n, pa.string()),
            "partition": pa.array(np.zeros(n, np.int32)),
            "offset": pa.array(np.arange(first_offset, first_offset + n, dtype=np.int64)),
            "timestamp": pa.array(np.full(n, now_us), pa.timestamp("us", tz="UTC")),
            "timestampType": pa.array(np.zeros(n, np.int32)),
        },
        schema=arrow_schema(),
    )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return str(path)


def read_raw(spark: SparkSession, path: str) -> DataFrame:
    """A raw batch file as the DataFrame a streaming source hands to ``foreachBatch``."""
    from lakehouse.sources.schema import RAW_SCHEMA

    return spark.read.schema(RAW_SCHEMA).parquet(path)


def join_options(root: Path, build_table: str, **overrides: Any) -> Any:
    """The benchmark's :class:`lakehouse.join.JoinOptions` (left join, key ``k``)."""
    from lakehouse.join import JoinOptions

    base: dict[str, Any] = {
        "build_table": build_table,
        "output_table": str(root / "out"),
        "pending_table": str(root / "pending"),
        "dead_letter_table": str(root / "dlq"),
        "pipeline_id": "bench-join",
        "probe_schema": PROBE_SCHEMA,
        "probe_key": ("k",),
        "probe_time": "ts",
        "probe_id": "id",
        "join_type": "left",
    }
    base.update(overrides)
    return JoinOptions(**base)


def main(spec: dict[str, Any]) -> None:
    """Create what a streaming measurement needs (run in its own process: it starts Spark).

    ``spec``: ``workload`` (Workload fields), ``build_table`` (written when missing),
    ``static_uri`` (the latest-only table; optional), ``batches_dir``, ``batches``,
    ``batch_rows``.
    """
    from bench.measure import emit
    from lakehouse import delta
    from lakehouse.spark import get_spark

    w = Workload(**spec["workload"])
    spark = get_spark(app_name="bench-setup", master="local[2]", conf=spec.get("spark_conf", {}))
    if not delta.table_exists(spec["build_table"]):
        write_build_table(spark, spec["build_table"], w)
    static = spec.get("static_uri")
    if static and static != spec["build_table"] and not delta.table_exists(static):
        write_build_table(spark, static, w, latest_only=True)
    paths = []
    rows = int(spec.get("batch_rows", 0))
    for b in range(int(spec.get("batches", 0))):
        path = Path(spec["batches_dir"]) / f"batch-{b:04d}.parquet"
        if not path.exists():
            probe_batch_file(path, w, b, rows, first_id=b * rows)
        paths.append(str(path))
    emit({"batches": paths})
    spark.stop()


if __name__ == "__main__":
    import sys

    main(json.loads(sys.argv[1]))
