"""What one batch commits to one build table, decided in pure code.

The sink (:mod:`lakehouse.dimension.sink`) reads a build table once per batch
(:class:`~lakehouse.dimension.look.TargetLook`: its properties and the newest values its data
commits recorded), counts
the batch's rows for it (:class:`RowStats`), takes the snapshot signals' :class:`Decision`,
and asks :func:`plan_commit` what to write. No Spark, no I/O here: plain values in, a
:class:`CommitPlan` out, which the sink carries out in the order the exactly-once argument
needs (create, learn the key, start a re-snapshot, record a schema block, append the data,
then set the marker).

The build watermark of a data commit is the largest event time committed so far less the
allowed out-of-orderness, less one (``ts <= watermark`` is complete); while a schema block is
open it stays at the block's watermark, capped below the first incompatible record's time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from lakehouse.dimension.layout import (
    META_BATCH_ID,
    META_END_OFFSETS,
    META_MAX_EVENT_TIME,
    META_PIPELINE,
    META_ROWS,
    META_SCHEMA_BLOCKED,
    META_SCHEMA_BLOCKED_TOTAL,
    META_SCHEMA_CHANGES,
    META_SNAPSHOT_ENDED,
    META_SNAPSHOT_STATE,
    META_WATERMARK,
    PROP_CONNECT_SCHEMAS,
    PROP_EVENT_TIME,
    PROP_PRIMARY_KEY,
    PROP_SNAPSHOT_COMPLETE,
    PROP_SNAPSHOT_RESNAPSHOT_JOIN,
    PROP_SNAPSHOT_STATE,
    PROP_SOURCE_TABLE,
)
from lakehouse.dimension.look import TargetLook
from lakehouse.dimension.marker import phase_of
from lakehouse.dimension.plan import MAX_DDL_PER_COMMIT
from lakehouse.dimension.schema_block import SchemaBlock, open_block
from lakehouse.dimension.signals import Decision
from lakehouse.table_kinds import TableKind, creation_properties
from lakehouse.time import WATERMARK_MIN

if TYPE_CHECKING:
    from lakehouse.dimension.plan import BlockEvidence, TargetPlan


@dataclass(frozen=True, slots=True, kw_only=True)
class RowStats:
    """The batch's rows for one table: how many, and their largest event time (ms)."""

    count: int = 0
    max_event_time_ms: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitPlan:
    """What to write to one build table for one batch, in this order.

    Attributes:
        create: create the table with these properties; when it exists, set them (its
            creation was cut by a crash between the empty commit and the properties commit,
            see :func:`lakehouse.delta.create_table`); None: nothing to create.
        finishes_create: the table exists and ``create`` only sets its missing properties.
        connect_schemas: set ``lakehouse.connect.schemas`` to this before the data commit
            (the newest Connect schemas changed; a new table gets it with its creation);
            None: unchanged.
        learn_key: set ``lakehouse.primaryKey`` to this (a table a signal created before its
            first row); None: nothing to set.
        start_resnapshot: clear the marker before the data commit (a re-snapshot starts).
        block: the schema block in force for the data commit, if any.
        starts_block: ``block`` starts in this batch (its records count from zero).
        record_block: write ``block`` now, before the data commit (it starts in this batch
            and the table does not record it yet).
        blocked_so_far: records dead-lettered under ``block`` including this batch's.
        ghost_deletes: this commit completes a re-snapshot: end the keys it did not re-read.
        max_event_time_ms: the largest event time committed after this batch.
        watermark_ms: the build watermark after this batch.
        metadata: the data commit's metadata (the synthetic deletes' count is added when
            ``ghost_deletes`` finds some).
        changes_nothing: the batch changes nothing in the table (no row, no signal that
            moves its snapshot bookkeeping, the same watermark, nothing else above): no
            commit at all. A batch of Debezium heartbeats alone is one; committing it would
            add an empty version per trigger, and a join could never see the table idle.
            A replay of such a batch decides the same, so exactly-once holds.
    """

    create: Mapping[str, str] | None
    learn_key: str | None
    start_resnapshot: bool
    block: SchemaBlock | None
    starts_block: bool
    record_block: bool
    blocked_so_far: int
    ghost_deletes: bool
    max_event_time_ms: int | None
    watermark_ms: int
    metadata: Mapping[str, Any]
    changes_nothing: bool = False
    finishes_create: bool = False
    connect_schemas: str | None = None

    @property
    def data_only(self) -> bool:
        """The plan commits nothing before its data commit, which also writes only the
        batch's rows: the table's version at the batch's look is the one the data commit
        follows, so files written on that snapshot before the plan was made can be it.

        >>> plan = CommitPlan(create=None, learn_key=None, start_resnapshot=False, block=None,
        ...     starts_block=False, record_block=False, blocked_so_far=0, ghost_deletes=False,
        ...     max_event_time_ms=5, watermark_ms=0, metadata={})
        >>> plan.data_only
        True
        >>> from dataclasses import replace
        >>> replace(plan, learn_key="id").data_only, replace(plan, ghost_deletes=True).data_only
        (False, False)
        """
        return (
            self.create is None
            and self.learn_key is None
            and self.connect_schemas is None
            and not self.start_resnapshot
            and not self.record_block
            and not self.ghost_deletes
            and not self.changes_nothing
        )

    def takes_staged(self, creates: Mapping[str, str] | None) -> bool:
        """Whether rows staged on the batch's look at the table can be the plan's data
        commit: on an existing table (``creates`` None) when the plan is :attr:`data_only`;
        on a table the staged commit creates with properties ``creates``, when the plan
        creates it with those and commits nothing else before its data.

        >>> plan = CommitPlan(create={"k": "v"}, learn_key=None, start_resnapshot=False,
        ...     block=None, starts_block=False, record_block=False, blocked_so_far=0,
        ...     ghost_deletes=False, max_event_time_ms=5, watermark_ms=0, metadata={})
        >>> plan.takes_staged({"k": "v"}), plan.takes_staged({"k": "w"}), plan.takes_staged(None)
        (True, False, False)
        >>> from dataclasses import replace
        >>> replace(plan, finishes_create=True).takes_staged({"k": "v"})
        False
        """
        if creates is None:
            return self.data_only
        return (
            self.create == creates
            and not self.finishes_create
            and replace(self, create=None).data_only
        )


def same_bookkeeping(recorded: str | None, decided: str) -> bool:
    """Whether a batch's snapshot bookkeeping (JSON) records nothing the table's last data
    commit did not: the same text, or, on a complete table, the same but for the consumed
    positions. Those only grow, and a complete table's decisions never read them (each
    batch's are the stream's planned offsets merged with every table's record), so a table
    the batch did not touch is not written just to move them: it costs no commit, and a
    row-time join sees it as quiet (its idle timeout can pass).

    >>> done = '{"phase": "complete", "positions": {"cdc": {"0": 5}}}'
    >>> same_bookkeeping(done, '{"phase": "complete", "positions": {"cdc": {"0": 9}}}')
    True
    >>> same_bookkeeping(done.replace("complete", "loading"),
    ...     '{"phase": "loading", "positions": {"cdc": {"0": 9}}}')
    False
    >>> same_bookkeeping(None, done)
    False
    """
    if recorded is None:
        return False
    if recorded == decided:
        return True
    try:
        before, after = json.loads(recorded), json.loads(decided)
    except ValueError:
        return False
    if not isinstance(before, dict) or not isinstance(after, dict):
        return False
    if before.get("phase") != "complete" or after.get("phase") != "complete":
        return False
    before.pop("positions", None)
    after.pop("positions", None)
    return bool(before == after)


def build_watermark(max_event_time_ms: int | None, out_of_orderness_ms: int) -> int:
    """The build watermark after committing up to ``max_event_time_ms``: every version with
    ``_event_time <= watermark`` is in the table.

    >>> build_watermark(None, 0) == WATERMARK_MIN
    True
    >>> build_watermark(10_000, 2_000)
    7999
    """
    if max_event_time_ms is None:
        return WATERMARK_MIN
    return max(WATERMARK_MIN, max_event_time_ms - out_of_orderness_ms - 1)


def table_creation(
    plan: TargetPlan, pipeline_id: str, connect_schemas: str | None = None
) -> dict[str, str]:
    """The properties a build table gets when batch ``plan`` creates it (:func:`plan_commit`
    decides whether it does); ``connect_schemas``: the batch's value of
    ``lakehouse.connect.schemas``, set with the creation (None: the batch sets none)."""
    target = plan.target
    creation = {
        PROP_PRIMARY_KEY: ",".join(plan.key_columns),
        PROP_EVENT_TIME: target.event_time_column or "source.ts_ms",
        PROP_SOURCE_TABLE: target.source_table or "*",
        PROP_SNAPSHOT_COMPLETE: "false",
        PROP_SNAPSHOT_STATE: "loading",
        PROP_SNAPSHOT_RESNAPSHOT_JOIN: target.snapshot.resnapshot_join,
        **creation_properties(TableKind.BUILD, pipeline_id),
    }
    if connect_schemas is not None:
        creation[PROP_CONNECT_SCHEMAS] = connect_schemas
    return creation


def plan_commit(
    *,
    look: TargetLook,
    plan: TargetPlan,
    decision: Decision,
    rows: RowStats,
    batch_id: int,
    pipeline_id: str,
    end_offsets: Mapping[str, Mapping[str, int]],
    now_iso: str,
    connect_schemas: str | None = None,
) -> CommitPlan:
    """Decide one table's commit of batch ``batch_id`` (see :class:`CommitPlan`).
    ``connect_schemas``: the new value of ``lakehouse.connect.schemas``, when the batch
    changes it (:func:`lakehouse.dimension.connect_schemas.decide`).

    Reads only the plain fields of ``plan`` (key columns, schema evidence, the active block,
    counts, schema changes), never its DataFrames. A replay (``look.replay``) decides the
    same data commit as the first attempt and records nothing before it again.
    """
    target = plan.target
    props = look.properties
    key = ",".join(plan.key_columns)
    creation = table_creation(plan, pipeline_id, None if look.exists else connect_schemas)
    if not look.exists:
        connect_schemas = None  # set with the creation
    create = None
    if not look.exists:
        create = props = creation
    elif PROP_SNAPSHOT_COMPLETE not in props:
        # every build table gets the marker's key when it is created: without it, a crash
        # fell between the creation's empty commit and its properties; finish the creation
        create = {k: v for k, v in creation.items() if k not in props}
        props = {**props, **create}
    # a table a signal created before its first row learns its key from that row
    learn_key = key if key and not props.get(PROP_PRIMARY_KEY) and not look.replay else None

    known = [v for v in (look.max_event_time_ms, rows.max_event_time_ms) if v is not None]
    max_ts = max(known, default=None)
    watermark = build_watermark(max_ts, target.out_of_orderness_ms)
    block, starts_now, recorded = schema_block(
        look=look,
        properties=props,
        evidence=plan.evidence,
        active_block=plan.active_block,
        batch_id=batch_id,
        pipeline_id=pipeline_id,
        watermark_ms=watermark,
        now_iso=now_iso,
    )
    if block is not None:
        # the dimension misses a change from the block on: hold the watermark there
        watermark = block.watermark_ms
    ends_resnapshot = decision.fire is not None and (
        phase_of(props) == "resnapshot" or decision.start_resnapshot
    )

    metadata: dict[str, Any] = {
        META_BATCH_ID: batch_id,
        META_PIPELINE: pipeline_id,
        META_WATERMARK: watermark,
        META_MAX_EVENT_TIME: max_ts if max_ts is not None else "",
        META_END_OFFSETS: {t: dict(p) for t, p in end_offsets.items()},
        META_ROWS: rows.count,
        META_SNAPSHOT_STATE: decision.state.to_json(),
    }
    if decision.fire is not None:
        metadata[META_SNAPSHOT_ENDED] = decision.fire.signal
    blocked_so_far = 0
    if block is not None:
        blocked_so_far = plan.blocked_count + (0 if starts_now else look.blocked_total)
        metadata[META_SCHEMA_BLOCKED] = plan.blocked_count
        metadata[META_SCHEMA_BLOCKED_TOTAL] = blocked_so_far
    if plan.schema_changes:
        metadata[META_SCHEMA_CHANGES] = plan.schema_changes[:MAX_DDL_PER_COMMIT]
    state = metadata[META_SNAPSHOT_STATE]
    changes_nothing = (
        look.exists
        and not look.replay
        and create is None
        and connect_schemas is None
        and rows.count == 0
        and plan.rejected_count == 0
        and not plan.schema_changes
        and learn_key is None
        and block is None
        and decision.fire is None
        and not decision.start_resnapshot
        and same_bookkeeping(look.snapshot_state, state)
        and max_ts == look.max_event_time_ms
        and watermark == look.watermark_ms
    )
    return CommitPlan(
        changes_nothing=changes_nothing,
        create=create,
        finishes_create=look.exists and create is not None,
        connect_schemas=connect_schemas,
        learn_key=learn_key,
        start_resnapshot=decision.start_resnapshot and not look.replay,
        block=block,
        starts_block=starts_now,
        record_block=starts_now and not recorded and not look.replay,
        blocked_so_far=blocked_so_far,
        ghost_deletes=ends_resnapshot and target.snapshot.resnapshot_deletes and not look.replay,
        max_event_time_ms=max_ts,
        watermark_ms=watermark,
        metadata=metadata,
    )


def schema_block(
    *,
    look: TargetLook,
    properties: Mapping[str, str],
    evidence: BlockEvidence | None,
    active_block: SchemaBlock | None,
    batch_id: int,
    pipeline_id: str,
    watermark_ms: int,
    now_iso: str,
) -> tuple[SchemaBlock | None, bool, bool]:
    """The schema block in force for this batch's data commit, whether it starts in this
    batch, and whether the table records it already (see
    :mod:`lakehouse.dimension.schema_block`).

    ``active_block`` is a block an earlier batch started; ``evidence`` the first
    incompatible record of this batch. A block starts in the batch that meets that record,
    with the watermark capped below the record's event time and never lower than the
    watermark already committed. A replay of that batch (or a retry after a crash between
    the block's commit and the data commit) finds its own block in the table and reuses it.
    ``since_version`` is the version the block's own commit gets if nothing commits before
    it; :func:`~lakehouse.dimension.schema_block.set_block` records the real one.

    >>> from lakehouse.dimension.plan import BlockEvidence
    >>> ev = BlockEvidence(column="rate", table_type="decimal(10,4)", record_type="string",
    ...     reason="...", first_offset={"topic": "t", "partition": 0, "offset": 9},
    ...     first_event_time_ms=5_000)
    >>> look = TargetLook(exists=True, version=3, properties={}, replay=False, watermark_ms=1_000)
    >>> block, starts, recorded = schema_block(look=look, properties={}, evidence=ev,
    ...     active_block=None, batch_id=4, pipeline_id="p", watermark_ms=8_999,
    ...     now_iso="2026-01-01T00:00:00.000+00:00")
    >>> starts, recorded, block.watermark_ms, block.since_version   # capped below 5_000
    (True, False, 4999, 4)
    >>> again = schema_block(look=look, properties={"lakehouse.schema.block": block.to_json()},
    ...     evidence=ev, active_block=None, batch_id=4, pipeline_id="p", watermark_ms=8_999,
    ...     now_iso="later")
    >>> again == (block, True, True)   # the retry reuses the recorded block
    True
    """
    if active_block is not None:
        return active_block, False, True
    if evidence is None:
        return None, False, False
    existing = open_block(properties)
    if existing is not None and existing.batch_id == batch_id:
        return existing, True, True
    cap = watermark_ms if evidence.first_event_time_ms is None else evidence.first_event_time_ms - 1
    block = SchemaBlock(
        column=evidence.column,
        table_type=evidence.table_type,
        record_type=evidence.record_type,
        since_version=look.version + 1,
        batch_id=batch_id,
        pipeline=pipeline_id,
        first_offset=evidence.first_offset,
        first_event_time_ms=evidence.first_event_time_ms,
        watermark_ms=max(look.watermark_ms, min(watermark_ms, cap)),
        blocked_at=now_iso,
        reason=evidence.reason,
    )
    return block, True, False
