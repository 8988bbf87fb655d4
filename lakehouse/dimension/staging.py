"""A build table's rows of one batch, written before the batch commits anything.

A target's rows are written as data files on the snapshot of the batch's look at the table
(:func:`lakehouse.delta.stage_append`), counted by that write (``DataFrame.observe``), and
committed later, after the batch's dead letters, with metadata that holds the counts
(:mod:`lakehouse.dimension.sink`). Until then no version names the files: a batch that stops
in between leaves them for ``VACUUM``, and its replay writes them again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from lakehouse import delta
from lakehouse.dimension.commit import RowStats
from lakehouse.dimension.layout import EVENT_TIME
from lakehouse.dimension.plan import RowParts, TargetFrames, TargetPlan

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: A table's rows of one batch are written as at most this many files.
MAX_FILES = 2

#: A joint write of at most this many rows (:func:`stage_rows_together`, as foreseen) is one
#: task, each table's rows one file: every task opens a Parquet writer and Delta's statistics
#: tracker for each table it writes, which for tables of a few rows costs more than a second
#: task's share of the records saves.
ONE_TASK_ROWS = 2_000


def joint_files(routed: int | None) -> int:
    """The files (tasks) of a joint write of ``routed`` rows (None: not known).

    >>> joint_files(400), joint_files(50_000), joint_files(None)
    (1, 2, 2)
    """
    return 1 if routed is not None and routed <= ONE_TASK_ROWS else MAX_FILES


@dataclass(frozen=True, slots=True)
class Prepared:
    """A target's part of a batch before its commit: the plan, its rows and dead letters,
    what the rows hold, their files when they are written already, the value of
    ``lakehouse.connect.schemas`` the batch sets (None: unchanged;
    :func:`lakehouse.dimension.connect_schemas.decide`), and the rows' DataFrame where the
    batch made it already (cached where it counted them; None: ``frames.rows()`` makes it)."""

    plan: TargetPlan
    frames: TargetFrames
    stats: RowStats
    staged: delta.StagedAppend | None = None
    connect_schemas: str | None = None
    rows: DataFrame | None = None


def stage_rows(
    rows: DataFrame,
    uri: str,
    txn: tuple[str, int],
    *,
    create: Mapping[str, str] | None = None,
) -> tuple[delta.StagedAppend | None, RowStats | None]:
    """Write ``rows``' files (at most :data:`MAX_FILES`) to the table ``uri`` for the
    idempotent transaction ``txn``, uncommitted, widening its columns where the rows need it
    (:func:`delta.stage_append`), and what the write observed of them. ``create``: the
    table does not exist, and the commit creates it with these properties. ``(None, None)``
    when the table cannot take a staged write (the caller appends at the commit); the
    statistics are None when Spark did not report them (the caller counts the rows)."""
    staged = delta.stage_append(
        rows,
        uri,
        txn=txn,
        schema_mode="widen",
        max_files=MAX_FILES,
        observe=_row_stat_columns(),
        create=create,
    )
    observed = staged.metrics() if staged is not None else None
    return staged, None if observed is None else _stats_of(observed)


class Together(NamedTuple):
    """What :func:`stage_rows_together` wrote: per table its staged append and what its rows
    hold (None: the joint write did not take the table), and the tasks' summaries of the
    records when it was asked for them (None: not asked, or no joint write ran)."""

    staged: list[tuple[delta.StagedAppend, RowStats] | None]
    summaries: tuple[str, ...] | None = None


def stage_rows_together(
    decoded: DataFrame,
    items: Sequence[tuple[RowParts, str]],
    txn: tuple[str, int],
    *,
    workers: int = 1,
    routed: int | None = None,
    summary: Column | None = None,
) -> Together:
    """:func:`stage_rows` of each ``(parts, uri)`` (a table's :class:`RowParts` over
    ``decoded``), every table's rows made by one projection of ``decoded`` and their files
    written by one Spark job (:func:`delta.stage_appends`). None for a table that job could
    not take (the caller stages it with :func:`stage_rows`). ``workers``: tables whose writers
    are prepared at once. ``routed``: the records routed to these tables (at least their rows),
    when known (:func:`delta.stage_appends`' ``row_count``). ``summary``: each record's part of
    the batch's summary (:func:`lakehouse.dimension.summary.record_summary`), aggregated by the
    job's tasks (:attr:`Together.summaries`)."""
    if not items:
        return Together([])
    # the tables' rows made by one projection per task, over at most as many partitions as a
    # table gets files
    files = joint_files(routed)
    values = decoded.coalesce(files).select("*", *[parts.joint_value() for parts, _ in items])
    rows = values.select(
        *[parts.joint_row() for parts, _ in items],
        *([] if summary is None else [summary.alias("_summary")]),
    )

    joint = delta.stage_appends(
        rows,
        [uri for _, uri in items],
        txn=txn,
        max_files=files,
        event_time=EVENT_TIME,
        workers=workers,
        row_count=routed,
        summarise=summary is not None,
    )
    out: list[tuple[delta.StagedAppend, RowStats] | None] = []
    for one in joint.appends:
        observed = one.metrics() if one is not None else None
        out.append(None if one is None or observed is None else (one, _stats_of(observed)))
    return Together(out, joint.summaries)


def row_stats(rows: DataFrame | None) -> RowStats:
    """Count the batch's rows for a table and find their largest event time (one job)."""
    if rows is None:
        return RowStats()
    return _stats_of(rows.agg(*_row_stat_columns()).collect()[0].asDict())


def _row_stat_columns() -> list[Column]:
    """A table's :class:`RowStats` as aggregate expressions over its rows of the batch."""
    from pyspark.sql import functions as F

    # epoch milliseconds, not a timestamp: PySpark 4.0's Observation.get hands values over
    # as py4j gives them (a timestamp as a Java object)
    return [F.unix_millis(F.max(EVENT_TIME)).alias("m"), F.count(F.lit(1)).alias("n")]


def _stats_of(agg: Mapping[str, Any]) -> RowStats:
    """:class:`RowStats` from the values of :func:`_row_stat_columns`."""
    biggest = agg["m"]
    return RowStats(
        count=int(agg["n"]),
        max_event_time_ms=None if biggest is None else int(biggest),
    )
