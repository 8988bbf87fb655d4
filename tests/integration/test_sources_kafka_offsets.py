"""Offset planning and option handling of the Kafka source, without a broker or Spark.

The planner talks to Kafka only through ``PartitionMetadata``; a scripted fake stands in
for it here, which reaches cases the Tansu test broker cannot produce (it supports neither
adding partitions nor deleting records, so the low watermark never moves).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from lakehouse.errors import ConfigError, SourceError
from lakehouse.sources._kafka_client import security_summary
from lakehouse.sources.kafka import (
    KafkaInputPartition,
    KafkaSourceOptions,
    KafkaStreamReader,
    positions_to_offset,
    rate_limit,
)
from lakehouse.sources.schema import RAW_SCHEMA, arrow_schema


class FakeMetadata:
    """Partitions and ``(low, high)`` watermarks that a test changes between calls."""

    def __init__(self, marks: dict[tuple[str, int], tuple[int, int]]) -> None:
        self.marks = marks
        self.closed = False

    def partitions(self, topic: str) -> list[int]:
        found = sorted(p for t, p in self.marks if t == topic)
        if not found:
            raise SourceError(f"topic {topic!r} does not exist")
        return found

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        return self.marks[(topic, partition)]

    def close(self) -> None:
        self.closed = True


def planner(metadata: FakeMetadata, topics: str = "t", **options: str) -> KafkaStreamReader:
    settings = KafkaSourceOptions.from_options(
        {"kafka.bootstrap.servers": "broker:9092", "subscribe": topics, **options}
    )
    return KafkaStreamReader(settings, metadata_factory=lambda _: metadata)


ALL = ReadAllAvailable()


def test_earliest_and_latest_resolve_to_the_watermarks():
    metadata = FakeMetadata({("t", 0): (3, 10), ("t", 1): (0, 4)})
    assert planner(metadata).initialOffset() == {"t": {"0": 3, "1": 0}}
    assert planner(metadata, startingOffsets="latest").initialOffset() == {"t": {"0": 10, "1": 4}}


def test_batches_end_at_the_high_watermarks():
    metadata = FakeMetadata({("t", 0): (0, 5), ("t", 1): (0, 2)})
    source = planner(metadata)
    start = source.initialOffset()
    end = source.latestOffset(start, ALL)
    assert end == {"t": {"0": 5, "1": 2}}
    assert source.partitions(start, end) == [
        KafkaInputPartition("t", 0, 0, 5),
        KafkaInputPartition("t", 1, 0, 2),
    ]
    # Nothing new: the same offset comes back, so Spark runs no batch.
    assert source.latestOffset(end, ALL) == end
    assert source.partitions(end, end) == []


def test_a_new_partition_starts_at_its_earliest_offset_one_batch_later():
    metadata = FakeMetadata({("t", 0): (0, 5)})
    source = planner(metadata)
    start = source.initialOffset()
    first = source.latestOffset(start, ALL)
    metadata.marks[("t", 1)] = (2, 7)  # added while the query runs (low 2: retention ran)
    # The batch that first sees partition 1 records where it starts and reads nothing of it.
    second = source.latestOffset(first, ALL)
    assert second == {"t": {"0": 5, "1": 2}}
    assert source.partitions(first, second) == []
    third = source.latestOffset(second, ALL)
    assert source.partitions(second, third) == [KafkaInputPartition("t", 1, 2, 7)]


def test_a_position_below_the_low_watermark_fails_instead_of_skipping():
    metadata = FakeMetadata({("t", 0): (0, 5)})
    source = planner(metadata)
    end = source.latestOffset(source.initialOffset(), ALL)
    metadata.marks[("t", 0)] = (8, 12)  # retention removed offsets 0..7, incl. unread 5..7
    with pytest.raises(
        SourceError,
        match=r"topic 't' partition 0: the query needs offset 5 onwards but Kafka holds "
        r"\[8, 12\); the partition's earliest offset is now 8.*new checkpoint location",
    ):
        source.latestOffset(end, ALL)


def test_a_vanished_partition_fails():
    metadata = FakeMetadata({("t", 0): (0, 5), ("t", 1): (0, 5)})
    source = planner(metadata)
    start = source.initialOffset()
    del metadata.marks[("t", 1)]
    with pytest.raises(SourceError, match=r"topic 't' partition 1 is in the query's checkpoint"):
        source.latestOffset(start, ALL)


def test_max_rows_limit_splits_by_backlog_and_always_progresses():
    metadata = FakeMetadata({("t", 0): (0, 30), ("t", 1): (0, 10)})
    source = planner(metadata, maxOffsetsPerTrigger="8")
    assert source.getDefaultReadLimit() == ReadMaxRows(8)
    start = source.initialOffset()
    assert source.latestOffset(start, ReadMaxRows(8)) == {"t": {"0": 6, "1": 2}}
    # Spark may ask for everything (e.g. to report progress); the limit is then ignored.
    assert source.latestOffset(start, ALL) == {"t": {"0": 30, "1": 10}}


@pytest.mark.parametrize("max_rows", [1, 2, 3, 7, 39, 40, 41])
def test_rate_limit_never_exceeds_the_limit_or_the_backlog(max_rows):
    start = {("t", 0): 0, ("t", 1): 5, ("t", 2): 9}
    end = {("t", 0): 17, ("t", 1): 5, ("t", 2): 32}
    capped = rate_limit(start, end, max_rows)
    taken = sum(capped[tp] - start[tp] for tp in start)
    assert taken == min(max_rows, 40)
    assert all(start[tp] <= capped[tp] <= end[tp] for tp in start)


def test_available_now_stops_at_the_watermarks_seen_at_query_start():
    metadata = FakeMetadata({("t", 0): (0, 5)})
    source = planner(metadata)
    source.prepareForTriggerAvailableNow()
    start = source.initialOffset()
    metadata.marks[("t", 0)] = (0, 9)  # produced after the run started
    metadata.marks[("t", 1)] = (0, 3)  # partition added after the run started
    end = source.latestOffset(start, ALL)
    assert end == {"t": {"0": 5}}
    assert source.latestOffset(end, ALL) == end  # the run ends


def test_offsets_are_canonical_so_equal_positions_compare_equal():
    # Spark compares offsets as JSON text: partition 10 must follow 2, topics sorted.
    offset = positions_to_offset({("b", 10): 1, ("b", 2): 1, ("a", 0): 1})
    assert list(offset) == ["a", "b"]
    assert list(offset["b"]) == ["2", "10"]


def test_explicit_starting_offsets_must_name_every_partition():
    metadata = FakeMetadata({("t", 0): (0, 5), ("t", 1): (0, 5)})
    source = planner(metadata, startingOffsets='{"t": {"0": 1}}')
    with pytest.raises(ConfigError, match=r"every partition of topic 't'.*missing: \[1\]"):
        source.initialOffset()


def test_the_pickled_reader_carries_options_but_no_client():
    metadata = FakeMetadata({("t", 0): (0, 5)})
    source = KafkaStreamReader(
        KafkaSourceOptions.from_options({"kafka.bootstrap.servers": "b:9092", "subscribe": "t"})
    )
    source._metadata = metadata  # as after a driver call
    copy = pickle.loads(pickle.dumps(source))
    assert copy._metadata is None
    assert copy._options == source._options
    source.stop()
    assert metadata.closed


@pytest.mark.parametrize(
    ("options", "setting", "message"),
    [
        # bootstrap servers are required (as an option or in the config file)
        ({"subscribe": "t"}, "kafka.bootstrap.servers", "is required"),
        # a topic list is required
        ({"kafka.bootstrap.servers": "b:1"}, "subscribe", "is required"),
        # offsets live in the checkpoint: committing to Kafka is refused, not ignored
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "kafka.enable.auto.commit": "1"},
            "kafka.enable.auto.commit",
            "cannot be set",
        ),
        # resets would skip data silently
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "kafka.auto.offset.reset": "x"},
            "kafka.auto.offset.reset",
            "startingOffsets",
        ),
        # a typo in an option name is an error, not a silently ignored option
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "startingOffset": "latest"},
            "startingoffset",
            "unknown option",
        ),
        # Spark Kafka options with other semantics are named as unsupported
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "failOnDataLoss": "false"},
            "failondataloss",
            "never skips",
        ),
        # explicit offsets may only name subscribed topics
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "startingOffsets": '{"u":{}}'},
            "startingOffsets",
            "not in 'subscribe'",
        ),
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "maxOffsetsPerTrigger": "0"},
            "maxoffsetspertrigger",
            "positive integer",
        ),
    ],
)
def test_invalid_options_name_the_setting(options, setting, message):
    with pytest.raises(ConfigError, match=message) as failure:
        KafkaSourceOptions.from_options(options)
    assert failure.value.setting == setting


def test_config_file_supplies_settings_and_options_override_it(tmp_path: Path):
    config = tmp_path / "client.properties"
    config.write_text(
        "# secrets stay off the command line\n"
        "bootstrap.servers=file-broker:9092\n"
        "security.protocol = SASL_SSL\n"
        "sasl.password: s3cret\n"
    )
    settings = KafkaSourceOptions.from_options(
        {
            "kafka.config.file": str(config),
            "subscribe": "t",
            "kafka.security.protocol": "SASL_PLAINTEXT",
        }
    )
    assert settings.bootstrap_servers == "file-broker:9092"
    assert settings.client_config["security.protocol"] == "SASL_PLAINTEXT"
    assert settings.client_config["sasl.password"] == "s3cret"


def test_missing_config_file_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"cannot read .*kafka\.config\.file") as failure:
        KafkaSourceOptions.from_options(
            {"kafka.config.file": str(tmp_path / "absent"), "subscribe": "t"}
        )
    assert failure.value.setting == "kafka.config.file"


def test_security_summary_never_shows_secrets():
    summary = security_summary(
        {
            "security.protocol": "SASL_SSL",
            "sasl.username": "alice",
            "sasl.password": "s3cret",
            "ssl.key.password": "k3y",
            "sasl.oauthbearer.client.secret": "t0ken",
        }
    )
    assert "alice" in summary
    assert not any(secret in summary for secret in ("s3cret", "k3y", "t0ken"))


def test_arrow_schema_is_what_spark_expects_for_the_raw_schema():
    assert arrow_schema().equals(to_arrow_schema(RAW_SCHEMA, timezone="UTC"))
