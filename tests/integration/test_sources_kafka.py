"""The Kafka stream (Spark's Kafka source through read_kafka_stream) and the driver-side
checks, against a real Apache Kafka broker and a real SparkSession."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka_broker import KafkaBroker, free_port
from pyspark.errors import StreamingQueryException

from lakehouse.config import load_settings
from lakehouse.errors import BrokerUnavailableError, ConfigError, SourceError
from lakehouse.sources import RAW_SCHEMA, kafka_stream_options, read_kafka_stream
from lakehouse.sources.kafka import KafkaOffsetsReader, explain_failure
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


def reader(
    bootstrap: str, topic: str, starting: Any = "earliest", **options: str
) -> KafkaOffsetsReader:
    return KafkaOffsetsReader(
        kafka_stream_options(
            bootstrap_servers=bootstrap, topics=topic, starting_offsets=starting, options=options
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
    # the producer batches records as it likes: high watermarks and reads are exact
    placed = produce(kafka_broker, kafka_topic, sent)
    checkpoint = str(tmp_path / "checkpoint")
    rows, collect = collector()
    df = read_kafka_stream(spark, bootstrap_servers=kafka_broker, topics=kafka_topic)
    assert df.schema == RAW_SCHEMA

    query = df.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint).start()
    try:
        query.processAllAvailable()
        assert len(rows) == 30
        first_batches = {batch for batch, _ in rows}
        # Records produced while the query runs arrive in a later batch.
        more = records(12, 3, "b")
        placed += produce(kafka_broker, kafka_topic, more)
        query.processAllAvailable()
        assert len(rows) == 42
        assert min(batch for batch, _ in rows[30:]) > max(first_batches)
    finally:
        query.stop()

    # A restart from the same checkpoint continues where the query left off.
    last = records(6, 3, "c")
    placed += produce(kafka_broker, kafka_topic, last)
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
    # offsets are in Spark's checkpoint, in the shape the snapshot signals read
    log = tmp_path / "checkpoint" / "offsets"
    last = max((p for p in log.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    assert json.loads(last.read_text().splitlines()[2]) == {
        kafka_topic: {"0": 16, "1": 16, "2": 16}
    }


@pytest.mark.spark
@pytest.mark.broker
def test_max_offsets_per_trigger_splits_the_backlog_into_batches(
    spark, kafka_broker, kafka_topic, tmp_path: Path
):
    create_topic(kafka_broker, kafka_topic, 3)
    placed = produce(kafka_broker, kafka_topic, records(30, 3, "a"))
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
    produce(kafka_broker, kafka_topic, records(6, 2, "old"))
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
        new = produce(kafka_broker, kafka_topic, records(4, 2, "new"))
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
    produce(kafka_broker, kafka_topic, records(15, 3, "a"))
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
@pytest.mark.broker
def test_offsets_kafka_no_longer_holds_fail_the_query_and_are_explained(
    spark, kafka_broker, kafka_topic, tmp_path: Path
):
    create_topic(kafka_broker, kafka_topic, 1)
    produce(kafka_broker, kafka_topic, records(5, 1, "a"))
    checkpoint = str(tmp_path / "checkpoint")
    rows, collect = collector()
    df = read_kafka_stream(spark, bootstrap_servers=kafka_broker, topics=kafka_topic)
    query = df.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert len(rows) == 5

    delete_topic(kafka_broker, kafka_topic)
    create_topic(kafka_broker, kafka_topic, 1)
    produce(kafka_broker, kafka_topic, records(2, 1, "b"))

    # failOnDataLoss stays true: Spark fails instead of resetting to the new topic's offsets
    query = df.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint).start()
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(120)
    assert len(rows) == 5  # nothing of the recreated topic was read
    source = reader(kafka_broker, kafka_topic)
    try:
        explained = explain_failure(
            str(failure.value),
            watermarks=lambda topic, partition: source.watermarks()[(topic, partition)],
        )
    finally:
        source.stop()
    assert isinstance(explained, SourceError)
    message = str(explained)
    assert (
        f"topic '{kafka_topic}' partition 0: the query needs offset 5 onwards but Kafka "
        "holds [0, 2)"
    ) in message
    assert "deleted and recreated" in message and "never skips or resets" in message
    assert "new pipeline_id" in message and "startingOffsets" in message


@pytest.mark.spark
def test_unreachable_broker_fails_the_job_at_start_naming_the_address(spark, tmp_path: Path):
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    cfg = tmp_path / "lakehouse.toml"
    cfg.write_text(
        f'[kafka]\nbootstrap_servers = "{address}"\n'
        f'[ingest]\npipeline_id = "p"\ntopics = ["orders"]\ncheckpoint = "{tmp_path}/ck"\n'
        f'dead_letter_table = "{tmp_path}/dead"\n[[ingest.tables]]\ntable = "{tmp_path}/t"\n'
    )
    from lakehouse.lease import read_lease
    from lakehouse.runner import start_ingest

    # a wrong address is not an outage: the first contact fails at once, before Spark starts
    with pytest.raises(BrokerUnavailableError) as failure:
        start_ingest(spark, load_settings(cfg))
    message = str(failure.value)
    assert f"could not reach Kafka at '{address}'" in message
    # the setting the user writes (TOML key and flag), and the source option it becomes
    assert "kafka.bootstrap_servers (--bootstrap-servers" in message
    assert "kafka.bootstrap.servers" in message
    assert read_lease(f"{tmp_path}/t") is None  # no lease was taken


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
    produce(kafka_broker, kafka_topic, records(3, 1, "a"))
    source = reader(kafka_broker, kafka_topic, starting={kafka_topic: {0: 9}})
    with pytest.raises(SourceError, match=r"offset 9 .* partition 0, but Kafka holds \[0, 3\)"):
        source.initialOffset()
    source.stop()


@pytest.mark.broker
def test_explicit_start_must_name_every_partition(kafka_broker, kafka_topic):
    create_topic(kafka_broker, kafka_topic, 2)
    source = reader(kafka_broker, kafka_topic, starting={kafka_topic: {0: 0}})
    with pytest.raises(ConfigError, match=r"every partition of topic .*missing: \[1\]"):
        source.initialOffset()
    source.stop()


@pytest.mark.spark
@pytest.mark.broker
def test_sasl_plain_credentials_reach_spark_and_a_wrong_password_is_named(
    spark, tmp_path: Path, kafka_topic
):
    broker = KafkaBroker(tmp_path / "sasl-broker", sasl_users={"alice": "right-password"})
    try:
        broker.start()
        create_topic(broker.bootstrap, kafka_topic, 1)
        placed = produce(broker.bootstrap, kafka_topic, records(4, 1, "a"))
        sasl = {
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.username": "alice",
        }
        # the librdkafka settings, translated, authenticate Spark's Java client
        rows, collect = collector()
        df = read_kafka_stream(
            spark,
            bootstrap_servers=broker.sasl_bootstrap,
            topics=kafka_topic,
            options={**sasl, "kafka.sasl.password": "right-password"},
        )
        query = (
            df.writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert positions(rows) == sorted(placed)

        source = reader(
            broker.sasl_bootstrap,
            kafka_topic,
            metadataTimeoutMs="5000",
            **{**sasl, "kafka.sasl.password": "not-the-password"},
        )
        with pytest.raises(SourceError) as failure:
            source.initialOffset()
        source.stop()
    finally:
        broker.stop()
    message = str(failure.value)
    assert f"Kafka at '{broker.sasl_bootstrap}' rejected the client's authentication" in message
    assert "kafka.sasl.username='alice'" in message
    assert "kafka.sasl.password=<set>" in message
    assert "not-the-password" not in message
