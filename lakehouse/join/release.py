"""Staging a batch's rows by its plan, and the joined output rows (Spark expressions).

The candidates of a batch are the pending rows plus the new ones. :func:`stage` marks each
with the plan's verdict, in this order of precedence:

* ``_arrived_late``: a new row at or below the previous watermark (event time): the
  watermark had passed its time when it arrived;
* ``_late``: such a row under ``late_policy = dead-letter``;
* ``_release``: the watermark covers it (``ReleasePlan.releasing``: the end-of-input
  watermark in a run that ends its input, else the combined one): every row when it is
  processing time, ``time <= watermark`` when it is event time; nothing while there is no
  build table;
* ``_expired``: a pending row older than ``pending_ttl_ms`` (by arrival) that the watermark
  does not release: released by expiry (joined all the same) or dead-lettered, by
  ``expiry_policy``;
* ``_evict``: of the rows that would stay pending, those over the pending bound
  (:func:`apply_pending_bound`).

Every other row stays pending. Only the plan and the rows decide, never the clock, so a
replay with the recorded plan stages the same rows the same way. Every output row says in
``_released_by`` what released it (:func:`released_by`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse.columns import batch_long, batch_timestamp_ms
from lakehouse.dimension.layout import LINEAGE_COLUMNS
from lakehouse.errors import ConfigError
from lakehouse.join.asof import PROBE_TIME_US, join_as_of
from lakehouse.join.layout import (
    ARRIVAL_BATCH,
    ARRIVED_AT,
    BATCH_ID,
    BUILD_EVENT_TIME,
    BUILD_VERSION,
    EVICTED_AGE,
    EVICTED_ROWS,
    JOIN_MODE,
    MATCHED,
    POSITION,
    PROBE_OFFSET,
    PROBE_PARTITION,
    PROBE_TOPIC,
    RELEASED_AT,
    RELEASED_BY,
    TIME_MS,
    WATERMARK,
)
from lakehouse.join.layout import LATE as LATE_KIND
from lakehouse.join.options import JoinOptions
from lakehouse.join.state import BatchCounts, ReleasePlan, late_rule_applies
from lakehouse.time import WATERMARK_MAX, WATERMARK_MIN, Watermark

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

IS_NEW = "_is_new"
ARRIVED_LATE = "_arrived_late"
LATE = "_late"
EXPIRED = "_expired"
RELEASE = "_release"
EVICT = "_evict"
#: What released an output row (``_released_by``).
BY_WATERMARK = "watermark"
BY_PROCESSING_TIME = "processing_time"
BY_END_OF_INPUT = "end_of_input"
BY_EXPIRY = "expiry"
#: A row the watermark had passed when it arrived, joined all the same (``late_policy =
#: join``); the word of its dead letter under ``late_policy = dead-letter`` too.
BY_LATE = LATE_KIND
STAGING = (IS_NEW, ARRIVED_LATE, LATE, EXPIRED, RELEASE, EVICT)


def covers(watermark: Watermark, t_ms: Column) -> Column:
    """Whether the watermark releases a row of event time ``t_ms``."""
    from pyspark.sql import functions as F

    if watermark.use_processing_time:
        return F.lit(True)
    if watermark.timestamp == WATERMARK_MIN:
        return F.lit(False)
    return t_ms.isNotNull() & (t_ms <= batch_long(watermark.timestamp))


def arrived_late(plan: ReleasePlan) -> Column:
    """Whether a candidate row is new and the watermark before this batch had passed its
    time already (``time <= previous watermark``, event time only: under processing time
    nothing is late)."""
    from pyspark.sql import functions as F

    previous = plan.previous
    if previous.use_processing_time or previous.timestamp == WATERMARK_MIN:
        return F.lit(False)
    return F.col(IS_NEW) & (F.col(TIME_MS) <= batch_long(previous.timestamp))


def stage(candidates: DataFrame, plan: ReleasePlan, options: JoinOptions) -> DataFrame:
    """Add the plan's verdicts (module docstring), all but ``_evict``."""
    from pyspark.sql import functions as F

    candidates = candidates.withColumn(ARRIVED_LATE, arrived_late(plan))
    late = F.col(ARRIVED_LATE) if late_rule_applies(options, plan) else F.lit(False)
    expired = F.lit(False)
    if options.pending_ttl_ms is not None:
        horizon = batch_timestamp_ms(plan.decided_at_ms - options.pending_ttl_ms)
        expired = ~F.col(IS_NEW) & (F.col(ARRIVED_AT) <= horizon)
    release = covers(plan.releasing, F.col(TIME_MS))
    if plan.build_version is None:  # no build table yet: nothing can be released or expired
        expired = release = F.lit(False)
    return (
        candidates.withColumn(LATE, late)
        .withColumn(RELEASE, release & ~F.col(LATE))
        .withColumn(EXPIRED, expired & ~F.col(LATE) & ~F.col(RELEASE))
    )


def released_by(plan: ReleasePlan) -> Column:
    """``_released_by`` of a staged row that leaves by release or expiry: ``expiry`` (its
    TTL ran out first), ``late`` (the watermark had passed its time when it arrived: joined
    as of its time all the same, under ``late_policy = join``), ``processing_time``,
    ``watermark`` (the combined event-time watermark covers it) or ``end_of_input`` (only
    the end of the probe input does)."""
    from pyspark.sql import functions as F

    by_watermark = F.lit(BY_PROCESSING_TIME if plan.combined.use_processing_time else BY_WATERMARK)
    if plan.final is not None:
        by_watermark = F.when(covers(plan.combined, F.col(TIME_MS)), by_watermark).otherwise(
            F.lit(BY_END_OF_INPUT)
        )
    return (
        F.when(F.col(EXPIRED), F.lit(BY_EXPIRY))
        .when(F.col(ARRIVED_LATE), F.lit(BY_LATE))
        .otherwise(by_watermark)
    )


def age_ms(plan: ReleasePlan) -> Column | None:
    """A waiting row's age for the pending bound, in the probe's own time: how far its event
    time is behind the probe watermark, or (probe in processing time) how long ago it arrived.

    Event time, not arrival time, where there is one: the answer then depends on the data
    only, not on how fast or in how many batches it was processed, and it measures what the
    bound is for (rows the probe stream has long passed, held back by the build side). None
    while the probe watermark is still MIN (no probe time seen: nothing is old yet).
    """
    from pyspark.sql import functions as F

    if plan.probe.use_processing_time:
        return batch_long(plan.decided_at_ms) - F.unix_millis(F.col(ARRIVED_AT))
    if plan.probe.timestamp == WATERMARK_MIN:
        return None
    return batch_long(plan.probe.timestamp) - F.col(TIME_MS)


def apply_pending_bound(staged: DataFrame, plan: ReleasePlan) -> DataFrame:
    """Add ``_evict``: the pending bound's verdict (``pending_bound_age``,
    ``pending_bound_rows`` or NULL) for each row that would otherwise stay pending.

    First every waiting row more than ``pending_max_age_ms`` behind the probe's time; then,
    when more than ``pending_max_rows`` remain, the oldest of them (event time, or arrival
    batch when the probe watermark is processing time; ties by source position, which makes
    the order total, so a replay picks the same rows). Counting the remaining rows is a Spark
    job, run only when a row bound is set.
    """
    from pyspark.sql import functions as F

    waiting = ~F.col(RELEASE) & ~F.col(LATE) & ~F.col(EXPIRED)
    verdict = F.lit(None).cast("string")
    age = age_ms(plan)
    if plan.pending_max_age_ms is not None and age is not None:
        verdict = F.when(waiting & (age > F.lit(plan.pending_max_age_ms)), F.lit(EVICTED_AGE))
    staged = staged.withColumn(EVICT, verdict)
    if plan.pending_max_rows is None:
        return staged
    remaining = staged.filter(waiting & F.col(EVICT).isNull())
    over = remaining.count() - plan.pending_max_rows
    if over <= 0:
        return staged
    position = list(POSITION)
    oldest = (
        [ARRIVAL_BATCH]
        if plan.probe.use_processing_time
        else [F.coalesce(F.col(TIME_MS), F.lit(WATERMARK_MIN)).asc()]
    )
    victims = (
        remaining.orderBy(*oldest, *position)
        .limit(over)
        .select(*position)
        .distinct()
        .withColumn("_victim", F.lit(True))
    )
    columns = staged.columns
    return (
        staged.join(victims, on=position, how="left")
        .withColumn(EVICT, F.coalesce(F.col(EVICT), F.when(F.col("_victim"), F.lit(EVICTED_ROWS))))
        .select(*columns)
    )


def count(staged: DataFrame) -> BatchCounts:
    """How the staged rows split (one Spark job)."""
    from pyspark.sql import functions as F

    row = staged.agg(
        F.count(F.lit(1)).alias("total"),
        F.count(F.when(F.col(RELEASE), 1)).alias("release"),
        F.count(F.when(F.col(LATE), 1)).alias("late"),
        F.count(F.when(F.col(EXPIRED), 1)).alias("expired"),
        F.count(F.when(F.col(EVICT) == EVICTED_AGE, 1)).alias("evicted_age"),
        F.count(F.when(F.col(EVICT) == EVICTED_ROWS, 1)).alias("evicted_rows"),
    ).first()
    assert row is not None
    return BatchCounts(**{k: int(row[k]) for k in row.asDict()})


def kept(staged: DataFrame) -> DataFrame:
    """The rows that stay pending, in the pending table's layout."""
    from pyspark.sql import functions as F

    keep = ~F.col(RELEASE) & ~F.col(LATE) & ~F.col(EXPIRED) & F.col(EVICT).isNull()
    return staged.filter(keep).drop(*STAGING)


def output_rows(
    staged: DataFrame,
    build: DataFrame,
    *,
    plan: ReleasePlan,
    options: JoinOptions,
    build_key: tuple[str, ...],
    num_buckets: int,
) -> DataFrame:
    """Joined output rows of the batch, matched or not: the released rows, and the expired
    ones when ``expiry_policy = release`` (joined as of their time like the others), with
    the lineage columns.

    Raises:
        ConfigError: a build column would have the name of a probe column.
    """
    from pyspark.sql import functions as F

    o = options
    assert plan.build_version is not None
    for probe_column, build_column in zip(o.probe_key, build_key, strict=True):
        if build_column not in build.columns:
            # a build table whose snapshot completed empty (created by a signal before
            # any row) has no key columns yet: it matches nothing
            build = build.withColumn(
                build_column, F.lit(None).cast(staged.schema[probe_column].dataType)
            )
    value_columns = [c for c in build.columns if c not in build_key and c not in LINEAGE_COLUMNS]
    carried = (ARRIVED_AT, ARRIVAL_BATCH, PROBE_TOPIC, PROBE_PARTITION, PROBE_OFFSET)
    probe_columns = [c for c in staged.columns if not c.startswith("_") or c in carried]
    out_values = [o.build_prefix + c for c in value_columns]
    clash = sorted(set(out_values) & set(probe_columns))
    if clash:
        raise ConfigError(
            f"build column(s) {clash} have the names of probe columns; set build_prefix "
            "(e.g. --build-prefix rate_) so the output can hold both",
            setting="build_prefix",
        )
    leaving = F.col(RELEASE)
    if o.expiry_policy == "release" and o.pending_ttl_ms is not None:
        leaving = leaving | F.col(EXPIRED)  # joined as of its time too, by expiry
    released = staged.filter(leaving).select(
        *probe_columns,
        released_by(plan).alias(RELEASED_BY),
        (F.col(TIME_MS) * 1000).alias(PROBE_TIME_US),
    )
    joined = join_as_of(
        released,
        build,
        probe_key=o.probe_key,
        build_key=build_key,
        value_columns=value_columns,
        output_names=[
            *probe_columns,
            RELEASED_BY,
            *out_values,
            BUILD_EVENT_TIME,
            MATCHED,
        ],
        latest=o.mode == "proctime",
        num_buckets=num_buckets,
    )
    wm = None if plan.releasing.use_processing_time else plan.releasing.timestamp
    return joined.select(
        *probe_columns,
        *out_values,
        MATCHED,
        (
            F.lit(None).cast("bigint")
            if plan.build_version is None
            else batch_long(plan.build_version)
        ).alias(BUILD_VERSION),
        BUILD_EVENT_TIME,
        (
            F.lit(None).cast("timestamp")
            if wm is None or wm in (WATERMARK_MIN, WATERMARK_MAX)
            else batch_timestamp_ms(wm)
        ).alias(WATERMARK),
        batch_timestamp_ms(plan.decided_at_ms).alias(RELEASED_AT),
        F.lit(o.mode).alias(JOIN_MODE),
        batch_long(plan.batch_id).alias(BATCH_ID),
        RELEASED_BY,
    )


def for_join_type(out: DataFrame, options: JoinOptions) -> DataFrame:
    """The output rows the join type writes: all of them (``left``), or the matched ones and
    every row released by expiry, matched or not (``inner``: a row that waited out its TTL
    is never dropped without a trace)."""
    from pyspark.sql import functions as F

    if options.join_type == "inner":
        out = out.filter(F.col(MATCHED) | (F.col(RELEASED_BY) == F.lit(BY_EXPIRY)))
    return out
