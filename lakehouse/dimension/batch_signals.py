"""The batch's snapshot signals: the notification and heartbeat records read on the driver,
and what each build table's marker does with them and with the batch's rows
(:func:`~lakehouse.dimension.signals.decide`, pure, decides).

A replay reads the same records, parses them the same way and asks the same questions, so it
decides as the first attempt did; the offsets probe is asked once per batch, whatever the
number of tables.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakehouse.dimension.layout import PROP_SNAPSHOT_COMPLETED_AT, PROP_SNAPSHOT_SIGNAL
from lakehouse.dimension.look import TargetLook
from lakehouse.dimension.marker import iso_to_ms, phase_of
from lakehouse.dimension.signals import (
    BatchEvidence,
    Decision,
    Heartbeat,
    Notification,
    Offsets,
    OffsetsProbe,
    RowGroup,
    decide,
    parse_heartbeat,
    parse_notification,
)
from lakehouse.dimension.targets import BuildTarget

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("lakehouse.dimension")


@dataclass(frozen=True, slots=True)
class BatchSignals:
    """The batch's records of the signal topics, parsed on the driver."""

    notifications: tuple[Notification, ...] = ()
    heartbeats: tuple[Heartbeat, ...] = ()
    invalid: tuple[tuple[str, int, int, str], ...] = ()  # (topic, partition, offset, reason)
    count: int = 0
    end_offsets: Offsets = field(default_factory=dict)


def read_signals(
    signal_df: DataFrame | None, notification_topics: Collection[str | None]
) -> BatchSignals:
    """Collect and parse the batch's notification and heartbeat records (few and small);
    a record of ``notification_topics`` is a notification, any other a heartbeat.

    Runs on the driver; a replay reads the same records and parses them the same way.
    """
    if signal_df is None:
        return BatchSignals()
    from pyspark.sql import functions as F

    rows = signal_df.select(
        "value", "topic", "partition", "offset", F.unix_millis("timestamp").alias("ts")
    ).collect()
    notifications: list[Notification] = []
    heartbeats: list[Heartbeat] = []
    invalid: list[tuple[str, int, int, str]] = []
    ends: Offsets = {}
    for r in sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"])):
        where = {
            "topic": r["topic"],
            "partition": int(r["partition"]),
            "offset": int(r["offset"]),
            "kafka_ts_ms": None if r["ts"] is None else int(r["ts"]),
        }
        parts = ends.setdefault(r["topic"], {})
        parts[str(r["partition"])] = max(parts.get(str(r["partition"]), 0), r["offset"] + 1)
        value = None if r["value"] is None else bytes(r["value"])
        try:
            if r["topic"] in notification_topics:
                n = parse_notification(value, **where)
                if n is not None:
                    notifications.append(n)
            else:
                h = parse_heartbeat(value, **where)
                if h is not None:
                    heartbeats.append(h)
        except ValueError as e:
            kind = "notification" if r["topic"] in notification_topics else "heartbeat"
            invalid.append((r["topic"], int(r["partition"]), int(r["offset"]), f"{kind}: {e}"))
    return BatchSignals(tuple(notifications), tuple(heartbeats), tuple(invalid), len(rows), ends)


def decide_signals(
    target: BuildTarget,
    look: TargetLook,
    groups: list[dict[str, Any]],
    signals: BatchSignals,
    positions: Offsets,
    probe: OffsetsProbe | None,
    batch_id: int,
) -> Decision:
    """What the batch does to one target's marker (:func:`~.signals.decide`)."""
    evidence = BatchEvidence(
        rows=tuple(
            RowGroup(
                r["topic"],
                int(r["partition"]),
                r["_snapshot_phase"] or "false",
                int(r["n"]),
                int(r["o"]),
                None if r["ts"] is None else int(r["ts"]),
                max_seq=r["seq"],
                max_source_ts_ms=r["src_ts"],
            )
            for r in groups
            if routes(target, r)
        ),
        notifications=tuple(
            n for n in signals.notifications if n.topic == target.snapshot.notification_topic
        ),
        heartbeats=tuple(
            h for h in signals.heartbeats if h.topic == target.snapshot.heartbeat_topic
        ),
    )
    uri = target.table_uri
    props = look.properties
    decision = decide(
        phase=phase_of(props),
        prior=look.prior_signal_state,
        batch=evidence,
        options=target.snapshot,
        source_table=target.source_table,
        batch_id=batch_id,
        positions=positions,
        probe=probe,
        marker_signal=props.get(PROP_SNAPSHOT_SIGNAL),
        completed_at_ms=iso_to_ms(props.get(PROP_SNAPSHOT_COMPLETED_AT)),
    )
    for why in decision.ignored:
        log.info("build table %s, batch %d: signal ignored: %s", uri, batch_id, why)
    return decision


def ask_once(probe: OffsetsProbe | None) -> OffsetsProbe | None:
    """The probe, asked at most once per batch (every target sees the same answer)."""
    if probe is None:
        return None
    answer: list[Mapping[str, Mapping[str, int]]] = []
    asking = threading.Lock()  # the targets decide on threads of their own

    def cached() -> Mapping[str, Mapping[str, int]]:
        with asking:
            if not answer:
                answer.append(probe())
        return answer[0]

    return cached


def routes(target: BuildTarget, group: Mapping[str, Any]) -> bool:
    """Whether a summary group's changes go to ``target``."""
    return target.source_table is None or group["_source_table"] == target.source_table
