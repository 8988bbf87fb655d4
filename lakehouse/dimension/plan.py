"""Planning one batch for one build table: what the sink will write, decided before
anything is written, from one summary of the batch and one look at the table.

The order is read, decide, then build:

* :func:`lakehouse.dimension.summary.summarise` is the batch's summary for the driver (record
  kinds, column sets, phases, event-time range, end offsets);
  :func:`lakehouse.dimension.look.look_at` is the one look at the table (its columns, key and
  properties);
* :func:`plan_columns` decides the schema evolution in pure code: columns added or widened,
  column sets refused (a true conflict, which opens a schema block), key columns. A widening
  that could lose a value the table holds (bigint into double) needs one scan of the table,
  which :func:`decide_columns` runs before deciding again;
* :func:`plan_target` builds the column expressions of the plan (:class:`RowParts`), and
  from them, when asked, its lazy DataFrames (:class:`TargetFrames`): the rows in the build
  table layout, values that do not fit dead-lettered with the column and
  value, and the records a schema block holds back (:mod:`lakehouse.dimension.schema_block`),
  beside the plain :class:`TargetPlan` the commit is decided from.

The sink (:mod:`lakehouse.dimension.sink`) writes what the plan says, in its fixed order.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from lakehouse import delta
from lakehouse.columns import batch_long, batch_now
from lakehouse.delta.types import fits, value_checked, widened
from lakehouse.dimension.decode import row_images, row_value
from lakehouse.dimension.jvm_decode import row_text
from lakehouse.dimension.layout import (
    EVENT_TIME,
    INGESTED_AT,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TOPIC,
    LINEAGE_COLUMNS,
    OP,
    PROP_PRIMARY_KEY,
    SEQ,
    SNAPSHOT,
    SNAPSHOT_PHASES,
)
from lakehouse.dimension.look import TargetLook
from lakehouse.dimension.targets import BuildTarget
from lakehouse.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

    from lakehouse.dimension.schema_block import SchemaBlock


#: Schema-change events recorded in one data commit's metadata at most (the rest: log only).
MAX_DDL_PER_COMMIT = 50


@dataclass(frozen=True, slots=True)
class BlockEvidence:
    """The first incompatible record of a batch (it starts a schema block)."""

    column: str
    table_type: str
    record_type: str
    reason: str
    first_offset: dict[str, Any]
    first_event_time_ms: int | None


def schema_change_events(decoded: DataFrame) -> list[dict[str, Any]]:
    """The batch's Debezium schema-change (DDL) events, in source order, with positions."""
    from pyspark.sql import functions as F

    rows = (
        decoded.filter(F.col("_kind") == "schema_change")
        .select("_schema_change", "topic", "partition", "offset")
        .orderBy("topic", "partition", "offset")
        .collect()
    )
    out = []
    for r in rows:
        event = json.loads(r["_schema_change"])
        event.update(topic=r["topic"], partition=int(r["partition"]), offset=int(r["offset"]))
        out.append(event)
    return out


class Refusal(NamedTuple):
    """Why the table refuses a column set: its first column whose type neither fits the
    table's nor widens it without loss."""

    column: str
    record_type: str
    table_type: str
    reason: str


#: A widening the plan needs a table scan for: (column, the table's type, the wider type).
Widening = tuple[str, "DataType", "DataType"]


@dataclass(frozen=True, slots=True)
class ColumnSet:
    """The change records of one summary group, as the decoder typed their row image.

    Attributes:
        name: the group's ``_row_columns`` text (it names the set in the summary).
        columns: each column's type in the order the records have them; None for a column
            seen only as NULL (or holding ``void``), whose type is not known yet.
        fallbacks: the type a column seen only as an empty array gets when it must have one.
        key_columns: the Debezium key's columns the records carry (empty without a key).
    """

    name: str
    columns: tuple[tuple[str, DataType | None], ...]
    fallbacks: tuple[tuple[str, DataType], ...] = ()
    key_columns: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ColumnPlan:
    """The columns one batch writes to one build table, decided from the table's look and
    the batch's column sets (:func:`plan_columns`).

    Attributes:
        order: the row image's columns in table order, new ones after the table's.
        types: each column's type: the table's, widened where a record needs it, or the
            first concrete type seen for a new column (a column without one reads as string).
        key_columns: the configured key, else the key the table recorded, else the records'.
        compatible: the column sets that go into the table.
        refused: the column sets the table refuses, each with why.
        value_checks: per column, the record type and the column sets whose values must be
            checked one by one to go into the column's type (bigint into double).
        unchecked: widenings whose table values were not checked yet; :func:`decide_columns`
            checks them and plans again, so a final plan has none.
    """

    order: tuple[str, ...]
    types: Mapping[str, DataType]
    key_columns: tuple[str, ...]
    compatible: tuple[str, ...] = ()
    refused: Mapping[str, Refusal] = field(default_factory=dict)
    value_checks: Mapping[str, tuple[DataType, tuple[str, ...]]] = field(default_factory=dict)
    unchecked: frozenset[Widening] = frozenset()


def plan_columns(
    target: BuildTarget,
    look: TargetLook,
    sets: Sequence[ColumnSet],
    held: Mapping[Widening, str | None] | None = None,
) -> ColumnPlan:
    """Decide the columns of one table for a batch, in pure code.

    Column sets are taken in order. A set whose every column fits the table's type (or a
    type an earlier set widened it to) goes in; one with a column whose type widens the
    table's without loss goes in and widens it, unless the table holds a value the wider type
    does not hold exactly (``held``: the first such value per widening, as text, or None);
    any other set is refused, with the first column that does not fit. A new column takes
    the first concrete type seen; one seen only as NULL is left out until a value types it,
    unless it is a key or the event-time column (then it reads as string) or an empty array
    (kept as ``array<string>``).

    ``held`` answers the widenings a value check needs (:func:`lakehouse.delta.types.
    value_checked`); one it does not answer is taken as holding every value and listed in
    :attr:`ColumnPlan.unchecked`.

    >>> from pyspark.sql.types import DoubleType, LongType, StringType
    >>> look = TargetLook(exists=True, properties={}, replay=False,
    ...     columns={"id": LongType(), "rate": LongType()})
    >>> sets = [ColumnSet('[["id","bigint"],["rate","double"]]', (("id", LongType()),
    ...     ("rate", DoubleType()))), ColumnSet('[["id","bigint"],["rate","string"]]',
    ...     (("id", LongType()), ("rate", StringType())))]
    >>> plan = plan_columns(BuildTarget("/t/rates", key_columns=("id",)), look, sets)
    >>> plan.types["rate"], plan.unchecked
    (DoubleType(), frozenset({('rate', LongType(), DoubleType())}))
    >>> plan = plan_columns(BuildTarget("/t/rates", key_columns=("id",)), look, sets,
    ...     {("rate", LongType(), DoubleType()): "9007199254740993"})
    >>> plan.types["rate"], plan.compatible, [r.column for r in plan.refused.values()]
    (LongType(), (), ['rate', 'rate'])
    """
    held = held or {}
    table_types = dict(look.columns)
    chosen: dict[str, DataType] = dict(table_types)
    order: list[str] = [n for n in table_types if n not in LINEAGE_COLUMNS]
    untyped: list[str] = []  # new columns seen only as NULL so far
    compatible: list[str] = []
    refused: dict[str, Refusal] = {}
    fallback: dict[str, DataType] = {}  # untyped columns that still need a type (empty arrays)
    unchecked: set[Widening] = set()
    for s in sets:
        for n, typ in s.fallbacks:
            fallback.setdefault(n, typ)
        wider: dict[str, DataType] = {}
        clash = None
        for n, t in s.columns:
            if t is None or n not in chosen or fits(t, chosen[n]):
                continue
            # a type both hold without loss: the column widens (the table is rewritten
            # with it before the data commit); otherwise a true conflict refuses the set
            w = widened(t, chosen[n])
            lost = None
            old = table_types.get(n)
            if w is not None and old is not None and value_checked(old, w):
                if (n, old, w) in held:
                    lost = held[(n, old, w)]
                else:
                    unchecked.add((n, old, w))
            if w is None or lost is not None:
                clash = (n, t, lost)
                break
            wider[n] = w
        if clash is not None:
            name, typ, lost = clash
            refused[s.name] = Refusal(
                name,
                typ.simpleString(),
                chosen[name].simpleString(),
                f"column '{name}' has type {typ.simpleString()} in this record but "
                f"{chosen[name].simpleString()} in build table '{target.table_uri}'"
                + (
                    ""
                    if lost is None
                    else f", which holds {lost} (not exact as {typ.simpleString()})"
                ),
            )
            continue
        chosen.update(wider)
        compatible.append(s.name)
        for n, t in s.columns:
            if n in chosen or n in order:
                continue
            if t is not None:
                chosen[n] = t
                order.append(n)
            elif n not in untyped:
                untyped.append(n)

    key_columns = tuple(target.key_columns)
    if not key_columns and look.exists:
        stored = look.properties.get(PROP_PRIMARY_KEY, "")
        key_columns = tuple(c for c in stored.split(",") if c)
    if not key_columns:
        key_columns = next((s.key_columns for s in sets if s.key_columns), ())
    # A new column seen only as NULL is left out until a value gives it a type (its NULLs
    # read as NULL anyway); fixing it as string now would block the table on its first
    # value. Key and event-time columns are needed now: they fall back to string.
    for n in untyped:
        if n not in order and n in fallback:
            chosen[n] = fallback[n]  # an empty array stays an empty array, not NULL
            order.append(n)
        elif n not in order and (n in key_columns or n == target.event_time_column):
            order.append(n)
    checks: dict[str, tuple[DataType, list[str]]] = {}
    for s in sets:
        if s.name in refused:
            continue
        for n, t in s.columns:
            if t is not None and n in chosen and value_checked(t, chosen[n]):
                checks.setdefault(n, (t, []))[1].append(s.name)
    return ColumnPlan(
        order=tuple(order),
        types=chosen,
        key_columns=key_columns,
        compatible=tuple(compatible),
        refused=refused,
        value_checks={n: (t, tuple(names)) for n, (t, names) in checks.items()},
        unchecked=frozenset(unchecked),
    )


def require_columns(target: BuildTarget, plan: ColumnPlan) -> None:
    """Refuse a batch whose records the table cannot be keyed or timed by.

    Raises:
        ConfigError: no key configured nor carried; a key column or the event-time column
            missing from the row image.
    """
    uri = target.table_uri
    if not plan.key_columns:
        raise ConfigError(
            f"build table '{uri}': no key columns configured and the records carry no Debezium "
            'key; set the table\'s key (key = ["id"] under [[ingest.tables]], or --key id)',
            setting="key",
        )
    missing = [k for k in plan.key_columns if k not in plan.order]
    if missing and plan.compatible:
        raise ConfigError(
            f"build table '{uri}': key column(s) {missing} are not in the row image; the "
            f"records have columns {list(plan.order)}. Fix the table's key (key under "
            "[[ingest.tables]], or --key)",
            setting="ingest.tables.key",
        )
    if target.event_time_column and target.event_time_column not in plan.order:
        raise ConfigError(
            f"build table '{uri}': event-time column '{target.event_time_column}' is not in "
            f"the row image (columns: {list(plan.order)}). Fix event_time under "
            "[[ingest.tables]] (or --event-time), or leave it unset to use source.ts_ms",
            setting="ingest.tables.event_time",
        )


def column_sets(summary: Sequence[Mapping[str, Any]]) -> list[ColumnSet]:
    """The column sets of a target's summary groups
    (:func:`lakehouse.dimension.summary.summarise`), their types parsed (in the JVM: Spark's
    DDL parser; each distinct type once per process)."""
    sets = []
    for r in summary:
        raw = json.loads(r["_row_columns"] or "[]")
        sets.append(
            ColumnSet(
                name=r["_row_columns"],
                columns=tuple((n, _parse_type(t)) for n, t in raw),
                fallbacks=tuple((n, typ) for n, t in raw if (typ := _void_fallback(t)) is not None),
                key_columns=tuple(json.loads(r["_key_columns"] or "[]")),
            )
        )
    return sets


def decide_columns(
    spark: SparkSession, target: BuildTarget, look: TargetLook, sets: Sequence[ColumnSet]
) -> ColumnPlan:
    """:func:`plan_columns`, with the table values each widening needs checked: a scan of
    the table per widening that can lose a value (bigint into double), and none otherwise."""
    held: dict[Widening, str | None] = {}
    while True:
        plan = plan_columns(target, look, sets, held)
        if not plan.unchecked:
            return plan
        table = delta.read(spark, target.table_uri)
        for n, old, new in plan.unchecked:
            held[(n, old, new)] = delta.first_inexact(table, n, old, new)


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetPlan:
    """What one batch does to one build table, in plain values (:func:`plan_target`); the
    DataFrames that carry it out are apart (:class:`TargetFrames`), so the commit is decided
    from this alone (:func:`lakehouse.dimension.commit.plan_commit`).

    Attributes:
        target: the table.
        key_columns: its key (:attr:`ColumnPlan.key_columns`).
        rejected_count: the records dead-lettered for it (refused, or held back by a block).
        evidence: the first incompatible record, when the batch starts a schema block.
        active_block: the table's open schema block, which holds back all of the batch.
        blocked_count: the records the block (open, or starting now) held back.
        schema_changes: the batch's schema-change (DDL) events of its source table.
        refused_columns: the column sets whose records the table refused (a true conflict).
    """

    target: BuildTarget
    key_columns: tuple[str, ...]
    rejected_count: int = 0
    evidence: BlockEvidence | None = None
    active_block: SchemaBlock | None = None
    blocked_count: int = 0
    schema_changes: tuple[Mapping[str, Any], ...] = ()
    refused_columns: frozenset[str] = frozenset()

    def accepts_schemas_of(self, group: Mapping[str, Any]) -> bool:
        """Whether the records of a summary group go into the table as they are, so that
        their Connect schema is the table's (:mod:`lakehouse.dimension.connect_schemas`):
        not refused, and no schema block open or starting."""
        return (
            self.active_block is None
            and self.evidence is None
            and group.get("_row_columns") not in self.refused_columns
        )


@dataclass(frozen=True, slots=True)
class RowParts:
    """A table's rows of the batch as expressions over the decoded records, so that many
    tables' rows can be made by one projection: a record makes a row of the table where
    ``routed`` holds and ``reason`` is NULL (``reason`` and ``kind`` read the column
    ``value_column``, which must hold ``value`` where ``routed``), and the row is ``columns``;
    a routed record with a ``reason`` is a dead letter of that ``kind``.

    ``shape`` is what the expressions are made from (the table, its records' row images, its
    columns, types and key, ``value_column``): two plans of one table with the same ``shape``
    make the same rows of the same records (but for the batch's ingest time and wall clock).
    None when the expressions hold the batch's own records (refused column sets, value checks).
    """

    routed: Column
    value_column: str
    value: Column
    reason: Column
    kind: Column
    columns: tuple[Column, ...]
    shape: Any = None
    #: :meth:`joint_value` and :meth:`joint_row` made already (a plan kept between batches)
    joint: tuple[Column, Column] | None = None

    @property
    def kept(self) -> Column:
        """Where a routed record makes a row of the table."""
        return self.reason.isNull()

    def joint_value(self) -> Column:
        """The table's row value where a record is routed to it, named ``value_column``: a
        column of the projection that makes many tables' rows together."""
        from pyspark.sql import functions as F

        if self.joint is not None:
            return self.joint[0]
        return F.when(self.routed, self.value).alias(self.value_column)

    def joint_row(self) -> Column:
        """The table's row (a struct of ``columns``) where a routed record makes one, else
        null: a column, over :meth:`joint_value`'s, of the projection that makes many tables'
        rows together."""
        from pyspark.sql import functions as F

        if self.joint is not None:
            return self.joint[1]
        row = F.when(self.routed & self.kept, F.struct(*self.columns))
        return row.alias(f"{self.value_column}_row")

    def with_joint(self) -> RowParts:
        """These parts with :meth:`joint_value` and :meth:`joint_row` made now, for a plan
        kept between batches."""
        return dataclasses.replace(self, joint=(self.joint_value(), self.joint_row()))


@dataclass(frozen=True, slots=True)
class TargetFrames:
    """The (lazy) DataFrames of a :class:`TargetPlan` over the batch's ``decoded`` records:
    the table's new versions, in the build table layout (:meth:`rows`), and its rejected
    records, with ``_error_kind`` and ``_error`` (:meth:`rejected`).

    Each is made when asked for: a DataFrame is analysed by Spark on the driver as it is
    made, and a batch whose tables' rows are written by one projection of ``decoded``
    (``parts``) asks for neither unless it has dead letters.

    Attributes:
        parts: the rows' expressions; None when the table gets no rows.
        held_back: why every record routed to the table (``routed``) is held back, under
            a schema block; None when none is.
    """

    decoded: DataFrame | None = None
    routed: Column | None = None
    parts: RowParts | None = None
    held_back: str | None = None

    def rows(self) -> DataFrame | None:
        """The table's rows of the batch; None when it gets none."""
        if self.parts is None:
            return None
        assert self.decoded is not None
        return self._values().filter(self.parts.kept).select(*self.parts.columns)

    def rejected(self) -> DataFrame | None:
        """The records routed to the table that it rejects, as the decoded records with
        ``_error_kind`` and ``_error``; None when it can reject none."""
        from pyspark.sql import functions as F

        if self.held_back is not None:
            assert self.decoded is not None and self.routed is not None
            return self.decoded.filter(self.routed).withColumns(
                {"_error_kind": F.lit("schema_blocked"), "_error": F.lit(self.held_back)}
            )
        if self.parts is None:
            return None
        return (
            self._values()
            .withColumns({"_error": self.parts.reason, "_error_kind": self.parts.kind})
            .filter(F.col("_error").isNotNull())
        )

    def _values(self) -> DataFrame:
        """The routed records with their row value."""
        assert self.decoded is not None and self.parts is not None
        return self.decoded.filter(self.parts.routed).withColumn(
            self.parts.value_column, self.parts.value
        )


#: The columns a batch's decoded records carry its wall clock in, for the plans of a
#: :class:`PlanClock` read from them (:meth:`PlanClock.stamp`): epoch microseconds and
#: milliseconds, as :func:`~lakehouse.columns.batch_long` holds them. Never written to a table:
#: a row's columns and a dead letter's are named one by one.
CLOCK_US = "_plan_clock_us"
CLOCK_MS = "_plan_clock_ms"


class ClockColumns:
    """The columns of a wall clock read from the decoded records (:data:`CLOCK_US`,
    :data:`CLOCK_MS`): the same objects batch after batch, so that what a table's plan makes
    of them is too (:func:`plan_target` keeps it). A sink keeps one for its life; safe to use
    from the threads that plan a batch's tables at once."""

    def __init__(self) -> None:
        self._ingested_at: Column | None = None
        self._limits: dict[int, Column] = {}
        self._lock = threading.Lock()

    def ingested_at(self) -> Column:
        """The rows' ``INGESTED_AT`` column: :data:`CLOCK_US` as a timestamp."""
        from pyspark.sql import functions as F

        with self._lock:
            if self._ingested_at is None:
                self._ingested_at = F.timestamp_micros(F.col(CLOCK_US)).alias(INGESTED_AT)
            return self._ingested_at

    def limit(self, max_future_ms: int) -> Column:
        """The latest event time (epoch milliseconds) a row may have: ``max_future_ms`` past
        :data:`CLOCK_MS`."""
        from pyspark.sql import functions as F

        with self._lock:
            made = self._limits.get(max_future_ms)
            if made is None:
                made = self._limits[max_future_ms] = F.col(CLOCK_MS) + F.lit(max_future_ms)
            return made


class PlanClock:
    """The wall clock of one batch's plans, shared by its tables: the rows' ``INGESTED_AT``
    and the limit of each ``max_future_ms``, as :func:`~lakehouse.columns.batch_long` holds
    them. Made once per batch, not once per table (a column is a few py4j calls, and a
    connector's batch plans every table it captures); safe to use from the threads that plan
    a batch's tables at once.

    ``columns``: the clock is read from the decoded records' :data:`CLOCK_US` and
    :data:`CLOCK_MS` (:meth:`stamp` adds them), through columns the caller keeps between
    batches; a table's plan made of them is then the same batch after batch, and is kept
    (:func:`plan_target`). Without, each column holds the batch's clock as a value.

    >>> PlanClock(1_700_000_000_000_000).now_ms
    1700000000000
    """

    def __init__(self, now_us: int | None = None, *, columns: ClockColumns | None = None) -> None:
        self.now_us = time.time_ns() // 1000 if now_us is None else now_us
        self.columns = columns
        self._ingested_at: Column | None = None
        self._limits: dict[int, Column] = {}
        self._lock = threading.Lock()

    @property
    def now_ms(self) -> int:
        """The batch's wall clock, in milliseconds."""
        return self.now_us // 1000

    def stamp(self, decoded: DataFrame) -> DataFrame:
        """``decoded`` with the clock's columns (replacing any a frame had), where the clock
        is read from them; ``decoded`` itself otherwise."""
        if self.columns is None:
            return decoded
        return decoded.withColumns(
            {CLOCK_US: batch_long(self.now_us), CLOCK_MS: batch_long(self.now_ms)}
        )

    def ingested_at(self) -> Column:
        """The rows' ``INGESTED_AT`` column (the batch's wall clock, to the microsecond)."""
        if self.columns is not None:
            return self.columns.ingested_at()
        with self._lock:
            if self._ingested_at is None:
                self._ingested_at = batch_now(self.now_us).alias(INGESTED_AT)
            return self._ingested_at

    def limit(self, max_future_ms: int) -> Column:
        """The latest event time (epoch milliseconds) a row may have: ``max_future_ms`` past
        the batch's wall clock."""
        if self.columns is not None:
            return self.columns.limit(max_future_ms)
        with self._lock:
            made = self._limits.get(max_future_ms)
            if made is None:
                made = self._limits[max_future_ms] = batch_long(self.now_ms + max_future_ms)
            return made


def plan_target(
    decoded: DataFrame,
    target: BuildTarget,
    look: TargetLook,
    summary: Sequence[Mapping[str, Any]],
    *,
    block: SchemaBlock | None = None,
    replay: bool = False,
    schema_changes: Sequence[Mapping[str, Any]] = (),
    built: dict[Any, Any] | None = None,
    value_column: str = "_v",
    clock: PlanClock | None = None,
) -> tuple[TargetPlan, TargetFrames]:
    """Plan one target for this batch: its columns (:func:`decide_columns`), then its rows
    and rejected records as lazy DataFrames. ``summary``: the target's change groups.

    Args:
        look: the table as the batch found it (:func:`lakehouse.dimension.look.look_at`).
        block: the table's open schema block, which holds back every change of this batch.
        replay: planning the dead letters of a block again (:mod:`.schema_block`): records
            that do not fit are rejected, but start no block and hold nothing back.
        schema_changes: the batch's DDL events of the target's source table.
        built: the caller's cache of the table's expressions, kept between batches (they
            depend on its columns and row images only).
        value_column: the name of the column of the table's row value (typed row image) in
            its expressions: distinct per table where several tables' rows are made together
            (:class:`RowParts`), and not a column of ``decoded``.
        clock: the batch's wall clock, shared by its tables; None: the wall clock now.
    """
    from pyspark.sql import functions as F

    clock = clock or PlanClock()
    uri = target.table_uri
    changes = tuple(schema_changes)
    columns = decide_columns(decoded.sparkSession, target, look, column_sets(summary))
    key_columns = columns.key_columns
    if not summary:
        return TargetPlan(target=target, key_columns=key_columns, schema_changes=changes), (
            TargetFrames()
        )

    # column expressions only: a DataFrame is analysed by Spark on the driver as it is made,
    # which a batch over many tables would pay per table (TargetFrames makes them if asked)
    routed = built.get(("routed", target.source_table)) if built is not None else None
    if routed is None:
        routed = F.col("_kind") == "change"
        if target.source_table is not None:
            routed = routed & (F.col("_source_table") == target.source_table)
        if built is not None:  # the same column batch after batch (a few py4j calls)
            built[("routed", target.source_table)] = routed
    if block is not None:
        # blocked: every change of the table is held back (module .schema_block)
        count = sum(r["n"] for r in summary)
        plan = TargetPlan(
            target=target,
            key_columns=key_columns,
            rejected_count=count,
            active_block=block,
            blocked_count=count,
            schema_changes=changes,
        )
        held_back = (
            f"build table '{uri}' is blocked on schema since version {block.since_version} "
            f"(column {block.column} changed {block.table_type} -> {block.record_type}); "
            "held back until `lakehouse schema-resolve`"
        )
        return plan, TargetFrames(decoded, routed, held_back=held_back)

    require_columns(target, columns)
    order, incompatible = columns.order, columns.refused

    reason: Column | None = None
    kind: Column | None = None
    evidence: BlockEvidence | None = None
    held_count = 0
    if incompatible:
        mapping = F.create_map(
            *[x for k, v in incompatible.items() for x in (F.lit(k), F.lit(v[3]))]
        )
        refused = mapping[F.col("_row_columns")]
        reason = refused
        kind = F.when(refused.isNotNull(), F.lit("schema_mismatch"))
        if not replay:
            mine = decoded.filter(routed)
            evidence, held, held_count = _block_evidence(mine, incompatible, uri)
            reason = F.when(refused.isNotNull(), refused).when(held.isNotNull(), held)
            kind = F.when(kind.isNotNull(), kind).when(held.isNotNull(), F.lit("schema_blocked"))
    # only the image columns this table's records are in: a batch over many tables would
    # otherwise build (and evaluate) every table's images into every table's rows
    images = row_images(decoded.schema, summary)
    # a table's expressions are the same batch after batch while its columns are (made over
    # py4j, a call per function: about half of a table's plan); those of refused column sets
    # and of value checks hold this batch's records, and are made each time
    kept = None if incompatible or columns.value_checks else built
    shape = _shape(uri, images, columns, value_column)
    made = kept.get(shape) if kept is not None else None
    if made is None:
        made = _expressions(
            target,
            images,
            columns,
            F.lit(None).cast("string") if reason is None else reason,
            F.lit(None).cast("string") if kind is None else kind,
            value_column,
        )
        if kept is not None:
            kept[shape] = made
    mismatched = sum(r["n"] for r in summary if r["_row_columns"] in incompatible)
    plan = TargetPlan(
        target=target,
        key_columns=key_columns,
        rejected_count=mismatched + held_count,
        evidence=evidence,
        blocked_count=mismatched + held_count if evidence is not None else 0,
        schema_changes=changes,
        refused_columns=frozenset(incompatible),
    )
    # with a clock read from the records' columns, the whole of a kept table's rows (and the
    # columns of the projection that writes many tables' rows together) is the same batch
    # after batch: made once, not a few hundred py4j calls per table and batch
    parts_key = None
    if kept is not None and clock.columns is not None:
        parts_key = ("parts", shape, target.max_future_ms, tuple(look.columns))
        found = kept.get(parts_key)
        if found is not None:
            return plan, TargetFrames(decoded, routed, found)
    reason, kind = made.reason, made.kind
    if made.future is not None and target.max_future_ms is not None:
        # against the wall clock at planning: a version from the far future would hold the
        # build watermark there for good
        future = made.future.event_ms > clock.limit(target.max_future_ms)
        reason = made.future.reason_so_far.when(future, made.future.reason)
        kind = made.future.kind_so_far.when(future, made.future.kind)
    columns_of_row = _in_table_order(
        (*made.before_ingested, clock.ingested_at(), *made.after_ingested),
        (*order, *LINEAGE_COLUMNS),
        look.columns,
    )
    parts = RowParts(
        routed=routed,
        value_column=value_column,
        value=made.value,
        reason=reason,
        kind=kind,
        columns=columns_of_row,
        shape=None if incompatible or columns.value_checks else shape,
    )
    if parts_key is not None and kept is not None:
        parts = kept[parts_key] = parts.with_joint()
    return plan, TargetFrames(decoded, routed, parts)


def plan_shape(
    schema: StructType,
    target: BuildTarget,
    look: TargetLook,
    summary: Sequence[Mapping[str, Any]],
    *,
    value_column: str = "_v",
) -> Any:
    """The :attr:`RowParts.shape` :func:`plan_target` gives the target's rows of a batch of
    this ``summary`` over decoded records of this ``schema``, in pure code (no expression
    made, no table scanned); None when it would give none: no change, a column set refused, a
    value to check, or a widening whose table values are not checked yet. Two batches of one
    shape are planned alike (:mod:`lakehouse.dimension.one_pass`)."""
    if not summary:
        return None
    columns = plan_columns(target, look, column_sets(summary))
    if columns.refused or columns.value_checks or columns.unchecked:
        return None
    return _shape(target.table_uri, row_images(schema, summary), columns, value_column)


def _shape(
    uri: str,
    images: Sequence[tuple[str, StructType]],
    columns: ColumnPlan,
    value_column: str,
) -> tuple[Any, ...]:
    """What a table's expressions are made from (:attr:`RowParts.shape`)."""
    order, types = columns.order, columns.types
    return (uri, tuple(images), order, tuple(types.items()), columns.key_columns, value_column)


@dataclass(frozen=True, slots=True)
class _FutureCheck:
    """The parts of a table's wall-clock check that do not hold the wall clock: the event
    time in epoch milliseconds, the dead-letter reason and kind so far as the first branch of
    a ``CASE WHEN`` the check adds its branch to, and the check's own reason and kind."""

    event_ms: Column
    reason_so_far: Column
    kind_so_far: Column
    reason: Column
    kind: Column


@dataclass(frozen=True, slots=True)
class _Expressions:
    """A table's expressions over its decoded records (:func:`_expressions`): the row value
    ``_v``, the event time, the dead-letter reason and kind up to the wall-clock check, the
    check's parts (None: the table has none), and the row's columns before and after
    ``INGESTED_AT`` (the batch's, added by the caller)."""

    value: Column
    event_time: Column
    reason: Column
    kind: Column
    future: _FutureCheck | None
    before_ingested: tuple[Column, ...]
    after_ingested: tuple[Column, ...]


def _expressions(
    target: BuildTarget,
    images: Sequence[tuple[str, StructType]],
    columns: ColumnPlan,
    reason: Column,
    kind: Column,
    value_column: str = "_v",
) -> _Expressions:
    """A table's :class:`_Expressions`, its records' typed images in ``images``, its columns
    ``columns``; ``reason`` and ``kind``: the dead-letter reason and kind so far (of refused
    column sets)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    chosen, order, key_columns = columns.types, columns.order, columns.key_columns
    text = row_text(images)
    value = row_value(images, order, chosen, text)
    # bigint values going into a double column (widened, or widened before): each is
    # checked, and one a double does not hold exactly is dead-lettered, never rounded
    for name, (record_type, sets) in columns.value_checks.items():
        exact = F.from_json(text, StructType([StructField(name, record_type, True)]))[name]
        lost = F.col("_row_columns").isin(*sets) & delta.inexact(exact, record_type, chosen[name])
        reason = F.when(reason.isNotNull(), reason).when(
            lost,
            F.concat(
                F.lit(f"column '{name}' holds "),
                exact.cast("string"),
                F.lit(f", which its type {chosen[name].simpleString()} does not hold exactly"),
            ),
        )
        kind = F.when(kind.isNotNull(), kind).when(lost, F.lit("invalid_value"))
    event_time = _event_time_expr(target, F.col(value_column), chosen)
    key_null = F.lit(False)
    for k in key_columns:
        key_null = key_null | F.col(value_column)[k].isNull()
    not_truncate = F.col("_op") != "t"
    reason = (
        F.when(reason.isNotNull(), reason)
        .when(
            not_truncate & key_null,
            F.lit(f"key column(s) {list(key_columns)} missing or NULL in the row image"),
        )
        .when(
            event_time.isNull(),
            F.lit("no event time (source.ts_ms or the event-time column is NULL)"),
        )
    )
    kind = (
        F.when(kind.isNotNull(), kind)
        .when(not_truncate & key_null, F.lit("missing_key"))
        .when(event_time.isNull(), F.lit("missing_event_time"))
    )
    seq = F.coalesce(
        F.col("_seq"),
        F.format_string("k%010d.%020d", F.col("partition"), F.col("offset")),
    )
    future = None
    if target.max_future_ms is not None:
        future = _FutureCheck(
            event_ms=F.unix_millis(event_time),
            reason_so_far=F.when(reason.isNotNull(), reason),
            kind_so_far=F.when(kind.isNotNull(), kind),
            reason=F.concat(
                F.lit("event time "),
                event_time.cast("string"),
                F.lit(
                    f" is more than max_future_ms = {target.max_future_ms} past the wall "
                    "clock (a wrong clock, or epoch seconds/microseconds read as milliseconds)"
                ),
            ),
            kind=F.lit("future_event_time"),
        )
    return _Expressions(
        value=value,
        event_time=event_time,
        reason=reason,
        kind=kind,
        future=future,
        before_ingested=(
            *[F.col(value_column)[n].alias(n) for n in order],
            F.col("_op").alias(OP),
            event_time.alias(EVENT_TIME),
            seq.alias(SEQ),
            F.col("_snapshot_phase").isin(*SNAPSHOT_PHASES).alias(SNAPSHOT),
        ),
        after_ingested=(
            F.col("topic").alias(KAFKA_TOPIC),
            F.col("partition").alias(KAFKA_PARTITION),
            F.col("offset").alias(KAFKA_OFFSET),
        ),
    )


def _in_table_order(
    columns: Sequence[Column], names: Sequence[str], table: Mapping[str, Any]
) -> tuple[Column, ...]:
    """A row's ``columns`` (named ``names``) in the order of the ``table``'s columns, then the
    columns it does not have yet, in their order: the order Delta gives a table whose columns
    a write adds (at the end), so that the rows' type is the table's and a joint write takes
    them as they are (``delta.stage_appends``).

    >>> _in_table_order(["a", "_op", "b"], ["a", "_op", "b"], {"a": 1, "_op": 1})
    ('a', '_op', 'b')
    >>> _in_table_order(["a", "b", "_op"], ["a", "b", "_op"], {"a": 1, "_op": 1, "b": 1})
    ('a', '_op', 'b')
    """
    by_name = dict(zip(names, columns, strict=True))
    ordered = [n for n in table if n in by_name]
    ordered += [n for n in names if n not in table]
    return tuple(by_name[n] for n in ordered)


def _block_evidence(
    mine: DataFrame, incompatible: Mapping[str, Refusal], uri: str
) -> tuple[BlockEvidence, Column, int]:
    """The first incompatible record of the batch, and which compatible records it holds
    back: those of the same topic-partition at later offsets (Debezium keeps a key in one
    partition, so these may be later changes of its key). Runs two small aggregations."""
    from pyspark.sql import functions as F

    bad = mine.filter(F.col("_row_columns").isin(*incompatible))
    firsts = bad.groupBy("topic", "partition").agg(F.min("offset").alias("o")).collect()
    first = (
        bad.orderBy(F.col("_event_time_ms").asc_nulls_last(), "topic", "partition", "offset")
        .select("_row_columns", "topic", "partition", "offset", "_event_time_ms")
        .first()
    )
    assert first is not None
    column, record_type, table_type, reason = incompatible[first["_row_columns"]]
    min_ts = bad.agg(F.min("_event_time_ms")).collect()[0][0]
    evidence = BlockEvidence(
        column=column,
        table_type=table_type,
        record_type=record_type,
        reason=reason,
        first_offset={
            "topic": first["topic"],
            "partition": int(first["partition"]),
            "offset": int(first["offset"]),
        },
        first_event_time_ms=None if min_ts is None else int(min_ts),
    )
    starts = F.create_map(
        *[
            x
            for r in firsts
            for x in (F.lit(f"{r['topic']}\u0000{r['partition']}"), F.lit(int(r["o"])))
        ]
    )
    start = starts[F.concat_ws("\u0000", F.col("topic"), F.col("partition").cast("string"))]
    is_held = (
        start.isNotNull()
        & (F.col("offset") > start)
        & F.coalesce(~F.col("_row_columns").isin(*incompatible), F.lit(True))
    )
    held = F.when(
        is_held,
        F.lit(
            f"build table '{uri}' is blocked on schema (column {column} changed {table_type} -> "
            f"{record_type} in an earlier record of this partition); held back until "
            "`lakehouse schema-resolve`"
        ),
    )
    held_count = mine.filter(is_held).count()
    return evidence, held, held_count


def _event_time_expr(target: BuildTarget, row: Column, types: Mapping[str, DataType]) -> Column:
    """The version start: ``source.ts_ms``, or the configured row column converted by type
    (timestamp as is, date at midnight UTC, a number as epoch milliseconds, a string parsed
    as an ISO-8601 timestamp)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, NumericType, StringType, TimestampType

    if target.event_time_column is None:
        return F.timestamp_millis(F.col("_event_time_ms"))
    value = row[target.event_time_column]
    typ = types.get(target.event_time_column)
    if isinstance(typ, TimestampType):
        return value
    if isinstance(typ, DateType):
        return value.cast("timestamp")
    if isinstance(typ, NumericType):
        return F.timestamp_millis(value.cast("bigint"))
    if isinstance(typ, StringType) or typ is None:
        return F.to_timestamp(value)
    raise ConfigError(
        f"build table '{target.table_uri}': event-time column '{target.event_time_column}' has "
        f"type {typ.simpleString()}; use a timestamp, date, epoch-milliseconds number or "
        "ISO-8601 string column",
        setting="ingest.tables.event_time",
    )


@functools.lru_cache(maxsize=4096)
def _parse_type(ddl: str) -> DataType | None:
    """Parse a Spark SQL type string from the decoder; a type that is or holds ``void`` (a
    NULL, an empty array) is not known yet and gives None: no table gets a ``void`` column."""
    from pyspark.sql.types import StructType

    if ddl in ("null", "") or "void" in ddl:
        return None
    return cast("StructType", StructType.fromDDL(f"x {ddl}")).fields[0].dataType


def _void_fallback(ddl: str) -> DataType | None:
    """The type a column seen only as ``ddl`` gets when it must have one: an empty array is
    kept as an empty ``array<string>`` (a later typed array fits it, element-wise or as
    text), a bare NULL gets nothing (None)."""
    if "void" not in ddl or ddl == "void":
        return None
    return _parse_type(ddl.replace("void", "string"))


def empty_like(uri: str) -> DataFrame:
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None
    return spark.createDataFrame([], delta.table_schema(uri))


def lineage_schema() -> StructType:
    """The schema of a build table created by a signal before any row (an empty source
    table): the lineage columns only; the row image's columns are added by the first rows."""
    from pyspark.sql.types import StructType

    return cast(
        "StructType",
        StructType.fromDDL(
            f"{OP} string, {EVENT_TIME} timestamp, {SEQ} string, {SNAPSHOT} boolean, "
            f"{INGESTED_AT} timestamp, {KAFKA_TOPIC} string, {KAFKA_PARTITION} int, "
            f"{KAFKA_OFFSET} bigint"
        ),
    )
