"""Snapshot-end signals: which evidence sets a build table's snapshot marker, and when.

This module is the decision core of the marker (pure Python, no Spark): the sink feeds it,
per build table and micro-batch, what the batch holds — the table's change rows grouped by
topic-partition and snapshot phase, the Debezium notifications and heartbeats — and gets back
a :class:`Decision`. :mod:`lakehouse.dimension.marker` writes the result; the state between
batches is a :class:`SignalState` in the commit metadata of each data commit
(``lakehouse.snapshotState``), so replays and restarts decide the same way.

The signals, strongest first (``snapshot_signals`` chooses which are enabled):

``notification``
    A Debezium notification (``notification.enabled.channels=sink``, Debezium 2.3+) of
    ``aggregate_type`` ``"Initial Snapshot"``: ``COMPLETED``, or ``TABLE_SCAN_COMPLETED``
    whose ``additional_data.scanned_collection`` (older: ``data_collection``) is the table's
    ``source_table`` and whose ``status`` is ``SUCCEEDED`` or ``EMPTY`` (or absent). Debezium
    puts them in the same queue as the row records, but not strictly after the table's rows:
    Debezium (3.5, seen on a real connector in ``tests/integration/test_debezium_postgres.py``)
    holds the snapshot's final row back to mark it ``last``, so the last table's
    ``TABLE_SCAN_COMPLETED`` is sent *before* that row; ``COMPLETED`` comes after every row.
    The order rule below sets such an early notification aside (it is older than the
    snapshot rows), and ``COMPLETED`` ends the snapshot.
``heartbeat``
    A record on the heartbeat topic (``heartbeat.interval.ms`` > 0): Debezium sends one right
    after the snapshot, and heartbeats come only from the streaming phase.
``last`` / ``last_in_data_collection``
    The table's own record with that ``source.snapshot`` value.
``log_record``
    The table's first log-phase record (``source.snapshot = "false"``).

**Never earlier.** A signal seen in batch *k* *covers* the data topics' offsets at that
moment: the positions the stream has consumed up to and including batch *k*, raised to the
data topics' high watermarks read when the sink handles the batch (when the sink has a
probe; the Kafka ingest does). Every record produced before the signal lies below them. The
signal stays *pending* (durably, in ``lakehouse.snapshotState``) until the consumed positions
reach every covered offset — rate limits (``maxOffsetsPerTrigger``) and partitions first
seen in a later batch only delay it — and then fires: the marker is set in a commit after the
data commit whose rows reached the offsets. When several signals are ready in the same batch
the strongest is recorded.

**Order.** Signals must come after the snapshot rows they end:

* an in-band signal (``last``, ``log_record``) counts only when, in its own topic-partition,
  it comes after every snapshot row of the table in the batch (offsets order a partition);
* an out-of-band signal (notification, heartbeat) — and, during a re-snapshot, an in-band
  one too — counts only when its Kafka record timestamp is at or after the newest Kafka
  timestamp of the phase's snapshot rows (records written by one Connect worker carry its
  send time). A stale heartbeat or notification of an earlier connector run, or a log record
  that preceded a re-snapshot in the same batch, is therefore ignored; a pending one is
  dropped when snapshot rows newer than it arrive (a newer pending one of the same signal is
  kept for that: it may still be in order). Records without timestamps skip the check.

**Alerts.** ``ABORTED``, ``SKIPPED`` and a ``TABLE_SCAN_COMPLETED`` with a failed status open
an alert (kept in ``lakehouse.snapshot.alert``); they never set the marker. While an alert is
open, heartbeats and log records do not set it either (Debezium sends a heartbeat even after
a skipped snapshot, and log records prove only that streaming started); ``STARTED`` or
``COMPLETED`` closes it. ``last`` records and completion notifications still count.

**Phases.** ``loading`` → ``complete`` when a signal fires. ``complete`` → ``resnapshot``
when non-incremental snapshot rows of the table arrive after the marker (a connector
restarted with a snapshot mode that re-reads, a blocking snapshot); after an operator's
override, snapshot rows whose Kafka timestamp is not after the override are stragglers of the
snapshot the operator completed, not a re-snapshot. ``resnapshot`` → ``complete`` when a
signal fires again (see :mod:`lakehouse.dimension.marker`). Incremental-snapshot rows
(``"incremental"``) are ordinary versions: they never start, end or signal anything.

Example: a snapshot whose end arrives in the second batch.

>>> opts = SnapshotOptions()
>>> rows = (RowGroup("cdc", 0, "first", 1, 0, 10), RowGroup("cdc", 0, "true", 1, 1, 11))
>>> d = decide(phase="loading", prior=SignalState(), batch=BatchEvidence(rows=rows),
...            options=opts, source_table=None, batch_id=0, positions={"cdc": {"0": 2}})
>>> d.fire is None, d.state.phase
(True, 'loading')
>>> rows = (RowGroup("cdc", 0, "last", 1, 2, 12),)
>>> d = decide(phase="loading", prior=d.state, batch=BatchEvidence(rows=rows),
...            options=opts, source_table=None, batch_id=1, positions={"cdc": {"0": 3}})
>>> d.fire.signal, d.fire.covered, d.state.phase
('last', {'cdc': {'0': 3}}, 'complete')
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from lakehouse.errors import ConfigError

#: ``{topic: {partition: next_offset}}`` (partitions as strings, as in Spark's offsets).
Offsets = dict[str, dict[str, int]]
#: Reads the data topics' current high watermarks (``{topic: {partition: high}}``).
OffsetsProbe = Callable[[], Mapping[str, Mapping[str, int]]]

Phase = Literal["loading", "complete", "resnapshot"]
SignalKind = Literal["notification", "heartbeat", "last", "log_record"]
ResnapshotJoin = Literal["last-complete", "latest"]

#: The signals a build table can be configured with (``snapshot_signals``).
SIGNAL_KINDS: Final[tuple[SignalKind, ...]] = ("notification", "heartbeat", "last", "log_record")
#: Strength of each recorded signal name (lower is stronger).
SIGNAL_RANK: Final[Mapping[str, int]] = {
    "operator": -1,
    "notification": 0,
    "heartbeat": 1,
    "last_in_data_collection": 2,
    "last": 2,
    "log_record": 3,
}
#: ``source.snapshot`` values of the non-incremental snapshot phase.
SNAPSHOT_PHASES: Final = frozenset(
    {"true", "first", "first_in_data_collection", "last_in_data_collection", "last"}
)
#: ``aggregate_type`` values of notifications about initial (and blocking) snapshots.
INITIAL_SNAPSHOT_AGGREGATES: Final = frozenset({"Initial Snapshot", "Blocking Snapshot"})
#: Notification types that open an alert.
ALERT_TYPES: Final = frozenset({"ABORTED", "SKIPPED"})
#: ``TABLE_SCAN_COMPLETED`` statuses of a table scanned to its end. Debezium's
#: ``SnapshotCompletionStatus`` has ``EMPTY`` for a table without rows (3.5's PostgreSQL
#: initial snapshot reports an empty table as ``SUCCEEDED``, seen on a real connector); the
#: others (``NO_PRIMARY_KEY``, ``SQL_EXCEPTION``, ``STOPPED``, ``UNKNOWN_SCHEMA``) are
#: failures.
SCAN_OK_STATUSES: Final = frozenset({"SUCCEEDED", "EMPTY"})


# ------------------------------------------------------------------------------- options


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotOptions:
    """How one build table learns that its snapshot phase ended.

    Attributes:
        signals: the enabled signals (:data:`SIGNAL_KINDS`); ``last`` covers both ``last``
            and ``last_in_data_collection``. A signal whose topic is not configured is
            inactive.
        notification_topic: the Debezium notification topic
            (``notification.sink.topic.name``), or None.
        heartbeat_topic: the Debezium heartbeat topic (``__debezium-heartbeat.<prefix>``),
            or None.
        resnapshot_join: how joins read the table during a re-snapshot: ``last-complete``
            (the last complete version) or ``latest`` (the half re-read latest version).
        resnapshot_deletes: at the end of a re-snapshot, end the versions of keys that were
            not re-read with synthetic deletes. Turn off for filtered re-snapshots (a
            blocking snapshot with ``additional-conditions``), which re-read only some keys.
        resnapshot_max_ended: the largest share of the live keys a completing re-snapshot
            may end (0 to 1). A re-snapshot that would end more stops the ingest with
            :class:`~lakehouse.errors.DataSafetyError` before its commit: losing most of
            a dimension at once is far likelier a replay or a filtered re-read than the
            source's truth. ``1`` turns the check off.
    """

    signals: frozenset[str] = frozenset(SIGNAL_KINDS)
    notification_topic: str | None = None
    heartbeat_topic: str | None = None
    resnapshot_join: ResnapshotJoin = "last-complete"
    resnapshot_deletes: bool = True
    resnapshot_max_ended: float = 0.5

    def __post_init__(self) -> None:
        unknown = sorted(set(self.signals) - set(SIGNAL_KINDS))
        if unknown:
            raise ConfigError(
                f"snapshot_signals {unknown} are not signals; choose from {list(SIGNAL_KINDS)}",
                setting="snapshot_signals",
            )
        if self.notification_topic and self.notification_topic == self.heartbeat_topic:
            raise ConfigError(
                f"notification_topic and heartbeat_topic are both {self.notification_topic!r}; "
                "Debezium writes them to different topics",
                setting="heartbeat_topic",
            )
        if self.resnapshot_join not in ("last-complete", "latest"):
            raise ConfigError(
                f"resnapshot_join must be 'last-complete' or 'latest', got "
                f"{self.resnapshot_join!r}",
                setting="resnapshot_join",
            )
        if not 0 <= self.resnapshot_max_ended <= 1:
            raise ConfigError(
                f"resnapshot_max_ended is a share of the live keys between 0 and 1, got "
                f"{self.resnapshot_max_ended!r}",
                setting="resnapshot_max_ended",
            )

    def active(self, kind: SignalKind) -> bool:
        """Whether signal ``kind`` is enabled and, for the topic signals, has its topic."""
        if kind not in self.signals:
            return False
        if kind == "notification":
            return self.notification_topic is not None
        if kind == "heartbeat":
            return self.heartbeat_topic is not None
        return True

    @property
    def topics(self) -> tuple[str, ...]:
        """The signal topics this table listens to."""
        return tuple(t for t in (self.notification_topic, self.heartbeat_topic) if t)

    def awaiting(self, source_table: str | None) -> tuple[str, ...]:
        """What can end the snapshot phase of the table, strongest first, in words (for
        ``lakehouse snapshot-status``); empty when no signal is active.

        >>> options = SnapshotOptions(signals=frozenset({"heartbeat", "log_record"}),
        ...                           heartbeat_topic="__debezium-heartbeat.shop")
        >>> for line in options.awaiting("public.rates"):
        ...     print(line)
        a heartbeat on __debezium-heartbeat.shop
        public.rates's first change after its snapshot
        """
        table = source_table or "the table"
        scan = f" or TABLE_SCAN_COMPLETED of {source_table}" if source_table else ""
        words: dict[SignalKind, str] = {
            "notification": f"a Debezium notification on {self.notification_topic}: "
            f"COMPLETED{scan}",
            "heartbeat": f"a heartbeat on {self.heartbeat_topic}",
            "last": f"{table}'s final snapshot record (source.snapshot 'last_in_data_collection' "
            "or 'last'; an empty table has none)",
            "log_record": f"{table}'s first change after its snapshot",
        }
        return tuple(words[kind] for kind in SIGNAL_KINDS if self.active(kind))


# ------------------------------------------------------------------------------- offsets


def merge_offsets(*offsets: Mapping[str, Mapping[str, int]] | None) -> Offsets:
    """The per-partition maximum of several offset maps.

    >>> merge_offsets({"a": {"0": 3}}, {"a": {"0": 2, "1": 5}}, None)
    {'a': {'0': 3, '1': 5}}
    """
    out: Offsets = {}
    for one in offsets:
        for topic, parts in (one or {}).items():
            mine = out.setdefault(str(topic), {})
            for partition, offset in parts.items():
                key = str(partition)
                mine[key] = max(int(offset), mine.get(key, int(offset)))
    return {t: dict(sorted(p.items(), key=lambda kv: int(kv[0]))) for t, p in sorted(out.items())}


def uncovered(
    positions: Mapping[str, Mapping[str, int]], covered: Mapping[str, Mapping[str, int]]
) -> Offsets:
    """The covered offsets that ``positions`` has not reached yet (empty when covered).

    An offset of 0 (an empty partition) is always reached.

    >>> uncovered({"a": {"0": 3}}, {"a": {"0": 3, "1": 0}})
    {}
    >>> uncovered({"a": {"0": 3}}, {"a": {"0": 4}, "b": {"0": 1}})
    {'a': {'0': 4}, 'b': {'0': 1}}
    """
    missing: Offsets = {}
    for topic, parts in covered.items():
        for partition, offset in parts.items():
            if int(offset) <= 0:
                continue
            if positions.get(topic, {}).get(str(partition), -1) < int(offset):
                missing.setdefault(topic, {})[str(partition)] = int(offset)
    return missing


def offsets_from_text(text: str | None) -> Offsets | None:
    """Parse an offset map written as JSON (None for empty or malformed text)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        return None
    try:
        return merge_offsets(value)
    except (TypeError, ValueError):
        return None


# ------------------------------------------------------------------------------- evidence


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


# ---------------------------------------------------------------------------------- state


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalEvidence:
    """A signal seen, pending or fired.

    Attributes:
        signal: ``notification``, ``heartbeat``, ``last``, ``last_in_data_collection``,
            ``log_record`` (``operator`` for the override).
        detail: what exactly was seen, and where.
        covered: the data offsets it covers; the marker waits until they are consumed.
        batch_id: the batch that saw it.
        kafka_ts_ms: its Kafka timestamp (for the order check), None if unknown.
        ordered: whether the order check applies (out-of-band, or during a re-snapshot).
    """

    signal: str
    detail: str
    covered: Offsets
    batch_id: int
    kafka_ts_ms: int | None = None
    ordered: bool = True

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "signal": self.signal,
            "detail": self.detail,
            "covered": self.covered,
            "batchId": self.batch_id,
            "kafkaTimestamp": self.kafka_ts_ms,
            "ordered": self.ordered,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SignalEvidence:
        """Inverse of :meth:`to_dict`."""
        return cls(
            signal=str(d["signal"]),
            detail=str(d.get("detail", "")),
            covered=merge_offsets(d.get("covered") or {}),
            batch_id=int(d.get("batchId", -1)),
            kafka_ts_ms=_int_or_none(d.get("kafkaTimestamp")),
            ordered=bool(d.get("ordered", True)),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalState:
    """The bookkeeping of one build table after a batch, kept in its data commit.

    Attributes:
        phase: the phase after the batch.
        positions: the data offsets the stream has consumed (and committed) so far.
        phase_max_ts_ms: the newest Kafka timestamp of this phase's snapshot rows.
        pending: signals seen but not yet covered (oldest first; per signal at most two: the
            oldest and the newest still in order).
        alert: the open alert (ABORTED, SKIPPED, failed table scan), or None.
        fired: the signal that set the marker in this batch (for healing after a crash).
        last_notification: the newest initial-snapshot notification about the table.
        snapshot_seq: the newest connector position among the snapshot rows of the current
            (or last completed) snapshot run; later snapshot rows at or before it are
            replays, not a re-snapshot.
        snapshot_source_ts_ms: the newest ``source.ts_ms`` among them (the same rule when
            the connector gives no position).
        awaiting: while the phase is not complete, what can end it, in words
            (:meth:`SnapshotOptions.awaiting`); None when not recorded.
    """

    phase: Phase = "loading"
    positions: Offsets = field(default_factory=dict)
    phase_max_ts_ms: int | None = None
    pending: tuple[SignalEvidence, ...] = ()
    alert: str | None = None
    fired: SignalEvidence | None = None
    last_notification: Mapping[str, Any] | None = None
    snapshot_seq: str | None = None
    snapshot_source_ts_ms: int | None = None
    awaiting: tuple[str, ...] | None = None

    def to_json(self) -> str:
        """Serialise for commit metadata."""
        return json.dumps(
            {
                "phase": self.phase,
                "positions": self.positions,
                "phaseMaxTs": self.phase_max_ts_ms,
                "pending": [p.to_dict() for p in self.pending],
                "alert": self.alert,
                "fired": self.fired.to_dict() if self.fired else None,
                "lastNotification": self.last_notification,
                "snapshotSeq": self.snapshot_seq,
                "snapshotSourceTs": self.snapshot_source_ts_ms,
                "awaiting": self.awaiting,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | None) -> SignalState:
        """Parse :meth:`to_json` output; empty or malformed text gives the initial state."""
        if not text:
            return cls()
        try:
            d = json.loads(text)
            phase = d.get("phase", "loading")
            return cls(
                phase=phase if phase in ("loading", "complete", "resnapshot") else "loading",
                positions=merge_offsets(d.get("positions") or {}),
                phase_max_ts_ms=_int_or_none(d.get("phaseMaxTs")),
                pending=tuple(SignalEvidence.from_dict(p) for p in d.get("pending") or ()),
                alert=d.get("alert") or None,
                fired=SignalEvidence.from_dict(d["fired"]) if d.get("fired") else None,
                last_notification=d.get("lastNotification") or None,
                snapshot_seq=d.get("snapshotSeq") or None,
                snapshot_source_ts_ms=_int_or_none(d.get("snapshotSourceTs")),
                awaiting=tuple(map(str, d["awaiting"])) if d.get("awaiting") is not None else None,
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return cls()


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """What one batch does to one build table's marker.

    Attributes:
        state: the bookkeeping to record with the batch's data commit.
        start_resnapshot: the table enters a re-snapshot: clear the marker **before** the
            data commit, so no version holds re-read rows under a complete marker.
        fire: set the marker **after** the data commit, from this signal.
        notification: the newest initial-snapshot notification about the table in the
            batch (for ``lakehouse.snapshot.lastNotification``), or None.
        alert_changed: the alert was opened or closed by this batch.
        ignored: signals the batch held that did not count, with the reason (for logs).
    """

    state: SignalState
    start_resnapshot: bool = False
    fire: SignalEvidence | None = None
    notification: Mapping[str, Any] | None = None
    alert_changed: bool = False
    ignored: tuple[str, ...] = ()


# ------------------------------------------------------------------------------- decision


def decide(
    *,
    phase: Phase,
    prior: SignalState,
    batch: BatchEvidence,
    options: SnapshotOptions,
    source_table: str | None,
    batch_id: int,
    positions: Mapping[str, Mapping[str, int]],
    probe: OffsetsProbe | None = None,
    marker_signal: str | None = None,
    completed_at_ms: int | None = None,
) -> Decision:
    """Decide the marker of one build table for one batch (see the module docstring).

    Args:
        phase: the table's phase before the batch (from its properties; ``loading`` for a
            table that does not exist yet).
        prior: the bookkeeping recorded by the table's last data commit. Its per-phase parts
            are discarded when its phase is not ``phase`` (the operator changed the marker,
            or a crash fell between a re-snapshot's start and its first data commit).
        batch: the batch's evidence for this table.
        options: the table's signal options.
        source_table: the table's ``source_table`` (for ``TABLE_SCAN_COMPLETED``).
        batch_id: the micro-batch.
        positions: the data offsets consumed once this batch is committed.
        probe: reads the data topics' high watermarks now; called at most once, and only
            when the batch holds a new signal. None: the signal covers ``positions``.
        marker_signal: the signal that set the current marker (``operator`` enables the
            straggler rule), if complete.
        completed_at_ms: when the current marker was set, if complete.

    Returns:
        The decision. Deterministic for the same inputs (and probe answer).
    """
    state = (
        prior
        if prior.phase == phase
        else SignalState(
            phase=phase,
            last_notification=prior.last_notification,
            snapshot_seq=prior.snapshot_seq,
            snapshot_source_ts_ms=prior.snapshot_source_ts_ms,
        )
    )
    state = replace(state, positions=merge_offsets(positions), fired=None)
    ignored: list[str] = []
    snap = [g for g in batch.rows if g.phase in SNAPSHOT_PHASES]

    start_resnapshot = False
    if phase == "complete" and snap:
        # Only the connector's own position says a new snapshot run began: snapshot rows at
        # or before the completed snapshot's are replays (a producer retry, a connector
        # restarted from older offsets), and the table already holds them.
        fresh = [g for g in snap if g.newer_than(state.snapshot_seq, state.snapshot_source_ts_ms)]
        replayed = sum(g.count for g in snap) - sum(g.count for g in fresh)
        if replayed:
            ignored.append(
                f"{replayed} snapshot row(s) not newer than the completed snapshot's position: "
                "replays of it, not a re-snapshot"
            )
        if fresh and marker_signal == "operator" and completed_at_ms is not None:
            # stragglers of the snapshot the operator declared complete
            late = [g for g in fresh if g.max_ts_ms is None or g.max_ts_ms > completed_at_ms]
            if len(late) < len(fresh):
                ignored.append(
                    f"{sum(g.count for g in fresh) - sum(g.count for g in late)} snapshot "
                    "row(s) not newer than the operator's override: stragglers of the "
                    "snapshot it completed"
                )
            fresh = late
        if fresh:
            phase, start_resnapshot = "resnapshot", True
            state = SignalState(
                phase="resnapshot",
                positions=state.positions,
                last_notification=state.last_notification,
                alert=state.alert,
            )
        snap = fresh

    batch_snap_ts = _max_ts(g.max_ts_ms for g in snap)
    if phase != "complete":
        # the snapshot run's newest position, kept through its completion
        seqs = [g.max_seq for g in snap if g.max_seq is not None]
        if state.snapshot_seq is not None:
            seqs.append(state.snapshot_seq)
        state = replace(
            state,
            snapshot_seq=max(seqs) if seqs else None,
            snapshot_source_ts_ms=_max_opt(
                state.snapshot_source_ts_ms, _max_ts(g.max_source_ts_ms for g in snap)
            ),
        )
    phase_max = None if phase == "complete" else _max_opt(state.phase_max_ts_ms, batch_snap_ts)
    in_band_ordered = phase == "resnapshot"

    def in_order(ts: int | None) -> bool:
        return ts is None or phase_max is None or ts >= phase_max

    seen: list[tuple[str, str, int | None, bool]] = []  # (signal, detail, ts, ordered)

    # Out-of-band: notifications and heartbeats, in Kafka-timestamp order.
    events: list[Notification | Heartbeat] = [n for n in batch.notifications if n.initial]
    events += list(batch.heartbeats)
    events.sort(key=lambda e: (_ts_key(e.kafka_ts_ms), e.topic, e.partition, e.offset))
    alert = state.alert
    newest_note: Notification | None = None
    heartbeat_seen = False
    for e in events:
        if isinstance(e, Notification):
            if not e.concerns(source_table) or e.type == "IN_PROGRESS":
                continue
            newest_note = e
            ok_scan = e.type == "TABLE_SCAN_COMPLETED" and (
                e.status is None or e.status in SCAN_OK_STATUSES
            )
            if e.type in ("STARTED", "COMPLETED"):
                alert = None
            elif e.type in ALERT_TYPES or (e.type == "TABLE_SCAN_COMPLETED" and not ok_scan):
                alert = e.describe()
            if (e.type == "COMPLETED" or ok_scan) and options.active("notification"):
                if in_order(e.kafka_ts_ms):
                    seen.append(("notification", e.describe(), e.kafka_ts_ms, True))
                else:
                    ignored.append(f"{e.describe()}: older than the snapshot rows it would end")
        elif options.active("heartbeat") and not heartbeat_seen:
            if alert is not None:
                ignored.append(f"heartbeat at {e.where}: snapshot alert open ({alert})")
            elif in_order(e.kafka_ts_ms):  # else: a heartbeat from before this snapshot
                seen.append(("heartbeat", f"heartbeat at {e.where}", e.kafka_ts_ms, True))
                heartbeat_seen = True
    notification = newest_note.to_dict() if newest_note else None
    if notification is not None:
        notification["batchId"] = batch_id
    last_notification = notification or state.last_notification

    if phase == "complete":
        # The marker stands; notifications are only recorded (an alert is still surfaced).
        state = replace(
            state,
            alert=alert,
            pending=(),
            phase_max_ts_ms=None,
            last_notification=last_notification,
        )
        return Decision(
            state=state,
            notification=notification,
            alert_changed=alert != prior.alert,
            ignored=tuple(ignored),
        )

    top_snapshot: dict[tuple[str, int], int] = {}
    for g in snap:
        tp = (g.topic, g.partition)
        top_snapshot[tp] = max(top_snapshot.get(tp, -1), g.max_offset)
    ordered_rows = sorted(batch.rows, key=lambda g: (g.topic, g.partition, g.phase))
    # In-band: the table's own 'last' / 'last_in_data_collection' record.
    if options.active("last"):
        for g in ordered_rows:
            if g.phase not in ("last", "last_in_data_collection"):
                continue
            where = f"{g.topic}[{g.partition}]@{g.max_offset}"
            if g.max_offset < top_snapshot[(g.topic, g.partition)]:
                ignored.append(f"'{g.phase}' at {where}: snapshot rows follow it")
            elif in_band_ordered and not in_order(g.max_ts_ms):
                ignored.append(f"'{g.phase}' at {where}: older than the re-snapshot's rows")
            else:
                seen.append((g.phase, f"'{g.phase}' record at {where}", g.max_ts_ms, False))
    # In-band: the table's first log-phase record.
    if options.active("log_record"):
        for g in ordered_rows:
            if g.phase != "false":
                continue
            where = f"{g.topic}[{g.partition}]@{g.max_offset}"
            if g.max_offset < top_snapshot.get((g.topic, g.partition), -1):
                ignored.append(f"log record at {where}: snapshot rows follow it")
            elif in_band_ordered and not in_order(g.max_ts_ms):
                ignored.append(f"log record at {where}: older than the re-snapshot's rows")
            elif alert is not None:
                ignored.append(f"log record at {where}: snapshot alert open ({alert})")
            else:
                seen.append(("log_record", f"log-phase record at {where}", g.max_ts_ms, False))
                break

    covered: Offsets | None = None
    new: list[SignalEvidence] = []
    for signal, detail, ts, ordered in seen:
        if covered is None:
            covered = merge_offsets(state.positions, probe() if probe is not None else None)
        new.append(
            SignalEvidence(
                signal=signal,
                detail=detail,
                covered=covered,
                batch_id=batch_id,
                kafka_ts_ms=ts,
                ordered=ordered or in_band_ordered,
            )
        )

    # Keep, per signal, the oldest one still in order (it covers the fewest offsets, so it
    # fires first) and the newest (it is the last to go stale: TABLE_SCAN_COMPLETED precedes
    # the table's final row, which Debezium holds back, and COMPLETED follows it; read in one
    # batch before that row, only COMPLETED survives the row). Any in between is dominated.
    # Then fire the strongest covered one.
    kept: list[SignalEvidence] = []
    for p in [*state.pending, *new]:
        if p.ordered and not in_order(p.kafka_ts_ms):
            ignored.append(f"pending {p.signal} ({p.detail}) dropped: newer snapshot rows came")
        else:
            kept.append(p)
    pending = [
        p
        for i, p in enumerate(kept)
        if all(q.signal != p.signal for q in kept[:i])
        or all(q.signal != p.signal for q in kept[i + 1 :])
    ]
    ready = [p for p in pending if not uncovered(state.positions, p.covered)]
    fire = min(ready, key=lambda p: (SIGNAL_RANK.get(p.signal, 9), p.batch_id)) if ready else None

    if fire is not None:
        # the marker closes the phase, and with it any alert
        state = SignalState(
            phase="complete",
            positions=state.positions,
            fired=fire,
            last_notification=last_notification,
            snapshot_seq=state.snapshot_seq,
            snapshot_source_ts_ms=state.snapshot_source_ts_ms,
        )
        return Decision(
            state=state,
            start_resnapshot=start_resnapshot,
            fire=fire,
            notification=notification,
            alert_changed=prior.alert is not None,
            ignored=tuple(ignored),
        )
    state = replace(
        state,
        phase=phase,
        phase_max_ts_ms=phase_max,
        pending=tuple(pending),
        alert=alert,
        last_notification=last_notification,
        awaiting=options.awaiting(source_table),
    )
    return Decision(
        state=state,
        start_resnapshot=start_resnapshot,
        notification=notification,
        alert_changed=alert != prior.alert,
        ignored=tuple(ignored),
    )


def _ts_key(ts: int | None) -> int:
    return -1 if ts is None else ts


def _max_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _max_ts(values: Iterable[int | None]) -> int | None:
    out: int | None = None
    for v in values:
        out = _max_opt(out, v)
    return out


# ---------------------------------------------------------------------- offsets from Kafka


def kafka_offsets_probe(
    bootstrap_servers: str, topics: Sequence[str], *, options: Mapping[str, str] | None = None
) -> OffsetsProbe:
    """A probe that reads the current high watermarks of ``topics`` from Kafka.

    It uses the Kafka source's own metadata path (``startingOffsets=latest``), so security
    settings are those of the stream. Runs on the driver; each call opens and closes one
    metadata client.

    Args:
        bootstrap_servers: the brokers.
        topics: the data topics.
        options: the stream's ``kafka.*`` options (and ``kafka.config.file``).
    """
    config = {
        **dict(options or {}),
        "kafka.bootstrap.servers": bootstrap_servers,
        "subscribe": ",".join(topics),
        "startingOffsets": "latest",
    }

    def probe() -> Mapping[str, Mapping[str, int]]:
        from lakehouse.sources.kafka import KafkaSourceOptions, KafkaStreamReader

        reader = KafkaStreamReader(KafkaSourceOptions.from_options(config))
        try:
            return reader.initialOffset()
        finally:
            reader.stop()

    return probe


def planned_offsets(checkpoint_text: str) -> Offsets | None:
    """The Kafka offsets a micro-batch was planned to, from the text of the query's
    write-ahead offsets log entry (``<checkpoint>/offsets/<batch_id>``).

    The entry is ``v1``, a metadata line, then one line per source; lines that are a
    ``{topic: {partition: offset}}`` map are merged. None when there is none (a files
    source, an unknown format).

    >>> planned_offsets('v1\\n{"batchWatermarkMs":0}\\n{"t": {"0": 4, "1": 2}}')
    {'t': {'0': 4, '1': 2}}
    """
    lines = checkpoint_text.splitlines()
    if not lines or not lines[0].startswith("v"):
        return None
    found: list[Offsets] = []
    for line in lines[2:]:
        parsed = offsets_from_text(line.strip())
        if parsed:
            found.append(parsed)
    return merge_offsets(*found) if found else None


def checkpoint_offsets_reader(checkpoint: str) -> Callable[[int], Offsets | None]:
    """A function giving the Kafka offsets a micro-batch was planned to, read from the
    query's write-ahead offsets log (``<checkpoint>/offsets/<batch_id>``, written by Spark
    before the batch runs, and the same for a replay).

    Reads through ``pyarrow.fs`` (local paths, ``file:``, ``s3://``, ``gs://``, ``hdfs://``);
    returns None when the entry cannot be read or holds no Kafka offsets, and the sink then
    counts consumed positions from the records alone.
    """

    def read(batch_id: int) -> Offsets | None:
        from lakehouse.checkpoint import read_text

        text = read_text(f"{checkpoint.rstrip('/')}/offsets/{batch_id}")
        return None if text is None else planned_offsets(text)

    return read
