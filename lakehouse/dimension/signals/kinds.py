"""The vocabulary of snapshot-end signals: phases, signal kinds and their strength, the
``source.snapshot`` values of the snapshot phase, and the notification types and statuses
that matter."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final, Literal

#: ``{topic: {partition: next_offset}}`` (partitions as strings, as in Spark's offsets).
Offsets = dict[str, dict[str, int]]
#: Reads the data topics' current high watermarks (``{topic: {partition: high}}``).
OffsetsProbe = Callable[[], Mapping[str, Mapping[str, int]]]

Phase = Literal["loading", "complete", "resnapshot"]
SignalKind = Literal["notification", "heartbeat", "last", "log_record"]
ResnapshotJoin = Literal["last-complete", "latest"]

#: The signals a build table can be configured with (``snapshot_signals``).
SIGNAL_KINDS: Final[tuple[SignalKind, ...]] = ("notification", "heartbeat", "last", "log_record")
#: Strength of each recorded signal name (lower is stronger).
SIGNAL_RANK: Final[Mapping[str, int]] = {
    "operator": -1,
    "notification": 0,
    "heartbeat": 1,
    "last_in_data_collection": 2,
    "last": 2,
    "log_record": 3,
}
#: ``source.snapshot`` values of the non-incremental snapshot phase.
SNAPSHOT_PHASES: Final = frozenset(
    {"true", "first", "first_in_data_collection", "last_in_data_collection", "last"}
)
#: ``aggregate_type`` values of notifications about initial (and blocking) snapshots.
INITIAL_SNAPSHOT_AGGREGATES: Final = frozenset({"Initial Snapshot", "Blocking Snapshot"})
#: Notification types that open an alert.
ALERT_TYPES: Final = frozenset({"ABORTED", "SKIPPED"})
#: ``TABLE_SCAN_COMPLETED`` statuses of a table scanned to its end. Debezium's
#: ``SnapshotCompletionStatus`` has ``EMPTY`` for a table without rows (3.5's PostgreSQL
#: initial snapshot reports an empty table as ``SUCCEEDED``, seen on a real connector); the
#: others (``NO_PRIMARY_KEY``, ``SQL_EXCEPTION``, ``STOPPED``, ``UNKNOWN_SCHEMA``) are
#: failures.
SCAN_OK_STATUSES: Final = frozenset({"SUCCEEDED", "EMPTY"})
