"""The Kafka source against a real (Tansu) broker and a real SparkSession.

Producers send one record per batch (the test broker's high-watermark defect, see
tests/kafka_broker.py), so the reported high watermark is exact.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka_broker import free_port, tansu_broker
from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming.datasource import ReadAllAvailable

from lakehouse.errors import SourceError
from lakehouse.sources import read_kafka_stream
from lakehouse.sources.kafka import (
    KafkaInputPartition,
    KafkaSourceOptions,
    KafkaStreamReader,
)
from lakehouse.sources.kafka_admin import create_topic, delete_topic, produce

Collected = list[tuple[int, Any]]


def collector() -> tuple[Collected, Callable[[Any, int], None]]:
    """A foreachBatch function that keeps ``(batch_id, row)`` for every row it sees."""
    rows: Collected = []

    def collect(df: Any, batch_id: int) -> None:
        rows.extend((batch_id, row) for row in df.collect())

    return rows, collect


def records(n: int, partitions: int, tag: str) -> list[tuple[bytes, bytes | None, int]]:
    """``n`` keyed records spread round-robin over ``partitions``; every 7th is a tombstone."""
    return [
        (f"{tag}-k{i}".encode(), None if i % 7 == 3 else f"{tag}-v{i}".encode(), i % partitions)
        for i in range(n)
    ]


def reader(bootstrap: str, topic: str, **options: str) -> KafkaStreamReader:
    return KafkaStreamReader(
        KafkaSourceOptions.from_options(
            {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, **options}
        )
    )


def positions(rows: Collected) -> list[tuple[int, int]]:
    return sorted((row.partition, row.offset) for _, row in rows)


@pytest.mark.spark
@pytest.mark.broker
def test_reads_each_record_once_across_batches_and_restarts(
    spark, kafka_broker, kafka_topic, tmp_path: Path
):
    create_topic(kafka_broker, kafka_topic, 3)
    sent = records(30, 3, "a")
    placed = produce(kafka_broker, kafka_topic, sent, one_record_per_batch=True)
    checkpoint = str(tmp_path / "checkpoint")
    rows, collect = collector()
    df = read_kafka_stream(spark, bootstrap_servers=kafka_broker, topics=kafka_topic)

    query = df.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint).start()
    try:
        query.processAllAvailable()
        assert len(rows) == 30
        first_batches = {batch for batch, _ in rows}
        # Records produced while the query runs arrive in a later batch.
        more = records(12, 3, "b")
        placed += produce(kafka_broker, kafka_topic, more, one_record_per_batch=True)
        query.processAllAvailable()
        assert len(rows) == 42
        assert min(batch for batch, _ in rows[30:]) > max(first_batches)
    finally:
        query.stop()

    # A restart from the same checkpoint continues where the query left off.
    last = records(6, 3, "c")
    placed += produce(kafka_broker, kafka_topic, last, one_record_per_batch=True)
    query = df.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()

    # Exactly once: every produced position once, nothing else, with its key and value.
    assert positions(rows) == sorted(placed)
    produced = dict(zip(placed, sent + more + last, strict=True))
    for _, row in rows:
        key, value, partition = produced[(row.partition, row.offset)]
        assert (row.key, row.value, row.partition) == (key, value, partition)
        assert row.topic == kafka_topic
        assert row.timestampType == 0  # CreateTime, in Kafka's Java ids
        assert row.timestamp is not None
    assert sum(1 for _, row in rows if row.value is None) == sum(
        1 for r in produced.values() if r[1] is None
    )


@pytest.mark.spark
@pytest.mark.broker
def test_max_offsets_per_trigger_splits_the_backlog_into_batches(
    spark, kafka_broker, kafka_topic, tmp_path: Path
):
    create_topic(kafka_broker, kafka_topic, 3)
    placed = produce(kafka_broker, kafka_topic, records(30, 3, "a"), one_record_per_batch=True)
    rows, collect = collector()
    df = read_kafka_stream(
        spark,
        bootstrap_servers=kafka_broker,
        topics=[kafka_topic],
        options={"maxOffsetsPerTrigger": "12"},
    )
    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)

    sizes: dict[int, int] = {}
    for batch, _ in rows:
        sizes[batch] = sizes.get(batch, 0) + 1
    assert [sizes[b] for b in sorted(sizes)] == [12, 12, 6]
    assert positions(rows) == sorted(placed)


@pytest.mark.spark
@pytest.mark.broker
def test_starting_offsets_latest_reads_only_new_records(
    spark, kafka_broker, kafka_topic, tmp_path: Path
):
    create_topic(kafka_broker, kafka_topic, 2)
    produce(kafka_broker, kafka_topic, records(6, 2, "old"), one_record_per_batch=True)
    rows, collect = collector()
    df = read_kafka_stream(
        spark, bootstrap_servers=kafka_broker, topics=kafka_topic, starting_offsets="latest"
    )
    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
        assert rows == []
        new = produce(kafka_broker, kafka_topic, records(4, 2, "new"), one_record_per_batch=True)
        query.processAllAvailable()
    finally:
        query.stop()
    assert positions(rows) == sorted(new)
    assert all(row.key.startswith(b"new-") for _, row in rows)


@pytest.mark.spark
@pytest.mark.broker
def test_starting_offsets_json_starts_each_partition_where_told(
    spark, kafka_broker, kafka_topic, tmp_path: Path
):
    create_topic(kafka_broker, kafka_topic, 3)
    produce(kafka_broker, kafka_topic, records(15, 3, "a"), one_record_per_batch=True)
    rows, collect = collector()
    df = read_kafka_stream(
        spark,
        bootstrap_servers=kafka_broker,
        topics=kafka_topic,
        # partition 0 from offset 2, partition 1 from the earliest, partition 2 from the latest
        starting_offsets={kafka_topic: {0: 2, 1: -2, 2: -1}},
    )
    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert positions(rows) == [(0, 2), (0, 3), (0, 4)] + [(1, o) for o in range(5)]


@pytest.mark.spark
def test_unreachable_broker_fails_the_query_naming_the_address(spark, tmp_path: Path):
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    df = read_kafka_stream(
        spark,
        bootstrap_servers=address,
        topics="orders",
        options={"metadataTimeoutMs": "1500"},
    )
    query = (
        df.writeStream.foreachBatch(lambda df, batch_id: None)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(60)
    message = str(failure.value)
    assert "BrokerUnavailableError" in message  # a SourceError; never reached: not retried
    assert f"could not reach Kafka at '{address}'" in message
    assert "kafka.bootstrap.servers" in message


def test_unreachable_broker_is_a_source_error_within_the_timeout():
    address = f"127.0.0.1:{free_port()}"
    source = reader(address, "orders", metadataTimeoutMs="1000")
    with pytest.raises(SourceError, match=rf"could not reach Kafka at '{address}'.*1000 ms.*"):
        source.initialOffset()
    source.stop()


@pytest.mark.broker
def test_unknown_topic_is_a_clear_error(kafka_broker, kafka_topic):
    source = reader(kafka_broker, kafka_topic)
    with pytest.raises(SourceError, match=rf"topic '{kafka_topic}' does not exist.*subscribe"):
        source.initialOffset()
    source.stop()


@pytest.mark.broker
def test_explicit_start_beyond_the_high_watermark_is_refused(kafka_broker, kafka_topic):
    create_topic(kafka_broker, kafka_topic, 1)
    produce(kafka_broker, kafka_topic, records(3, 1, "a"), one_record_per_batch=True)
    source = reader(kafka_broker, kafka_topic, startingOffsets=json.dumps({kafka_topic: {"0": 9}}))
    with pytest.raises(SourceError, match=r"offset 9 .* partition 0, but Kafka holds \[0, 3\)"):
        source.initialOffset()
    source.stop()


@pytest.mark.broker
def test_recreated_topic_fails_instead_of_resetting_offsets(kafka_broker, kafka_topic):
    create_topic(kafka_broker, kafka_topic, 1)
    produce(kafka_broker, kafka_topic, records(5, 1, "a"), one_record_per_batch=True)
    source = reader(kafka_broker, kafka_topic)
    checkpointed = source.latestOffset(source.initialOffset(), ReadAllAvailable())
    assert checkpointed == {kafka_topic: {"0": 5}}
    source.stop()  # no consumer may be assigned to a topic Tansu deletes (see kafka_admin)

    delete_topic(kafka_broker, kafka_topic)
    create_topic(kafka_broker, kafka_topic, 1)
    produce(kafka_broker, kafka_topic, records(2, 1, "b"), one_record_per_batch=True)

    restarted = reader(kafka_broker, kafka_topic)
    with pytest.raises(
        SourceError,
        match=r"partition 0: the query needs offset 5 onwards but Kafka holds \[0, 2\).*"
        r"deleted and recreated.*never skips or resets",
    ):
        restarted.latestOffset(checkpointed, ReadAllAvailable())
    restarted.stop()


@pytest.mark.broker
def test_read_yields_exactly_the_planned_range_and_repeats_it(kafka_broker, kafka_topic):
    create_topic(kafka_broker, kafka_topic, 1)
    produce(kafka_broker, kafka_topic, records(10, 1, "a"), one_record_per_batch=True)
    source = reader(kafka_broker, kafka_topic)
    task = KafkaInputPartition(kafka_topic, 0, 2, 7)

    def read_all() -> list[dict[str, Any]]:
        return [row for batch in source.read(task) for row in batch.to_pylist()]

    first = read_all()
    assert [row["offset"] for row in first] == [2, 3, 4, 5, 6]
    # A replayed batch (failure recovery) reads the same records.
    assert read_all() == first


@pytest.mark.broker
def test_read_stops_at_the_planned_end_inside_a_record_batch(kafka_broker, kafka_topic):
    create_topic(kafka_broker, kafka_topic, 1)
    # Ten records in one record batch: the broker delivers them together.
    produce(kafka_broker, kafka_topic, records(10, 1, "a"), one_record_per_batch=False)
    source = reader(kafka_broker, kafka_topic)
    rows = [
        r for b in source.read(KafkaInputPartition(kafka_topic, 0, 0, 1)) for r in b.to_pylist()
    ]
    assert [row["offset"] for row in rows] == [0]


@pytest.mark.broker
def test_read_past_the_end_of_the_partition_fails_instead_of_returning_less(
    kafka_broker, kafka_topic
):
    create_topic(kafka_broker, kafka_topic, 1)
    produce(kafka_broker, kafka_topic, records(5, 1, "a"), one_record_per_batch=True)
    source = reader(kafka_broker, kafka_topic)
    with pytest.raises(SourceError, match=r"partition 0: the partition ends at offset 5"):
        list(source.read(KafkaInputPartition(kafka_topic, 0, 3, 8)))


@pytest.mark.broker
def test_authentication_failure_names_the_security_settings(tmp_path: Path):
    with tansu_broker(tmp_path / "auth-broker.log", authentication=True) as address:
        source = reader(
            address,
            "orders",
            metadataTimeoutMs="2000",
            **{
                "kafka.security.protocol": "SASL_PLAINTEXT",
                "kafka.sasl.mechanism": "SCRAM-SHA-512",
                "kafka.sasl.username": "alice",
                "kafka.sasl.password": "not-the-password",
            },
        )
        with pytest.raises(SourceError) as failure:
            source.initialOffset()
        source.stop()
    message = str(failure.value)
    assert f"Kafka at '{address}' rejected the client's authentication" in message
    assert "kafka.sasl.username='alice'" in message
    assert "kafka.sasl.password=<set>" in message
    assert "not-the-password" not in message
