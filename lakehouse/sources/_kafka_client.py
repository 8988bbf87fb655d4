"""confluent-kafka access for the Kafka source (private to :mod:`lakehouse.sources`).

Two users, in two kinds of process:

* :class:`KafkaMetadata`, on the driver: topic partitions and watermarks for offset planning.
* :func:`read_range`, on executors: the records of one partition in ``[start, end)``.

Both build their consumer from the same librdkafka configuration (see
:func:`consumer_config`) and turn librdkafka's errors into :class:`SourceError` messages that
name the broker address and the settings to check. Passwords and keys never appear in a
message.

librdkafka reports connection and authentication failures asynchronously (error callback
and log lines) while the synchronous call only times out with ``_TRANSPORT``; the
collectors below keep the recent ones so the final error can say *why*.
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from lakehouse.errors import BrokerUnavailableError, ConfigError, SourceError
from lakehouse.sources._batches import RawBatchBuilder
from lakehouse.sources.schema import TIMESTAMP_TYPE_NONE

if TYPE_CHECKING:
    import pyarrow as pa

_log = logging.getLogger("lakehouse.sources.kafka")

#: librdkafka settings the source controls; users may not set them (cf. Spark's Kafka source,
#: which rejects the same Kafka options with the same reasons).
RESERVED_CONSUMER_SETTINGS: Mapping[str, str] = {
    "enable.auto.commit": (
        "the stream's offsets live in Spark's checkpoint and the source never commits them to Kafka"
    ),
    "auto.offset.reset": (
        "set the source option 'startingOffsets' instead; once a query runs, the source fails "
        "rather than resetting offsets"
    ),
    "enable.partition.eof": "the source relies on end-of-partition events to finish a read",
    "allow.auto.create.topics": "the source never creates topics",
}

#: Defaults for the consumer; every one can be overridden with a ``kafka.``-prefixed option.
CONSUMER_DEFAULTS: Mapping[str, str] = {
    # assign() is used, never subscribe(), so no group is joined; librdkafka requires an id.
    "group.id": "lakehouse-source",
    "client.id": "lakehouse-source",
    # Measured on the Tansu test broker: assign() with a short fetch wait reads ~10x faster
    # than a group subscription with defaults. Against real Kafka it only bounds latency.
    "fetch.wait.max.ms": "10",
}

#: Security settings whose *values* may be shown in messages; any other ``sasl.*`` / ``ssl.*``
#: setting is shown by name only (it may hold a password, a key or a token).
_SHOWABLE_SECURITY_SETTINGS = (
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "ssl.ca.location",
    "ssl.endpoint.identification.algorithm",
)

_AUTH_CODES = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.ILLEGAL_SASL_STATE,
        KafkaError.UNSUPPORTED_SASL_MECHANISM,
    }
)
_ACL_CODES = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)
_OUT_OF_RANGE_CODES = frozenset({KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE})
_UNKNOWN_CODES = frozenset(
    {KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART}
)


def read_properties_file(path: str) -> dict[str, str]:
    """Parse a librdkafka / Java-style properties file into a dict.

    Lines are ``key=value`` or ``key: value``; blank lines and lines starting with ``#`` or
    ``!`` are ignored; keys and values are stripped. Escapes and line continuations are not
    supported.

    Raises:
        ConfigError: the file cannot be read, or a line has no separator.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError as e:
        raise ConfigError(
            f"cannot read the Kafka client configuration file {path!r} (option "
            f"'kafka.config.file'): {e.strerror or e}. Give a readable librdkafka properties "
            "file on the driver, one 'key=value' per line.",
            setting="kafka.config.file",
        ) from e
    config: dict[str, str] = {}
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = re.match(r"^([^=:\s]+)\s*[=:]\s*(.*)$", line)
        if match is None:
            raise ConfigError(
                f"line {number} of the Kafka client configuration file {path!r} (option "
                "'kafka.config.file') is not 'key=value'; the key is shown without its value: "
                f"{line.split()[0]!r}",
                setting="kafka.config.file",
            )
        config[match.group(1)] = match.group(2).strip()
    return config


def security_summary(config: Mapping[str, str]) -> str:
    """Describe the security settings in use without revealing secrets.

    >>> security_summary({"security.protocol": "SASL_SSL", "sasl.username": "alice",
    ...                   "sasl.password": "s3cret", "bootstrap.servers": "b:9092"})
    "kafka.security.protocol='SASL_SSL', kafka.sasl.password=<set>, kafka.sasl.username='alice'"
    >>> security_summary({"bootstrap.servers": "b:9092"})
    "kafka.security.protocol='PLAINTEXT' (default)"
    """
    parts: list[str] = []
    if "security.protocol" not in config:
        parts.append("kafka.security.protocol='PLAINTEXT' (default)")
    for key in sorted(config, key=lambda k: (k != "security.protocol", k)):
        if key == "security.protocol" or key.startswith(("sasl.", "ssl.")):
            if key in _SHOWABLE_SECURITY_SETTINGS:
                parts.append(f"kafka.{key}={config[key]!r}")
            else:
                parts.append(f"kafka.{key}=<set>")
    return ", ".join(parts)


class _LogCollector:
    """librdkafka ``logger``: keeps the recent lines for error messages, forwards at DEBUG.

    librdkafka logs every failed connection attempt (several per second); at DEBUG they stay
    out of the way, and the error raised by the source quotes the most recent one.
    """

    def __init__(self) -> None:
        self.lines: deque[str] = deque(maxlen=20)

    def log(self, level: int, msg: str, *args: Any) -> None:
        text = msg % args if args else msg
        if level >= logging.WARNING:
            self.lines.append(text)
        _log.debug("librdkafka: %s", text)


class _ClientDiagnostics:
    """Error callback and log collector of one librdkafka client."""

    def __init__(self) -> None:
        self.errors: deque[KafkaError] = deque(maxlen=20)
        self.logs = _LogCollector()

    def hooks(self) -> dict[str, Any]:
        return {"error_cb": self.errors.append, "logger": self.logs}

    def failure(
        self,
        config: Mapping[str, str],
        *,
        doing: str,
        timeout_ms: int,
        cause: BaseException | KafkaError | None = None,
    ) -> SourceError:
        """Build the SourceError for a call that failed to reach or use the brokers."""
        return connection_error(
            config,
            doing=doing,
            timeout_ms=timeout_ms,
            errors=list(self.errors),
            log_lines=list(self.logs.lines),
            cause=cause,
        )


def connection_error(
    config: Mapping[str, str],
    *,
    doing: str,
    timeout_ms: int,
    errors: list[KafkaError],
    log_lines: list[str],
    cause: BaseException | KafkaError | None = None,
) -> SourceError:
    """Classify a failure to use the brokers and return a SourceError that says what to check.

    Authentication (SASL), authorization (ACL) and TLS failures name the security settings;
    anything else is reported as "could not reach", naming the address and
    ``kafka.bootstrap.servers``: a :class:`BrokerUnavailableError`, the only kind a running
    source retries (an outage ends; a rejected credential does not fix itself).
    """
    bootstrap = config.get("bootstrap.servers", "")
    codes = {e.code() for e in errors}
    if isinstance(cause, KafkaException) and cause.args and isinstance(cause.args[0], KafkaError):
        codes.add(cause.args[0].code())
    elif isinstance(cause, KafkaError):
        codes.add(cause.code())
    detail = _detail(errors, log_lines, cause)
    security = security_summary(config)
    if codes & _AUTH_CODES or "authentication" in detail.lower():
        return SourceError(
            f"Kafka at {bootstrap!r} rejected the client's authentication while {doing}: "
            f"{detail}. Check the security settings kafka.security.protocol, "
            "kafka.sasl.mechanism and kafka.sasl.username / kafka.sasl.password (as options or "
            f"in kafka.config.file); in use: {security}."
        )
    if codes & _ACL_CODES:
        return SourceError(
            f"Kafka at {bootstrap!r} denied access while {doing}: {detail}. The client "
            "authenticated but lacks permission: grant the principal read (and describe) on "
            f"the topics, or use other credentials; security settings in use: {security}."
        )
    if KafkaError._SSL in codes or re.search(r"SSL handshake|certificate verif", detail):
        return SourceError(
            f"the TLS connection to Kafka at {bootstrap!r} failed while {doing}: {detail}. "
            "Check kafka.security.protocol and the kafka.ssl.* settings (CA location, "
            f"certificates, endpoint identification); in use: {security}."
        )
    return BrokerUnavailableError(
        f"could not reach Kafka at {bootstrap!r} (setting 'kafka.bootstrap.servers') within "
        f"{timeout_ms} ms while {doing}: {detail}. Check that the brokers run and are "
        "reachable from this host, that kafka.bootstrap.servers lists them, and that "
        f"kafka.security.protocol matches their listener (in use: {security}); for a slow "
        "network raise the source option 'metadataTimeoutMs'."
    )


def _detail(
    errors: list[KafkaError], log_lines: list[str], cause: BaseException | KafkaError | None
) -> str:
    # The most specific reason first: an error callback (e.g. "SASL authentication error:
    # ..."), then a log line ("Connect to ipv4#127.0.0.1:1 failed: Connection refused"),
    # then the synchronous call's own error ("Failed to get metadata: ...").
    specific = [e for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN]
    if specific:
        return specific[-1].str()
    if log_lines:
        return re.sub(r"^\w+ \[[^\]]*\] \[[^\]]*\]: ", "", log_lines[-1])
    if isinstance(cause, KafkaException) and cause.args and isinstance(cause.args[0], KafkaError):
        return cause.args[0].str()
    if isinstance(cause, KafkaError):
        return cause.str()
    if errors:
        return errors[-1].str()
    return str(cause) if cause is not None else "no response"


def _open_consumer(config: Mapping[str, str], diagnostics: _ClientDiagnostics) -> Consumer:
    try:
        return Consumer({**config, **diagnostics.hooks()})
    except (KafkaException, ValueError) as e:
        raise ConfigError(
            f"the Kafka client rejected its configuration: {_kafka_message(e)}. Fix the "
            "matching 'kafka.'-prefixed option or kafka.config.file entry (librdkafka property "
            "names, e.g. kafka.security.protocol).",
            setting="kafka.*",
        ) from e


def _kafka_message(e: BaseException) -> str:
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        return e.args[0].str()
    return str(e)


class KafkaMetadata:
    """Driver-side view of topic partitions and watermarks, over one long-lived consumer.

    Holds a live librdkafka client: never pickle it (the readers drop it when pickled) and
    call :meth:`close` when done. Every call is bounded by ``timeout_ms``.
    """

    def __init__(self, config: Mapping[str, str], *, timeout_ms: int) -> None:
        self._config = dict(config)
        self._timeout_ms = timeout_ms
        self._diagnostics = _ClientDiagnostics()
        self._consumer: Consumer | None = _open_consumer(self._config, self._diagnostics)

    def _live(self) -> Consumer:
        if self._consumer is None:
            raise SourceError("the Kafka metadata client was used after close()")
        return self._consumer

    def _failure(self, doing: str, cause: BaseException | KafkaError | None) -> SourceError:
        # Error callbacks are served by poll(); without this they would never arrive.
        self._live().poll(0)
        return self._diagnostics.failure(
            self._config, doing=doing, timeout_ms=self._timeout_ms, cause=cause
        )

    def partitions(self, topic: str) -> list[int]:
        """Return the partition ids of ``topic``, ascending.

        Asks for this topic only; the consumer never auto-creates topics.

        Raises:
            SourceError: the topic does not exist, access is denied, or the brokers cannot be
                reached (or reject authentication) within the timeout.
        """
        consumer = self._live()
        deadline = time.monotonic() + self._timeout_ms / 1000
        while True:
            remaining = max(deadline - time.monotonic(), 0.001)
            try:
                metadata = consumer.list_topics(topic=topic, timeout=remaining)
            except KafkaException as e:
                raise self._failure(f"listing the partitions of topic {topic!r}", e) from e
            described = metadata.topics.get(topic)
            error = described.error if described is not None else None
            if described is not None and error is None:
                return sorted(described.partitions)
            if error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise SourceError(
                    f"topic {topic!r} does not exist on Kafka at "
                    f"{self._config.get('bootstrap.servers')!r} (option 'subscribe'). Create "
                    "the topic first or fix the name; the source never creates topics."
                )
            if error is not None and error.code() in _ACL_CODES:
                raise self._failure(f"describing topic {topic!r}", error)
            if (error is None or error.retriable()) and time.monotonic() < deadline:
                time.sleep(0.1)  # e.g. LEADER_NOT_AVAILABLE while a new topic is set up
                continue
            raise SourceError(
                f"Kafka at {self._config.get('bootstrap.servers')!r} returned no usable "
                f"metadata for topic {topic!r} within {self._timeout_ms} ms: "
                f"{error.str() if error is not None else 'topic missing from the response'}."
            )

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """Return ``(low, high)``: the earliest offset held and the next offset to be written.

        ``high`` is what the broker reports; with ``isolation.level=read_committed`` (the
        librdkafka default) it is the last stable offset.

        Raises:
            SourceError: the brokers cannot be reached within the timeout.
        """
        try:
            low, high = self._live().get_watermark_offsets(
                TopicPartition(topic, partition), timeout=self._timeout_ms / 1000, cached=False
            )
        except KafkaException as e:
            raise self._failure(
                f"fetching the watermarks of topic {topic!r} partition {partition}", e
            ) from e
        return int(low), int(high)

    def close(self) -> None:
        """Close the consumer; idempotent."""
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()


def offsets_unavailable_error(
    topic: str, partition: int, start: int, end: int | None, low: int, high: int
) -> SourceError:
    """The error for a planned position that Kafka no longer holds (never skipped silently)."""
    wanted = f"offsets [{start}, {end})" if end is not None else f"offset {start} onwards"
    if start < low:
        why = (
            f"the partition's earliest offset is now {low}: retention or delete-records removed "
            "the records before it, or the topic was deleted and recreated"
        )
    else:
        why = (
            f"the partition's latest offset is now {high}, before the checkpoint's position: "
            "the topic was probably deleted and recreated (or an unclean leader election lost "
            "records)"
        )
    return SourceError(
        f"topic {topic!r} partition {partition}: the query needs {wanted} but Kafka holds "
        f"[{low}, {high}); {why}. lakehouse never skips or resets offsets silently. To go "
        "on, accept the gap explicitly: start the query with a new checkpoint location, a new "
        "pipeline_id (the old id's transactions would make the new checkpoint's first batches "
        "look like replays) and startingOffsets naming where to resume (e.g. "
        f'{{"{topic}": {{"{partition}": {low}}}}}), and re-ingest the missing records from '
        "another copy if they matter."
    )


def read_range(
    config: Mapping[str, str],
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    fetch_timeout_ms: int,
    outage_timeout_ms: int = 0,
    report: Callable[[str], None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``topic``/``partition`` with ``start <= offset < end`` as batches.

    A read that stalls because no broker answers (a broker outage: librdkafka reports
    connection failures) waits for the brokers up to ``outage_timeout_ms`` after the last
    record instead of ``fetch_timeout_ms``, calling ``report`` when the outage is noticed,
    then at growing intervals, and when records flow again; librdkafka reconnects by itself
    and the read resumes at the next offset of the range.

    Deterministic for an immutable log: the same range yields the same records in offset
    order. Offsets missing inside the range (compacted away, transaction markers, aborted
    records under read_committed) are skipped; the read ends at ``end`` or at the end of the
    partition when that is at or past ``end``.

    Raises:
        SourceError: the range is no longer (or not yet) in the partition, the partition
            ends before ``end``, the topic is gone, or no record arrives for
            ``fetch_timeout_ms`` while records are still expected (or, in an outage, for
            ``outage_timeout_ms``).
    """
    diagnostics = _ClientDiagnostics()
    consumer = _open_consumer(
        {
            **config,
            "enable.partition.eof": "true",
            "auto.offset.reset": "error",
            "enable.auto.commit": "false",
        },
        diagnostics,
    )
    builder = RawBatchBuilder(topic)
    where = f"topic {topic!r} partition {partition}"
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        next_offset = start
        last_progress = time.monotonic()
        outage_reports = 0
        next_report = 0.0
        while next_offset < end:
            try:
                messages = consumer.consume(min(end - next_offset, 10_000), timeout=1.0)
            except KafkaException as e:
                raise diagnostics.failure(
                    config,
                    doing=f"reading {where} offsets [{start}, {end})",
                    timeout_ms=fetch_timeout_ms,
                    cause=e,
                ) from e
            stalled_ms = (time.monotonic() - last_progress) * 1000
            if stalled_ms > fetch_timeout_ms:
                # Progress means records of the range arriving; errors and empty polls do not
                # count, so a broker that keeps answering without data still times out.
                stalled = _stalled_error(
                    config, diagnostics, where, start, end, next_offset, fetch_timeout_ms
                )
                if not isinstance(stalled, BrokerUnavailableError) or (
                    stalled_ms > outage_timeout_ms
                ):
                    raise stalled
                if report is not None and time.monotonic() >= next_report:
                    outage_reports += 1
                    report(
                        f"Kafka at {config.get('bootstrap.servers')!r} is unreachable while "
                        f"reading {where} (no record for {stalled_ms / 1000:.0f} s, stalled at "
                        f"offset {next_offset} of [{start}, {end})): waiting for it, giving "
                        f"up after {outage_timeout_ms / 1000:.0f} s (kafka.outage_timeout_ms)."
                    )
                    # report at doubling intervals: 1, 2, 4, ... 60 s
                    next_report = time.monotonic() + min(2 ** (outage_reports - 1), 60)
            for message in messages:
                error = message.error()
                if error is not None:
                    code = error.code()
                    if code == KafkaError._PARTITION_EOF:
                        eof = int(message.offset())
                        if eof >= end:
                            # Offsets [next_offset, end) do not exist: a gap at the tail.
                            next_offset = end
                            break
                        raise SourceError(
                            f"{where}: the partition ends at offset {eof}, before the planned "
                            f"end {end} of the range [{start}, {end}) being read: the topic was "
                            "probably deleted and recreated (or an unclean leader election "
                            "lost records). Records are not skipped silently; see the "
                            "partition's watermarks and restart with a new checkpoint and "
                            "explicit startingOffsets if the loss is accepted."
                        )
                    if code in _OUT_OF_RANGE_CODES:
                        try:
                            low, high = consumer.get_watermark_offsets(
                                TopicPartition(topic, partition), timeout=10, cached=False
                            )
                        except KafkaException as e:
                            raise SourceError(
                                f"{where}: offsets [{start}, {end}) are out of range "
                                f"({error.str()}) and the partition's watermarks could not be "
                                f"read: {_kafka_message(e)}. Records are not skipped silently."
                            ) from e
                        raise offsets_unavailable_error(topic, partition, start, end, low, high)
                    if code in _UNKNOWN_CODES:
                        raise SourceError(
                            f"{where} no longer exists on Kafka at "
                            f"{config.get('bootstrap.servers')!r} while reading offsets "
                            f"[{start}, {end}): {error.str()}. The topic was deleted; records "
                            "are not skipped silently."
                        )
                    if error.fatal() or not error.retriable():
                        raise diagnostics.failure(
                            config,
                            doing=f"reading {where} offsets [{start}, {end})",
                            timeout_ms=fetch_timeout_ms,
                            cause=error,
                        )
                    continue
                offset = int(message.offset())
                if offset < next_offset:
                    continue
                if offset >= end:
                    next_offset = end
                    break
                ts_type, ts_ms = message.timestamp()
                # librdkafka's timestamp types are Kafka's Java ids plus one.
                java_type = int(ts_type) - 1
                batch = builder.append(
                    message.key(),
                    message.value(),
                    partition,
                    offset,
                    None if java_type == TIMESTAMP_TYPE_NONE else int(ts_ms) * 1000,
                    java_type,
                )
                next_offset = offset + 1
                last_progress = time.monotonic()
                if outage_reports and report is not None:
                    report(
                        f"Kafka at {config.get('bootstrap.servers')!r} delivers {where} "
                        f"again; the read resumes at offset {offset}."
                    )
                    outage_reports = 0
                    diagnostics.errors.clear()  # the outage's errors explain nothing later
                    diagnostics.logs.lines.clear()
                if batch is not None:
                    yield batch
        last = builder.flush()
        if last is not None:
            yield last
    finally:
        consumer.close()


def _stalled_error(
    config: Mapping[str, str],
    diagnostics: _ClientDiagnostics,
    where: str,
    start: int,
    end: int,
    next_offset: int,
    fetch_timeout_ms: int,
) -> SourceError:
    if diagnostics.errors or diagnostics.logs.lines:
        return diagnostics.failure(
            config,
            doing=f"reading {where} offsets [{start}, {end}) (stalled at {next_offset})",
            timeout_ms=fetch_timeout_ms,
        )
    return SourceError(
        f"{where}: no record arrived for {fetch_timeout_ms} ms while reading offsets "
        f"[{start}, {end}) (next expected offset {next_offset}); the broker reports records "
        "it does not deliver. Check the broker's health, or raise the source option "
        "'fetchTimeoutMs'."
    )
