"""Snapshot signals on their own Kafka topics, through a real Kafka broker and the real
ingest (``start_ingest``, trigger available-now): Debezium notifications, heartbeats, two
tables on two topics, an empty last table, an aborted snapshot.

Each test runs the ingest twice from one checkpoint: once with what Debezium had sent up to a
point, once more after the signal.
"""

from __future__ import annotations

import json

import pytest

from lakehouse import delta
from lakehouse.config import load_settings
from lakehouse.dimension.layout import (
    PROP_SNAPSHOT_ALERT,
    PROP_SNAPSHOT_COMPLETE,
    PROP_SNAPSHOT_COMPLETED_VERSION,
    PROP_SNAPSHOT_COVERED_OFFSETS,
    PROP_SNAPSHOT_LAST_NOTIFICATION,
    PROP_SNAPSHOT_SIGNAL,
    PROP_SNAPSHOT_SIGNAL_DETAIL,
)
from lakehouse.dimension.signals import checkpoint_offsets_reader, kafka_offsets_probe
from lakehouse.runner import start_ingest
from lakehouse.sources.kafka_admin import create_topic, produce
from lakehouse.testing import DebeziumTable

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def notification(kind, collection=None, *, rows="1"):
    extra = {"connector_name": "dbserver1"}
    if collection is not None:
        extra |= {
            "scanned_collection": collection,
            "status": "SUCCEEDED",
            "total_rows_scanned": rows,
        }
    value = {
        "id": f"{kind}-{collection}",
        "aggregate_type": "Initial Snapshot",
        "type": kind,
        "additional_data": extra,
        "timestamp": "1767225600000",
    }
    return json.dumps({"id": value["id"]}).encode(), json.dumps(value).encode(), 0


def heartbeat(ts_ms: int):
    # JsonConverter with schemas.enable=true, as Debezium's heartbeat topic carries it
    key = {"schema": {"type": "struct"}, "payload": {"serverName": "dbserver1"}}
    value = {
        "schema": {"type": "struct", "name": "io.debezium.connector.common.Heartbeat"},
        "payload": {"ts_ms": ts_ms},
    }
    return json.dumps(key).encode(), json.dumps(value).encode(), 0


def _send(broker, topic, messages, partition=0):
    records = [
        m if isinstance(m, tuple) else (m.key_bytes(), m.value_bytes(), partition) for m in messages
    ]
    produce(broker, topic, records)


def _config(tmp_path, broker, topics, tables: str):
    cfg = tmp_path / "lakehouse.toml"
    cfg.write_text(f"""
[kafka]
bootstrap_servers = "{broker}"
[ingest]
pipeline_id = "ingest"
topics = {json.dumps(topics)}
checkpoint = "{tmp_path}/ck"
dead_letter_table = "{tmp_path}/dead_letter"
trigger = "available-now"
{tables}
""")
    return load_settings(cfg)


def _run(spark, settings):
    reports = []
    query = start_ingest(spark, settings, on_batch=reports.append)
    query.awaitTermination()
    assert query.exception() is None
    return reports


def _props(uri):
    return delta.get_properties(uri) if delta.table_exists(uri) else {}


def _table(name: str) -> DebeziumTable:
    return DebeziumTable("public", name, key="currency", start_ms=1_700_000_000_000)


def _rows(t: DebeziumTable, phases):
    return [t._message("r", None, {"currency": c, "rate": "1"}, p) for c, p in phases]


def test_notifications_complete_each_table_including_an_empty_last_one(
    spark, tmp_path, kafka_broker, kafka_topic
):
    data, notes = f"{kafka_topic}-cdc", f"{kafka_topic}-notifications"
    create_topic(kafka_broker, data, 1)
    create_topic(kafka_broker, notes, 1)
    settings = _config(
        tmp_path,
        kafka_broker,
        [data],
        f"""
[[ingest.tables]]
table = "{tmp_path}/rates"
source_table = "public.rates"
notification_topic = "{notes}"
snapshot_signals = ["notification"]
[[ingest.tables]]
table = "{tmp_path}/fees"
source_table = "public.fees"
key = ["currency"]
notification_topic = "{notes}"
snapshot_signals = ["notification"]
""",
    )
    rates, fees = f"{tmp_path}/rates", f"{tmp_path}/fees"
    # Debezium 1.x order: rates, then fees, which is empty, so no record says 'last'
    _send(kafka_broker, notes, [notification("STARTED")])
    _send(
        kafka_broker,
        data,
        _rows(_table("rates"), [("EUR", "first"), ("GBP", "true"), ("JPY", "true")]),
    )
    _send(
        kafka_broker, notes, [notification("TABLE_SCAN_COMPLETED", "shop.public.rates", rows="3")]
    )
    _run(spark, settings)
    props = _props(rates)
    assert props[PROP_SNAPSHOT_COMPLETE] == "true" and props[PROP_SNAPSHOT_SIGNAL] == "notification"
    assert "TABLE_SCAN_COMPLETED shop.public.rates" in props[PROP_SNAPSHOT_SIGNAL_DETAIL]
    assert json.loads(props[PROP_SNAPSHOT_COVERED_OFFSETS]) == {data: {"0": 3}}
    assert delta.row_count(rates, version=int(props[PROP_SNAPSHOT_COMPLETED_VERSION])) == 3
    # its scan has not completed yet: created by the first batch, loading, empty
    assert _props(fees)[PROP_SNAPSHOT_COMPLETE] == "false" and delta.row_count(fees) == 0

    _send(
        kafka_broker,
        notes,
        [
            notification("TABLE_SCAN_COMPLETED", "shop.public.fees", rows="0"),
            notification("COMPLETED"),
        ],
    )
    _run(spark, settings)
    props = _props(fees)
    assert props[PROP_SNAPSHOT_COMPLETE] == "true" and props[PROP_SNAPSHOT_SIGNAL] == "notification"
    assert delta.row_count(fees) == 0
    assert json.loads(props[PROP_SNAPSHOT_LAST_NOTIFICATION])["type"] == "COMPLETED"
    # no signal record reached a build table or the dead-letter table
    assert not delta.table_exists(f"{tmp_path}/dead_letter")


def test_two_tables_on_two_topics_and_a_heartbeat_for_the_one_without_last(
    spark, tmp_path, kafka_broker, kafka_topic
):
    rates_topic, fees_topic = f"{kafka_topic}-rates", f"{kafka_topic}-fees"
    beats = f"__debezium-heartbeat.{kafka_topic}"
    for topic in (rates_topic, fees_topic, beats):
        create_topic(kafka_broker, topic, 1)
    settings = _config(
        tmp_path,
        kafka_broker,
        [rates_topic, fees_topic],
        f"""
[[ingest.tables]]
table = "{tmp_path}/rates"
source_table = "public.rates"
heartbeat_topic = "{beats}"
[[ingest.tables]]
table = "{tmp_path}/fees"
source_table = "public.fees"
heartbeat_topic = "{beats}"
""",
    )
    rates, fees = f"{tmp_path}/rates", f"{tmp_path}/fees"
    # rates is snapshotted first, fees last: 'last' appears only in the fees topic
    _send(
        kafka_broker,
        rates_topic,
        _rows(_table("rates"), [("EUR", "first"), ("GBP", "true"), ("JPY", "true")]),
    )
    _send(kafka_broker, fees_topic, _rows(_table("fees"), [("EUR", "true"), ("GBP", "last")]))
    _run(spark, settings)
    assert _props(fees)[PROP_SNAPSHOT_SIGNAL] == "last"
    assert _props(rates)[PROP_SNAPSHOT_COMPLETE] == "false"  # it never sees 'last'

    _send(kafka_broker, beats, [heartbeat(1_767_225_600_000)])  # right after the snapshot
    reports = _run(spark, settings)
    props = _props(rates)
    assert props[PROP_SNAPSHOT_COMPLETE] == "true" and props[PROP_SNAPSHOT_SIGNAL] == "heartbeat"
    assert json.loads(props[PROP_SNAPSHOT_COVERED_OFFSETS]) == {
        rates_topic: {"0": 3},
        fees_topic: {"0": 2},
    }
    assert sum(r.signal_records for r in reports) == 1
    # what the sink compared: the offsets the stream planned (its offsets log) and the data
    # topics' high watermarks read from the broker
    planned = checkpoint_offsets_reader(f"{tmp_path}/ck")(reports[-1].batch_id)
    assert planned == {beats: {"0": 1}, fees_topic: {"0": 2}, rates_topic: {"0": 3}}
    probe = kafka_offsets_probe(kafka_broker, [rates_topic, fees_topic])
    assert probe() == {fees_topic: {"0": 2}, rates_topic: {"0": 3}}
    assert [t.marker_set_now for r in reports for t in r.targets if t.table_uri == rates] == [True]


def test_aborted_snapshot_is_surfaced_and_the_heartbeat_after_it_sets_nothing(
    spark, tmp_path, kafka_broker, kafka_topic
):
    data, notes = f"{kafka_topic}-cdc", f"{kafka_topic}-notifications"
    beats = f"__debezium-heartbeat.{kafka_topic}"
    for topic in (data, notes, beats):
        create_topic(kafka_broker, topic, 1)
    settings = _config(
        tmp_path,
        kafka_broker,
        [data],
        f"""
[[ingest.tables]]
table = "{tmp_path}/rates"
source_table = "public.rates"
notification_topic = "{notes}"
heartbeat_topic = "{beats}"
""",
    )
    uri = f"{tmp_path}/rates"
    _send(kafka_broker, notes, [notification("STARTED")])
    _send(kafka_broker, data, _rows(_table("rates"), [("EUR", "first"), ("GBP", "true")]))
    _send(kafka_broker, notes, [notification("ABORTED")])
    _send(kafka_broker, beats, [heartbeat(1_767_225_600_000)])
    reports = _run(spark, settings)
    props = _props(uri)
    assert props[PROP_SNAPSHOT_COMPLETE] == "false"
    assert props[PROP_SNAPSHOT_ALERT].startswith("ABORTED")
    assert json.loads(props[PROP_SNAPSHOT_LAST_NOTIFICATION])["type"] == "ABORTED"
    alerts = [t.alert for r in reports for t in r.targets if t.alert]
    assert alerts and alerts[-1].startswith("ABORTED")

    # the connector restarts and snapshots again; its COMPLETED ends the snapshot
    _send(kafka_broker, notes, [notification("STARTED")])
    _send(kafka_broker, data, _rows(_table("rates"), [("EUR", "first"), ("GBP", "true")]))
    _send(kafka_broker, notes, [notification("COMPLETED")])
    _run(spark, settings)
    props = _props(uri)
    assert props[PROP_SNAPSHOT_COMPLETE] == "true" and props[PROP_SNAPSHOT_SIGNAL] == "notification"
    assert props[PROP_SNAPSHOT_ALERT] == ""
