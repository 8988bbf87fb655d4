"""The raw record schema that every lakehouse stream has.

It is the schema of Spark's own Kafka source without ``headers``: the Kafka stream selects
these columns from ``spark.readStream.format("kafka")``, and the ``lakehouse-files`` source
produces them, so everything downstream reads the same columns from either:

==================  ============  =========================================================
column              type          meaning
==================  ============  =========================================================
``key``             binary        record key; null when the record has none
``value``           binary        record value; null for a Kafka tombstone
``topic``           string        topic (files source: option ``topic`` or directory name)
``partition``       int           partition (files source: see :mod:`lakehouse.sources.files`)
``offset``          bigint        position within the partition
``timestamp``       timestamp     record timestamp (UTC)
``timestampType``   int           Kafka's Java ids: 0 CreateTime, 1 LogAppendTime, -1 none
==================  ============  =========================================================

``timestampType`` uses the ids of Kafka's Java ``TimestampType`` (as Spark's Kafka source
does), not librdkafka's (which are one higher).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    import pyarrow as pa

#: The raw schema as a Spark DDL string.
RAW_SCHEMA_DDL: Final = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
    "timestamp TIMESTAMP, timestampType INT"
)

#: The raw schema as a Spark ``StructType`` (all columns nullable, as in Spark's Kafka source).
RAW_SCHEMA: Final = StructType(
    [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
)

#: ``timestampType`` when the record carries no timestamp (Kafka's ``NO_TIMESTAMP_TYPE``).
TIMESTAMP_TYPE_NONE: Final = -1
#: ``timestampType`` for a producer-assigned timestamp (Kafka's ``CREATE_TIME``).
TIMESTAMP_TYPE_CREATE_TIME: Final = 0
#: ``timestampType`` for a broker-assigned timestamp (Kafka's ``LOG_APPEND_TIME``).
TIMESTAMP_TYPE_LOG_APPEND_TIME: Final = 1


def same_columns(schema: StructType) -> bool:
    """Return whether ``schema`` has the raw schema's column names and types, in order.

    Nullability is ignored: Spark may hand a source a user-declared schema whose columns
    are marked non-nullable.
    """
    return [(f.name, f.dataType) for f in schema.fields] == [
        (f.name, f.dataType) for f in RAW_SCHEMA.fields
    ]


def arrow_schema() -> pa.Schema:
    """Return the Arrow schema Spark expects for :data:`RAW_SCHEMA` batches.

    Spark checks the Arrow batches a Python data source yields against
    ``to_arrow_schema(schema, timezone="UTC")``; this is that schema, built by hand so the
    sources need no private pyspark helper (a test pins the equality).
    """
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("topic", pa.string()),
            pa.field("partition", pa.int32()),
            pa.field("offset", pa.int64()),
            pa.field("timestamp", pa.timestamp("us", tz="UTC")),
            pa.field("timestampType", pa.int32()),
        ]
    )


def check_raw_schema(source_name: str, schema: StructType) -> None:
    """Refuse a user-given schema other than the raw schema (both sources have a fixed one).

    Raises:
        ConfigError: the schema differs; the message says to remove ``.schema(...)``.
    """
    from lakehouse.errors import ConfigError

    if not same_columns(schema):
        raise ConfigError(
            f"the {source_name} source has the fixed schema {RAW_SCHEMA_DDL!r}; "
            f"remove .schema(...) from the reader (got {schema.simpleString()!r}).",
            setting="schema",
        )
