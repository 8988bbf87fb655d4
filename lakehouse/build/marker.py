"""The snapshot-complete marker of a build table, and the build watermark's bookkeeping.

The marker is three table properties (``lakehouse.snapshot.complete``, ``.completedAt``,
``.completedVersion``) plus the signal that set it (``lakehouse.snapshot.signal``), written
in a commit of its own **after** the data commit that holds the last snapshot row it covers.
That data commit carries ``lakehouse.snapshotEnded``, so a crash between the two commits is
healed on restart by :func:`heal_marker`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from lakehouse import delta
from lakehouse.build import layout as L
from lakehouse.time import WATERMARK_MIN


def is_complete(props: Mapping[str, str]) -> bool:
    """Whether table properties say the snapshot phase is complete."""
    return props.get(L.PROP_SNAPSHOT_COMPLETE, "false").lower() == "true"


def set_marker(
    uri: str,
    *,
    signal: str,
    data_version: int,
    batch_id: int | None = None,
    reason: str | None = None,
) -> int:
    """Set the snapshot-complete marker on a build table; returns the marker's commit version.

    ``data_version`` is the table version that holds the last snapshot row the signal
    covers; it becomes ``lakehouse.snapshot.completedVersion``.
    """
    meta: dict[str, Any] = {"lakehouse.snapshotSignal": signal}
    if batch_id is not None:
        meta[L.META_BATCH_ID] = batch_id
    if reason is not None:
        meta["lakehouse.reason"] = reason
    return delta.set_properties(
        uri,
        {
            L.PROP_SNAPSHOT_COMPLETE: "true",
            L.PROP_SNAPSHOT_COMPLETED_AT: datetime.now(UTC).isoformat(timespec="milliseconds"),
            L.PROP_SNAPSHOT_COMPLETED_VERSION: str(data_version),
            L.PROP_SNAPSHOT_SIGNAL: signal,
        },
        metadata=meta,
    )


def heal_marker(uri: str) -> bool:
    """Set a marker that a crash left unset; returns True when it set one.

    The data commit of the batch in which the snapshot ended carries
    ``lakehouse.snapshotEnded``; the marker commit follows it. If the process died between
    the two, the table has the data but no marker: this finds that commit and sets the
    marker from it.
    """
    if not delta.table_exists(uri) or is_complete(delta.get_properties(uri)):
        return False
    for entry in reversed(delta.history(uri)):  # oldest first: the first signal counts
        signal = entry.metadata.get(L.META_SNAPSHOT_ENDED)
        if signal:
            batch = entry.metadata.get(L.META_BATCH_ID)
            set_marker(
                uri,
                signal=signal,
                data_version=entry.version,
                batch_id=int(batch) if batch else None,
                reason="set on restart from the data commit that ended the snapshot",
            )
            return True
    return False


def last_metadata(uri: str, key: str) -> str | None:
    """The newest non-empty value of a commit metadata key in the recent history."""
    for entry in delta.history(uri, limit=50):
        value = entry.metadata.get(key)
        if value not in (None, ""):
            return value
    return None


def last_max_event_time(uri: str) -> int | None:
    """The largest committed event time (ms), as recorded by the last data commit."""
    value = last_metadata(uri, L.META_MAX_EVENT_TIME)
    return int(value) if value is not None else None


def last_watermark(uri: str) -> int:
    """The last recorded build watermark (ms), WATERMARK_MIN if none."""
    value = last_metadata(uri, L.META_WATERMARK)
    return int(value) if value is not None else WATERMARK_MIN
