"""The snapshot-complete marker of a build table: its properties, phases, healing and status.

The marker is a set of table properties (:mod:`.layout`), written in commits of their own:

* ``lakehouse.snapshot.complete`` (``true``/``false``), ``.state`` (``loading``,
  ``complete``, ``resnapshot``), ``.completedAt``, ``.completedVersion`` (the data version
  whose rows reached the signal's covered offsets), ``.signal`` (``notification``,
  ``heartbeat``, ``last``, ``last_in_data_collection``, ``log_record``, ``operator``),
  ``.signalDetail``, ``.coveredOffsets`` (JSON ``{topic: {partition: offset}}``),
  ``.firstCompletedVersion`` (the first completion's, kept through re-snapshots) and, for the
  operator's override, ``.reason``;
* ``.lastNotification`` (JSON of the last initial-snapshot notification about the table) and
  ``.alert`` (non-empty while an ABORTED, SKIPPED or failed table scan is unresolved): what a
  status command or a quality report shows;
* during a re-snapshot: ``.resnapshotFromVersion`` (the version that started it),
  ``.lastCompleteVersion`` (the version just before), ``.resnapshotStartedAt``; and always
  ``.resnapshotJoin`` (``last-complete`` or ``latest``).

**Set after, cleared before.** The marker is set in a commit *after* the data commit whose
rows complete the snapshot, and cleared (a re-snapshot starts) in a commit *before* the data
commit that holds the first re-read rows: no version ever shows re-read or missing rows under
a complete marker. The data commit that completes a snapshot carries
``lakehouse.snapshotEnded`` and the bookkeeping (``lakehouse.snapshotState``, see
:mod:`.signals`); when a crash falls between it and the marker commit, :func:`heal_marker`
sets the marker on restart from it.

**Re-snapshots.** When snapshot-phase rows (not incremental ones) of a table arrive after its
marker, the table enters ``resnapshot``: ``complete`` becomes ``false`` and
``lastCompleteVersion`` names the last version before the re-read. A join reading the table
(:mod:`lakehouse.join.build_channel`) then reads that version — the dimension as it was
before the re-read started — and not the half re-read latest one, until the re-snapshot's own
signal sets the marker again; with ``resnapshotJoin = latest`` (the operator says so) it
reads the latest version throughout. At the end of a re-snapshot, keys that were alive
before it but neither re-read nor changed during it no longer exist in the source (a
re-snapshot reads every row): the sink ends their versions with synthetic deletes in the
completing data commit (``_op = 'd'``, ``_kafka_topic = '__lakehouse.resnapshot__'``,
``_snapshot = true``), unless ``resnapshot_deletes`` is off. Incremental snapshots never
clear the marker: their ``r`` rows are ordinary versions, ordered by ``(_event_time, _seq)``
like every other change, so they never overwrite a newer change of the same key.

**The operator's override** (``lakehouse snapshot-complete``) sets the marker at once, with
the reason, for sources that cannot signal; it also ends a re-snapshot (without synthetic
deletes). Snapshot rows whose Kafka timestamp is not after the override are stragglers of the
snapshot it completed and do not start a re-snapshot.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lakehouse import delta
from lakehouse.dimension.layout import (
    META_BATCH_ID,
    META_MAX_EVENT_TIME,
    META_SNAPSHOT_ENDED,
    META_SNAPSHOT_SIGNAL,
    META_SNAPSHOT_STATE,
    META_WATERMARK,
    PROP_SNAPSHOT_ALERT,
    PROP_SNAPSHOT_COMPLETE,
    PROP_SNAPSHOT_COMPLETED_AT,
    PROP_SNAPSHOT_COMPLETED_VERSION,
    PROP_SNAPSHOT_COVERED_OFFSETS,
    PROP_SNAPSHOT_FIRST_COMPLETED_VERSION,
    PROP_SNAPSHOT_LAST_COMPLETE,
    PROP_SNAPSHOT_LAST_NOTIFICATION,
    PROP_SNAPSHOT_REASON,
    PROP_SNAPSHOT_RESNAPSHOT_AT,
    PROP_SNAPSHOT_RESNAPSHOT_FROM,
    PROP_SNAPSHOT_RESNAPSHOT_JOIN,
    PROP_SNAPSHOT_SIGNAL,
    PROP_SNAPSHOT_SIGNAL_DETAIL,
    PROP_SNAPSHOT_STATE,
)
from lakehouse.dimension.signals import (
    Offsets,
    Phase,
    SignalState,
    merge_offsets,
    offsets_from_text,
    uncovered,
)
from lakehouse.errors import ConfigError
from lakehouse.time import WATERMARK_MIN

_HISTORY_LIMIT = 64


def is_complete(props: Mapping[str, str]) -> bool:
    """Whether table properties say the snapshot phase is complete."""
    return props.get(PROP_SNAPSHOT_COMPLETE, "false").lower() == "true"


def complete_at(uri: str, version: int) -> bool:
    """Whether the marker was set at table version ``version``: the versions a
    processing-time join may have read (during a re-snapshot it reads the last complete one,
    so every ``_build_version`` it writes satisfies this)."""
    return is_complete(delta.get_properties(uri, version=version))


def phase_of(props: Mapping[str, str]) -> Phase:
    """The table's phase: ``loading``, ``complete`` or ``resnapshot`` (older tables have no
    ``lakehouse.snapshot.state``: derived from ``complete``)."""
    state = props.get(PROP_SNAPSHOT_STATE, "")
    if is_complete(props):
        return "complete"
    return "resnapshot" if state == "resnapshot" else "loading"


def now_iso() -> str:
    """The current time, ISO-8601 UTC, milliseconds (how this package writes times)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def iso_to_ms(text: str | None) -> int | None:
    """Epoch milliseconds of an ISO-8601 time written by this module; None if unset."""
    if not text:
        return None
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        return None


def _int_prop(props: Mapping[str, str], key: str) -> int | None:
    raw = props.get(key, "").strip()
    return int(raw) if raw.lstrip("-").isdigit() else None


def set_marker(
    uri: str,
    *,
    signal: str,
    data_version: int,
    batch_id: int | None = None,
    reason: str | None = None,
    covered_offsets: Mapping[str, Mapping[str, int]] | None = None,
    detail: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> int:
    """Set the snapshot-complete marker on a build table; returns the marker's commit version.

    Ends a loading phase or a re-snapshot. Call it only after the data commit
    ``data_version``, which holds the last row the signal covers; it becomes
    ``lakehouse.snapshot.completedVersion``.

    Args:
        uri: the build table.
        signal: the signal's name (see :mod:`.signals`; ``operator`` for the override).
        data_version: the data commit the marker follows.
        batch_id: the ingest batch that fired the signal, if any.
        reason: the operator's reason (kept in the property and the commit metadata).
        covered_offsets: the data offsets the signal covered.
        detail: what exactly set it (notification type and collection, record position).
        extra: more properties to set in the same commit.
    """
    meta: dict[str, Any] = {META_SNAPSHOT_SIGNAL: signal}
    first: dict[str, str] = {}
    if not delta.get_properties(uri).get(PROP_SNAPSHOT_FIRST_COMPLETED_VERSION):
        first[PROP_SNAPSHOT_FIRST_COMPLETED_VERSION] = str(data_version)
    if batch_id is not None:
        meta[META_BATCH_ID] = batch_id
    if reason is not None:
        meta[delta.META_REASON] = reason
    return delta.set_properties(
        uri,
        {
            PROP_SNAPSHOT_COMPLETE: "true",
            PROP_SNAPSHOT_STATE: "complete",
            PROP_SNAPSHOT_COMPLETED_AT: now_iso(),
            PROP_SNAPSHOT_COMPLETED_VERSION: str(data_version),
            PROP_SNAPSHOT_SIGNAL: signal,
            PROP_SNAPSHOT_SIGNAL_DETAIL: detail or "",
            PROP_SNAPSHOT_COVERED_OFFSETS: (
                json.dumps(merge_offsets(covered_offsets)) if covered_offsets else ""
            ),
            PROP_SNAPSHOT_REASON: reason or "",
            PROP_SNAPSHOT_RESNAPSHOT_FROM: "",
            PROP_SNAPSHOT_LAST_COMPLETE: "",
            PROP_SNAPSHOT_RESNAPSHOT_AT: "",
            PROP_SNAPSHOT_ALERT: "",
            **first,
            **dict(extra or {}),
        },
        metadata=meta,
    )


def start_resnapshot(uri: str, *, batch_id: int, join: str = "last-complete") -> int:
    """Clear the marker because a re-snapshot starts; returns the commit's version.

    Call it **before** the data commit holding the first re-read rows. The version just
    before this commit becomes ``lastCompleteVersion``: the complete dimension a join keeps
    reading (with ``join = "last-complete"``) until the re-snapshot completes.
    """
    last_complete = delta.latest_version(uri)
    return delta.set_properties(
        uri,
        {
            PROP_SNAPSHOT_COMPLETE: "false",
            PROP_SNAPSHOT_STATE: "resnapshot",
            PROP_SNAPSHOT_LAST_COMPLETE: str(last_complete),
            PROP_SNAPSHOT_RESNAPSHOT_FROM: str(last_complete + 1),
            PROP_SNAPSHOT_RESNAPSHOT_AT: now_iso(),
            PROP_SNAPSHOT_RESNAPSHOT_JOIN: join,
        },
        metadata={
            META_SNAPSHOT_SIGNAL: "resnapshot",
            META_BATCH_ID: batch_id,
            delta.META_REASON: "snapshot rows arrived after the marker: a re-snapshot started",
        },
    )


def notification_properties(
    notification: Mapping[str, Any] | None, alert: str | None
) -> dict[str, str]:
    """The properties that surface the last notification and the alert."""
    props = {PROP_SNAPSHOT_ALERT: alert or ""}
    if notification is not None:
        props[PROP_SNAPSHOT_LAST_NOTIFICATION] = json.dumps(dict(notification), sort_keys=True)
    return props


def record_notification(
    uri: str, notification: Mapping[str, Any] | None, alert: str | None, *, batch_id: int
) -> int:
    """Record the last notification and the alert in the table's properties."""
    return delta.set_properties(
        uri,
        notification_properties(notification, alert),
        metadata={META_BATCH_ID: batch_id, META_SNAPSHOT_SIGNAL: "notification"},
    )


def last_signal_state(uri: str) -> tuple[int | None, SignalState]:
    """The bookkeeping of the newest data commit that recorded one, and its version
    (``(None, initial state)`` for a table without any)."""
    if not delta.table_exists(uri):
        return None, SignalState()
    for entry in delta.history(uri, limit=_HISTORY_LIMIT):
        text = entry.metadata.get(META_SNAPSHOT_STATE)
        if text:
            return entry.version, SignalState.from_json(text)
    return None, SignalState()


def heal_marker(uri: str) -> bool:
    """Set a marker that a crash left unset; returns True when it set one.

    The data commit of the batch whose signal fired carries ``lakehouse.snapshotEnded`` (and
    the fired signal in ``lakehouse.snapshotState``); the marker commit follows it. If the
    process died between the two, the table has the data but not the marker: this finds the
    first such commit of the current phase (after the re-snapshot's start, if one is under
    way) and sets the marker from it.
    """
    if not delta.table_exists(uri):
        return False
    props = delta.get_properties(uri)
    if is_complete(props):
        return False
    since = -1
    if phase_of(props) == "resnapshot":
        since = _int_prop(props, PROP_SNAPSHOT_RESNAPSHOT_FROM) or -1
    for entry in reversed(delta.history(uri)):  # oldest first: the first signal counts
        if entry.version <= since:
            continue
        signal = entry.metadata.get(META_SNAPSHOT_ENDED)
        if signal:
            state = SignalState.from_json(entry.metadata.get(META_SNAPSHOT_STATE))
            fired = state.fired
            batch = entry.metadata.get(META_BATCH_ID)
            set_marker(
                uri,
                signal=signal,
                data_version=entry.version,
                batch_id=int(batch) if batch else None,
                reason="set on restart from the data commit that ended the snapshot",
                covered_offsets=fired.covered if fired else None,
                detail=fired.detail if fired else None,
            )
            return True
    return False


def operator_complete(uri: str, *, reason: str) -> int | None:
    """The operator's override: mark the snapshot complete now, with the reason.

    Ends a loading phase or a re-snapshot (without synthetic deletes). The covered offsets
    are those the ingest had committed. Returns the marker commit's version, or None when the
    marker was already set.

    Raises:
        ConfigError: ``reason`` is blank.
        TableNotFoundError: no table at ``uri``.
    """
    if not reason.strip():
        raise ConfigError("--reason must say why the snapshot is complete", setting="reason")
    if is_complete(delta.get_properties(uri)):
        return None
    _, state = last_signal_state(uri)
    return set_marker(
        uri,
        signal="operator",
        data_version=delta.latest_version(uri),
        reason=reason,
        covered_offsets=state.positions or None,
        detail="lakehouse snapshot-complete",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotStatus:
    """A build table's snapshot marker, as ``lakehouse snapshot-status`` shows it.

    Attributes:
        table_uri: the table.
        version: its latest version.
        phase: ``loading``, ``complete`` or ``resnapshot``.
        properties: every ``lakehouse.snapshot.*`` property.
        state: the bookkeeping of the newest data commit (pending signals, positions).
        waiting_for: per entry of ``state.pending``, in its order, the covered offsets not
            yet consumed.
    """

    table_uri: str
    version: int
    phase: Phase
    properties: Mapping[str, str]
    state: SignalState
    waiting_for: tuple[Offsets, ...]

    def rows(self) -> list[tuple[str, str]]:
        """``(label, value)`` lines for display; empty values are left out."""
        p = self.properties
        out: list[tuple[str, str]] = [
            ("state", self.phase),
            ("complete", p.get(PROP_SNAPSHOT_COMPLETE, "false")),
        ]
        for label, key in (
            ("signal", PROP_SNAPSHOT_SIGNAL),
            ("signal detail", PROP_SNAPSHOT_SIGNAL_DETAIL),
            ("completed at", PROP_SNAPSHOT_COMPLETED_AT),
            ("completed version", PROP_SNAPSHOT_COMPLETED_VERSION),
            ("covered offsets", PROP_SNAPSHOT_COVERED_OFFSETS),
            ("reason", PROP_SNAPSHOT_REASON),
            ("re-snapshot started at", PROP_SNAPSHOT_RESNAPSHOT_AT),
            ("re-snapshot from version", PROP_SNAPSHOT_RESNAPSHOT_FROM),
            ("joins read version", PROP_SNAPSHOT_LAST_COMPLETE),
            ("joins during a re-snapshot", PROP_SNAPSHOT_RESNAPSHOT_JOIN),
            ("last notification", PROP_SNAPSHOT_LAST_NOTIFICATION),
            ("ALERT", PROP_SNAPSHOT_ALERT),
        ):
            value = p.get(key, "")
            if key == PROP_SNAPSHOT_LAST_COMPLETE and self.phase != "resnapshot":
                continue
            if value:
                out.append((label, value))
        if self.phase != "complete" and self.state.awaiting is not None:
            out.append(
                (
                    "waiting for",
                    "; or ".join(self.state.awaiting)
                    + (" — or " if self.state.awaiting else "no signal is enabled: only ")
                    + "lakehouse snapshot-complete",
                )
            )
        for signal, missing in zip(self.state.pending, self.waiting_for, strict=True):
            out.append(
                (
                    f"pending {signal.signal}",
                    f"{signal.detail}, seen in batch {signal.batch_id}; waiting for offsets "
                    f"{json.dumps(missing)}",
                )
            )
        if self.state.positions:
            out.append(("consumed offsets", json.dumps(self.state.positions)))
        return out


def snapshot_status(uri: str) -> SnapshotStatus:
    """Read a build table's marker, pending signals and alert.

    Raises:
        TableNotFoundError: no table at ``uri``.
    """
    version = delta.latest_version(uri)
    props = delta.get_properties(uri)
    marker = {k: v for k, v in props.items() if k.startswith("lakehouse.snapshot.")}
    _, state = last_signal_state(uri)
    phase = phase_of(props)
    if state.phase != phase:  # the marker changed after the last data commit
        state = SignalState(phase=phase, positions=state.positions)
    waiting = tuple(uncovered(state.positions, p.covered) for p in state.pending)
    return SnapshotStatus(
        table_uri=uri,
        version=version,
        phase=phase,
        properties=marker,
        state=state,
        waiting_for=waiting,
    )


def covered_offsets(props: Mapping[str, str]) -> Offsets | None:
    """The covered offsets recorded with the marker, if any."""
    return offsets_from_text(props.get(PROP_SNAPSHOT_COVERED_OFFSETS))


def last_metadata(uri: str, key: str) -> str | None:
    """The newest non-empty value of a commit metadata key in the recent history."""
    for entry in delta.history(uri, limit=50):
        value = entry.metadata.get(key)
        if value not in (None, ""):
            return value
    return None


def last_max_event_time(uri: str) -> int | None:
    """The largest committed event time (ms), as recorded by the last data commit."""
    value = last_metadata(uri, META_MAX_EVENT_TIME)
    return int(value) if value is not None else None


def last_watermark(uri: str) -> int:
    """The last recorded build watermark (ms), WATERMARK_MIN if none."""
    value = last_metadata(uri, META_WATERMARK)
    return int(value) if value is not None else WATERMARK_MIN
