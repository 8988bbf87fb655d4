"""The build table sink: Debezium records become versioned Delta build tables.

:class:`BuildSink` is a ``foreachBatch`` function. For each micro-batch it:

1. decodes the raw records on the executors (:mod:`lakehouse.build.decode`);
2. collects a small summary to the driver: record kinds, per source table the column sets,
   key columns, snapshot phases and event-time range, and the batch's end offsets;
3. routes change events to their build table (one target per source table, or one target
   for everything) and projects them onto the build table layout (:mod:`.layout`);
4. appends rejected records to the dead-letter table, then each target's versions, each
   with the idempotent transaction ``(pipeline_id, batch_id)`` and commit metadata (batch
   id, build watermark, max event time, end offsets, row count);
5. sets the snapshot-complete marker of a target whose snapshot ended in this batch, as a
   separate commit **after** the data commit.

Exactly once: Spark guarantees the same data for the same ``batch_id``; every write skips
when its table already records the transaction, so a replay is a no-op. The marker commit
comes after the data commit; a crash between the two is healed when the sink starts, from
the ``lakehouse.snapshotEnded`` key the data commit carries.

When is the snapshot over (for one target)? When a committed record of that table has
``source.snapshot`` ``last`` or ``last_in_data_collection``, or is a log-phase record
(``source.snapshot = false``, i.e. the connector streams changes, so its snapshot of this
table is done). Batches end at the source's high watermark at planning time, so every
snapshot record produced before the signal record is in the same or an earlier batch, and
therefore committed before the marker. Incremental-snapshot records (``incremental``) are
ordinary versions and never signal anything.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakehouse import delta
from lakehouse.build import layout as L
from lakehouse.build.decode import decode_raw
from lakehouse.build.marker import (
    heal_marker,
    is_complete,
    last_max_event_time,
    last_watermark,
    set_marker,
)
from lakehouse.dead_letter import append_dead_letters, to_dead_letters
from lakehouse.errors import ConfigError
from lakehouse.failpoints import failpoint
from lakehouse.time import WATERMARK_MIN

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType


@dataclass(frozen=True, slots=True)
class BuildTarget:
    """One build table and the records that feed it.

    Attributes:
        table_uri: the build table's location.
        key_columns: the dimension's primary key; empty means "from the Debezium key"
            (the Kafka message key's fields), which the first batch must then carry.
        source_table: only change events of this source table (``db.table`` for MySQL,
            ``schema.table`` for Postgres) go here; None takes every change event.
        event_time_column: a row column (timestamp, or epoch ms as a number) whose value is
            the version's start; None uses ``source.ts_ms``.
        out_of_orderness_ms: the build watermark trails the max committed event time by this.
    """

    table_uri: str
    key_columns: tuple[str, ...] = ()
    source_table: str | None = None
    event_time_column: str | None = None
    out_of_orderness_ms: int = 0

    def __post_init__(self) -> None:
        if self.out_of_orderness_ms < 0:
            raise ConfigError(
                f"out_of_orderness_ms must be >= 0, got {self.out_of_orderness_ms}",
                setting="out_of_orderness_ms",
            )


@dataclass(frozen=True, slots=True)
class TargetReport:
    """What one micro-batch did to one build table."""

    table_uri: str
    version: int | None
    rows: int
    rejected: int
    max_event_time_ms: int | None
    watermark_ms: int
    snapshot_complete: bool
    marker_set_now: bool
    skipped: bool


@dataclass(frozen=True, slots=True)
class BatchReport:
    """What one micro-batch did, for progress output and tests."""

    batch_id: int
    records: int
    changes: int
    tombstones: int
    transactions: int
    schema_changes: int
    dead_lettered: int
    unrouted: int
    end_offsets: Mapping[str, Mapping[str, int]]
    targets: tuple[TargetReport, ...]
    seconds: float
    skipped: bool = False
    errors_by_kind: Mapping[str, int] = field(default_factory=dict)


class BuildSink:
    """``foreachBatch`` sink that appends Debezium changes to versioned build tables.

    Runs on the driver; Spark calls it once per micro-batch, and again with the same
    ``batch_id`` (and the same data) after a failure. Writes are idempotent per
    ``(pipeline_id, batch_id)``. The instance holds no state that a replay depends on; it
    caches only which markers it has checked since start.

    Args:
        targets: the build tables; two targets may not route the same source table.
        dead_letter_uri: the dead-letter table (see :mod:`lakehouse.dead_letter`).
        pipeline_id: the application id of the Delta transactions. Keep it stable across
            restarts of the same pipeline, and unique among pipelines writing a table.
        on_batch: called with each batch's report (progress output).
        max_record_bytes: larger records are dead-lettered (``too_large``).
    """

    def __init__(
        self,
        targets: Sequence[BuildTarget],
        *,
        dead_letter_uri: str,
        pipeline_id: str,
        on_batch: Callable[[BatchReport], None] | None = None,
        max_record_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        if not targets:
            raise ConfigError("a build sink needs at least one target table", setting="targets")
        routes = [t.source_table for t in targets]
        if None in routes and len(targets) > 1:
            raise ConfigError(
                "a target without source_table takes every change event, so it must be the "
                "only target; give each target a source_table",
                setting="source_table",
            )
        dupes = {r for r in routes if routes.count(r) > 1}
        if dupes:
            raise ConfigError(
                f"source table(s) {sorted(dupes)} routed to more than one target",
                setting="source_table",
            )
        self.targets = tuple(targets)
        self.dead_letter_uri = dead_letter_uri
        self.pipeline_id = pipeline_id
        self.on_batch = on_batch
        self.max_record_bytes = max_record_bytes
        self._markers_checked = False

    # ---------------------------------------------------------------------------- entry point

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        report = self.process(df, batch_id)
        if self.on_batch is not None:
            self.on_batch(report)

    def process(self, df: DataFrame, batch_id: int) -> BatchReport:
        """Process one micro-batch (see the class docstring); returns what it did."""
        started = time.monotonic()
        if not self._markers_checked:
            for target in self.targets:
                heal_marker(target.table_uri)
            self._markers_checked = True
        if all(self._already_committed(t, batch_id) for t in self.targets):
            return BatchReport(
                batch_id,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                {},
                tuple(self._skipped_report(t) for t in self.targets),
                time.monotonic() - started,
                skipped=True,
            )

        decoded = decode_raw(df, max_record_bytes=self.max_record_bytes).persist()
        try:
            return self._process_decoded(decoded, batch_id, started)
        finally:
            decoded.unpersist()

    # ------------------------------------------------------------------------------ internals

    def _already_committed(self, target: BuildTarget, batch_id: int) -> bool:
        if not delta.table_exists(target.table_uri):
            return False
        recorded = delta.transaction_version(target.table_uri, self.pipeline_id)
        return recorded is not None and recorded >= batch_id

    def _skipped_report(self, target: BuildTarget) -> TargetReport:
        props = delta.get_properties(target.table_uri)
        return TargetReport(
            target.table_uri,
            delta.latest_version(target.table_uri),
            0,
            0,
            None,
            last_watermark(target.table_uri),
            is_complete(props),
            False,
            True,
        )

    def _process_decoded(self, decoded: DataFrame, batch_id: int, started: float) -> BatchReport:
        from pyspark.sql import functions as F

        summary = (
            decoded.groupBy(
                "_kind",
                "_error_kind",
                "_source_table",
                "_snapshot_phase",
                "_row_columns",
                "_key_columns",
            )
            .agg(F.count(F.lit(1)).alias("n"), F.max("_event_time_ms").alias("max_ts"))
            .collect()
        )
        offsets_rows = (
            decoded.groupBy("topic", "partition").agg(F.max("offset").alias("o")).collect()
        )
        end_offsets: dict[str, dict[str, int]] = {}
        for r in offsets_rows:
            end_offsets.setdefault(r["topic"], {})[str(r["partition"])] = int(r["o"]) + 1

        kinds: dict[str, int] = {}
        errors_by_kind: dict[str, int] = {}
        for r in summary:
            kinds[r["_kind"]] = kinds.get(r["_kind"], 0) + r["n"]
            if r["_kind"] == "error":
                errors_by_kind[r["_error_kind"]] = errors_by_kind.get(r["_error_kind"], 0) + r["n"]
        changes = [r for r in summary if r["_kind"] == "change"]

        rejected: list[DataFrame] = [
            self._dead_letters(decoded.filter(F.col("_kind") == "error"), batch_id)
        ]
        plans: list[_TargetPlan] = []
        routed = 0
        for target in self.targets:
            mine = [
                r
                for r in changes
                if target.source_table is None or r["_source_table"] == target.source_table
            ]
            routed += sum(r["n"] for r in mine)
            plan = _plan_target(decoded, target, mine, batch_id)
            plans.append(plan)
            if plan.rejected is not None:
                rejected.append(self._dead_letters(plan.rejected, batch_id))

        dead = rejected[0]
        for extra in rejected[1:]:
            dead = dead.unionByName(extra)
        dead_result = append_dead_letters(
            dead, self.dead_letter_uri, app_id=self.pipeline_id, batch_id=batch_id
        )
        dead_count = dead_result.rows if dead_result is not None else 0
        failpoint("ingest.after_dead_letters", batch_id)

        reports = tuple(self._commit_target(plan, batch_id, end_offsets) for plan in plans)
        return BatchReport(
            batch_id=batch_id,
            records=sum(kinds.values()),
            changes=kinds.get("change", 0),
            tombstones=kinds.get("tombstone", 0),
            transactions=kinds.get("transaction", 0),
            schema_changes=kinds.get("schema_change", 0),
            dead_lettered=dead_count,
            unrouted=kinds.get("change", 0) - routed,
            end_offsets=end_offsets,
            targets=reports,
            seconds=time.monotonic() - started,
            errors_by_kind=errors_by_kind,
        )

    def _dead_letters(self, rows: DataFrame, batch_id: int) -> DataFrame:
        from pyspark.sql import functions as F

        return to_dead_letters(
            rows,
            raw_key=F.col("key"),
            raw_value=F.col("value"),
            topic=F.col("topic"),
            partition=F.col("partition"),
            offset=F.col("offset"),
            source_timestamp=F.col("timestamp"),
            error_kind=F.col("_error_kind"),
            error=F.col("_error"),
            pipeline=self.pipeline_id,
            batch_id=batch_id,
        )

    def _commit_target(
        self, plan: _TargetPlan, batch_id: int, end_offsets: Mapping[str, Mapping[str, int]]
    ) -> TargetReport:
        from pyspark.sql import functions as F

        target = plan.target
        uri = target.table_uri
        if plan.rows is None:  # nothing routed here ever: do not create an empty table
            if not delta.table_exists(uri):
                return TargetReport(
                    uri, None, 0, plan.rejected_count, None, WATERMARK_MIN, False, False, False
                )
            rows = None
        else:
            rows = plan.rows.persist()
        try:
            if rows is not None and not delta.table_exists(uri):
                delta.create_table(
                    uri,
                    rows.schema,
                    properties={
                        L.PROP_PRIMARY_KEY: ",".join(plan.key_columns),
                        L.PROP_EVENT_TIME: target.event_time_column or "source.ts_ms",
                        L.PROP_SOURCE_TABLE: target.source_table or "*",
                        L.PROP_SNAPSHOT_COMPLETE: "false",
                        L.PROP_TABLE_KIND: "build",
                    },
                )
            previous_max = last_max_event_time(uri)
            batch_max = None
            n_rows = 0
            if rows is not None:
                agg = rows.agg(F.max(L.EVENT_TIME).alias("m"), F.count(F.lit(1)).alias("n")).first()
                n_rows = int(agg["n"])
                if agg["m"] is not None:
                    batch_max = int(agg["m"].timestamp() * 1000)
            max_ts = max((v for v in (previous_max, batch_max) if v is not None), default=None)
            watermark = (
                WATERMARK_MIN
                if max_ts is None
                else max(WATERMARK_MIN, max_ts - target.out_of_orderness_ms - 1)
            )
            metadata = {
                L.META_BATCH_ID: batch_id,
                L.META_PIPELINE: self.pipeline_id,
                L.META_WATERMARK: watermark,
                L.META_MAX_EVENT_TIME: max_ts if max_ts is not None else "",
                L.META_END_OFFSETS: {t: dict(p) for t, p in end_offsets.items()},
                L.META_ROWS: n_rows,
            }
            if plan.snapshot_signal is not None:
                metadata[L.META_SNAPSHOT_ENDED] = plan.snapshot_signal
            to_write = rows if rows is not None else _empty_like(uri)
            result = delta.append(
                to_write,
                uri,
                txn=(self.pipeline_id, batch_id),
                metadata=metadata,
                schema_mode="merge",
                max_files=2,
            )
        finally:
            if rows is not None:
                rows.unpersist()
        failpoint("ingest.after_data", batch_id)
        props = delta.get_properties(uri)
        marker_now = False
        if plan.snapshot_signal is not None and not is_complete(props) and not result.skipped:
            set_marker(
                uri, signal=plan.snapshot_signal, data_version=result.version, batch_id=batch_id
            )
            marker_now = True
        return TargetReport(
            table_uri=uri,
            version=result.version,
            rows=result.rows,
            rejected=plan.rejected_count,
            max_event_time_ms=max_ts,
            watermark_ms=watermark,
            snapshot_complete=marker_now or is_complete(props),
            marker_set_now=marker_now,
            skipped=result.skipped,
        )


# ---------------------------------------------------------------------------------- planning


@dataclass(slots=True)
class _TargetPlan:
    target: BuildTarget
    key_columns: tuple[str, ...]
    rows: DataFrame | None
    rejected: DataFrame | None
    rejected_count: int
    snapshot_signal: str | None


def _plan_target(
    decoded: DataFrame, target: BuildTarget, summary: list[Any], batch_id: int
) -> _TargetPlan:
    """Decide the columns, key and snapshot signal of one target for this batch, and build
    (lazily) the DataFrames of its new versions and of its rejected records."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    uri = target.table_uri
    exists = delta.table_exists(uri)
    table_types: dict[str, DataType] = {}
    if exists:
        for f in delta.arrow_schema_to_spark(delta.table_schema(uri)).fields:
            table_types[f.name] = f.dataType

    # Column types: the table's where it has the column, else the first concrete type seen.
    chosen: dict[str, DataType] = dict(table_types)
    order: list[str] = [n for n in table_types if n not in L.LINEAGE_COLUMNS]
    compatible: list[str] = []
    incompatible: dict[str, str] = {}
    for r in summary:
        cols = [(n, _parse_type(t)) for n, t in json.loads(r["_row_columns"] or "[]")]
        clash = next(
            ((n, t) for n, t in cols if t is not None and n in chosen and chosen[n] != t), None
        )
        if clash is not None:
            name, typ = clash
            incompatible[r["_row_columns"]] = (
                f"column '{name}' has type {typ.simpleString()} in this record but "
                f"{chosen[name].simpleString()} in build table '{uri}'"
            )
            continue
        compatible.append(r["_row_columns"])
        for n, t in cols:
            if n not in order:
                order.append(n)
            if t is not None and n not in chosen:
                chosen[n] = t

    key_columns = tuple(target.key_columns)
    if not key_columns and exists:
        stored = delta.get_properties(uri).get(L.PROP_PRIMARY_KEY, "")
        key_columns = tuple(c for c in stored.split(",") if c)
    if not key_columns:
        for r in summary:
            seen = tuple(json.loads(r["_key_columns"] or "[]"))
            if seen:
                key_columns = seen
                break
    signal = _snapshot_signal(summary)
    if not summary:
        return _TargetPlan(target, key_columns, None, None, 0, None)
    if not key_columns:
        raise ConfigError(
            f"build table '{uri}': no key columns configured and the records carry no Debezium "
            "key; set key_columns (e.g. --key id)",
            setting="key_columns",
        )
    missing = [k for k in key_columns if k not in order]
    if missing and compatible:
        raise ConfigError(
            f"build table '{uri}': key column(s) {missing} are not in the row image; the "
            f"records have columns {order}. Fix key_columns.",
            setting="key_columns",
        )
    if target.event_time_column and target.event_time_column not in order:
        raise ConfigError(
            f"build table '{uri}': event-time column '{target.event_time_column}' is not in "
            f"the row image (columns: {order}). Fix event_time_column, or leave it unset to "
            "use source.ts_ms.",
            setting="event_time_column",
        )

    from pyspark.sql.types import StringType

    value_struct = StructType([StructField(n, chosen.get(n, StringType()), True) for n in order])
    mine = decoded.filter(F.col("_kind") == "change")
    if target.source_table is not None:
        mine = mine.filter(F.col("_source_table") == target.source_table)

    reason = F.lit(None).cast("string")
    kind = F.lit(None).cast("string")
    if incompatible:
        mapping = F.create_map(*[x for k, v in incompatible.items() for x in (F.lit(k), F.lit(v))])
        reason = mapping[F.col("_row_columns")]
        kind = F.when(reason.isNotNull(), F.lit("schema_mismatch"))
    parsed = F.from_json(F.coalesce(F.col("_row_json"), F.col("_key_json")), value_struct)
    mine = mine.withColumn("_v", parsed)
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
        F.col("_op").alias(L.OP),
        event_time.alias(L.EVENT_TIME),
        seq.alias(L.SEQ),
        F.col("_snapshot_phase").isin(*L.SNAPSHOT_PHASES).alias(L.SNAPSHOT),
        F.current_timestamp().alias(L.INGESTED_AT),
        F.col("topic").alias(L.KAFKA_TOPIC),
        F.col("partition").alias(L.KAFKA_PARTITION),
        F.col("offset").alias(L.KAFKA_OFFSET),
    )
    rejected_count = sum(r["n"] for r in summary if r["_row_columns"] in incompatible)
    return _TargetPlan(target, key_columns, rows, rejected, rejected_count, signal)


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
        setting="event_time_column",
    )


def _parse_type(ddl: str) -> DataType | None:
    """Parse a Spark SQL type string from the decoder; ``void`` (unknown) gives None."""
    from pyspark.sql.types import StructType

    if ddl in ("void", "null", ""):
        return None
    return StructType.fromDDL(f"x {ddl}").fields[0].dataType


def _snapshot_signal(summary: Iterable[Any]) -> str | None:
    phases = {r["_snapshot_phase"] for r in summary}
    for phase in ("last", "last_in_data_collection"):
        if phase in phases:
            return phase
    if "false" in phases:
        return "log_record"
    return None


def _empty_like(uri: str) -> DataFrame:
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None
    return spark.createDataFrame([], delta.arrow_schema_to_spark(delta.table_schema(uri)))
