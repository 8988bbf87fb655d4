"""Schema drift of a build table: compatible changes evolve it, an incompatible one blocks it.

What the ingest does with the columns of the Debezium row image (see :mod:`.sink`):

* **a new column** is added to the build table (nullable; older versions read NULL) and, through
  the join's schema merge, to the output table. A column whose values are all NULL so far
  gets its type from its first non-NULL value (or from the Connect schema, which always
  names it), so an all-NULL start does not fix it as ``string``;
* **a dropped column** stays in the table and reads NULL in the versions written after;
* **a value that fits the column losslessly** is accepted: a narrower integer, ``float`` into
  ``double``, a decimal with no more integer digits and no more scale than the column's;
* **a value that needs a wider type** widens the column when one type holds every value of
  both (:func:`lakehouse.delta.types.widened`: a wider integer, ``double`` next to a fraction,
  a decimal with more digits): the table is rewritten with it before the batch's data commit
  (:func:`lakehouse.delta.widen_columns`); ``bigint`` to ``double`` only when every stored
  value survives, and later integers a double does not hold are dead-lettered
  (``invalid_value``);
* **anything else is an incompatible type change.** The record is dead-lettered
  (``schema_mismatch``, the reason names column, table type, record type and table) and the
  table is **blocked on schema**.

**Why block the whole table.** A change that is not applied leaves its key's previous
version in force; applying the later changes of the table as if nothing were missing would
make the dimension silently wrong (a row-time join would even release facts against it, and
its result would differ from a replay after the fix). So from the first incompatible record
on, the table holds a *consistent prefix* of its change stream:

* in the batch that meets it, the records of the same topic-partition at later offsets are
  dead-lettered too (``schema_blocked``: Debezium keeps each key in one partition, so these are
  the changes that may come after it); records of other partitions, which Kafka does not
  order against it, are applied;
* in every later batch, every change routed to the table is dead-lettered ``schema_blocked``
  (the stream goes on, offsets advance, nothing is lost: the raw records are in the
  dead-letter table);
* the table's build watermark stops: it is capped below the first incompatible record's
  event time and stays there (:attr:`SchemaBlock.watermark_ms`), so a **row-time join** waits
  instead of joining facts against a dimension with a change missing. A **processing-time
  join** keeps joining the latest version, which is the consistent prefix: the join shows the
  block (``lakehouse join`` prints it each batch; ``lakehouse status`` shows it), and its
  ``_build_version`` says which version each row used.

The block is the table property ``lakehouse.schema.block`` (JSON of :class:`SchemaBlock`),
set in a commit **before** the data commit of the batch that met the incompatible record;
each data commit while blocked carries ``lakehouse.schemaBlocked`` (this batch's count) and
``lakehouse.schemaBlockedTotal``. A replay of the blocking batch recomputes the same decision
(the block names its batch; it holds back only later batches).

**Resolving** (:func:`resolve`, ``lakehouse schema-resolve``): the operator decides.

* *Migrate* when the new type is here to stay: a new build table fed from a re-snapshot (the
  old one stays blocked, or is resolved with ``--accept-loss`` to retire it).
* *Replay* when the incompatible records were wrong (a bad deploy, since rolled back): the
  records the block held back that fit the table are re-applied from the dead-letter table
  with their original positions and event times — the version log orders changes by
  ``(_event_time, _seq)``, not by arrival, so the table ends as if they had arrived in time —
  and the block is cleared; the records that still do not fit stay dead-lettered, which the
  operator accepts with ``--accept-loss`` (without it nothing changes). The replay skips
  records whose source position the table already holds, so running it twice is harmless.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from lakehouse import delta
from lakehouse.delta.types import fits as fits
from lakehouse.dimension import connect_schemas
from lakehouse.dimension.decode import decode_raw
from lakehouse.dimension.layout import (
    EVENT_TIME,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TOPIC,
    META_BATCH_ID,
    META_MAX_EVENT_TIME,
    META_ROWS,
    META_SCHEMA_BLOCKED_TOTAL,
    META_SCHEMA_RESOLVED,
    META_WATERMARK,
    PROP_EVENT_TIME,
    PROP_PRIMARY_KEY,
    PROP_SCHEMA_BLOCK,
    PROP_SCHEMA_LAST_RESOLVED,
    PROP_SOURCE_TABLE,
)
from lakehouse.dimension.look import look_at
from lakehouse.dimension.marker import last_max_event_time, last_metadata, last_watermark, now_iso
from lakehouse.dimension.plan import plan_target
from lakehouse.dimension.summary import summarise
from lakehouse.dimension.targets import BuildTarget
from lakehouse.errors import ConfigError
from lakehouse.failpoints import failpoint

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Dead-letter kinds that belong to a schema block.
BLOCK_KINDS = ("schema_mismatch", "schema_blocked")
#: Application id of the replay commits of :func:`resolve`.
RESOLVE_APP_ID = "lakehouse-schema-resolve"


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaBlock:
    """An open (or last resolved) schema block of a build table.

    Attributes:
        column: the column whose type changed.
        table_type: its type in the build table (Spark SQL).
        record_type: its type in the first incompatible record.
        since_version: the table version of the commit that set the block.
        batch_id: the ingest micro-batch that met the first incompatible record.
        pipeline: the ingest pipeline id (its dead letters carry it).
        first_offset: ``{"topic", "partition", "offset"}`` of the first incompatible record.
        first_event_time_ms: its event time.
        watermark_ms: the build watermark while blocked (below ``first_event_time_ms``).
        blocked_at: when the block was set (ISO-8601, UTC).
        reason: the dead-letter reason of the first incompatible record.
    """

    column: str
    table_type: str
    record_type: str
    since_version: int
    batch_id: int
    pipeline: str
    first_offset: Mapping[str, Any]
    first_event_time_ms: int | None
    watermark_ms: int
    blocked_at: str
    reason: str
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """Serialise for the table property."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SchemaBlock:
        """Parse :meth:`to_json` output."""
        d = json.loads(text)
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def describe(self, dead_lettered: int | None = None) -> str:
        """One line for status and progress output."""
        where = self.first_offset
        text = (
            f"BLOCKED on schema: column {self.column} changed {self.table_type} -> "
            f"{self.record_type} since version {self.since_version} (first at "
            f"{where.get('topic')}[{where.get('partition')}]@{where.get('offset')})"
        )
        if dead_lettered is not None:
            text += f"; {dead_lettered} records dead-lettered"
        return text + "; resolve with `lakehouse schema-resolve`"


def open_block(props: Mapping[str, str]) -> SchemaBlock | None:
    """The open schema block recorded in a table's properties, if any."""
    text = props.get(PROP_SCHEMA_BLOCK, "")
    return SchemaBlock.from_json(text) if text else None


def last_resolved(props: Mapping[str, str]) -> dict[str, Any] | None:
    """What the last :func:`resolve` recorded (the block, reason, counts), if any."""
    text = props.get(PROP_SCHEMA_LAST_RESOLVED, "")
    return json.loads(text) if text else None


def set_block(uri: str, block: SchemaBlock) -> SchemaBlock:
    """Record the block (a commit of its own, before the batch's data commit); returns it as
    recorded, ``since_version`` being the version of that commit (the ingest is the table's
    only writer)."""
    recorded = replace(block, since_version=delta.latest_version(uri) + 1)
    delta.set_properties(
        uri,
        {PROP_SCHEMA_BLOCK: recorded.to_json()},
        metadata={delta.META_REASON: recorded.describe(), META_BATCH_ID: recorded.batch_id},
    )
    return recorded


def blocked_total(uri: str) -> int:
    """Records dead-lettered because of the open block, as the last data commit counted."""
    value = last_metadata(uri, META_SCHEMA_BLOCKED_TOTAL)
    return int(value) if value else 0


def block_text(uri: str, block: SchemaBlock | None) -> str | None:
    """The open block as the progress line and status show it (None: no block)."""
    return None if block is None else block.describe(blocked_total(uri))


# ----------------------------------------------------------------------------------- resolve


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolveResult:
    """What :func:`resolve` did.

    Attributes:
        block: the block it resolved (None: the table was not blocked; a replay of the last
            resolved block only).
        candidates: dead-lettered records of the block found in the dead-letter table.
        replayed: records applied to the table now.
        already_applied: records whose position the table already held (an earlier replay).
        still_incompatible: records that still do not fit (left in the dead-letter table).
        version: the replay commit's version, if any.
        cleared: the block was cleared.
    """

    block: SchemaBlock | None
    candidates: int
    replayed: int
    already_applied: int
    still_incompatible: int
    version: int | None
    cleared: bool


def resolve(
    spark: SparkSession,
    uri: str,
    *,
    reason: str,
    dead_letter_table: str | None,
    accept_loss: bool = False,
) -> ResolveResult:
    """Resolve a build table's schema block (see the module docstring). Stop the ingest
    first: records it dead-letters while this runs would not be replayed (run this again
    after the ingest is stopped to pick them up; positions already applied are skipped).

    With ``dead_letter_table``, the block's dead letters (kinds :data:`BLOCK_KINDS`, of the
    block's pipeline from its batch on, naming this table) are decoded again against the
    table's current schema; those that fit and whose position the table does not hold yet are
    appended in one commit (application transaction :data:`RESOLVE_APP_ID`), with the
    watermark left where the block held it (the ingest's next batch moves it on). Without
    it, nothing is replayed: the held-back records stay dead-lettered.

    Raises:
        ConfigError: ``reason`` is blank; the table is not blocked and was never resolved;
            records remain that do not fit (or no dead-letter table was given) and
            ``accept_loss`` is False — the message says how many and what to do.
        TableNotFoundError: no table at ``uri``.
    """
    if not reason.strip():
        raise ConfigError("--reason must say why the block is resolved", setting="reason")
    props = delta.get_properties(uri)
    block = open_block(props)
    previous = last_resolved(props)
    target_block = block
    if target_block is None:
        if previous is None or dead_letter_table is None:
            raise ConfigError(
                f"build table '{uri}' is not blocked on schema; nothing to resolve",
                setting="table",
            )
        # the block was cleared already: replay again (picks up records dead-lettered while
        # the ingest still ran); positions already applied are skipped
        target_block = SchemaBlock.from_json(json.dumps(previous["block"]))

    candidates = replayed = applied_before = incompatible = 0
    version: int | None = None
    if dead_letter_table is not None and delta.table_exists(dead_letter_table):
        plan = _replay_plan(spark, uri, target_block, dead_letter_table)
        candidates, applied_before, incompatible = plan.candidates, plan.applied, plan.rejected
        if incompatible and not accept_loss:
            raise ConfigError(
                f"build table '{uri}': {incompatible} of the {candidates} records held back by "
                f"the block still do not fit the table ({target_block.column} is "
                f"{target_block.table_type} in the table, {target_block.record_type} in the "
                "records). Nothing was changed. If the new type is here to stay, migrate to a "
                "new build table fed by a re-snapshot; if those records were wrong, run again "
                "with --accept-loss to apply the others and leave them in the dead-letter table.",
                setting="accept_loss",
            )
        if plan.rows is not None and plan.count:
            version = _append_replay(uri, plan, target_block, reason)
            replayed = plan.count
            failpoint("schema_resolve.after_replay")
    elif not accept_loss:
        raise ConfigError(
            f"build table '{uri}': without --dead-letter-table the {blocked_total(uri)} records "
            "the block held back are not replayed; give --dead-letter-table to replay them, or "
            "--accept-loss to resume without them",
            setting="dead_letter_table",
        )
    cleared = False
    if block is not None:
        record = {
            "block": json.loads(block.to_json()),
            "reason": reason,
            "resolvedAt": now_iso(),
            "deadLettered": blocked_total(uri),
            "replayed": replayed,
            "stillIncompatible": incompatible,
            "acceptLoss": accept_loss,
        }
        delta.set_properties(
            uri,
            {PROP_SCHEMA_BLOCK: "", PROP_SCHEMA_LAST_RESOLVED: json.dumps(record)},
            metadata={delta.META_REASON: f"schema block resolved: {reason}"},
        )
        cleared = True
    return ResolveResult(
        block=block,
        candidates=candidates,
        replayed=replayed,
        already_applied=applied_before,
        still_incompatible=incompatible,
        version=version,
        cleared=cleared,
    )


@dataclass(slots=True)
class _Replay:
    rows: DataFrame | None
    count: int
    candidates: int
    applied: int
    rejected: int
    max_event_time_ms: int | None


def _replay_plan(spark: SparkSession, uri: str, block: SchemaBlock, dlq: str) -> _Replay:
    """Decode the block's dead letters again and plan them against the table as it is."""
    from pyspark.sql import functions as F

    props = delta.get_properties(uri)
    dead = delta.read(spark, dlq).filter(
        F.col("_error_kind").isin(*BLOCK_KINDS)
        & (F.col("_pipeline") == block.pipeline)
        & (F.col("_batch_id") >= block.batch_id)
        & F.col("_error").contains(f"'{uri}'")
    )
    # one record per source position (a dead letter is written once per batch transaction)
    raw = dead.select(
        F.col("_raw_key").alias("key"),
        F.col("_raw_value").alias("value"),
        F.col("_topic").alias("topic"),
        F.col("_partition").alias("partition"),
        F.col("_offset").alias("offset"),
        F.col("_source_timestamp").alias("timestamp"),
        F.lit(0).alias("timestampType"),
    ).dropDuplicates(["topic", "partition", "offset"])
    held = (
        delta.read(spark, uri)
        .select(
            F.col(KAFKA_TOPIC).alias("topic"),
            F.col(KAFKA_PARTITION).alias("partition"),
            F.col(KAFKA_OFFSET).alias("offset"),
        )
        .distinct()
    )
    candidates = raw.count()
    fresh = raw.join(held, ["topic", "partition", "offset"], "left_anti")
    applied = candidates - fresh.count()
    # records without a schema of their own are read with the table's newest, as the ingest
    # reads them
    schemas = connect_schemas.load(uri, connect_schemas.recorded(props).after)
    decoded = decode_raw(fresh, schemas=schemas)
    source = props.get(PROP_SOURCE_TABLE, "*")
    event_time = props.get(PROP_EVENT_TIME, "source.ts_ms")
    target = BuildTarget(
        uri,
        key_columns=tuple(c for c in props.get(PROP_PRIMARY_KEY, "").split(",") if c),
        source_table=None if source == "*" else source,
        event_time_column=None if event_time == "source.ts_ms" else event_time,
    )
    summary = [
        r
        for r in summarise(decoded)[0]
        if r["_kind"] == "change"
        and (target.source_table is None or r["_source_table"] == target.source_table)
    ]
    look = look_at(uri, app_id=RESOLVE_APP_ID, batch_id=block.batch_id)
    _, frames = plan_target(decoded, target, look, summary, replay=True)
    made = frames.rows()
    if made is None:
        return _Replay(None, 0, candidates, applied, 0, None)
    rows = made.persist()
    agg = rows.agg(F.count(F.lit(1)).alias("n"), F.max(EVENT_TIME).alias("m")).collect()[0]
    refused = frames.rejected()
    rejected = refused.count() if refused is not None else 0
    max_ms = None if agg["m"] is None else int(agg["m"].timestamp() * 1000)
    return _Replay(rows, int(agg["n"]), candidates, applied, rejected, max_ms)


def _append_replay(uri: str, plan: _Replay, block: SchemaBlock, reason: str) -> int:
    assert plan.rows is not None
    previous = delta.transaction_version(uri, RESOLVE_APP_ID)
    previous_max = last_max_event_time(uri)
    max_ts = max((v for v in (previous_max, plan.max_event_time_ms) if v is not None), default="")
    result = delta.append(
        plan.rows,
        uri,
        txn=(RESOLVE_APP_ID, 0 if previous is None else previous + 1),
        metadata={
            # unchanged: while blocked it is the block's; the ingest's next batch moves it on
            META_WATERMARK: max(last_watermark(uri), block.watermark_ms),
            META_MAX_EVENT_TIME: max_ts,
            META_ROWS: plan.count,
            META_SCHEMA_RESOLVED: {
                "reason": reason,
                "replayed": plan.count,
                "stillIncompatible": plan.rejected,
                "column": block.column,
                "sinceVersion": block.since_version,
            },
        },
        schema_mode="widen",
        max_files=2,
    )
    plan.rows.unpersist()
    return result.version
