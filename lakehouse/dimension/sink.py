"""The build table sink: Debezium records become versioned Delta build tables.

:class:`BuildSink` is a ``foreachBatch`` function. For each micro-batch it:

1. decodes the raw records on the executors (:mod:`lakehouse.dimension.decode`);
2. collects a small summary to the driver: record kinds, per source table the column sets,
   key columns, snapshot phases and event-time range, and the batch's end offsets;
3. routes change events to their build table (one target per source table, or one target
   for everything) and projects them onto the build table layout (:mod:`.layout`);
4. appends rejected records to the dead-letter table, then each target's versions, each
   with the idempotent transaction ``(pipeline_id, batch_id)`` and commit metadata (batch
   id, build watermark, max event time, end offsets, row count);
5. sets the snapshot-complete marker of a target whose snapshot ended (its signal is now
   covered), as a separate commit **after** the data commit; clears it, as a commit
   **before** the data commit, when a re-snapshot starts.

Exactly once: Spark guarantees the same data for the same ``batch_id``; every write skips
when its table already records the transaction, so a replay is a no-op. The marker commit
comes after the data commit; a crash between the two is healed when the sink starts (or
when a replayed batch finds its data already committed), from the ``lakehouse.snapshotEnded``
key the data commit carries. The signal bookkeeping of each batch (pending signals, consumed
offsets) is in its data commit, so a replay decides as the first attempt did.

When is the snapshot over (for one target)? :mod:`lakehouse.dimension.signals` decides, from
the strongest signal configured (Debezium notifications, heartbeats, the table's ``last`` /
``last_in_data_collection`` record, its first log-phase record); a signal covers the data
offsets at the moment it was seen and sets the marker only once the committed offsets reach
them. Records of the signal topics (``notification_topic``, ``heartbeat_topic``) are read in
the same stream, never decoded as change events, and never written to a build table; an
unreadable one is dead-lettered (``invalid_signal``). A re-snapshot clears the marker before
its first rows are committed (see :mod:`lakehouse.dimension.marker`). Incremental-snapshot
records (``incremental``) are ordinary versions and never signal anything.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakehouse import delta
from lakehouse.dead_letter import append_dead_letters, to_dead_letters
from lakehouse.delta.types import fits, value_checked, widened
from lakehouse.dimension import layout as L
from lakehouse.dimension.decode import decode_raw
from lakehouse.dimension.marker import (
    heal_marker,
    is_complete,
    iso_to_ms,
    last_max_event_time,
    last_signal_state,
    last_watermark,
    notification_properties,
    phase_of,
    record_notification,
    set_marker,
    start_resnapshot,
)
from lakehouse.dimension.schema_block import (
    SchemaBlock,
    blocked_total,
    now_iso,
    open_block,
    set_block,
)
from lakehouse.dimension.signals import (
    BatchEvidence,
    Decision,
    Heartbeat,
    Notification,
    Offsets,
    OffsetsProbe,
    RowGroup,
    SignalState,
    SnapshotOptions,
    decide,
    merge_offsets,
    parse_heartbeat,
    parse_notification,
)
from lakehouse.errors import ConfigError, DataSafetyError
from lakehouse.failpoints import failpoint
from lakehouse.time import WATERMARK_MIN

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger("lakehouse.dimension")


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
        snapshot: which signals end the table's snapshot phase, and re-snapshot handling
            (:class:`~lakehouse.dimension.signals.SnapshotOptions`).
        max_future_ms: a change whose event time is further than this past the wall clock
            is dead-lettered (``future_event_time``) instead of becoming a version: it would
            move the build watermark, which never goes back. None: no bound.
    """

    table_uri: str
    key_columns: tuple[str, ...] = ()
    source_table: str | None = None
    event_time_column: str | None = None
    out_of_orderness_ms: int = 0
    snapshot: SnapshotOptions = field(default_factory=SnapshotOptions)
    max_future_ms: int | None = 86_400_000

    def __post_init__(self) -> None:
        if self.out_of_orderness_ms < 0:
            raise ConfigError(
                f"out_of_orderness_ms must be >= 0, got {self.out_of_orderness_ms}",
                setting="out_of_orderness_ms",
            )
        if self.max_future_ms is not None and self.max_future_ms <= 0:
            raise ConfigError(
                f"max_future_ms must be > 0 (or unset), got {self.max_future_ms}",
                setting="max_future_ms",
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetReport:
    """What one micro-batch did to one build table.

    Attributes:
        phase: the snapshot phase after the batch (``loading``, ``complete``,
            ``resnapshot``).
        signal: the signal that set the marker in this batch, if any.
        pending: signals seen but waiting for their covered offsets.
        alert: the open snapshot alert (ABORTED, SKIPPED, failed table scan), if any.
        resnapshot_started: this batch started a re-snapshot (the marker was cleared).
        synthetic_deletes: deletes added for keys a completed re-snapshot did not re-read.
    """

    table_uri: str
    version: int | None
    rows: int = 0
    rejected: int = 0
    max_event_time_ms: int | None = None
    watermark_ms: int = WATERMARK_MIN
    snapshot_complete: bool = False
    marker_set_now: bool = False
    skipped: bool = False
    phase: str = "loading"
    signal: str | None = None
    pending: tuple[str, ...] = ()
    alert: str | None = None
    resnapshot_started: bool = False
    synthetic_deletes: int = 0
    schema_block: str | None = None
    schema_blocked_now: bool = False
    schema_changes: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchReport:
    """What one micro-batch did, for progress output and tests.

    ``records`` counts the data topics' records; ``signal_records`` those of the
    notification and heartbeat topics.
    """

    batch_id: int
    records: int = 0
    changes: int = 0
    tombstones: int = 0
    transactions: int = 0
    schema_changes: int = 0
    dead_lettered: int = 0
    unrouted: int = 0
    end_offsets: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    targets: tuple[TargetReport, ...] = ()
    seconds: float = 0.0
    skipped: bool = False
    errors_by_kind: Mapping[str, int] = field(default_factory=dict)
    signal_records: int = 0


@dataclass(frozen=True, slots=True)
class _Signals:
    """The batch's records of the signal topics, parsed on the driver."""

    notifications: tuple[Notification, ...] = ()
    heartbeats: tuple[Heartbeat, ...] = ()
    invalid: tuple[tuple[str, int, int, str], ...] = ()  # (topic, partition, offset, reason)
    count: int = 0
    end_offsets: Offsets = field(default_factory=dict)


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
        offsets_probe: reads the data topics' current high watermarks (Kafka); a signal
            then covers everything produced before it even when the batch that carried it
            did not read that far (rate limits, partitions seen later). None: a signal
            covers what the stream has consumed, which is exact only for a source that
            plans every batch to the end of its input.
        planned_offsets: the offsets the stream planned batch ``batch_id`` to (from the
            query's offsets log), or None when unknown; consumed positions then count
            partitions whose tail holds no record (transaction markers). None: consumed
            positions come from the records alone.
    """

    def __init__(
        self,
        targets: Sequence[BuildTarget],
        *,
        dead_letter_uri: str,
        pipeline_id: str,
        on_batch: Callable[[BatchReport], None] | None = None,
        max_record_bytes: int = 16 * 1024 * 1024,
        offsets_probe: OffsetsProbe | None = None,
        planned_offsets: Callable[[int], Mapping[str, Mapping[str, int]] | None] | None = None,
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
        self.offsets_probe = offsets_probe
        self.planned_offsets = planned_offsets
        self.signal_topics = tuple(sorted({t for x in targets for t in x.snapshot.topics}))
        self._markers_checked = False

    # ---------------------------------------------------------------------------- entry point

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        report = self.process(df, batch_id)
        if self.on_batch is not None:
            self.on_batch(report)

    def process(self, df: DataFrame, batch_id: int) -> BatchReport:
        """Process one micro-batch (see the module docstring); returns what it did."""
        with delta.batch_scope():  # each table's log read once per batch
            return self._process(df, batch_id)

    def _process(self, df: DataFrame, batch_id: int) -> BatchReport:
        started = time.monotonic()
        if not self._markers_checked:
            for target in self.targets:
                heal_marker(target.table_uri)
                self._sync_resnapshot_join(target)
            self._markers_checked = True
        if all(self._already_committed(t, batch_id) for t in self.targets):
            return BatchReport(
                batch_id=batch_id,
                targets=tuple(self._skipped_report(t) for t in self.targets),
                seconds=time.monotonic() - started,
                skipped=True,
            )

        from pyspark.sql import functions as F

        data, signal_df = df, None
        if self.signal_topics:
            is_signal = F.col("topic").isin(*self.signal_topics)
            data, signal_df = df.filter(~is_signal), df.filter(is_signal)
        signals = self._read_signals(signal_df)
        decoded = decode_raw(data, max_record_bytes=self.max_record_bytes).persist()
        try:
            return self._process_decoded(decoded, signal_df, signals, batch_id, started)
        finally:
            decoded.unpersist()

    # ------------------------------------------------------------------------------ internals

    def _already_committed(self, target: BuildTarget, batch_id: int) -> bool:
        if not delta.table_exists(target.table_uri):
            return False
        recorded = delta.transaction_version(target.table_uri, self.pipeline_id)
        return recorded is not None and recorded >= batch_id

    def _sync_resnapshot_join(self, target: BuildTarget) -> None:
        """Apply the configured ``resnapshot_join`` to an existing table (joins read it)."""
        uri = target.table_uri
        wanted = target.snapshot.resnapshot_join
        if delta.table_exists(uri) and (
            delta.get_properties(uri).get(L.PROP_SNAPSHOT_RESNAPSHOT_JOIN) != wanted
        ):
            delta.set_properties(
                uri,
                {L.PROP_SNAPSHOT_RESNAPSHOT_JOIN: wanted},
                metadata={"lakehouse.reason": "resnapshot_join from the ingest configuration"},
            )

    def _skipped_report(self, target: BuildTarget) -> TargetReport:
        props = delta.get_properties(target.table_uri)
        return TargetReport(
            table_uri=target.table_uri,
            version=delta.latest_version(target.table_uri),
            watermark_ms=last_watermark(target.table_uri),
            snapshot_complete=is_complete(props),
            skipped=True,
            phase=phase_of(props),
            alert=props.get(L.PROP_SNAPSHOT_ALERT) or None,
            schema_block=_block_text(target.table_uri, open_block(props)),
        )

    def _read_signals(self, signal_df: DataFrame | None) -> _Signals:
        """Collect and parse the batch's notification and heartbeat records (few and small).

        Runs on the driver; a replay reads the same records and parses them the same way.
        """
        if signal_df is None:
            return _Signals()
        from pyspark.sql import functions as F

        rows = signal_df.select(
            "value", "topic", "partition", "offset", F.unix_millis("timestamp").alias("ts")
        ).collect()
        notification_topics = {t.snapshot.notification_topic for t in self.targets}
        notifications: list[Notification] = []
        heartbeats: list[Heartbeat] = []
        invalid: list[tuple[str, int, int, str]] = []
        ends: Offsets = {}
        for r in sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"])):
            where = {
                "topic": r["topic"],
                "partition": int(r["partition"]),
                "offset": int(r["offset"]),
                "kafka_ts_ms": None if r["ts"] is None else int(r["ts"]),
            }
            parts = ends.setdefault(r["topic"], {})
            parts[str(r["partition"])] = max(parts.get(str(r["partition"]), 0), r["offset"] + 1)
            value = None if r["value"] is None else bytes(r["value"])
            try:
                if r["topic"] in notification_topics:
                    n = parse_notification(value, **where)
                    if n is not None:
                        notifications.append(n)
                else:
                    h = parse_heartbeat(value, **where)
                    if h is not None:
                        heartbeats.append(h)
            except ValueError as e:
                kind = "notification" if r["topic"] in notification_topics else "heartbeat"
                invalid.append((r["topic"], int(r["partition"]), int(r["offset"]), f"{kind}: {e}"))
        return _Signals(tuple(notifications), tuple(heartbeats), tuple(invalid), len(rows), ends)

    def _process_decoded(
        self,
        decoded: DataFrame,
        signal_df: DataFrame | None,
        signals: _Signals,
        batch_id: int,
        started: float,
    ) -> BatchReport:
        from pyspark.sql import functions as F

        summary, data_ends, groups = _summarise(decoded)
        end_offsets = merge_offsets(data_ends, signals.end_offsets)

        kinds: dict[str, int] = {}
        errors_by_kind: dict[str, int] = {}
        for r in summary:
            kinds[r["_kind"]] = kinds.get(r["_kind"], 0) + r["n"]
            if r["_kind"] == "error":
                errors_by_kind[r["_error_kind"]] = errors_by_kind.get(r["_error_kind"], 0) + r["n"]
        if signals.invalid:
            errors_by_kind["invalid_signal"] = len(signals.invalid)
        changes = [r for r in summary if r["_kind"] == "change"]
        ddl_events = _schema_changes(decoded) if kinds.get("schema_change") else []

        rejected: list[DataFrame] = [
            self._dead_letters(decoded.filter(F.col("_kind") == "error"), batch_id)
        ]
        if signals.invalid and signal_df is not None:
            rejected.append(self._invalid_signals(signal_df, signals, batch_id))
        plans: list[_TargetPlan] = []
        routed = 0
        for target in self.targets:
            mine = [
                r
                for r in changes
                if target.source_table is None or r["_source_table"] == target.source_table
            ]
            routed += sum(r["n"] for r in mine)
            block = None
            if delta.table_exists(target.table_uri):
                block = open_block(delta.get_properties(target.table_uri))
            if block is not None and block.batch_id >= batch_id:
                block = None  # the batch that met the block (a replay): decide as it did
            plan = _plan_target(decoded, target, mine, batch_id, block=block)
            plan.schema_changes = [
                d
                for d in ddl_events
                if target.source_table is None or target.source_table in d["tables"]
            ]
            plans.append(plan)
            if plan.rejected is not None:
                rejected.append(self._dead_letters(plan.rejected, batch_id))

        dead = rejected[0]
        for extra in rejected[1:]:
            dead = dead.unionByName(extra)
        # errors counted already (the summary, the signals): no job to look for them
        known = kinds.get("error", 0) + len(signals.invalid) + sum(p.rejected_count for p in plans)
        dead_result = append_dead_letters(
            dead,
            self.dead_letter_uri,
            app_id=self.pipeline_id,
            batch_id=batch_id,
            known_rows=known > 0,
        )
        dead_count = dead_result.rows if dead_result is not None else 0
        failpoint("ingest.after_dead_letters", batch_id)

        # Data offsets consumed once this batch is committed (signal topics left out).
        priors = {t.table_uri: last_signal_state(t.table_uri) for t in self.targets}
        planned = self.planned_offsets(batch_id) if self.planned_offsets is not None else None
        planned = {t: p for t, p in (planned or {}).items() if t not in self.signal_topics}
        positions = merge_offsets(*(s.positions for _, s in priors.values()), data_ends, planned)
        probe = _once(self.offsets_probe)

        reports = []
        for plan in plans:
            target = plan.target
            evidence = BatchEvidence(
                rows=tuple(
                    RowGroup(
                        r["topic"],
                        int(r["partition"]),
                        r["_snapshot_phase"] or "false",
                        int(r["n"]),
                        int(r["o"]),
                        None if r["ts"] is None else int(r["ts"]),
                        max_seq=r["seq"],
                        max_source_ts_ms=r["src_ts"],
                    )
                    for r in groups
                    if target.source_table is None or r["_source_table"] == target.source_table
                ),
                notifications=tuple(
                    n
                    for n in signals.notifications
                    if n.topic == target.snapshot.notification_topic
                ),
                heartbeats=tuple(
                    h for h in signals.heartbeats if h.topic == target.snapshot.heartbeat_topic
                ),
            )
            uri = target.table_uri
            props = delta.get_properties(uri) if delta.table_exists(uri) else {}
            blob_version, blob = priors[uri]
            if blob_version is not None and self._already_committed(target, batch_id):
                blob = SignalState()  # this batch's own bookkeeping: the write is skipped
            decision = decide(
                phase=phase_of(props),
                prior=blob,
                batch=evidence,
                options=target.snapshot,
                source_table=target.source_table,
                batch_id=batch_id,
                positions=positions,
                probe=probe,
                marker_signal=props.get(L.PROP_SNAPSHOT_SIGNAL),
                completed_at_ms=iso_to_ms(props.get(L.PROP_SNAPSHOT_COMPLETED_AT)),
            )
            for why in decision.ignored:
                log.info("build table %s, batch %d: signal ignored: %s", uri, batch_id, why)
            reports.append(self._commit_target(plan, decision, batch_id, end_offsets))
        routed_ddl = {
            id(d) for p in plans for d in p.schema_changes if delta.table_exists(p.target.table_uri)
        }
        for d in ddl_events:
            if id(d) not in routed_ddl:
                log.info(
                    "batch %d: schema change of %s not recorded in a build table (no configured "
                    "table with rows for it yet): %s",
                    batch_id,
                    ", ".join(d["tables"]) or "an unknown table",
                    d["ddl"],
                )
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
            targets=tuple(reports),
            seconds=time.monotonic() - started,
            errors_by_kind=errors_by_kind,
            signal_records=signals.count,
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

    def _invalid_signals(self, signal_df: DataFrame, signals: _Signals, batch_id: int) -> DataFrame:
        """The unreadable notification/heartbeat records, as dead letters."""
        from pyspark.sql import functions as F

        reasons = signal_df.sparkSession.createDataFrame(
            list(signals.invalid), "topic string, partition int, offset bigint, _error string"
        )
        bad = signal_df.join(reasons, ["topic", "partition", "offset"]).withColumn(
            "_error_kind", F.lit("invalid_signal")
        )
        return self._dead_letters(bad, batch_id)

    def _commit_target(
        self,
        plan: _TargetPlan,
        decision: Decision,
        batch_id: int,
        end_offsets: Mapping[str, Mapping[str, int]],
    ) -> TargetReport:
        from pyspark.sql import functions as F

        target = plan.target
        uri = target.table_uri
        exists = delta.table_exists(uri)
        needs_table = (
            decision.fire is not None or bool(decision.state.pending) or decision.alert_changed
        )
        if plan.rows is None and not exists and not needs_table:
            # nothing routed here ever, and no signal or alert for it: no empty table
            return TargetReport(table_uri=uri, version=None, rejected=plan.rejected_count)
        rows = plan.rows.persist() if plan.rows is not None else None
        synthetic_count = 0
        try:
            if not exists:
                delta.create_table(
                    uri,
                    rows.schema if rows is not None else _lineage_schema(),
                    properties={
                        L.PROP_PRIMARY_KEY: ",".join(plan.key_columns),
                        L.PROP_EVENT_TIME: target.event_time_column or "source.ts_ms",
                        L.PROP_SOURCE_TABLE: target.source_table or "*",
                        L.PROP_SNAPSHOT_COMPLETE: "false",
                        L.PROP_SNAPSHOT_STATE: "loading",
                        L.PROP_SNAPSHOT_RESNAPSHOT_JOIN: target.snapshot.resnapshot_join,
                        L.PROP_TABLE_KIND: "build",
                    },
                )
            props = delta.get_properties(uri)
            replay = self._already_committed(target, batch_id)
            if plan.key_columns and not props.get(L.PROP_PRIMARY_KEY) and not replay:
                # a table created by a signal before its first row learns its key now
                delta.set_properties(uri, {L.PROP_PRIMARY_KEY: ",".join(plan.key_columns)})
            phase_before = phase_of(props)
            if decision.start_resnapshot and not replay:
                start_resnapshot(uri, batch_id=batch_id, join=target.snapshot.resnapshot_join)
                props = delta.get_properties(uri)
                log.warning(
                    "build table %s: snapshot rows arrived after the marker; re-snapshot "
                    "started, joins read version %s until it completes",
                    uri,
                    props.get(L.PROP_SNAPSHOT_LAST_COMPLETE),
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
            block, new_block = self._schema_block(plan, props, batch_id, replay, watermark)
            if block is not None:
                # the dimension misses a change from the block on: hold the watermark there
                watermark = block.watermark_ms
            to_write = rows if rows is not None else _empty_like(uri)
            ends_resnapshot = decision.fire is not None and (
                phase_before == "resnapshot" or decision.start_resnapshot
            )
            if ends_resnapshot and target.snapshot.resnapshot_deletes and not replay:
                ghosts = _synthetic_deletes(uri, plan.key_columns, props, rows)
                if ghosts is not None:
                    deletes, live = ghosts
                    deletes = deletes.persist()
                    synthetic_count = deletes.count()
                    self._check_ended_share(target, props, synthetic_count, live, batch_id)
                    if synthetic_count:
                        to_write = to_write.unionByName(deletes, allowMissingColumns=True)
            metadata = {
                L.META_BATCH_ID: batch_id,
                L.META_PIPELINE: self.pipeline_id,
                L.META_WATERMARK: watermark,
                L.META_MAX_EVENT_TIME: max_ts if max_ts is not None else "",
                L.META_END_OFFSETS: {t: dict(p) for t, p in end_offsets.items()},
                L.META_ROWS: n_rows,
                L.META_SNAPSHOT_STATE: decision.state.to_json(),
            }
            if decision.fire is not None:
                metadata[L.META_SNAPSHOT_ENDED] = decision.fire.signal
            if synthetic_count:
                metadata[L.META_SYNTHETIC_DELETES] = synthetic_count
            blocked_so_far = 0
            if block is not None:
                blocked_so_far = plan.blocked_count + (0 if new_block else blocked_total(uri))
                metadata[L.META_SCHEMA_BLOCKED] = plan.blocked_count
                metadata[L.META_SCHEMA_BLOCKED_TOTAL] = blocked_so_far
            if plan.schema_changes:
                metadata[L.META_SCHEMA_CHANGES] = plan.schema_changes[:_MAX_DDL_PER_COMMIT]
            result = delta.append(
                to_write,
                uri,
                txn=(self.pipeline_id, batch_id),
                metadata=metadata,
                schema_mode="widen",
                max_files=2,
            )
        finally:
            if rows is not None:
                rows.unpersist()
        failpoint("ingest.after_data", batch_id)
        marker_now = False
        state = decision.state
        if result.skipped:
            heal_marker(uri)  # a replay: finish what the first attempt may have left undone
        elif decision.fire is not None and not is_complete(delta.get_properties(uri)):
            fired = decision.fire
            set_marker(
                uri,
                signal=fired.signal,
                data_version=result.version,
                batch_id=batch_id,
                covered_offsets=fired.covered,
                detail=fired.detail,
                extra=notification_properties(decision.notification, None)
                if decision.notification is not None
                else None,
            )
            marker_now = True
            log.info(
                "build table %s: snapshot complete (signal %s: %s), data version %d",
                uri,
                fired.signal,
                fired.detail,
                result.version,
            )
        elif decision.notification is not None or decision.alert_changed:
            record_notification(uri, decision.notification, state.alert, batch_id=batch_id)
        if state.alert is not None and decision.alert_changed:
            log.warning("build table %s: snapshot alert: %s", uri, state.alert)
        if block is not None and not result.skipped:
            log.warning("build table %s: %s", uri, block.describe(blocked_so_far))
        for ddl in plan.schema_changes:
            log.info("build table %s: schema change recorded: %s", uri, ddl["ddl"])
        props = delta.get_properties(uri)
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
            phase=phase_of(props),
            signal=decision.fire.signal if marker_now and decision.fire else None,
            pending=tuple(f"{p.signal}: {p.detail}" for p in state.pending),
            alert=props.get(L.PROP_SNAPSHOT_ALERT) or None,
            resnapshot_started=decision.start_resnapshot and not result.skipped,
            synthetic_deletes=synthetic_count,
            schema_block=None if block is None else block.describe(blocked_so_far),
            schema_blocked_now=new_block and not result.skipped,
            schema_changes=len(plan.schema_changes),
        )

    def _check_ended_share(
        self,
        target: BuildTarget,
        props: Mapping[str, str],
        ended: int,
        live: int,
        batch_id: int,
    ) -> None:
        """Stop before a completing re-snapshot ends more than ``resnapshot_max_ended`` of the
        live keys; the alert stays on the table (``lakehouse status`` shows it) and joins keep
        reading the last complete version until an operator decides."""
        limit = target.snapshot.resnapshot_max_ended
        if not ended or limit >= 1 or ended <= limit * live:
            return
        uri = target.table_uri
        alert = (
            f"the completing re-snapshot would end {ended} of {live} live keys "
            f"({ended / live:.0%}, above resnapshot_max_ended = {limit:g}); nothing committed"
        )
        record_notification(uri, None, alert, batch_id=batch_id)
        raise DataSafetyError(
            f"build table {uri}: {alert}. Joins keep reading version "
            f"{props.get(L.PROP_SNAPSHOT_LAST_COMPLETE)}. If the source really lost these keys, "
            f"set ingest.tables[].resnapshot_max_ended = 1 (or resnapshot_deletes = false for a "
            "filtered re-snapshot) and run the ingest again",
            table_uri=uri,
        )

    def _schema_block(
        self,
        plan: _TargetPlan,
        props: Mapping[str, str],
        batch_id: int,
        replay: bool,
        normal: int,
    ) -> tuple[SchemaBlock | None, bool]:
        """The schema block in force for this batch's commit, and whether it starts now.

        A block starts in the batch that meets the first incompatible record: it is
        recorded (a commit before the data commit) with the watermark capped below that
        record's event time, and never lower than the watermark already committed. A replay
        of that batch finds its own block and reuses it.
        """
        if plan.active_block is not None:
            return plan.active_block, False
        evidence = plan.evidence
        if evidence is None:
            return None, False
        uri = plan.target.table_uri
        existing = open_block(props)
        if existing is not None and existing.batch_id == batch_id:
            return existing, True
        previous_wm = last_watermark(uri)
        cap = normal if evidence.first_event_time_ms is None else evidence.first_event_time_ms - 1
        block = SchemaBlock(
            column=evidence.column,
            table_type=evidence.table_type,
            record_type=evidence.record_type,
            since_version=delta.latest_version(uri) + 1,
            batch_id=batch_id,
            pipeline=self.pipeline_id,
            first_offset=evidence.first_offset,
            first_event_time_ms=evidence.first_event_time_ms,
            watermark_ms=max(previous_wm, min(normal, cap)),
            blocked_at=now_iso(),
            reason=evidence.reason,
        )
        if not replay:
            set_block(uri, block)
            log.error("build table %s: %s", uri, block.describe())
        return block, True


def _once(probe: OffsetsProbe | None) -> OffsetsProbe | None:
    """The probe, asked at most once per batch (every target sees the same answer)."""
    if probe is None:
        return None
    answer: list[Mapping[str, Mapping[str, int]]] = []

    def cached() -> Mapping[str, Mapping[str, int]]:
        if not answer:
            answer.append(probe())
        return answer[0]

    return cached


def _lineage_schema() -> StructType:
    """The schema of a build table created by a signal before any row (an empty source
    table): the lineage columns only; the row image's columns are added by the first rows."""
    from pyspark.sql.types import StructType

    return StructType.fromDDL(
        f"{L.OP} string, {L.EVENT_TIME} timestamp, {L.SEQ} string, {L.SNAPSHOT} boolean, "
        f"{L.INGESTED_AT} timestamp, {L.KAFKA_TOPIC} string, {L.KAFKA_PARTITION} int, "
        f"{L.KAFKA_OFFSET} bigint"
    )


def _synthetic_deletes(
    uri: str,
    key_columns: Sequence[str],
    props: Mapping[str, str],
    batch_rows: DataFrame | None,
) -> tuple[DataFrame, int] | None:
    """Deletes for the keys a completed re-snapshot did not re-read, and how many keys are
    alive before them (the share :meth:`BuildSink._check_ended_share` bounds).

    A key is a *ghost* when its latest version (by ``_event_time``, ``_seq``; truncates
    included) is alive and none of its rows was added since the re-snapshot started — in a
    data file that the last complete version (``lakehouse.snapshot.lastCompleteVersion``)
    does not hold, or in this batch. Each ghost gets a delete at the re-snapshot's newest
    event time (never before its own latest version; ``_seq`` extends the version's so the
    delete sorts after it), with NULL value columns and ``_kafka_topic``
    :data:`~lakehouse.dimension.layout.SYNTHETIC_DELETE_TOPIC`. Reads the whole table once (a
    re-snapshot is rare). None when the table has no key or no last complete version.
    """
    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    last_complete = props.get(L.PROP_SNAPSHOT_LAST_COMPLETE, "")
    if not key_columns or not last_complete.isdigit():
        return None
    spark = SparkSession.getActiveSession()
    assert spark is not None
    table = delta.read(spark, uri)
    if any(k not in table.columns for k in key_columns):
        return None
    before = (
        delta.read(spark, uri, version=int(last_complete))
        .select(F.col("_metadata.file_path").alias("_path"))
        .distinct()
        .withColumn("_old", F.lit(True))
    )
    every = (
        table.withColumn("_path", F.col("_metadata.file_path"))
        .join(F.broadcast(before), "_path", "left")
        .withColumn("_new", F.col("_old").isNull())
        .drop("_path", "_old")
    )
    if batch_rows is not None:
        every = every.unionByName(
            batch_rows.withColumn("_new", F.lit(True)), allowMissingColumns=True
        )
    touched = every.filter("_new").select(*key_columns).distinct()
    resnapshot_time = (
        every.filter(F.col("_new") & F.col(L.SNAPSHOT)).agg(F.max(L.EVENT_TIME)).first()[0]
    )
    truncated = every.filter(F.col(L.OP) == "t").agg(F.max(L.EVENT_TIME)).first()[0]
    order = Window.partitionBy(*key_columns).orderBy(
        F.col(L.EVENT_TIME).desc(), F.col(L.SEQ).desc()
    )
    latest = (
        every.filter(F.col(L.OP) != "t")
        .withColumn("_rn", F.row_number().over(order))
        .filter("_rn = 1")
        .filter(F.col(L.OP) != "d")
    )
    if truncated is not None:
        latest = latest.filter(F.col(L.EVENT_TIME) > F.lit(truncated))
    live = latest.count()
    ghosts = latest.join(touched, list(key_columns), "left_anti")
    when = (
        F.col(L.EVENT_TIME)
        if resnapshot_time is None
        else F.greatest(F.col(L.EVENT_TIME), F.lit(resnapshot_time))
    )
    columns = []
    for f in table.schema.fields:
        if f.name in key_columns:
            columns.append(F.col(f.name))
        elif f.name == L.OP:
            columns.append(F.lit("d").alias(L.OP))
        elif f.name == L.EVENT_TIME:
            columns.append(when.alias(L.EVENT_TIME))
        elif f.name == L.SEQ:
            columns.append(F.concat(F.col(L.SEQ), F.lit("~resnapshot-delete")).alias(L.SEQ))
        elif f.name == L.SNAPSHOT:
            columns.append(F.lit(True).alias(L.SNAPSHOT))
        elif f.name == L.INGESTED_AT:
            columns.append(F.current_timestamp().alias(L.INGESTED_AT))
        elif f.name == L.KAFKA_TOPIC:
            columns.append(F.lit(L.SYNTHETIC_DELETE_TOPIC).alias(L.KAFKA_TOPIC))
        else:
            columns.append(F.lit(None).cast(f.dataType).alias(f.name))
    return ghosts.select(*columns), live


# ---------------------------------------------------------------------------------- planning


#: Schema-change events recorded in one data commit's metadata at most (the rest: log only).
_MAX_DDL_PER_COMMIT = 50


@dataclass(frozen=True, slots=True)
class _BlockEvidence:
    """The first incompatible record of a batch (it starts a schema block)."""

    column: str
    table_type: str
    record_type: str
    reason: str
    first_offset: dict[str, Any]
    first_event_time_ms: int | None


@dataclass(slots=True)
class _TargetPlan:
    target: BuildTarget
    key_columns: tuple[str, ...]
    rows: DataFrame | None
    rejected: DataFrame | None
    rejected_count: int
    evidence: _BlockEvidence | None = None
    active_block: SchemaBlock | None = None
    blocked_count: int = 0
    schema_changes: list[dict[str, Any]] = field(default_factory=list)


def _summarise(decoded: DataFrame) -> tuple[list[dict[str, Any]], Offsets, list[dict[str, Any]]]:
    """One Spark job for everything the driver decides from, returned three ways:

    * per record kind, error kind, source table, phase and column set: count ``n`` and the
      largest event time ``max_ts`` (the plan of each target);
    * the end offset of each partition read (``{topic: {partition: next offset}}``);
    * per source table, phase and partition, of the change records: count ``n``, largest
      offset ``o``, largest Kafka timestamp ``ts``, largest connector position ``seq`` and
      largest ``source.ts_ms`` ``src_ts`` (the snapshot signals).
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
        )
        .collect()
    )
    summary: dict[tuple[Any, ...], dict[str, Any]] = {}
    ends: Offsets = {}
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        key = tuple(r[c] for c in (*shape, *columns))
        entry = summary.setdefault(
            key, {**dict(zip((*shape, *columns), key, strict=True)), "n": 0, "max_ts": None}
        )
        entry["n"] += int(r["n"])
        entry["max_ts"] = _max(entry["max_ts"], r["max_ts"])
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


def _schema_changes(decoded: DataFrame) -> list[dict[str, Any]]:
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


def _block_text(uri: str, block: SchemaBlock | None) -> str | None:
    return None if block is None else block.describe(blocked_total(uri))


def _plan_target(
    decoded: DataFrame,
    target: BuildTarget,
    summary: list[Any],
    batch_id: int,
    *,
    block: SchemaBlock | None = None,
    replay: bool = False,
) -> _TargetPlan:
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
    order: list[str] = [n for n in table_types if n not in L.LINEAGE_COLUMNS]
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
        stored = delta.get_properties(uri).get(L.PROP_PRIMARY_KEY, "")
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
        return _TargetPlan(target, key_columns, None, None, 0)

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
        return _TargetPlan(
            target, key_columns, None, held, count, active_block=block, blocked_count=count
        )

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

    reason = F.lit(None).cast("string")
    kind = F.lit(None).cast("string")
    evidence: _BlockEvidence | None = None
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
        F.col("_op").alias(L.OP),
        event_time.alias(L.EVENT_TIME),
        seq.alias(L.SEQ),
        F.col("_snapshot_phase").isin(*L.SNAPSHOT_PHASES).alias(L.SNAPSHOT),
        F.current_timestamp().alias(L.INGESTED_AT),
        F.col("topic").alias(L.KAFKA_TOPIC),
        F.col("partition").alias(L.KAFKA_PARTITION),
        F.col("offset").alias(L.KAFKA_OFFSET),
    )
    mismatched = sum(r["n"] for r in summary if r["_row_columns"] in incompatible)
    return _TargetPlan(
        target,
        key_columns,
        rows,
        rejected,
        mismatched + held_count,
        evidence=evidence,
        blocked_count=mismatched + held_count if evidence is not None else 0,
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
) -> tuple[_BlockEvidence, Column, int]:
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
    evidence = _BlockEvidence(
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
        setting="event_time_column",
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


def _empty_like(uri: str) -> DataFrame:
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None
    return spark.createDataFrame([], delta.table_schema(uri))
