"""Planning one batch for one build table: what the sink will write, decided from one summary
of the batch and the table's schema, before anything is written.

:func:`summarise` is the batch's one Spark job for the driver (record kinds, column sets,
phases, event-time range, end offsets); :func:`plan_target` projects a target's change events
onto the build table layout and decides the schema evolution: columns added or widened,
values that do not fit dead-lettered with the column and value, and the first incompatible
record that opens a schema block (:mod:`lakehouse.dimension.schema_block`). The sink
(:mod:`lakehouse.dimension.sink`) writes what the plan says, in its fixed order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakehouse import delta
from lakehouse.delta.types import fits, value_checked, widened
from lakehouse.dimension.layout import (
    EVENT_TIME,
    INGESTED_AT,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TOPIC,
    LINEAGE_COLUMNS,
    OP,
    PROP_PRIMARY_KEY,
    SEQ,
    SNAPSHOT,
    SNAPSHOT_PHASES,
)
from lakehouse.dimension.signals import Offsets
from lakehouse.dimension.targets import BuildTarget
from lakehouse.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

    from lakehouse.dimension.schema_block import SchemaBlock


#: Schema-change events recorded in one data commit's metadata at most (the rest: log only).
MAX_DDL_PER_COMMIT = 50


@dataclass(frozen=True, slots=True)
class BlockEvidence:
    """The first incompatible record of a batch (it starts a schema block)."""

    column: str
    table_type: str
    record_type: str
    reason: str
    first_offset: dict[str, Any]
    first_event_time_ms: int | None


@dataclass(slots=True)
class TargetPlan:
    target: BuildTarget
    key_columns: tuple[str, ...]
    rows: DataFrame | None
    rejected: DataFrame | None
    rejected_count: int
    evidence: BlockEvidence | None = None
    active_block: SchemaBlock | None = None
    blocked_count: int = 0
    schema_changes: list[dict[str, Any]] = field(default_factory=list)
    #: the column sets (``_row_columns``) whose records the table refused (a true conflict)
    refused_columns: frozenset[str] = frozenset()

    def accepts_schemas_of(self, group: Mapping[str, Any]) -> bool:
        """Whether the records of a summary group go into the table as they are, so that
        their Connect schema is the table's (:mod:`lakehouse.dimension.connect_schemas`):
        not refused, and no schema block open or starting."""
        return (
            self.active_block is None
            and self.evidence is None
            and group.get("_row_columns") not in self.refused_columns
        )


def count_kinds(summary: list[dict[str, Any]]) -> tuple[dict[str, int], dict[str, int]]:
    """Records per kind, and errors per error kind, from :func:`summarise`'s first answer.

    >>> count_kinds([{"_kind": "change", "_error_kind": None, "n": 3},
    ...     {"_kind": "error", "_error_kind": "invalid_json", "n": 1},
    ...     {"_kind": "change", "_error_kind": None, "n": 2}])
    ({'change': 5, 'error': 1}, {'invalid_json': 1})
    """
    kinds: dict[str, int] = {}
    errors: dict[str, int] = {}
    for r in summary:
        kinds[r["_kind"]] = kinds.get(r["_kind"], 0) + r["n"]
        if r["_kind"] == "error":
            errors[r["_error_kind"]] = errors.get(r["_error_kind"], 0) + r["n"]
    return kinds, errors


def summarise(decoded: DataFrame) -> tuple[list[dict[str, Any]], Offsets, list[dict[str, Any]]]:
    """One Spark job for everything the driver decides from, returned three ways:

    * per record kind, error kind, source table, phase and column set: count ``n`` and the
      largest event time ``max_ts`` (the plan of each target);
    * the end offset of each partition read (``{topic: {partition: next offset}}``);
    * per source table, phase and partition, of the change records: count ``n``, largest
      offset ``o``, largest Kafka timestamp ``ts``, largest connector position ``seq`` and
      largest ``source.ts_ms`` ``src_ts`` (the snapshot signals).

    Each summary entry of change records also has ``schema``: the newest Connect schema its
    records brought, as ``(position, partition, offset, text)``, or None (see
    :func:`lakehouse.dimension.connect_schemas.newest_in_batch`).
    """
    from pyspark.sql import functions as F

    shape = ("_kind", "_error_kind", "_source_table", "_snapshot_phase")
    columns = ("_row_columns", "_key_columns")
    rows = (
        decoded.groupBy(*shape, *columns, "topic", "partition")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.max("_event_time_ms").alias("max_ts"),
            F.max("offset").alias("o"),
            F.unix_millis(F.max("timestamp")).alias("ts"),
            F.max("_seq").alias("seq"),
            F.max(
                F.when(
                    F.col("_connect_schema").isNotNull(),
                    F.struct(
                        F.coalesce(F.col("_seq"), F.lit("")).alias("seq"),
                        F.col("partition"),
                        F.col("offset"),
                        F.col("_connect_schema").alias("text"),
                    ),
                )
            ).alias("schema"),
        )
        .collect()
    )
    summary: dict[tuple[Any, ...], dict[str, Any]] = {}
    ends: Offsets = {}
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        key = tuple(r[c] for c in (*shape, *columns))
        entry = summary.setdefault(
            key,
            {
                **dict(zip((*shape, *columns), key, strict=True)),
                "n": 0,
                "max_ts": None,
                "schema": None,
            },
        )
        entry["n"] += int(r["n"])
        entry["max_ts"] = _max(entry["max_ts"], r["max_ts"])
        if r["schema"] is not None:
            entry["schema"] = _max(entry["schema"], tuple(r["schema"]))
        partition = ends.setdefault(r["topic"], {})
        name = str(r["partition"])
        partition[name] = max(partition.get(name, 0), int(r["o"]) + 1)
        if r["_kind"] != "change":
            continue
        gkey = (r["_source_table"], r["_snapshot_phase"], r["topic"], r["partition"])
        group = groups.setdefault(
            gkey,
            {
                "_source_table": gkey[0],
                "_snapshot_phase": gkey[1],
                "topic": gkey[2],
                "partition": gkey[3],
                "n": 0,
                "o": None,
                "ts": None,
                "seq": None,
                "src_ts": None,
            },
        )
        group["n"] += int(r["n"])
        group["o"] = _max(group["o"], r["o"])
        group["ts"] = _max(group["ts"], r["ts"])
        group["seq"] = _max(group["seq"], r["seq"])
        group["src_ts"] = _max(group["src_ts"], r["max_ts"])
    return list(summary.values()), ends, list(groups.values())


def _max(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def schema_change_events(decoded: DataFrame) -> list[dict[str, Any]]:
    """The batch's Debezium schema-change (DDL) events, in source order, with positions."""
    from pyspark.sql import functions as F

    rows = (
        decoded.filter(F.col("_kind") == "schema_change")
        .select("_schema_change", "topic", "partition", "offset")
        .orderBy("topic", "partition", "offset")
        .collect()
    )
    out = []
    for r in rows:
        event = json.loads(r["_schema_change"])
        event.update(topic=r["topic"], partition=int(r["partition"]), offset=int(r["offset"]))
        out.append(event)
    return out


def plan_target(
    decoded: DataFrame,
    target: BuildTarget,
    summary: list[Any],
    batch_id: int,
    *,
    block: SchemaBlock | None = None,
    replay: bool = False,
) -> TargetPlan:
    """Decide the columns, key and schema-block handling of one target for this batch, and
    build (lazily) the DataFrames of its new versions and of its rejected records.

    Args:
        block: the table's open schema block, which holds back every change of this batch.
        replay: planning the dead letters of a block again (:mod:`.schema_block`): records
            that do not fit are rejected, but start no block and hold nothing back.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    uri = target.table_uri
    exists = delta.table_exists(uri)
    table_types: dict[str, DataType] = {}
    if exists:
        for f in delta.table_schema(uri).fields:
            table_types[f.name] = f.dataType

    # Column types: the table's where it has the column, else the first concrete type seen.
    chosen: dict[str, DataType] = dict(table_types)
    order: list[str] = [n for n in table_types if n not in LINEAGE_COLUMNS]
    untyped: list[str] = []  # new columns seen only as NULL so far
    compatible: list[str] = []
    # column set -> (column, record type, table type, reason)
    incompatible: dict[str, tuple[str, str, str, str]] = {}
    fallback: dict[str, DataType] = {}  # untyped columns that still need a type (empty arrays)
    for r in summary:
        raw_cols = json.loads(r["_row_columns"] or "[]")
        for n, t in raw_cols:
            typ = _void_fallback(t)
            if typ is not None:
                fallback.setdefault(n, typ)
        cols = [(n, _parse_type(t)) for n, t in raw_cols]
        wider: dict[str, DataType] = {}
        clash = None
        for n, t in cols:
            if t is None or n not in chosen or fits(t, chosen[n]):
                continue
            # a type both hold without loss: the column widens (the table is rewritten
            # with it before the data commit); otherwise a true conflict blocks the table
            w = widened(t, chosen[n])
            spark = decoded.sparkSession
            held = None if w is None else _value_not_held(spark, uri, n, table_types.get(n), w)
            if w is None or held is not None:
                clash = (n, t, held)
                break
            wider[n] = w
        if clash is not None:
            name, typ, held = clash
            incompatible[r["_row_columns"]] = (
                name,
                typ.simpleString(),
                chosen[name].simpleString(),
                f"column '{name}' has type {typ.simpleString()} in this record but "
                f"{chosen[name].simpleString()} in build table '{uri}'"
                + (
                    ""
                    if held is None
                    else f", which holds {held} (not exact as {typ.simpleString()})"
                ),
            )
            continue
        chosen.update(wider)
        compatible.append(r["_row_columns"])
        for n, t in cols:
            if n in chosen or n in order:
                continue
            if t is not None:
                chosen[n] = t
                order.append(n)
            elif n not in untyped:
                untyped.append(n)

    key_columns = tuple(target.key_columns)
    if not key_columns and exists:
        stored = delta.get_properties(uri).get(PROP_PRIMARY_KEY, "")
        key_columns = tuple(c for c in stored.split(",") if c)
    if not key_columns:
        for r in summary:
            seen = tuple(json.loads(r["_key_columns"] or "[]"))
            if seen:
                key_columns = seen
                break
    # A new column seen only as NULL is left out until a value gives it a type (its NULLs
    # read as NULL anyway); fixing it as string now would block the table on its first
    # value. Key and event-time columns are needed now: they fall back to string.
    for n in untyped:
        if n not in order and n in fallback:
            chosen[n] = fallback[n]  # an empty array stays an empty array, not NULL
            order.append(n)
        elif n not in order and (n in key_columns or n == target.event_time_column):
            order.append(n)
    if not summary:
        return TargetPlan(target, key_columns, None, None, 0)

    mine = decoded.filter(F.col("_kind") == "change")
    if target.source_table is not None:
        mine = mine.filter(F.col("_source_table") == target.source_table)
    if block is not None:
        # blocked: every change of the table is held back (module .schema_block)
        held = mine.withColumn("_error_kind", F.lit("schema_blocked")).withColumn(
            "_error",
            F.lit(
                f"build table '{uri}' is blocked on schema since version "
                f"{block.since_version} (column {block.column} changed {block.table_type} "
                f"-> {block.record_type}); held back until `lakehouse schema-resolve`"
            ),
        )
        count = sum(r["n"] for r in summary)
        return TargetPlan(
            target, key_columns, None, held, count, active_block=block, blocked_count=count
        )

    if not key_columns:
        raise ConfigError(
            f"build table '{uri}': no key columns configured and the records carry no Debezium "
            'key; set the table\'s key (key = ["id"] under [[ingest.tables]], or --key id)',
            setting="key",
        )
    missing = [k for k in key_columns if k not in order]
    if missing and compatible:
        raise ConfigError(
            f"build table '{uri}': key column(s) {missing} are not in the row image; the "
            f"records have columns {order}. Fix the table's key (key under [[ingest.tables]], "
            "or --key)",
            setting="ingest.tables.key",
        )
    if target.event_time_column and target.event_time_column not in order:
        raise ConfigError(
            f"build table '{uri}': event-time column '{target.event_time_column}' is not in "
            f"the row image (columns: {order}). Fix event_time under [[ingest.tables]] (or "
            "--event-time), or leave it unset to use source.ts_ms",
            setting="ingest.tables.event_time",
        )

    from pyspark.sql.types import StringType

    value_struct = StructType([StructField(n, chosen.get(n, StringType()), True) for n in order])

    reason = F.lit(None).cast("string")
    kind = F.lit(None).cast("string")
    evidence: BlockEvidence | None = None
    held_count = 0
    if incompatible:
        mapping = F.create_map(
            *[x for k, v in incompatible.items() for x in (F.lit(k), F.lit(v[3]))]
        )
        reason = mapping[F.col("_row_columns")]
        kind = F.when(reason.isNotNull(), F.lit("schema_mismatch"))
        if not replay:
            evidence, held, held_count = _block_evidence(mine, incompatible, uri)
            reason = F.when(reason.isNotNull(), reason).when(held.isNotNull(), held)
            kind = F.when(kind.isNotNull(), kind).when(held.isNotNull(), F.lit("schema_blocked"))
    parsed = F.from_json(F.coalesce(F.col("_row_json"), F.col("_key_json")), value_struct)
    mine = mine.withColumn("_v", parsed)
    # bigint values going into a double column (widened, or widened before): each is
    # checked, and one a double does not hold exactly is dead-lettered, never rounded
    for name, (record_type, sets) in _value_checks(summary, compatible, chosen).items():
        exact = F.from_json(F.col("_row_json"), StructType([StructField(name, record_type, True)]))[
            name
        ]
        lost = F.col("_row_columns").isin(*sets) & delta.inexact(exact, record_type, chosen[name])
        reason = F.when(reason.isNotNull(), reason).when(
            lost,
            F.concat(
                F.lit(f"column '{name}' holds "),
                exact.cast("string"),
                F.lit(f", which its type {chosen[name].simpleString()} does not hold exactly"),
            ),
        )
        kind = F.when(kind.isNotNull(), kind).when(lost, F.lit("invalid_value"))
    event_time = _event_time_expr(target, F.col("_v"), chosen)
    key_null = F.lit(False)
    for k in key_columns:
        key_null = key_null | F.col("_v")[k].isNull()
    not_truncate = F.col("_op") != "t"
    reason = (
        F.when(reason.isNotNull(), reason)
        .when(
            not_truncate & key_null,
            F.lit(f"key column(s) {list(key_columns)} missing or NULL in the row image"),
        )
        .when(
            event_time.isNull(),
            F.lit("no event time (source.ts_ms or the event-time column is NULL)"),
        )
    )
    kind = (
        F.when(kind.isNotNull(), kind)
        .when(not_truncate & key_null, F.lit("missing_key"))
        .when(event_time.isNull(), F.lit("missing_event_time"))
    )
    if target.max_future_ms is not None:
        # against the wall clock at planning: a version from the far future would hold the
        # build watermark there for good
        limit = int(time.time() * 1000) + target.max_future_ms
        future = F.unix_millis(event_time) > F.lit(limit)
        reason = F.when(reason.isNotNull(), reason).when(
            future,
            F.concat(
                F.lit("event time "),
                event_time.cast("string"),
                F.lit(
                    f" is more than max_future_ms = {target.max_future_ms} past the wall "
                    "clock (a wrong clock, or epoch seconds/microseconds read as milliseconds)"
                ),
            ),
        )
        kind = F.when(kind.isNotNull(), kind).when(future, F.lit("future_event_time"))
    mine = mine.withColumn("_reject", reason).withColumn("_reject_kind", kind)

    rejected = (
        mine.filter(F.col("_reject").isNotNull())
        .withColumn("_error", F.col("_reject"))
        .withColumn("_error_kind", F.col("_reject_kind"))
    )
    good = mine.filter(F.col("_reject").isNull())
    seq = F.coalesce(
        F.col("_seq"),
        F.format_string("k%010d.%020d", F.col("partition"), F.col("offset")),
    )
    rows = good.select(
        *[F.col("_v")[n].alias(n) for n in order],
        F.col("_op").alias(OP),
        event_time.alias(EVENT_TIME),
        seq.alias(SEQ),
        F.col("_snapshot_phase").isin(*SNAPSHOT_PHASES).alias(SNAPSHOT),
        F.current_timestamp().alias(INGESTED_AT),
        F.col("topic").alias(KAFKA_TOPIC),
        F.col("partition").alias(KAFKA_PARTITION),
        F.col("offset").alias(KAFKA_OFFSET),
    )
    mismatched = sum(r["n"] for r in summary if r["_row_columns"] in incompatible)
    return TargetPlan(
        target,
        key_columns,
        rows,
        rejected,
        mismatched + held_count,
        evidence=evidence,
        blocked_count=mismatched + held_count if evidence is not None else 0,
        refused_columns=frozenset(incompatible),
    )


def _value_not_held(
    spark: SparkSession, uri: str, name: str, old: DataType | None, new: DataType
) -> str | None:
    """A value of the table's column that would not survive widening it from ``old`` to
    ``new`` (as text), or None when every value does (or the change is exact by type)."""
    if old is None:
        return None
    return delta.first_inexact(delta.read(spark, uri), name, old, new)


def _value_checks(
    summary: list[Any], compatible: list[str], chosen: Mapping[str, DataType]
) -> dict[str, tuple[DataType, list[str]]]:
    """Per column, the record type and the column sets (``_row_columns``) whose values must
    be checked one by one to go into the column's chosen type (:func:`value_checked`)."""
    checks: dict[str, tuple[DataType, list[str]]] = {}
    for r in summary:
        if r["_row_columns"] not in compatible:
            continue
        for n, t in json.loads(r["_row_columns"] or "[]"):
            typ = _parse_type(t)
            if typ is not None and n in chosen and value_checked(typ, chosen[n]):
                checks.setdefault(n, (typ, []))[1].append(r["_row_columns"])
    return checks


def _block_evidence(
    mine: DataFrame, incompatible: Mapping[str, tuple[str, str, str, str]], uri: str
) -> tuple[BlockEvidence, Column, int]:
    """The first incompatible record of the batch, and which compatible records it holds
    back: those of the same topic-partition at later offsets (Debezium keeps a key in one
    partition, so these may be later changes of its key). Runs two small aggregations."""
    from pyspark.sql import functions as F

    bad = mine.filter(F.col("_row_columns").isin(*incompatible))
    firsts = bad.groupBy("topic", "partition").agg(F.min("offset").alias("o")).collect()
    first = (
        bad.orderBy(F.col("_event_time_ms").asc_nulls_last(), "topic", "partition", "offset")
        .select("_row_columns", "topic", "partition", "offset", "_event_time_ms")
        .first()
    )
    assert first is not None
    column, record_type, table_type, reason = incompatible[first["_row_columns"]]
    min_ts = bad.agg(F.min("_event_time_ms")).first()[0]
    evidence = BlockEvidence(
        column=column,
        table_type=table_type,
        record_type=record_type,
        reason=reason,
        first_offset={
            "topic": first["topic"],
            "partition": int(first["partition"]),
            "offset": int(first["offset"]),
        },
        first_event_time_ms=None if min_ts is None else int(min_ts),
    )
    starts = F.create_map(
        *[
            x
            for r in firsts
            for x in (F.lit(f"{r['topic']}\u0000{r['partition']}"), F.lit(int(r["o"])))
        ]
    )
    start = starts[F.concat_ws("\u0000", F.col("topic"), F.col("partition").cast("string"))]
    is_held = (
        start.isNotNull()
        & (F.col("offset") > start)
        & F.coalesce(~F.col("_row_columns").isin(*incompatible), F.lit(True))
    )
    held = F.when(
        is_held,
        F.lit(
            f"build table '{uri}' is blocked on schema (column {column} changed {table_type} -> "
            f"{record_type} in an earlier record of this partition); held back until "
            "`lakehouse schema-resolve`"
        ),
    )
    held_count = mine.filter(is_held).count()
    return evidence, held, held_count


def _event_time_expr(target: BuildTarget, row: Column, types: Mapping[str, DataType]) -> Column:
    """The version start: ``source.ts_ms``, or the configured row column converted by type
    (timestamp as is, date at midnight UTC, a number as epoch milliseconds, a string parsed
    as an ISO-8601 timestamp)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, NumericType, StringType, TimestampType

    if target.event_time_column is None:
        return F.timestamp_millis(F.col("_event_time_ms"))
    value = row[target.event_time_column]
    typ = types.get(target.event_time_column)
    if isinstance(typ, TimestampType):
        return value
    if isinstance(typ, DateType):
        return value.cast("timestamp")
    if isinstance(typ, NumericType):
        return F.timestamp_millis(value.cast("bigint"))
    if isinstance(typ, StringType) or typ is None:
        return F.to_timestamp(value)
    raise ConfigError(
        f"build table '{target.table_uri}': event-time column '{target.event_time_column}' has "
        f"type {typ.simpleString()}; use a timestamp, date, epoch-milliseconds number or "
        "ISO-8601 string column",
        setting="ingest.tables.event_time",
    )


def _parse_type(ddl: str) -> DataType | None:
    """Parse a Spark SQL type string from the decoder; a type that is or holds ``void`` (a
    NULL, an empty array) is not known yet and gives None: no table gets a ``void`` column."""
    from pyspark.sql.types import StructType

    if ddl in ("null", "") or "void" in ddl:
        return None
    return StructType.fromDDL(f"x {ddl}").fields[0].dataType


def _void_fallback(ddl: str) -> DataType | None:
    """The type a column seen only as ``ddl`` gets when it must have one: an empty array is
    kept as an empty ``array<string>`` (a later typed array fits it, element-wise or as
    text), a bare NULL gets nothing (None)."""
    if "void" not in ddl or ddl == "void":
        return None
    return _parse_type(ddl.replace("void", "string"))


def empty_like(uri: str) -> DataFrame:
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None
    return spark.createDataFrame([], delta.table_schema(uri))


def lineage_schema() -> StructType:
    """The schema of a build table created by a signal before any row (an empty source
    table): the lineage columns only; the row image's columns are added by the first rows."""
    from pyspark.sql.types import StructType

    return StructType.fromDDL(
        f"{OP} string, {EVENT_TIME} timestamp, {SEQ} string, {SNAPSHOT} boolean, "
        f"{INGESTED_AT} timestamp, {KAFKA_TOPIC} string, {KAFKA_PARTITION} int, "
        f"{KAFKA_OFFSET} bigint"
    )
