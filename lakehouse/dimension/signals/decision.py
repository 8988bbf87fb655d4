"""The marker decision of one build table for one batch (:func:`decide`; the rules are in
:mod:`lakehouse.dimension.signals`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from lakehouse.dimension.signals.evidence import BatchEvidence, Heartbeat, Notification
from lakehouse.dimension.signals.kinds import (
    ALERT_TYPES,
    SCAN_OK_STATUSES,
    SIGNAL_RANK,
    SNAPSHOT_PHASES,
    Offsets,
    OffsetsProbe,
    Phase,
)
from lakehouse.dimension.signals.offsets import merge_offsets, uncovered
from lakehouse.dimension.signals.options import SnapshotOptions
from lakehouse.dimension.signals.state import Decision, SignalEvidence, SignalState


def decide(
    *,
    phase: Phase,
    prior: SignalState,
    batch: BatchEvidence,
    options: SnapshotOptions,
    source_table: str | None,
    batch_id: int,
    positions: Mapping[str, Mapping[str, int]],
    probe: OffsetsProbe | None = None,
    marker_signal: str | None = None,
    completed_at_ms: int | None = None,
) -> Decision:
    """Decide the marker of one build table for one batch (see the module docstring).

    Args:
        phase: the table's phase before the batch (from its properties; ``loading`` for a
            table that does not exist yet).
        prior: the bookkeeping recorded by the table's last data commit. Its per-phase parts
            are discarded when its phase is not ``phase`` (the operator changed the marker,
            or a crash fell between a re-snapshot's start and its first data commit).
        batch: the batch's evidence for this table.
        options: the table's signal options.
        source_table: the table's ``source_table`` (for ``TABLE_SCAN_COMPLETED``).
        batch_id: the micro-batch.
        positions: the data offsets consumed once this batch is committed.
        probe: reads the data topics' high watermarks now; called at most once, and only
            when the batch holds a new signal. None: the signal covers ``positions``.
        marker_signal: the signal that set the current marker (``operator`` enables the
            straggler rule), if complete.
        completed_at_ms: when the current marker was set, if complete.

    Returns:
        The decision. Deterministic for the same inputs (and probe answer).
    """
    state = (
        prior
        if prior.phase == phase
        else SignalState(
            phase=phase,
            last_notification=prior.last_notification,
            snapshot_seq=prior.snapshot_seq,
            snapshot_source_ts_ms=prior.snapshot_source_ts_ms,
        )
    )
    state = replace(state, positions=merge_offsets(positions), fired=None)
    ignored: list[str] = []
    snap = [g for g in batch.rows if g.phase in SNAPSHOT_PHASES]

    start_resnapshot = False
    if phase == "complete" and snap:
        # Only the connector's own position says a new snapshot run began: snapshot rows at
        # or before the completed snapshot's are replays (a producer retry, a connector
        # restarted from older offsets), and the table already holds them.
        fresh = [g for g in snap if g.newer_than(state.snapshot_seq, state.snapshot_source_ts_ms)]
        replayed = sum(g.count for g in snap) - sum(g.count for g in fresh)
        if replayed:
            ignored.append(
                f"{replayed} snapshot row(s) not newer than the completed snapshot's position: "
                "replays of it, not a re-snapshot"
            )
        if fresh and marker_signal == "operator" and completed_at_ms is not None:
            # stragglers of the snapshot the operator declared complete
            late = [g for g in fresh if g.max_ts_ms is None or g.max_ts_ms > completed_at_ms]
            if len(late) < len(fresh):
                ignored.append(
                    f"{sum(g.count for g in fresh) - sum(g.count for g in late)} snapshot "
                    "row(s) not newer than the operator's override: stragglers of the "
                    "snapshot it completed"
                )
            fresh = late
        if fresh:
            phase, start_resnapshot = "resnapshot", True
            state = SignalState(
                phase="resnapshot",
                positions=state.positions,
                last_notification=state.last_notification,
                alert=state.alert,
            )
        snap = fresh

    batch_snap_ts = _max_ts(g.max_ts_ms for g in snap)
    if phase != "complete":
        # the snapshot run's newest position, kept through its completion
        seqs = [g.max_seq for g in snap if g.max_seq is not None]
        if state.snapshot_seq is not None:
            seqs.append(state.snapshot_seq)
        state = replace(
            state,
            snapshot_seq=max(seqs) if seqs else None,
            snapshot_source_ts_ms=_max_opt(
                state.snapshot_source_ts_ms, _max_ts(g.max_source_ts_ms for g in snap)
            ),
        )
    phase_max = None if phase == "complete" else _max_opt(state.phase_max_ts_ms, batch_snap_ts)
    in_band_ordered = phase == "resnapshot"

    def in_order(ts: int | None) -> bool:
        return ts is None or phase_max is None or ts >= phase_max

    seen: list[tuple[str, str, int | None, bool]] = []  # (signal, detail, ts, ordered)

    # Out-of-band: notifications and heartbeats, in Kafka-timestamp order.
    events: list[Notification | Heartbeat] = [n for n in batch.notifications if n.initial]
    events += list(batch.heartbeats)
    events.sort(key=lambda e: (_ts_key(e.kafka_ts_ms), e.topic, e.partition, e.offset))
    alert = state.alert
    newest_note: Notification | None = None
    heartbeat_seen = False
    for e in events:
        if isinstance(e, Notification):
            if not e.concerns(source_table) or e.type == "IN_PROGRESS":
                continue
            newest_note = e
            ok_scan = e.type == "TABLE_SCAN_COMPLETED" and (
                e.status is None or e.status in SCAN_OK_STATUSES
            )
            if e.type in ("STARTED", "COMPLETED"):
                alert = None
            elif e.type in ALERT_TYPES or (e.type == "TABLE_SCAN_COMPLETED" and not ok_scan):
                alert = e.describe()
            if (e.type == "COMPLETED" or ok_scan) and options.active("notification"):
                if in_order(e.kafka_ts_ms):
                    seen.append(("notification", e.describe(), e.kafka_ts_ms, True))
                else:
                    ignored.append(f"{e.describe()}: older than the snapshot rows it would end")
        elif options.active("heartbeat") and not heartbeat_seen:
            if alert is not None:
                ignored.append(f"heartbeat at {e.where}: snapshot alert open ({alert})")
            elif in_order(e.kafka_ts_ms):  # else: a heartbeat from before this snapshot
                seen.append(("heartbeat", f"heartbeat at {e.where}", e.kafka_ts_ms, True))
                heartbeat_seen = True
    notification = newest_note.to_dict() if newest_note else None
    if notification is not None:
        notification["batchId"] = batch_id
    last_notification = notification or state.last_notification

    if phase == "complete":
        # The marker stands; notifications are only recorded (an alert is still surfaced).
        state = replace(
            state,
            alert=alert,
            pending=(),
            phase_max_ts_ms=None,
            last_notification=last_notification,
        )
        return Decision(
            state=state,
            notification=notification,
            alert_changed=alert != prior.alert,
            ignored=tuple(ignored),
        )

    top_snapshot: dict[tuple[str, int], int] = {}
    for g in snap:
        tp = (g.topic, g.partition)
        top_snapshot[tp] = max(top_snapshot.get(tp, -1), g.max_offset)
    ordered_rows = sorted(batch.rows, key=lambda g: (g.topic, g.partition, g.phase))
    # In-band: the table's own 'last' / 'last_in_data_collection' record.
    if options.active("last"):
        for g in ordered_rows:
            if g.phase not in ("last", "last_in_data_collection"):
                continue
            where = f"{g.topic}[{g.partition}]@{g.max_offset}"
            if g.max_offset < top_snapshot[(g.topic, g.partition)]:
                ignored.append(f"'{g.phase}' at {where}: snapshot rows follow it")
            elif in_band_ordered and not in_order(g.max_ts_ms):
                ignored.append(f"'{g.phase}' at {where}: older than the re-snapshot's rows")
            else:
                seen.append((g.phase, f"'{g.phase}' record at {where}", g.max_ts_ms, False))
    # In-band: the table's first log-phase record.
    if options.active("log_record"):
        for g in ordered_rows:
            if g.phase != "false":
                continue
            where = f"{g.topic}[{g.partition}]@{g.max_offset}"
            if g.max_offset < top_snapshot.get((g.topic, g.partition), -1):
                ignored.append(f"log record at {where}: snapshot rows follow it")
            elif in_band_ordered and not in_order(g.max_ts_ms):
                ignored.append(f"log record at {where}: older than the re-snapshot's rows")
            elif alert is not None:
                ignored.append(f"log record at {where}: snapshot alert open ({alert})")
            else:
                seen.append(("log_record", f"log-phase record at {where}", g.max_ts_ms, False))
                break

    covered: Offsets | None = None
    new: list[SignalEvidence] = []
    for signal, detail, ts, ordered in seen:
        if covered is None:
            covered = merge_offsets(state.positions, probe() if probe is not None else None)
        new.append(
            SignalEvidence(
                signal=signal,
                detail=detail,
                covered=covered,
                batch_id=batch_id,
                kafka_ts_ms=ts,
                ordered=ordered or in_band_ordered,
            )
        )

    # Keep, per signal, the oldest one still in order (it covers the fewest offsets, so it
    # fires first) and the newest (it is the last to go stale: TABLE_SCAN_COMPLETED precedes
    # the table's final row, which Debezium holds back, and COMPLETED follows it; read in one
    # batch before that row, only COMPLETED survives the row). Any in between is dominated.
    # Then fire the strongest covered one.
    kept: list[SignalEvidence] = []
    for p in [*state.pending, *new]:
        if p.ordered and not in_order(p.kafka_ts_ms):
            ignored.append(f"pending {p.signal} ({p.detail}) dropped: newer snapshot rows came")
        else:
            kept.append(p)
    pending = [
        p
        for i, p in enumerate(kept)
        if all(q.signal != p.signal for q in kept[:i])
        or all(q.signal != p.signal for q in kept[i + 1 :])
    ]
    ready = [p for p in pending if not uncovered(state.positions, p.covered)]
    fire = min(ready, key=lambda p: (SIGNAL_RANK.get(p.signal, 9), p.batch_id)) if ready else None

    if fire is not None:
        # the marker closes the phase, and with it any alert
        state = SignalState(
            phase="complete",
            positions=state.positions,
            fired=fire,
            last_notification=last_notification,
            snapshot_seq=state.snapshot_seq,
            snapshot_source_ts_ms=state.snapshot_source_ts_ms,
        )
        return Decision(
            state=state,
            start_resnapshot=start_resnapshot,
            fire=fire,
            notification=notification,
            alert_changed=prior.alert is not None,
            ignored=tuple(ignored),
        )
    state = replace(
        state,
        phase=phase,
        phase_max_ts_ms=phase_max,
        pending=tuple(pending),
        alert=alert,
        last_notification=last_notification,
        awaiting=options.awaiting(source_table),
    )
    return Decision(
        state=state,
        start_resnapshot=start_resnapshot,
        notification=notification,
        alert_changed=alert != prior.alert,
        ignored=tuple(ignored),
    )


def _ts_key(ts: int | None) -> int:
    return -1 if ts is None else ts


def _max_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _max_ts(values: Iterable[int | None]) -> int | None:
    out: int | None = None
    for v in values:
        out = _max_opt(out, v)
    return out
