"""Writing Delta tables: appends and overwrites with Delta's idempotent transaction options
``txnAppId``/``txnVersion`` (the documented ``foreachBatch`` idiom).

A write whose ``(app_id, version)`` the table already records at a version >= ``version`` is a
no-op. lakehouse looks first, on the same snapshot the write then uses, so a replay is reported
as skipped without starting a job; the write then commits on that snapshot without Delta asking
again (:func:`lakehouse.delta._engine.write_on`; a table's first write goes through
``DataFrameWriter``); an overwrite of a table whose commits name its files
(:meth:`TableSnapshot.live_adds`: a join's pending table) removes those without Delta listing
them. A second copy of the same pipeline racing this one loses with Delta's
``ConcurrentTransactionException`` and is reported as skipped too, never writing the batch
twice (tests/integration/test_writer_race.py). Appends compact a table's small files every
:data:`COMPACT_EVERY_VERSIONS` versions.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from lakehouse.delta import _engine, checkpointer
from lakehouse.delta.commits import WriteResult
from lakehouse.delta.ddl import (
    _quote,
    _sql_metadata,
    create_table,
    set_properties,
    widen_columns,
)
from lakehouse.delta.log import (
    META_REASON,
    Metadata,
    SchemaMode,
    TableSnapshot,
    _after_write,
    _first_line,
    _session,
    _user_metadata,
    snapshot,
)
from lakehouse.delta.schema import check_compatible, same_type
from lakehouse.delta.types import fits, widened
from lakehouse.errors import (
    ConcurrentCommitError,
    SchemaMismatchError,
)
from lakehouse.failpoints import failpoint

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger("lakehouse.delta")

#: The table property that makes Delta compact a table's small files after a write
#: (``spark.databricks.delta.autoCompact.minNumFiles``). Not set by default: Delta also runs
#: it right after any write of several small files, a commit and a job more per batch.
AUTO_COMPACT = "delta.autoOptimize.autoCompact"
#: Appends compact a table's small files (Delta's ``OPTIMIZE``: bin-packing, a commit of its
#: own that changes no rows) each time its version passes a multiple of this: a table a
#: micro-batch appends to every batch then reads a bounded number of live files, at the cost
#: of one ``OPTIMIZE`` job per this many versions. The Spark setting
#: :data:`COMPACT_EVERY_CONF` overrides it; 0 turns it off.
COMPACT_EVERY_VERSIONS = 100
COMPACT_EVERY_CONF = "spark.lakehouse.compactEveryVersions"
#: An idempotent write to an existing table commits on the batch's snapshot, whose commits
#: already told whether the table records the batch, instead of letting Delta's writer ask
#: again (a rebuild of the table's state, about 0.3 s a write): "false" turns that off.
DIRECT_WRITE_CONF = "spark.lakehouse.directWrite"
#: Appends of many tables staged together (:func:`stage_appends`) write all their files in one
#: Spark job: "false" writes each table's in a job of its own (:func:`stage_append`).
TABLES_TOGETHER_CONF = "spark.lakehouse.writeTablesTogether"
#: Table properties under which Delta's writer reshapes an append's files or checks its rows
#: (a staged-together append leaves such a table to it), by the value that turns them on.
_RESHAPING_PROPERTIES = {
    "delta.randomizeFilePrefixes": "true",
    "delta.autoOptimize.optimizeWrite": "true",
    "delta.enableIcebergCompatV1": "true",
    "delta.enableIcebergCompatV2": "true",
    "delta.enableIcebergCompatV3": "true",
    "delta.enableVariantShredding": "true",
}
#: How long :meth:`StagedAppend.metrics` waits for Spark to report a write's observed metrics
#: (its listener bus delivers them a moment after the job ends).
METRICS_WAIT_S = 30.0


def append(
    df: DataFrame,
    uri: str,
    *,
    txn: tuple[str, int] | None = None,
    metadata: Metadata = None,
    schema_mode: SchemaMode = "strict",
    max_files: int | None = None,
    snap: TableSnapshot | None = None,
    compact_every: int | None = None,
    properties: Mapping[str, str] | None = None,
) -> WriteResult:
    """Append a DataFrame to the table, creating the table when it does not exist.

    Args:
        df: the rows; its schema must match the table's (see ``schema_mode``).
        uri: table location.
        txn: ``(app_id, version)``, given to Delta as ``txnAppId``/``txnVersion``: the write
            is a **no-op when the table already records ``app_id`` at a version >=
            ``version``** (a replayed micro-batch). Without it, every call appends.
        metadata: ``lakehouse.*`` keys for the commit's ``userMetadata`` (values are
            stringified; non-strings as JSON). They appear in :func:`history`.
        schema_mode: ``"merge"`` adds the DataFrame's new columns to the table (older rows
            read NULL); ``"strict"`` refuses them; both refuse type changes. ``"widen"``
            merges, and meets a type change without loss: a column whose values fit the
            table's type is cast to it, a table column whose values fit the DataFrame's
            type is widened to it first (:func:`widen_columns`, a commit of its own).
        max_files: coalesce the DataFrame to at most this many files first (small batches
            otherwise leave one small file per Spark partition).
        snap: the batch's snapshot of the table, when it has one (saves a look at the log;
            its app transactions are the ones Delta's own check then uses).
        compact_every: when the commit takes the table's version past a multiple of this,
            its small files are compacted right after (:func:`compact_files`); 0: never;
            None: the session's :data:`COMPACT_EVERY_CONF`, else
            :data:`COMPACT_EVERY_VERSIONS`.
        properties: table properties the table must have (a table's kind): a table this
            append creates is created with them first (:func:`create_table`, a commit of its
            own without ``metadata``), and a table lacking one of them gets it before the data
            (a crash cut its creation). Keys the table has are never changed.

    Returns:
        What was written (the data commit, not a compaction's). An empty DataFrame still
        commits (recording the transaction and the metadata), so every batch leaves a trace
        in the history.

    Raises:
        SchemaMismatchError: see :func:`check_compatible`.
    """
    return _write(
        df,
        uri,
        mode="append",
        txn=txn,
        metadata=metadata,
        schema_mode=schema_mode,
        max_files=max_files,
        snap=snap,
        compact_every=compact_every,
        properties=properties,
    )


def overwrite(
    df: DataFrame,
    uri: str,
    *,
    txn: tuple[str, int] | None = None,
    metadata: Metadata = None,
    max_files: int | None = None,
    snap: TableSnapshot | None = None,
    properties: Mapping[str, str] | None = None,
) -> WriteResult:
    """Replace the table's rows with the DataFrame's, in one commit (older versions stay
    readable by time travel; properties and app transactions stay). Idempotence, metadata
    and ``properties`` as in :func:`append`."""
    return _write(
        df,
        uri,
        mode="overwrite",
        txn=txn,
        metadata=metadata,
        schema_mode="merge",
        max_files=max_files,
        snap=snap,
        properties=properties,
    )


def as_nullable(dtype: DataType) -> Any:
    """``dtype`` with every field, array element and map value nullable: the schema a Delta
    table gets when a DataFrame write creates it (Delta's ``asNullable``), so that a table
    created first (to give it properties) takes the rows a write-created one would.

    >>> from pyspark.sql.types import ArrayType, LongType, StructField, StructType
    >>> schema = StructType([StructField("a", ArrayType(LongType(), False), False)])
    >>> as_nullable(schema).simpleString(), as_nullable(schema)["a"].nullable
    ('struct<a:array<bigint>>', True)
    >>> as_nullable(schema)["a"].dataType.containsNull
    True
    """
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(dtype, StructType):
        return StructType(
            [StructField(f.name, as_nullable(f.dataType), True, f.metadata) for f in dtype.fields]
        )
    if isinstance(dtype, ArrayType):
        return ArrayType(as_nullable(dtype.elementType), True)
    if isinstance(dtype, MapType):
        return MapType(as_nullable(dtype.keyType), as_nullable(dtype.valueType), True)
    return dtype


def _write(
    df: DataFrame,
    uri: str,
    *,
    mode: Literal["append", "overwrite"],
    txn: tuple[str, int] | None,
    metadata: Metadata,
    schema_mode: SchemaMode,
    max_files: int | None,
    snap: TableSnapshot | None,
    compact_every: int | None = 0,
    properties: Mapping[str, str] | None = None,
) -> WriteResult:
    spark = df.sparkSession
    snap = snap if snap is not None else snapshot(uri, spark=spark)
    if properties and not snap.exists:
        create_table(uri, as_nullable(df.schema), properties=properties, exist_ok=True, spark=spark)
        snap = snapshot(uri, spark=spark)
    elif properties and not (txn is not None and snap.records(*txn)):
        missing = {k: v for k, v in properties.items() if k not in snap.properties}
        if missing:
            set_properties(uri, missing, spark=spark)
            snap = snapshot(uri, spark=spark)
    if snap.exists:
        if txn is not None and snap.records(*txn):
            return WriteResult(version=snap.version, skipped=True, rows=0)
        if schema_mode == "widen":
            read = snap.version
            df, snap = _meet_types(df, uri, snap)
            if snap.version != read:
                failpoint("widen.before_data", txn[1] if txn is not None else 0)
        check_compatible(
            uri, df.schema, allow_new_columns=schema_mode != "strict", existing=snap.schema
        )
    data = df.coalesce(max_files) if max_files else df
    options = _options(txn, schema_mode)
    text = _user_metadata(metadata)
    if text is not None:
        options["userMetadata"] = text
    try:
        if not (txn is not None and snap.exists and _write_on(data, snap, mode, options)):
            data.write.format("delta").mode(mode).options(**options).save(uri)
    except Exception as e:
        return _refused(e, spark, uri, txn)
    return _finish(spark, uri, snap, txn, mode=mode, compact_every=compact_every)


def _options(txn: tuple[str, int] | None, schema_mode: SchemaMode) -> dict[str, str]:
    """The writer options of an idempotent write in ``schema_mode`` (no ``userMetadata``)."""
    options: dict[str, str] = {}
    if txn is not None:
        options.update(txnAppId=txn[0], txnVersion=str(txn[1]))
    if schema_mode != "strict":
        options["mergeSchema"] = "true"
    return options


#: Delta's refusals of a commit after another writer's created the table or changed its
#: protocol or metadata (two writers creating a table at one location meet the first).
_TABLE_CHANGED = ("ProtocolChangedException", "MetadataChangedException")


def _refused(
    e: Exception, spark: SparkSession, uri: str, txn: tuple[str, int] | None
) -> WriteResult:
    """What a write that Delta refused with ``e`` means: the same batch committed by another
    copy of the pipeline first (skipped: written once), else a clear error."""
    name = _java_class(e)
    if txn is not None and "ConcurrentTransaction" in name:
        # another copy of this pipeline committed the same batch first: written once
        return WriteResult(version=_after_write(spark, uri).version, skipped=True, rows=0)
    changed = any(c in name for c in _TABLE_CHANGED)
    if changed and txn is not None:
        # another writer created the table (or changed its protocol or metadata) first: a
        # copy of this pipeline that did so with the same batch wrote it once
        _engine.latest(spark, _engine.delta_log(spark, uri), uri)  # Delta installs it
        now = _after_write(spark, uri)
        if now.records(*txn):
            return WriteResult(version=now.version, skipped=True, rows=0)
    if changed or "Concurrent" in name or "DELTA_CONCURRENT" in str(e):
        raise ConcurrentCommitError(
            f"Delta table '{uri}' changed while this write committed: {_first_line(e)}",
            table_uri=uri,
        ) from e
    if "DELTA_FAILED_TO_MERGE_FIELDS" in str(e) or "SCHEMA" in str(e).split("]")[0].upper():
        raise SchemaMismatchError(
            f"Delta table '{uri}' refused the data's schema: {_first_line(e)}",
            table_uri=uri,
        ) from e
    raise e


def _compact_every(spark: SparkSession) -> int:
    """The session's :data:`COMPACT_EVERY_CONF` (:data:`COMPACT_EVERY_VERSIONS` unset)."""
    return int(
        spark.conf.get(COMPACT_EVERY_CONF, str(COMPACT_EVERY_VERSIONS)) or COMPACT_EVERY_VERSIONS
    )


def _finish(
    spark: SparkSession,
    uri: str,
    snap: TableSnapshot,
    txn: tuple[str, int] | None,
    *,
    mode: str,
    compact_every: int | None,
) -> WriteResult:
    """After a commit on ``snap``: the table as the commit left it, its small files compacted
    when the commit crossed a multiple of ``compact_every``, and what was written."""
    after = _after_write(spark, uri, log=snap._log)
    info = after.commit(after.version)
    before = snap.version if snap.exists else -1
    if compact_every is None:
        compact_every = _compact_every(spark)
    if mode == "append" and _crossed(before, after.version, compact_every):
        try:
            compact_files(uri, spark=spark)
        except Exception as e:
            # maintenance after a committed write: a lost race with another writer of the
            # table (a shared dead-letter table) must not fail the batch; the next multiple
            # tries again
            log.warning("Delta table %s: compaction skipped: %s", uri, _first_line(e))
        failpoint("optimize.after_commit", txn[1] if txn is not None else 0)
    if txn is not None and (info is None or info.app_transactions.get(txn[0]) != txn[1]):
        # Delta skipped it: the transaction arrived in a commit after our snapshot
        for past in after.commits(max(after.version - snap.version, 1)):
            if past.app_transactions.get(txn[0]) == txn[1]:
                return WriteResult(version=past.version, skipped=False, rows=past.rows)
        return WriteResult(version=after.version, skipped=True, rows=0)
    return WriteResult(version=after.version, skipped=False, rows=info.rows if info else 0)


@dataclass(eq=False)
class StagedAppend:
    """An idempotent append whose data files are written and whose commit is not
    (:func:`stage_append`): commit it with the metadata decided from what it observed, or
    discard it. The commit is checked by Delta against every commit since the snapshot the
    files were written on, so staging changes nothing in the exactly-once argument: a batch
    that stops before its commit leaves files no version names, and its replay writes again.
    """

    uri: str
    txn: tuple[str, int]
    spark: SparkSession
    snap: TableSnapshot
    staged: _engine.Staged
    observation: Any | None
    compact_every: int | None = None
    #: the properties of the table the commit creates (None: it appends to an existing one)
    creates: Mapping[str, str] | None = None
    #: what the write itself counted, when it did (:func:`stage_appends`), by alias
    observed: Mapping[str, Any] | None = None
    #: whether the commit leaves its checkpoint to :mod:`.checkpointer` (None: the session's
    #: setting at the commit, :func:`checkpointer.deferred`)
    defer_checkpoint: bool | None = None

    def metrics(self, wait_s: float = METRICS_WAIT_S) -> dict[str, Any] | None:
        """The values of the ``observe`` expressions over the rows written, by alias. Spark
        reports them when the write's query ends, through its listener bus; None when it
        has not within ``wait_s`` seconds (a listener bus behind), or nothing was observed."""
        if self.observed is not None:
            return dict(self.observed)
        if self.observation is None:
            return None
        future = self.observation._jo.future()
        deadline = time.monotonic() + wait_s
        pause = 0.001
        while not future.isCompleted():
            if time.monotonic() > deadline:
                log.warning(
                    "Delta table %s: Spark did not report the write's observed metrics "
                    "within %.0f s; counting the rows again",
                    self.uri,
                    wait_s,
                )
                return None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return dict(self.observation.get)

    def commit(self, metadata: Metadata = None) -> WriteResult:
        """Commit the staged files with ``metadata`` (as :func:`append`'s), which Delta refuses
        when a commit since the snapshot conflicts (the same batch by another copy of the
        pipeline: reported as skipped)."""
        try:
            committed = _engine.commit_on(
                self.staged,
                _user_metadata(metadata),
                before_commit=lambda: failpoint("delta.before_commit", self.txn[1]),
                defer_checkpoint=(
                    checkpointer.deferred(self.spark)
                    if self.defer_checkpoint is None
                    else self.defer_checkpoint
                ),
            )
        except Exception as e:
            return _refused(e, self.spark, self.uri, self.txn)
        if committed.due is not None:
            checkpointer.schedule(
                self.spark, self.snap._log, self.uri, committed.due, batch_id=self.txn[1]
            )
        return _finish(
            self.spark,
            self.uri,
            self.snap,
            self.txn,
            mode="append",
            compact_every=self.compact_every,
        )

    def discard(self) -> None:
        """Delete the staged files (no version names them); the table is as before."""
        hadoop_path = _engine._class(self.spark, "org.apache.hadoop.fs.Path")
        uri = _engine._class(self.spark, "java.net.URI")
        base = self.snap._log.dataPath()
        fs = base.getFileSystem(self.spark._jsparkSession.sessionState().newHadoopConf())
        for relative in self.staged.paths():
            path = hadoop_path(uri(relative))
            fs.delete(path if path.isAbsolute() else hadoop_path(base, path), False)


def stage_append(
    df: DataFrame,
    uri: str,
    *,
    txn: tuple[str, int],
    schema_mode: SchemaMode = "strict",
    max_files: int | None = None,
    observe: Sequence[Column] = (),
    compact_every: int | None = None,
    create: Mapping[str, str] | None = None,
) -> StagedAppend | None:
    """Write the data files of :func:`append` ``(df, uri, txn=txn, ...)`` now and its commit
    later (:meth:`StagedAppend.commit`), when the commit's metadata depends on the rows:
    ``observe`` (aggregate expressions with aliases, as for ``DataFrame.observe``) is computed
    by the write itself, not by a Spark job of its own (:meth:`StagedAppend.metrics`).

    ``create``: where no table is at ``uri`` yet, the commit creates it, with ``df``'s columns
    and these properties, as its version 0: the table, its properties and its first rows
    appear in one commit, so no reader ever sees the table without its properties (a
    writer's lease beside the log is no obstacle, unlike to Delta's ``CREATE TABLE``).

    None, with nothing written, where :func:`append` would commit more than the data or
    would not write at all: the table does not exist (and ``create`` is None), it exists
    (and ``create`` is given), it records ``txn`` already, a ``"widen"`` needs a column
    widened first, the session turns direct writes off (:data:`DIRECT_WRITE_CONF`),
    delta-spark lacks the internals, or the process committed to the table after the
    batch's look at it. The caller then appends (or creates) as usual.

    Raises:
        SchemaMismatchError: as :func:`append`.
    """
    from pyspark.sql import Observation

    spark = df.sparkSession
    snap = snapshot(uri, spark=spark)
    if snap.exists == (create is not None) or not _direct_on(snap, spark):
        return None
    if snap.exists:
        if snap.records(*txn):
            return None
        if schema_mode == "widen":
            casts, wider = _type_changes(df, snap)
            if wider:
                return None
            df = _cast(df, casts)
        check_compatible(
            uri, df.schema, allow_new_columns=schema_mode != "strict", existing=snap.schema
        )
    observation = None
    if observe:
        observation = Observation()
        df = df.observe(observation, *observe)
    data = df.coalesce(max_files) if max_files else df
    try:
        staged = _engine.stage_on(
            spark,
            snap._log,
            snap._jsnapshot,
            data._jdf,
            mode="append",
            options=_options(txn, schema_mode),
            properties=create,
        )
    except _engine.Unsupported as e:
        _refuse_direct(str(e))
        return None
    except Exception as e:
        _refused(e, spark, uri, None)  # without a transaction to lose, it raises
        raise
    return StagedAppend(
        uri=uri,
        txn=txn,
        spark=spark,
        snap=snap,
        staged=staged,
        observation=observation,
        compact_every=compact_every,
        creates=None if create is None else dict(create),
    )


class JointWrite(NamedTuple):
    """What :func:`stage_appends` wrote: per table its staged append (None: not taken), and,
    when it summarised, the summaries of the job's tasks (JSON texts, one per task that read a
    record; None: not asked, or the job was not run)."""

    appends: list[StagedAppend | None]
    summaries: tuple[str, ...] | None


def stage_appends(
    df: DataFrame,
    uris: Sequence[str],
    *,
    txn: tuple[str, int],
    max_files: int,
    event_time: str,
    workers: int = 1,
    compact_every: int | None = None,
    row_count: int | None = None,
    summarise: bool = False,
) -> JointWrite:
    """:func:`stage_append` ``(rows, uri, txn=txn, max_files=max_files)`` of many tables, their
    files written by one Spark job (:func:`lakehouse.delta._engine.stage_tables`) instead of a
    job per table. ``df``'s column ``i`` holds table ``uris[i]``'s rows: a struct of the
    table's columns, or null where a record makes no row of that table. Each staged append's
    :meth:`StagedAppend.metrics` are ``n``, its row count, and ``m``, its largest
    ``event_time`` field (epoch milliseconds), counted by the write. ``workers``: tables whose
    writers are prepared at once. ``row_count``: how many rows ``df`` holds for all tables, when the
    caller knows; a write of at most :data:`INTERPRETED_ROWS_PER_TABLE` per table it takes is
    evaluated without generated code (:func:`lakehouse.delta._engine.stage_tables`).
    ``summarise``: ``df`` has one more column, after the tables', a struct of the fields of an
    ingest batch's summary (``dev.lakehouse.write.BatchSummary``, in every row), which each of
    the job's tasks aggregates over its rows (:attr:`JointWrite.summaries`).

    None, with nothing written, for a table that :func:`stage_append` would refuse, or that
    would not take the rows as they are (:func:`_takes_as_is`: a type to cast or widen, a
    partitioned table, ...), or for every table when the session turns this off
    (:data:`TABLES_TOGETHER_CONF`): the caller stages those one by one. The commits are each
    table's own, exactly as :func:`stage_append`'s: a batch that stops between the job and a
    commit leaves files that no version names, and its replay writes them again."""
    from pyspark.sql.types import StructType

    spark = df.sparkSession
    out: list[StagedAppend | None] = [None] * len(uris)
    if (
        not uris
        or _together_refused is not None
        or spark.conf.get(TABLES_TOGETHER_CONF, "true") != "true"
        or _session_reshapes(spark)
    ):
        return JointWrite(out, None)
    tables: list[_engine.TableRows | None] = []
    snaps: list[TableSnapshot | None] = []
    jfields = df._jdf.schema().fields()
    fields = df.schema.fields[:-1] if summarise else df.schema.fields
    for i, (field, uri) in enumerate(zip(fields, uris, strict=True)):
        snap = snapshot(uri, spark=spark)
        rows_type = field.dataType
        take = (
            isinstance(rows_type, StructType)
            and snap.exists
            and _direct_on(snap, spark)
            and not snap.records(*txn)
            and _takes_as_is(snap, rows_type)
        )
        names = rows_type.names if isinstance(rows_type, StructType) else []
        tables.append(
            _engine.TableRows(
                log=snap._log,
                jsnapshot=snap._jsnapshot,
                schema=jfields[i].dataType(),
                app_id=txn[0],
                version=txn[1],
                event_time=names.index(event_time) if event_time in names else -1,
                writer_key=(
                    uri,
                    snap.table_id,
                    rows_type.json(),
                    json.dumps(
                        sorted((k, v) for k, v in snap.properties.items() if k.startswith("delta."))
                    ),
                ),
            )
            if take
            else None
        )
        snaps.append(snap if take else None)
    if not any(t is not None for t in tables):
        return JointWrite(out, None)
    try:
        writing = sum(1 for t in tables if t is not None)
        written, summaries = _engine.stage_tables(
            spark,
            df._jdf,
            tables,
            max_files=max_files,
            workers=workers,
            interpreted=row_count is not None and row_count <= INTERPRETED_ROWS_PER_TABLE * writing,
            summarise=summarise,
        )
    except _engine.Unsupported as e:
        _refuse_together(str(e))
        return JointWrite(out, None)
    # the session's settings for every table's commit, read once
    every = _compact_every(spark) if compact_every is None else compact_every
    defer = checkpointer.deferred(spark)
    for i, (taken, rows) in enumerate(zip(snaps, written, strict=True)):
        if taken is not None and rows is not None:
            out[i] = StagedAppend(
                uri=taken.uri,
                txn=txn,
                spark=spark,
                snap=taken,
                staged=rows.staged,
                observation=None,
                compact_every=every,
                observed={"n": rows.count, "m": rows.max_event_time_ms},
                defer_checkpoint=defer,
            )
    return JointWrite(out, tuple(summaries) if summarise else None)


def _session_reshapes(spark: SparkSession) -> bool:
    """Whether the session asks Delta's writer to reshape a write's files: optimized writes,
    or a row limit per file (then no table takes rows as they are, :func:`_takes_as_is`)."""
    return spark.conf.get(
        "spark.databricks.delta.optimizeWrite.enabled", "false"
    ) == "true" or spark.conf.get("spark.sql.files.maxRecordsPerFile", "0") not in ("0", "")


def _takes_as_is(snap: TableSnapshot, schema: StructType) -> bool:
    """Whether Delta's writer would write rows of ``schema`` to the table without reshaping
    them or their files, in a session that does not ask for it (:func:`_session_reshapes`):
    the schema is the table's (nullable, as Delta makes a write's output), the table has no
    partition columns, column mapping, constraints, generated, identity or char/varchar
    columns, and it does not ask for optimized writes, random file prefixes, Iceberg
    compatibility, variant shredding or a row limit per file."""
    if as_nullable(schema) != snap.schema or snap.partition_columns:
        return False
    props = snap.properties
    if props.get("delta.columnMapping.mode", "none") != "none":
        return False
    if any(k.startswith("delta.constraints.") for k in props):
        return False
    if any(props.get(k, "").lower() == v for k, v in _RESHAPING_PROPERTIES.items()):
        return False
    return not any(
        key.startswith(("delta.", "__CHAR_VARCHAR")) or key == "CURRENT_DEFAULT"
        for field in snap.schema.fields
        for key in field.metadata
    )


#: A joint write of at most this many rows per table it writes evaluates its projections
#: interpreted (:func:`stage_appends`). Spark generates a projection's code in each task that
#: makes one, and the joint write makes one per table per task (Delta's statistics trackers) and
#: one for all its tables' rows; for tables of few rows that is most of the job, while
#: interpreted evaluation costs more per row.
INTERPRETED_ROWS_PER_TABLE = 1_000

#: Why this process's delta-spark or Spark cannot take :func:`stage_appends`' joint write
#: (None: not tried yet, or it can).
_together_refused: str | None = None


def _refuse_together(why: str) -> None:
    """This process cannot write many tables in one job: every later batch stages its tables
    one by one. The session's setting (:data:`TABLES_TOGETHER_CONF`) is the user's and stays
    as it is."""
    global _together_refused
    _together_refused = why
    log.info("delta: tables are staged one by one (%s)", why)


#: Why this process's delta-spark cannot take :func:`_write_on` (None: not tried yet, or it can).
_direct_refused: str | None = None


def _write_on(data: DataFrame, snap: TableSnapshot, mode: str, options: dict[str, str]) -> bool:
    """Write on the batch's snapshot without Delta's own look-up of ``txnAppId``
    (:func:`lakehouse.delta._engine.write_on`): the caller has found, on ``snap``, that the
    table does not record the transaction. False, with nothing written, when the session
    turns it off (:data:`DIRECT_WRITE_CONF`) or delta-spark lacks the internals it calls."""
    spark = data.sparkSession
    if not _direct_on(snap, spark):
        return False
    batch_id = int(options["txnVersion"])
    try:
        committed = _engine.write_on(
            spark,
            snap._log,
            snap._jsnapshot,
            data._jdf,
            mode=mode,
            options=options,
            # an overwrite of a table of full overwrites (a join's pending table): the files
            # it replaces are those the last one added, read from its commit, not listed
            replacing=snap.live_adds() if mode == "overwrite" else None,
            before_commit=lambda: failpoint("delta.before_commit", batch_id),
            defer_checkpoint=checkpointer.deferred(spark),
        )
    except _engine.Unsupported as e:
        _refuse_direct(str(e))
        return False
    if committed.due is not None:
        checkpointer.schedule(spark, snap._log, snap.uri, committed.due, batch_id=batch_id)
    return True


def _direct_on(snap: TableSnapshot, spark: SparkSession) -> bool:
    """Whether a write may commit directly on ``snap`` (:func:`_write_on`,
    :func:`stage_append`): the session allows it, this delta-spark has the internals, and
    ``snap`` is still the version the process installed. A table the process committed to
    after this look (another query of it) answered from an older snapshot, so Delta's writer
    asks on the latest."""
    if _direct_refused is not None or spark.conf.get(DIRECT_WRITE_CONF, "true") != "true":
        return False
    return int(_engine.installed(snap._log).version()) == snap.version


def _refuse_direct(why: str) -> None:
    """This process's delta-spark cannot write directly: every later write goes through
    ``DataFrameWriter``."""
    global _direct_refused
    _direct_refused = why
    log.info("delta: writes ask Delta for their transaction (%s)", why)


def _crossed(before: int, after: int, every: int) -> bool:
    """Whether versions ``before`` -> ``after`` passed a multiple of ``every`` (0: never).

    A new table (``before`` -1) has crossed nothing at its first commit.

    >>> _crossed(99, 100, 100), _crossed(100, 101, 100), _crossed(98, 103, 100)
    (True, False, True)
    >>> _crossed(-1, 0, 100), _crossed(-1, 1, 100)
    (False, False)
    """
    return every > 0 and after // every > max(before, 0) // every


def compact_files(uri: str, *, spark: SparkSession | None = None) -> int | None:
    """Compact the table's small files with Delta's ``OPTIMIZE`` (bin-packing into files of
    ``spark.databricks.delta.optimize.maxFileSize``): one commit that changes no rows, keeps
    properties and app transactions, and leaves the replaced files for vacuum. Returns its
    version, or None when there was nothing to compact (Delta then commits nothing)."""
    spark = _session(spark)
    before = snapshot(uri, spark=spark).require().version
    with _sql_metadata(spark, {META_REASON: "compacted small files"}):
        spark.sql(f"OPTIMIZE {_quote(uri)}")
    after = _after_write(spark, uri).version
    return after if after > before else None


def _type_changes(
    df: DataFrame, snap: TableSnapshot
) -> tuple[dict[str, DataType], dict[str, DataType]]:
    """The ``"widen"`` schema mode's two kinds of type change: the data's columns whose values
    fit the table's type (cast to it), and the table's columns whose values fit the data's
    type (widened to it). A column that is neither is left for :func:`check_compatible`."""
    table = {f.name: f.dataType for f in snap.schema.fields}
    casts: dict[str, DataType] = {}
    wider: dict[str, DataType] = {}
    for f in df.schema.fields:
        have = table.get(f.name)
        if have is None or same_type(have, f.dataType):
            continue
        if fits(f.dataType, have):
            casts[f.name] = have
        elif widened(have, f.dataType) == f.dataType:
            wider[f.name] = f.dataType
    return casts, wider


def _cast(df: DataFrame, casts: Mapping[str, DataType]) -> DataFrame:
    from pyspark.sql import functions as F

    if not casts:
        return df
    return df.select(
        *[F.col(c).cast(casts[c]).alias(c) if c in casts else F.col(c) for c in df.columns]
    )


def _meet_types(df: DataFrame, uri: str, snap: TableSnapshot) -> tuple[DataFrame, TableSnapshot]:
    """The ``"widen"`` schema mode of :func:`append`: cast what fits the table, widen the
    table where the data is wider, refuse the rest (:func:`check_compatible` then names it)."""
    casts, wider = _type_changes(df, snap)
    df = _cast(df, casts)
    if wider:
        table = {f.name: f.dataType for f in snap.schema.fields}
        changes = ", ".join(
            f"{c} {table[c].simpleString()} -> {t.simpleString()}" for c, t in wider.items()
        )
        log.warning("Delta table %s: widening %s (one rewrite of the table)", uri, changes)
        # not the data commit's metadata: a batch's keys belong to its data commit alone
        widen_columns(
            uri,
            wider,
            metadata={META_REASON: f"columns widened: {changes}"},
            spark=df.sparkSession,
        )
        snap = snapshot(uri, spark=df.sparkSession)
    return df, snap


def _java_class(e: BaseException) -> str:
    """The Java exception class behind a py4j / pyspark error ('' when there is none)."""
    java = getattr(e, "java_exception", None)
    if java is None:
        return type(e).__name__
    try:
        names = [str(java.getClass().getName())]
        cause = java.getCause()
        while cause is not None and len(names) < 5:
            names.append(str(cause.getClass().getName()))
            cause = cause.getCause()
        return " ".join(names)
    except Exception:
        return type(e).__name__
