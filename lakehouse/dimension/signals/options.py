"""Which signals a build table listens to, and what it does on a re-snapshot."""

from __future__ import annotations

from dataclasses import dataclass

from lakehouse.dimension.signals.kinds import SIGNAL_KINDS, ResnapshotJoin, SignalKind
from lakehouse.errors import ConfigError


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
