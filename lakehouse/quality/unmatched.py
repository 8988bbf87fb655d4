"""Every unmatched and every pending probe row, with the reason, as a Delta table.

The quality report writes ``<report_dir>/unmatched_rows`` (replaced by each run): one row per
output row with ``_matched = false`` and per pending row, holding the probe id, key and time,
where it came from, and ``_reason`` / ``_detail`` from :mod:`lakehouse.quality.explain`.
``lakehouse sql`` registers it as ``unmatched_rows``.

How the reason is found, in one pass each:

* **unmatched output rows** are explained against the build table *as the join read it*: the
  version in their ``_build_version``. The build table is read at each such version, pruned
  to the rows' keys, and each key's changes are handed with its rows to
  :func:`~lakehouse.quality.explain.explain_unmatched` (a Spark ``cogroup``, so nothing is
  collected on the driver but the table's truncates). A long-running left join has rows at
  many versions: the newest :data:`MAX_VERSIONS_READ` distinct versions are read, and a row
  joined at an older one is explained at the nearest later version read; its
  ``_explained_at_version`` says so (the append-only log only grows, so that version holds a
  superset of what the row was joined against). Versions that time travel no longer reaches
  (vacuumed) are skipped the same way.
* **pending rows** are explained by the watermarks of the join's last batch and the snapshot
  marker (:func:`~lakehouse.quality.explain.explain_pending`); no build data is read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from lakehouse import delta
from lakehouse.dimension.layout import (
    EVENT_TIME,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TOPIC,
    OP,
    SEQ,
)
from lakehouse.errors import TableNotFoundError, UnsupportedTableError
from lakehouse.join.layout import (
    ARRIVAL_BATCH,
    BATCH_ID,
    BUILD_VERSION,
    JOIN_MODE,
    MATCHED,
    POSITION,
    TIME_MS,
)
from lakehouse.join.options import MS_PER_UNIT, TimeUnit
from lakehouse.quality.explain import Change, explain_pending, explain_unmatched
from lakehouse.table_kinds import TableKind, creation_properties
from lakehouse.time import Watermark

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

#: The table's directory name under the report directory, and its name in ``lakehouse sql``.
TABLE_NAME: Final = "unmatched_rows"
#: Distinct build versions read to explain unmatched output rows (module docstring).
MAX_VERSIONS_READ: Final = 32

# Columns of the table besides the probe id and key columns (probe columns never start
# with "_", so these cannot clash with them).
STATE: Final = "_state"  # "unmatched" or "pending"
TIME: Final = "_time"
REASON: Final = "_reason"
DETAIL: Final = "_detail"
EXPLAINED_AT: Final = "_explained_at_version"
_AT = "_at"  # the build version a row is explained at, while computing
_TIME_US = "_time_us"
_KEY_NULL = "_key_null"


@dataclass(frozen=True, slots=True, kw_only=True)
class LastBatch:
    """What the join's last batch decided from: its watermarks and the marker."""

    combined: Watermark
    probe: Watermark
    build: Watermark
    marker_complete: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Unmatched:
    """The table written and what is in it.

    Attributes:
        uri: the Delta table (``<report_dir>/unmatched_rows``).
        unmatched: output rows with ``_matched = false``.
        pending: pending rows.
        by_reason: rows per reason, most frequent first.
        examples: the first rows (oldest first), each as ``{column: value}``.
        versions_read: build versions read to explain unmatched rows.
        explained_later: unmatched rows explained at a later build version than they were
            joined at (see the module docstring).
    """

    uri: str
    unmatched: int
    pending: int
    by_reason: Mapping[str, int]
    examples: tuple[Mapping[str, Any], ...]
    versions_read: tuple[int, ...]
    explained_later: int

    @property
    def rows(self) -> int:
        """Every row of the table."""
        return self.unmatched + self.pending


def explain_rows(
    spark: SparkSession,
    *,
    output: DataFrame,
    pending: DataFrame,
    build_table: str,
    build_key: Sequence[str],
    probe_id: str,
    probe_key: Sequence[str],
    probe_time: str | None,
    probe_time_unit: TimeUnit,
    last_batch: LastBatch | None,
    uri: str,
    examples: int = 20,
) -> Unmatched:
    """Write the table of unmatched and pending rows to ``uri`` (replacing it) and summarise it.

    Args:
        output: the output table at the version the report validates.
        pending: the pending table at the version the report validates.
        build_table: the build table (missing: every unmatched row's key was never in it).
        build_key: the build table's key columns, paired in order with ``probe_key``.
        probe_id, probe_key, probe_time, probe_time_unit: the join's probe settings.
        last_batch: the last batch's watermarks; None when no batch is recorded (then every
            pending row is explained as waiting for the snapshot or the next batch).
        uri: where to write the table.
        examples: rows kept in :attr:`Unmatched.examples`.
    """
    from pyspark.sql import functions as F

    ids = list(dict.fromkeys([probe_id, *probe_key]))
    position = [c for c in POSITION if c in output.columns]
    unmatched = output.filter(~F.coalesce(F.col(MATCHED), F.lit(False))).select(
        F.lit("unmatched").alias(STATE),
        *ids,
        _time_ms(output, probe_time, probe_time_unit).alias("_t"),
        F.col(JOIN_MODE),
        F.col(BUILD_VERSION).cast("bigint").alias(BUILD_VERSION),
        F.col(BATCH_ID).cast("bigint").alias(BATCH_ID),
        *position,
    )
    distinct = unmatched.select(BUILD_VERSION).distinct().collect()
    versions = sorted({int(r[0]) for r in distinct if r[0] is not None})
    explained_unmatched, read = _explain_unmatched(
        spark,
        unmatched,
        versions,
        build_table=build_table,
        build_key=list(build_key),
        probe_key=list(probe_key),
    )
    explained_pending = _explain_pending(pending, ids=ids, last_batch=last_batch, position=position)
    table = explained_unmatched.unionByName(explained_pending, allowMissingColumns=True)
    if not delta.table_exists(uri, spark=spark):
        delta.create_table(
            uri, table.schema, properties=creation_properties(TableKind.UNMATCHED), spark=spark
        )
    (table.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(uri))
    written = delta.read(spark, uri)
    counts = {(r[0], r[1]): int(r[2]) for r in written.groupBy(STATE, REASON).count().collect()}
    by_reason = {reason: n for (_, reason), n in counts.items()}  # a reason has one state
    later = written.filter(F.col(EXPLAINED_AT) > F.col(BUILD_VERSION)).count() if read else 0
    sample = (
        written.orderBy(F.col(STATE).desc(), F.col(TIME).asc_nulls_last(), *ids).limit(examples)
        if examples
        else None
    )
    return Unmatched(
        uri=uri,
        unmatched=sum(n for (state, _), n in counts.items() if state == "unmatched"),
        pending=sum(n for (state, _), n in counts.items() if state == "pending"),
        by_reason=dict(sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0]))),
        examples=tuple(r.asDict() for r in sample.collect()) if sample is not None else (),
        versions_read=tuple(read),
        explained_later=later,
    )


# ------------------------------------------------------------------------------ unmatched


def _time_ms(df: DataFrame, probe_time: str | None, unit: TimeUnit) -> Column:
    """The probe time of an output row in epoch ms, as the join computed it (the output holds
    the probe column as parsed: a timestamp, a date, or an epoch number in ``unit``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, NumericType, TimestampNTZType, TimestampType

    if probe_time is None or probe_time not in df.columns:
        return F.lit(None).cast("bigint")
    typ: DataType = df.schema[probe_time].dataType
    value = F.col(probe_time)
    if isinstance(typ, TimestampType | TimestampNTZType):
        return F.unix_millis(value.cast("timestamp"))
    if isinstance(typ, DateType):
        return F.unix_millis(value.cast("timestamp"))
    if isinstance(typ, NumericType):
        factor = MS_PER_UNIT[unit]
        return (value.cast("double") * F.lit(factor)).cast("bigint")
    return F.unix_millis(F.try_to_timestamp(value.cast("string")))


def nearest_read(versions: Sequence[int], read: Sequence[int]) -> dict[int, int]:
    """Each version -> the smallest version read at or after it (``read`` holds the largest).

    >>> nearest_read([1, 3, 5, 9], [5, 9])
    {1: 5, 3: 5, 5: 5, 9: 9}
    """
    ordered = sorted(read)
    out: dict[int, int] = {}
    for v in versions:
        out[v] = next((r for r in ordered if r >= v), ordered[-1])
    return out


def _explain_unmatched(
    spark: SparkSession,
    rows: DataFrame,
    versions: Sequence[int],
    *,
    build_table: str,
    build_key: list[str],
    probe_key: list[str],
) -> tuple[DataFrame, list[int]]:
    """The unmatched rows with their reason; and the build versions read."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

    builds: dict[int, DataFrame] = {}
    if versions and build_key and delta.table_exists(build_table):
        for v in sorted(versions, reverse=True):
            if len(builds) == MAX_VERSIONS_READ:
                break
            try:
                df = delta.read(spark, build_table, version=v)
            except (TableNotFoundError, UnsupportedTableError):
                continue  # vacuumed or unreadable: the next version read explains its rows
            if all(k in df.columns for k in build_key):
                builds[v] = df
    read = sorted(builds)
    at = nearest_read(versions, read) if read else {v: v for v in versions}
    mapping = spark.createDataFrame(
        [(v, a) for v, a in at.items()],
        StructType([StructField("_v", LongType(), False), StructField(_AT, LongType(), False)]),
    )
    key_null = F.lit(False)
    for k in probe_key:
        key_null = key_null | F.col(k).isNull()
    probe = (
        rows.join(F.broadcast(mapping), F.col(BUILD_VERSION) == F.col("_v"), "left")
        .drop("_v")
        .withColumn(_KEY_NULL, key_null)
        .withColumn(
            _TIME_US,
            F.when(F.col(JOIN_MODE) == F.lit("proctime"), F.lit(None).cast("bigint")).otherwise(
                F.col("_t") * F.lit(1000)
            ),
        )
    )
    # the key in the build's names, to group both sides by (version, key)
    for p, b in zip(probe_key, build_key, strict=True):
        probe = probe.withColumn(f"_k_{b}", F.col(p))
    group = [_AT, *(f"_k_{b}" for b in build_key)]

    changes_schema = StructType(
        [
            *(StructField(f"_k_{b}", StringType(), True) for b in build_key),
            StructField(_AT, LongType(), False),
            StructField("_op", StringType(), True),
            StructField("_start_us", LongType(), True),
            StructField("_seq", StringType(), True),
            StructField("_pos", StringType(), True),
            StructField("_truncate", BooleanType(), False),
        ]
    )
    changes: DataFrame | None = None
    for v, df in builds.items():
        part = df.select(
            *(F.col(b).cast("string").alias(f"_k_{b}") for b in build_key),
            F.lit(v).cast("bigint").alias(_AT),
            F.col(OP).alias("_op"),
            F.unix_micros(F.col(EVENT_TIME)).alias("_start_us"),
            F.col(SEQ).cast("string").alias("_seq"),
            _position(df).alias("_pos"),
            (F.col(OP) == F.lit("t")).alias("_truncate"),
        )
        changes = part if changes is None else changes.unionByName(part)
    if changes is None:
        changes = spark.createDataFrame([], changes_schema)
    truncates: dict[int, list[Change]] = {}
    for r in changes.filter(F.col("_truncate")).collect():
        truncates.setdefault(int(r[_AT]), []).append(
            Change(int(r["_start_us"]), str(r["_seq"]), "t", r["_pos"])
        )
    # keys compared as strings on both sides: the build's and the probe's key types may
    # differ (int vs bigint), as they may in the join itself
    for b in build_key:
        probe = probe.withColumn(f"_k_{b}", F.col(f"_k_{b}").cast("string"))
    keys = probe.select(*group).distinct()
    kept = changes.filter(~F.col("_truncate")).join(F.broadcast(keys), group, "left_semi")

    out_fields = [f for f in probe.schema.fields]
    out_schema = StructType(
        [
            *out_fields,
            StructField(EXPLAINED_AT, LongType(), True),
            StructField(REASON, StringType(), False),
            StructField(DETAIL, StringType(), False),
        ]
    )
    read_any = bool(read)

    def explain(left: pd.DataFrame, right: pd.DataFrame) -> pd.DataFrame:
        import pandas as pd

        if left.empty:
            return pd.DataFrame(columns=[f.name for f in out_schema.fields])
        history = [
            Change(int(t), str(s), str(o), p if isinstance(p, str) else None)
            for t, s, o, p in zip(
                right["_start_us"], right["_seq"], right["_op"], right["_pos"], strict=True
            )
        ]
        reasons, details, explained_at = [], [], []
        for version, t_us, null in zip(left[_AT], left[_TIME_US], left[_KEY_NULL], strict=True):
            v = None if pd.isna(version) else int(version)
            e = explain_unmatched(
                time_us=None if pd.isna(t_us) else int(t_us),
                key_is_null=bool(null),
                changes=history if read_any else (),
                truncates=truncates.get(v, []) if v is not None else [],
                build_version=v if read_any else None,
            )
            reasons.append(e.reason)
            details.append(e.detail)
            explained_at.append(v if read_any else None)
        out = left.copy()
        out[EXPLAINED_AT] = pd.array(explained_at, dtype="Int64")
        out[REASON] = reasons
        out[DETAIL] = details
        return out

    explained = (
        probe.groupBy(*group)
        .cogroup(kept.groupBy(*group))
        .applyInPandas(explain, out_schema)
        .drop(_AT, _KEY_NULL, *(f"_k_{b}" for b in build_key))
    )
    return _finish(explained), read


def _position(df: DataFrame) -> Column:
    """``topic/partition@offset`` of a build row, when the table has the columns."""
    from pyspark.sql import functions as F

    if not {KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET} <= set(df.columns):
        return F.lit(None).cast("string")
    return F.concat_ws(
        "",
        F.col(KAFKA_TOPIC),
        F.lit("/"),
        F.col(KAFKA_PARTITION).cast("string"),
        F.lit("@"),
        F.col(KAFKA_OFFSET).cast("string"),
    )


def _finish(df: DataFrame) -> DataFrame:
    """The computing columns out, the time as a timestamp."""
    from pyspark.sql import functions as F

    return df.withColumn(TIME, F.timestamp_millis(F.col("_t"))).drop("_t", _TIME_US)


# -------------------------------------------------------------------------------- pending


def _explain_pending(
    pending: DataFrame, *, ids: list[str], last_batch: LastBatch | None, position: Sequence[str]
) -> DataFrame:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    rows = pending.select(
        F.lit("pending").alias(STATE),
        *ids,
        F.col(TIME_MS).cast("bigint").alias("_t"),
        F.col(ARRIVAL_BATCH).cast("bigint").alias(BATCH_ID),
        *[c for c in position if c in pending.columns],
    )
    schema: StructType = StructType(
        [
            *rows.schema.fields,
            StructField(REASON, StringType(), False),
            StructField(DETAIL, StringType(), False),
        ]
    )
    wm = last_batch

    def explain(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        from lakehouse.time import WATERMARK_MIN

        none = Watermark(WATERMARK_MIN)
        for batch in batches:
            reasons, details = [], []
            for t in batch["_t"]:
                e = explain_pending(
                    time_ms=None if t is None or t != t else int(t),
                    marker_complete=wm.marker_complete if wm else False,
                    combined=wm.combined if wm else none,
                    probe=wm.probe if wm else none,
                    build=wm.build if wm else none,
                )
                reasons.append(e.reason)
                details.append(e.detail)
            out = batch.copy()
            out[REASON] = reasons
            out[DETAIL] = details
            yield out

    return _finish(rows.mapInPandas(explain, schema))
