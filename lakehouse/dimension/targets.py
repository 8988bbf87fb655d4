"""What the build sink is told (:class:`BuildTarget`) and what it reports per batch
(:class:`BatchReport`, one :class:`TargetReport` per build table)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lakehouse.dimension.signals import SnapshotOptions
from lakehouse.errors import ConfigError
from lakehouse.time import WATERMARK_MIN


@dataclass(frozen=True, slots=True)
class BuildTarget:
    """One build table and the records that feed it.

    Attributes:
        table_uri: the build table's location.
        key_columns: the dimension's primary key; empty means "from the Debezium key"
            (the Kafka message key's fields), which the first batch must then carry.
        source_table: only change events of this source table (``db.table`` for MySQL,
            ``schema.table`` for Postgres) go here; None takes every change event.
        event_time_column: a row column (timestamp, or epoch ms as a number) whose value is
            the version's start; None uses ``source.ts_ms``.
        out_of_orderness_ms: the build watermark trails the max committed event time by this.
        snapshot: which signals end the table's snapshot phase, and re-snapshot handling
            (:class:`~lakehouse.dimension.signals.SnapshotOptions`).
        max_future_ms: a change whose event time is further than this past the wall clock
            is dead-lettered (``future_event_time``) instead of becoming a version: it would
            move the build watermark, which never goes back. None: no bound.
    """

    table_uri: str
    key_columns: tuple[str, ...] = ()
    source_table: str | None = None
    event_time_column: str | None = None
    out_of_orderness_ms: int = 0
    snapshot: SnapshotOptions = field(default_factory=SnapshotOptions)
    max_future_ms: int | None = 86_400_000

    def __post_init__(self) -> None:
        if self.out_of_orderness_ms < 0:
            raise ConfigError(
                f"out_of_orderness_ms must be >= 0, got {self.out_of_orderness_ms}",
                setting="out_of_orderness_ms",
            )
        if self.max_future_ms is not None and self.max_future_ms <= 0:
            raise ConfigError(
                f"max_future_ms must be > 0 (or unset), got {self.max_future_ms}",
                setting="max_future_ms",
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetReport:
    """What one micro-batch did to one build table.

    Attributes:
        phase: the snapshot phase after the batch (``loading``, ``complete``,
            ``resnapshot``).
        signal: the signal that set the marker in this batch, if any.
        pending: signals seen but waiting for their covered offsets.
        alert: the open snapshot alert (ABORTED, SKIPPED, failed table scan), if any.
        resnapshot_started: this batch started a re-snapshot (the marker was cleared).
        synthetic_deletes: deletes added for keys a completed re-snapshot did not re-read.
        unchanged: the batch changed nothing in the table and committed nothing
            (``version`` is the table's version before it): heartbeats alone, say.
    """

    table_uri: str
    version: int | None
    rows: int = 0
    rejected: int = 0
    max_event_time_ms: int | None = None
    watermark_ms: int = WATERMARK_MIN
    snapshot_complete: bool = False
    marker_set_now: bool = False
    skipped: bool = False
    unchanged: bool = False
    phase: str = "loading"
    signal: str | None = None
    pending: tuple[str, ...] = ()
    alert: str | None = None
    resnapshot_started: bool = False
    synthetic_deletes: int = 0
    schema_block: str | None = None
    schema_blocked_now: bool = False
    schema_changes: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchReport:
    """What one micro-batch did, for progress output and tests.

    ``records`` counts the data topics' records; ``signal_records`` those of the
    notification and heartbeat topics. ``one_pass``: the batch's records were decoded, written
    and summarised in one Spark job (:mod:`lakehouse.dimension.one_pass`).
    """

    batch_id: int
    records: int = 0
    changes: int = 0
    tombstones: int = 0
    transactions: int = 0
    schema_changes: int = 0
    dead_lettered: int = 0
    unrouted: int = 0
    end_offsets: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    targets: tuple[TargetReport, ...] = ()
    seconds: float = 0.0
    skipped: bool = False
    errors_by_kind: Mapping[str, int] = field(default_factory=dict)
    signal_records: int = 0
    one_pass: bool = False
