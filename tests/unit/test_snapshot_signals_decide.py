"""The snapshot-signal decision (lakehouse.dimension.signals) on recorded message sequences.

Pure Python: each scenario is the per-batch evidence a Debezium stream gives one build table
(its rows grouped by topic-partition and ``source.snapshot``, the notifications and heartbeats
of its signal topics), fed batch by batch through ``decide``, with the state carried between
batches through its JSON form as the sink carries it through commit metadata.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from lakehouse.dimension.signals import (
    BatchEvidence,
    Decision,
    Heartbeat,
    Notification,
    RowGroup,
    SignalState,
    SnapshotOptions,
    decide,
    merge_offsets,
    parse_heartbeat,
    parse_notification,
    planned_offsets,
    uncovered,
)
from lakehouse.errors import ConfigError

TOPIC = "dbserver1.public.rates"
NOTES = "debezium-notifications"
BEATS = "__debezium-heartbeat.dbserver1"
BOTH = SnapshotOptions(notification_topic=NOTES, heartbeat_topic=BEATS)


def rows(*specs: tuple[str, int, int, int], topic: str = TOPIC, partition: int = 0):
    """Row groups ``(phase, count, max_offset, max_ts)`` of one partition."""
    return tuple(RowGroup(topic, partition, ph, n, off, ts) for ph, n, off, ts in specs)


def note(kind: str, ts: int, offset: int = 0, *, collection=None, status=None, aggregate=None):
    return Notification(
        f"id-{offset}",
        aggregate or "Initial Snapshot",
        kind,
        collection,
        status,
        ts,
        NOTES,
        0,
        offset,
        ts,
    )


def beat(ts: int, offset: int = 0) -> Heartbeat:
    return Heartbeat(BEATS, 0, offset, ts, ts)


@dataclass
class Table:
    """One build table as the sink sees it: its phase (properties) and its bookkeeping."""

    options: SnapshotOptions = field(default_factory=SnapshotOptions)
    source_table: str | None = "public.rates"
    phase: str = "loading"
    state: SignalState = field(default_factory=SignalState)
    marker_signal: str | None = None
    completed_at_ms: int | None = None
    batch: int = 0

    def feed(self, consumed: dict, *, probe=None, **evidence) -> Decision:
        d = decide(
            phase=self.phase,
            prior=self.state,
            batch=BatchEvidence(**evidence),
            options=self.options,
            source_table=self.source_table,
            batch_id=self.batch,
            positions=merge_offsets(self.state.positions, consumed),
            probe=probe,
            marker_signal=self.marker_signal,
            completed_at_ms=self.completed_at_ms,
        )
        self.batch += 1
        self.state = SignalState.from_json(d.state.to_json())  # as through commit metadata
        if d.fire is not None:
            self.phase = "complete"
            self.marker_signal = d.fire.signal
        elif d.start_resnapshot:
            self.phase = "resnapshot"
        return d


# ------------------------------------------------------------------------- in-band signals


def test_last_record_sets_marker_covering_what_was_consumed():
    t = Table()
    d = t.feed({TOPIC: {"0": 2}}, rows=rows(("first", 1, 0, 10), ("true", 1, 1, 11)))
    assert d.fire is None and t.phase == "loading"
    d = t.feed({TOPIC: {"0": 3}}, rows=rows(("last", 1, 2, 12)))
    assert d.fire is not None and d.fire.signal == "last"
    assert d.fire.covered == {TOPIC: {"0": 3}}
    assert t.phase == "complete"


def test_last_followed_by_snapshot_rows_in_its_partition_does_not_count():
    # the 'last' of one snapshot, then a new snapshot's rows, in one batch
    t = Table()
    d = t.feed({TOPIC: {"0": 5}}, rows=rows(("last", 1, 2, 12), ("first", 1, 3, 20)))
    assert d.fire is None and t.phase == "loading"
    assert any("snapshot rows follow it" in why for why in d.ignored)


def test_parallel_snapshot_ends_on_last_in_data_collection():
    # snapshot.max.threads > 1: no 'first'/'last', only 'true' and '*_in_data_collection'
    t = Table()
    t.feed({TOPIC: {"0": 3}}, rows=rows(("first_in_data_collection", 1, 0, 10), ("true", 2, 2, 11)))
    assert t.phase == "loading"
    d = t.feed({TOPIC: {"0": 4}}, rows=rows(("last_in_data_collection", 1, 3, 12)))
    assert d.fire.signal == "last_in_data_collection"


def test_parallel_snapshot_without_end_record_waits_for_the_first_log_record():
    t = Table()
    t.feed({TOPIC: {"0": 3}}, rows=rows(("true", 3, 2, 10)))
    assert t.phase == "loading"
    d = t.feed({TOPIC: {"0": 4}}, rows=rows(("false", 1, 3, 50)))
    assert d.fire.signal == "log_record" and t.phase == "complete"


def test_log_record_before_snapshot_rows_in_its_partition_does_not_count():
    t = Table()
    d = t.feed({TOPIC: {"0": 3}}, rows=rows(("false", 1, 0, 5), ("true", 2, 2, 10)))
    assert d.fire is None


def test_empty_last_table_leaves_other_tables_without_last():
    # Debezium 1.x: 'last' rides on the last row of the last table; it is empty, so the
    # rates table (snapshotted before it) ends with 'true' and never sees 'last'.
    t = Table(options=SnapshotOptions(signals=frozenset({"last"})))
    t.feed({TOPIC: {"0": 3}}, rows=rows(("first", 1, 0, 10), ("true", 2, 2, 11)))
    t.feed({TOPIC: {"0": 4}}, rows=rows(("false", 1, 3, 60)))  # log records: disabled
    assert t.phase == "loading" and t.state.pending == ()


def test_disabled_signal_does_not_set_the_marker():
    t = Table(options=SnapshotOptions(signals=frozenset({"notification"})))
    t.feed({TOPIC: {"0": 2}}, rows=rows(("first", 1, 0, 10), ("last", 1, 1, 11)))
    assert t.phase == "loading"


# ---------------------------------------------------------------------- out-of-band signals


def test_table_scan_completed_for_this_table_sets_marker_and_for_another_does_not():
    t = Table(options=BOTH)
    t.feed({TOPIC: {"0": 3}}, rows=rows(("first", 1, 0, 10), ("true", 2, 2, 12)))
    d = t.feed({}, notifications=(note("TABLE_SCAN_COMPLETED", 20, 1, collection="public.fees"),))
    assert d.fire is None and t.phase == "loading"
    scan = note("TABLE_SCAN_COMPLETED", 21, 2, collection="shop.public.rates", status="SUCCEEDED")
    d = t.feed({}, notifications=(scan,))
    assert d.fire.signal == "notification"
    assert "TABLE_SCAN_COMPLETED shop.public.rates" in d.fire.detail
    assert d.notification["type"] == "TABLE_SCAN_COMPLETED"


def test_completed_notification_sets_marker_of_a_table_taking_every_source_table():
    t = Table(options=BOTH, source_table=None)
    t.feed({TOPIC: {"0": 2}}, rows=rows(("true", 2, 1, 10)))
    scan = note("TABLE_SCAN_COMPLETED", 20, 1, collection="public.rates")
    assert t.feed({}, notifications=(scan,)).fire is None  # which table? not enough
    assert t.feed({}, notifications=(note("COMPLETED", 21, 2),)).fire.signal == "notification"


def test_incremental_snapshot_notifications_are_ignored():
    t = Table(options=BOTH)
    d = t.feed({}, notifications=(note("COMPLETED", 5, aggregate="Incremental Snapshot"),))
    assert d.fire is None and d.notification is None


def test_notification_older_than_the_snapshot_rows_is_stale():
    # a COMPLETED of an earlier connector run, read in the same batch as new snapshot rows
    t = Table(options=BOTH)
    d = t.feed(
        {TOPIC: {"0": 2}},
        rows=rows(("first", 1, 0, 100), ("true", 1, 1, 101)),
        notifications=(note("COMPLETED", 50),),
    )
    assert d.fire is None and t.phase == "loading"


def test_heartbeat_after_the_snapshot_sets_marker_and_an_older_one_does_not():
    t = Table(options=BOTH)
    t.feed({TOPIC: {"0": 2}}, rows=rows(("first", 1, 0, 100), ("true", 1, 1, 101)))
    assert t.feed({}, heartbeats=(beat(90),)).fire is None  # before the rows: an old run's
    d = t.feed({}, heartbeats=(beat(130, 1), beat(140, 2)))
    assert d.fire.signal == "heartbeat" and d.fire.detail == f"heartbeat at {BEATS}[0]@1"


def test_signal_stays_pending_until_the_covered_offsets_are_consumed():
    # rate-limited: the heartbeat is read while partition 1 of the data topic lags behind
    t = Table(options=BOTH)
    t.feed({TOPIC: {"0": 2}}, rows=rows(("true", 2, 1, 10)))
    high = {TOPIC: {"0": 2, "1": 3}}
    d = t.feed({}, heartbeats=(beat(30),), probe=lambda: high)
    assert d.fire is None and [p.signal for p in t.state.pending] == ["heartbeat"]
    assert uncovered(t.state.positions, t.state.pending[0].covered) == {TOPIC: {"1": 3}}
    d = t.feed({TOPIC: {"1": 2}}, rows=rows(("true", 2, 1, 12), partition=1))
    assert d.fire is None  # one row of partition 1 still to come
    d = t.feed({TOPIC: {"1": 3}}, rows=rows(("true", 1, 2, 13), partition=1))
    assert d.fire.signal == "heartbeat" and d.fire.batch_id == 1
    assert d.fire.covered == high


def test_partition_seen_later_holds_the_signal_back():
    t = Table(options=BOTH)
    t.feed({TOPIC: {"0": 2}}, rows=rows(("true", 2, 1, 10)))
    # the probe shows a partition the stream has not read yet
    d = t.feed({}, notifications=(note("COMPLETED", 40),), probe=lambda: {TOPIC: {"2": 1}})
    assert d.fire is None
    assert t.feed({TOPIC: {"2": 1}}, rows=rows(("true", 1, 0, 11), partition=2)).fire is not None


def test_newer_snapshot_rows_drop_a_pending_heartbeat():
    t = Table(options=BOTH)
    t.feed({TOPIC: {"0": 1}}, rows=rows(("true", 1, 0, 10)))
    t.feed({}, heartbeats=(beat(30),), probe=lambda: {TOPIC: {"0": 2}})
    assert t.state.pending
    d = t.feed({TOPIC: {"0": 2}}, rows=rows(("true", 1, 1, 45)))  # produced after it
    assert d.fire is None and t.state.pending == ()


def test_a_later_notification_of_the_same_batch_ends_the_snapshot_when_an_earlier_goes_stale():
    # Debezium holds the table's final row back until the whole snapshot ends, so
    # TABLE_SCAN_COMPLETED is produced before it and COMPLETED after it. Read in one batch
    # while the final row is not yet readable, both are pending; the row then makes the scan
    # notification stale, and COMPLETED (kept, not folded into the older one) ends the snapshot.
    t = Table(
        options=SnapshotOptions(notification_topic=NOTES, signals=frozenset({"notification"}))
    )
    t.feed({TOPIC: {"0": 999}}, rows=rows(("first", 1, 0, 10), ("true", 998, 998, 100)))
    scan = note("TABLE_SCAN_COMPLETED", 110, 2, collection="public.rates", status="SUCCEEDED")
    d = t.feed(
        {},
        notifications=(scan, note("COMPLETED", 120, 3)),
        probe=lambda: {TOPIC: {"0": 1000}},
    )
    assert d.fire is None  # the final row is not consumed yet
    d = t.feed({TOPIC: {"0": 1000}}, rows=rows(("last", 1, 999, 115)))
    assert d.fire is not None and d.fire.signal == "notification"
    assert "COMPLETED" in d.fire.detail and "TABLE_SCAN" not in d.fire.detail
    assert any("dropped: newer snapshot rows came" in why for why in d.ignored)


def test_strongest_ready_signal_is_recorded():
    t = Table(options=BOTH)
    d = t.feed(
        {TOPIC: {"0": 3}},
        rows=rows(("first", 1, 0, 10), ("true", 1, 1, 11), ("last", 1, 2, 12)),
        notifications=(note("COMPLETED", 13),),
        heartbeats=(beat(14),),
    )
    assert d.fire.signal == "notification"


# -------------------------------------------------------------------------------- alerts


def test_aborted_opens_an_alert_and_never_sets_the_marker():
    t = Table(options=BOTH)
    t.feed({TOPIC: {"0": 2}}, rows=rows(("first", 1, 0, 10), ("true", 1, 1, 11)))
    d = t.feed({}, notifications=(note("ABORTED", 20),))
    assert d.fire is None and d.alert_changed and t.state.alert.startswith("ABORTED")
    # neither the heartbeat Debezium sends afterwards nor log records end the snapshot
    d = t.feed({TOPIC: {"0": 3}}, rows=rows(("false", 1, 2, 40)), heartbeats=(beat(41),))
    assert d.fire is None and t.phase == "loading"
    # the connector restarts and snapshots again
    t.feed({}, notifications=(note("STARTED", 50, 1),))
    assert t.state.alert is None
    t.feed({TOPIC: {"0": 5}}, rows=rows(("first", 1, 3, 51), ("true", 1, 4, 52)))
    d = t.feed({}, notifications=(note("COMPLETED", 60, 2),))
    assert d.fire.signal == "notification"


def test_skipped_snapshot_is_surfaced_and_its_heartbeat_does_not_set_the_marker():
    t = Table(options=BOTH)
    d = t.feed({}, notifications=(note("SKIPPED", 20),), heartbeats=(beat(21),))
    assert d.fire is None and t.state.alert.startswith("SKIPPED")
    assert any("alert open" in why for why in d.ignored)


def test_a_table_scan_of_an_empty_table_sets_the_marker_and_opens_no_alert():
    # Debezium 3.5 reports an empty table's scan as status EMPTY: a success, not a failure
    t = Table(options=BOTH)
    scan = note("TABLE_SCAN_COMPLETED", 20, collection="public.rates", status="EMPTY")
    d = t.feed({}, notifications=(scan,))
    assert d.fire.signal == "notification" and t.state.alert is None


def test_failed_table_scan_opens_an_alert():
    t = Table(options=BOTH)
    scan = note("TABLE_SCAN_COMPLETED", 20, collection="public.rates", status="SQL_EXCEPTION")
    d = t.feed({}, notifications=(scan,))
    assert d.fire is None and "SQL_EXCEPTION" in t.state.alert


# ---------------------------------------------------------------------------- re-snapshots


def _complete_table(**kw) -> Table:
    t = Table(**kw)
    t.feed(
        {TOPIC: {"0": 3}}, rows=rows(("first", 1, 0, 10), ("last", 1, 1, 11), ("false", 1, 2, 20))
    )
    assert t.phase == "complete"
    return t


def test_snapshot_rows_after_the_marker_start_a_resnapshot_until_its_own_signal():
    t = _complete_table()
    # log records from before the restart, then the re-snapshot; two partitions
    d = t.feed(
        {TOPIC: {"0": 5, "1": 1}},
        rows=rows(("false", 1, 0, 30), partition=1) + rows(("first", 1, 3, 40), ("true", 1, 4, 41)),
    )
    assert d.start_resnapshot and d.fire is None and t.phase == "resnapshot"
    assert any("older than the re-snapshot" in why for why in d.ignored)
    d = t.feed({TOPIC: {"0": 6}}, rows=rows(("last", 1, 5, 42)))
    assert d.fire.signal == "last" and t.phase == "complete"


def test_resnapshot_is_not_ended_by_a_stale_heartbeat():
    t = _complete_table(options=BOTH)
    d = t.feed({TOPIC: {"0": 4}}, rows=rows(("first", 1, 3, 40)), heartbeats=(beat(35),))
    assert d.start_resnapshot and d.fire is None
    assert t.feed({}, heartbeats=(beat(60),)).fire.signal == "heartbeat"


def test_incremental_snapshot_rows_never_clear_or_signal():
    t = _complete_table()
    d = t.feed({TOPIC: {"0": 5}}, rows=rows(("incremental", 2, 4, 50)))
    assert not d.start_resnapshot and t.phase == "complete"
    t = Table()
    t.feed({TOPIC: {"0": 2}}, rows=rows(("incremental", 2, 1, 50)))
    assert t.phase == "loading"


def test_snapshot_stragglers_after_an_operator_override_do_not_start_a_resnapshot():
    t = Table(phase="complete", marker_signal="operator", completed_at_ms=100)
    d = t.feed({TOPIC: {"0": 2}}, rows=rows(("true", 2, 1, 90)))  # read before the override
    assert not d.start_resnapshot and t.phase == "complete"
    d = t.feed({TOPIC: {"0": 3}}, rows=rows(("first", 1, 2, 150)))
    assert d.start_resnapshot


def _positioned(phase, count, offset, ts, seq, source_ts=None):
    """A row group with the connector's position (``_seq``) and ``source.ts_ms``."""
    return RowGroup(TOPIC, 0, phase, count, offset, ts, f"{seq:020d}", source_ts)


def _complete_with_positions() -> Table:
    t = Table()
    t.feed(
        {TOPIC: {"0": 3}},
        rows=(_positioned("first", 2, 1, 10, 100), _positioned("last", 1, 2, 12, 101)),
    )
    assert t.phase == "complete" and t.state.snapshot_seq == f"{101:020d}"
    return t


def test_replayed_snapshot_rows_after_the_marker_are_not_a_resnapshot():
    # byte-identical copies written again (producer retry, connector restarted from older
    # offsets): new offsets and Kafka timestamps, the snapshot's own positions
    t = _complete_with_positions()
    d = t.feed({TOPIC: {"0": 5}}, rows=(_positioned("true", 2, 4, 500, 101),))
    assert not d.start_resnapshot and t.phase == "complete"
    assert any("replays of it" in why for why in d.ignored)
    # the snapshot's position survives the batch (and its JSON form)
    assert t.state.snapshot_seq == f"{101:020d}"
    d = t.feed({TOPIC: {"0": 6}}, rows=(_positioned("first", 1, 5, 600, 180),))
    assert d.start_resnapshot and t.phase == "resnapshot"
    d = t.feed({TOPIC: {"0": 7}}, rows=(_positioned("last", 1, 6, 610, 181),))
    assert d.fire is not None and t.state.snapshot_seq == f"{181:020d}"
    # a replay of the first snapshot is older still than the second's position
    assert not t.feed(
        {TOPIC: {"0": 8}}, rows=(_positioned("true", 1, 7, 700, 150),)
    ).start_resnapshot


def test_a_replayed_last_record_beside_a_new_snapshot_neither_ends_nor_breaks_it():
    # One batch on a complete table: a new snapshot run's rows in partition 0 and, in
    # partition 1, a replay of the completed snapshot's own `last` record. The replay is not
    # part of the new run: it starts nothing, ends nothing, and is noted as a replay.
    t = _complete_with_positions()
    replay = RowGroup(TOPIC, 1, "last", 1, 9, 520, f"{101:020d}")
    d = t.feed({TOPIC: {"0": 5, "1": 10}}, rows=(_positioned("first", 1, 4, 510, 180), replay))
    assert d.start_resnapshot and d.fire is None and t.phase == "resnapshot"
    assert any("replays of it" in why for why in d.ignored)


def test_without_a_position_source_time_tells_a_replay_from_a_new_snapshot():
    t = Table()
    t.feed({TOPIC: {"0": 1}}, rows=(RowGroup(TOPIC, 0, "last", 1, 0, 10, None, 5_000),))
    assert t.phase == "complete" and t.state.snapshot_source_ts_ms == 5_000
    replay = RowGroup(TOPIC, 0, "true", 1, 1, 900, None, 5_000)
    assert not t.feed({TOPIC: {"0": 2}}, rows=(replay,)).start_resnapshot
    again = RowGroup(TOPIC, 0, "first", 1, 2, 901, None, 9_000)
    assert t.feed({TOPIC: {"0": 3}}, rows=(again,)).start_resnapshot


def test_the_resnapshot_share_bound_is_checked():
    with pytest.raises(ConfigError, match="resnapshot_max_ended"):
        SnapshotOptions(resnapshot_max_ended=1.5)


# ------------------------------------------------------------------------------- parsing


def test_notification_variants_parse():
    envelope = (
        b'{"schema": {"type": "struct"}, "payload": {"id": "a", "aggregate_type": '
        b'"Initial Snapshot", "type": "TABLE_SCAN_COMPLETED", "additional_data": '
        b'{"data_collection": "inventory.customers", "total_rows_scanned": "4"}, '
        b'"timestamp": 1695817046353}}'
    )
    n = parse_notification(envelope, topic=NOTES, partition=0, offset=3, kafka_ts_ms=7)
    assert (n.type, n.collection, n.timestamp_ms, n.status) == (
        "TABLE_SCAN_COMPLETED",
        "inventory.customers",
        1695817046353,
        None,
    )
    assert parse_notification(None, topic=NOTES, partition=0, offset=4, kafka_ts_ms=None) is None
    with pytest.raises(ValueError, match="type"):
        parse_notification(b'{"id": 1}', topic=NOTES, partition=0, offset=5, kafka_ts_ms=None)
    with pytest.raises(ValueError, match="not JSON"):
        parse_heartbeat(b"{oops", topic=BEATS, partition=0, offset=0, kafka_ts_ms=None)
    with pytest.raises(ValueError, match="ts_ms"):
        parse_heartbeat(b"{}", topic=BEATS, partition=0, offset=0, kafka_ts_ms=None)


def test_state_survives_its_json_form():
    t = Table(options=BOTH)
    t.feed({TOPIC: {"0": 1}}, rows=rows(("true", 1, 0, 10)))
    t.feed({}, heartbeats=(beat(30),), probe=lambda: {TOPIC: {"0": 9}})
    again = SignalState.from_json(t.state.to_json())
    assert again == t.state and again.pending[0].covered == {TOPIC: {"0": 9}}
    assert SignalState.from_json("{not json") == SignalState()


def test_a_loading_table_records_what_can_end_its_snapshot_and_a_complete_one_does_not():
    t = Table(options=SnapshotOptions(heartbeat_topic=BEATS))  # no notification topic
    t.feed({TOPIC: {"0": 1}}, rows=rows(("true", 1, 0, 10)))
    assert t.state.awaiting == (
        f"a heartbeat on {BEATS}",
        "public.rates's final snapshot record (source.snapshot 'last_in_data_collection' or "
        "'last'; an empty table has none)",
        "public.rates's first change after its snapshot",
    )
    t.feed({TOPIC: {"0": 2}}, rows=rows(("last", 1, 1, 11)))
    assert t.phase == "complete" and t.state.awaiting is None
    nothing = Table(options=SnapshotOptions(signals=frozenset({"notification"})))
    nothing.feed({TOPIC: {"0": 1}}, rows=rows(("true", 1, 0, 10)))
    assert nothing.state.awaiting == ()  # said as "only lakehouse snapshot-complete"


def test_offsets_log_entry_parses():
    text = 'v1\n{"batchWatermarkMs":0}\n{"a": {"0": 5}, "hb": {"0": 2}}\n'
    assert planned_offsets(text) == {"a": {"0": 5}, "hb": {"0": 2}}
    assert planned_offsets('v1\n{}\n{"files": 3, "lastFile": "x"}') is None


def test_bad_options_are_refused():
    with pytest.raises(ConfigError, match="not signals"):
        SnapshotOptions(signals=frozenset({"last", "magic"}))
    with pytest.raises(ConfigError, match="different topics"):
        SnapshotOptions(notification_topic="x", heartbeat_topic="x")
