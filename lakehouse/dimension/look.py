"""The one look a batch takes at each build table, before it decides anything.

:func:`look_at` reads the table's log once (inside the batch's
:func:`lakehouse.delta.batch_scope`) and returns a :class:`TargetLook` of plain values: whether
the table exists, its version, properties and columns, whether it records this batch already
(a replay), and the newest values its data commits recorded. Everything the ingest decides for
the table (:func:`lakehouse.dimension.plan.plan_columns`, the snapshot signals,
:func:`lakehouse.dimension.commit.plan_commit`) is decided from this look, in pure code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakehouse import delta
from lakehouse.dimension.layout import (
    META_MAX_EVENT_TIME,
    META_SCHEMA_BLOCKED_TOTAL,
    META_SNAPSHOT_STATE,
    META_WATERMARK,
    PROP_SCHEMA_BLOCK,
)
from lakehouse.dimension.signals import SignalState
from lakehouse.time import WATERMARK_MIN

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType


#: How many recent commits of a build table are read for the values its data commits record.
HISTORY_LIMIT = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetLook:
    """What a batch reads of one build table before it commits to it.

    Attributes:
        exists: the table exists.
        version: its latest version (-1 when it does not exist).
        properties: its table properties (empty when it does not exist).
        replay: the table records this batch's transaction already (a replayed batch: the
            data commit will be skipped, and nothing is recorded twice).
        max_event_time_ms: the largest event time its data commits recorded, if any.
        watermark_ms: the build watermark its last data commit recorded.
        blocked_total: records dead-lettered under the open schema block so far.
        snapshot_state: the snapshot bookkeeping its last data commit recorded (JSON).
        columns: its columns' types, in table order (empty when it does not exist).
    """

    exists: bool
    version: int = -1
    properties: Mapping[str, str]
    replay: bool
    max_event_time_ms: int | None = None
    watermark_ms: int = WATERMARK_MIN
    blocked_total: int = 0
    snapshot_state: str | None = None
    columns: Mapping[str, DataType] = field(default_factory=dict)

    @classmethod
    def from_history(
        cls,
        *,
        version: int,
        properties: Mapping[str, str],
        replay: bool,
        metadata: Iterable[Mapping[str, str]],
        columns: Mapping[str, DataType] | None = None,
    ) -> TargetLook:
        """The look at an existing table from its properties and its recent commits'
        metadata, newest first: the newest non-empty value of each key counts. ``metadata``
        is consumed only until every value wanted is found (the blocked-record count only
        while a schema block is open), so an iterator over a log reads few commits.

        >>> look = TargetLook.from_history(version=7, properties={}, replay=False, metadata=[
        ...     {"lakehouse.reason": "marker"},
        ...     {"lakehouse.watermark": "90", "lakehouse.maxEventTime": "100"},
        ...     {"lakehouse.watermark": "40", "lakehouse.maxEventTime": "50"}])
        >>> look.max_event_time_ms, look.watermark_ms, look.blocked_total
        (100, 90, 0)
        """
        wanted = [META_MAX_EVENT_TIME, META_WATERMARK, META_SNAPSHOT_STATE]
        if properties.get(PROP_SCHEMA_BLOCK):
            wanted.append(META_SCHEMA_BLOCKED_TOTAL)
        found: dict[str, str] = {}
        for entry in metadata:
            for key in wanted:
                if key not in found and entry.get(key) not in (None, ""):
                    found[key] = entry[key]
            if len(found) == len(wanted):
                break
        max_ts = found.get(META_MAX_EVENT_TIME)
        watermark = found.get(META_WATERMARK)
        return cls(
            exists=True,
            version=version,
            properties=dict(properties),
            replay=replay,
            max_event_time_ms=int(max_ts) if max_ts is not None else None,
            watermark_ms=int(watermark) if watermark is not None else WATERMARK_MIN,
            blocked_total=int(found.get(META_SCHEMA_BLOCKED_TOTAL) or 0),
            snapshot_state=found.get(META_SNAPSHOT_STATE),
            columns=dict(columns or {}),
        )

    @property
    def signal_state(self) -> SignalState:
        """The snapshot bookkeeping its last data commit recorded (the initial state when
        none did)."""
        return SignalState.from_json(self.snapshot_state)

    @property
    def prior_signal_state(self) -> SignalState:
        """The bookkeeping the batch's signals start from: the recorded one, except in a
        replay, where the newest record is the batch's own (the initial state then; the
        replay's data commit is skipped, so nothing it decides is written twice)."""
        if self.replay and self.snapshot_state is not None:
            return SignalState()
        return self.signal_state


#: The look at a table that does not exist yet.
NO_TABLE = TargetLook(exists=False, properties={}, replay=False)


def look_at(
    uri: str, *, app_id: str, batch_id: int, spark: SparkSession | None = None
) -> TargetLook:
    """One look at a build table: its properties, columns and what its recent commits record.
    ``replay``: the table records transaction ``app_id`` at ``batch_id`` or later. ``spark``:
    the session to look with (default: the active one)."""
    snap = delta.snapshot(uri, spark=spark)
    if not snap.exists:
        return NO_TABLE
    return TargetLook.from_history(
        version=snap.version,
        properties=snap.properties,
        replay=snap.records(app_id, batch_id),
        metadata=(c.metadata for c in snap.commits(HISTORY_LIMIT)),
        columns={f.name: f.dataType for f in snap.schema.fields},
    )
