"""Names of the join's columns and commit metadata keys: declared here once, imported by the
join, the quality report, compaction, status and the soak verifier.

Tables a join writes (ARCHITECTURE.md, "Output table"):

* **output**: the probe columns, the build columns (with ``build_prefix``), and the lineage
  columns :data:`OUTPUT_LINEAGE`;
* **pending**: probe rows waiting for the watermark, with :data:`PENDING_LINEAGE`;
* **dead letters**: the shared layout of :mod:`lakehouse.dead_letter`.

Every commit a join makes carries :data:`META_BATCH_ID`, :data:`META_PIPELINE`, the batch's
plan (:data:`META_PLAN`) and the state after the batch (:data:`META_STATE`), so that the
newest commit of any of its tables tells where the join stands and a replayed batch finds the
decisions of its first attempt (:mod:`lakehouse.join.state`).
"""

from __future__ import annotations

from typing import Final

# Lineage columns of every output row.
MATCHED: Final = "_matched"
BUILD_VERSION: Final = "_build_version"
BUILD_EVENT_TIME: Final = "_build_event_time"
WATERMARK: Final = "_watermark"
RELEASED_AT: Final = "_released_at"
JOIN_MODE: Final = "_join_mode"
BATCH_ID: Final = "_batch_id"
#: What released the row: ``watermark``, ``processing_time``, ``end_of_input``, ``expiry``
#: or ``late`` (:func:`lakehouse.join.release.released_by`). NULL in rows written before it
#: existed.
RELEASED_BY: Final = "_released_by"

# Columns of pending rows, kept in the output too.
ARRIVED_AT: Final = "_arrived_at"
ARRIVAL_BATCH: Final = "_arrival_batch"
PROBE_TOPIC: Final = "_probe_topic"
PROBE_PARTITION: Final = "_probe_partition"
PROBE_OFFSET: Final = "_probe_offset"
#: Pending rows only: event time in epoch ms, the raw record and its source timestamp.
TIME_MS: Final = "_t_ms"
RAW_KEY: Final = "_raw_key"
RAW_VALUE: Final = "_raw_value"
SOURCE_TS: Final = "_source_ts"

#: The source position of a probe row: unique, so it orders rows totally.
POSITION: Final = (ARRIVAL_BATCH, PROBE_TOPIC, PROBE_PARTITION, PROBE_OFFSET)
PENDING_LINEAGE: Final = (
    PROBE_TOPIC,
    PROBE_PARTITION,
    PROBE_OFFSET,
    TIME_MS,
    RAW_KEY,
    RAW_VALUE,
    SOURCE_TS,
    ARRIVED_AT,
    ARRIVAL_BATCH,
)
OUTPUT_LINEAGE: Final = (
    MATCHED,
    BUILD_VERSION,
    BUILD_EVENT_TIME,
    WATERMARK,
    RELEASED_AT,
    JOIN_MODE,
    BATCH_ID,
    RELEASED_BY,
)

# Commit metadata (``userMetadata``) of the join's commits.
META_BATCH_ID: Final = "lakehouse.batchId"
META_PIPELINE: Final = "lakehouse.pipeline"
#: JSON of the batch's :class:`~lakehouse.join.state.ReleasePlan`.
META_PLAN: Final = "lakehouse.plan"
#: JSON of the :class:`~lakehouse.join.state.JoinState` after the batch.
META_STATE: Final = "lakehouse.state"
#: Counts of the batch, when known before its writes (all but the processing-time fast path,
#: which counts while it writes; its output commit's ``numOutputRows`` then says it).
META_ARRIVED: Final = "lakehouse.arrived"
META_RELEASED: Final = "lakehouse.released"
META_MATCHED: Final = "lakehouse.matched"
META_PENDING_ROWS: Final = "lakehouse.pendingRows"
META_DEAD_LETTERED: Final = "lakehouse.deadLettered"
#: Rows the batch evicted by the pending bound, and the alert text.
META_EVICTED: Final = "lakehouse.evicted"
META_PENDING_BOUND_ALERT: Final = "lakehouse.pendingBoundAlert"

#: ``_error_kind`` of dead letters the join writes besides parse errors.
EVICTED_AGE: Final = "pending_bound_age"
EVICTED_ROWS: Final = "pending_bound_rows"
LATE: Final = "late"
EXPIRED: Final = "expired"

#: Topic of the tick rows the runner mixes into the probe stream under a processing-time
#: trigger, so that a batch runs every interval even without probe input: build-side progress
#: (the snapshot marker, the build watermark, idleness, TTLs) then releases waiting rows
#: without waiting for the next probe row. The operator drops them before anything else.
TICK_TOPIC: Final = "__lakehouse_tick__"
