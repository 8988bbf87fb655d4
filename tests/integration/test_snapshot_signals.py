"""Snapshot signals through the build sink and the join, on real Spark and real Delta tables.

Micro-batches are handed to ``BuildSink.process`` directly, as DataFrames in the sources' raw
schema (data topic, notification topic): the recorded message sequences of a parallel
snapshot, an empty table, a signal held back by unread offsets, a crash between data and
marker, a re-snapshot, an incremental snapshot and an operator's override. The signals on
their own Kafka topics, through the real broker, are in test_snapshot_signals_broker.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from helpers import data_commit_of_batch
from pyspark.sql.types import StructType
from typer.testing import CliRunner

from lakehouse import delta
from lakehouse.cli import app
from lakehouse.dimension import BuildSink, BuildTarget, SnapshotOptions, snapshot_status
from lakehouse.dimension.layout import (
    KAFKA_TOPIC,
    PROP_PRIMARY_KEY,
    PROP_SNAPSHOT_ALERT,
    PROP_SNAPSHOT_COMPLETE,
    PROP_SNAPSHOT_COMPLETED_VERSION,
    PROP_SNAPSHOT_COVERED_OFFSETS,
    PROP_SNAPSHOT_FIRST_COMPLETED_VERSION,
    PROP_SNAPSHOT_LAST_COMPLETE,
    PROP_SNAPSHOT_LAST_NOTIFICATION,
    PROP_SNAPSHOT_REASON,
    PROP_SNAPSHOT_RESNAPSHOT_FROM,
    PROP_SNAPSHOT_SIGNAL,
    PROP_SNAPSHOT_SIGNAL_DETAIL,
    PROP_SNAPSHOT_STATE,
    SYNTHETIC_DELETE_TOPIC,
)
from lakehouse.dimension.marker import complete_at
from lakehouse.join import JoinOptions, TemporalJoin, read_build_channel
from lakehouse.sources.schema import RAW_SCHEMA_DDL
from lakehouse.testing import DebeziumTable

pytestmark = pytest.mark.spark

DATA = "dbserver1.public.rates"
NOTES = "debezium-notifications"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    """Kafka record timestamps: strictly increasing, in production order."""

    def __init__(self) -> None:
        self.now = T0

    def tick(self) -> datetime:
        self.now += timedelta(milliseconds=10)
        return self.now


def _raw(spark, records):
    """``records``: ``(topic, partition, offset, key_bytes, value_bytes, timestamp)``."""
    rows = [(k, v, t, p, o, ts, 0) for t, p, o, k, v, ts in records]
    return spark.createDataFrame(rows, StructType.fromDDL(RAW_SCHEMA_DDL))


class Stream:
    """Assigns offsets per topic-partition and timestamps in production order."""

    def __init__(self) -> None:
        self.next: dict[tuple[str, int], int] = {}
        self.clock = Clock()

    def records(self, messages, *, topic=DATA, partition=0):
        out = []
        for m in messages:
            offset = self.next.get((topic, partition), 0)
            self.next[(topic, partition)] = offset + 1
            key, value = (m.key_bytes(), m.value_bytes()) if hasattr(m, "key_bytes") else m
            out.append((topic, partition, offset, key, value, self.clock.tick()))
        return out


def notification(kind, collection=None, *, status="SUCCEEDED"):
    extra = {"connector_name": "dbserver1"}
    if collection is not None:
        extra |= {"scanned_collection": collection, "status": status, "total_rows_scanned": "1"}
    value = {
        "id": f"n-{kind}-{collection}",
        "aggregate_type": "Initial Snapshot",
        "type": kind,
        "additional_data": extra,
        "timestamp": 1_767_225_600_000,
    }
    return (json.dumps({"id": value["id"]}).encode(), json.dumps(value).encode())


def _rates(**kw) -> DebeziumTable:
    return DebeziumTable(
        "public", kw.pop("table", "rates"), key="currency", start_ms=1_700_000_000_000, **kw
    )


def _target(tmp, name="rates", key=(), **options) -> BuildTarget:
    return BuildTarget(
        str(tmp / name),
        key_columns=key,
        source_table=f"public.{name}",
        snapshot=SnapshotOptions(**options),
    )


def _sink(tmp, *targets, **kw) -> BuildSink:
    return BuildSink(targets, dead_letter_table=str(tmp / "dlq"), pipeline_id="ingest", **kw)


def _props(uri):
    return delta.get_properties(uri)


def _join(tmp, build_table) -> TemporalJoin:
    return TemporalJoin(
        JoinOptions(
            build_table=build_table,
            output_table=str(tmp / "out"),
            pending_table=str(tmp / "pending"),
            dead_letter_table=str(tmp / "join_dlq"),
            pipeline_id="join",
            probe_schema="id bigint, currency string",
            probe_key=("currency",),
            probe_id="id",
            mode="proctime",
            join_type="left",
            watermark="none",
        )
    )


def _orders(spark, stream, ids_currencies):
    return _raw(
        spark,
        stream.records(
            [(None, json.dumps({"id": i, "currency": c}).encode()) for i, c in ids_currencies],
            topic="orders",
        ),
    )


def _released(spark, tmp, batch):
    out = delta.read(spark, str(tmp / "out")).filter(f"_batch_id = {batch}").collect()
    return sorted(
        (r.currency, None if r.rate is None else str(r.rate), r._build_version) for r in out
    )


# ----------------------------------------------------------------------------- the cases


def test_parallel_snapshot_over_two_partitions_ends_with_last_in_data_collection(spark, tmp_path):
    # snapshot.max.threads > 1: no first/last; the table's rows over two partitions
    t, s = _rates(), Stream()
    msgs = [t._message("r", None, {"currency": c, "rate": "1"}, "true") for c in "ABCD"]
    end = t._message("r", None, {"currency": "E", "rate": "1"}, "last_in_data_collection")
    sink = _sink(tmp_path, _target(tmp_path))
    uri = str(tmp_path / "rates")
    r0 = sink.process(_raw(spark, s.records(msgs[:2]) + s.records(msgs[2:3], partition=1)), 0)
    assert r0.targets[0].phase == "loading" and not r0.targets[0].snapshot_complete
    r1 = sink.process(_raw(spark, s.records([msgs[3], end], partition=1)), 1)
    assert r1.targets[0].marker_set_now and r1.targets[0].signal == "last_in_data_collection"
    props = _props(uri)
    assert json.loads(props[PROP_SNAPSHOT_COVERED_OFFSETS]) == {DATA: {"0": 2, "1": 3}}
    assert delta.read(spark, uri, version=int(props[PROP_SNAPSHOT_COMPLETED_VERSION])).count() == 5


def test_signal_waits_until_the_offsets_it_covers_are_committed(spark, tmp_path):
    # The COMPLETED notification is read while partition 1 of the data topic has not been
    # read yet (a rate limit, or a partition seen later): the marker waits for it.
    t, s = _rates(), Stream()
    snap = t.snapshot([{"currency": c, "rate": "1"} for c in "ABC"])  # first, true, last
    p0 = s.records(snap[:2])
    p1 = s.records(snap[2:], partition=1)  # produced, not yet read
    notes = s.records([notification("COMPLETED")], topic=NOTES)
    probe_calls = []

    def probe():
        probe_calls.append(1)
        return {DATA: {"0": 2, "1": 1}}

    target = _target(tmp_path, notification_topic=NOTES, signals=frozenset({"notification"}))
    sink = _sink(tmp_path, target, offsets_probe=probe)
    uri = target.table_uri
    r0 = sink.process(_raw(spark, p0 + notes), 0)
    assert r0.signal_records == 1 and not r0.targets[0].snapshot_complete
    assert r0.targets[0].pending and r0.targets[0].pending[0].startswith("notification")
    assert _props(uri)[PROP_SNAPSHOT_COMPLETE] == "false"
    status = CliRunner().invoke(app, ["snapshot-status", uri])
    shown = " ".join(status.output.split())  # the console wraps lines where paths put words
    assert "pending notification" in shown and '"1": 1' in shown
    r1 = sink.process(_raw(spark, p1), 1)
    assert r1.targets[0].marker_set_now and r1.targets[0].signal == "notification"
    props = _props(uri)
    assert props[PROP_SNAPSHOT_SIGNAL] == "notification"
    assert "COMPLETED" in props[PROP_SNAPSHOT_SIGNAL_DETAIL]
    completed = int(props[PROP_SNAPSHOT_COMPLETED_VERSION])
    assert (
        completed == r1.targets[0].version
        and delta.read(spark, uri, version=completed).count() == 3
    )
    assert len(probe_calls) == 1  # asked once, when the signal was seen


def test_empty_table_is_completed_by_its_notification_and_joins_nothing(spark, tmp_path):
    # Debezium 1.x order: rates, then fees, which is empty. No record ever says 'last'.
    t, s = _rates(), Stream()
    rows = [
        t._message("r", None, {"currency": c, "rate": "1"}, p)
        for c, p in [("A", "first"), ("B", "true")]
    ]
    opts = {"notification_topic": NOTES}
    # an empty table has no Debezium key to learn its key from: configure it
    rates = _target(tmp_path, "rates", **opts)
    fees = _target(tmp_path, "fees", key=("currency",), **opts)
    sink = _sink(tmp_path, rates, fees)
    r0 = sink.process(
        _raw(spark, s.records(rows) + s.records([notification("STARTED")], topic=NOTES)), 0
    )
    assert [x.phase for x in r0.targets] == ["loading", "loading"]
    # every configured table exists from the ingest's first batch: fees, still loading, has
    # no rows and says what would end its snapshot
    assert delta.row_count(fees.table_uri) == 0
    assert _props(fees.table_uri)[PROP_SNAPSHOT_COMPLETE] == "false"
    waiting = dict(snapshot_status(fees.table_uri).rows())["waiting for"]
    assert waiting.startswith(f"a Debezium notification on {NOTES}: COMPLETED or "), waiting
    status = CliRunner().invoke(app, ["snapshot-status", fees.table_uri])
    assert status.exit_code == 0 and "waiting for" in " ".join(status.output.split())
    scans = [
        notification("TABLE_SCAN_COMPLETED", "shop.public.rates"),
        (b"k", b"{not a notification"),  # unreadable: a dead letter, the others still count
        notification("TABLE_SCAN_COMPLETED", "shop.public.fees"),
    ]
    r1 = sink.process(_raw(spark, s.records(scans, topic=NOTES)), 1)
    assert [(x.phase, x.signal) for x in r1.targets] == [("complete", "notification")] * 2
    assert r1.dead_lettered == 1 and r1.errors_by_kind == {"invalid_signal": 1}
    [dead] = delta.read(spark, str(tmp_path / "dlq")).collect()
    assert (dead._error_kind, dead._topic, dead._offset) == ("invalid_signal", NOTES, 2)
    assert bytes(dead._raw_value) == b"{not a notification" and bytes(dead._raw_key) == b"k"
    assert dead._error.startswith("notification: "), dead._error
    assert delta.row_count(fees.table_uri) == 0
    assert (
        "TABLE_SCAN_COMPLETED shop.public.fees"
        in _props(fees.table_uri)[PROP_SNAPSHOT_SIGNAL_DETAIL]
    )

    # a processing-time join against the empty dimension releases its rows, unmatched
    join = _join(tmp_path, fees.table_uri)
    report = join.process(_orders(spark, s, [(1, "A")]), 0)
    assert report.released == 1 and report.matched == 0

    # the first fees row brings the columns and the key
    fee = _rates(table="fees")
    sink.process(_raw(spark, s.records([fee.insert({"currency": "A", "rate": "0.5"})])), 2)
    assert _props(fees.table_uri)[PROP_PRIMARY_KEY] == "currency"
    assert [r.currency for r in delta.read(spark, fees.table_uri).collect()] == ["A"]


def test_crash_between_data_and_marker_heals_with_the_signal_and_its_offsets(
    spark, tmp_path, monkeypatch
):
    import lakehouse.dimension.sink as sink_module

    t, s = _rates(), Stream()
    rows = t.snapshot([{"currency": c, "rate": "1"} for c in "AB"])
    batch = _raw(spark, s.records(rows[:1]) + s.records([notification("COMPLETED")], topic=NOTES))
    target = _target(tmp_path, notification_topic=NOTES, signals=frozenset({"notification"}))

    def crash(*args, **kwargs):
        raise RuntimeError("killed after the data commit")

    monkeypatch.setattr(sink_module, "set_marker", crash)
    with pytest.raises(RuntimeError):
        _sink(tmp_path, target).process(batch, 0)
    assert _props(target.table_uri)[PROP_SNAPSHOT_COMPLETE] == "false"
    monkeypatch.undo()
    assert _sink(tmp_path, target).process(batch, 0).skipped  # restart: replayed batch
    props = _props(target.table_uri)
    assert props[PROP_SNAPSHOT_COMPLETE] == "true" and props[PROP_SNAPSHOT_SIGNAL] == "notification"
    assert json.loads(props[PROP_SNAPSHOT_COVERED_OFFSETS]) == {DATA: {"0": 1}}


def test_resnapshot_pins_the_join_to_the_last_complete_version_then_ends_unread_keys(
    spark, tmp_path
):
    t, s = _rates(), Stream()
    target = _target(tmp_path)
    uri = target.table_uri
    sink = _sink(tmp_path, target)
    join = _join(tmp_path, uri)
    snap = t.snapshot(
        [
            {"currency": c, "rate": r}
            for c, r in [("EUR", "1.08"), ("GBP", "1.27"), ("JPY", "0.0067")]
        ]
    )
    sink.process(_raw(spark, s.records([*snap, t.update({"currency": "EUR", "rate": "1.09"})])), 0)
    assert _props(uri)[PROP_SNAPSHOT_SIGNAL] == "last"
    complete_version = delta.latest_version(uri)

    # The connector restarts with snapshot.mode=always after a downtime in which EUR changed
    # and JPY was deleted. The re-snapshot re-reads EUR, then GBP.
    t.advance(3_600_000)
    again = t.snapshot([{"currency": "EUR", "rate": "1.10"}, {"currency": "GBP", "rate": "1.27"}])
    r1 = sink.process(_raw(spark, s.records(again[:1])), 1)
    assert r1.targets[0].resnapshot_started and r1.targets[0].phase == "resnapshot"
    props = _props(uri)
    assert props[PROP_SNAPSHOT_COMPLETE] == "false" and props[PROP_SNAPSHOT_STATE] == "resnapshot"
    assert int(props[PROP_SNAPSHOT_LAST_COMPLETE]) == complete_version
    # no version holds re-read rows under a complete marker
    first_reread = int(props[PROP_SNAPSHOT_RESNAPSHOT_FROM])
    assert first_reread == complete_version + 1
    assert _props(uri)[PROP_SNAPSHOT_COMPLETE] == "false"
    channel = read_build_channel(uri)
    assert channel.resnapshot and channel.snapshot_complete and channel.version == complete_version

    # the processing-time join keeps joining the complete dimension from before the re-read
    join.process(_orders(spark, s, [(1, "EUR"), (2, "JPY")]), 0)
    assert _released(spark, tmp_path, 0) == [
        ("EUR", "1.0900", complete_version),
        ("JPY", "0.0067", complete_version),
    ]

    # a compaction of small files during the re-snapshot moves every row into new files:
    # which keys the re-snapshot re-read must not depend on the files that hold them
    assert delta.compact_files(uri) is not None
    r2 = sink.process(_raw(spark, s.records(again[1:])), 2)  # GBP, 'last'
    assert r2.targets[0].marker_set_now and r2.targets[0].signal == "last"
    assert r2.targets[0].synthetic_deletes == 1  # JPY was not re-read: gone from the source
    ghost = delta.read(spark, uri).filter(f"{KAFKA_TOPIC} = '{SYNTHETIC_DELETE_TOPIC}'").collect()
    assert [(g.currency, g._op, g.rate) for g in ghost] == [("JPY", "d", None)]
    assert read_build_channel(uri).version == delta.latest_version(uri)

    join.process(_orders(spark, s, [(3, "EUR"), (4, "JPY"), (5, "GBP")]), 1)
    latest = delta.latest_version(uri)
    assert _released(spark, tmp_path, 1) == [
        ("EUR", "1.1000", latest),
        ("GBP", "1.2700", latest),
        ("JPY", None, latest),
    ]
    # every version a processing-time row was joined against had the marker set
    versions = {r._build_version for r in delta.read(spark, str(tmp_path / "out")).collect()}
    assert versions == {complete_version, latest}
    assert all(complete_at(uri, v) for v in versions)
    assert int(_props(uri)[PROP_SNAPSHOT_FIRST_COMPLETED_VERSION]) == data_commit_of_batch(uri, 0)


def test_incremental_snapshot_never_clears_the_marker_nor_overwrites_a_newer_change(
    spark, tmp_path
):
    t, s = _rates(), Stream()
    target = _target(tmp_path)
    sink = _sink(tmp_path, target)
    sink.process(_raw(spark, s.records(t.snapshot([{"currency": "EUR", "rate": "1.08"}]))), 0)
    t.advance(60_000)
    read_at = t.now_ms
    t.advance(1_000)
    update = t.update({"currency": "EUR", "rate": "1.12"})
    # the incremental snapshot read EUR before the update, but its row arrives after it
    t.now_ms = read_at
    chunk = t._message("r", None, {"currency": "EUR", "rate": "1.08"}, "incremental")
    r = sink.process(_raw(spark, s.records([update, chunk])), 1)
    assert not r.targets[0].resnapshot_started and r.targets[0].phase == "complete"
    assert _props(target.table_uri)[PROP_SNAPSHOT_COMPLETE] == "true"
    join = _join(tmp_path, target.table_uri)
    join.process(_orders(spark, s, [(1, "EUR")]), 0)
    assert [x[:2] for x in _released(spark, tmp_path, 0)] == [("EUR", "1.1200")]


def test_aborted_is_surfaced_and_the_operator_override_is_recorded_with_its_reason(spark, tmp_path):
    t, s = _rates(), Stream()
    target = _target(tmp_path, notification_topic=NOTES)
    sink = _sink(tmp_path, target)
    rows = t.snapshot([{"currency": c, "rate": "1"} for c in "ABC"])[:2]
    r = sink.process(
        _raw(spark, s.records(rows) + s.records([notification("ABORTED")], topic=NOTES)), 0
    )
    assert r.targets[0].alert is not None and r.targets[0].alert.startswith("ABORTED")
    props = _props(target.table_uri)
    assert props[PROP_SNAPSHOT_COMPLETE] == "false" and props[PROP_SNAPSHOT_ALERT].startswith(
        "ABORTED"
    )
    assert json.loads(props[PROP_SNAPSHOT_LAST_NOTIFICATION])["type"] == "ABORTED"
    runner = CliRunner()
    status = runner.invoke(app, ["snapshot-status", target.table_uri])
    assert status.exit_code == 0 and "ALERT" in status.output and "ABORTED" in status.output

    done = runner.invoke(
        app, ["snapshot-complete", target.table_uri, "--reason", "loaded by hand from a dump"]
    )
    assert done.exit_code == 0, done.output
    props = _props(target.table_uri)
    assert props[PROP_SNAPSHOT_SIGNAL] == "operator" and props[PROP_SNAPSHOT_ALERT] == ""
    assert props[PROP_SNAPSHOT_REASON] == "loaded by hand from a dump"
    assert json.loads(props[PROP_SNAPSHOT_COVERED_OFFSETS]) == {DATA: {"0": 2}}
    newest = delta.history(target.table_uri, limit=1)[0]
    assert newest.metadata["lakehouse.reason"] == "loaded by hand from a dump"
    again = runner.invoke(app, ["snapshot-complete", target.table_uri, "--reason", "twice"])
    # the console wraps the line where the table's path puts its words
    assert "already complete" in " ".join(again.output.split())
