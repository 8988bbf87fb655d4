"""Files per table after many tiny micro-batches: the default compaction cadence, Delta's
auto compaction, and neither.

A processing-time left join runs ``batches`` micro-batches of one probe row each through the
project's operator (``TemporalJoin.process``, the foreachBatch handler), against a small
complete build table. Afterwards, for the output, pending and dead-letter tables: the live
files of the latest version (``DESCRIBE DETAIL``'s ``numFiles``: what a reader opens), the
parquet files on disk (what ``VACUUM`` would reclaim), the versions, and the seconds per batch.
Run three ways side by side in one process, so the ratios are measured on the same machine
load: ``default`` (appends compact every ``spark.lakehouse.compactEveryVersions`` = 100
versions), ``auto_compact`` (Delta's ``delta.autoOptimize.autoCompact`` on every table, the
cadence off) and ``no_compaction`` (both off).

Usage: ``python -m bench.files '{"batches": 1000}'`` (prints a ``BENCH-RESULT`` line), or the
``files`` section of ``python -m bench.run``.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.measure import emit

_DEFAULT_PROPERTY = "spark.databricks.delta.properties.defaults.autoOptimize.autoCompact"


def _build(spark: Any, uri: str) -> None:
    """A complete build table of 10 keys (one ingest batch with its 'last' record)."""
    from pyspark.sql.types import StructType

    from lakehouse.dimension import BuildSink, BuildTarget
    from lakehouse.sources.schema import RAW_SCHEMA_DDL
    from lakehouse.testing import DebeziumTable

    t = DebeziumTable("public", "rates", key="currency", start_ms=1_700_000_000_000)
    snap = t.snapshot([{"currency": f"C{i}", "rate": "1.0"} for i in range(10)])
    rows = [(m.key_bytes(), m.value_bytes(), "cdc", 0, i, None, 0) for i, m in enumerate(snap)]
    raw = spark.createDataFrame(rows, StructType.fromDDL(RAW_SCHEMA_DDL))
    sink = BuildSink(
        [BuildTarget(uri, key_columns=("currency",))],
        dead_letter_table=f"{uri}_dlq",
        pipeline_id="bench-ingest",
    )
    sink.process(raw, 0)


def _files_on_disk(uri: str) -> int:
    """Data files on disk (the log's own checkpoint files left out)."""
    return sum(1 for p in Path(uri).rglob("*.parquet") if "_delta_log" not in p.parts)


def _run(spark: Any, root: Path, batches: int, *, config: str) -> dict[str, Any]:
    from pyspark.sql.types import StructType

    from lakehouse.delta.write import COMPACT_EVERY_CONF, COMPACT_EVERY_VERSIONS
    from lakehouse.join import JoinOptions, TemporalJoin
    from lakehouse.sources.schema import RAW_SCHEMA_DDL

    spark.conf.set(_DEFAULT_PROPERTY, "true" if config == "auto_compact" else "false")
    every = COMPACT_EVERY_VERSIONS if config == "default" else 0
    spark.conf.set(COMPACT_EVERY_CONF, str(every))
    build = str(root / "build")
    _build(spark, build)
    options = JoinOptions(
        build_table=build,
        output_table=str(root / "out"),
        pending_table=str(root / "pending"),
        dead_letter_table=str(root / "dlq"),
        pipeline_id="bench-join",
        probe_schema="id bigint, currency string",
        probe_key=("currency",),
        probe_id="id",
        mode="proctime",
        join_type="left",
        watermark="none",
    )
    join = TemporalJoin(options)
    schema = StructType.fromDDL(RAW_SCHEMA_DDL)
    started = time.perf_counter()
    for b in range(batches):
        value = json.dumps({"id": b, "currency": f"C{b % 12}"}).encode()  # 2 of 12 unmatched
        raw = spark.createDataFrame([(None, value, "orders", 0, b, None, 0)], schema)
        join.process(raw, b)
    seconds = time.perf_counter() - started
    out: dict[str, Any] = {"seconds_per_batch": seconds / batches}
    for name in ("out", "pending", "dlq"):
        uri = str(root / name)
        if not Path(uri, "_delta_log").exists():
            continue
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{uri}`").first()
        out[name] = {
            "live_files": int(detail["numFiles"]),
            "files_on_disk": _files_on_disk(uri),
            "versions": int(spark.sql(f"DESCRIBE HISTORY delta.`{uri}` LIMIT 1").first()[0]) + 1,
            "rows": spark.read.format("delta").load(uri).count(),
        }
    return out


def main(spec: dict[str, Any]) -> dict[str, Any]:
    """Run both configurations; returns what :func:`emit` prints."""
    from lakehouse.spark import get_spark

    batches = int(spec.get("batches", 1000))
    configs = spec.get("configs", ["default", "auto_compact", "no_compaction"])
    spark = get_spark(conf={"spark.sql.shuffle.partitions": "1"})
    result: dict[str, Any] = {"batches": batches}
    with tempfile.TemporaryDirectory(prefix="bench-files-") as tmp:
        for name in configs:
            root = Path(tmp) / name
            result[name] = _run(spark, root, batches, config=name)
            shutil.rmtree(root, ignore_errors=True)
    return result


if __name__ == "__main__":
    emit(main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}))
