"""Names of the build table's columns, properties and commit metadata keys.

The build table is an append-only log of row versions (see ARCHITECTURE.md, "Build table"):
one row per change, never updated in place. A version of key ``k`` starts at its
``_event_time`` and ends where the next version of ``k`` starts (ordered by
``(_event_time, _seq)``); a delete ends it with no successor; a truncate (``_op = 't'``, all
key columns NULL) ends every version open at its time.
"""

from __future__ import annotations

from typing import Final

from lakehouse import table_kinds

# Lineage and ordering columns, added after the dimension's own columns.
OP: Final = "_op"
EVENT_TIME: Final = "_event_time"
SEQ: Final = "_seq"
SNAPSHOT: Final = "_snapshot"
INGESTED_AT: Final = "_ingested_at"
KAFKA_TOPIC: Final = "_kafka_topic"
KAFKA_PARTITION: Final = "_kafka_partition"
KAFKA_OFFSET: Final = "_kafka_offset"

LINEAGE_COLUMNS: Final = (
    OP,
    EVENT_TIME,
    SEQ,
    SNAPSHOT,
    INGESTED_AT,
    KAFKA_TOPIC,
    KAFKA_PARTITION,
    KAFKA_OFFSET,
)
#: What tells two rows of the version log apart, with the key columns: its rows are appended
#: once per source record (and once per synthetic delete), never updated.
ROW_IDENTITY: Final = (OP, EVENT_TIME, SEQ, KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET)

# Table properties (Delta table configuration).
PROP_SNAPSHOT_COMPLETE: Final = "lakehouse.snapshot.complete"
PROP_SNAPSHOT_COMPLETED_AT: Final = "lakehouse.snapshot.completedAt"
PROP_SNAPSHOT_COMPLETED_VERSION: Final = "lakehouse.snapshot.completedVersion"
PROP_SNAPSHOT_SIGNAL: Final = "lakehouse.snapshot.signal"
#: The data version of the table's first completion (never changes afterwards).
PROP_SNAPSHOT_FIRST_COMPLETED_VERSION: Final = "lakehouse.snapshot.firstCompletedVersion"
#: ``loading`` | ``complete`` | ``resnapshot`` (absent on older tables: derive from ``complete``).
PROP_SNAPSHOT_STATE: Final = "lakehouse.snapshot.state"
#: Free text saying what exactly set the marker (notification type and collection, ...).
PROP_SNAPSHOT_SIGNAL_DETAIL: Final = "lakehouse.snapshot.signalDetail"
#: JSON ``{topic: {partition: next_offset}}``: the data offsets the marker's signal covered.
PROP_SNAPSHOT_COVERED_OFFSETS: Final = "lakehouse.snapshot.coveredOffsets"
#: The operator's reason (``lakehouse snapshot-complete --reason``).
PROP_SNAPSHOT_REASON: Final = "lakehouse.snapshot.reason"
#: During a re-snapshot: the version that started it, and the last complete version before.
PROP_SNAPSHOT_RESNAPSHOT_FROM: Final = "lakehouse.snapshot.resnapshotFromVersion"
PROP_SNAPSHOT_LAST_COMPLETE: Final = "lakehouse.snapshot.lastCompleteVersion"
PROP_SNAPSHOT_RESNAPSHOT_AT: Final = "lakehouse.snapshot.resnapshotStartedAt"
#: How joins read the table during a re-snapshot: ``last-complete`` (default) or ``latest``.
PROP_SNAPSHOT_RESNAPSHOT_JOIN: Final = "lakehouse.snapshot.resnapshotJoin"
#: JSON of the last Debezium "Initial Snapshot" notification that concerned the table.
PROP_SNAPSHOT_LAST_NOTIFICATION: Final = "lakehouse.snapshot.lastNotification"
#: Non-empty while a snapshot problem is open (ABORTED, SKIPPED, a failed table scan).
PROP_SNAPSHOT_ALERT: Final = "lakehouse.snapshot.alert"
PROP_PRIMARY_KEY: Final = "lakehouse.primaryKey"
PROP_EVENT_TIME: Final = "lakehouse.eventTime"
PROP_SOURCE_TABLE: Final = "lakehouse.sourceTable"
PROP_TABLE_KIND: Final = table_kinds.PROP_TABLE_KIND
#: The newest Connect schema per source table, by hash (:mod:`lakehouse.dimension.
#: connect_schemas`): a record without one is read with its table's.
PROP_CONNECT_SCHEMAS: Final = "lakehouse.connect.schemas"
#: JSON of the open schema block (:mod:`lakehouse.dimension.schema_block`); empty when none.
PROP_SCHEMA_BLOCK: Final = "lakehouse.schema.block"
#: JSON of the last resolved block, with the operator's reason and what the replay did.
PROP_SCHEMA_LAST_RESOLVED: Final = "lakehouse.schema.lastResolved"

# Commit metadata keys of the build sink's commits.
META_BATCH_ID: Final = "lakehouse.batchId"
META_WATERMARK: Final = "lakehouse.watermark"
META_MAX_EVENT_TIME: Final = "lakehouse.maxEventTime"
META_END_OFFSETS: Final = "lakehouse.endOffsets"
META_ROWS: Final = "lakehouse.rows"
META_SNAPSHOT_ENDED: Final = "lakehouse.snapshotEnded"
META_PIPELINE: Final = "lakehouse.pipeline"
#: What a marker commit is about: the signal that set it, ``resnapshot``, ``notification``.
META_SNAPSHOT_SIGNAL: Final = "lakehouse.snapshotSignal"
#: JSON of the snapshot-signal bookkeeping after the batch (see :mod:`.signals`).
META_SNAPSHOT_STATE: Final = "lakehouse.snapshotState"
#: Rows the batch added as synthetic deletes at the end of a re-snapshot.
META_SYNTHETIC_DELETES: Final = "lakehouse.syntheticDeletes"

#: Records of this table the batch dead-lettered because of the schema block
#: (``schema_mismatch`` and ``schema_blocked``), and the running total since the block.
META_SCHEMA_BLOCKED: Final = "lakehouse.schemaBlocked"
META_SCHEMA_BLOCKED_TOTAL: Final = "lakehouse.schemaBlockedTotal"
#: JSON list of the Debezium schema-change (DDL) events of this table the batch read.
META_SCHEMA_CHANGES: Final = "lakehouse.schemaChanges"
#: JSON of what ``lakehouse schema-resolve`` did (on its replay commit).
META_SCHEMA_RESOLVED: Final = "lakehouse.schemaResolved"

#: ``_kafka_topic`` of the synthetic deletes that end a re-snapshot (no source record).
SYNTHETIC_DELETE_TOPIC: Final = "__lakehouse.resnapshot__"

#: Snapshot phases (``source.snapshot``) that belong to the initial snapshot.
SNAPSHOT_PHASES: Final = frozenset(
    {"true", "first", "first_in_data_collection", "last_in_data_collection", "last"}
)
