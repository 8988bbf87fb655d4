"""The build table sink: Debezium records become versioned Delta build tables.

:class:`BuildSink` is a ``foreachBatch`` function. For each micro-batch it reads what it
decides from, decides in pure code, then writes:

1. takes one look at each build table (:mod:`lakehouse.dimension.look`): columns, properties,
   what its recent commits recorded, whether it records this batch already;
2. decodes the raw records on the executors (:mod:`lakehouse.dimension.decode`) and collects
   a small summary to the driver: record kinds, per source table the column sets, key
   columns, snapshot phases and event-time range, and the batch's end offsets;
3. routes change events to their build table (one target per source table, or one target
   for everything), decides each table's columns and projects the events onto the build
   table layout (:mod:`.plan`, :mod:`.layout`), decides its snapshot signals
   (:mod:`.signals`) and its commit (:mod:`.commit`);
4. writes each target's rows as data files on the snapshot of its look, counting them as
   they are written (:func:`lakehouse.delta.stage_append`), appends rejected records to the
   dead-letter table (:mod:`.rejects`), then commits each target's versions, each with the
   idempotent transaction ``(pipeline_id, batch_id)`` and commit metadata (batch id, build
   watermark, max event time, end offsets, row count); a table the batch's rows are the
   first of is created by their commit, with its properties;
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

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from lakehouse import delta
from lakehouse.delta.write import TABLES_TOGETHER_CONF
from lakehouse.dimension import connect_schemas
from lakehouse.dimension.batch_signals import (
    BatchSignals,
    ask_once,
    decide_signals,
    read_signals,
    routes,
)
from lakehouse.dimension.commit import CommitPlan, RowStats, plan_commit, table_creation
from lakehouse.dimension.decode import decode_rest, decode_start
from lakehouse.dimension.jvm_decode import WireSchemas, decode_fast, image_columns
from lakehouse.dimension.layout import (
    META_SYNTHETIC_DELETES,
    PROP_CONNECT_SCHEMAS,
    PROP_PRIMARY_KEY,
    PROP_SNAPSHOT_ALERT,
    PROP_SNAPSHOT_LAST_COMPLETE,
    PROP_SNAPSHOT_RESNAPSHOT_JOIN,
)
from lakehouse.dimension.look import TargetLook, look_at
from lakehouse.dimension.marker import (
    heal_marker,
    is_complete,
    last_watermark,
    notification_properties,
    now_iso,
    phase_of,
    record_notification,
    set_marker,
    start_resnapshot,
)
from lakehouse.dimension.one_pass import ONE_PASS_CONF, Foresight, OnePass, steady, write_one_pass
from lakehouse.dimension.plan import (
    ClockColumns,
    PlanClock,
    TargetFrames,
    TargetPlan,
    empty_like,
    lineage_schema,
    plan_shape,
    plan_target,
    schema_change_events,
)
from lakehouse.dimension.rejects import write_rejects
from lakehouse.dimension.resnapshot import synthetic_deletes
from lakehouse.dimension.schema_block import (
    SchemaBlock,
    block_text,
    open_block,
    set_block,
)
from lakehouse.dimension.signals import (
    Decision,
    OffsetsProbe,
    merge_offsets,
)
from lakehouse.dimension.staging import (
    MAX_FILES,
    Prepared,
    row_stats,
    stage_rows,
    stage_rows_together,
)
from lakehouse.dimension.summary import Summary, count_kinds, python_pass_needed, summarise
from lakehouse.dimension.targets import BatchReport, BuildTarget, TargetReport
from lakehouse.errors import ConfigError, DataSafetyError
from lakehouse.failpoints import failpoint
from lakehouse.parallel import map_tables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("lakehouse.dimension")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Written:
    """What a target's writes did: the data commit, its synthetic deletes, the schema block
    in force as recorded."""

    result: delta.WriteResult
    synthetic_deletes: int
    block: SchemaBlock | None


class _Planned(NamedTuple):
    """A target's plan for the batch, its rows and dead letters, the value of
    ``lakehouse.connect.schemas`` the batch sets, and the properties of the table its commit
    creates (None: the table exists)."""

    plan: TargetPlan
    frames: TargetFrames
    schemas: str | None
    create: Mapping[str, str] | None


class BuildSink:
    """``foreachBatch`` sink that appends Debezium changes to versioned build tables.

    Runs on the driver; Spark calls it once per micro-batch, and again with the same
    ``batch_id`` (and the same data) after a failure. Writes are idempotent per
    ``(pipeline_id, batch_id)``. The instance holds no state that a replay depends on; it
    caches only which markers it has checked since start.

    Args:
        targets: the build tables; two targets may not route the same source table.
        dead_letter_table: the dead-letter table (see :mod:`lakehouse.dead_letter`).
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
        table_parallelism: how many tables a batch works on at once (their looks, plans,
            statistics, writes, commits and markers; :func:`lakehouse.parallel.map_tables`).
            Each table's work is idempotent on its own, so the order in which tables commit
            is not part of the exactly-once argument; 1 works through them one by one.
        decode_tasks: the most Spark tasks that decode a batch (and write each table's rows
            from it): the batch's input partitions are merged, without a shuffle, into at
            most this many. None: twice Spark's default parallelism (two tasks per core the
            application has: one computes while the other waits on its source). Every task
            generates the decode's code for each Connect schema known, a cost per task and
            not per record, so a batch read as one partition per topic of a many-table
            connector paid it once per topic.
    """

    def __init__(
        self,
        targets: Sequence[BuildTarget],
        *,
        dead_letter_table: str,
        pipeline_id: str,
        on_batch: Callable[[BatchReport], None] | None = None,
        max_record_bytes: int = 16 * 1024 * 1024,
        offsets_probe: OffsetsProbe | None = None,
        planned_offsets: Callable[[int], Mapping[str, Mapping[str, int]] | None] | None = None,
        table_parallelism: int = 4,
        decode_tasks: int | None = None,
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
                f"source table(s) {sorted(dupes, key=str)} routed to more than one target",
                setting="source_table",
            )
        self.targets = tuple(targets)
        self.dead_letter_table = dead_letter_table
        self.pipeline_id = pipeline_id
        self.on_batch = on_batch
        self.max_record_bytes = max_record_bytes
        self.offsets_probe = offsets_probe
        self.planned_offsets = planned_offsets
        if table_parallelism < 1:
            raise ConfigError(
                f"table_parallelism must be at least 1, got {table_parallelism}",
                setting="table_parallelism",
            )
        self.table_parallelism = table_parallelism
        if decode_tasks is not None and decode_tasks < 1:
            raise ConfigError(
                f"decode_tasks must be at least 1, got {decode_tasks}", setting="decode_tasks"
            )
        self.decode_tasks = decode_tasks
        self.signal_topics = tuple(sorted({t for x in targets for t in x.snapshot.topics}))
        self._markers_checked = False
        #: each table's plan expressions, by what they depend on (see :func:`plan_target`)
        self._expressions: dict[Any, Any] = {}
        #: the columns each batch's plans read its wall clock from, kept with the expressions
        self._clock = ClockColumns()
        #: the Connect schemas the JVM decode knows, learned batch by batch
        self._wire = WireSchemas()
        #: the last steady batch's shapes, which the next is planned from (module .one_pass)
        self._foresight = Foresight()

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
        # one look at each table: everything the batch decides for it is decided from this
        looked = map_tables(
            df.sparkSession,
            lambda t: look_at(
                t.table_uri, app_id=self.pipeline_id, batch_id=batch_id, spark=df.sparkSession
            ),
            self.targets,
            workers=self.table_parallelism,
        )
        looks = {t.table_uri: look for t, look in zip(self.targets, looked, strict=True)}
        if len(self._expressions) > 16 * len(self.targets):
            self._expressions.clear()  # tables whose columns moved on: their old ones
        if all(look.replay for look in looks.values()):
            return BatchReport(
                batch_id=batch_id,
                targets=tuple(self._skipped_report(t) for t in self.targets),
                seconds=time.monotonic() - started,
                skipped=True,
            )

        from pyspark.sql import functions as F

        # Spark's Kafka source plans a task per topic-partition read, and a connector's topics
        # are one per table; the decode's projections are too wide for whole-stage codegen, so
        # every task generates their code (all known schemas') again: per task, not per record
        df = df.coalesce(self.decode_tasks or 2 * df.sparkSession.sparkContext.defaultParallelism)
        data, signal_df = df, None
        if self.signal_topics:
            is_signal = F.col("topic").isin(*self.signal_topics)
            data, signal_df = df.filter(~is_signal), df.filter(is_signal)
        signals = read_signals(signal_df, {t.snapshot.notification_topic for t in self.targets})
        start = self._connect_schemas_at_start(looks, batch_id)
        with contextlib.ExitStack() as cached:  # what the batch persists, unpersisted at its end
            args = (data, signal_df, signals, looks, batch_id, started, start, cached)
            # a steady batch: decoded, written and summarised in one job (module .one_pass)
            one = self._one_pass(data, looks, batch_id, start)
            if one is not None:
                return self._process_decoded(one.decoded, one.summarised, *args, one_pass=one)
            limit, wire = self.max_record_bytes, self._wire
            decoded = decode_start(data, max_record_bytes=limit, schemas=start, wire=wire)
            cached.callback(decoded.unpersist)
            # the summary's job computes the JVM's decode, and tells whether it left records
            # for the Python decoder (then those are decoded and the summary taken again)
            summarised = summarise(decoded)
            wire.learn_shapes(summarised[0])
            second = python_pass_needed(summarised[0])
            if second:
                decoded = decode_rest(decoded, max_record_bytes=limit, schemas=start, wire=wire)
                cached.callback(decoded.unpersist)
                summarised = summarise(decoded)
            return self._process_decoded(decoded, summarised, *args, foresees=not second)

    # ------------------------------------------------------------------------------ internals

    def _one_pass(
        self,
        data: DataFrame,
        looks: Mapping[str, TargetLook],
        batch_id: int,
        start: Mapping[str, str],
    ) -> OnePass | None:
        """The batch decoded, its rows written as the last steady batch's shapes foresee and
        its summary, in one job (:mod:`lakehouse.dimension.one_pass`); None when the batch does
        not try (the session turns it off, nothing foreseen, a decoder that learned since, a
        table to create, replay or blocked) or its records were not steady (a miss: the files
        deleted already)."""
        conf = data.sparkSession.conf
        if (
            conf.get(ONE_PASS_CONF, "true") != "true"
            or conf.get(TABLES_TOGETHER_CONF, "true") == "false"
        ):
            return None  # turned off; it writes the tables together or not at all
        foreseen = self._foresee(data, looks, batch_id, start)
        if isinstance(foreseen, str):
            log.debug("batch %d: in two jobs, not one pass: %s", batch_id, foreseen)
            return None
        decoded, plans, rows = foreseen
        txn = (self.pipeline_id, batch_id)
        one = write_one_pass(
            decoded,
            plans,
            txn,
            workers=self.table_parallelism,
            routed=rows,
            kept=self._expressions,
        )
        if one is None:
            self._foresight.missed()
            log.debug("batch %d: not steady; two jobs after its one", batch_id)
        return one

    def _foresee(
        self,
        data: DataFrame,
        looks: Mapping[str, TargetLook],
        batch_id: int,
        start: Mapping[str, str],
    ) -> tuple[DataFrame, dict[int, tuple[TargetPlan, TargetFrames]], int] | str:
        """The batch's decode, each foreseen target's plan (by its index; each with rows) and
        the rows foreseen; or why the batch does not try one pass."""
        shapes = self._foresight.shapes()
        if not shapes:
            return "no steady batch before it to foresee its shapes"
        if any(
            not look.exists or look.replay or open_block(look.properties) is not None
            for look in looks.values()
        ):
            return "a table to create, replayed or blocked"
        decoded = decode_fast(data, self._wire, max_bytes=self.max_record_bytes, start=start)
        if image_columns(decoded.schema) != self._foresight.images:
            return "the decoder learned schemas or shapes since: other row-image columns"
        foreseen = [i for i, t in enumerate(self.targets) if any(routes(t, r) for r in shapes)]
        clock = PlanClock(columns=self._clock)
        decoded = clock.stamp(decoded)
        planned = map_tables(
            data.sparkSession,
            lambda i: self._plan(
                decoded, i, looks[self.targets[i].table_uri], shapes, [], batch_id, clock
            ),
            foreseen,
            workers=self.table_parallelism,
        )
        for i, (_, frames) in zip(foreseen, planned, strict=True):
            if frames.parts is None or frames.parts.shape is None:
                return f"build table {self.targets[i].table_uri} refuses a column set"
        rows = sum(r["n"] for r in shapes if any(routes(self.targets[i], r) for i in foreseen))
        plans = dict(zip(foreseen, planned, strict=True))
        return (decoded, plans, rows) if plans else "no rows foreseen"

    def _connect_schemas_at_start(
        self, looks: Mapping[str, TargetLook], batch_id: int
    ) -> dict[str, str]:
        """The Connect schemas the batch's records without one are read with, by source
        table (:mod:`lakehouse.dimension.connect_schemas`)."""
        texts: dict[str, str] = {}
        for uri, look in looks.items():
            if look.exists:
                start = connect_schemas.recorded(look.properties).start(batch_id)
                texts.update(connect_schemas.load(uri, start))
        return texts

    def _sync_resnapshot_join(self, target: BuildTarget) -> None:
        """Apply the configured ``resnapshot_join`` to an existing table (joins read it)."""
        uri = target.table_uri
        wanted = target.snapshot.resnapshot_join
        if delta.table_exists(uri) and (
            delta.get_properties(uri).get(PROP_SNAPSHOT_RESNAPSHOT_JOIN) != wanted
        ):
            delta.set_properties(
                uri,
                {PROP_SNAPSHOT_RESNAPSHOT_JOIN: wanted},
                metadata={delta.META_REASON: "resnapshot_join from the ingest configuration"},
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
            alert=props.get(PROP_SNAPSHOT_ALERT) or None,
            schema_block=block_text(target.table_uri, open_block(props)),
        )

    def _process_decoded(
        self,
        decoded: DataFrame,
        summarised: Summary,
        data: DataFrame,
        signal_df: DataFrame | None,
        signals: BatchSignals,
        looks: Mapping[str, TargetLook],
        batch_id: int,
        started: float,
        start_schemas: Mapping[str, str],
        cached: contextlib.ExitStack,
        *,
        one_pass: OnePass | None = None,
        foresees: bool = True,
    ) -> BatchReport:
        """Plan each target and write its rows' files (counted as they are written; a job
        each), write the dead letters, then decide and commit each target. ``summarised``:
        :func:`summarise` of ``decoded``; ``data``: the source records ``decoded`` is of;
        ``start_schemas``: the tables' Connect schema texts the batch was decoded from;
        ``cached``: unpersists what this persists, at the batch's end.

        ``one_pass``: rows written already, as foreseen (:mod:`.one_pass`): a table's are
        taken when the plan made here is the one they were written by, else deleted, and the
        table written as the others are (``decoded`` is then decoded again).
        ``foresees``: whether a steady batch's shapes may foresee the next batch's (not when
        the Python decoder taught the JVM new ones)."""
        summary, data_ends, groups = summarised
        end_offsets = merge_offsets(data_ends, signals.end_offsets)
        kinds, errors_by_kind = count_kinds(summary)
        if signals.invalid:
            errors_by_kind["invalid_signal"] = len(signals.invalid)
        changes = [r for r in summary if r["_kind"] == "change"]
        tables_routed = sum(1 for t in self.targets if any(routes(t, r) for r in changes))
        if one_pass is None and tables_routed > 1:
            decoded = _cut_lineage(decoded, cached)  # the tables are planned over its rows
        ddl_events = schema_change_events(decoded) if kinds.get("schema_change") else []
        spark = decoded.sparkSession
        registering = threading.Lock()
        marks = self._wire.marks()

        txn = (self.pipeline_id, batch_id)
        clock = PlanClock(columns=self._clock)
        decoded = clock.stamp(decoded)

        def plan_one(index: int) -> _Planned:
            target = self.targets[index]
            uri = target.table_uri
            look = looks[uri]
            mine = [r for r in changes if routes(target, r)]
            shape = None if one_pass is None else one_pass.shape(index)
            column = _value_column(index)
            if (
                one_pass is not None
                and shape is not None
                and plan_shape(decoded.schema, target, look, mine, value_column=column) == shape
            ):
                plan, frames = one_pass.plans[index]  # planned alike: as foreseen (.one_pass)
            else:
                plan, frames = self._plan(
                    decoded, index, look, changes, ddl_events, batch_id, clock
                )
            # the newest Connect schema of each source table the batch's records brought:
            # its files first (content-addressed: a replay writes none), the property naming
            # them is part of the commit plan
            newest = connect_schemas.newest_in_batch(
                [r for r in mine if plan.accepts_schemas_of(r)],
                start_schemas,
                marks,
            )
            hashes = connect_schemas.store(uri, newest) if newest else {}
            schemas = connect_schemas.decide(
                connect_schemas.recorded(look.properties), batch_id, hashes
            )
            # a table the batch creates is created by the commit of its rows
            create = None if look.exists else table_creation(plan, self.pipeline_id, schemas)
            return _Planned(plan, frames, schemas, create)

        planned = map_tables(
            spark, plan_one, range(len(self.targets)), workers=self.table_parallelism
        )
        # the changes routed to each target: its rows and dead letters
        routed = [sum(r["n"] for r in changes if routes(t, r)) for t in self.targets]
        # the rows' files first, their statistics counted by that write: the commits (their
        # metadata holds them) come after the dead letters, as always. The existing tables'
        # rows are written by one Spark job; a table it cannot take is written on its own
        joint = [
            (i, p.frames.parts)
            for i, p in enumerate(planned)
            if p.frames.parts is not None
            and p.create is None
            and not looks[p.plan.target.table_uri].replay
        ]
        together: dict[int, tuple[delta.StagedAppend, RowStats] | None] = {}
        if one_pass is not None:
            together.update(one_pass.take([p.frames.parts for p in planned], routed))
            joint = [(i, parts) for i, parts in joint if i not in together]
            self._foresight.hit()
            self._wire.learn_shapes(summary)
            failpoint("ingest.after_one_pass", batch_id)
        if joint:
            staged_together = stage_rows_together(
                decoded,
                [(parts, planned[i].plan.target.table_uri) for i, parts in joint],
                txn,
                workers=self.table_parallelism,
                routed=sum(routed[i] for i, _ in joint),
            ).staged
            together.update(zip([i for i, _ in joint], staged_together, strict=True))

        def prepare(i: int) -> Prepared:
            plan, frames, schemas, create = planned[i]
            if frames.parts is None:
                return Prepared(plan, frames, RowStats(), connect_schemas=schemas)
            done = together.get(i)
            if done is not None:
                return Prepared(plan, frames, done[1], done[0], schemas)
            uri = plan.target.table_uri
            rows = frames.rows()
            assert rows is not None
            staged = None
            if not looks[uri].replay:
                staged, stats = stage_rows(rows, uri, txn, create=create)
                if stats is not None:
                    return Prepared(plan, frames, stats, staged, schemas, rows=rows)
            # the target's rows, computed once: for their statistics, then for the commit
            rows = rows.persist()
            with registering:
                cached.callback(rows.unpersist)
            stats = row_stats(rows)
            return Prepared(plan, frames, stats, staged, schemas, rows=rows)

        prepared = map_tables(spark, prepare, range(len(planned)), workers=self.table_parallelism)
        plans = [p.plan for p in prepared]
        # a routed change is either a row or a dead letter (the plan splits them)
        refused = [n - p.stats.count for n, p in zip(routed, prepared, strict=True)]
        dead_count = write_rejects(
            decoded,
            data,
            signal_df,
            signals,
            [p.frames.rejected for p, n in zip(prepared, refused, strict=True) if n],
            kinds.get("error", 0) + sum(refused),
            table=self.dead_letter_table,
            pipeline_id=self.pipeline_id,
            batch_id=batch_id,
        )
        failpoint("ingest.after_dead_letters", batch_id)

        # Data offsets consumed once this batch is committed (signal topics left out).
        offsets = self.planned_offsets(batch_id) if self.planned_offsets is not None else None
        offsets = {t: p for t, p in (offsets or {}).items() if t not in self.signal_topics}
        positions = merge_offsets(
            *(look.signal_state.positions for look in looks.values()), data_ends, offsets
        )
        probe = ask_once(self.offsets_probe)

        def commit(i: int) -> TargetReport:
            look = looks[plans[i].target.table_uri]
            decision = decide_signals(
                plans[i].target, look, groups, signals, positions, probe, batch_id
            )
            return self._commit_target(prepared[i], look, decision, batch_id, end_offsets)

        reports = map_tables(spark, commit, range(len(plans)), workers=self.table_parallelism)
        _log_unrouted_ddl(ddl_events, plans, batch_id)
        self._foresight.saw(
            summary,
            steady=foresees
            and steady(summary)
            and all(p.frames.parts is None or p.frames.parts.shape is not None for p in prepared),
            images=image_columns(decoded.schema),
        )
        return BatchReport(
            batch_id=batch_id,
            records=sum(kinds.values()),
            changes=kinds.get("change", 0),
            tombstones=kinds.get("tombstone", 0),
            transactions=kinds.get("transaction", 0),
            schema_changes=kinds.get("schema_change", 0),
            dead_lettered=dead_count,
            unrouted=kinds.get("change", 0) - sum(routed),
            end_offsets=end_offsets,
            targets=tuple(reports),
            seconds=time.monotonic() - started,
            errors_by_kind=errors_by_kind,
            signal_records=signals.count,
            one_pass=one_pass is not None,
        )

    def _plan(
        self,
        decoded: DataFrame,
        index: int,
        look: TargetLook,
        changes: list[dict[str, Any]],
        ddl_events: list[dict[str, Any]],
        batch_id: int,
        clock: PlanClock,
    ) -> tuple[TargetPlan, TargetFrames]:
        """The batch's rows for target ``index`` (:func:`plan_target`), under its open schema
        block; ``clock``: the batch's, shared by its tables."""
        target = self.targets[index]
        block = open_block(look.properties) if look.exists else None
        if block is not None and block.batch_id >= batch_id:
            block = None  # the batch that met the block (a replay): decide as it did
        return plan_target(
            decoded,
            target,
            look,
            [r for r in changes if routes(target, r)],
            block=block,
            schema_changes=[
                d
                for d in ddl_events
                if target.source_table is None or target.source_table in d["tables"]
            ],
            built=self._expressions,
            value_column=_value_column(index),
            clock=clock,
        )

    def _commit_target(
        self,
        prepared: Prepared,
        look: TargetLook,
        decision: Decision,
        batch_id: int,
        end_offsets: Mapping[str, Mapping[str, int]],
    ) -> TargetReport:
        """Decide the table's commit from its look (:func:`plan_commit`), write it, then set
        the marker when the decision fired and the data is committed. ``prepared``: the
        table's plan, rows of this batch and what they hold, and the rows' files when they are
        written already (their commit is the data commit when the plan commits nothing before
        it but the creation they carry, else they are deleted and the rows written again)."""
        plan, staged = prepared.plan, prepared.staged
        uri = plan.target.table_uri
        # every configured table is written, the first batch creating those nothing was routed
        # to yet: a table still waiting for its snapshot (an empty source table, an idle
        # source) exists, and snapshot-status says what it waits for
        commit = plan_commit(
            look=look,
            plan=plan,
            decision=decision,
            rows=prepared.stats,
            batch_id=batch_id,
            pipeline_id=self.pipeline_id,
            end_offsets=end_offsets,
            now_iso=now_iso(),
            connect_schemas=prepared.connect_schemas,
        )
        if staged is not None and not commit.takes_staged(staged.creates):
            staged.discard()
            staged = None
        if commit.changes_nothing:
            unchanged = delta.WriteResult(version=look.version, skipped=False, rows=0)
            written = _Written(result=unchanged, synthetic_deletes=0, block=None)
        elif staged is not None:
            result = staged.commit(commit.metadata)
            written = _Written(result=result, synthetic_deletes=0, block=commit.block)
        else:
            rows = prepared.rows if prepared.rows is not None else prepared.frames.rows()
            written = self._write_target(plan, commit, rows, batch_id)
        failpoint("ingest.after_data", batch_id)
        result, block = written.result, written.block
        marker_now = self._after_data(uri, decision, result, batch_id)
        if block is not None and not result.skipped:
            log.warning("build table %s: %s", uri, block.describe(commit.blocked_so_far))
        for ddl in plan.schema_changes:
            log.info("build table %s: schema change recorded: %s", uri, ddl["ddl"])
        props = delta.get_properties(uri)
        return TargetReport(
            table_uri=uri,
            version=result.version,
            rows=result.rows,
            rejected=plan.rejected_count,
            max_event_time_ms=commit.max_event_time_ms,
            watermark_ms=commit.watermark_ms,
            snapshot_complete=marker_now or is_complete(props),
            marker_set_now=marker_now,
            skipped=result.skipped,
            unchanged=commit.changes_nothing,
            phase=phase_of(props),
            signal=decision.fire.signal if marker_now and decision.fire else None,
            pending=tuple(f"{p.signal}: {p.detail}" for p in decision.state.pending),
            alert=props.get(PROP_SNAPSHOT_ALERT) or None,
            resnapshot_started=decision.start_resnapshot and not result.skipped,
            synthetic_deletes=written.synthetic_deletes,
            schema_block=None if block is None else block.describe(commit.blocked_so_far),
            schema_blocked_now=commit.starts_block and not result.skipped,
            schema_changes=len(plan.schema_changes),
        )

    def _write_target(
        self,
        plan: TargetPlan,
        commit: CommitPlan,
        rows: DataFrame | None,
        batch_id: int,
    ) -> _Written:
        """Carry out ``commit`` up to the data commit, in its order: create, learn the key,
        start a re-snapshot, record a schema block, end the keys a completing re-snapshot did
        not re-read, append."""
        target = plan.target
        uri = target.table_uri
        if commit.finishes_create and commit.create:
            log.warning(
                "build table %s: finishing its creation, which a crash interrupted (its "
                "properties were not set)",
                uri,
            )
            delta.set_properties(
                uri, commit.create, metadata={delta.META_REASON: "creation finished"}
            )
        elif commit.create is not None:
            schema = rows.schema if rows is not None else lineage_schema()
            delta.create_table(uri, schema, properties=commit.create)
            failpoint("ingest.after_create", batch_id)
        if commit.learn_key is not None:
            delta.set_properties(uri, {PROP_PRIMARY_KEY: commit.learn_key})
        if commit.connect_schemas is not None:
            delta.set_properties(
                uri,
                {PROP_CONNECT_SCHEMAS: commit.connect_schemas},
                metadata={delta.META_REASON: "the records' Connect schema changed"},
            )
            failpoint("ingest.after_connect_schemas", batch_id)
        if commit.start_resnapshot:
            start_resnapshot(uri, batch_id=batch_id, join=target.snapshot.resnapshot_join)
            failpoint("ingest.after_resnapshot_start", batch_id)
            log.warning(
                "build table %s: snapshot rows arrived after the marker; re-snapshot "
                "started, joins read version %s until it completes",
                uri,
                delta.get_properties(uri).get(PROP_SNAPSHOT_LAST_COMPLETE),
            )
        block = commit.block
        if commit.record_block and block is not None:
            block = set_block(uri, block)
            failpoint("ingest.after_block", batch_id)
            log.error("build table %s: %s", uri, block.describe())
        to_write = rows if rows is not None else empty_like(uri)
        metadata = dict(commit.metadata)
        synthetic_count = 0
        if commit.ghost_deletes:
            # reads the version the re-snapshot pinned (start_resnapshot may have just set it)
            props = delta.get_properties(uri)
            ghosts = synthetic_deletes(uri, plan.key_columns, props, rows)
            if ghosts is not None:
                deletes, live = ghosts
                deletes = deletes.persist()
                synthetic_count = deletes.count()
                self._check_ended_share(target, props, synthetic_count, live, batch_id)
                if synthetic_count:
                    to_write = to_write.unionByName(deletes, allowMissingColumns=True)
                    metadata[META_SYNTHETIC_DELETES] = synthetic_count
        result = delta.append(
            to_write,
            uri,
            txn=(self.pipeline_id, batch_id),
            metadata=metadata,
            schema_mode="widen",
            max_files=MAX_FILES,
        )
        return _Written(result=result, synthetic_deletes=synthetic_count, block=block)

    def _after_data(
        self, uri: str, decision: Decision, result: delta.WriteResult, batch_id: int
    ) -> bool:
        """After the data commit: set the marker the decision fired (a commit of its own), or
        record a notification or alert; a replay heals what its first attempt left undone.
        Returns whether the marker was set now."""
        state = decision.state
        marker_now = False
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
        return marker_now

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
            f"{props.get(PROP_SNAPSHOT_LAST_COMPLETE)}. If the source really lost these keys, "
            f"set ingest.tables[].resnapshot_max_ended = 1 (or resnapshot_deletes = false for a "
            "filtered re-snapshot) and run the ingest again",
            table_uri=uri,
        )


def _value_column(index: int) -> str:
    """The column of target ``index``'s row value in its expressions: distinct per table, as
    the batch's tables' rows are made by one projection."""
    return f"_v{index}"


def _cut_lineage(decoded: DataFrame, cached: contextlib.ExitStack) -> DataFrame:
    """``decoded`` (persisted and computed) as a frame of its own rows, without the decode's
    plan behind it; the persisted copy is released, the new one at the batch's end.

    The decode's plan holds every known Connect schema's parse and conversions. Each table's
    plan and write over the persisted frame carries it all the same: Spark's analysis walks
    it for every DataFrame operation, and every task of every table's write serialises it
    (the cached rows' lineage). A batch writing N tables of one connector of N schemas paid
    that N times over; a local checkpoint (one job, reading the cached rows) drops it."""
    cut = decoded.localCheckpoint(eager=True)
    decoded.unpersist()
    # the rows the checkpoint persisted, released as RDD.unpersist does, without its warning
    # that a local checkpoint's rows cannot be computed again once released
    rows = cut._jdf.queryExecution().analyzed().rdd().id()
    context = cut.sparkSession.sparkContext._jsc.sc()
    cached.callback(lambda: context.unpersistRDD(rows, False))
    return cut


def _log_unrouted_ddl(
    ddl_events: Sequence[Mapping[str, Any]], plans: Sequence[TargetPlan], batch_id: int
) -> None:
    """Log the schema changes no build table records (no configured table with rows yet)."""
    routed = {
        id(d) for p in plans for d in p.schema_changes if delta.table_exists(p.target.table_uri)
    }
    for d in ddl_events:
        if id(d) not in routed:
            log.info(
                "batch %d: schema change of %s not recorded in a build table (no configured "
                "table with rows for it yet): %s",
                batch_id,
                ", ".join(d["tables"]) or "an unknown table",
                d["ddl"],
            )
