"""The temporal join operator: one ``foreachBatch`` function, two kinds of time.

For each micro-batch ``k`` (ARCHITECTURE.md, "One join operator, two kinds of time"):

1. **Decide.** Pin the build table's latest version ``V`` and read its channel at ``V``
   (:mod:`.build_channel`); compute the probe watermark from the strategy and the largest
   probe time seen so far; combine both in a valve restored from the previous combined
   watermark (it never decreases). The decision — ``V``, the watermarks, the decision time —
   is :class:`ReleasePlan`.
2. **Release.** From the pending and the new rows, release those the combined watermark
   covers: all of them when it is processing time, those with ``time <= watermark`` when it
   is event time.
   New rows at or below the previous watermark are *late* (joined, or dead-lettered by
   policy); pending rows older than the TTL are *expired* (released unmatched, or
   dead-lettered). Of the rows that would stay pending, those over the pending bound
   (``pending_max_age_ms``, then the oldest beyond ``pending_max_rows``) are *evicted* to the
   dead-letter table, or the batch fails before writing anything (``on_pending_bound``).
   The processing-time wait for the build snapshot needs no special case:
   before the marker the build channel is event-time MIN, so nothing is covered.
3. **Join** the released rows with the build table at ``V``: as of each row's time (row
   time) or the latest version (processing time) — :mod:`.asof`.
4. **Write**, in this order, each with the Delta transaction ``(pipeline_id, k)``: dead
   letters, the output (its commit carries the plan), the pending table (overwritten; its
   commit carries the state the next batch starts from).

Exactly once. Spark hands the same rows to a replayed batch. A replay whose pending write
is committed is skipped entirely (pending is written last). A replay whose output write is
committed but whose pending write is not reuses the plan recorded in the output commit, so
it releases exactly the same rows and writes the pending table the first attempt would have.
A replay with neither reuses the plan recorded in the dead-letter commit when the first
attempt got that far (its late, expired and evicted rows are already dead-lettered, so the
replay must decide exactly as it did), and decides afresh otherwise: nothing of the first
attempt is visible. The pending bound's limits are part of the plan, and which rows it evicts
depends only on the plan and the rows (a total order on event or arrival time, then the
source position), so a replay evicts the same rows, once.

State between batches is only in the tables: the pending rows and, in the pending table's
commit metadata, the combined watermark and the largest probe time seen. The operator object
itself holds nothing a replay depends on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakehouse import delta
from lakehouse.build import layout as L
from lakehouse.dead_letter import append_dead_letters, to_dead_letters
from lakehouse.errors import ConfigError, PendingBoundError, SchemaMismatchError
from lakehouse.failpoints import failpoint
from lakehouse.join.asof import PROBE_TIME_US, join_as_of
from lakehouse.join.build_channel import BuildChannelState, read_build_channel
from lakehouse.join.options import JoinOptions
from lakehouse.time import (
    WATERMARK_MIN,
    Clock,
    CombinedWatermark,
    RecordingWatermarkOutput,
    SystemClock,
    Watermark,
    WatermarkStatus,
    WatermarkStrategy,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

# Columns the join adds to every output row.
MATCHED = "_matched"
BUILD_VERSION = "_build_version"
BUILD_EVENT_TIME = "_build_event_time"
WATERMARK = "_watermark"
RELEASED_AT = "_released_at"
JOIN_MODE = "_join_mode"
BATCH_ID = "_batch_id"
# Columns of pending rows (kept in the output too).
ARRIVED_AT = "_arrived_at"
ARRIVAL_BATCH = "_arrival_batch"
PROBE_TOPIC = "_probe_topic"
PROBE_PARTITION = "_probe_partition"
PROBE_OFFSET = "_probe_offset"

META_PLAN = "lakehouse.plan"
#: Rows the batch evicted by the pending bound (output and pending commits), and the alert.
META_EVICTED = "lakehouse.evicted"
META_PENDING_BOUND_ALERT = "lakehouse.pendingBoundAlert"
#: ``_error_kind`` of rows evicted by the pending bound.
EVICTED_AGE = "pending_bound_age"
EVICTED_ROWS = "pending_bound_rows"

#: Topic of the tick rows the runner mixes into the probe stream under a processing-time
#: trigger, so that a batch runs every interval even without probe input: build-side progress
#: (the snapshot marker, the build watermark, idleness, TTLs) then releases waiting rows
#: without waiting for the next probe row. The operator drops them before anything else.
TICK_TOPIC = "__lakehouse_tick__"
META_STATE = "lakehouse.state"


@dataclass(frozen=True, slots=True)
class ReleasePlan:
    """The decisions of one micro-batch; recorded so that a replay makes the same ones.

    Attributes:
        batch_id: the micro-batch.
        build_version: the pinned build table version (None: no build table yet).
        combined: the combined watermark that decides the release.
        previous: the combined watermark before this batch (late rows are at or below it).
        probe: the probe channel's watermark.
        build: the build channel's watermark.
        build_status: ACTIVE or IDLE.
        probe_max_ts_ms: the largest probe time seen up to and including this batch.
        decided_at_ms: the decision time (arrival time of new rows, TTL reference).
        pending_max_rows: the pending bound in rows this batch applies (None: unbounded).
        pending_max_age_ms: the pending bound in age this batch applies (None: unbounded);
            age is measured against the probe watermark, or ``decided_at_ms`` when that is
            processing time (:class:`~lakehouse.join.JoinOptions`).
    """

    batch_id: int
    build_version: int | None
    combined: Watermark
    previous: Watermark
    probe: Watermark
    build: Watermark
    build_status: WatermarkStatus
    probe_max_ts_ms: int | None
    decided_at_ms: int
    pending_max_rows: int | None = None
    pending_max_age_ms: int | None = None

    def to_json(self) -> str:
        """Serialise for commit metadata."""
        return json.dumps(
            {
                "batchId": self.batch_id,
                "buildVersion": self.build_version,
                "combined": self.combined.to_dict(),
                "previous": self.previous.to_dict(),
                "probe": self.probe.to_dict(),
                "build": self.build.to_dict(),
                "buildStatus": self.build_status.name,
                "probeMaxTs": self.probe_max_ts_ms,
                "decidedAt": self.decided_at_ms,
                "pendingBound": {
                    "maxRows": self.pending_max_rows,
                    "maxAgeMs": self.pending_max_age_ms,
                },
            }
        )

    @classmethod
    def from_json(cls, text: str) -> ReleasePlan:
        """Parse :meth:`to_json` output."""
        d = json.loads(text)
        bound = d.get("pendingBound") or {}  # absent in plans written before the bound
        return cls(
            batch_id=int(d["batchId"]),
            build_version=d["buildVersion"],
            combined=Watermark.from_dict(d["combined"]),
            previous=Watermark.from_dict(d["previous"]),
            probe=Watermark.from_dict(d["probe"]),
            build=Watermark.from_dict(d["build"]),
            build_status=WatermarkStatus[d["buildStatus"]],
            probe_max_ts_ms=d["probeMaxTs"],
            decided_at_ms=int(d["decidedAt"]),
            pending_max_rows=bound.get("maxRows"),
            pending_max_age_ms=bound.get("maxAgeMs"),
        )


@dataclass(frozen=True, slots=True)
class JoinBatchReport:
    """What one micro-batch did (progress output, tests)."""

    batch_id: int
    arrived: int
    released: int
    matched: int
    pending: int
    late: int
    expired: int
    dead_lettered: int
    plan: ReleasePlan | None
    seconds: float
    skipped: bool = False
    replayed_plan: bool = False
    evicted: int = 0
    bound_alert: str | None = None


class TemporalJoin:
    """``foreachBatch`` function joining a probe stream with a versioned build table.

    Runs on the driver; Spark calls it once per micro-batch with the raw probe records
    (``lakehouse.sources`` schema), and again with the same ``batch_id`` and rows after a
    failure. See the module docstring for the algorithm and the exactly-once argument.

    Args:
        options: what to join and how; validated already.
        clock: the decision clock (tests inject a manual one).
        on_batch: called with each batch's report.
        num_buckets: hash buckets of the as-of join; default Spark's shuffle partitions.
    """

    def __init__(
        self,
        options: JoinOptions,
        *,
        clock: Clock | None = None,
        on_batch: Callable[[JoinBatchReport], None] | None = None,
        num_buckets: int | None = None,
    ) -> None:
        from pyspark.sql.types import StructType

        self.options = options
        self.clock = clock or SystemClock()
        self.on_batch = on_batch
        self.num_buckets = num_buckets
        self._last_pending = 0
        try:
            self.probe_schema: StructType = StructType.fromDDL(options.probe_schema)
        except Exception as e:
            raise ConfigError(
                f"join setting 'probe_schema': cannot parse {options.probe_schema!r} as DDL: {e}",
                setting="probe_schema",
            ) from e
        names = set(self.probe_schema.fieldNames())
        for col in (*options.probe_key, options.probe_time, options.probe_id):
            if col is not None and col not in names:
                raise ConfigError(
                    f"join setting names probe column '{col}', which is not in probe_schema "
                    f"(columns: {sorted(names)})",
                    setting="probe_schema",
                )
        if options.probe_time is not None:
            from pyspark.sql.types import DateType, NumericType, TimestampType

            typ = self.probe_schema[options.probe_time].dataType
            if not isinstance(typ, TimestampType | DateType | NumericType):
                raise ConfigError(
                    f"join setting 'probe_time': column '{options.probe_time}' has type "
                    f"{typ.simpleString()}; use a timestamp or epoch milliseconds",
                    setting="probe_time",
                )

    # ---------------------------------------------------------------------------- entry point

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        report = self.process(df, batch_id)
        if self.on_batch is not None:
            self.on_batch(report)

    def process(self, raw: DataFrame, batch_id: int) -> JoinBatchReport:
        """Process one micro-batch of raw probe records; returns what it did."""
        started = time.monotonic()
        o = self.options
        if _recorded(o.pending_uri, o.pipeline_id, batch_id):
            return JoinBatchReport(
                batch_id, 0, 0, 0, 0, 0, 0, 0, None, time.monotonic() - started, skipped=True
            )
        spark = raw.sparkSession
        recorded = self._recorded_plan(batch_id)
        parsed = self._parse(raw.filter(raw["topic"] != TICK_TOPIC)).persist()
        try:
            return self._run(spark, parsed, batch_id, recorded, started)
        finally:
            parsed.unpersist()

    # ------------------------------------------------------------------------------ internals

    def _run(
        self,
        spark: SparkSession,
        parsed: DataFrame,
        batch_id: int,
        recorded: ReleasePlan | None,
        started: float,
    ) -> JoinBatchReport:
        from pyspark.sql import functions as F

        bad = parsed.filter(F.col("_parse_error").isNotNull())
        ok = F.col("_parse_error").isNull()
        stats = parsed.agg(
            F.count(F.when(ok, 1)).alias("n"),
            F.count(F.when(~ok, 1)).alias("bad"),
            F.max(F.when(ok, F.col("_t_ms"))).alias("max_t"),
        ).first()
        arrived = int(stats["n"])
        bad_n = int(stats["bad"])
        batch_max = None if stats["max_t"] is None else int(stats["max_t"])

        plan = recorded or self._decide(batch_id, batch_max)
        if recorded is None and arrived == 0 and bad_n == 0 and self._nothing_to_do(plan):
            # A tick with no probe rows, and nothing that could release or expire a waiting
            # row has changed: no write at all (a replay of this batch decides afresh).
            return JoinBatchReport(
                batch_id, 0, 0, 0, self._last_pending, 0, 0, 0, plan, time.monotonic() - started
            )
        new = (
            parsed.filter(F.col("_parse_error").isNull())
            .withColumn(ARRIVED_AT, F.timestamp_millis(F.lit(plan.decided_at_ms)))
            .withColumn(ARRIVAL_BATCH, F.lit(batch_id).cast("bigint"))
            .withColumn("_is_new", F.lit(True))
        )
        pending = self._read_pending(spark).withColumn("_is_new", F.lit(False))
        candidates = pending.unionByName(new.drop("_parse_error", "_parse_error_kind"))
        releases_all = recorded is None and self._releases_everything(plan)
        if not releases_all:
            # read by the counts, the output, the dead letters and the pending rewrite
            candidates = candidates.persist()
        try:
            return self._release_and_write(
                candidates,
                bad,
                bad_n,
                plan,
                arrived,
                batch_id,
                started,
                replayed=recorded is not None,
                releases_all=releases_all,
            )
        finally:
            candidates.unpersist()

    def _release_and_write(
        self,
        candidates: DataFrame,
        bad: DataFrame,
        bad_n: int,
        plan: ReleasePlan,
        arrived: int,
        batch_id: int,
        started: float,
        *,
        replayed: bool,
        releases_all: bool = False,
    ) -> JoinBatchReport:
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        o = self.options
        covered = _covers(plan.combined, F.col("_t_ms"))
        late = F.lit(False)
        if o.late_policy == "dead-letter" and not plan.previous.use_processing_time:
            late = F.col("_is_new") & (F.col("_t_ms") <= F.lit(plan.previous.timestamp))
        expired = F.lit(False)
        if o.pending_ttl_ms is not None:
            horizon = F.timestamp_millis(F.lit(plan.decided_at_ms - o.pending_ttl_ms))
            expired = ~F.col("_is_new") & (F.col(ARRIVED_AT) <= horizon)
        staged = (
            candidates.withColumn("_late", late)
            .withColumn("_expired", expired & ~late)
            .withColumn("_release", covered & ~F.col("_late") & ~F.col("_expired"))
        )
        can_join = plan.build_version is not None
        if not can_join:  # no build table yet: nothing can be released or expired
            staged = staged.withColumn("_release", F.lit(False)).withColumn(
                "_expired", F.lit(False)
            )
        if releases_all:  # nothing waits, so nothing is over a bound
            staged = staged.withColumn("_evict", F.lit(None).cast("string"))
        else:
            staged = self._apply_pending_bound(staged, plan)

        if releases_all:
            # every row is new and releases (see _releases_everything): the counts are known
            # without a pass over the rows
            counts: Any = {
                "total": arrived,
                "release": arrived,
                "late": 0,
                "expired": 0,
                "evicted_age": 0,
                "evicted_rows": 0,
            }
        else:
            counts = staged.agg(
                F.count(F.lit(1)).alias("total"),
                F.count(F.when(F.col("_release"), 1)).alias("release"),
                F.count(F.when(F.col("_late"), 1)).alias("late"),
                F.count(F.when(F.col("_expired"), 1)).alias("expired"),
                F.count(F.when(F.col("_evict") == EVICTED_AGE, 1)).alias("evicted_age"),
                F.count(F.when(F.col("_evict") == EVICTED_ROWS, 1)).alias("evicted_rows"),
            ).first()
        late_n, expired_n = int(counts["late"]), int(counts["expired"])
        evicted_age, evicted_rows = int(counts["evicted_age"]), int(counts["evicted_rows"])
        evicted_n = evicted_age + evicted_rows
        pending_n = int(counts["total"]) - int(counts["release"]) - late_n - expired_n - evicted_n
        alert = self._bound_alert(plan, batch_id, evicted_age, evicted_rows, pending_n)
        if alert is not None and o.on_pending_bound == "fail":
            # before any write: the batch leaves no trace, a restart meets the same bound
            raise PendingBoundError(
                f"{alert}. on_pending_bound = 'fail' stopped the join before it wrote "
                "anything. Raise the bound, set join.on_pending_bound = 'dead-letter' to move "
                "the oldest rows to the dead-letter table, or get the build side moving (its "
                "watermark holds the rows back; join.build_idle_timeout_ms for a quiet "
                "dimension)",
                setting="join.pending_max_age_ms" if evicted_age else "join.pending_max_rows",
            )

        dead = self._dead_letters(bad, F.col("_parse_error_kind"), F.col("_parse_error"), batch_id)
        dead_n = bad_n + late_n
        dead = dead.unionByName(
            self._dead_letters(
                staged.filter("_late"),
                F.lit("late"),
                F.lit(
                    f"late probe row: time at or before the watermark {plan.previous} that had "
                    "already passed when it arrived (late_policy = dead-letter)"
                ),
                batch_id,
            )
        )
        if o.expiry_policy == "dead-letter":
            dead_n += expired_n
            dead = dead.unionByName(
                self._dead_letters(
                    staged.filter("_expired"),
                    F.lit("expired"),
                    F.lit(
                        f"pending longer than pending_ttl_ms = {o.pending_ttl_ms} without being "
                        "released (expiry_policy = dead-letter)"
                    ),
                    batch_id,
                )
            )
        if evicted_n:
            dead_n += evicted_n
            dead = dead.unionByName(
                self._dead_letters(
                    staged.filter(F.col("_evict").isNotNull()),
                    F.col("_evict"),
                    F.when(
                        F.col("_evict") == EVICTED_AGE,
                        F.lit(
                            f"pending more than pending_max_age_ms = {plan.pending_max_age_ms} "
                            f"behind the probe's time ({_age_reference(plan)}) without being "
                            f"released: the watermark {plan.combined} held it back. Moved here "
                            "by the pending bound (on_pending_bound = dead-letter); replay "
                            "_raw_value into the probe input to join it"
                        ),
                    ).otherwise(
                        F.lit(
                            f"pending table over pending_max_rows = {plan.pending_max_rows}: "
                            f"the oldest of {pending_n + evicted_rows} waiting rows were moved "
                            "here by the pending bound (on_pending_bound = dead-letter); replay "
                            "_raw_value into the probe input to join it"
                        )
                    ),
                    batch_id,
                )
            )
        if dead_n:
            # the plan goes with the dead letters: a replay that finds them but no output
            # commit must decide as this attempt did (module docstring, "Exactly once")
            append_dead_letters(
                dead,
                o.dead_letter_uri,
                app_id=o.pipeline_id,
                batch_id=batch_id,
                metadata={
                    "lakehouse.batchId": batch_id,
                    "lakehouse.pipeline": o.pipeline_id,
                    META_PLAN: plan.to_json(),
                },
            )
        bound_meta: dict[str, Any] = {META_EVICTED: evicted_n}
        if alert is not None:
            bound_meta[META_PENDING_BOUND_ALERT] = alert

        released_n = matched_n = 0
        if can_join:
            # The released and matched counts are observed while the write computes the join
            # (one pass over the rows, no cache) and go into the pending table's commit.
            joined = self._output(staged, plan, batch_id)
            observed = Observation(f"lakehouse-join-{o.pipeline_id}-{batch_id}")
            counting = [
                F.count(F.lit(1)).alias("n"),
                F.sum(F.col(MATCHED).cast("int")).alias("m"),
            ]
            out = joined.observe(observed, *counting)
            failpoint("join.before_output", batch_id)
            if o.join_type == "inner":
                out = out.filter(F.col(MATCHED) | F.col("_expired_row"))
            out = out.drop("_expired_row")

            written = delta.append(
                out,
                o.output_uri,
                txn=(o.pipeline_id, batch_id),
                schema_mode="merge",
                metadata={
                    "lakehouse.batchId": batch_id,
                    "lakehouse.pipeline": o.pipeline_id,
                    META_PLAN: plan.to_json(),
                    **bound_meta,
                },
                max_files=2,
            )
            if written.skipped:
                # A replay whose output was committed before a crash: the write ran no job
                # (so nothing was observed); the counts are for the report and the pending
                # commit only.
                recount = joined.agg(*counting).first()
                released_n, matched_n = int(recount["n"]), int(recount["m"] or 0)
            else:
                metrics = observed.get
                released_n, matched_n = int(metrics["n"]), int(metrics["m"] or 0)

        failpoint("join.after_output", batch_id)
        keep = staged.filter(
            ~F.col("_release") & ~F.col("_late") & ~F.col("_expired") & F.col("_evict").isNull()
        )
        keep = keep.drop("_is_new", "_late", "_expired", "_release", "_evict")
        if releases_all:
            keep = keep.limit(0)  # nothing stays: no pass over the rows to find that out
        state = {
            "combined": plan.combined.to_dict(),
            "probeMaxTs": plan.probe_max_ts_ms,
            "buildVersion": plan.build_version,
            "evictedTotal": self._evicted_total() + evicted_n,
        }
        delta.overwrite(
            keep,
            o.pending_uri,
            txn=(o.pipeline_id, batch_id),
            max_files=2,
            metadata={
                "lakehouse.batchId": batch_id,
                "lakehouse.pipeline": o.pipeline_id,
                META_STATE: json.dumps(state),
                META_PLAN: plan.to_json(),
                "lakehouse.pendingRows": pending_n,
                "lakehouse.arrived": arrived,
                "lakehouse.released": released_n,
                "lakehouse.matched": matched_n,
                "lakehouse.deadLettered": dead_n,
                **bound_meta,
            },
        )
        failpoint("join.after_pending", batch_id)
        return JoinBatchReport(
            batch_id=batch_id,
            arrived=arrived,
            released=released_n,
            matched=matched_n,
            pending=pending_n,
            late=late_n,
            expired=expired_n,
            dead_lettered=dead_n,
            plan=plan,
            seconds=time.monotonic() - started,
            replayed_plan=replayed,
            evicted=evicted_n,
            bound_alert=alert,
        )

    def _apply_pending_bound(self, staged: DataFrame, plan: ReleasePlan) -> DataFrame:
        """Add ``_evict``: the pending bound's verdict (``pending_bound_age``,
        ``pending_bound_rows`` or NULL) for each row that would otherwise stay pending.

        First every waiting row more than ``pending_max_age_ms`` behind the probe's time;
        then, when more than ``pending_max_rows`` remain, the oldest of them (event time, or
        arrival batch when the probe watermark is processing time; ties by source position,
        which makes the order total, so a replay picks the same rows). Only the plan and the
        rows decide, never the clock.
        """
        from pyspark.sql import functions as F

        waiting = ~F.col("_release") & ~F.col("_late") & ~F.col("_expired")
        verdict = F.lit(None).cast("string")
        age = _age_ms(plan)
        if plan.pending_max_age_ms is not None and age is not None:
            verdict = F.when(waiting & (age > F.lit(plan.pending_max_age_ms)), F.lit(EVICTED_AGE))
        staged = staged.withColumn("_evict", verdict)
        if plan.pending_max_rows is None:
            return staged
        remaining = staged.filter(waiting & F.col("_evict").isNull())
        over = remaining.count() - plan.pending_max_rows
        if over <= 0:
            return staged
        position = [ARRIVAL_BATCH, PROBE_TOPIC, PROBE_PARTITION, PROBE_OFFSET]
        oldest = (
            [ARRIVAL_BATCH]
            if plan.probe.use_processing_time
            else [F.coalesce(F.col("_t_ms"), F.lit(WATERMARK_MIN)).asc()]
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
            .withColumn(
                "_evict",
                F.coalesce(F.col("_evict"), F.when(F.col("_victim"), F.lit(EVICTED_ROWS))),
            )
            .select(*columns)
        )

    def _bound_alert(
        self,
        plan: ReleasePlan,
        batch_id: int,
        evicted_age: int,
        evicted_rows: int,
        pending: int,
    ) -> str | None:
        """The alert text of a batch that hit the pending bound (None when it did not)."""
        if not evicted_age and not evicted_rows:
            return None
        parts = []
        if evicted_age:
            parts.append(
                f"{evicted_age} row(s) more than pending_max_age_ms = {plan.pending_max_age_ms} "
                f"behind the probe's time ({_age_reference(plan)})"
            )
        if evicted_rows:
            parts.append(
                f"{pending + evicted_rows} row(s) waiting, over pending_max_rows = "
                f"{plan.pending_max_rows} by {evicted_rows}"
            )
        return (
            f"pending bound hit by join '{self.options.pipeline_id}' batch {batch_id}: "
            + "; ".join(parts)
            + f" (watermarks: combined {plan.combined}, probe {plan.probe}, build {plan.build})"
        )

    def _evicted_total(self) -> int:
        """Rows evicted by the pending bound over the join's life, as of the last batch."""
        o = self.options
        if not delta.table_exists(o.pending_uri):
            return 0
        for entry in delta.history(o.pending_uri, limit=8):
            text = entry.metadata.get(META_STATE)
            if text:
                return int(json.loads(text).get("evictedTotal", 0))
        return 0

    def _output(self, staged: DataFrame, plan: ReleasePlan, batch_id: int) -> DataFrame:
        """Joined output rows of this batch (matched or not, plus expired ones when they are
        released unmatched), with the lineage columns."""
        from pyspark.sql import functions as F

        o = self.options
        spark = staged.sparkSession
        assert plan.build_version is not None
        # by its files when Delta allows: the row-time paths cache per file set (asof)
        build = delta.read_files(
            spark, delta.snapshot(o.build_uri, spark=spark), version=plan.build_version
        )
        build_key = self._build_key(plan.build_version)
        for probe_column, build_column in zip(o.probe_key, build_key, strict=True):
            if build_column not in build.columns:
                # a build table whose snapshot completed empty (created by a signal before
                # any row) has no key columns yet: it matches nothing
                build = build.withColumn(
                    build_column, F.lit(None).cast(staged.schema[probe_column].dataType)
                )
        value_columns = [
            c for c in build.columns if c not in build_key and c not in L.LINEAGE_COLUMNS
        ]
        probe_columns = [
            c
            for c in staged.columns
            if not c.startswith("_")
            or c in (ARRIVED_AT, ARRIVAL_BATCH, PROBE_TOPIC, PROBE_PARTITION, PROBE_OFFSET)
        ]
        out_values = [o.build_prefix + c for c in value_columns]
        clash = sorted(set(out_values) & set(probe_columns))
        if clash:
            raise ConfigError(
                f"build column(s) {clash} have the names of probe columns; set build_prefix "
                "(e.g. --build-prefix rate_) so the output can hold both",
                setting="build_prefix",
            )
        released = staged.filter("_release").select(
            *probe_columns, (F.col("_t_ms") * 1000).alias(PROBE_TIME_US)
        )
        joined = join_as_of(
            released,
            build,
            probe_key=o.probe_key,
            build_key=build_key,
            value_columns=value_columns,
            output_names=[*probe_columns, *out_values, BUILD_EVENT_TIME, MATCHED],
            latest=o.mode == "proctime",
            num_buckets=self.num_buckets
            or int(spark.conf.get("spark.sql.shuffle.partitions") or 4),
        ).withColumn("_expired_row", F.lit(False))
        if o.expiry_policy == "release":
            expired = staged.filter("_expired").select(*probe_columns)
            for name in out_values:
                expired = expired.withColumn(
                    name, F.lit(None).cast(build.schema[name[len(o.build_prefix) :]].dataType)
                )
            expired = (
                expired.withColumn(BUILD_EVENT_TIME, F.lit(None).cast("timestamp"))
                .withColumn(MATCHED, F.lit(False))
                .withColumn("_expired_row", F.lit(True))
            )
            joined = joined.unionByName(expired)
        wm = None if plan.combined.use_processing_time else plan.combined.timestamp
        return joined.select(
            *probe_columns,
            *out_values,
            MATCHED,
            F.lit(plan.build_version).cast("bigint").alias(BUILD_VERSION),
            BUILD_EVENT_TIME,
            (
                F.lit(None).cast("timestamp")
                if wm is None or wm == WATERMARK_MIN
                else F.timestamp_millis(F.lit(wm))
            ).alias(WATERMARK),
            F.timestamp_millis(F.lit(plan.decided_at_ms)).alias(RELEASED_AT),
            F.lit(o.mode).alias(JOIN_MODE),
            F.lit(batch_id).cast("bigint").alias(BATCH_ID),
            "_expired_row",
        )

    def _build_key(self, version: int) -> tuple[str, ...]:
        o = self.options
        if o.build_key:
            return o.build_key
        state = read_build_channel(o.build_uri, version=version)
        if not state.key_columns:
            raise SchemaMismatchError(
                f"build table '{o.build_uri}' has no lakehouse.primaryKey property; set "
                "build_key in the join configuration",
                table_uri=o.build_uri,
            )
        if len(state.key_columns) != len(o.probe_key):
            raise ConfigError(
                f"build table '{o.build_uri}' has key {list(state.key_columns)} but probe_key "
                f"is {list(o.probe_key)}; they must pair up in order",
                setting="probe_key",
            )
        return state.key_columns

    def _decide(self, batch_id: int, batch_max_ts: int | None) -> ReleasePlan:
        o = self.options
        now = self.clock.now_ms()
        previous, probe_max = self._state()
        if batch_max_ts is not None:
            probe_max = batch_max_ts if probe_max is None else max(probe_max, batch_max_ts)
        probe_wm = self._probe_watermark(probe_max)
        channel: BuildChannelState = read_build_channel(o.build_uri)
        build_wm = channel.watermark(processing_time=o.mode == "proctime")
        build_status = channel.status(now_ms=now, idle_timeout_ms=o.build_idle_timeout_ms)
        valve = CombinedWatermark(clock=self.clock, initial_output=previous)
        valve.input_watermark("probe", probe_wm)
        valve.input_watermark("build", build_wm)
        if build_status is WatermarkStatus.IDLE:
            valve.input_status("build", WatermarkStatus.IDLE)
        return ReleasePlan(
            batch_id=batch_id,
            build_version=channel.version,
            combined=valve.current(),
            previous=previous,
            probe=probe_wm,
            build=build_wm,
            build_status=build_status,
            probe_max_ts_ms=probe_max,
            decided_at_ms=now,
            pending_max_rows=o.pending_max_rows,
            pending_max_age_ms=o.pending_max_age_ms,
        )

    def strategy(self) -> WatermarkStrategy[int]:
        """The probe's :class:`~lakehouse.time.WatermarkStrategy` (events are epoch ms)."""
        o = self.options
        if o.watermark == "none":
            return WatermarkStrategy.no_watermarks()
        if o.watermark == "ascending":
            return WatermarkStrategy.for_monotonous_timestamps()
        return WatermarkStrategy.for_bounded_out_of_orderness(o.out_of_orderness_ms)

    def _probe_watermark(self, probe_max: int | None) -> Watermark:
        """Run the strategy's generator over the largest probe time seen so far.

        The generator sees one event per batch — the largest time up to and including the
        batch (kept in the pending table's metadata across restarts) — which is exact for the
        strategies the join offers: bounded out-of-orderness and ascending watermarks depend
        only on the maximum, and processing time on nothing.
        """
        output = RecordingWatermarkOutput(clock=self.clock)
        generator = self.strategy().create_watermark_generator(clock=self.clock)
        if probe_max is not None:
            generator.on_event(probe_max, probe_max, output)
        generator.on_periodic_emit(output)
        return output.current_watermark

    def _releases_everything(self, plan: ReleasePlan) -> bool:
        """Whether this batch provably releases every row it holds: processing time with a
        joinable build (the marker is set), an empty pending table (read from the table), and
        no late rule that could catch a new row. Then no row is late, expired, evicted or
        kept, and the batch needs no pass over its rows to count them.

        Only for a fresh decision: a replayed plan takes the general path."""
        o = self.options
        late_rule = o.late_policy == "dead-letter" and not plan.previous.use_processing_time
        if late_rule or not plan.combined.use_processing_time or plan.build_version is None:
            return False
        # the table itself, not a figure remembered from an earlier batch: rows left waiting
        # before the marker was set must be released, never replaced by an empty table
        return not delta.table_exists(o.pending_uri) or delta.row_count(o.pending_uri) == 0

    def _nothing_to_do(self, plan: ReleasePlan) -> bool:
        """Whether a batch without new rows would write the same tables as the last batch:
        the combined watermark and the pinned build version are those the last batch used,
        and no TTL can expire a row."""
        o = self.options
        if not delta.table_exists(o.pending_uri):
            return False
        last = self._last_state()
        if last is None:
            return False
        if o.pending_max_rows is not None and self._last_pending > o.pending_max_rows:
            return False  # the bound was lowered since the last batch: apply it now
        if o.pending_max_age_ms is not None and plan.probe.use_processing_time:
            return False  # arrival-time age grows with the clock, like the TTL
        return (
            o.pending_ttl_ms is None
            and plan.combined == last["combined"]
            and plan.build_version == last["buildVersion"]
        )

    def _last_state(self) -> dict[str, Any] | None:
        for entry in delta.history(self.options.pending_uri, limit=8):
            text = entry.metadata.get(META_STATE)
            if text:
                state = json.loads(text)
                self._last_pending = int(entry.metadata.get("lakehouse.pendingRows", 0))
                state["combined"] = Watermark.from_dict(state["combined"])
                return state
        return None

    def _state(self) -> tuple[Watermark, int | None]:
        """The combined watermark and largest probe time after the last completed batch."""
        o = self.options
        if not delta.table_exists(o.pending_uri):
            return Watermark.MIN, None
        for entry in delta.history(o.pending_uri, limit=8):
            text = entry.metadata.get(META_STATE)
            if text:
                state = json.loads(text)
                return Watermark.from_dict(state["combined"]), state.get("probeMaxTs")
        return Watermark.MIN, None

    def _recorded_plan(self, batch_id: int) -> ReleasePlan | None:
        o = self.options
        if not _recorded(o.output_uri, o.pipeline_id, batch_id):
            return self._dead_letter_plan(batch_id)
        for entry in delta.history(o.output_uri, limit=16):
            meta = entry.metadata
            if meta.get("lakehouse.batchId") == str(batch_id) and META_PLAN in meta:
                return ReleasePlan.from_json(entry.metadata[META_PLAN])
        raise SchemaMismatchError(
            f"output table '{o.output_uri}' records batch {batch_id} of pipeline "
            f"'{o.pipeline_id}' but its plan is not in the recent history; the table was "
            "changed by something else",
            table_uri=o.output_uri,
        )

    def _dead_letter_plan(self, batch_id: int) -> ReleasePlan | None:
        """The plan recorded with this batch's dead letters, when the first attempt wrote them
        but not the output (None otherwise, and for dead letters written before plans were
        recorded with them)."""
        o = self.options
        if not _recorded(o.dead_letter_uri, o.pipeline_id, batch_id):
            return None
        for entry in delta.history(o.dead_letter_uri, limit=16):
            meta = entry.metadata
            if (
                meta.get("lakehouse.batchId") == str(batch_id)
                and meta.get("lakehouse.pipeline") == o.pipeline_id
                and META_PLAN in meta
            ):
                return ReleasePlan.from_json(meta[META_PLAN])
        return None

    def _parse(self, raw: DataFrame) -> DataFrame:
        """Parse raw probe records: typed columns, ``_t_ms`` (event time, epoch ms), source
        lineage, and ``_parse_error``/``_parse_error_kind`` for records to dead-letter."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import StringType, StructField, StructType

        o = self.options
        with_corrupt = StructType(
            [*self.probe_schema.fields, StructField("_corrupt", StringType(), True)]
        )
        text = F.col("value").cast("string")
        row = F.from_json(
            text, with_corrupt, {"columnNameOfCorruptRecord": "_corrupt", "mode": "PERMISSIVE"}
        )
        df = raw.select(
            F.col("key").alias("_raw_key"),
            F.col("value").alias("_raw_value"),
            F.col("topic").alias(PROBE_TOPIC),
            F.col("partition").alias(PROBE_PARTITION),
            F.col("offset").alias(PROBE_OFFSET),
            F.col("timestamp").alias("_source_ts"),
            row.alias("_r"),
        )
        fields = [F.col("_r")[f.name].alias(f.name) for f in self.probe_schema.fields]
        t_ms = self._time_ms(F.col("_r"))
        required = [
            *o.probe_key,
            *([o.probe_time] if o.probe_time else []),
            *([o.probe_id] if o.probe_id else []),
        ]
        missing = F.lit(None).cast("string")
        for name in reversed(required):
            missing = F.when(F.col("_r")[name].isNull(), F.lit(name)).otherwise(missing)
        error = (
            F.when(F.col("_raw_value").isNull(), F.lit("empty record"))
            .when(
                F.col("_r").isNull() | F.col("_r")["_corrupt"].isNotNull(),
                F.lit("not a JSON object matching probe_schema"),
            )
            .when(
                missing.isNotNull(),
                F.concat(F.lit("required column '"), missing, F.lit("' is missing or NULL")),
            )
        )
        kind = (
            F.when(F.col("_raw_value").isNull(), F.lit("empty"))
            .when(
                F.col("_r").isNull() | F.col("_r")["_corrupt"].isNotNull(), F.lit("malformed_json")
            )
            .when(missing.isNotNull(), F.lit("missing_field"))
        )
        return df.select(
            *fields,
            PROBE_TOPIC,
            PROBE_PARTITION,
            PROBE_OFFSET,
            (t_ms if t_ms is not None else F.lit(None).cast("bigint")).alias("_t_ms"),
            "_raw_key",
            "_raw_value",
            "_source_ts",
            error.alias("_parse_error"),
            kind.alias("_parse_error_kind"),
        )

    def _time_ms(self, row: Column) -> Column | None:
        from pyspark.sql import functions as F
        from pyspark.sql.types import DateType, TimestampType

        o = self.options
        if o.probe_time is None:
            return None
        typ = self.probe_schema[o.probe_time].dataType
        value = row[o.probe_time]
        if isinstance(typ, TimestampType):
            return F.unix_millis(value)
        if isinstance(typ, DateType):
            return F.unix_millis(value.cast("timestamp"))
        return value.cast("bigint")

    def _read_pending(self, spark: SparkSession) -> DataFrame:
        o = self.options
        if delta.table_exists(o.pending_uri):
            return delta.read(spark, o.pending_uri)
        return spark.createDataFrame([], self.pending_schema())

    def pending_schema(self) -> StructType:
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
                *self.probe_schema.fields,
                StructField(PROBE_TOPIC, StringType(), True),
                StructField(PROBE_PARTITION, IntegerType(), True),
                StructField(PROBE_OFFSET, LongType(), True),
                StructField("_t_ms", LongType(), True),
                StructField("_raw_key", BinaryType(), True),
                StructField("_raw_value", BinaryType(), True),
                StructField("_source_ts", TimestampType(), True),
                StructField(ARRIVED_AT, TimestampType(), True),
                StructField(ARRIVAL_BATCH, LongType(), True),
            ]
        )

    def _dead_letters(
        self, rows: DataFrame, kind: Column, error: Column, batch_id: int
    ) -> DataFrame:
        from pyspark.sql import functions as F

        return to_dead_letters(
            rows,
            raw_key=F.col("_raw_key"),
            raw_value=F.col("_raw_value"),
            topic=F.col(PROBE_TOPIC),
            partition=F.col(PROBE_PARTITION),
            offset=F.col(PROBE_OFFSET),
            source_timestamp=F.col("_source_ts"),
            error_kind=kind,
            error=error,
            pipeline=self.options.pipeline_id,
            batch_id=batch_id,
        )


def _covers(watermark: Watermark, t_ms: Column) -> Column:
    from pyspark.sql import functions as F

    if watermark.use_processing_time:
        return F.lit(True)
    if watermark.timestamp == WATERMARK_MIN:
        return F.lit(False)
    return t_ms.isNotNull() & (t_ms <= F.lit(watermark.timestamp))


def _age_ms(plan: ReleasePlan) -> Column | None:
    """A waiting row's age for the pending bound, in the probe's own time: how far its event
    time is behind the probe watermark, or (probe in processing time) how long ago it arrived.

    Event time, not arrival time, where there is one: the answer then depends on the data
    only, not on how fast or in how many batches it was processed, and it measures what the
    bound is for (rows the probe stream has long passed, held back by the build side). None
    while the probe watermark is still MIN (no probe time seen: nothing is old yet).
    """
    from pyspark.sql import functions as F

    if plan.probe.use_processing_time:
        return F.lit(plan.decided_at_ms) - F.unix_millis(F.col(ARRIVED_AT))
    if plan.probe.timestamp == WATERMARK_MIN:
        return None
    return F.lit(plan.probe.timestamp) - F.col("_t_ms")


def _age_reference(plan: ReleasePlan) -> str:
    if plan.probe.use_processing_time:
        return f"arrival time, against the decision time {plan.decided_at_ms} ms"
    return f"event time, against the probe watermark {plan.probe}"


def _recorded(uri: str, app_id: str, batch_id: int) -> bool:
    if not delta.table_exists(uri):
        return False
    version = delta.transaction_version(uri, app_id)
    return version is not None and version >= batch_id


def output_lineage_columns() -> tuple[str, ...]:
    """The lineage columns every output row carries, in order."""
    return (MATCHED, BUILD_VERSION, BUILD_EVENT_TIME, WATERMARK, RELEASED_AT, JOIN_MODE, BATCH_ID)


__all__: list[Any] = ["JoinBatchReport", "ReleasePlan", "TemporalJoin", "output_lineage_columns"]
