"""The marker decision of one build table for one batch (:func:`decide`; the rules are in
:mod:`lakehouse.dimension.signals`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from lakehouse.dimension.signals.evidence import BatchEvidence, Heartbeat, Notification, RowGroup
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

    The phases, each a function below with a worked example: the bookkeeping carried over
    (:func:`_carried`); on a complete table, whether snapshot rows start a re-snapshot
    (:func:`_new_snapshot_rows`); in a snapshot, its newest position
    (:func:`_with_snapshot_position`); the signals of notifications and heartbeats
    (:func:`_out_of_band`) and of the table's own records (:func:`_in_band`); what each covers
    (:func:`_evidence`); which stay pending and which fires (:func:`_choose`).
    """
    state = _carried(prior, phase, positions)
    ignored: list[str] = []
    snap = [g for g in batch.rows if g.phase in SNAPSHOT_PHASES]
    start_resnapshot = False
    if phase == "complete" and snap:
        snap = _new_snapshot_rows(snap, state, marker_signal, completed_at_ms, ignored)
        if snap:
            phase, start_resnapshot = "resnapshot", True
            state = SignalState(
                phase="resnapshot",
                positions=state.positions,
                last_notification=state.last_notification,
                alert=state.alert,
            )
    if phase != "complete":
        state = _with_snapshot_position(state, snap)
    newest = (
        None
        if phase == "complete"
        else _max_opt(state.phase_max_ts_ms, _max_ts(g.max_ts_ms for g in snap))
    )
    order = _Order(newest=newest, in_band=phase == "resnapshot")
    seen, alert, newest_note = _out_of_band(
        batch, options, source_table, state.alert, order, ignored
    )
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

    seen += _in_band(batch.rows, snap, options, alert, order, ignored)
    new = _evidence(seen, state.positions, probe, batch_id, order)
    pending, fire = _choose([*state.pending, *new], state.positions, order, ignored)
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
        phase_max_ts_ms=newest,
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


#: A signal seen in a batch: (signal, detail, Kafka timestamp, whether it is out-of-band).
_Seen = tuple[str, str, int | None, bool]


@dataclass(frozen=True, slots=True)
class _Order:
    """The order rule of one batch: a signal older (by Kafka timestamp) than the newest
    snapshot row of the phase cannot end it.

    Attributes:
        newest: the newest Kafka timestamp of the phase's snapshot rows so far (None: none
            seen, or the phase is complete, and then every signal is in order).
        in_band: the phase is a re-snapshot, where in-band signals obey the rule too (in the
            initial snapshot a table's own ``last`` record cannot precede its rows).

    >>> _Order(newest=100, in_band=False).admits(99), _Order(newest=100, in_band=False).admits(100)
    (False, True)
    >>> _Order(newest=None, in_band=False).admits(5), _Order(newest=100, in_band=False).admits(None)
    (True, True)
    """

    newest: int | None
    in_band: bool

    def admits(self, ts: int | None) -> bool:
        """Whether a signal at Kafka time ``ts`` (None: unknown) may end the phase."""
        return ts is None or self.newest is None or ts >= self.newest


def _carried(
    prior: SignalState, phase: Phase, positions: Mapping[str, Mapping[str, int]]
) -> SignalState:
    """Phase 1: the bookkeeping the batch starts from. The prior state's per-phase parts are
    discarded when it was recorded in another phase (the operator changed the marker, or a
    crash fell between a re-snapshot's start and its first data commit); the positions become
    this batch's, and nothing has fired yet.

    >>> prior = SignalState(phase="loading", phase_max_ts_ms=7, snapshot_seq="00005")
    >>> s = _carried(prior, "complete", {"cdc": {"0": 3}})
    >>> s.phase, s.phase_max_ts_ms, s.snapshot_seq, s.positions
    ('complete', None, '00005', {'cdc': {'0': 3}})
    >>> _carried(prior, "loading", {}).phase_max_ts_ms
    7
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
    return replace(state, positions=merge_offsets(positions), fired=None)


def _new_snapshot_rows(
    snap: list[RowGroup],
    state: SignalState,
    marker_signal: str | None,
    completed_at_ms: int | None,
    ignored: list[str],
) -> list[RowGroup]:
    """Phase 2, a complete table: the snapshot rows that begin a new snapshot run (a
    re-snapshot). Only the connector's own position says a new run began: rows at or before
    the completed snapshot's position are replays of it (a producer retry, a connector
    restarted from older offsets), which the table already holds. After an operator's
    override, rows not newer (by Kafka time) than the override are stragglers of the snapshot
    it completed. Both are noted in ``ignored``.

    >>> done = SignalState(phase="complete", snapshot_seq="00005")
    >>> rows = [RowGroup("cdc", 0, "true", 2, 9, 50, max_seq="00005"),
    ...         RowGroup("cdc", 1, "true", 1, 4, 60, max_seq="00009")]
    >>> notes = []
    >>> [g.partition for g in _new_snapshot_rows(rows, done, "last", None, notes)]
    [1]
    >>> notes  # doctest: +ELLIPSIS
    ["2 snapshot row(s) not newer than the completed snapshot's position: replays of it, ..."]
    >>> _new_snapshot_rows(rows[1:], done, "operator", 60, [])
    []
    """
    fresh = [g for g in snap if g.newer_than(state.snapshot_seq, state.snapshot_source_ts_ms)]
    replayed = sum(g.count for g in snap) - sum(g.count for g in fresh)
    if replayed:
        ignored.append(
            f"{replayed} snapshot row(s) not newer than the completed snapshot's position: "
            "replays of it, not a re-snapshot"
        )
    if fresh and marker_signal == "operator" and completed_at_ms is not None:
        late = [g for g in fresh if g.max_ts_ms is None or g.max_ts_ms > completed_at_ms]
        if len(late) < len(fresh):
            ignored.append(
                f"{sum(g.count for g in fresh) - sum(g.count for g in late)} snapshot "
                "row(s) not newer than the operator's override: stragglers of the "
                "snapshot it completed"
            )
        fresh = late
    return fresh


def _with_snapshot_position(state: SignalState, snap: list[RowGroup]) -> SignalState:
    """Phase 3, a table in a snapshot: the snapshot run's newest connector position and
    ``source.ts_ms``, kept through its completion (they tell a later replay from a new run).

    >>> s = _with_snapshot_position(SignalState(snapshot_seq="00003"),
    ...                             [RowGroup("cdc", 0, "true", 1, 0, 10, "00002", 70)])
    >>> s.snapshot_seq, s.snapshot_source_ts_ms
    ('00003', 70)
    """
    seqs = [g.max_seq for g in snap if g.max_seq is not None]
    if state.snapshot_seq is not None:
        seqs.append(state.snapshot_seq)
    return replace(
        state,
        snapshot_seq=max(seqs) if seqs else None,
        snapshot_source_ts_ms=_max_opt(
            state.snapshot_source_ts_ms, _max_ts(g.max_source_ts_ms for g in snap)
        ),
    )


def _out_of_band(
    batch: BatchEvidence,
    options: SnapshotOptions,
    source_table: str | None,
    alert: str | None,
    order: _Order,
    ignored: list[str],
) -> tuple[list[_Seen], str | None, Notification | None]:
    """Phase 4: notifications and heartbeats, in Kafka-timestamp order. Returns the signals
    they give, the alert after them (``ABORTED``/``SKIPPED`` or a failed table scan opens
    one, ``STARTED``/``COMPLETED`` closes it) and the newest notification about the table.
    A heartbeat while an alert is open, and a signal older than the snapshot rows it would
    end, are noted in ``ignored``; only the first heartbeat counts.

    >>> beat = Heartbeat("__debezium-heartbeat.db", 0, 4, kafka_ts_ms=120)
    >>> opts = SnapshotOptions(heartbeat_topic="__debezium-heartbeat.db")
    >>> seen, alert, note = _out_of_band(BatchEvidence(heartbeats=(beat,)), opts, None, None,
    ...                                  _Order(newest=100, in_band=False), [])
    >>> seen, alert, note
    ([('heartbeat', 'heartbeat at __debezium-heartbeat.db[0]@4', 120, True)], None, None)
    >>> notes = []
    >>> _out_of_band(BatchEvidence(heartbeats=(beat,)), opts, None, "ABORTED",
    ...              _Order(newest=100, in_band=False), notes)[0], notes
    ([], ['heartbeat at __debezium-heartbeat.db[0]@4: snapshot alert open (ABORTED)'])
    """
    events: list[Notification | Heartbeat] = [n for n in batch.notifications if n.initial]
    events += list(batch.heartbeats)
    events.sort(key=lambda e: (_ts_key(e.kafka_ts_ms), e.topic, e.partition, e.offset))
    seen: list[_Seen] = []
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
                if order.admits(e.kafka_ts_ms):
                    seen.append(("notification", e.describe(), e.kafka_ts_ms, True))
                else:
                    ignored.append(f"{e.describe()}: older than the snapshot rows it would end")
        elif options.active("heartbeat") and not heartbeat_seen:
            if alert is not None:
                ignored.append(f"heartbeat at {e.where}: snapshot alert open ({alert})")
            elif order.admits(e.kafka_ts_ms):  # else: a heartbeat from before this snapshot
                seen.append(("heartbeat", f"heartbeat at {e.where}", e.kafka_ts_ms, True))
                heartbeat_seen = True
    return seen, alert, newest_note


def _in_band(
    rows: Sequence[RowGroup],
    snap: list[RowGroup],
    options: SnapshotOptions,
    alert: str | None,
    order: _Order,
    ignored: list[str],
) -> list[_Seen]:
    """Phase 5: the table's own records that end its snapshot: a ``last`` or
    ``last_in_data_collection`` record among the run's snapshot rows ``snap``, then its first
    log-phase record among all ``rows``. Neither counts when
    snapshot rows follow it in its partition (they are part of the snapshot still); a log
    record does not count while an alert is open; in a re-snapshot both obey the order rule.

    >>> rows = [RowGroup("cdc", 0, "true", 5, 4, 10), RowGroup("cdc", 0, "last", 1, 5, 11)]
    >>> _in_band(rows, rows, SnapshotOptions(), None, _Order(newest=11, in_band=False), [])
    [('last', "'last' record at cdc[0]@5", 11, False)]
    >>> notes = []
    >>> late = [RowGroup("cdc", 0, "false", 1, 3, 9), RowGroup("cdc", 0, "true", 5, 4, 10)]
    >>> _in_band(late, late[1:], SnapshotOptions(), None, _Order(10, False), notes), notes
    ([], ['log record at cdc[0]@3: snapshot rows follow it'])
    """
    top_snapshot: dict[tuple[str, int], int] = {}
    for g in snap:
        tp = (g.topic, g.partition)
        top_snapshot[tp] = max(top_snapshot.get(tp, -1), g.max_offset)
    ordered_rows = sorted(rows, key=lambda g: (g.topic, g.partition, g.phase))
    seen: list[_Seen] = []
    if options.active("last"):
        # the run's own snapshot rows: a replayed `last` of the completed snapshot, beside a
        # new run's rows, is not part of the new run (_new_snapshot_rows noted it)
        for g in sorted(snap, key=lambda g: (g.topic, g.partition, g.phase)):
            if g.phase not in ("last", "last_in_data_collection"):
                continue
            where = f"{g.topic}[{g.partition}]@{g.max_offset}"
            if g.max_offset < top_snapshot[(g.topic, g.partition)]:
                ignored.append(f"'{g.phase}' at {where}: snapshot rows follow it")
            elif order.in_band and not order.admits(g.max_ts_ms):
                ignored.append(f"'{g.phase}' at {where}: older than the re-snapshot's rows")
            else:
                seen.append((g.phase, f"'{g.phase}' record at {where}", g.max_ts_ms, False))
    if options.active("log_record"):
        for g in ordered_rows:
            if g.phase != "false":
                continue
            where = f"{g.topic}[{g.partition}]@{g.max_offset}"
            if g.max_offset < top_snapshot.get((g.topic, g.partition), -1):
                ignored.append(f"log record at {where}: snapshot rows follow it")
            elif order.in_band and not order.admits(g.max_ts_ms):
                ignored.append(f"log record at {where}: older than the re-snapshot's rows")
            elif alert is not None:
                ignored.append(f"log record at {where}: snapshot alert open ({alert})")
            else:
                seen.append(("log_record", f"log-phase record at {where}", g.max_ts_ms, False))
                break
    return seen


def _evidence(
    seen: list[_Seen],
    positions: Offsets,
    probe: OffsetsProbe | None,
    batch_id: int,
    order: _Order,
) -> list[SignalEvidence]:
    """Phase 6: what each signal seen covers: the offsets consumed once the batch commits,
    raised to the data topics' high watermarks read now (the probe is asked once, and only
    when the batch has a signal), so every record produced before the signal lies below.

    >>> ev = _evidence([("last", "'last' record", 11, False)], {"cdc": {"0": 6}},
    ...                lambda: {"cdc": {"0": 9}}, 4, _Order(newest=11, in_band=False))
    >>> ev[0].covered, ev[0].batch_id, ev[0].ordered
    ({'cdc': {'0': 9}}, 4, False)
    """
    covered: Offsets | None = None
    new: list[SignalEvidence] = []
    for signal, detail, ts, ordered in seen:
        if covered is None:
            covered = merge_offsets(positions, probe() if probe is not None else None)
        new.append(
            SignalEvidence(
                signal=signal,
                detail=detail,
                covered=covered,
                batch_id=batch_id,
                kafka_ts_ms=ts,
                ordered=ordered or order.in_band,
            )
        )
    return new


def _choose(
    candidates: list[SignalEvidence],
    positions: Offsets,
    order: _Order,
    ignored: list[str],
) -> tuple[list[SignalEvidence], SignalEvidence | None]:
    """Phase 7: the pending signals after the batch, and the one that fires, if any.

    A pending signal bound by the order rule is dropped once newer snapshot rows came. Per
    signal kind, the oldest still in order (it covers the fewest offsets, so it fires first)
    and the newest (the last to go stale: ``TABLE_SCAN_COMPLETED`` precedes the table's final
    row, which Debezium holds back, and ``COMPLETED`` follows it; read in one batch before that
    row, only ``COMPLETED`` survives the row) are kept; any in between is dominated. The
    strongest signal whose covered offsets are all consumed fires.

    >>> a = SignalEvidence(signal="heartbeat", detail="h", covered={"cdc": {"0": 5}}, batch_id=1)
    >>> b = SignalEvidence(signal="last", detail="l", covered={"cdc": {"0": 3}}, batch_id=2)
    >>> pending, fire = _choose([a, b], {"cdc": {"0": 4}}, _Order(None, False), [])
    >>> [p.signal for p in pending], fire.signal
    (['heartbeat', 'last'], 'last')
    """
    kept: list[SignalEvidence] = []
    for p in candidates:
        if p.ordered and not order.admits(p.kafka_ts_ms):
            ignored.append(f"pending {p.signal} ({p.detail}) dropped: newer snapshot rows came")
        else:
            kept.append(p)
    pending = [
        p
        for i, p in enumerate(kept)
        if all(q.signal != p.signal for q in kept[:i])
        or all(q.signal != p.signal for q in kept[i + 1 :])
    ]
    ready = [p for p in pending if not uncovered(positions, p.covered)]
    fire = min(ready, key=lambda p: (SIGNAL_RANK.get(p.signal, 9), p.batch_id)) if ready else None
    return pending, fire


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
