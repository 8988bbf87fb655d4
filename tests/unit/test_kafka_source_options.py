"""Kafka stream options without a broker or Spark: validation, the librdkafka -> Java client
translation, the driver-side offsets reader over a scripted fake, and the explanation of
Spark's Kafka source failures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from lakehouse.errors import ConfigError, SourceError
from lakehouse.sources import kafka_stream_options
from lakehouse.sources._java_client import TRANSLATED, java_client_properties
from lakehouse.sources._kafka_client import security_summary
from lakehouse.sources.kafka import (
    KafkaOffsetsReader,
    KafkaSourceOptions,
    explain_failure,
    is_unreachable_failure,
    positions_to_offset,
)
from lakehouse.sources.schema import RAW_SCHEMA, arrow_schema

#: Spark's default spark.redaction.regex: option values it hides in plans, logs and the UI.
SPARK_REDACTION = re.compile(r"(?i)secret|password|token|access[.]?key")


def options(**extra: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.from_options(
        {"kafka.bootstrap.servers": "b:9092", "subscribe": "t", **extra}
    )


# ------------------------------------------------------------------------- translation


def test_plain_settings_give_spark_the_defaults_that_never_skip_records():
    spark = options().spark_options
    assert spark == {
        "kafka.bootstrap.servers": "b:9092",
        "kafka.isolation.level": "read_committed",  # librdkafka's default, kept
        "subscribe": "t",
        "startingOffsets": "earliest",
        "failOnDataLoss": "true",
    }


@pytest.mark.parametrize(
    ("mechanism", "module"),
    [
        ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
        ("scram-sha-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
        ("SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ],
)
def test_sasl_credentials_become_a_jaas_config(mechanism, module):
    props = java_client_properties(
        {
            "security.protocol": "sasl_ssl",
            "sasl.mechanisms": mechanism,  # librdkafka's alias
            "sasl.username": "alice",
            "sasl.password": 'p"w\\1',
        }
    )
    assert props["security.protocol"] == "SASL_SSL"
    assert props["sasl.mechanism"] == mechanism.upper()
    assert props["sasl.jaas.config"] == (
        f'{module} required username="alice" password="p\\"w\\\\1";'
    )


def test_tls_files_become_pem_stores_and_other_settings_keep_their_names():
    props = java_client_properties(
        {
            "security.protocol": "SSL",
            "ssl.ca.location": "/etc/kafka/ca.pem",
            "ssl.certificate.location": "/etc/kafka/client.pem",
            "ssl.key.location": "/etc/kafka/client.pem",
            "ssl.key.password": "k3y",
            "ssl.endpoint.identification.algorithm": "none",
            "client.id": "rates-ingest",
            "socket.timeout.ms": "5000",
            "isolation.level": "read_uncommitted",
        }
    )
    assert props == {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/kafka/ca.pem",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": "/etc/kafka/client.pem",
        "ssl.key.password": "k3y",
        "ssl.endpoint.identification.algorithm": "",
        "client.id": "rates-ingest",
        "request.timeout.ms": "5000",
        "default.api.timeout.ms": "5000",
        "isolation.level": "read_uncommitted",
    }


@pytest.mark.parametrize(
    ("config", "setting", "message"),
    [
        ({"sasl.jaas.config": "x"}, "kafka.sasl.jaas.config", r"sasl\.username and"),
        ({"debug": "all"}, "kafka.debug", "cannot be translated"),
        ({"sasl.mechanism": "GSSAPI"}, "kafka.sasl.mechanism", "cannot be translated"),
        ({"sasl.mechanism": "OAUTHBEARER"}, "kafka.sasl.mechanism", "cannot be translated"),
        ({"sasl.username": "a", "sasl.password": "p"}, "kafka.sasl.mechanism", "GSSAPI"),
        ({"sasl.mechanism": "PLAIN", "sasl.username": "a"}, "kafka.sasl.password", "both"),
        ({"ssl.ca.location": "probe"}, "kafka.ssl.ca.location", "PEM file"),
        (
            {"ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem"},
            "kafka.ssl.key.location",
            "same PEM file",
        ),
        ({"ssl.key.location": "/k.pem"}, "kafka.ssl.certificate.location", "same PEM file"),
        ({"security.protocol": "TLS"}, "kafka.security.protocol", "must be one of"),
        ({"isolation.level": "dirty"}, "kafka.isolation.level", "read_committed"),
        ({"socket.timeout.ms": "soon"}, "kafka.socket.timeout.ms", "positive integer"),
        (
            {"sasl.mechanism": "PLAIN", "sasl.mechanisms": "SCRAM-SHA-256"},
            "kafka.sasl.mechanism",
            "disagree",
        ),
        # offsets live in the checkpoint: committing to Kafka is refused, not ignored
        ({"enable.auto.commit": "true"}, "kafka.enable.auto.commit", "never committed"),
        # resets would skip data silently
        ({"auto.offset.reset": "latest"}, "kafka.auto.offset.reset", "startingOffsets"),
        ({"group.id": "g"}, "kafka.group.id", "groupIdPrefix"),
    ],
)
def test_settings_without_a_translation_are_refused_by_name(config, setting, message):
    with pytest.raises(ConfigError, match=message) as failure:
        java_client_properties(config)
    assert failure.value.setting == setting


def test_refusals_never_show_a_secret_value():
    secret = "pw-5f1d9c2e"
    for config in (
        {"sasl.username": "a", "sasl.password": secret},
        {"sasl.mechanism": "GSSAPI", "sasl.password": secret, "sasl.username": "a"},
        {"sasl.mechanism": "PLAIN", "sasl.username": "a", "sasl.password": secret + "\n"},
        {"sasl.oauthbearer.client.secret": secret},
    ):
        with pytest.raises(ConfigError) as failure:
            java_client_properties(config)
        assert secret not in str(failure.value)


def test_every_option_that_carries_a_secret_is_redacted_by_spark():
    spark = options(
        **{
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-256",
            "kafka.sasl.username": "alice",
            "kafka.sasl.password": "s3cret",
            "kafka.ssl.key.location": "/k.pem",
            "kafka.ssl.certificate.location": "/k.pem",
            "kafka.ssl.key.password": "k3y",
        }
    ).spark_options
    carrying = {k: v for k, v in spark.items() if "s3cret" in v or "k3y" in v}
    assert set(carrying) == {"kafka.sasl.jaas.config", "kafka.ssl.key.password"}
    for key, value in carrying.items():
        assert SPARK_REDACTION.search(key) or SPARK_REDACTION.search(value), key


def test_options_repr_leaves_credentials_out():
    settings = options(
        **{
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.username": "alice",
            "kafka.sasl.password": "s3cret",
        }
    )
    assert "s3cret" not in repr(settings)


def test_the_translated_names_are_documented_in_the_table():
    from lakehouse.sources import _java_client

    doc = _java_client.java_client_properties.__doc__ or ""
    for name in TRANSLATED:
        assert f"``{name}``" in doc, name


# ------------------------------------------------------------------------- source options


@pytest.mark.parametrize(
    ("given", "setting", "message"),
    [
        # bootstrap servers are required (as an option or in the config file)
        ({"subscribe": "t"}, "kafka.bootstrap.servers", "is required"),
        # a topic list is required
        ({"kafka.bootstrap.servers": "b:1"}, "subscribe", "is required"),
        ({"kafka.bootstrap.servers": "b:1", "subscribe": "t,t"}, "subscribe", "twice"),
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "kafka.enable.auto.commit": "1"},
            "kafka.enable.auto.commit",
            "cannot be set",
        ),
        # a typo in an option name is an error, not a silently ignored option
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "startingOffset": "latest"},
            "startingoffset",
            "unknown option",
        ),
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "failOnDataLoss": "maybe"},
            "failOnDataLoss",
            "'true' or 'false'",
        ),
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "subscribePattern": "t.*"},
            "subscribepattern",
            "not supported",
        ),
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "includeHeaders": "true"},
            "includeheaders",
            "raw schema",
        ),
        # the old source's outage options are the runner's settings now
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "outageTimeoutMs": "5"},
            "outagetimeoutms",
            "kafka.outage_timeout_ms",
        ),
        # explicit offsets may only name subscribed topics, and must name every one
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "startingOffsets": '{"u":{}}'},
            "startingOffsets",
            "not in 'subscribe'",
        ),
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t,u", "startingOffsets": '{"t":{}}'},
            "startingOffsets",
            "missing: u",
        ),
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "startingOffsets": "soon"},
            "startingOffsets",
            "'earliest', 'latest' or JSON",
        ),
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "maxOffsetsPerTrigger": "0"},
            "maxOffsetsPerTrigger",
            "positive integer",
        ),
    ],
)
def test_invalid_options_name_the_setting(given, setting, message):
    with pytest.raises(ConfigError, match=message) as failure:
        KafkaSourceOptions.from_options(given)
    assert failure.value.setting == setting


def test_spark_options_pass_through_with_their_names():
    settings = options(
        maxoffsetspertrigger="500",
        failOnDataLoss="FALSE",
        groupIdPrefix="lakehouse-rates",
        **{"kafkaConsumer.pollTimeoutMs": "30000"},
    )
    assert settings.fail_on_data_loss is False  # only when asked for
    assert {
        k: settings.spark_options[k]
        for k in ("maxOffsetsPerTrigger", "failOnDataLoss", "groupIdPrefix")
    } == {
        "maxOffsetsPerTrigger": "500",
        "failOnDataLoss": "false",
        "groupIdPrefix": "lakehouse-rates",
    }
    assert settings.spark_options["kafkaConsumer.pollTimeoutMs"] == "30000"


def test_read_kafka_stream_arguments_become_canonical_starting_offsets():
    settings = kafka_stream_options(
        bootstrap_servers="b:1",
        topics=["t", "u"],
        starting_offsets={"u": {1: -1, 0: 5}, "t": {0: -2}},
    )
    assert settings.spark_options["startingOffsets"] == '{"t": {"0": -2}, "u": {"0": 5, "1": -1}}'
    assert settings.spark_options["subscribe"] == "t,u"
    with pytest.raises(ConfigError, match="as an argument"):
        kafka_stream_options(bootstrap_servers="b:1", topics="t", options={"subscribe": "u"})


def test_config_file_supplies_settings_and_options_override_it(tmp_path: Path):
    config = tmp_path / "client.properties"
    config.write_text(
        "# secrets stay off the command line\n"
        "bootstrap.servers=file-broker:9092\n"
        "security.protocol = SASL_SSL\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.username=alice\n"
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
    assert settings.spark_options["kafka.bootstrap.servers"] == "file-broker:9092"
    assert settings.spark_options["kafka.security.protocol"] == "SASL_PLAINTEXT"
    assert 'password="s3cret"' in settings.spark_options["kafka.sasl.jaas.config"]


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


# ------------------------------------------------------------------------- offsets reader


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


def reader(metadata: FakeMetadata, **extra: str) -> KafkaOffsetsReader:
    return KafkaOffsetsReader(options(**extra), metadata_factory=lambda _: metadata)


def test_earliest_and_latest_resolve_to_the_watermarks():
    metadata = FakeMetadata({("t", 0): (3, 10), ("t", 1): (0, 4)})
    assert reader(metadata).initialOffset() == {"t": {"0": 3, "1": 0}}
    assert reader(metadata, startingOffsets="latest").initialOffset() == {"t": {"0": 10, "1": 4}}
    assert reader(metadata).latest_offsets() == {"t": {"0": 10, "1": 4}}


def test_explicit_starting_offsets_must_name_every_partition_and_fit():
    metadata = FakeMetadata({("t", 0): (0, 5), ("t", 1): (2, 5)})
    with pytest.raises(ConfigError, match=r"every partition of topic 't'.*missing: \[1\]"):
        reader(metadata, startingOffsets='{"t": {"0": 1}}').initialOffset()
    with pytest.raises(SourceError, match=r"offset 1 of topic 't' partition 1.*\[2, 5\)"):
        reader(metadata, startingOffsets='{"t": {"0": 1, "1": 1}}').initialOffset()
    source = reader(metadata, startingOffsets='{"t": {"0": -1, "1": -2}}')
    assert source.initialOffset() == {"t": {"0": 5, "1": 2}}
    source.stop()
    assert metadata.closed


def test_offsets_are_canonical_so_equal_positions_compare_equal():
    # Spark compares offsets as JSON text: partition 10 must follow 2, topics sorted.
    offset = positions_to_offset({("b", 10): 1, ("b", 2): 1, ("a", 0): 1})
    assert list(offset) == ["a", "b"]
    assert list(offset["b"]) == ["2", "10"]


# ----------------------------------------------------------- failures of Spark's source

_LOSS = (
    "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
    "[KAFKA_DATA_LOSS.{cls}] Some data may have been lost because they are not available in "
    "Kafka any more; either the data was aged out by Kafka or the topic may have been deleted "
    "before all the data in the topic was processed. If you don't want your streaming query "
    "to fail on such cases, set the source option failOnDataLoss to false. Reason: {reason} "
    "SQLSTATE: 22000"
)


@pytest.mark.parametrize(
    ("cls", "reason", "expected"),
    [
        (
            "PARTITION_OFFSET_CHANGED",
            "Partition rates.v1-0 offset was changed from 5 to 2. This could be ...",
            "topic 'rates.v1' partition 0: the query needs offset 5 onwards but Kafka holds "
            "[0, 2); the partition's latest offset is now 2",
        ),
        (
            "START_OFFSET_RESET",
            "Starting offset for my-topic-3 was 4 but consumer reset to 8.",
            "topic 'my-topic' partition 3: the query needs offset 4 onwards but Kafka holds "
            "[8, 12); the partition's earliest offset is now 8",
        ),
        (
            "COULD_NOT_READ_OFFSET_RANGE",
            "Could not read records in offset [4, 9) for topic partition my-topic-3 with "
            "consumer group spark-kafka-source-x.",
            "topic 'my-topic' partition 3: the query needs offsets [4, 9) but Kafka holds [8, 12)",
        ),
        (
            "ADDED_PARTITION_DOES_NOT_START_FROM_OFFSET_ZERO",
            "Added partition t-2 starts from 7 instead of 0.",
            "topic 't' partition 2: the query needs offset 0 onwards but Kafka holds [7, 9)",
        ),
    ],
)
def test_data_loss_is_explained_with_the_topic_partition_and_the_way_on(cls, reason, expected):
    marks = {("rates.v1", 0): (0, 2), ("my-topic", 3): (8, 12), ("t", 2): (7, 9)}
    error = explain_failure(
        _LOSS.format(cls=cls, reason=reason), watermarks=lambda t, p: marks[(t, p)]
    )
    assert isinstance(error, SourceError)
    assert expected in str(error)
    assert "never skips or resets offsets silently" in str(error)
    assert "new pipeline_id" in str(error) and "startingOffsets" in str(error)
    assert "failOnDataLoss" not in str(error)  # no advice to skip records


def test_data_loss_is_explained_when_the_watermarks_cannot_be_read():
    def unreachable(topic: str, partition: int) -> tuple[int, int]:
        raise SourceError("could not reach Kafka")

    error = explain_failure(
        _LOSS.format(
            cls="PARTITION_OFFSET_CHANGED", reason="Partition t-0 offset was changed from 5 to 2."
        ),
        watermarks=unreachable,
    )
    assert "topic 't' partition 0: the query needs offset 5 onwards but Kafka no longer" in str(
        error
    )


def test_deleted_partitions_and_unassigned_starts_are_explained():
    gone = explain_failure(
        _LOSS.format(cls="PARTITIONS_DELETED", reason="Partitions Set(t-1) have been deleted.")
    )
    assert isinstance(gone, SourceError) and "Set(t-1)" in str(gone)
    start = explain_failure(
        "java.lang.AssertionError: assertion failed: If startingOffsets contains specific "
        "offsets, you must specify all TopicPartitions."
    )
    assert isinstance(start, ConfigError) and start.setting == "startingOffsets"
    assert explain_failure("java.lang.ArithmeticException: / by zero") is None


@pytest.mark.parametrize(
    ("text", "unreachable"),
    [
        (
            "java.util.concurrent.ExecutionException: org.apache.kafka.common.errors."
            "TimeoutException: Timed out waiting for a node assignment. Call: listNodes",
            True,
        ),
        (
            "Job aborted due to stage failure: ... java.util.concurrent.TimeoutException: "
            "Cannot fetch record for offset 3 in 120000 milliseconds",
            True,
        ),
        (
            "org.apache.kafka.common.errors.TimeoutException: Timeout of 60000ms expired "
            "before the position for partition t-0 could be determined",
            True,
        ),
        (_LOSS.format(cls="PARTITION_OFFSET_CHANGED", reason="Partition t-0 ..."), False),
        ("lakehouse.errors.PendingBoundError: 12 rows would wait", False),
    ],
)
def test_unreachable_brokers_are_recognised_in_query_failures(text, unreachable):
    assert is_unreachable_failure(text) is unreachable


def test_arrow_schema_is_what_spark_expects_for_the_raw_schema():
    # the files source yields Arrow batches of this schema
    assert arrow_schema().equals(to_arrow_schema(RAW_SCHEMA, timezone="UTC"))
