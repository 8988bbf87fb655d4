"""The build side as a watermark channel, read from the build table at one pinned version.

Rules (ARCHITECTURE.md, "The build side's watermark"):

* while the snapshot-complete marker is not set: ``Watermark(MIN, False)``, so the valve holds
  every probe row back, in both modes (nothing may be joined against a half-loaded
  dimension);
* processing-time mode, marker set: ``Watermark(MIN, True)``;
* row-time mode, marker set: the event-time watermark recorded with the latest data commit
  at or before the pinned version (max committed event time minus the allowed
  out-of-orderness).

The channel is IDLE when an idle timeout is configured, the marker is set, and the table's
last commit is older than the timeout. Before the marker the channel is never idle: idleness
would otherwise let probe rows through against a half-loaded dimension.

Everything is read at the same pinned version, so the watermark never speaks for data the
join does not see.

**Re-snapshots** (:mod:`lakehouse.dimension.marker`). While the table re-reads its source after
the marker was set (``lakehouse.snapshot.state = resnapshot``), its latest version is half
re-read. The channel then stands at ``lakehouse.snapshot.lastCompleteVersion`` — the last
version before the re-read started, which is complete — instead: the join pins and reads
that version, with its watermark, until the re-snapshot's signal sets the marker again. With
``lakehouse.snapshot.resnapshotJoin = latest`` (the operator's choice) it reads the latest
version throughout. Either way the channel is never idle during a re-snapshot, and its
watermark does not go back: the pinned version is the one the join was already reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from lakehouse import delta
from lakehouse.dimension.layout import (
    META_WATERMARK,
    PROP_PRIMARY_KEY,
    PROP_SNAPSHOT_COMPLETE,
    PROP_SNAPSHOT_COMPLETED_VERSION,
    PROP_SNAPSHOT_LAST_COMPLETE,
    PROP_SNAPSHOT_RESNAPSHOT_JOIN,
    PROP_SNAPSHOT_STATE,
)
from lakehouse.time import WATERMARK_MIN, Watermark, WatermarkStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildChannelState:
    """The build table as the join sees it at one version.

    Attributes:
        version: the pinned table version, None when the table does not exist yet.
        snapshot_complete: the marker at that version.
        completed_version: ``lakehouse.snapshot.completedVersion``, if set.
        event_watermark_ms: the recorded event-time watermark, WATERMARK_MIN if none.
        last_commit_ms: time of the pinned version's commit.
        key_columns: ``lakehouse.primaryKey``.
        latest_version: the table's latest version when read (``version`` is older while
            a re-snapshot is under way).
        resnapshot: a re-snapshot is under way.
    """

    version: int | None
    snapshot_complete: bool
    completed_version: int | None
    event_watermark_ms: int
    last_commit_ms: int | None
    key_columns: tuple[str, ...]
    latest_version: int | None = None
    resnapshot: bool = False

    def watermark(self, *, processing_time: bool) -> Watermark:
        """The channel's watermark in the given mode (see the module docstring)."""
        if not self.snapshot_complete:
            return Watermark.MIN
        if processing_time:
            return Watermark.PROCESSING_TIME
        return Watermark(self.event_watermark_ms)

    def status(self, *, now_ms: int, idle_timeout_ms: int | None) -> WatermarkStatus:
        """IDLE when the marker is set, no re-snapshot is under way, and no commit came for
        ``idle_timeout_ms``."""
        if (
            idle_timeout_ms is not None
            and not self.resnapshot
            and self.snapshot_complete
            and self.last_commit_ms is not None
            and now_ms - self.last_commit_ms >= idle_timeout_ms
        ):
            return WatermarkStatus.IDLE
        return WatermarkStatus.ACTIVE


def read_build_channel(
    uri: str, *, version: int | None = None, snap: delta.TableSnapshot | None = None
) -> BuildChannelState:
    """Read the channel's state at ``version``; when None, at the version the join must read
    now: the latest, or during a re-snapshot the last complete one (module docstring).

    ``snap`` is the batch's snapshot of the build table, when it has one: everything is then
    read from it (another version's properties only during a re-snapshot).
    """
    snap = snap if snap is not None else delta.snapshot(uri)
    if not snap.exists:
        return BuildChannelState(
            version=None,
            snapshot_complete=False,
            completed_version=None,
            event_watermark_ms=WATERMARK_MIN,
            last_commit_ms=None,
            key_columns=(),
        )
    latest = snap.version
    if version is None:
        props = snap.properties
        if props.get(PROP_SNAPSHOT_STATE) == "resnapshot" and not _is_true(props):
            last_complete = props.get(PROP_SNAPSHOT_LAST_COMPLETE, "")
            policy = props.get(PROP_SNAPSHOT_RESNAPSHOT_JOIN, "last-complete")
            if policy == "latest":
                state = _read_at(snap, latest)
                return replace(state, snapshot_complete=True, resnapshot=True)
            if last_complete.isdigit():
                state = _read_at(snap, int(last_complete))
                return replace(state, resnapshot=True)
        return _read_at(snap, latest)
    return _read_at(snap, version)


def _is_true(props: Mapping[str, str]) -> bool:
    return props.get(PROP_SNAPSHOT_COMPLETE, "false").lower() == "true"


#: How far back from the pinned version the recorded watermark is looked for.
_WATERMARK_LOOKBACK = 64


def _read_at(snap: delta.TableSnapshot, pinned: int) -> BuildChannelState:
    props = (
        snap.properties
        if pinned == snap.version
        else delta.get_properties(snap.uri, version=pinned, spark=snap.spark)
    )
    watermark = WATERMARK_MIN
    last_commit_ms: int | None = None
    for version in range(pinned, max(pinned - _WATERMARK_LOOKBACK, -1), -1):
        entry = snap.commit(version)
        if entry is None:
            continue
        if last_commit_ms is None:
            last_commit_ms = entry.timestamp_ms
        value = entry.metadata.get(META_WATERMARK)
        if value not in (None, ""):
            watermark = int(value)
            break
    completed = props.get(PROP_SNAPSHOT_COMPLETED_VERSION)
    return BuildChannelState(
        version=pinned,
        snapshot_complete=_is_true(props),
        completed_version=int(completed) if completed else None,
        event_watermark_ms=watermark,
        last_commit_ms=last_commit_ms,
        key_columns=tuple(c for c in props.get(PROP_PRIMARY_KEY, "").split(",") if c),
        latest_version=snap.version,
    )
