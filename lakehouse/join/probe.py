"""Probe records: their schema, parsing and dead letters (Spark expressions, no I/O).

A raw probe record (:data:`lakehouse.sources.RAW_SCHEMA`) becomes a row of the probe's
columns plus the join's pending lineage (:data:`lakehouse.join.layout.PENDING_LINEAGE`): the
source position, the event time in epoch ms, the raw bytes (kept so a dead-lettered or evicted
row can be replayed) and a parse verdict. Records that are not JSON objects of the probe
schema, or lack a column the join needs, carry ``_parse_error`` and go to the dead-letter
table; nothing is dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse.columns import batch_long
from lakehouse.dead_letter import to_dead_letters
from lakehouse.errors import ConfigError
from lakehouse.join.layout import (
    ARRIVAL_BATCH,
    ARRIVED_AT,
    PROBE_OFFSET,
    PROBE_PARTITION,
    PROBE_TOPIC,
    RAW_KEY,
    RAW_VALUE,
    SOURCE_TS,
    TIME_MS,
)
from lakehouse.join.options import MS_PER_UNIT, JoinOptions

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructField, StructType

PARSE_ERROR = "_parse_error"
PARSE_ERROR_KIND = "_parse_error_kind"
#: ``_error_kind`` of a JSON object with a value its column's type in probe_schema refuses.
SCHEMA_MISMATCH = "schema_mismatch"


def probe_schema(options: JoinOptions) -> StructType:
    """The probe records' schema, checked against the columns the options name.

    Raises:
        ConfigError: the DDL does not parse, names a column twice, lacks a named column, or
            the time column is not a time.
    """
    from pyspark.sql.types import DateType, NumericType, StructType, TimestampType

    try:
        schema = StructType.fromDDL(options.probe_schema)
    except Exception as e:
        raise ConfigError(
            f"join setting 'probe_schema': cannot parse {options.probe_schema!r} as DDL: {e}",
            setting="probe_schema",
        ) from e
    if not isinstance(schema, StructType):
        raise ConfigError(
            f"join setting 'probe_schema': {options.probe_schema!r} is one type, not a list of "
            "columns; write it as 'name type, ...' (e.g. 'order_id string, amount double')",
            setting="probe_schema",
        )
    names = set(schema.fieldNames())
    for col in (*options.probe_key, options.probe_time, options.probe_id):
        if col is not None and col not in names:
            raise ConfigError(
                f"join setting names probe column '{col}', which is not in probe_schema "
                f"(columns: {sorted(names)})",
                setting="probe_schema",
            )
    if options.probe_time is not None:
        typ = schema[options.probe_time].dataType
        if not isinstance(typ, TimestampType | DateType | NumericType):
            raise ConfigError(
                f"join setting 'probe_time': column '{options.probe_time}' has type "
                f"{typ.simpleString()}; use a timestamp or epoch milliseconds",
                setting="probe_time",
            )
    return schema


def pending_schema(schema: StructType) -> StructType:
    """Schema of the pending table: probe columns, source lineage, event time, arrival."""
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            *schema.fields,
            StructField(PROBE_TOPIC, StringType(), True),
            StructField(PROBE_PARTITION, IntegerType(), True),
            StructField(PROBE_OFFSET, LongType(), True),
            StructField(TIME_MS, LongType(), True),
            StructField(RAW_KEY, BinaryType(), True),
            StructField(RAW_VALUE, BinaryType(), True),
            StructField(SOURCE_TS, TimestampType(), True),
            StructField(ARRIVED_AT, TimestampType(), True),
            StructField(ARRIVAL_BATCH, LongType(), True),
        ]
    )


def parse(
    raw: DataFrame, options: JoinOptions, schema: StructType, *, wall_ms: int | None = None
) -> DataFrame:
    """Parse raw probe records (tick rows already removed): the probe columns, the source
    lineage, :data:`~lakehouse.join.layout.TIME_MS`, the raw bytes and the verdict
    (:data:`PARSE_ERROR` / :data:`PARSE_ERROR_KIND`, NULL for a good record).

    The time column is read as text and converted here (:func:`_time_ms`), so a number in a
    timestamp column is an epoch in ``options.probe_time_unit`` and a text that is no time
    is named as such. With ``wall_ms`` (the wall clock) and ``options.max_future_ms``, a time
    further past the wall clock is a ``future_time`` dead letter.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType, TimestampType

    time_col = options.probe_time
    as_text = time_col is not None and isinstance(schema[time_col].dataType, TimestampType)
    read_fields = [
        StructField(f.name, StringType(), True) if as_text and f.name == time_col else f
        for f in schema.fields
    ]
    with_corrupt = StructType([*read_fields, StructField("_corrupt", StringType(), True)])
    text = F.col("value").cast("string")
    row = F.from_json(
        text, with_corrupt, {"columnNameOfCorruptRecord": "_corrupt", "mode": "PERMISSIVE"}
    )
    df = raw.select(
        F.col("key").alias(RAW_KEY),
        F.col("value").alias(RAW_VALUE),
        F.col("topic").alias(PROBE_TOPIC),
        F.col("partition").alias(PROBE_PARTITION),
        F.col("offset").alias(PROBE_OFFSET),
        F.col("timestamp").alias(SOURCE_TS),
        row.alias("_r"),
    )
    t_ms = _time_ms(F.col("_r"), options, schema)
    fields = [
        (
            F.timestamp_millis(t_ms).alias(f.name)
            if as_text and f.name == time_col and t_ms is not None
            else F.col("_r")[f.name].alias(f.name)
        )
        for f in schema.fields
    ]
    required = [
        *options.probe_key,
        *([time_col] if time_col else []),
        *([options.probe_id] if options.probe_id else []),
    ]
    missing = F.lit(None).cast("string")
    for name in reversed(required):
        missing = F.when(F.col("_r")[name].isNull(), F.lit(name)).otherwise(missing)
    corrupt = F.col("_r").isNull() | F.col("_r")["_corrupt"].isNotNull()
    contradicted = _contradicted(F.col(RAW_VALUE).cast("string"), read_fields)
    no_time = F.lit(False) if t_ms is None else F.col("_r")[time_col].isNotNull() & t_ms.isNull()
    limit = (
        None
        if t_ms is None or wall_ms is None or options.max_future_ms is None
        else wall_ms + options.max_future_ms
    )
    future = (
        F.lit(False)
        if limit is None or t_ms is None
        else F.coalesce(t_ms > batch_long(limit), F.lit(False))
    )
    raw_time = F.col("_r")[time_col].cast("string") if time_col else F.lit(None)
    unit = options.probe_time_unit

    def holds(why: str) -> Column:
        """The reason a time value is refused: the column, the value (cut), why."""
        return F.concat(
            F.lit(f"probe_time column '{time_col}' holds '"),
            F.substring(raw_time, 1, 80),
            F.lit(f"'{why}"),
        )

    error = (
        F.when(F.col(RAW_VALUE).isNull(), F.lit("empty record"))
        .when(corrupt & contradicted.isNotNull(), contradicted)
        .when(corrupt, F.lit("not a JSON object matching probe_schema"))
        .when(
            missing.isNotNull(),
            F.concat(F.lit("required column '"), missing, F.lit("' is missing or NULL")),
        )
        .when(no_time, holds(f", neither an ISO-8601 time nor an epoch number (in {unit})"))
        .when(
            future,
            holds(
                f", more than max_future_ms = {options.max_future_ms} past the wall clock "
                f"(read as epoch {unit}; check probe_time_unit)"
            ),
        )
    )
    kind = (
        F.when(F.col(RAW_VALUE).isNull(), F.lit("empty"))
        .when(corrupt & contradicted.isNotNull(), F.lit(SCHEMA_MISMATCH))
        .when(corrupt, F.lit("malformed_json"))
        .when(missing.isNotNull(), F.lit("missing_field"))
        .when(no_time, F.lit("bad_time"))
        .when(future, F.lit("future_time"))
    )
    return df.select(
        *fields,
        PROBE_TOPIC,
        PROBE_PARTITION,
        PROBE_OFFSET,
        (t_ms if t_ms is not None else F.lit(None).cast("bigint")).alias(TIME_MS),
        RAW_KEY,
        RAW_VALUE,
        SOURCE_TS,
        error.alias(PARSE_ERROR),
        kind.alias(PARSE_ERROR_KIND),
    )


def _contradicted(text: Column, fields: list[StructField]) -> Column:
    """For a JSON object that does not parse as the probe schema: which column it
    contradicts, with the value it holds (``column 'amount' holds 'abc', which probe_schema
    reads as decimal(12,2)``), or NULL when no single column does (not JSON at all).

    Each column is parsed on its own, so the first column whose value alone fails is the one
    named; Spark evaluates this only for records that failed as a whole.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    as_text = F.from_json(text, StructType([StructField(f.name, StringType()) for f in fields]))
    found = F.lit(None).cast("string")
    for f in reversed(fields):
        alone = F.from_json(
            text,
            StructType([f, StructField("_corrupt", StringType(), True)]),
            {"columnNameOfCorruptRecord": "_corrupt", "mode": "PERMISSIVE"},
        )
        message = F.concat(
            F.lit(f"column '{f.name}' holds '"),
            F.substring(as_text[f.name], 1, 80),
            F.lit(f"', which probe_schema reads as {f.dataType.simpleString()}"),
        )
        found = F.when(
            alone["_corrupt"].isNotNull() & as_text[f.name].isNotNull(), message
        ).otherwise(found)
    return found


def _time_ms(row: Column, options: JoinOptions, schema: StructType) -> Column | None:
    """The probe time in epoch ms: a timestamp column (read as text) is an ISO-8601 time or
    an epoch number in ``probe_time_unit``; a date is midnight UTC; a number column is an
    epoch in ``probe_time_unit``. NULL when the value is none of these."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, TimestampType

    if options.probe_time is None:
        return None
    typ = schema[options.probe_time].dataType
    value = row[options.probe_time]
    factor = MS_PER_UNIT[options.probe_time_unit]

    def epoch(number: Column) -> Column:
        return (number.cast("double") * F.lit(factor)).cast("bigint")

    if isinstance(typ, TimestampType):
        text = F.trim(value)
        numeric = text.rlike(r"^-?[0-9]+(\.[0-9]+)?$")
        return F.when(numeric, epoch(text.try_cast("double"))).otherwise(
            F.unix_millis(F.try_to_timestamp(text))
        )
    if isinstance(typ, DateType):
        return F.unix_millis(value.cast("timestamp"))
    return epoch(value) if factor != 1.0 else value.cast("bigint")


def dead_letters(
    rows: DataFrame, *, kind: Column, error: Column, pipeline: str, batch_id: int
) -> DataFrame:
    """Probe rows (parsed or pending) as dead letters, with their raw record and position."""
    from pyspark.sql import functions as F

    return to_dead_letters(
        rows,
        raw_key=F.col(RAW_KEY),
        raw_value=F.col(RAW_VALUE),
        topic=F.col(PROBE_TOPIC),
        partition=F.col(PROBE_PARTITION),
        offset=F.col(PROBE_OFFSET),
        source_timestamp=F.col(SOURCE_TS),
        error_kind=kind,
        error=error,
        pipeline=pipeline,
        batch_id=batch_id,
    )
