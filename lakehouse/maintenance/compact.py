"""Compaction of a build table's version log (``lakehouse compact``).

The build table keeps every version of every key forever; a row-time join only needs the
versions that can still answer a probe. Given a **horizon** *H* (event time), compaction keeps,
per key, every version that starts after *H* and the latest one at or before it — the state
Flink keeps for a temporal join once its watermark passed *H* — and proves nothing else is
needed by the as-of rule (docs/concepts/time.md; ``tests/reference.py``):

For a probe at time *t* >= *H*, the candidates are the key's versions starting at or before
*t*: all of its versions at or before *H* and some after it. The winner is the greatest by
``(_event_time, _seq)``, so among the old ones only the latest, *L*, can ever win: the others
can be dropped.

* If *L* is a delete, a probe it wins does not match; without *L* the key has no candidate
  at or before *H* and the probe does not match either. *L* is dropped, and a key whose
  versions all lie at or before *H* disappears.
* A truncate (``_op = 't'``) at *T* ends every version before it for probes at or after *T*.
  Every truncate at or before *H* is at or before *t*, so only the latest of them, *T_old*,
  matters, and only against a winner before it — which can only be an *L* (versions after
  *H* start after *T_old*). An *L* before *T_old* therefore never matches for *t* >= *H*
  and is dropped like a delete; after that no kept version precedes any old truncate, so
  the old truncates are dropped too. Truncates after *H* are kept.

Hence the as-of answer (and the processing-time answer: the latest version) for every key
and every probe time >= *H* is unchanged. Probes older than *H* (late rows, a join whose
watermark is behind *H*) may get another answer: the CLI refuses a horizon above a
configured join's watermark. Versions arriving later with a start at or before *H* (data
later than the build watermark allows) would compete with an *L* that may have been dropped:
choose the horizon behind the build watermark, which is what ``--retention`` does.

The rewrite is one Delta commit that deletes the dropped rows (:func:`lakehouse.delta.
maintenance.delete_rows`, a ``MERGE ... WHEN MATCHED THEN DELETE`` on the rows' identity: key,
start, position, operation): started only on the version it read, rewriting only the files
that hold dropped rows, with the table's properties (snapshot marker included) and
transaction ids untouched, and what it did in the commit metadata (``lakehouse.compaction``).
Rows the ingest appends while it runs are kept: they start after every dropped row. Earlier
versions stay readable by time travel until vacuumed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakehouse import delta
from lakehouse.delta.maintenance import delete_rows
from lakehouse.dimension.layout import EVENT_TIME, OP, PROP_PRIMARY_KEY, SEQ
from lakehouse.dimension.marker import last_max_event_time, last_watermark
from lakehouse.errors import ConfigError, SchemaMismatchError
from lakehouse.failpoints import failpoint
from lakehouse.join.layout import META_STATE
from lakehouse.time import WATERMARK_MIN, Watermark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Commit metadata key of a compaction commit (JSON, see :class:`CompactionResult`).
META_COMPACTION = "lakehouse.compaction"


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionResult:
    """What a compaction did (or, dry run, would do).

    Attributes:
        table_uri: the build table.
        read_version: the version compacted.
        version: the version the compaction committed; None for a dry run or when nothing
            could be dropped.
        horizon_ms: the horizon (event time, epoch ms).
        rows_before / rows_after: rows of the table before and after.
        superseded: versions at or before the horizon with a later one at or before it.
        deletes: keys' latest versions at or before the horizon dropped as deletes.
        truncated: keys' latest versions at or before the horizon ended by a truncate.
        truncates: truncate rows at or before the horizon dropped.
        dry_run: nothing was written.
        seconds: how long it took.
    """

    table_uri: str
    read_version: int
    version: int | None
    horizon_ms: int
    rows_before: int
    rows_after: int
    superseded: int
    deletes: int
    truncated: int
    truncates: int
    dry_run: bool
    seconds: float

    def to_json(self) -> str:
        """The commit metadata of the compaction."""
        return json.dumps(
            {
                "horizonMs": self.horizon_ms,
                "readVersion": self.read_version,
                "rowsBefore": self.rows_before,
                "rowsAfter": self.rows_after,
                "dropped": {
                    "superseded": self.superseded,
                    "deletes": self.deletes,
                    "truncated": self.truncated,
                    "truncates": self.truncates,
                },
            }
        )


def compaction_plan(df: DataFrame, key_columns: tuple[str, ...], horizon_ms: int) -> DataFrame:
    """The rows compaction keeps (same columns), with ``_drop``: NULL for kept rows, else why
    the row goes (``superseded``, ``delete``, ``truncated``, ``truncate``). See the module
    docstring for why the as-of answer at every time >= ``horizon_ms`` is unchanged."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    old = F.col(EVENT_TIME) <= F.timestamp_millis(F.lit(horizon_ms))
    truncate = F.col(OP) == "t"
    seq = F.coalesce(F.col(SEQ), F.lit(""))
    # rows at or before the horizon first, each key's latest first: rank 1 is its L
    latest_first = Window.partitionBy(*key_columns).orderBy(
        old.desc(), F.col(EVENT_TIME).desc(), seq.desc()
    )
    # the latest truncate at or before the horizon: one row at most, read once
    last_truncate = (
        df.filter(old & truncate)
        .agg(F.max(F.struct(F.col(EVENT_TIME).alias("t"), seq.alias("s"))).alias("m"))
        .collect()[0]["m"]
    )
    ended = F.lit(False)
    if last_truncate is not None:
        t, s = F.lit(last_truncate["t"]), F.lit(last_truncate["s"])
        ended = (F.col(EVENT_TIME) < t) | ((F.col(EVENT_TIME) == t) & (seq < s))
    rank = F.when(old & ~truncate, F.row_number().over(latest_first))
    return df.withColumn("_rank", rank).select(
        *df.columns,
        F.when(~old, F.lit(None).cast("string"))
        .when(truncate, F.lit("truncate"))
        .when(F.col("_rank") > 1, F.lit("superseded"))
        .when(F.col(OP) == "d", F.lit("delete"))
        .when(ended, F.lit("truncated"))
        .alias("_drop"),
    )


def compacted(df: DataFrame, key_columns: tuple[str, ...], horizon_ms: int) -> DataFrame:
    """The rows of a build table's version log that compaction at ``horizon_ms`` keeps."""
    from pyspark.sql import functions as F

    return (
        compaction_plan(df, key_columns, horizon_ms).filter(F.col("_drop").isNull()).drop("_drop")
    )


def horizon_from_retention(uri: str, retention_ms: int) -> int:
    """The horizon ``retention_ms`` behind the build table's watermark (its max event time
    when no watermark is recorded): event time, so the data decides, not the clock."""
    if retention_ms < 0:
        raise ConfigError(f"--retention must be >= 0, got {retention_ms} ms", setting="retention")
    reference = last_watermark(uri)
    if reference == WATERMARK_MIN:
        reference = last_max_event_time(uri) or WATERMARK_MIN
    if reference == WATERMARK_MIN:
        raise ConfigError(
            f"build table '{uri}' records no watermark or event time to measure the retention "
            "from; give the horizon itself (--horizon)",
            setting="retention",
        )
    return reference - retention_ms


def join_watermark(
    *, output_table: str, pending_table: str, dead_letter_table: str | None, pipeline_id: str
) -> Watermark | None:
    """The combined watermark a join recorded after its last batch (None: no batch yet).
    Rows it has yet to release are after it (except late rows)."""
    from lakehouse.join.operator import last_state

    state = last_state(
        output_table=output_table,
        pending_table=pending_table,
        dead_letter_table=dead_letter_table,
        pipeline_id=pipeline_id,
    )
    return None if state is None else state.combined
    for entry in delta.history(pending_table, limit=8):
        text = entry.metadata.get(META_STATE)
        if text:
            return Watermark.from_dict(json.loads(text)["combined"])
    return None


def compact(
    spark: SparkSession,
    uri: str,
    *,
    horizon_ms: int,
    dry_run: bool = False,
    on_step: Callable[[str], None] | None = None,
    before_commit: Callable[[], None] | None = None,
) -> CompactionResult:
    """Compact the build table at ``uri`` to the horizon ``horizon_ms`` (module docstring).

    Args:
        spark: computes the rewrite.
        uri: the build table.
        horizon_ms: event time (epoch ms); as-of answers at or after it are unchanged.
        dry_run: count only; write nothing.
        on_step: told what is being done (progress display).
        before_commit: called once the rows to keep are decided, before the rewrite is
            written and committed: where a concurrent writer collides with it (tests inject a
            real append here).

    Raises:
        ConcurrentCommitError: the table changed after it was read; nothing was committed.
        SchemaMismatchError: the table has rows but no ``lakehouse.primaryKey``.
    """
    from pyspark.sql import functions as F

    started = time.monotonic()

    def step(text: str) -> None:
        if on_step is not None:
            on_step(text)

    step("reading the build table")
    read_version = delta.latest_version(uri)
    props = delta.get_properties(uri, version=read_version)
    keys = tuple(c for c in props.get(PROP_PRIMARY_KEY, "").split(",") if c)
    df = delta.read(spark, uri, version=read_version)
    rows_before = delta.row_count(uri, version=read_version)
    if not keys:
        if rows_before:
            raise SchemaMismatchError(
                f"build table '{uri}' has rows but no lakehouse.primaryKey property; it was not "
                "written by the lakehouse ingest, and compaction needs the key",
                table_uri=uri,
            )
        keys = ()

    step("deciding which versions to keep")
    plan = compaction_plan(df, keys, horizon_ms).persist()
    try:
        counts: dict[str | None, Any] = {
            r["_drop"]: int(r["count"]) for r in plan.groupBy("_drop").count().collect()
        }
        rows_after = counts.get(None, 0)
        result = CompactionResult(
            table_uri=uri,
            read_version=read_version,
            version=None,
            horizon_ms=horizon_ms,
            rows_before=rows_before,
            rows_after=rows_after,
            superseded=counts.get("superseded", 0),
            deletes=counts.get("delete", 0),
            truncated=counts.get("truncated", 0),
            truncates=counts.get("truncate", 0),
            dry_run=dry_run,
            seconds=0.0,
        )
        if dry_run or rows_after == rows_before:
            return _done(result, started)
        step(f"deleting {rows_before - rows_after} of {rows_before} rows")
        identity = [*keys, EVENT_TIME, SEQ, OP]
        victims = plan.filter(F.col("_drop").isNotNull()).select(*identity)
        if before_commit is not None:
            before_commit()
        failpoint("compact.before_commit")
        step("committing")
        written = delete_rows(
            victims,
            uri,
            on=identity,
            read_version=read_version,
            metadata={
                delta.META_OPERATION: "compact",
                META_COMPACTION: result.to_json(),
            },
        )
        return _done(_with_version(result, written.version), started)
    finally:
        plan.unpersist()


def _with_version(result: CompactionResult, version: int) -> CompactionResult:
    from dataclasses import replace

    return replace(result, version=version)


def _done(result: CompactionResult, started: float) -> CompactionResult:
    from dataclasses import replace

    return replace(result, seconds=time.monotonic() - started)
