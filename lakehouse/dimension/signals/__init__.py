"""Snapshot-end signals: which evidence sets a build table's snapshot marker, and when.

One module per part: :mod:`.kinds` (the vocabulary), :mod:`.options`, :mod:`.evidence` (a
batch's rows, notifications and heartbeats), :mod:`.offsets` (what a signal covers),
:mod:`.state` (the bookkeeping between batches), :mod:`.decision` (the rules below) and
:mod:`.kafka` (offsets read from the brokers and the checkpoint).

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

from lakehouse.dimension.signals.decision import decide as decide
from lakehouse.dimension.signals.evidence import BatchEvidence as BatchEvidence
from lakehouse.dimension.signals.evidence import Heartbeat as Heartbeat
from lakehouse.dimension.signals.evidence import Notification as Notification
from lakehouse.dimension.signals.evidence import RowGroup as RowGroup
from lakehouse.dimension.signals.evidence import parse_heartbeat as parse_heartbeat
from lakehouse.dimension.signals.evidence import parse_notification as parse_notification
from lakehouse.dimension.signals.kafka import checkpoint_offsets_reader as checkpoint_offsets_reader
from lakehouse.dimension.signals.kafka import kafka_offsets_probe as kafka_offsets_probe
from lakehouse.dimension.signals.kafka import planned_offsets as planned_offsets
from lakehouse.dimension.signals.kinds import ALERT_TYPES as ALERT_TYPES
from lakehouse.dimension.signals.kinds import (
    INITIAL_SNAPSHOT_AGGREGATES as INITIAL_SNAPSHOT_AGGREGATES,
)
from lakehouse.dimension.signals.kinds import SCAN_OK_STATUSES as SCAN_OK_STATUSES
from lakehouse.dimension.signals.kinds import SIGNAL_KINDS as SIGNAL_KINDS
from lakehouse.dimension.signals.kinds import SIGNAL_RANK as SIGNAL_RANK
from lakehouse.dimension.signals.kinds import SNAPSHOT_PHASES as SNAPSHOT_PHASES
from lakehouse.dimension.signals.kinds import Offsets as Offsets
from lakehouse.dimension.signals.kinds import OffsetsProbe as OffsetsProbe
from lakehouse.dimension.signals.kinds import Phase as Phase
from lakehouse.dimension.signals.kinds import ResnapshotJoin as ResnapshotJoin
from lakehouse.dimension.signals.kinds import SignalKind as SignalKind
from lakehouse.dimension.signals.offsets import merge_offsets as merge_offsets
from lakehouse.dimension.signals.offsets import offsets_from_text as offsets_from_text
from lakehouse.dimension.signals.offsets import uncovered as uncovered
from lakehouse.dimension.signals.options import SnapshotOptions as SnapshotOptions
from lakehouse.dimension.signals.state import Decision as Decision
from lakehouse.dimension.signals.state import SignalEvidence as SignalEvidence
from lakehouse.dimension.signals.state import SignalState as SignalState

__all__ = [
    "ALERT_TYPES",
    "INITIAL_SNAPSHOT_AGGREGATES",
    "SCAN_OK_STATUSES",
    "SIGNAL_KINDS",
    "SIGNAL_RANK",
    "SNAPSHOT_PHASES",
    "BatchEvidence",
    "Decision",
    "Heartbeat",
    "Notification",
    "Offsets",
    "OffsetsProbe",
    "Phase",
    "ResnapshotJoin",
    "RowGroup",
    "SignalEvidence",
    "SignalKind",
    "SignalState",
    "SnapshotOptions",
    "checkpoint_offsets_reader",
    "decide",
    "kafka_offsets_probe",
    "merge_offsets",
    "offsets_from_text",
    "parse_heartbeat",
    "parse_notification",
    "planned_offsets",
    "uncovered",
]
