"""The join's bookkeeping, read back from its tables' commit metadata (driver only).

Every commit a join batch ``k`` makes — to the dead-letter, output or pending table — carries
``lakehouse.batchId``, ``lakehouse.pipeline``, ``lakehouse.plan`` (the release decision:
watermarks, build version) and ``lakehouse.state`` (the state after the batch); all but the
processing-time fast path's also carry the batch's counts (``lakehouse.arrived``,
``lakehouse.released``, ``lakehouse.deadLettered``, ``lakehouse.pendingRows``). The fast path
counts while it writes: its output commit's ``numOutputRows`` is what it released, and every
row that arrived was released (it runs for ``left`` joins only, with nothing pending). A batch
that changed nothing committed nothing (see :mod:`lakehouse.join.operator`).

This module merges those commits into one :class:`BatchRecord` per batch, in batch order,
cuts the ledger at the newest batch whose writes are all there (a batch still writing is left
out), picks the table versions that go with that cut, and does the row accounting of the
exactly-once check.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lakehouse import delta
from lakehouse.join.layout import (
    META_ARRIVED,
    META_BATCH_ID,
    META_DEAD_LETTERED,
    META_PENDING_ROWS,
    META_PIPELINE,
    META_PLAN,
    META_RELEASED,
)
from lakehouse.join.state import ReleasePlan
from lakehouse.quality.errors import QualityError
from lakehouse.time import Watermark


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchRecord:
    """One join batch, as its commits recorded it.

    Attributes:
        version: the version the batch's last write created, in the table it wrote last.
        timestamp_ms: commit time.
        batch_id: the micro-batch id.
        pipeline: the join's pipeline id (``lakehouse.pipeline``), None if not recorded.
        arrived: parsed probe rows that arrived in the batch (malformed records excluded).
        released: rows released (matched or not, before an inner join drops unmatched ones).
        pending_rows: rows kept pending after the batch.
        dead_lettered: rows dead-lettered by the batch (malformed, late, expired).
        combined: the combined watermark that decided the release.
        previous: the combined watermark before the batch.
        probe: the probe channel's watermark.
        build: the build channel's watermark.
        build_version: the build table version the batch pinned (None: no build table yet).
    """

    version: int
    timestamp_ms: int
    batch_id: int
    pipeline: str | None
    arrived: int
    released: int
    pending_rows: int
    dead_lettered: int
    combined: Watermark
    previous: Watermark
    probe: Watermark
    build: Watermark
    build_version: int | None


@dataclass(frozen=True, slots=True)
class Ledger:
    """The batch records of a join up to one consistent cut, oldest first.

    Attributes:
        uri: the pending table.
        version: the pending table version that goes with the cut (None: no pending table
            commit at or before it).
        output_version: the output table version that goes with the cut (None: none).
        records: one per batch up to the cut, in batch order.
        from_creation: True when the histories reach back to the tables' creation; False
            when older commits were removed by log clean-up, in which case the first record
            only serves as the accounting baseline.
    """

    uri: str
    version: int | None
    output_version: int | None
    records: tuple[BatchRecord, ...]
    from_creation: bool

    @property
    def last_batch_id(self) -> int | None:
        """The batch id of the newest record, None when no batch has committed yet."""
        return self.records[-1].batch_id if self.records else None


@dataclass
class _Batch:
    batch_id: int
    commits: dict[str, tuple[delta.CommitInfo, Mapping[str, str]]]


def read_ledger(
    pending_table: str, *, output_table: str, dead_letter_table: str | None = None
) -> Ledger:
    """Read the join's batch records from its tables' histories (module docstring).

    Raises:
        QualityError: a batch commit's metadata does not parse; the message names the table,
            the version and the key.
    """
    histories: dict[str, list[delta.CommitInfo]] = {}
    for role, uri in (
        ("pending", pending_table),
        ("output", output_table),
        ("dead", dead_letter_table),
    ):
        if uri and delta.table_exists(uri):
            histories[role] = delta.history(uri)
    pipelines = {
        c.metadata.get(META_PIPELINE)
        for role in ("pending", "output")
        for c in histories.get(role, [])
        if META_PLAN in c.metadata
    } - {None}
    batches: dict[int, _Batch] = {}
    for role, entries in histories.items():
        for entry in entries:
            meta = entry.metadata
            if META_PLAN not in meta or META_BATCH_ID not in meta:
                continue  # the create commit, schema changes, other pipelines' dead letters
            if role == "dead" and meta.get(META_PIPELINE) not in pipelines:
                continue
            batch_id = _integer(entry, meta, META_BATCH_ID)
            batch = batches.setdefault(batch_id, _Batch(batch_id, {}))
            batch.commits.setdefault(role, (entry, meta))
    records: list[BatchRecord] = []
    previous_pending = 0
    for batch_id in sorted(batches):
        record = _record(batches[batch_id], previous_pending)
        if record is None:
            break  # the batch is still writing: the cut is before it
        records.append(record)
        previous_pending = record.pending_rows
    cut = records[-1].batch_id if records else None
    from_creation = all(
        min((e.version for e in entries), default=0) == 0
        for role, entries in histories.items()
        if role != "dead"
    )
    return Ledger(
        uri=pending_table,
        version=_version_at(histories.get("pending", []), cut),
        output_version=_version_at(histories.get("output", []), cut),
        records=tuple(records),
        from_creation=from_creation,
    )


def _version_at(entries: Iterable[delta.CommitInfo], cut: int | None) -> int | None:
    """The newest version whose commit is of a batch at or before ``cut`` (or not a batch)."""
    best: int | None = None
    for entry in entries:
        raw = entry.metadata.get(META_BATCH_ID)
        batch = None
        if raw is not None:
            try:
                batch = int(json.loads(raw))
            except (TypeError, ValueError):
                batch = None
        if batch is not None and (cut is None or batch > cut):
            continue
        if best is None or entry.version > best:
            best = entry.version
    return best


def _record(batch: _Batch, previous_pending: int) -> BatchRecord | None:
    """The merged record of one batch, or None when its writes are not all there yet."""
    commits = batch.commits
    order = [r for r in ("pending", "output", "dead") if r in commits]
    entry, meta = commits[order[0]]
    try:
        plan = ReleasePlan.from_json(meta[META_PLAN])
    except Exception as e:  # KeyError, JSONDecodeError, WatermarkError
        raise _fail(entry, meta, META_PLAN, e) from e
    counted = next((commits[r] for r in order if META_ARRIVED in commits[r][1]), None)
    if counted is not None and META_RELEASED in counted[1]:
        c_entry, c_meta = counted
        arrived = _integer(c_entry, c_meta, META_ARRIVED)
        released = _integer(c_entry, c_meta, META_RELEASED)
        pending_rows = _integer(c_entry, c_meta, META_PENDING_ROWS)
        dead = _integer(c_entry, c_meta, META_DEAD_LETTERED)
    elif "output" in commits:
        # the fast path: everything that arrived was released, in this output commit
        released = commits["output"][0].rows
        arrived = released
        pending_rows = 0
        dead = 0
        if counted is not None:  # its dead letters (malformed records) say how many
            dead = _integer(counted[0], counted[1], META_DEAD_LETTERED)
    else:
        return None  # dead letters of a fast-path batch whose output is not committed yet
    if (pending_rows or previous_pending) and "pending" not in commits:
        return None  # the batch writes its pending table last, and has not yet
    if released and "output" not in commits:
        return None  # its dead letters are written, its output not yet
    last = commits[order[0]][0]
    return BatchRecord(
        version=last.version,
        timestamp_ms=last.timestamp_ms,
        batch_id=batch.batch_id,
        pipeline=meta.get(META_PIPELINE),
        arrived=arrived,
        released=released,
        pending_rows=pending_rows,
        dead_lettered=dead,
        combined=plan.combined,
        previous=plan.previous,
        probe=plan.probe,
        build=plan.build,
        build_version=plan.build_version,
    )


def _fail(entry: Any, meta: Mapping[str, str], key: str, e: Exception) -> QualityError:
    where = f"version {entry.version}" if hasattr(entry, "version") else str(entry)
    return QualityError(
        f"join table commit {where}: commit metadata {key} = {meta.get(key)!r} does not parse "
        f"({e}); the table was written by something other than the lakehouse join, or by an "
        "incompatible version of it",
        stage="reading the join's history",
    )


def _integer(entry: Any, meta: Mapping[str, str], key: str) -> int:
    try:
        return int(json.loads(meta[key]))
    except (KeyError, TypeError, ValueError) as e:
        raise _fail(entry, meta, key, e) from e


def watermark_orders(watermarks: Iterable[Watermark]) -> dict[Watermark, int]:
    """Rank watermarks in the :class:`Watermark` order (processing time after event time).

    The rank keeps the order of ``(use_processing_time, timestamp)`` pairs exactly, which no
    single 64-bit number can; equal watermarks share a rank.

    >>> from lakehouse.time import Watermark
    >>> ranks = watermark_orders([Watermark.PROCESSING_TIME, Watermark(5), Watermark.MIN])
    >>> [ranks[w] for w in (Watermark.MIN, Watermark(5), Watermark.PROCESSING_TIME)]
    [0, 1, 2]
    """
    return {w: i for i, w in enumerate(sorted(set(watermarks)))}


@dataclass(frozen=True, slots=True, kw_only=True)
class Accounting:
    """The row accounting of the exactly-once check (see ``expectations/probe_rows_accounted``).

    ``baseline + arrived_sum == released_sum + (dead_lettered_sum - malformed) + pending_rows``

    Attributes:
        batches: batch records summed (all of them, or all but the baseline one).
        baseline: rows pending before the first summed batch (0 from the table's creation).
        arrived_sum: sum of ``lakehouse.arrived``.
        released_sum: sum of ``lakehouse.released``.
        dead_lettered_sum: sum of ``lakehouse.deadLettered``.
        malformed: dead letters of those batches that never counted as arrived (malformed
            records); None when the dead-letter table was not given (then taken as 0).
        pending_rows: rows in the pending table at the validated version.
        pending_rows_recorded: ``lakehouse.pendingRows`` of the last batch commit.
        from_creation: see :attr:`Ledger.from_creation`.
    """

    batches: int
    baseline: int
    arrived_sum: int
    released_sum: int
    dead_lettered_sum: int
    malformed: int | None
    pending_rows: int
    pending_rows_recorded: int
    from_creation: bool

    @property
    def arrived(self) -> int:
        """Rows that entered the join: baseline plus arrivals."""
        return self.baseline + self.arrived_sum

    @property
    def accounted(self) -> int:
        """Rows that left it or wait in it: released, dead-lettered after arriving, pending."""
        return (
            self.released_sum + self.dead_lettered_sum - (self.malformed or 0) + self.pending_rows
        )

    def message(self) -> str:
        """The numbers, in one sentence; says what is off when they do not add up."""
        dead = f"dead-lettered {self.dead_lettered_sum}"
        if self.malformed:
            dead = f"dead-lettered {self.dead_lettered_sum} - {self.malformed} malformed"
        head = (
            f"{'pending before ' + str(self.baseline) + ' + ' if self.baseline else ''}"
            f"arrived {self.arrived_sum} over {self.batches} batch(es)"
        )
        equation = (
            f"{head} = {self.arrived} vs released {self.released_sum} + {dead} + pending "
            f"{self.pending_rows} = {self.accounted}"
        )
        problems = []
        gap = self.arrived - self.accounted
        if gap > 0:
            problems.append(f"{gap} probe row(s) lost")
        elif gap < 0:
            hint = ""
            if self.malformed is None and self.dead_lettered_sum:
                hint = (
                    " (malformed records are dead-lettered without counting as arrived; pass "
                    "the dead-letter table so they can be told apart)"
                )
            problems.append(f"{-gap} probe row(s) counted more than once{hint}")
        if self.pending_rows != self.pending_rows_recorded:
            # the count of the table is what the equation uses; the record explains a gap
            equation += f" (its last batch recorded {self.pending_rows_recorded} pending)"
        if not self.from_creation:
            equation += " (history cleaned up: counted from the oldest remaining batch)"
        return equation + (": " + "; ".join(problems) if problems else "")


def account(
    ledger: Ledger, *, pending_rows: int, malformed_by_batch: Mapping[int, int] | None
) -> Accounting:
    """Sum the ledger for the exactly-once accounting.

    Args:
        ledger: the pending table's batch records.
        pending_rows: rows in the pending table at ``ledger.version``.
        malformed_by_batch: malformed dead letters per batch id (dead-letter rows of the
            join's pipeline whose kind is neither ``late`` nor ``expired``); None when unknown.
    """
    records: Sequence[BatchRecord] = ledger.records
    baseline = 0
    if not ledger.from_creation and records:
        # the oldest remaining batch is the baseline: what it left pending is where counting
        # starts, since the arrivals before it are no longer in the log
        baseline = records[0].pending_rows
        records = records[1:]
    malformed = None
    if malformed_by_batch is not None:
        malformed = sum(malformed_by_batch.get(r.batch_id, 0) for r in records)
    return Accounting(
        batches=len(records),
        baseline=baseline,
        arrived_sum=sum(r.arrived for r in records),
        released_sum=sum(r.released for r in records),
        dead_lettered_sum=sum(r.dead_lettered for r in records),
        malformed=malformed,
        pending_rows=pending_rows,
        pending_rows_recorded=ledger.records[-1].pending_rows if ledger.records else 0,
        from_creation=ledger.from_creation,
    )
