"""CDC ingest from a real Kafka broker through Spark's Kafka source: multi-partition, out of
order across partitions, restarted from its checkpoint."""

from __future__ import annotations

import zlib

import pytest

from lakehouse import delta
from lakehouse.config import load_settings
from lakehouse.dimension.layout import PROP_PRIMARY_KEY, PROP_SNAPSHOT_COMPLETE
from lakehouse.runner import start_ingest
from lakehouse.sources.kafka_admin import create_topic, produce
from lakehouse.testing import DebeziumTable

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def _partition(message, partitions: int = 3) -> int:
    # Debezium keys records, so every change of one key lands in one partition
    key = message.key_bytes() or b""
    return zlib.crc32(key) % partitions


def _run(spark, cfg) -> None:
    query = start_ingest(spark, load_settings(cfg))
    query.awaitTermination()
    assert query.exception() is None


def test_ingest_from_broker_out_of_order_partitions_and_restart(
    spark, tmp_path, kafka_broker, kafka_topic
):
    create_topic(kafka_broker, kafka_topic, 3)
    t = DebeziumTable("public", "rates", key="currency", start_ms=1_700_000_000_000)
    currencies = ["EUR", "GBP", "JPY", "CHF", "USD", "SEK"]
    snapshot = t.snapshot([{"currency": c, "rate": "1.00"} for c in currencies])
    t.advance(10_000)
    log = [
        t.update({"currency": "EUR", "rate": "1.10"}),
        *t.delete("GBP"),
        t.insert({"currency": "GBP", "rate": "1.20"}),
        t.update({"currency": "CHF", "rate": "0.90"}),
    ]
    records = [(m.key_bytes(), m.value_bytes(), _partition(m)) for m in snapshot + log]
    records.append((None, b"{ definitely not debezium", 0))
    # deliver partition by partition, highest first: the arrival order across partitions is
    # the reverse of the production order, within a partition it is kept (as in Kafka)
    for p in (2, 1, 0):
        produce(kafka_broker, kafka_topic, [r for r in records if r[2] == p])
    cfg = tmp_path / "lakehouse.toml"
    cfg.write_text(f"""
[kafka]
bootstrap_servers = "{kafka_broker}"
[ingest]
pipeline_id = "ingest-broker"
topics = ["{kafka_topic}"]
checkpoint = "{tmp_path}/ck"
dead_letter_table = "{tmp_path}/dead_letter"
trigger = "available-now"
[[ingest.tables]]
table = "{tmp_path}/rates"
""")
    _run(spark, cfg)
    uri = f"{tmp_path}/rates"
    rows = delta.read(spark, uri).collect()
    assert sorted((r.currency, str(r.rate), r._op) for r in rows) == sorted(
        [(c, "1.0000", "r") for c in currencies]
        + [
            ("EUR", "1.1000", "u"),
            ("GBP", "None", "d"),
            ("GBP", "1.2000", "c"),
            ("CHF", "0.9000", "u"),
        ]
    )
    # key columns came from the Debezium key; positions from the Postgres LSN
    assert delta.get_properties(uri)[PROP_PRIMARY_KEY] == "currency"
    assert delta.get_properties(uri)[PROP_SNAPSHOT_COMPLETE] == "true"
    assert len({r._seq for r in rows}) == len(rows)
    assert {r._kafka_partition for r in rows} <= {0, 1, 2}
    dead = delta.read(spark, f"{tmp_path}/dead_letter").collect()
    assert [(d._partition, d._error_kind) for d in dead] == [(0, "malformed_json")]

    # more changes arrive; the restarted ingest reads only them
    more = [
        t.update({"currency": "USD", "rate": "1.05"}),
        t.update({"currency": "SEK", "rate": "0.09"}),
    ]
    produce(
        kafka_broker,
        kafka_topic,
        [(m.key_bytes(), m.value_bytes(), _partition(m)) for m in more],
    )
    _run(spark, cfg)
    rows = delta.read(spark, uri).collect()
    assert len(rows) == len(currencies) + 4 + 2
    assert sorted((r.currency, str(r.rate)) for r in rows if r._op == "u")[-2:] == [
        ("SEK", "0.0900"),
        ("USD", "1.0500"),
    ]
