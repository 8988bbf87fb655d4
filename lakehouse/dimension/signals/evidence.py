"""A batch's evidence for one build table: its change rows grouped by topic-partition and
snapshot phase, and the Debezium notifications and heartbeats it holds, parsed (pure)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from lakehouse.dimension.signals.kinds import INITIAL_SNAPSHOT_AGGREGATES


@dataclass(frozen=True, slots=True)
class RowGroup:
    """The change rows of one build table in one batch, of one ``source.snapshot`` value
    in one topic-partition.

    Attributes:
        topic: the Kafka topic.
        partition: the partition.
        phase: the normalised ``source.snapshot`` (``first``, ``true``, ``last``, ``false``,
            ``incremental``, ...).
        count: rows in the group.
        max_offset: the largest offset of the group.
        max_ts_ms: the newest Kafka record timestamp (epoch ms) of the group, None if unknown.
        max_seq: the newest connector position (``_seq``) of the group, None if unknown.
        max_source_ts_ms: the newest ``source.ts_ms`` of the group, None if unknown.
    """

    topic: str
    partition: int
    phase: str
    count: int
    max_offset: int
    max_ts_ms: int | None
    max_seq: str | None = None
    max_source_ts_ms: int | None = None

    def newer_than(self, seq: str | None, source_ts_ms: int | None) -> bool:
        """Whether the connector itself places the group after a snapshot that ended at
        ``(seq, source_ts_ms)``: by position when both sides have one, else by
        ``source.ts_ms``; True when neither can be compared (no evidence of a replay).

        Kafka timestamps are no evidence: a producer retry or a connector restarted from
        older offsets writes old records again with new Kafka timestamps.

        >>> g = RowGroup("t", 0, "true", 1, 7, 10, max_seq="00005", max_source_ts_ms=100)
        >>> g.newer_than("00005", 100), g.newer_than("00004", 100), g.newer_than(None, 99)
        (False, True, True)
        >>> g.newer_than(None, None)
        True
        """
        if self.max_seq is not None and seq is not None:
            return self.max_seq > seq
        if self.max_source_ts_ms is not None and source_ts_ms is not None:
            return self.max_source_ts_ms > source_ts_ms
        return True


@dataclass(frozen=True, slots=True)
class Notification:
    """One Debezium notification record (``SinkNotificationChannel``).

    Attributes:
        id: the notification id.
        aggregate_type: ``Initial Snapshot``, ``Incremental Snapshot``, ...
        type: ``STARTED``, ``IN_PROGRESS``, ``TABLE_SCAN_COMPLETED``, ``COMPLETED``,
            ``ABORTED``, ``SKIPPED``, ...
        collection: ``additional_data.scanned_collection`` (or ``data_collection``), if any.
        status: ``additional_data.status`` (``SUCCEEDED``, ``SQL_EXCEPTION``), if any.
        timestamp_ms: the notification's own ``timestamp``, if any.
        topic, partition, offset: the record's position.
        kafka_ts_ms: the Kafka record timestamp (epoch ms), None if unknown.
    """

    id: str
    aggregate_type: str
    type: str
    collection: str | None
    status: str | None
    timestamp_ms: int | None
    topic: str
    partition: int
    offset: int
    kafka_ts_ms: int | None

    @property
    def initial(self) -> bool:
        """About an initial (or blocking) snapshot, not an incremental one."""
        return self.aggregate_type in INITIAL_SNAPSHOT_AGGREGATES

    def concerns(self, source_table: str | None) -> bool:
        """Whether the notification is about the build table fed by ``source_table``.

        Connector-wide notifications concern every table. A ``TABLE_SCAN_COMPLETED`` concerns
        the table whose ``source_table`` names its collection (``db.table``,
        ``schema.table``; a longer ``catalog.schema.table`` matches by suffix); it concerns
        no table that takes every source table (``source_table`` None).

        >>> n = Notification("1", "Initial Snapshot", "TABLE_SCAN_COMPLETED", "shop.public.rates",
        ...                  "SUCCEEDED", None, "n", 0, 0, None)
        >>> n.concerns("public.rates"), n.concerns("public.orders"), n.concerns(None)
        (True, False, False)
        """
        if self.type != "TABLE_SCAN_COMPLETED":
            return True
        if source_table is None or not self.collection:
            return False
        a, b = self.collection, source_table
        return a == b or a.endswith("." + b) or b.endswith("." + a)

    def describe(self) -> str:
        """One line for logs, status and the signal detail."""
        text = f"{self.type}"
        if self.collection:
            text += f" {self.collection}"
        if self.status and self.status != "SUCCEEDED":  # a failure, or EMPTY: worth saying
            text += f" (status {self.status})"
        return f"{text} [{self.aggregate_type}, id {self.id}, {self.where}]"

    @property
    def where(self) -> str:
        """``topic[partition]@offset``."""
        return f"{self.topic}[{self.partition}]@{self.offset}"

    def to_dict(self) -> dict[str, Any]:
        """For ``lakehouse.snapshot.lastNotification``."""
        return {
            "id": self.id,
            "aggregateType": self.aggregate_type,
            "type": self.type,
            "collection": self.collection,
            "status": self.status,
            "timestamp": self.timestamp_ms,
            "kafkaTimestamp": self.kafka_ts_ms,
            "position": self.where,
        }


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One Debezium heartbeat record (value ``{"ts_ms": ...}``).

    Attributes:
        topic, partition, offset: the record's position.
        kafka_ts_ms: the Kafka record timestamp (epoch ms), None if unknown.
        ts_ms: the heartbeat's own ``ts_ms``, if any.
    """

    topic: str
    partition: int
    offset: int
    kafka_ts_ms: int | None
    ts_ms: int | None = None

    @property
    def where(self) -> str:
        """``topic[partition]@offset``."""
        return f"{self.topic}[{self.partition}]@{self.offset}"


def _payload(value: bytes | None) -> dict[str, Any] | None:
    if value is None or not value.strip() or value.strip() == b"null":
        return None
    try:
        data = json.loads(value)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"not JSON: {e}") from e
    if isinstance(data, dict) and isinstance(data.get("payload"), dict) and "schema" in data:
        data = data["payload"]  # JsonConverter with schemas.enable=true
    if not isinstance(data, dict):
        raise ValueError(f"not a JSON object but {type(data).__name__}")
    return data


def _int_or_none(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def parse_notification(
    value: bytes | None, *, topic: str, partition: int, offset: int, kafka_ts_ms: int | None
) -> Notification | None:
    """Parse a notification record's value; None for a tombstone.

    Accepts the plain JSON and the ``{"schema", "payload"}`` envelope, ``timestamp`` as a
    number or a string of digits, and the collection as ``scanned_collection`` (Debezium
    2.5+) or ``data_collection``.

    >>> v = b'{"id": "x", "aggregate_type": "Initial Snapshot", "type": "COMPLETED",'
    >>> v += b' "additional_data": {"connector_name": "db"}, "timestamp": "1695817046353"}'
    >>> n = parse_notification(v, topic="n", partition=0, offset=4, kafka_ts_ms=None)
    >>> n.type, n.timestamp_ms, n.where
    ('COMPLETED', 1695817046353, 'n[0]@4')

    Raises:
        ValueError: the value is not a notification (the sink dead-letters it).
    """
    data = _payload(value)
    if data is None:
        return None
    kind, aggregate = data.get("type"), data.get("aggregate_type")
    if not isinstance(kind, str) or not isinstance(aggregate, str):
        raise ValueError("a notification needs string fields 'type' and 'aggregate_type'")
    extra = data.get("additional_data") or {}
    if not isinstance(extra, dict):
        raise ValueError("'additional_data' of a notification must be an object")
    collection = extra.get("scanned_collection") or extra.get("data_collection")
    status = extra.get("status")
    return Notification(
        id=str(data.get("id", "")),
        aggregate_type=aggregate,
        type=kind.upper(),
        collection=str(collection) if collection else None,
        status=str(status).upper() if status else None,
        timestamp_ms=_int_or_none(data.get("timestamp")),
        topic=topic,
        partition=partition,
        offset=offset,
        kafka_ts_ms=kafka_ts_ms,
    )


def parse_heartbeat(
    value: bytes | None, *, topic: str, partition: int, offset: int, kafka_ts_ms: int | None
) -> Heartbeat | None:
    """Parse a heartbeat record's value (``{"ts_ms": ...}``); None for a tombstone.

    >>> parse_heartbeat(b'{"ts_ms": 17}', topic="h", partition=0, offset=0, kafka_ts_ms=5).ts_ms
    17

    Raises:
        ValueError: the value is not a heartbeat (the sink dead-letters it).
    """
    data = _payload(value)
    if data is None:
        return None
    if "ts_ms" not in data:
        raise ValueError("a heartbeat needs the field 'ts_ms'")
    return Heartbeat(topic, partition, offset, kafka_ts_ms, _int_or_none(data.get("ts_ms")))


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchEvidence:
    """What one batch holds for one build table: its change rows (grouped), and the
    notifications and heartbeats of its signal topics."""

    rows: tuple[RowGroup, ...] = ()
    notifications: tuple[Notification, ...] = ()
    heartbeats: tuple[Heartbeat, ...] = ()
