"""A Kafka streaming source for Spark, over confluent-kafka, on Spark's Python DataSource API.

Spark's own Kafka connector is a JVM jar that is not always obtainable; this source reads
the same records with the same schema (:data:`~lakehouse.sources.schema.RAW_SCHEMA`: Spark's
Kafka schema without headers) through librdkafka.

Usage (after :func:`lakehouse.sources.register_sources`)::

    df = (spark.readStream.format("lakehouse-kafka")
          .option("kafka.bootstrap.servers", "broker:9092")
          .option("subscribe", "dbserver1.inventory.customers")
          .option("startingOffsets", "earliest")
          .option("kafka.security.protocol", "SASL_SSL")        # any librdkafka setting
          .option("kafka.config.file", "/secrets/kafka.properties")
          .load())

Options (names are case-insensitive, as everywhere in Spark):

``kafka.bootstrap.servers`` (or ``bootstrap.servers``)
    Required, here or in ``kafka.config.file``.
``subscribe``
    Required. Comma-separated topic names; every topic must exist when the query starts.
``startingOffsets``
    ``earliest`` (default), ``latest``, or JSON ``{"topic": {"0": 23, "1": -2}}`` naming
    every partition of every subscribed topic (-2 earliest, -1 latest), as in Spark's
    Kafka source. Used only when a query starts without a checkpoint.
``kafka.<setting>``
    Passed to the librdkafka consumer without the prefix: ``kafka.security.protocol``,
    ``kafka.sasl.mechanism``, ``kafka.sasl.username``, ``kafka.ssl.ca.location``, ...
``kafka.config.file``
    A librdkafka properties file (``key=value`` lines) read on the driver, so secrets need
    not appear in code or on a command line. ``kafka.`` options win over its entries. Its
    contents reach the executors inside the pickled reader, like every other option.
``metadataTimeoutMs``
    Bound on each driver call to the brokers (default 10000).
``fetchTimeoutMs``
    How long a read task waits without receiving a record it expects (default 120000).
``outageTimeoutMs``, ``outageBackoffMs``, ``outageBackoffMaxMs``
    Broker outages (defaults 600000, 1000, 30000). Once a query has reached its brokers,
    a driver call that finds no broker answering (refused, timed out, all brokers down)
    does not fail the query: the source reports the outage on stderr (naming the address),
    waits ``outageBackoffMs``, doubling up to ``outageBackoffMaxMs``, and retries until the
    brokers answer (it reports that too) or the outage has lasted ``outageTimeoutMs``
    (``0``: fail at once), when the query fails with a :class:`BrokerUnavailableError`
    naming the setting. A read task whose brokers stop answering mid-read waits for them
    up to ``outageTimeoutMs`` (instead of ``fetchTimeoutMs``) while librdkafka reconnects.
    A broker unreachable before the first contact fails at once (a
    wrong address should not look like an outage); authentication, authorisation and TLS
    failures and lost offsets are never retried.
``maxOffsetsPerTrigger``
    Cap on records per micro-batch, split over partitions in proportion to their backlog
    (Spark's rule). Unset by default: every batch ends at the high watermarks. Downstream
    logic that assumes "a batch ends at the high watermark" (the build table's snapshot
    marker) must not be combined with this option without adapting it.

Offsets and exactly-once: the stream's offset is ``{"topic": {"partition": next_offset}}``,
stored by Spark in the query's checkpoint; nothing is committed to Kafka. A batch reads
exactly ``[start, end)`` of each partition, so a replayed batch reads the same records.
A position that Kafka no longer holds (retention, a recreated topic) fails the query with a
:class:`SourceError`; offsets are never reset silently.

Partitions that appear while a query runs (or topics added to ``subscribe`` before a
restart) start at their earliest offset: the first batch that sees them records that
offset in the checkpoint, and the next batch reads from it.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from lakehouse.errors import BrokerUnavailableError, ConfigError, SourceError
from lakehouse.sources import _kafka_client
from lakehouse.sources.schema import RAW_SCHEMA, check_raw_schema

if TYPE_CHECKING:
    import pyarrow as pa

#: The format name to use with ``spark.readStream.format(...)``.
KAFKA_SOURCE_NAME: Final = "lakehouse-kafka"

#: In ``startingOffsets`` JSON: the partition's earliest offset (Spark's convention).
EARLIEST: Final = -2
#: In ``startingOffsets`` JSON: the partition's latest offset (Spark's convention).
LATEST: Final = -1

StartingOffsets = Literal["earliest", "latest"] | dict[str, dict[int, int]]

#: A position per topic-partition: the next offset to read.
Positions = dict[tuple[str, int], int]

_SOURCE_OPTIONS: Final = frozenset(
    {
        "subscribe",
        "startingoffsets",
        "bootstrap.servers",
        "metadatatimeoutms",
        "fetchtimeoutms",
        "maxoffsetspertrigger",
        "outagetimeoutms",
        "outagebackoffms",
        "outagebackoffmaxms",
    }
)
_UNSUPPORTED_OPTIONS: Final = {
    "assign": "list the topics in 'subscribe' (every partition of each is read)",
    "subscribepattern": "list the topics in 'subscribe'",
    "endingoffsets": "this is a streaming source; stop the query or use trigger(availableNow=True)",
    "failondataloss": "the source always fails on data loss; it never skips records silently",
    "startingtimestamp": "use startingOffsets",
    "startingoffsetsbytimestamp": "use startingOffsets",
    "includeheaders": "headers are not part of the raw schema",
    "minoffsetspertrigger": "not supported",
    "maxtriggerdelay": "not supported",
}


@dataclass(frozen=True)
class KafkaSourceOptions:
    """Validated options of one Kafka stream; plain data, picklable.

    Build with :meth:`from_options`. ``client_config`` is the librdkafka configuration
    (``bootstrap.servers``, security settings, ...) without the ``kafka.`` prefix.
    """

    topics: tuple[str, ...]
    client_config: dict[str, str]
    starting_offsets: StartingOffsets = "earliest"
    metadata_timeout_ms: int = 10_000
    fetch_timeout_ms: int = 120_000
    max_offsets_per_trigger: int | None = None
    outage_timeout_ms: int = 600_000
    outage_backoff_ms: int = 1_000
    outage_backoff_max_ms: int = 30_000

    @property
    def bootstrap_servers(self) -> str:
        """The ``bootstrap.servers`` the source connects to."""
        return self.client_config["bootstrap.servers"]

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> KafkaSourceOptions:
        """Validate Spark source options (case-insensitive keys) and build the settings.

        Reads ``kafka.config.file`` when given. Does not contact Kafka.

        Raises:
            ConfigError: a required option is missing, an option is unknown or malformed,
                or a ``kafka.`` option names a setting the source controls.
        """
        opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        client: dict[str, str] = {}
        config_file = opts.get("kafka.config.file")
        if config_file:
            client.update(_kafka_client.read_properties_file(config_file))
        for key, value in opts.items():
            if key == "kafka.config.file":
                continue
            if key.startswith("kafka."):
                client[key.removeprefix("kafka.")] = value
            elif key in _UNSUPPORTED_OPTIONS:
                raise ConfigError(
                    f"option {key!r} of Spark's Kafka source is not supported by "
                    f"{KAFKA_SOURCE_NAME}: {_UNSUPPORTED_OPTIONS[key]}.",
                    setting=key,
                )
            elif key not in _SOURCE_OPTIONS:
                raise ConfigError(
                    f"unknown option {key!r} for the {KAFKA_SOURCE_NAME} source; supported: "
                    f"{', '.join(sorted(_SOURCE_OPTIONS))}, kafka.config.file and any "
                    "'kafka.'-prefixed librdkafka setting.",
                    setting=key,
                )
        for key, why in _kafka_client.RESERVED_CONSUMER_SETTINGS.items():
            if key in client:
                raise ConfigError(
                    f"Kafka setting {key!r} (option 'kafka.{key}' or kafka.config.file) cannot "
                    f"be set: {why}.",
                    setting=f"kafka.{key}",
                )
        plain = opts.get("bootstrap.servers")
        if plain is not None:
            prefixed = opts.get("kafka.bootstrap.servers")
            if prefixed is not None and prefixed != plain:
                raise ConfigError(
                    f"options 'bootstrap.servers' ({plain!r}) and 'kafka.bootstrap.servers' "
                    f"({prefixed!r}) disagree; set only 'kafka.bootstrap.servers'.",
                    setting="kafka.bootstrap.servers",
                )
            client["bootstrap.servers"] = plain
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
        settings = {**_kafka_client.CONSUMER_DEFAULTS, **client}
        return cls(
            topics=topics,
            client_config=settings,
            starting_offsets=_parse_starting_offsets(
                opts.get("startingoffsets", "earliest"), topics
            ),
            metadata_timeout_ms=_positive_int(opts, "metadatatimeoutms", 10_000),
            fetch_timeout_ms=_positive_int(opts, "fetchtimeoutms", 120_000),
            max_offsets_per_trigger=(
                _positive_int(opts, "maxoffsetspertrigger", 0)
                if "maxoffsetspertrigger" in opts
                else None
            ),
            outage_timeout_ms=_positive_int(opts, "outagetimeoutms", 600_000, allow_zero=True),
            outage_backoff_ms=_positive_int(opts, "outagebackoffms", 1_000),
            outage_backoff_max_ms=_positive_int(opts, "outagebackoffmaxms", 30_000),
        )


def _positive_int(
    opts: Mapping[str, str], key: str, default: int, *, allow_zero: bool = False
) -> int:
    raw = opts.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0 or (value == 0 and not allow_zero):
        kind = "a non-negative" if allow_zero else "a positive"
        raise ConfigError(f"option {key!r} must be {kind} integer, got {raw!r}.", setting=key)
    return value


def _report(message: str) -> None:
    """A line for the operator on stderr: the source runs in a Spark Python worker, whose
    stderr Spark forwards to the driver's, where the pipeline's progress lines are."""
    print(f"lakehouse-kafka: {message}", file=sys.stderr, flush=True)


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
    return result


def _first_sentence(error: BaseException) -> str:
    text = str(error)
    head, sep, _ = text.partition(". ")
    return head if sep else text


class PartitionMetadata(Protocol):
    """What offset planning needs from Kafka (implemented by the driver's metadata client)."""

    def partitions(self, topic: str) -> list[int]: ...

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One read task: offsets ``[start, end)`` of one topic-partition (picklable)."""

    topic: str
    partition: int
    start: int
    end: int


def positions_to_offset(positions: Positions) -> dict[str, dict[str, int]]:
    """Render positions as the stream offset, in a canonical order.

    Spark compares offsets as JSON text, so topics are sorted and partitions are in numeric
    order: equal positions always give equal offsets.

    >>> positions_to_offset({("b", 10): 5, ("b", 2): 1, ("a", 0): 0})
    {'a': {'0': 0}, 'b': {'2': 1, '10': 5}}
    """
    offset: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(positions):
        offset.setdefault(topic, {})[str(partition)] = positions[(topic, partition)]
    return offset


def offset_to_positions(offset: Mapping[str, Any]) -> Positions:
    """Parse a stream offset (from Spark's checkpoint) back into positions.

    Raises:
        SourceError: the offset does not have the shape this source writes (e.g. a
            checkpoint of another source).
    """
    positions: Positions = {}
    for topic, per_partition in offset.items():
        if not isinstance(per_partition, Mapping):
            raise SourceError(
                f"stream offset {json.dumps(offset)} was not written by {KAFKA_SOURCE_NAME} "
                '(expected {"topic": {"partition": offset}}); is the checkpoint location '
                "shared with another query?"
            )
        for partition, position in per_partition.items():
            positions[(str(topic), int(partition))] = int(position)
    return positions


def rate_limit(start: Positions, end: Positions, max_records: int) -> Positions:
    """Cap ``end`` so that at most ``max_records`` records lie between ``start`` and it.

    Each partition gets a share proportional to its backlog (floor), and the remainder goes
    one record at a time to the largest fractional shares (ties: topic-partition order), so
    the result is deterministic and sums to exactly ``max_records`` when capped. Partitions
    absent from ``start`` are left as they are.

    >>> rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 30, ("t", 1): 10}, 8)
    {('t', 0): 6, ('t', 1): 2}
    >>> rate_limit({("t", 0): 0}, {("t", 0): 3}, 8)
    {('t', 0): 3}
    """
    backlog = {tp: end[tp] - start[tp] for tp in end if tp in start and end[tp] > start[tp]}
    total = sum(backlog.values())
    if total <= max_records:
        return dict(end)
    shares = {tp: max_records * lag // total for tp, lag in backlog.items()}
    remainder = max_records - sum(shares.values())
    by_fraction = sorted(backlog, key=lambda tp: (-(max_records * backlog[tp] % total), tp))
    for tp in by_fraction[:remainder]:
        shares[tp] += 1
    capped = dict(end)
    for tp, share in shares.items():
        capped[tp] = start[tp] + share
    return capped


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans and reads micro-batches of a Kafka stream.

    Spark creates this reader in two driver-side Python workers: the planner, whose
    instance is pickled into every read task (executors call :meth:`read` on the
    unpickled copy), and the stream runner, which lives as long as the query and calls
    the offset methods. The reader holds only plain options; the driver's live Kafka
    client is created on first use and dropped when pickled, and executors open their own
    consumer per :meth:`read` call.

    State: the runner's instance keeps the metadata client and, under
    ``trigger(availableNow=True)``, the target positions recorded at query start. Neither
    is needed for correctness on restart: every position that matters is in the offsets
    Spark checkpoints.
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
        self._target: Positions | None = None
        # Set once a driver call has reached the brokers: from then on an unreachable
        # broker is an outage to ride out, before it a configuration error to report.
        self._reached = False

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_metadata"] = None  # a live librdkafka client cannot be pickled
        return state

    def _client(self) -> PartitionMetadata:
        if self._metadata is None:
            if self._metadata_factory is not None:
                self._metadata = self._metadata_factory(self._options)
            else:
                self._metadata = _kafka_client.KafkaMetadata(
                    self._options.client_config, timeout_ms=self._options.metadata_timeout_ms
                )
        return self._metadata

    def _watermarks(self) -> dict[tuple[str, int], tuple[int, int]]:
        """``(low, high)`` of every partition of the subscribed topics, in canonical order.

        Rides out broker outages once the brokers were reached (see ``outageTimeoutMs`` in
        the module docstring): bounded exponential backoff, a report line per retry and one
        when the brokers answer again.

        Raises:
            BrokerUnavailableError: no broker answered before the first contact, or for
                longer than ``outageTimeoutMs`` after it.
            SourceError: any other failure (topic missing, authentication, ...), at once.
        """
        options = self._options
        started: float | None = None
        attempt = 0
        while True:
            try:
                marks = self._watermarks_once()
            except BrokerUnavailableError as e:
                if not self._reached:
                    raise
                self._drop_client()  # the next attempt starts with a fresh client
                now = time.monotonic()
                if started is None:
                    started = now
                elapsed_ms = (now - started) * 1000
                remaining_ms = options.outage_timeout_ms - elapsed_ms
                if remaining_ms <= 0:
                    raise BrokerUnavailableError(
                        f"Kafka at {options.bootstrap_servers!r} stayed unreachable for "
                        f"{elapsed_ms / 1000:.0f} s, longer than the source option "
                        f"'outageTimeoutMs' ({options.outage_timeout_ms} ms; setting "
                        "'kafka.outage_timeout_ms'), so the query stops. Restart it once the "
                        "brokers are back: it resumes from its checkpoint. Last error: "
                        f"{e}"
                    ) from e
                delay_ms = min(
                    options.outage_backoff_ms * 2**attempt,
                    options.outage_backoff_max_ms,
                    remaining_ms,
                )
                attempt += 1
                _report(
                    f"Kafka at {options.bootstrap_servers!r} is unreachable (outage for "
                    f"{elapsed_ms / 1000:.0f} s, attempt {attempt}): {_first_sentence(e)}; "
                    f"retrying in {delay_ms / 1000:.1f} s, giving up after "
                    f"{options.outage_timeout_ms / 1000:.0f} s (kafka.outage_timeout_ms)."
                )
                time.sleep(delay_ms / 1000)
                continue
            if started is not None:
                _report(
                    f"Kafka at {options.bootstrap_servers!r} answers again after "
                    f"{time.monotonic() - started:.0f} s and {attempt} retries; resuming from "
                    "the checkpointed offsets."
                )
            self._reached = True
            return marks

    def _drop_client(self) -> None:
        if self._metadata is not None:
            metadata, self._metadata = self._metadata, None
            # a client of an unreachable broker may fail to close cleanly
            with contextlib.suppress(Exception):
                metadata.close()

    def _watermarks_once(self) -> dict[tuple[str, int], tuple[int, int]]:
        client = self._client()
        marks: dict[tuple[str, int], tuple[int, int]] = {}
        for topic in sorted(self._options.topics):
            for partition in client.partitions(topic):
                marks[(topic, partition)] = client.watermarks(topic, partition)
        return marks

    def initialOffset(self) -> dict[str, dict[str, int]]:
        """Resolve ``startingOffsets`` against the brokers.

        Runs on the driver (stream runner), once, when a query starts without a checkpoint;
        never on restart or replay.

        Raises:
            SourceError: Kafka is unreachable or rejects the client, a topic does not
                exist, or an explicit offset lies outside the partition's ``[low, high]``.
            ConfigError: explicit ``startingOffsets`` do not cover every partition, or name
                one that does not exist.
        """
        marks = self._watermarks()
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

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxOffsetsPerTrigger)`` when that option is set, else read all.

        Runs on the driver (stream runner) when the query starts.
        """
        if self._options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self._options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Record the current high watermarks as the end of an ``availableNow`` run.

        Runs on the driver (stream runner), once per query run with
        ``trigger(availableNow=True)``; later :meth:`latestOffset` calls never pass these
        positions, and partitions that appear afterwards wait for the next run.
        """
        self._target = {tp: high for tp, (_, high) in self._watermarks().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, dict[str, int]]:
        """Return the end of the next micro-batch: the high watermarks (capped by ``limit``).

        Runs on the driver (stream runner) once per trigger. Not called to replay a batch
        that is already in the offset log (Spark reuses the logged end), so it may look at
        the live broker. New partitions enter at their low watermark and are read from
        the next batch on.

        Raises:
            SourceError: Kafka is unreachable, a topic or partition the query reads no
                longer exists, or a partition no longer holds the position the query is at
                (retention passed it, or the topic was recreated).
        """
        start_positions = offset_to_positions(start)
        marks = self._watermarks()
        for tp in start_positions:
            if tp[0] in self._options.topics and tp not in marks:
                raise SourceError(
                    f"topic {tp[0]!r} partition {tp[1]} is in the query's checkpoint but no "
                    "longer exists on Kafka (the topic was deleted or recreated with fewer "
                    "partitions). Records are not skipped silently: restart with a new "
                    "checkpoint location and explicit startingOffsets if the loss is accepted."
                )
        end: Positions = {}
        for tp, (low, high) in marks.items():
            if self._target is not None and tp not in self._target:
                continue  # appeared after this availableNow run started
            position = start_positions.get(tp)
            if position is None:
                end[tp] = low  # newly seen: record where it starts, read from next batch
                continue
            if position < low or position > high:
                raise _kafka_client.offsets_unavailable_error(
                    tp[0], tp[1], position, None, low, high
                )
            ceiling = high if self._target is None else min(high, self._target[tp])
            end[tp] = max(ceiling, position)
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(start_positions, end, limit.max_rows)
        return positions_to_offset(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[KafkaInputPartition]:
        """One read task per topic-partition with records in ``[start, end)``.

        Runs on the driver (stream runner) for every batch, including a batch replayed
        after a failure; it uses only the two offsets (no broker call), so a replay plans
        the same tasks. A partition absent from ``start`` was first seen in this batch and
        is read from the next one.
        """
        start_positions = offset_to_positions(start)
        tasks: list[KafkaInputPartition] = []
        for (topic, partition), stop in offset_to_positions(end).items():
            begin = start_positions.get((topic, partition))
            if begin is not None and stop > begin:
                tasks.append(KafkaInputPartition(topic, partition, begin, stop))
        return tasks

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield the records of one task's offset range as Arrow batches of the raw schema.

        Runs on an executor's Python worker, on the unpickled reader; again for a retried
        task or a replayed batch, reading the same ``[start, end)`` and so the same records.
        Opens its own consumer with ``assign()`` (no consumer group) and closes it.

        Raises:
            SourceError: see :func:`lakehouse.sources._kafka_client.read_range`.
        """
        assert isinstance(partition, KafkaInputPartition)
        return _kafka_client.read_range(
            self._options.client_config,
            partition.topic,
            partition.partition,
            partition.start,
            partition.end,
            fetch_timeout_ms=self._options.fetch_timeout_ms,
            outage_timeout_ms=self._options.outage_timeout_ms,
            report=_report,
        )

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, not in Kafka.

        Runs on the driver (stream runner) after each batch completes.
        """

    def stop(self) -> None:
        """Close the driver's Kafka client. Runs on the driver when the query terminates."""
        if self._metadata is not None:
            metadata, self._metadata = self._metadata, None
            metadata.close()


class KafkaDataSource(DataSource):
    """Spark Python data source ``lakehouse-kafka``: a Kafka stream with the raw schema.

    Register with :func:`lakehouse.sources.register_sources`; options are documented in
    :mod:`lakehouse.sources.kafka`. The class is pickled by reference: Python workers
    import it from the installed ``lakehouse`` package.
    """

    @classmethod
    def name(cls) -> str:
        """The format name, ``lakehouse-kafka``."""
        return KAFKA_SOURCE_NAME

    def schema(self) -> StructType:
        """The raw schema. Runs on the driver (a Python worker) when ``load()`` is called."""
        return RAW_SCHEMA

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        """Validate the options and return the reader; contacts no broker.

        Runs on the driver (a Python worker) when a query starts.

        Raises:
            ConfigError: invalid options, or a user schema other than the raw schema.
        """
        check_raw_schema(KAFKA_SOURCE_NAME, schema)
        return KafkaStreamReader(KafkaSourceOptions.from_options(self.options))
