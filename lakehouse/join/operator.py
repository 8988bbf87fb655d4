"""The temporal join operator: one ``foreachBatch`` function, two kinds of time.

Each micro-batch ``k`` reads, decides, then writes (ARCHITECTURE.md, "One join operator, two
kinds of time"):

1. **Read** one snapshot of each table it needs — the build table, its output, pending and
   dead-letter tables (:func:`lakehouse.delta.snapshot`, one look at each log) — and from
   the join's recent commits the state after the last batch and, for a replay, the plan its
   first attempt recorded (:func:`lakehouse.join.state.recover`).
2. **Decide** in pure code (:mod:`lakehouse.join.state`): the build channel at its pinned
   version, the probe watermark, the combined watermark: the :class:`ReleasePlan`. The rows
   are then staged by it (:mod:`lakehouse.join.release`): released, late, expired, evicted
   by the pending bound, or kept.
3. **Write**, in this order, each with the Delta transaction ``(pipeline_id, k)``: dead
   letters, the output, the pending table (overwritten). Each commit carries the plan and
   the state after the batch. A table whose content does not change is not written, and a
   batch that changes nothing commits nothing: one with no row and nothing that moved
   (:func:`~lakehouse.join.state.idle`, decided before any job), or one whose rows all stay
   pending (:func:`~lakehouse.join.state.changes_nothing`, after counting them: a TTL
   ticking towards expiry costs no table version per trigger).

The processing-time fast path. When the plan provably releases every row (processing time,
the snapshot marker set, nothing pending, no late rule; a ``left`` join) the batch needs no
pass over its rows before writing them: it writes the output in one job and counts while
writing (``DataFrame.observe``), then writes the malformed records it observed to the
dead-letter table. Its output commit records the plan and state; the rows it released are
Delta's own ``numOutputRows`` of that commit.

Exactly once. Spark hands the same rows to a replayed batch. Every write is idempotent (a
table that already records ``(pipeline_id, k)`` skips it), so a replay only has to make the
same decisions: when any table records batch ``k``, the replay reuses the plan recorded there
(late, expired and evicted rows are decided by the plan and the rows alone), and writes what
is missing. A batch whose pending table records it is complete (the pending write is last)
and is skipped without a job.

State between batches is only in the tables: the pending rows, and in every commit the
combined watermark, the largest probe time seen, the pinned build version, the pending row
count and the rows evicted so far. The operator object holds nothing a replay depends on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from lakehouse import delta
from lakehouse.columns import batch_long, batch_timestamp_ms
from lakehouse.dead_letter import append_dead_letters
from lakehouse.errors import ConfigError, SchemaMismatchError
from lakehouse.failpoints import failpoint
from lakehouse.join import probe, release
from lakehouse.join.build_channel import BuildChannelState, read_build_channel
from lakehouse.join.layout import (
    ARRIVAL_BATCH,
    ARRIVED_AT,
    EVICTED_AGE,
    EXPIRED,
    LATE,
    MATCHED,
    META_ARRIVED,
    META_BATCH_ID,
    META_DEAD_LETTERED,
    META_PIPELINE,
    META_PLAN,
    META_STATE,
    TICK_TOPIC,
    TIME_MS,
)
from lakehouse.join.options import JoinOptions
from lakehouse.join.state import (
    BatchCounts,
    JoinState,
    Recovery,
    ReleasePlan,
    TableCommits,
    age_reference,
    changes_nothing,
    decide,
    idle,
    needs_batch_max,
    outcome,
    recover,
    releases_everything,
)
from lakehouse.table_kinds import TableKind, creation_properties
from lakehouse.time import Clock, SystemClock

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

#: How many recent commits of each of the join's tables are read to find its last batch.
RECOVERY_WINDOW = 32


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinBatchReport:
    """What one micro-batch did (progress output, tests)."""

    batch_id: int
    arrived: int = 0
    released: int = 0
    matched: int = 0
    pending: int = 0
    late: int = 0
    expired: int = 0
    dead_lettered: int = 0
    plan: ReleasePlan | None = None
    seconds: float = 0.0
    skipped: bool = False
    replayed_plan: bool = False
    evicted: int = 0
    bound_alert: str | None = None
    malformed: int = 0
    malformed_example: str | None = None
    #: The batch committed to the join's tables (so the quality report's ledger counts it);
    #: False for a tick, an idle batch, one that changed nothing, and a skipped replay.
    committed: bool = False

    @property
    def all_dead_lettered(self) -> bool:
        """Every probe record of the batch was dead-lettered as malformed (none parsed)."""
        return self.malformed > 0 and self.arrived == 0


@dataclass(frozen=True, slots=True, kw_only=True)
class _Look:
    """What a batch read: one snapshot of each table, and what they say about the join."""

    build: delta.TableSnapshot
    output: delta.TableSnapshot
    pending: delta.TableSnapshot
    dead: delta.TableSnapshot
    channel: BuildChannelState
    recovery: Recovery


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
        ticks: the stream carries the runner's tick rows, so a batch may hold no probe
            record at all (the fast path then looks before writing; without ticks Spark runs
            no batch without input).
    """

    def __init__(
        self,
        options: JoinOptions,
        *,
        clock: Clock | None = None,
        on_batch: Callable[[JoinBatchReport], None] | None = None,
        num_buckets: int | None = None,
        ticks: bool = False,
    ) -> None:
        self.options = options
        self.ticks = ticks
        self.clock = clock or SystemClock()
        self.on_batch = on_batch
        self.num_buckets = num_buckets
        self.probe_schema: StructType = probe.probe_schema(options)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        report = self.process(df, batch_id)
        if self.on_batch is not None:
            self.on_batch(report)

    def pending_schema(self) -> StructType:
        """Schema of the pending table (:func:`lakehouse.join.probe.pending_schema`)."""
        return probe.pending_schema(self.probe_schema)

    # ----------------------------------------------------------------------------- the batch

    def process(self, raw: DataFrame, batch_id: int) -> JoinBatchReport:
        """Process one micro-batch of raw probe records; returns what it did."""
        with delta.batch_scope():  # each table's log read once per batch
            return self._process(raw, batch_id)

    def _process(self, raw: DataFrame, batch_id: int) -> JoinBatchReport:
        from pyspark.sql import functions as F

        started = time.monotonic()
        spark = raw.sparkSession
        look = self._look(spark, batch_id)
        if not look.pending.exists:
            # the pending table exists from the first batch on, so that it can be queried
            # (and validated) whether or not a row ever had to wait
            delta.create_table(
                self.options.pending_table,
                self.pending_schema(),
                properties=creation_properties(TableKind.PENDING, self.options.pipeline_id),
                spark=spark,
            )
            failpoint("join.after_create_pending", batch_id)
            look = self._look(spark, batch_id)
        if self.options.pending_table in look.recovery.recorded_in:
            return JoinBatchReport(batch_id=batch_id, skipped=True, seconds=_since(started))
        state, plan = look.recovery.state, look.recovery.plan
        if plan is None and not needs_batch_max(self.options):
            plan = self._decide(batch_id, state, None, look.channel)
        probe_rows = raw.filter(F.col("topic") != TICK_TOPIC)
        # the future bound is against the wall clock, never the decision clock (which tests
        # and replays may set anywhere)
        parsed = probe.parse(
            probe_rows, self.options, self.probe_schema, wall_ms=int(time.time() * 1000)
        )
        if state.batch_id is None and look.recovery.plan is None:
            self._refuse_a_contradicted_schema(parsed)
        if (
            look.recovery.plan is None
            and plan is not None
            and self.options.join_type == "left"
            and releases_everything(self.options, plan, state)
        ):
            # one pass: no cache (the rows are parsed again only for malformed records)
            return self._release_all(spark, parsed, plan, state, look, started)
        parsed = parsed.persist()  # read by the counts, the staging and the dead letters
        try:
            return self._general(spark, parsed, batch_id, plan, state, look, started)
        finally:
            parsed.unpersist()

    def _refuse_a_contradicted_schema(self, parsed: DataFrame) -> None:
        """Before the join's first commit: stop when every record contradicts probe_schema
        (a wrong type, not bad data), naming the column and a value, before anything is
        written; the records stay in the source for the corrected run. One small job per
        batch until the join has committed once.

        Raises:
            ConfigError: no record parsed, and the failures are schema mismatches.
        """
        from pyspark.sql import functions as F

        if self.options.allow_dead_letters:
            return
        mismatch = F.col(probe.PARSE_ERROR_KIND) == F.lit(probe.SCHEMA_MISMATCH)
        row = parsed.agg(
            F.count(F.when(F.col(probe.PARSE_ERROR).isNull(), 1)).alias("ok"),
            F.count(F.when(mismatch, 1)).alias("bad"),
            F.min(F.when(mismatch, F.col(probe.PARSE_ERROR))).alias("example"),
        ).first()
        if row is None or row["ok"] or not row["bad"]:
            return
        raise ConfigError(
            f"probe_schema contradicts the join's first probe records ({row['bad']} of them): "
            f"{row['example']}. Fix join.probe_schema (nothing was written; the records are "
            "read again), or pass --allow-dead-letters to dead-letter such records",
            setting="join.probe_schema",
        )

    def _look(self, spark: SparkSession, batch_id: int) -> _Look:
        """Read each table once; recover the join's state and a recorded plan."""
        o = self.options
        snaps = {
            uri: delta.snapshot(uri, spark=spark)
            for uri in (o.build_table, o.output_table, o.pending_table, o.dead_letter_table)
        }
        tables = [
            _commits_of(snaps[uri], o.pipeline_id, batch_id)
            for uri in (o.pending_table, o.output_table, o.dead_letter_table)
        ]
        return _Look(
            build=snaps[o.build_table],
            output=snaps[o.output_table],
            pending=snaps[o.pending_table],
            dead=snaps[o.dead_letter_table],
            channel=read_build_channel(o.build_table, snap=snaps[o.build_table]),
            recovery=recover(tables, batch_id=batch_id),
        )

    def _decide(
        self,
        batch_id: int,
        state: JoinState,
        batch_max_ts_ms: int | None,
        channel: BuildChannelState,
    ) -> ReleasePlan:
        return decide(
            self.options,
            batch_id=batch_id,
            now_ms=self.clock.now_ms(),
            state=state,
            batch_max_ts_ms=batch_max_ts_ms,
            build=channel,
        )

    # ---------------------------------------------------------------- processing-time fast path

    def _release_all(
        self,
        spark: SparkSession,
        parsed: DataFrame,
        plan: ReleasePlan,
        state: JoinState,
        look: _Look,
        started: float,
    ) -> JoinBatchReport:
        """Release every row in one pass (module docstring, "fast path")."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        o = self.options
        if self.ticks and parsed.isEmpty():  # a tick alone: nothing to write
            return JoinBatchReport(batch_id=plan.batch_id, plan=plan, seconds=_since(started))
        seen = Observation(f"lakehouse-join-in-{o.pipeline_id}-{plan.batch_id}")
        ok = F.col(probe.PARSE_ERROR).isNull()
        counted = parsed.observe(
            seen, F.count(F.when(ok, 1)).alias("n"), F.count(F.when(~ok, 1)).alias("bad")
        )
        staged = release.stage(self._new_rows(counted.filter(ok), plan), plan, o)
        joined = self._output(spark, staged, plan, look)
        out = release.for_join_type(joined, o)
        written = Observation(f"lakehouse-join-out-{o.pipeline_id}-{plan.batch_id}")
        out = out.observe(
            written,
            F.count(F.lit(1)).alias("n"),
            F.sum(F.col(MATCHED).cast("int")).alias("m"),
        )
        after = plan.after(pending_rows=0, evicted=0, before=state)
        delta.append(
            out,
            o.output_table,
            txn=(o.pipeline_id, plan.batch_id),
            schema_mode="widen",
            metadata=self._metadata(plan, after),
            max_files=2,
            snap=look.output,
            properties=creation_properties(TableKind.OUTPUT, o.pipeline_id),
        )
        into, out_counts = seen.get, written.get
        arrived, bad = int(into["n"]), int(into["bad"])
        released, matched = int(out_counts["n"]), int(out_counts["m"] or 0)
        failpoint("join.after_output", plan.batch_id)
        example = None
        if bad:
            dead = self._parse_dead_letters(parsed, plan.batch_id)
            self._append_dead(
                dead, plan, after, look, counts={META_DEAD_LETTERED: bad, META_ARRIVED: arrived}
            )
            if not arrived:  # one more small job, only when every record failed
                example = _example(parsed)
        return JoinBatchReport(
            batch_id=plan.batch_id,
            arrived=arrived,
            released=released,
            matched=matched,
            dead_lettered=bad,
            plan=plan,
            seconds=_since(started),
            malformed=bad,
            malformed_example=example,
            committed=True,
        )

    # ------------------------------------------------------------------------- general path

    def _general(
        self,
        spark: SparkSession,
        parsed: DataFrame,
        batch_id: int,
        plan: ReleasePlan | None,
        state: JoinState,
        look: _Look,
        started: float,
    ) -> JoinBatchReport:
        from pyspark.sql import functions as F

        o = self.options
        ok = F.col(probe.PARSE_ERROR).isNull()
        stats = parsed.agg(
            F.count(F.when(ok, 1)).alias("n"),
            F.count(F.when(~ok, 1)).alias("bad"),
            F.max(F.when(ok, F.col(TIME_MS))).alias("max_t"),
            F.min(probe.PARSE_ERROR).alias("example"),
        ).first()
        assert stats is not None
        arrived, bad_n = int(stats["n"]), int(stats["bad"])
        example = stats["example"] if bad_n and not arrived else None
        batch_max = None if stats["max_t"] is None else int(stats["max_t"])
        replayed = look.recovery.plan is not None
        if plan is None:
            plan = self._decide(batch_id, state, batch_max, look.channel)
        if not replayed and idle(
            arrived=arrived, malformed=bad_n, state=state, plan=plan, options=o
        ):
            return JoinBatchReport(
                batch_id=batch_id, pending=state.pending_rows, plan=plan, seconds=_since(started)
            )

        new = self._new_rows(parsed.filter(ok), plan)
        candidates = new
        if state.pending_rows and look.pending.exists:
            waiting = delta.read_files(
                spark, look.pending, version=look.pending.version, overwritten=True
            )
            candidates = waiting.withColumn(release.IS_NEW, F.lit(False)).unionByName(new)
        candidates = candidates.persist()
        try:
            staged = release.apply_pending_bound(release.stage(candidates, plan, o), plan)
            counts = release.count(staged)
            if not replayed and changes_nothing(counts, arrived=arrived, malformed=bad_n):
                return JoinBatchReport(
                    batch_id=batch_id, pending=counts.pending, plan=plan, seconds=_since(started)
                )
            report = self._write(
                spark, staged, parsed, plan, state, look, counts, arrived, bad_n, replayed, started
            )
            return replace(report, malformed=bad_n, malformed_example=example)
        finally:
            candidates.unpersist()

    def _write(
        self,
        spark: SparkSession,
        staged: DataFrame,
        parsed: DataFrame,
        plan: ReleasePlan,
        state: JoinState,
        look: _Look,
        counts: BatchCounts,
        arrived: int,
        bad_n: int,
        replayed: bool,
        started: float,
    ) -> JoinBatchReport:
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        o = self.options
        done = outcome(o, plan=plan, state=state, counts=counts, arrived=arrived, malformed=bad_n)
        after, accounting = done.after, done.accounting
        if done.dead_lettered:
            dead = self._staged_dead_letters(staged, parsed, plan, counts, bad_n)
            self._append_dead(dead, plan, after, look, counts=accounting)

        can_join = plan.build_version is not None
        released_n = matched_n = 0
        if can_join and done.released:
            joined = self._output(spark, staged, plan, look)
            seen = Observation(f"lakehouse-join-out-{o.pipeline_id}-{plan.batch_id}")
            observed = joined.observe(
                seen,
                F.count(F.lit(1)).alias("n"),
                F.sum(F.col(MATCHED).cast("int")).alias("m"),
            )
            written = delta.append(
                release.for_join_type(observed, o),
                o.output_table,
                txn=(o.pipeline_id, plan.batch_id),
                schema_mode="widen",
                metadata={**self._metadata(plan, after), **accounting},
                max_files=2,
                snap=look.output,
                properties=creation_properties(TableKind.OUTPUT, o.pipeline_id),
            )
            if written.skipped:  # the write ran no job: nothing was observed
                recount = joined.agg(
                    F.count(F.lit(1)).alias("n"), F.sum(F.col(MATCHED).cast("int")).alias("m")
                ).first()
                assert recount is not None
                released_n, matched_n = int(recount["n"]), int(recount["m"] or 0)
            else:
                metrics = seen.get
                released_n, matched_n = int(metrics["n"]), int(metrics["m"] or 0)
        failpoint("join.after_output", plan.batch_id)

        if done.writes_pending:
            delta.overwrite(
                release.kept(staged),
                o.pending_table,
                txn=(o.pipeline_id, plan.batch_id),
                max_files=2,
                metadata={**self._metadata(plan, after), **accounting},
                snap=look.pending,
                properties=creation_properties(TableKind.PENDING, o.pipeline_id),
            )
        return JoinBatchReport(
            batch_id=plan.batch_id,
            arrived=arrived,
            released=released_n,
            matched=matched_n,
            pending=counts.pending,
            late=counts.late,
            expired=counts.expired,
            dead_lettered=done.dead_lettered,
            plan=plan,
            seconds=_since(started),
            replayed_plan=replayed,
            evicted=counts.evicted,
            bound_alert=done.alert,
            committed=True,
        )

    # ------------------------------------------------------------------------------- pieces

    def _metadata(self, plan: ReleasePlan, after: JoinState) -> dict[str, Any]:
        return {
            META_BATCH_ID: plan.batch_id,
            META_PIPELINE: self.options.pipeline_id,
            META_PLAN: plan.to_json(),
            META_STATE: after.to_json(),
        }

    def _new_rows(self, parsed_ok: DataFrame, plan: ReleasePlan) -> DataFrame:
        from pyspark.sql import functions as F

        return (
            parsed_ok.drop(probe.PARSE_ERROR, probe.PARSE_ERROR_KIND)
            .withColumn(ARRIVED_AT, batch_timestamp_ms(plan.decided_at_ms))
            .withColumn(ARRIVAL_BATCH, batch_long(plan.batch_id))
            .withColumn(release.IS_NEW, F.lit(True))
        )

    def _output(
        self, spark: SparkSession, staged: DataFrame, plan: ReleasePlan, look: _Look
    ) -> DataFrame:
        assert plan.build_version is not None
        # by its files when Delta allows: the row-time paths cache per file set (asof)
        build = delta.read_files(spark, look.build, version=plan.build_version)
        return release.output_rows(
            staged,
            build,
            plan=plan,
            options=self.options,
            build_key=self._build_key(look, plan.build_version),
            num_buckets=self.num_buckets
            or int(spark.conf.get("spark.sql.shuffle.partitions") or 4),
        )

    def _build_key(self, look: _Look, version: int) -> tuple[str, ...]:
        o = self.options
        if o.build_key:
            return o.build_key
        key = look.channel.key_columns if look.channel.version == version else ()
        if not key:
            key = read_build_channel(o.build_table, version=version, snap=look.build).key_columns
        if not key:
            raise SchemaMismatchError(
                f"build table '{o.build_table}' has no lakehouse.primaryKey property; set "
                "build_key in the join configuration",
                table_uri=o.build_table,
            )
        if len(key) != len(o.probe_key):
            raise ConfigError(
                f"build table '{o.build_table}' has key {list(key)} but probe_key is "
                f"{list(o.probe_key)}; they must pair up in order",
                setting="probe_key",
            )
        return key

    def _parse_dead_letters(self, parsed: DataFrame, batch_id: int) -> DataFrame:
        from pyspark.sql import functions as F

        return probe.dead_letters(
            parsed.filter(F.col(probe.PARSE_ERROR).isNotNull()),
            kind=F.col(probe.PARSE_ERROR_KIND),
            error=F.col(probe.PARSE_ERROR),
            pipeline=self.options.pipeline_id,
            batch_id=batch_id,
        )

    def _staged_dead_letters(
        self,
        staged: DataFrame,
        parsed: DataFrame,
        plan: ReleasePlan,
        counts: BatchCounts,
        bad_n: int,
    ) -> DataFrame:
        """The batch's dead letters: malformed records, late rows, expired rows (by policy),
        rows evicted by the pending bound."""
        from pyspark.sql import functions as F

        o = self.options

        def of(rows: DataFrame, kind: Any, error: Any) -> DataFrame:
            return probe.dead_letters(
                rows, kind=kind, error=error, pipeline=o.pipeline_id, batch_id=plan.batch_id
            )

        dead = self._parse_dead_letters(parsed, plan.batch_id)
        if counts.late:
            dead = dead.unionByName(
                of(
                    staged.filter(release.LATE),
                    F.lit(LATE),
                    F.lit(
                        f"late probe row: time at or before the watermark {plan.previous} that "
                        "had already passed when it arrived (late_policy = dead-letter)"
                    ),
                )
            )
        if counts.expired and o.expiry_policy == "dead-letter":
            dead = dead.unionByName(
                of(
                    staged.filter(release.EXPIRED),
                    F.lit(EXPIRED),
                    F.lit(
                        f"pending longer than pending_ttl_ms = {o.pending_ttl_ms} without "
                        "being released (expiry_policy = dead-letter)"
                    ),
                )
            )
        if counts.evicted:
            dead = dead.unionByName(
                of(
                    staged.filter(F.col(release.EVICT).isNotNull()),
                    F.col(release.EVICT),
                    F.when(
                        F.col(release.EVICT) == EVICTED_AGE,
                        F.lit(
                            f"pending more than pending_max_age_ms = {plan.pending_max_age_ms} "
                            f"behind the probe's time ({age_reference(plan)}) without being "
                            f"released: the watermark {plan.combined} held it back. Moved here "
                            "by the pending bound (on_pending_bound = dead-letter); replay "
                            "_raw_value into the probe input to join it"
                        ),
                    ).otherwise(
                        F.lit(
                            f"pending table over pending_max_rows = {plan.pending_max_rows}: "
                            f"the oldest of {counts.pending + counts.evicted_rows} waiting "
                            "rows were moved here by the pending bound (on_pending_bound = "
                            "dead-letter); replay _raw_value into the probe input to join it"
                        )
                    ),
                )
            )
        return dead

    def _append_dead(
        self,
        dead: DataFrame,
        plan: ReleasePlan,
        after: JoinState,
        look: _Look,
        *,
        counts: Mapping[str, Any],
    ) -> None:
        # the plan goes with the dead letters: a replay that finds them but no output commit
        # must decide as this attempt did (module docstring, "Exactly once")
        o = self.options
        append_dead_letters(
            dead,
            o.dead_letter_table,
            app_id=o.pipeline_id,
            batch_id=plan.batch_id,
            metadata={**self._metadata(plan, after), **counts},
            snap=look.dead,
        )
        failpoint("join.after_dead_letters", plan.batch_id)


def last_state(
    *, output_table: str, pending_table: str, dead_letter_table: str | None, pipeline_id: str
) -> JoinState | None:
    """The state a join recorded after its newest batch (None: no batch yet), from the newest
    commit of the pipeline in any of its tables (for status, compaction, the soak verifier)."""
    uris = [u for u in (pending_table, output_table, dead_letter_table) if u]
    tables = [_commits_of(delta.snapshot(uri), pipeline_id, 2**62) for uri in uris]
    state = recover(tables, batch_id=2**62).state
    return None if state.batch_id is None else state


def _commits_of(snap: delta.TableSnapshot, pipeline: str, batch_id: int) -> TableCommits:
    """The pipeline's commits among the table's last :data:`RECOVERY_WINDOW`, newest first,
    read only as far as the first that records the state of a batch before ``batch_id``."""
    found: list[tuple[int, Any]] = []
    if not snap.exists:
        return TableCommits(uri=snap.uri, commits=(), complete=True)
    for info in snap.commits(RECOVERY_WINDOW):
        if info.metadata.get(META_PIPELINE) != pipeline:
            continue
        found.append((info.version, info.metadata))
        batch = info.metadata.get(META_BATCH_ID, "")
        if META_STATE in info.metadata and batch.isdigit() and int(batch) < batch_id:
            break
    return TableCommits(uri=snap.uri, commits=tuple(found), complete=snap.version < RECOVERY_WINDOW)


def _example(parsed: DataFrame) -> str | None:
    """One parse error of the batch (the smallest text: the same for every replay)."""
    from pyspark.sql import functions as F

    row = parsed.agg(F.min(probe.PARSE_ERROR).alias("e")).first()
    return None if row is None else row["e"]


def _since(started: float) -> float:
    return time.monotonic() - started


__all__: list[Any] = ["JoinBatchReport", "ReleasePlan", "TemporalJoin", "last_state"]
