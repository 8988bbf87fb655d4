"""Broker faults, for real: the broker dies under a running ingest and comes back; under a
supervised query (the runner's restart logic alone) it dies and comes back, or stays away
longer than kafka.outage_timeout_ms; a topic is deleted and recreated between two runs (its
offsets are gone).

The outage: a ``lakehouse ingest`` process reads a topic of a real Kafka broker (one KRaft
node with its log on disk). The broker is SIGKILLed mid-stream, so Spark's Kafka source fails
the query; the runner must report the outage naming the broker, back off, restart the query
from its checkpoint when the broker (started again on the same port, with its log) answers,
and end with the same build table as a run that was never interrupted. The Java client's
timeouts are set short (``socket.timeout.ms``) so that Spark gives up on the dead broker in
seconds rather than minutes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import assert_rows_equal
from pyspark.errors import StreamingQueryException

from lakehouse import delta
from lakehouse.config import KafkaConfig, load_settings
from lakehouse.dimension.layout import EVENT_TIME, KAFKA_OFFSET, OP, SEQ, SNAPSHOT
from lakehouse.errors import BrokerUnavailableError, DataSafetyError, SourceError
from lakehouse.runner import SupervisedQuery, check_kafka_stream, start_ingest
from lakehouse.sources import kafka_stream_options
from lakehouse.sources.kafka_admin import create_topic, delete_topic, produce
from lakehouse.sources.streams import open_kafka_stream
from lakehouse.testing import DebeziumTable
from lakehouse.testing.broker import KafkaBroker

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

DEADLINE_S = 300  # a hang guard only: every wait below ends on an event, not a time


def _records():
    t = DebeziumTable("public", "rates", key="currency", start_ms=1_700_000_000_000)
    snapshot = t.snapshot([{"currency": c, "rate": "1.00"} for c in ("EUR", "GBP", "JPY")])
    t.advance(10_000)
    log = [
        t.update({"currency": "EUR", "rate": "1.10"}),
        *t.delete("GBP"),
        t.insert({"currency": "GBP", "rate": "1.20"}),
    ]

    def rows(messages):
        return [(m.key_bytes(), m.value_bytes(), 0) for m in messages]

    return rows(snapshot), rows(log)


def _config(
    tmp: Path,
    name: str,
    bootstrap: str,
    topic: str,
    trigger: str,
    *,
    outage_timeout_ms: int = 600_000,
    backoff_ms: int = 500,
) -> Path:
    cfg = tmp / f"{name}.toml"
    cfg.write_text(
        '[spark]\nmaster = "local[1]"\n'
        'conf = { "spark.sql.shuffle.partitions" = "1", "spark.ui.enabled" = "false" }\n'
        f'[kafka]\nbootstrap_servers = "{bootstrap}"\n'
        f"outage_timeout_ms = {outage_timeout_ms}\n"
        f"outage_backoff_ms = {backoff_ms}\noutage_backoff_max_ms = 2000\n"
        # Spark's Kafka source gives up on a dead broker after its Java client's timeouts
        '[kafka.options]\n"socket.timeout.ms" = "2000"\n'
        f'[ingest]\npipeline_id = "rates"\ntopics = ["{topic}"]\n'
        f'checkpoint = "{tmp}/{name}/checkpoint"\ndead_letter_table = "{tmp}/{name}/dead"\n'
        f'trigger = "{trigger}"\ninterval = "1 second"\n'
        f'[[ingest.tables]]\ntable = "{tmp}/{name}/rates"\n'
    )
    return cfg


def _build_rows(spark, uri: str):
    cols = ["currency", "rate", OP, EVENT_TIME, SEQ, SNAPSHOT, KAFKA_OFFSET]
    return delta.read(spark, uri).select(*cols).collect()


def _ingest_process(cfg: Path, log: Path) -> subprocess.Popen[bytes]:
    """``lakehouse ingest -c cfg`` as a process of its own, its output going to ``log``."""
    with open(log, "wb") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "lakehouse.cli", "ingest", "-c", str(cfg)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "4000"},
        )


def _wait_for(log: Path, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while what not in log.read_text(errors="replace"):
        text = log.read_text(errors="replace")
        assert proc.poll() is None, f"exited {proc.returncode}:\n{text}"
        assert time.monotonic() < deadline, f"never printed {what!r}:\n{text}"
        time.sleep(0.2)


def test_broker_killed_mid_stream_is_reported_ridden_out_and_resumed(spark, tmp_path):
    snapshot, changes = _records()
    broker = KafkaBroker(tmp_path / "broker")
    job = None
    try:
        broker.start()
        topic = "rates"
        create_topic(broker.bootstrap, topic, 1)
        produce(broker.bootstrap, topic, snapshot)
        cfg = _config(tmp_path, "outage", broker.bootstrap, topic, "processing-time")
        log = tmp_path / "ingest.log"
        job = _ingest_process(cfg, log)
        _wait_for(log, job, "ingest batch 0")

        # the broker dies (SIGKILL); the query fails, the runner reports it and backs off
        broker.kill()
        _wait_for(log, job, f"Kafka at '{broker.bootstrap}' is unreachable")
        _wait_for(log, job, "attempt 2)")  # it keeps retrying, with a growing delay

        # the broker comes back on the same port with its log (the snapshot's records at
        # their offsets), and new records arrive
        broker.start()
        produce(broker.bootstrap, topic, changes)
        _wait_for(log, job, f"Kafka at '{broker.bootstrap}' answers again")
        _wait_for(log, job, "ingest batch 1")
        job.send_signal(signal.SIGINT)
        assert job.wait(timeout=DEADLINE_S) == 0, log.read_text()
        text = log.read_text()
        assert "Traceback" not in text
        assert "retrying in 0.5 s" in text and "retrying in 1.0 s" in text
        assert "restarting the query from its checkpoint" in text

        # the same as a run that was never interrupted
        reference = _config(tmp_path, "reference", broker.bootstrap, topic, "available-now")
        query = start_ingest(spark, load_settings(reference))
        query.awaitTermination()
        assert query.exception() is None
        expected = _build_rows(spark, f"{tmp_path}/reference/rates")
        assert len(expected) == len(snapshot) + len(changes) - 1  # a tombstone is no version
        assert_rows_equal(_build_rows(spark, f"{tmp_path}/outage/rates"), expected)
    finally:
        if job is not None and job.poll() is None:
            job.kill()
            job.wait()
        broker.stop()


def test_a_hung_broker_is_reported_within_the_configured_timeout(tmp_path):
    # SIGSTOP: the broker's sockets still accept, nothing answers; the Java client's timeouts
    # (socket.timeout.ms = 2000 here) must end the wait, not Spark's 120 s poll default
    snapshot, changes = _records()
    broker = KafkaBroker(tmp_path / "broker")
    job = None
    try:
        broker.start()
        create_topic(broker.bootstrap, "rates", 1)
        produce(broker.bootstrap, "rates", snapshot)
        cfg = _config(tmp_path, "hung", broker.bootstrap, "rates", "processing-time")
        log = tmp_path / "ingest.log"
        job = _ingest_process(cfg, log)
        _wait_for(log, job, "ingest batch 0")
        broker.pause()
        paused = time.monotonic()
        _wait_for(log, job, f"Kafka at '{broker.bootstrap}' is unreachable")
        reported_after = time.monotonic() - paused
        # 2 s of client timeout, then a query restart; far from the 45 s and more seen before
        assert reported_after < 30, f"reported after {reported_after:.0f} s"
        broker.resume()
        produce(broker.bootstrap, "rates", changes)
        _wait_for(log, job, f"Kafka at '{broker.bootstrap}' answers again")
        _wait_for(log, job, "ingest batch 1")
        job.send_signal(signal.SIGINT)
        assert job.wait(timeout=DEADLINE_S) == 0, log.read_text()
        assert "Traceback" not in log.read_text()
    finally:
        if job is not None and job.poll() is None:
            job.kill()
            job.wait()
        broker.stop()


def _supervised(spark, bootstrap: str, checkpoint: Path, rows: list, **kafka: int):
    """A supervised query of topic 't' (the runner's restart logic without a sink's tables)
    whose batches append their rows to ``rows``."""
    source = kafka_stream_options(
        bootstrap_servers=bootstrap,
        topics="t",
        options={"kafka.socket.timeout.ms": "2000"},
    )
    check_kafka_stream(source, str(checkpoint))  # the first contact
    stream = open_kafka_stream(spark, source)

    def collect(df, batch_id: int) -> None:
        rows.extend(df.collect())

    def start():
        return (
            stream.writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="1 second")
            .start()
        )

    settings = KafkaConfig(bootstrap_servers=bootstrap, outage_backoff_max_ms=2000, **kafka)
    return SupervisedQuery(start, kafka=settings, source=source)


def _wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_a_restarted_query_reads_every_record_once_across_the_outage(spark, tmp_path, capfd):
    broker = KafkaBroker(tmp_path / "broker")
    rows: list = []
    try:
        broker.start()
        create_topic(broker.bootstrap, "t", 2)
        first = produce(broker.bootstrap, "t", [(b"a%d" % i, b"v", i % 2) for i in range(10)])
        job = _supervised(spark, broker.bootstrap, tmp_path / "ck", rows, outage_backoff_ms=300)
        _wait_until(lambda: len(rows) == 10, "the first records")
        broker.kill()
        _wait_until(lambda: "attempt 2)" in capfd.readouterr().err, "a second attempt")
        assert job.isActive  # an outage does not end the job
        broker.start()
        second = produce(broker.bootstrap, "t", [(b"b%d" % i, b"v", i % 2) for i in range(6)])
        _wait_until(lambda: len(rows) >= 16, "the records produced after the outage")
        job.stop()
    finally:
        broker.stop()
    assert job.exception() is None and not job.isActive
    assert sorted((r.partition, r.offset) for r in rows) == sorted(first + second)


def test_an_outage_longer_than_the_timeout_fails_naming_the_setting(spark, tmp_path, capfd):
    broker = KafkaBroker(tmp_path / "broker")
    rows: list = []
    try:
        broker.start()
        create_topic(broker.bootstrap, "t", 1)
        produce(broker.bootstrap, "t", [(b"k", b"v", 0)])
        job = _supervised(
            spark,
            broker.bootstrap,
            tmp_path / "ck",
            rows,
            outage_timeout_ms=3000,
            outage_backoff_ms=200,
        )
        _wait_until(lambda: rows, "the first batch")
        broker.kill()  # the brokers were reached: this is an outage, not a wrong address
        with pytest.raises(BrokerUnavailableError) as failure:
            job.awaitTermination(DEADLINE_S)
    finally:
        broker.stop()
    assert not job.isActive
    assert isinstance(job.exception(), BrokerUnavailableError)
    message = str(failure.value)
    assert f"Kafka at '{broker.bootstrap}' stayed unreachable for" in message
    assert "kafka.outage_timeout_ms (3000 ms)" in message
    assert "resumes from its checkpoint" in message
    reports = capfd.readouterr().err
    assert "retrying in 0.2 s" in reports and "retrying in 0.4 s" in reports


def test_a_supervised_query_ends_with_the_explained_data_loss(spark, tmp_path, kafka_broker):
    rows: list = []
    create_topic(kafka_broker, "t", 1)
    try:
        produce(kafka_broker, "t", [(b"a%d" % i, b"v", 0) for i in range(4)])
        job = _supervised(spark, kafka_broker, tmp_path / "ck", rows)
        _wait_until(lambda: len(rows) == 4, "the first records")
        job.stop()
        delete_topic(kafka_broker, "t")
        create_topic(kafka_broker, "t", 1)
        produce(kafka_broker, "t", [(b"b", b"v", 0)])
        job = _supervised(spark, kafka_broker, tmp_path / "ck", rows)
        # Spark notices it on the driver (the partition's end went below the checkpoint's
        # offset 4) or, when a read was already under way, on an executor (the offsets that
        # read wanted): either way the error names the partition and the recreated topic
        explained = r"topic 't' partition 0: the query needs offsets? .*deleted and recreated"
        with pytest.raises(SourceError, match=explained):
            job.awaitTermination(DEADLINE_S)
    finally:
        delete_topic(kafka_broker, "t")
    assert len(rows) == 4 and not job.isActive


def test_offsets_gone_from_a_recreated_topic_fail_clearly_until_the_operator_chooses(
    spark, tmp_path, kafka_broker, kafka_topic
):
    snapshot, changes = _records()
    create_topic(kafka_broker, kafka_topic, 1)
    produce(kafka_broker, kafka_topic, snapshot + changes)
    cfg = _config(tmp_path, "run", kafka_broker, kafka_topic, "available-now")
    first = start_ingest(spark, load_settings(cfg))
    first.awaitTermination()
    assert first.exception() is None

    # between two runs (no consumer attached) the topic is deleted and recreated, shorter
    delete_topic(kafka_broker, kafka_topic)
    create_topic(kafka_broker, kafka_topic, 1)
    produce(kafka_broker, kafka_topic, changes[:2])

    # the topic's id changed: refused before the query starts, naming the topic
    with pytest.raises(DataSafetyError, match=f"'{kafka_topic}' .*deleted and created again"):
        start_ingest(spark, load_settings(cfg))

    # told to go on from the checkpoint's offsets, Spark's source fails (failOnDataLoss stays
    # true): those offsets are not in the new, shorter topic; the runner says what happened
    onward = tmp_path / "onward.toml"
    onward.write_text(
        cfg.read_text().replace(
            "[kafka.options]", 'on_recreated_topic = "continue"\n[kafka.options]'
        )
    )
    second = start_ingest(spark, load_settings(onward))
    with pytest.raises(SourceError) as failure:
        second.awaitTermination()
    message = str(failure.value)
    held = len(snapshot) + len(changes)
    assert (
        f"topic '{kafka_topic}' partition 0: the query needs offset {held} onwards but Kafka "
        "holds [0, 2)"
    ) in message
    assert "never skips or resets offsets silently" in message
    assert "new pipeline_id" in message and "startingOffsets" in message
    assert isinstance(failure.value.__cause__, StreamingQueryException)  # Spark's own, kept
    versions = len(snapshot) + len(changes) - 1  # the delete's tombstone is no version
    assert delta.row_count(f"{tmp_path}/run/rates") == versions

    # the documented choice: a new checkpoint and pipeline id, explicit startingOffsets
    chosen = tmp_path / "chosen.toml"
    chosen.write_text(
        cfg.read_text()
        .replace(f'"{tmp_path}/run/checkpoint"', f'"{tmp_path}/run/checkpoint-2"')
        .replace('pipeline_id = "rates"', 'pipeline_id = "rates-2"')
        .replace(
            'trigger = "available-now"',
            'trigger = "available-now"\nstarting_offsets = '
            + json.dumps(json.dumps({kafka_topic: {"0": 0}})),
        )
    )
    third = start_ingest(spark, load_settings(chosen))
    third.awaitTermination()
    assert third.exception() is None
    # the old rows are intact and the recreated topic's two records were read once
    assert delta.row_count(f"{tmp_path}/run/rates") == versions + 2


@pytest.mark.slow
def test_a_recreated_topic_that_grew_past_the_checkpoint_is_refused_not_skipped(
    spark, tmp_path, kafka_broker, kafka_topic
):
    snapshot, changes = _records()
    create_topic(kafka_broker, kafka_topic, 1)
    produce(kafka_broker, kafka_topic, snapshot)
    cfg = _config(tmp_path, "run", kafka_broker, kafka_topic, "available-now")
    first = start_ingest(spark, load_settings(cfg))
    first.awaitTermination()
    assert first.exception() is None
    versions = delta.row_count(f"{tmp_path}/run/rates")

    # the broker lost the topic; producers wrote more than the checkpoint's offsets since:
    # Spark alone would start at the old offset and never read the first records
    delete_topic(kafka_broker, kafka_topic)
    create_topic(kafka_broker, kafka_topic, 1)
    produce(kafka_broker, kafka_topic, snapshot + changes)
    with pytest.raises(DataSafetyError) as refused:
        start_ingest(spark, load_settings(cfg))
    message = str(refused.value)
    assert "continuing would silently skip the new topic's records below those offsets" in message
    assert "new pipeline_id" in message and 'on_recreated_topic = "continue"' in message
    assert delta.row_count(f"{tmp_path}/run/rates") == versions  # nothing read, nothing skipped
