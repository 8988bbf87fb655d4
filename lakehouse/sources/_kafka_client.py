"""confluent-kafka access on the driver (private to :mod:`lakehouse.sources`).

:class:`KafkaMetadata` reads topic partitions and watermarks with the user's librdkafka
configuration, for the runner's start-up check of a Kafka stream, its outage probe, and the
snapshot signals' high-watermark reads (Spark's Kafka source reads the records). Errors become
:class:`SourceError` messages that name the broker address and the settings to check.
Passwords and keys never appear in a message.

librdkafka reports connection and authentication failures asynchronously (error callback
and log lines) while the synchronous call only times out with ``_TRANSPORT``; the
collectors below keep the recent ones so the final error can say *why*.
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from lakehouse.errors import BrokerUnavailableError, ConfigError, SourceError

_log = logging.getLogger("lakehouse.sources.kafka")

#: Defaults for the driver's metadata consumer (it uses assign(), never joins a group, but
#: librdkafka requires a group id).
CONSUMER_DEFAULTS: Mapping[str, str] = {
    "group.id": "lakehouse-metadata",
    "client.id": "lakehouse-metadata",
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
#: A partition between leaders: a topic just created, an election after a broker restart. The
#: broker answers, so these are no reason to fail; librdkafka does not flag them retriable on
#: the synchronous watermark call, hence the list.
_LEADERLESS_CODES = frozenset(
    {
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
    }
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
        f"could not reach Kafka at {bootstrap!r} within {timeout_ms} ms while {doing}: "
        f"{detail}. Check that the brokers run and are reachable from this host, that the "
        "setting kafka.bootstrap_servers (--bootstrap-servers; the source option "
        "kafka.bootstrap.servers) lists them, and that the client option security.protocol "
        f"(in [kafka.options] or kafka.config_file) matches their listener (in use: "
        f"{security}); for a slow network raise the source option 'metadataTimeoutMs'."
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
            "matching kafka.options entry, 'kafka.'-prefixed option or kafka.config_file entry "
            "(librdkafka property names, e.g. security.protocol).",
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
        librdkafka default) it is the last stable offset. A retriable error (the partition has
        no leader yet: a topic just created, a leader being elected after a broker restart) is
        asked again until the timeout, as :meth:`partitions` does; the timeout bounds the whole
        call.

        Raises:
            SourceError: the brokers cannot be reached, or the partition has no leader, within
                the timeout; or the broker refused the request.
        """
        consumer = self._live()
        deadline = time.monotonic() + self._timeout_ms / 1000
        while True:
            remaining = max(deadline - time.monotonic(), 0.001)
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=remaining, cached=False
                )
            except KafkaException as e:
                error = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                leaderless = error is not None and error.code() in _LEADERLESS_CODES
                retriable = error is not None and error.retriable()
                if (leaderless or retriable) and time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
                if leaderless and error is not None:
                    raise SourceError(
                        f"partition {partition} of topic {topic!r} had no leader on Kafka at "
                        f"{self._config.get('bootstrap.servers')!r} for {self._timeout_ms} ms "
                        f"({error.str()}): the brokers answer, but the ones holding its "
                        "replicas are down or still electing one. Check them (kafka-topics.sh "
                        "--describe), or raise the source option 'metadataTimeoutMs'."
                    ) from e
                raise self._failure(
                    f"fetching the watermarks of topic {topic!r} partition {partition}", e
                ) from e
            return int(low), int(high)

    def topic_ids(self, topics: list[str]) -> dict[str, str]:
        """The topic id (KIP-516) of each topic: a new id means the topic was deleted and
        created again, whatever its offsets. Topics the broker gives no id are left out.

        Raises:
            SourceError: the brokers cannot be reached within the timeout.
        """
        from confluent_kafka import TopicCollection
        from confluent_kafka.admin import AdminClient

        consumer_only = {"group.id", "client.id", "enable.auto.commit", "auto.offset.reset"}
        admin = AdminClient(
            {k: v for k, v in self._config.items() if k not in consumer_only}
            | {"client.id": "lakehouse-admin"}
            | self._diagnostics.hooks()  # its log lines feed our messages, not stderr
        )
        ids: dict[str, str] = {}
        futures = admin.describe_topics(
            TopicCollection(sorted(topics)), request_timeout=self._timeout_ms / 1000
        )
        for name, future in futures.items():
            try:
                described = future.result(timeout=self._timeout_ms / 1000)
            except Exception as e:
                raise self._failure(f"describing topic {name!r}", e) from e
            topic_id = str(described.topic_id) if described.topic_id is not None else ""
            if topic_id and set(topic_id) - {"0", "-", "A"}:  # the zero id: none known
                ids[name] = topic_id
        return ids

    def close(self) -> None:
        """Close the consumer; idempotent."""
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()


def offsets_unavailable_error(
    topic: str, partition: int, start: int, end: int | None, low: int | None, high: int | None
) -> SourceError:
    """The error for a position that Kafka no longer holds (never skipped silently).

    ``low``/``high`` are the partition's watermarks now, or None when they could not be read.
    """
    wanted = f"offsets [{start}, {end})" if end is not None else f"offset {start} onwards"
    if low is None or high is None:
        holds = "Kafka no longer holds them"
        why = (
            "retention or delete-records removed records, or the topic was deleted and "
            "recreated (its watermarks could not be read to say which)"
        )
        resume = "<offset>"
    else:
        holds = f"Kafka holds [{low}, {high})"
        resume = str(low)
        if start < low:
            why = (
                f"the partition's earliest offset is now {low}: retention or delete-records "
                "removed the records before it, or the topic was deleted and recreated"
            )
        else:
            why = (
                f"the partition's latest offset is now {high}, before the checkpoint's "
                "position: the topic was probably deleted and recreated (or an unclean leader "
                "election lost records)"
            )
    return SourceError(
        f"topic {topic!r} partition {partition}: the query needs {wanted} but {holds}; {why}. "
        "lakehouse never skips or resets offsets silently. To go on, accept the gap "
        "explicitly: start the query with a new checkpoint location, a new pipeline_id (the "
        "old id's transactions would make the new checkpoint's first batches look like "
        "replays) and startingOffsets naming where to resume (e.g. "
        f'{{"{topic}": {{"{partition}": {resume}}}}}), and re-ingest the missing records from '
        "another copy if they matter."
    )
