"""Kafka through Spark's own Kafka source: options, translation, and what Spark does not say.

:func:`lakehouse.sources.read_kafka_stream` opens ``spark.readStream.format("kafka")`` and
selects the raw schema (:data:`~lakehouse.sources.schema.RAW_SCHEMA`: Spark's Kafka schema
without headers). Offsets live in the query's checkpoint, as Spark's source keeps them;
nothing is committed to Kafka. This module validates the options first (a bad setting is a
:class:`ConfigError` naming it, before Spark starts), translates the user's librdkafka
settings to the Java client's properties (:mod:`lakehouse.sources._java_client`), reads
partitions and watermarks through confluent-kafka on the driver (:class:`KafkaOffsetsReader`:
the runner's start-up check and the snapshot signals' coverage probe), and turns the
failures of Spark's source that lakehouse documents into its own errors
(:func:`explain_failure`).

Options (names are case-insensitive, as everywhere in Spark):

``kafka.bootstrap.servers``
    Required, here or in ``kafka.config.file``.
``subscribe``
    Required. Comma-separated topic names; the runner checks that every one exists when the
    query starts (Spark's source would wait on a missing topic without a word).
``startingOffsets``
    ``earliest`` (default), ``latest``, or JSON ``{"topic": {"0": 23, "1": -2}}`` naming
    every partition of every subscribed topic (-2 earliest, -1 latest). Used only when a
    query starts without a checkpoint.
``failOnDataLoss``
    ``true`` (default): offsets that Kafka no longer holds fail the query (see
    :func:`explain_failure`); records are never skipped silently. ``false`` is Spark's
    "skip what is gone", only when asked for.
``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``, ``maxTriggerDelay``, ``minPartitions``,
``groupIdPrefix``, ``fetchOffset.numRetries``, ``fetchOffset.retryIntervalMs``,
``kafkaConsumer.pollTimeoutMs``
    Passed to Spark's source as they are. ``maxOffsetsPerTrigger`` splits a backlog over
    partitions in proportion; downstream logic that assumes "a batch ends at the high
    watermark" (the build table's snapshot marker) must not be combined with it without
    adapting it.
``kafka.<setting>``
    A librdkafka setting (the names ``[kafka.options]`` uses): ``kafka.security.protocol``,
    ``kafka.sasl.mechanism``, ``kafka.sasl.username``, ``kafka.sasl.password``,
    ``kafka.ssl.ca.location``, ... translated for the Java client; a setting without a
    translation is refused, naming it.
``kafka.config.file``
    A librdkafka properties file (``key=value`` lines) read on the driver, so secrets need
    not appear in code or on a command line. ``kafka.`` options win over its entries. The
    translated settings travel to the executors inside Spark's source options, which Spark
    redacts in plans, logs and the UI (``spark.redaction.regex`` matches the JAAS
    configuration, which holds the word ``password``).
``metadataTimeoutMs``
    Bound on each driver-side confluent-kafka call of :class:`KafkaOffsetsReader`
    (default 10000), retries included: a partition without a leader (a topic just created, an
    election after a broker restart) is asked again until then. Spark's own calls use the Java
    client's timeouts (``kafka.socket.timeout.ms`` sets them).

Broker outages are carried by :mod:`lakehouse.runner`: a query that Spark's source fails
because the brokers stopped answering is restarted from its checkpoint with backoff, up to
``kafka.outage_timeout_ms``.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol

from lakehouse.errors import ConfigError, LakehouseError, SourceError
from lakehouse.sources import _java_client, _kafka_client

#: The format name of Spark's Kafka source.
KAFKA_SOURCE_NAME: Final = "kafka"

#: In ``startingOffsets`` JSON: the partition's earliest offset (Spark's convention).
EARLIEST: Final = -2
#: In ``startingOffsets`` JSON: the partition's latest offset (Spark's convention).
LATEST: Final = -1

StartingOffsets = Literal["earliest", "latest"] | dict[str, dict[int, int]]

#: A position per topic-partition: the next offset to read.
Positions = dict[tuple[str, int], int]

#: Options of Spark's Kafka source passed through as given (lower case -> Spark's spelling).
_PASSED: Final = {
    "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "minoffsetspertrigger": "minOffsetsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay",
    "minpartitions": "minPartitions",
    "groupidprefix": "groupIdPrefix",
    "fetchoffset.numretries": "fetchOffset.numRetries",
    "fetchoffset.retryintervalms": "fetchOffset.retryIntervalMs",
    "kafkaconsumer.polltimeoutms": "kafkaConsumer.pollTimeoutMs",
}
_OWN: Final = frozenset({"subscribe", "startingoffsets", "failondataloss", "metadatatimeoutms"})
_UNSUPPORTED: Final = {
    "assign": "list the topics in 'subscribe' (every partition of each is read)",
    "subscribepattern": "list the topics in 'subscribe'",
    "endingoffsets": "this is a streaming source; stop the query or use trigger(availableNow=True)",
    "endingoffsetsbytimestamp": "this is a streaming source",
    "endingtimestamp": "this is a streaming source",
    "startingtimestamp": "use startingOffsets",
    "startingoffsetsbytimestamp": "use startingOffsets",
    "startingoffsetsbytimestampstrategy": "use startingOffsets",
    "includeheaders": "headers are not part of the raw schema",
    "bootstrap.servers": "give it as 'kafka.bootstrap.servers'",
    "fetchtimeoutms": (
        "reads are Spark's now; its source option 'kafkaConsumer.pollTimeoutMs' bounds a read"
    ),
    "outagetimeoutms": "set kafka.outage_timeout_ms; the runner carries broker outages",
    "outagebackoffms": "set kafka.outage_backoff_ms; the runner carries broker outages",
    "outagebackoffmaxms": "set kafka.outage_backoff_max_ms; the runner carries broker outages",
}


@dataclass(frozen=True, kw_only=True)
class KafkaSourceOptions:
    """Validated options of one Kafka stream; plain data.

    Build with :meth:`from_options`. ``client_config`` is the librdkafka configuration (for
    confluent-kafka on the driver); ``spark_options`` are the options of Spark's source,
    with the translated Java client properties. Both may hold credentials and are left out
    of ``repr``.
    """

    topics: tuple[str, ...]
    client_config: dict[str, str] = field(repr=False)
    spark_options: dict[str, str] = field(repr=False)
    #: The ``kafka.``-prefixed librdkafka settings as given (a ``kafka.config.file``'s read
    #: in): what another stream of the same brokers is opened with.
    kafka_options: dict[str, str] = field(repr=False, default_factory=dict)
    starting_offsets: StartingOffsets = "earliest"
    fail_on_data_loss: bool = True
    metadata_timeout_ms: int = 10_000

    @property
    def bootstrap_servers(self) -> str:
        """The ``bootstrap.servers`` the source connects to."""
        return self.client_config["bootstrap.servers"]

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> KafkaSourceOptions:
        """Validate source options (case-insensitive keys) and build the settings.

        Reads ``kafka.config.file`` when given. Does not contact Kafka.

        Raises:
            ConfigError: a required option is missing, an option is unknown or malformed, or
                a ``kafka.`` setting has no translation for the Java client or is one the
                source controls.
        """
        opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        client: dict[str, str] = {}
        config_file = opts.get("kafka.config.file")
        if config_file:
            client.update(_kafka_client.read_properties_file(config_file))
        passed: dict[str, str] = {}
        for key, value in opts.items():
            if key == "kafka.config.file":
                continue
            if key.startswith("kafka."):
                client[key.removeprefix("kafka.")] = value
            elif key in _PASSED:
                passed[_PASSED[key]] = value
            elif key in _UNSUPPORTED:
                raise ConfigError(
                    f"option {key!r} is not supported by lakehouse's Kafka stream: "
                    f"{_UNSUPPORTED[key]}.",
                    setting=key,
                )
            elif key not in _OWN:
                raise ConfigError(
                    f"unknown option {key!r} for the Kafka stream; supported: "
                    f"{', '.join(sorted([*_OWN, *_PASSED.values()]))}, kafka.config.file and "
                    "'kafka.'-prefixed librdkafka settings.",
                    setting=key,
                )
        if not client.get("bootstrap.servers", "").strip():
            raise ConfigError(
                "option 'kafka.bootstrap.servers' is required (comma-separated host:port "
                "list), as an option or in kafka.config.file.",
                setting="kafka.bootstrap.servers",
            )
        topics = tuple(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip())
        if not topics:
            raise ConfigError(
                "option 'subscribe' is required: a comma-separated list of topic names.",
                setting="subscribe",
            )
        if len(set(topics)) != len(topics):
            raise ConfigError(
                f"option 'subscribe' names a topic twice: {','.join(topics)!r}.",
                setting="subscribe",
            )
        java = _java_client.java_client_properties(client)
        for key in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "minPartitions"):
            if key in passed:
                _positive_int(passed[key], key)
        fail = opts.get("failondataloss", "true").strip().lower()
        if fail not in ("true", "false"):
            raise ConfigError(
                f"option 'failOnDataLoss' must be 'true' or 'false', got "
                f"{opts['failondataloss']!r}.",
                setting="failOnDataLoss",
            )
        starting = _parse_starting_offsets(opts.get("startingoffsets", "earliest"), topics)
        spark_options = {
            **{f"kafka.{k}": v for k, v in java.items()},
            "subscribe": ",".join(topics),
            "startingOffsets": _render_starting_offsets(starting),
            "failOnDataLoss": fail,
            **passed,
        }
        return cls(
            topics=topics,
            client_config={**_kafka_client.CONSUMER_DEFAULTS, **client},
            spark_options=spark_options,
            kafka_options={f"kafka.{k}": v for k, v in client.items()},
            starting_offsets=starting,
            fail_on_data_loss=fail == "true",
            metadata_timeout_ms=_positive_int(
                opts.get("metadatatimeoutms", "10000"), "metadataTimeoutMs"
            ),
        )


def _positive_int(raw: str, key: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(f"option {key!r} must be a positive integer, got {raw!r}.", setting=key)
    return value


def _parse_starting_offsets(raw: str, topics: Sequence[str]) -> StartingOffsets:
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        return "earliest" if text.lower() == "earliest" else "latest"
    example = '{"topic": {"0": 23, "1": -2}}'
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed:
        raise ConfigError(
            f"option 'startingOffsets' must be 'earliest', 'latest' or JSON like {example} "
            f"(-2 earliest, -1 latest), got {raw!r}.",
            setting="startingOffsets",
        )
    result: dict[str, dict[int, int]] = {}
    for topic, per_partition in parsed.items():
        if topic not in topics:
            raise ConfigError(
                f"option 'startingOffsets' names topic {topic!r}, which is not in 'subscribe' "
                f"({','.join(topics)}).",
                setting="startingOffsets",
            )
        if not isinstance(per_partition, dict):
            raise ConfigError(
                f"option 'startingOffsets': topic {topic!r} must map partition ids to "
                f"offsets, like {example}.",
                setting="startingOffsets",
            )
        offsets: dict[int, int] = {}
        for partition, offset in per_partition.items():
            valid_partition = isinstance(partition, str) and partition.isdigit()
            valid_offset = isinstance(offset, int) and not isinstance(offset, bool)
            if not valid_partition or not valid_offset or offset < EARLIEST:
                raise ConfigError(
                    f"option 'startingOffsets': topic {topic!r} partition {partition!r} -> "
                    f"{offset!r} is not 'partition id -> offset >= -2' (-2 earliest, "
                    "-1 latest).",
                    setting="startingOffsets",
                )
            offsets[int(partition)] = offset
        result[topic] = offsets
    missing = [t for t in topics if t not in result]
    if missing:
        raise ConfigError(
            f"option 'startingOffsets' must name every subscribed topic (Spark's rule); "
            f"missing: {', '.join(missing)}. Use -2 (earliest) or -1 (latest) per partition.",
            setting="startingOffsets",
        )
    return result


def _render_starting_offsets(spec: StartingOffsets) -> str:
    if isinstance(spec, str):
        return spec
    return json.dumps(
        {t: {str(p): o for p, o in sorted(parts.items())} for t, parts in sorted(spec.items())}
    )


def positions_to_offset(positions: Positions) -> dict[str, dict[str, int]]:
    """Render positions as a stream offset (Spark's Kafka offset JSON), in canonical order.

    >>> positions_to_offset({("b", 10): 5, ("b", 2): 1, ("a", 0): 0})
    {'a': {'0': 0}, 'b': {'2': 1, '10': 5}}
    """
    offset: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(positions):
        offset.setdefault(topic, {})[str(partition)] = positions[(topic, partition)]
    return offset


class PartitionMetadata(Protocol):
    """What :class:`KafkaOffsetsReader` needs from Kafka (the driver's metadata client)."""

    def partitions(self, topic: str) -> list[int]: ...

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]: ...

    def close(self) -> None: ...


class KafkaOffsetsReader:
    """Partitions and watermarks of the subscribed topics, through confluent-kafka.

    Runs on the driver. Used by the runner to check a stream before Spark starts it (the
    brokers answer, the topics exist, explicit ``startingOffsets`` fit) and to see whether
    brokers answer again after an outage, and by the snapshot signals to read the data
    topics' high watermarks. Holds a live client once used: call :meth:`stop`.
    """

    def __init__(
        self,
        options: KafkaSourceOptions,
        *,
        metadata_factory: Callable[[KafkaSourceOptions], PartitionMetadata] | None = None,
    ) -> None:
        self._options = options
        self._metadata_factory = metadata_factory
        self._metadata: PartitionMetadata | None = None

    def _client(self) -> PartitionMetadata:
        if self._metadata is None:
            if self._metadata_factory is not None:
                self._metadata = self._metadata_factory(self._options)
            else:
                self._metadata = _kafka_client.KafkaMetadata(
                    self._options.client_config, timeout_ms=self._options.metadata_timeout_ms
                )
        return self._metadata

    def watermarks(self) -> dict[tuple[str, int], tuple[int, int]]:
        """``(low, high)`` of every partition of the subscribed topics, in canonical order.

        Raises:
            BrokerUnavailableError: no broker answered within ``metadataTimeoutMs``.
            SourceError: a topic does not exist, authentication or access failed.
        """
        client = self._client()
        marks: dict[tuple[str, int], tuple[int, int]] = {}
        for topic in sorted(self._options.topics):
            for partition in client.partitions(topic):
                marks[(topic, partition)] = client.watermarks(topic, partition)
        return marks

    def initialOffset(self) -> dict[str, dict[str, int]]:
        """Resolve ``startingOffsets`` against the brokers, as the query's first batch will.

        Raises:
            SourceError: Kafka is unreachable or rejects the client, a topic does not
                exist, or an explicit offset lies outside the partition's ``[low, high]``.
            ConfigError: explicit ``startingOffsets`` do not cover every partition, or name
                one that does not exist.
        """
        marks = self.watermarks()
        spec = self._options.starting_offsets
        if spec == "earliest":
            return positions_to_offset({tp: low for tp, (low, _) in marks.items()})
        if spec == "latest":
            return positions_to_offset({tp: high for tp, (_, high) in marks.items()})
        assert isinstance(spec, dict)
        positions: Positions = {}
        for topic in sorted(self._options.topics):
            existing = sorted(p for t, p in marks if t == topic)
            wanted = spec.get(topic, {})
            missing = [p for p in existing if p not in wanted]
            unknown = [p for p in wanted if p not in existing]
            if missing or unknown:
                raise ConfigError(
                    f"option 'startingOffsets' must give an offset for every partition of "
                    f"topic {topic!r}, which has partitions {existing}; missing: {missing}, "
                    f"not in the topic: {unknown}.",
                    setting="startingOffsets",
                )
            for partition in existing:
                low, high = marks[(topic, partition)]
                offset = wanted[partition]
                if offset == EARLIEST:
                    positions[(topic, partition)] = low
                elif offset == LATEST:
                    positions[(topic, partition)] = high
                elif low <= offset <= high:
                    positions[(topic, partition)] = offset
                else:
                    raise SourceError(
                        f"option 'startingOffsets' asks for offset {offset} of topic {topic!r} "
                        f"partition {partition}, but Kafka holds [{low}, {high}) there. Choose "
                        f"an offset in that range, or -2 (earliest) / -1 (latest)."
                    )
        return positions_to_offset(positions)

    def latest_offsets(self) -> dict[str, dict[str, int]]:
        """The high watermarks of the subscribed topics, as a stream offset."""
        return positions_to_offset({tp: high for tp, (_, high) in self.watermarks().items()})

    def topic_ids(self) -> dict[str, str]:
        """The topic id of each subscribed topic (see
        :meth:`~lakehouse.sources._kafka_client.KafkaMetadata.topic_ids`)."""
        client = self._client()
        reader = getattr(client, "topic_ids", None)
        return reader(sorted(self._options.topics)) if reader is not None else {}

    def stop(self) -> None:
        """Close the Kafka client; idempotent."""
        if self._metadata is not None:
            metadata, self._metadata = self._metadata, None
            with contextlib.suppress(Exception):  # a client of a dead broker may not close
                metadata.close()


#: The name :mod:`lakehouse.dimension.signals` imports (the reader of the Python data source that
#: Spark's source replaced had the same ``initialOffset``/``stop`` methods).
KafkaStreamReader = KafkaOffsetsReader


# --------------------------------------------------------------- failures of Spark's source

#: Spark's Kafka source and the Java client, when brokers do not answer (driver: admin calls
#: time out; executors: a read gets no record within kafkaConsumer.pollTimeoutMs).
_UNREACHABLE = re.compile(
    r"org\.apache\.kafka\.common\.errors\.(TimeoutException|DisconnectException|"
    r"NetworkException|BrokerNotAvailableException)"
    r"|Timed out waiting for a node assignment"
    r"|Cannot fetch record for offset \d+ in \d+ milliseconds"
)
_TP = r"(?P<tp>\S+?-\d+)"
_OFFSET_CHANGED = re.compile(
    rf"Partition {_TP}(?:'s)? offset was changed from (?P<prev>\d+) to (?P<new>\d+)"
)
_START_RESET = re.compile(
    rf"Starting offset for {_TP} was (?P<prev>\d+) but consumer reset to (?P<new>\d+)"
)
_RANGE_GONE = re.compile(
    rf"Could not read records in offset \[(?P<prev>\d+), (?P<end>\d+)\) for topic partition {_TP}"
)
_ADDED = re.compile(rf"Added partition {_TP} starts from (?P<new>\d+) instead of 0")
_DELETED = re.compile(r"Partitions? (?P<tps>.+?) (?:have been deleted|are gone)")
_UNASSIGNED_START = re.compile(
    r"(KAFKA_START_OFFSET_DOES_NOT_MATCH_ASSIGNED|startingOffsets contains specific offsets, "
    r"you must specify all TopicPartitions)"
)


def is_unreachable_failure(text: str) -> bool:
    """Whether a query failure's text is the Java client giving up on unanswering brokers.

    >>> is_unreachable_failure("org.apache.kafka.common.errors.TimeoutException: Timed out "
    ...                        "waiting for a node assignment. Call: listNodes")
    True
    >>> is_unreachable_failure("[KAFKA_DATA_LOSS.PARTITION_OFFSET_CHANGED] Some data ...")
    False
    """
    return _UNREACHABLE.search(text) is not None


def _split_tp(tp: str) -> tuple[str, int]:
    topic, _, partition = tp.rpartition("-")
    return topic, int(partition)


def explain_failure(
    text: str,
    *,
    watermarks: Callable[[str, int], tuple[int, int] | None] | None = None,
) -> LakehouseError | None:
    """The lakehouse error for a failure of Spark's Kafka source, or None if it is no known one.

    Spark reports offsets that Kafka no longer holds as ``KAFKA_DATA_LOSS`` (with
    ``failOnDataLoss=true``) and suggests turning the check off; lakehouse instead names the
    topic and partition, what Kafka holds (when ``watermarks(topic, partition)`` can tell),
    and the explicit way on: a new checkpoint, a new pipeline id and ``startingOffsets``.

    >>> err = explain_failure("[KAFKA_DATA_LOSS.PARTITION_OFFSET_CHANGED] Some data may have "
    ...     "been lost ... Reason: Partition orders-0 offset was changed from 8 to 2.",
    ...     watermarks=lambda topic, partition: (0, 2))
    >>> str(err).split(";")[0]
    "topic 'orders' partition 0: the query needs offset 8 onwards but Kafka holds [0, 2)"
    """
    for pattern in (_OFFSET_CHANGED, _START_RESET, _RANGE_GONE, _ADDED):
        match = pattern.search(text)
        if match is None:
            continue
        topic, partition = _split_tp(match.group("tp"))
        groups = match.groupdict()
        needed = int(groups.get("prev") or 0)
        end = int(groups["end"]) if groups.get("end") else None
        marks = None
        if watermarks is not None:
            with contextlib.suppress(Exception):
                marks = watermarks(topic, partition)
        if marks is None:
            new = groups.get("new")
            marks = (int(new), int(new)) if new is not None and pattern is _ADDED else None
        if marks is None:
            return _kafka_client.offsets_unavailable_error(
                topic, partition, needed, end, None, None
            )
        return _kafka_client.offsets_unavailable_error(topic, partition, needed, end, *marks)
    match = _DELETED.search(text)
    if match is not None and ("KAFKA_DATA_LOSS" in text or "may have been missed" in text):
        return SourceError(
            f"Kafka partition(s) {match.group('tps')} are in the query's checkpoint but no "
            "longer exist on Kafka (the topic was deleted, or recreated with fewer "
            "partitions). lakehouse never skips or resets offsets silently. To go on, accept "
            "the gap explicitly: start the query with a new checkpoint location, a new "
            "pipeline_id and startingOffsets naming where to resume."
        )
    if _UNASSIGNED_START.search(text):
        return ConfigError(
            "option 'startingOffsets' must give an offset for every partition of every "
            "subscribed topic (Spark's rule; -2 earliest, -1 latest); the topics' partitions "
            "changed or one was left out.",
            setting="startingOffsets",
        )
    return None
