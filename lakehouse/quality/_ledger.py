"""The join's bookkeeping, read back from the tables' commit metadata (driver only, no Spark).

Every join batch ``k`` commits to the pending table once (also when it released nothing),
with ``lakehouse.batchId``, ``lakehouse.plan`` (the release decision: watermarks, build
version), ``lakehouse.arrived``, ``lakehouse.released``, ``lakehouse.deadLettered`` and
``lakehouse.pendingRows`` (see :mod:`lakehouse.join.operator`). The pending table's history is
therefore a ledger with one entry per batch, in version order. This module turns it into
:class:`BatchRecord` values, picks the output version that belongs with a pending version,
and does the row accounting of the exactly-once check.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lakehouse import delta
from lakehouse.quality.errors import QualityError
from lakehouse.time import Watermark

META_BATCH_ID = "lakehouse.batchId"
META_PIPELINE = "lakehouse.pipeline"
META_PLAN = "lakehouse.plan"
META_ARRIVED = "lakehouse.arrived"
META_RELEASED = "lakehouse.released"
META_DEAD_LETTERED = "lakehouse.deadLettered"
META_PENDING_ROWS = "lakehouse.pendingRows"


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """One join batch, as its pending-table commit recorded it.

    Attributes:
        version: the pending table version the batch created.
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
    """The batch records of the pending table up to one version, oldest first.

    Attributes:
        uri: the pending table.
        version: the pending table version the ledger ends at (the version validated).
        records: one per batch commit at or before ``version``, in version order.
        from_creation: True when the history reaches back to the table's creation (version
            0); False when older commits were removed by log clean-up, in which case the
            first record only serves as the accounting baseline.
    """

    uri: str
    version: int
    records: tuple[BatchRecord, ...]
    from_creation: bool

    @property
    def last_batch_id(self) -> int | None:
        """The batch id of the newest record, None when no batch has committed yet."""
        return self.records[-1].batch_id if self.records else None


def read_ledger(uri: str, *, version: int) -> Ledger:
    """Read the pending table's batch records up to and including ``version``.

    Commits without ``lakehouse.batchId`` and ``lakehouse.arrived`` (the create commit, schema
    changes) are not batches and are left out.

    Raises:
        QualityError: a batch commit's metadata does not parse; the message names the table,
            the version and the key.
    """
    entries = [e for e in delta.history(uri) if e.version <= version]
    entries.sort(key=lambda e: e.version)
    records = tuple(
        _record(uri, e.version, e.timestamp_ms, e.metadata)
        for e in entries
        if META_BATCH_ID in e.metadata and META_ARRIVED in e.metadata
    )
    from_creation = bool(entries) and entries[0].version == 0
    return Ledger(uri=uri, version=version, records=records, from_creation=from_creation)


def _record(uri: str, version: int, timestamp_ms: int, meta: Mapping[str, str]) -> BatchRecord:
    def fail(key: str, e: Exception) -> QualityError:
        return QualityError(
            f"pending table '{uri}' version {version}: commit metadata {key} = "
            f"{meta.get(key)!r} does not parse ({e}); the table was written by something other "
            "than the lakehouse join, or by an incompatible version of it",
            stage="reading the pending table's history",
        )

    def integer(key: str) -> int:
        try:
            return int(json.loads(meta[key]))
        except (KeyError, TypeError, ValueError) as e:
            raise fail(key, e) from e

    try:
        plan: dict[str, Any] = json.loads(meta[META_PLAN])
        watermarks = {
            name: Watermark.from_dict(plan[name])
            for name in ("combined", "previous", "probe", "build")
        }
        build_version = plan.get("buildVersion")
    except Exception as e:  # KeyError, JSONDecodeError, WatermarkError
        raise fail(META_PLAN, e) from e
    return BatchRecord(
        version=version,
        timestamp_ms=timestamp_ms,
        batch_id=integer(META_BATCH_ID),
        pipeline=meta.get(META_PIPELINE),
        arrived=integer(META_ARRIVED),
        released=integer(META_RELEASED),
        pending_rows=integer(META_PENDING_ROWS),
        dead_lettered=integer(META_DEAD_LETTERED),
        build_version=None if build_version is None else int(build_version),
        **watermarks,
    )


def output_version_for(uri: str, last_batch_id: int | None) -> int | None:
    """The output table version that goes with a pending version whose last batch is
    ``last_batch_id``: the newest output commit of a batch ``<= last_batch_id``.

    The join writes each batch's output before its pending table. Reading both at their
    latest versions while the pipeline runs could see batch ``k+1``'s output next to batch
    ``k``'s pending rows, and report the rows released in ``k+1`` as duplicates. Pairing the
    versions by batch id gives the state the tables had after batch ``last_batch_id``.

    Returns:
        The version, or None when the output table does not exist or holds no such batch
        (nothing was released yet).
    """
    if last_batch_id is None or not delta.table_exists(uri):
        return None
    best: int | None = None
    for entry in delta.history(uri):
        raw = entry.metadata.get(META_BATCH_ID)
        if raw is None:
            continue
        try:
            batch = int(json.loads(raw))
        except (TypeError, ValueError):
            continue
        if batch <= last_batch_id and (best is None or entry.version > best):
            best = entry.version
    return best


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


@dataclass(frozen=True, slots=True)
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
