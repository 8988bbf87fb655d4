"""Events per second of the CDC decode alone: the product's against Spark's own ``from_json``.

The same Debezium events with Connect schemas (a snapshot of ``keys`` rates, then ``updates``
updates, about 2.3 kB each, from :func:`bench.e2e.debezium_events`) are held in memory and
decoded by two plans, alternately, ``rounds`` times each, into Spark's ``noop`` sink, so that
only the decode is timed (no source, no Delta write):

* ``plain``: ``from_json`` of the value with the payload's schema, the columns a plain
  Kafka-to-Delta copy keeps (:func:`bench.e2e.plain_parse`, the parse of the ingest's peer);
* ``product``: :func:`lakehouse.dimension.decode.decode_raw` (the JVM decode, with the
  schemas it learned in the warm-up round, as in a running ingest), then its row image in the
  column types, as the ingest's plan reads it (:func:`lakehouse.dimension.decode.row_value`);
* ``python``: the same records through the Python decoder alone (``mapInArrow``), as every
  record went before the JVM decode;
* ``jvm``: the JVM decoder alone (:func:`lakehouse.dimension.jvm_decode.decode_fast`), nothing
  persisted, no summary: the decoder's own cost beside ``plain``;
* ``jvm_cached``: the same, persisted as a batch persists it, counted, then read again: what
  the batch's cache adds (run with ``LAKEHOUSE_SPARK_CONF=spark.sql.inMemoryColumnarStorage.
  compressed=false`` to see its compression's share).

The result is each plan's median seconds, events per second, and each product plan's rate
over the plain one (the issue's target for the JVM decode is 0.9 or more).

Usage: ``python -m bench.decode '{"keys": 50000, "updates": 50000, "rounds": 3}'`` (prints a
``BENCH-RESULT`` line); ``"schemas": false``: the same events without Connect schemas.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

from bench.e2e import debezium_events, plain_parse
from bench.measure import emit
from lakehouse.cdc.decode import DEFAULT_MAX_BYTES

#: The row image's columns as the build table types them (``DebeziumTable``'s rates schema).
ROW_SCHEMA = "currency string, rate decimal(12,4), updated_at timestamp"


def bare_row_schema(value: bytes) -> str:
    """The columns a build table of records without a schema gets: the types the Python
    decoder infers from a record's row image (:func:`lakehouse.cdc.schema.infer_row`)."""
    from lakehouse.cdc.schema import infer_row

    payload = json.loads(value)
    _, columns = infer_row(payload["after"] or payload["before"])
    return ", ".join(f"{name} {kind}" for name, kind in columns)


def _row(decoded: Any, row_schema: str = ROW_SCHEMA) -> Any:
    """The row image in the table's types (``row_schema``), as the ingest's plan reads it."""
    from pyspark.sql.types import StructType

    from lakehouse.dimension.decode import row_value
    from lakehouse.dimension.jvm_decode import image_columns, row_text

    types = {f.name: f.dataType for f in StructType.fromDDL(row_schema).fields}
    images = image_columns(decoded.schema)
    text = row_text(images)
    return decoded.select(
        row_value(images, list(types), types, text).alias("row"),
        "_kind",
        "_op",
        "_event_time_ms",
        "_seq",
        "partition",
        "offset",
    )


def _python(raw: Any, row_schema: str = ROW_SCHEMA) -> Any:
    """Every record through the Python decoder (the JVM decoding none)."""
    from pyspark.sql import functions as F

    from lakehouse.dimension.decode import _OUT_FIELDS, DECODED_DDL, _complete_batches

    undecoded = raw.select(
        *[
            F.lit(None).cast("bigint" if n == "_event_time_ms" else "string").alias(n)
            for n in _OUT_FIELDS
        ],
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
    )
    decoded = undecoded.mapInArrow(_complete_batches(DEFAULT_MAX_BYTES, {}), DECODED_DDL)
    return _row(decoded, row_schema)


def main(spec: dict[str, Any]) -> dict[str, Any]:
    """Decode the events with both plans, alternately; returns what :func:`emit` prints."""
    from lakehouse.spark import get_spark

    keys, updates = int(spec.get("keys", 50_000)), int(spec.get("updates", 50_000))
    rounds = int(spec.get("rounds", 3))
    schemas = bool(spec.get("schemas", True))
    events = debezium_events(keys, updates, seed=7, schemas=schemas)
    # a table of records without schemas has the types inferred from them (no logical types)
    row_schema = ROW_SCHEMA if schemas else bare_row_schema(events[-1][1])
    n = len(events)
    spark = get_spark(app_name="bench-decode", master=spec.get("master", "local[2]"))
    rows = [(k, v, "cdc", 0, i) for i, (k, v) in enumerate(events)]
    raw = (
        spark.createDataFrame(
            rows, "key binary, value binary, topic string, partition int, offset bigint"
        )
        .selectExpr("*", "current_timestamp() AS timestamp")
        .repartition(spark.sparkContext.defaultParallelism)
        .cache()
    )
    raw.count()
    from lakehouse.dimension.decode import decode_raw
    from lakehouse.dimension.jvm_decode import WireSchemas, decode_fast

    wire = WireSchemas()  # one per ingest process: learned in the warm-up round

    def product(raw: Any) -> Any:
        return decode_raw(raw, wire=wire)

    def plain(raw: Any) -> Any:
        return plain_parse(raw, schemas=schemas)

    def python(raw: Any) -> Any:
        return _python(raw, row_schema)

    def jvm(raw: Any) -> Any:
        return decode_fast(raw, wire, max_bytes=DEFAULT_MAX_BYTES, start={})

    def jvm_cached(raw: Any) -> Any:
        cached = jvm(raw).persist()
        cached.count()
        return cached

    plans = {
        "plain": plain,
        "product": product,
        "python": python,
        "jvm": jvm,
        "jvm_cached": jvm_cached,
    }
    seconds: dict[str, list[float]] = {name: [] for name in plans}
    for _ in range(rounds + 1):  # the first round warms all up and is not counted
        for name, plan in plans.items():
            started = time.perf_counter()
            out = plan(raw)
            final = _row(out, row_schema) if name == "product" else out
            final.write.format("noop").mode("overwrite").save()
            seconds[name].append(time.perf_counter() - started)
            if name in ("product", "jvm_cached"):
                out.unpersist()
    medians = {name: statistics.median(s[1:]) for name, s in seconds.items()}
    return {
        "events": n,
        "schemas": schemas,
        "value_bytes_mean": round(sum(len(v) for _, v in events) / n),
        "rounds": rounds,
        "master": spec.get("master", "local[2]"),
        "seconds_median": {k: round(v, 2) for k, v in medians.items()},
        "events_per_s": {k: round(n / v) for k, v in medians.items()},
        "product_over_plain": round(medians["plain"] / medians["product"], 2),
        "python_over_plain": round(medians["plain"] / medians["python"], 2),
        "jvm_over_plain": round(medians["plain"] / medians["jvm"], 2),
    }


if __name__ == "__main__":
    emit(main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}))
