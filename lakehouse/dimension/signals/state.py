"""The signal bookkeeping between batches (:class:`SignalState`, kept in each data commit's
metadata) and what one batch decides (:class:`Decision`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lakehouse.dimension.signals.evidence import _int_or_none
from lakehouse.dimension.signals.kinds import Offsets, Phase
from lakehouse.dimension.signals.offsets import merge_offsets


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
