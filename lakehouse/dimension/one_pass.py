"""A steady ingest batch decoded, written and summarised in one Spark job.

A batch of the ingest is planned from its summary (:func:`lakehouse.dimension.summary.
summarise`): its records' kinds, column sets and row images decide each table's columns and
the expressions of its rows. That is two jobs: the decode, persisted and summarised, then the
write of the rows from the persisted records. In a steady stream a batch's records are shaped
as the batch before's, so the plan of the batch before is, most of the time, this batch's:

1. **foresee**: each table is planned from the summary of the last *steady* batch
   (:func:`steady`: nothing left to Python, no error, no schema change) of this process
   (:class:`Foresight`);
2. **one job** decodes the source records, writes each table's rows by that plan
   (:func:`lakehouse.delta.stage_appends`, files staged, nothing committed) and aggregates
   the batch's summary in the same tasks (``dev.lakehouse.write.BatchSummary``: per task,
   what :func:`~lakehouse.dimension.summary.summarise` computes, folded on the driver by
   :func:`~lakehouse.dimension.summary.fold_tasks`);
3. **check**: the batch is planned again from its own summary, as a two-job batch is
   (:meth:`OnePass.take`). A table's staged rows are its rows of the batch when its plan has
   the shape they were made by (:attr:`~lakehouse.dimension.plan.RowParts.shape`: the same
   expressions of the same records) and every record routed to it made a row (none is a
   dead letter). The batch then goes on as a two-job batch with those files: the tables whose
   staged rows are not theirs (a table not foreseen, a new column, a dead letter) have them
   deleted and are written as a two-job batch writes them, from the decoded records (one
   more job, which decodes the batch's records again), then the dead letters, the commits
   and the markers.

A batch whose summary is not :func:`steady` (a record left to Python, an error, a schema
change) has every staged file deleted, uncommitted, and runs its two jobs from the start, as
if this had not been tried; after such a miss the next 1, then 3, 7, ... batches do not try
(:class:`Foresight`).

Exactly once is as for any batch: the files are staged, not committed, until each table's
commit of the batch's transaction; a process that dies before leaves files no version names
(``VACUUM``'s), and the replay decides anew, by either path, the same rows. A batch's
``_ingested_at`` is the wall clock when its plan was made, before its job here, after it for
two jobs.

:data:`ONE_PASS_CONF` turns it off for a session (``"false"``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakehouse.dimension.commit import RowStats
from lakehouse.dimension.staging import stage_rows_together
from lakehouse.dimension.summary import (
    Summary,
    fold_tasks,
    python_pass_needed,
    record_summary,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lakehouse import delta
    from lakehouse.dimension.plan import RowParts, TargetFrames, TargetPlan

#: The Spark setting that turns the one-pass batch on (``"true"``, the default) or off.
ONE_PASS_CONF = "spark.lakehouse.ingestOnePass"

#: Record kinds a steady batch may hold: none of them needs a look at the records beyond the
#: summary (an error's raw bytes, a schema change's text).
_STEADY_KINDS = frozenset({"change", "tombstone", "transaction"})


def steady(summary: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a batch of this summary (:func:`~lakehouse.dimension.summary.summarise`'s first
    answer) could have been written in one pass: the JVM decoded every record, none is an
    error or a schema change, and none needs the Python decoder's second look.

    >>> change = {"_kind": "change", "_source_table": "s.t", "kept": 0, "schema": None}
    >>> steady([change, {**change, "_kind": "tombstone"}])
    True
    >>> steady([change, {**change, "_kind": "error"}]), steady([{**change, "_kind": None}])
    (False, False)
    """
    return all(r["_kind"] in _STEADY_KINDS for r in summary) and not python_pass_needed(summary)


@dataclass
class Foresight:
    """The change groups of the last steady batch of the process, which the next batch is
    planned from (None: none yet, the last batch was not steady, or the next batches wait),
    and the typed row-image columns its decode had (:attr:`images`): a batch whose decode has
    others (its decoder learned Connect schemas or row-image shapes since) does not try.

    After a miss (:meth:`missed`) the next ``2**k - 1`` batches do not try, ``k`` the misses in
    a row: a stream whose shapes change every batch pays a wasted job in one batch of many.

    >>> sight = Foresight()
    >>> sight.saw([{"_kind": "change", "n": 3}], steady=True, images=[])
    >>> sight.shapes()
    [{'_kind': 'change', 'n': 3}]
    >>> sight.missed(); [sight.shapes() is None for _ in range(2)]
    [True, False]
    >>> sight.missed(); [sight.shapes() is None for _ in range(4)]
    [True, True, True, False]
    >>> sight.hit(); sight.missed(); [sight.shapes() is None for _ in range(2)]
    [True, False]
    """

    changes: list[dict[str, Any]] | None = None
    #: the typed row-image columns of the batch seen (``jvm_decode.image_columns``)
    images: list[tuple[str, Any]] | None = None
    misses: int = 0
    wait: int = 0

    def shapes(self) -> list[dict[str, Any]] | None:
        """The change groups to plan this batch from, or None: this batch runs two jobs."""
        if self.wait > 0:
            self.wait -= 1
            return None
        return self.changes

    def saw(
        self,
        summary: Sequence[Mapping[str, Any]],
        *,
        steady: bool,
        images: list[tuple[str, Any]],
    ) -> None:
        """Remember a batch's summary: its change groups when it was steady, and the typed
        row-image columns of its decode."""
        self.changes = [dict(r) for r in summary if r["_kind"] == "change"] if steady else None
        self.images = images

    def hit(self) -> None:
        """The batch was written in one pass."""
        self.misses = 0

    def missed(self) -> None:
        """The batch's records were not as foreseen: the next batches wait."""
        self.misses += 1
        self.wait = 2**self.misses - 1


@dataclass
class OnePass:
    """A batch's records decoded, its foreseen rows staged and its summary, from one job
    (:func:`write_one_pass`).

    Attributes:
        decoded: the batch's decoded records (the JVM's decode, not persisted: a frame made
            from it computes the decode again).
        summarised: the batch's summary, as :func:`~lakehouse.dimension.summary.summarise`
            gives it.
        staged: per target index, its staged rows and what they hold.
        plans: per target index, the foreseen plan its rows were made by: the batch's own
            plan of the table too where that has the same shape (:func:`~lakehouse.
            dimension.plan.plan_shape`), so it is not made again.
    """

    decoded: DataFrame
    summarised: Summary
    staged: dict[int, tuple[delta.StagedAppend, RowStats]]
    plans: Mapping[int, tuple[TargetPlan, TargetFrames]] = field(default_factory=dict)

    def shape(self, index: int) -> Any:
        """The shape of target ``index``'s foreseen rows (None: none foreseen)."""
        planned = self.plans.get(index)
        parts = None if planned is None else planned[1].parts
        return None if parts is None else parts.shape

    def take(
        self, parts: Sequence[RowParts | None], routed: Sequence[int]
    ) -> dict[int, tuple[delta.StagedAppend, RowStats]]:
        """Each target's staged rows that are its rows of the batch, by target index; the
        others' staged files are deleted (the caller writes those tables as a two-job batch
        does). ``parts``: each target's rows as the batch's own summary plans them (None: no
        rows); ``routed``: the changes routed to each.

        A target's staged rows are its rows when it is planned with rows by a plan of the shape
        they were made by, and they count every change routed to it (a routed change that made
        no row is a dead letter, which is written apart, with its raw bytes)."""
        taken: dict[int, tuple[delta.StagedAppend, RowStats]] = {}
        for i, done in self.staged.items():
            mine = parts[i]
            if (
                mine is not None
                and mine.shape is not None
                and mine.shape == self.shape(i)
                and done[1].count == routed[i]
            ):
                taken[i] = done
            elif done[1].count:
                done[0].discard()
        return taken

    def discard(self) -> None:
        """Delete every staged file: no table version names them."""
        for staged, _ in self.staged.values():
            staged.discard()


def write_one_pass(
    decoded: DataFrame,
    plans: Mapping[int, tuple[TargetPlan, TargetFrames]],
    txn: tuple[str, int],
    *,
    workers: int,
    routed: int,
    kept: dict[Any, Any] | None = None,
) -> OnePass | None:
    """Stage the foreseen rows of each target (its index, and its foreseen plan over
    ``decoded``, with rows) in one job that also summarises the batch's records. None, with
    nothing left staged, when no joint write ran, or the batch is not :func:`steady`. A table
    the joint write did not take has no staged rows (:meth:`OnePass.take` leaves it to the
    caller). ``routed``: the rows foreseen, for the write's choice of evaluation. ``kept``:
    the caller's expressions kept between batches (:func:`~lakehouse.dimension.plan.
    plan_target`'s ``built``), where the summary's struct of the records' schema is kept (a
    py4j call per function, each batch otherwise)."""
    key = ("record summary", decoded.schema.json())
    summary = None if kept is None else kept.get(key)
    if summary is None:
        summary = record_summary(decoded.schema)
        if kept is not None:
            kept[key] = summary
    items = [(i, frames.parts, plan.target.table_uri) for i, (plan, frames) in plans.items()]
    together = stage_rows_together(
        decoded,
        [(parts, uri) for _, parts, uri in items if parts is not None],
        txn,
        workers=workers,
        routed=routed,
        summary=summary,
    )
    staged = {i: s for (i, _, _), s in zip(items, together.staged, strict=True) if s is not None}
    summarised = None if together.summaries is None else fold_tasks(together.summaries)
    one = OnePass(decoded, summarised or ([], {}, []), staged, plans)
    if summarised is None or not steady(summarised[0]):
        one.discard()
        return None
    return one
