"""The bridge to delta-spark's JVM classes that its Python API does not expose.

delta-spark's Python API (``delta.tables.DeltaTable``) writes, reads and shows history, but a
micro-batch needs more from one look at a table: its version, properties, protocol, the
application transactions it records and the metadata of its last commits. The Python API gets
the last of these with a Spark job (``DeltaTable.history`` reads the commit files in a job), and
has no call for app transactions at all. This module asks the engine's own ``DeltaLog`` for
them on the driver:

* :func:`latest` — ``DeltaLog.update()``: one listing of ``_delta_log`` (and the new commit
  files), the snapshot every later call of the batch reuses;
* :func:`describe` — the snapshot's version, ``metaData`` action and listed commit files, in
  one call;
* :func:`commit_lines` — the JSON lines of one commit file, read through the table's
  ``LogStore`` (the engine's own reader, so object stores and staged commits work as they
  do for Delta);
* :func:`transactions` — ``Snapshot.transactions``: Delta rebuilds the table state for it
  (small Spark jobs over the log), asked only when no recent commit set the application id;
* :func:`stage_on` and :func:`commit_on` — Delta's own ``WriteIntoDelta`` on a transaction
  started from the batch's snapshot, without its application-transaction look-up, its files
  written first and its commit made later (:func:`write_on`: both at once), optionally
  without Delta's checkpoint hook (:mod:`lakehouse.delta.checkpointer` writes it).

The calls are to classes of delta-spark 4.x (``org.apache.spark.sql.delta.DeltaLog``,
``Snapshot``) pinned in ``jvm/spark/pom.xml``; tests/integration/test_delta.py exercises each
one, so a delta-spark upgrade that moves them fails there first.
"""

from __future__ import annotations

import functools
import json
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: How often each table's log was read (``DeltaLog.update``) by this process, by URI: the
#: per-batch cost figure tests and benchmarks check.
LOG_READS: Counter[str] = Counter()
_lock = threading.Lock()


#: The JVM classes this module calls, per gateway (a stopped and restarted SparkContext has a
#: new one), each made once. Looked up through ``spark._jvm.org.apache...``, py4j resolves one
#: dotted name at a time: a round trip each, in which the JVM first tries ``Class.forName`` on
#: the prefix ("org", "org.apache", ...) and searches every jar of the class path before it
#: gives up. That was 7 misses per ``DeltaLog`` lookup, several per batch per table: about
#: 1.5% of a row-time join's driver CPU, sampled with Java Flight Recorder.
_CLASSES: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def _class(spark: SparkSession, fqn: str) -> Any:
    """The JVM class ``fqn`` (a py4j ``JavaClass``: call its static methods, or call it to
    construct one), without a lookup of its package, and each of its static methods looked up
    once (:func:`_class_type`)."""
    gateway: Any = spark.sparkContext._gateway
    with _lock:
        classes = _CLASSES.setdefault(gateway, {})
        cls = classes.get(fqn)
        if cls is None:
            cls = classes[fqn] = _class_type()(fqn, gateway._gateway_client)
    return cls


@functools.cache
def _class_type() -> type:
    """A py4j ``JavaClass`` that keeps each static method it was asked for: py4j asks the JVM
    what a class's member is at every access, a round trip in which the JVM lists the class's
    methods by reflection. Of its static fields only a Scala object's ``MODULE$`` is kept (the
    object itself); another field is asked each time, as its value may change."""
    from py4j.java_gateway import JavaClass, JavaMember

    class KeptMembers(JavaClass):
        def __getattr__(self, name: str) -> Any:
            member = super().__getattr__(name)
            if isinstance(member, JavaMember) or name == "MODULE$":
                self.__dict__[name] = member  # found before __getattr__ from now on
            return member

    return KeptMembers


def _none(spark: SparkSession) -> Any:
    """Scala's ``None`` (an immutable singleton: asked once per gateway)."""
    return getattr(_class(spark, "scala.None$"), "MODULE$")


def delta_log(spark: SparkSession, uri: str) -> Any:
    """The engine's (cached, per-path) ``DeltaLog`` of the table at ``uri``."""
    return _class(spark, "org.apache.spark.sql.delta.DeltaLog").forTable(
        spark._jsparkSession,
        uri,
    )


def latest(spark: SparkSession, log: Any, uri: str) -> Any:
    """The table's latest snapshot (``DeltaLog.update``); counted in :data:`LOG_READS`."""
    with _lock:
        LOG_READS[uri] += 1
    return log.update(False, _none(spark), _none(spark))


def installed(log: Any) -> Any:
    """The snapshot the log holds now, without looking at storage: after this process's own
    commit, the snapshot of that commit (Delta installs it)."""
    return log.unsafeVolatileSnapshot()


def snapshot_at(spark: SparkSession, log: Any, version: int) -> Any:
    """The snapshot of ``version`` (``DeltaLog.getSnapshotAt``)."""
    from py4j.protocol import Py4JError, Py4JJavaError

    try:
        return log.getSnapshotAt(version, _none(spark), _none(spark), False)
    except Py4JError as e:
        # only py4j's own "Method ... does not exist" (a Java exception is Delta's answer)
        if isinstance(e, Py4JJavaError) or "does not exist" not in str(e):
            raise
        # delta-spark 4.0 (Spark 4.0): (version, checkpoint hint, catalog table), no flag
        return log.getSnapshotAt(version, _none(spark), _none(spark))


@dataclass(frozen=True, slots=True)
class SnapshotFacts:
    """What a look at a table reads of its snapshot, in one call (:func:`describe`)."""

    version: int
    #: the table's ``_delta_log``
    log_path: str
    #: the ``metaData`` action as the log writes it (id, schema string, properties, ...);
    #: empty before the table's first commit
    metadata: Mapping[str, Any]
    #: each commit file the snapshot's log segment lists (the commits since its checkpoint,
    #: staged ones included): version -> (length, modification time)
    commits: Mapping[int, tuple[int, int]]


def describe(spark: SparkSession, snapshot: Any) -> SnapshotFacts:
    """The snapshot's version, log location, ``metaData`` action and listed commit files,
    in one py4j call (``dev.lakehouse.log.SnapshotLook``), where walking Delta's Scala objects
    costs one per method and a JVM object to release per result."""
    facts = json.loads(str(_class(spark, "dev.lakehouse.log.SnapshotLook").describe(snapshot)))
    return SnapshotFacts(
        version=int(facts["version"]),
        log_path=str(facts["logPath"]),
        metadata=facts["metaData"] or {},
        commits={int(v): (int(n), int(t)) for v, n, t in facts["commits"]},
    )


def commit_lines(spark: SparkSession, log: Any, version: int, snapshot: Any | None) -> list[str]:
    """The JSON lines of the commit that created ``version`` ([] when the log no longer has
    it), read through the table's ``LogStore`` (the engine's own reader, so object stores and
    staged commits work as they do for Delta): the file ``snapshot``'s log segment lists for
    it, or else the backfilled ``_delta_log/<version>.json``. One py4j call."""
    text = _class(spark, "dev.lakehouse.log.SnapshotLook").read(log, snapshot, version)
    return str(text).split("\n") if text else []


def transactions(snapshot: Any) -> dict[str, int]:
    """Application id -> last recorded version (Delta's ``SetTransaction`` actions)."""
    jmap = snapshot.transactions()
    out: dict[str, int] = {}
    it = jmap.iterator()
    while it.hasNext():
        pair = it.next()
        out[str(pair._1())] = int(pair._2())
    return out


def metadata(snapshot: Any) -> dict[str, Any]:
    """The snapshot's ``metaData`` action as Delta writes it to the log (its id, schema string,
    properties, ...): two calls over py4j, where walking the Scala objects costs one per
    field, three per property (a table's snapshot is looked at several times a batch)."""
    action: dict[str, Any] = json.loads(str(snapshot.metadata().json()))["metaData"]
    return action


def properties(snapshot: Any) -> dict[str, str]:
    """The table properties (``Metadata.configuration``) of the snapshot."""
    return properties_of(metadata(snapshot))


def properties_of(action: Mapping[str, Any]) -> dict[str, str]:
    """The table properties of a ``metaData`` action (:func:`metadata`)."""
    return {str(k): str(v) for k, v in (action.get("configuration") or {}).items()}


def schema_json(snapshot: Any) -> str:
    """The table schema (Spark's JSON form) of the snapshot."""
    return str(snapshot.schema().json())


def reader_features(snapshot: Any) -> tuple[int, list[str]]:
    """``(minReaderVersion, readerFeatures)`` of the snapshot's protocol."""
    protocol = snapshot.protocol()
    names = protocol.readerFeatureNames()
    it = names.iterator()
    features: list[str] = []
    while it.hasNext():
        features.append(str(it.next()))
    return int(protocol.minReaderVersion()), sorted(features)


class Unsupported(Exception):
    """This delta-spark lacks one of the classes or constructors :func:`write_on` calls."""


@dataclass(frozen=True, slots=True)
class Staged:
    """A write whose data files are written and whose commit is not (:func:`stage_on`):
    the transaction, Delta's commit actions and what the commit's operation needs."""

    spark: SparkSession
    txn: Any
    actions: Any
    tags: Any
    #: the commit's ``WRITE`` operation, without ``userMetadata`` (:func:`commit_on` sets it)
    operation: Any

    def paths(self) -> list[str]:
        """The data files written (their paths relative to the table), uncommitted."""
        out = []
        it = self.actions.iterator()
        while it.hasNext():
            action = it.next()
            if action.getClass().getSimpleName() == "AddFile":
                out.append(str(action.path()))
        return out


def stage_on(
    spark: SparkSession,
    log: Any,
    jsnapshot: Any,
    jdf: Any,
    *,
    mode: str,
    options: dict[str, str],
    replacing: Sequence[str] | None = None,
    properties: Mapping[str, str] | None = None,
) -> Staged:
    """Write ``jdf``'s data files as ``DataFrameWriter.save`` does (``WriteIntoDelta``, the
    same options), on a transaction started from ``jsnapshot``, and stop before the commit:
    :func:`commit_on` commits them, with the commit's ``userMetadata`` decided only then
    (from what the write observed, say). Until then nothing reads the files; a process that
    stops in between leaves them unreferenced, for ``VACUUM``.

    The transaction does not ask Delta whether ``txnAppId`` is already recorded. Delta answers
    that with ``Snapshot.transactions``, a rebuild of the table's state (a Spark job over its
    checkpoint and log) in every write, which the caller has already answered from the
    commits of the same snapshot (:meth:`TableSnapshot.records`). The transaction still
    records ``txnAppId`` as read, so a commit of the same application id after ``jsnapshot``
    (a second copy of the pipeline) fails this one with Delta's
    ``ConcurrentTransactionException``, as the writer's own check does; and its commit
    carries the ``SetTransaction`` the option asks for, as the writer's does.

    ``replacing``: for an overwrite, the ``add`` actions (JSON lines) of every file of the
    table at ``jsnapshot``, when the caller knows them from the table's commits
    (:meth:`TableSnapshot.live_adds`). Delta's overwrite lists them with a rebuild of the
    table's state; here the new files are written as an append's are and the commit removes
    those, as Delta's would (the whole table counted as read, so that a concurrent append
    conflicts; the removed files' count and size in the commit's metrics).

    Raises:
        Unsupported: before anything is written, when this delta-spark lacks one of the
            internals (another release, a vendor's runtime); the caller writes through
            ``DataFrameWriter`` instead.
    """
    from py4j.protocol import Py4JError, Py4JJavaError

    delta = "org.apache.spark.sql.delta"
    session = spark._jsparkSession
    try:
        none = _none(spark)
        nil = getattr(_class(spark, "scala.collection.immutable.Nil$"), "MODULE$")
        conf = _class(spark, "scala.collection.immutable.HashMap")()
        for key, value in options.items():
            if key != "userMetadata":  # the commit's, given to commit_on
                conf = conf.updated(key, value)
        modes = _class(spark, "org.apache.spark.sql.SaveMode")
        save_mode = getattr(modes, mode.capitalize())
        # an overwrite of known files writes as an append does (no listing of the table)
        known = mode == "overwrite" and replacing is not None
        write_mode = modes.Append if known else save_mode
        some = _class(spark, "scala.Option").apply
        delta_options = _class(spark, f"{delta}.DeltaOptions")(conf, session.sessionState().conf())
        configuration = _class(spark, "scala.collection.immutable.HashMap")()
        for key, value in (properties or {}).items():
            configuration = configuration.updated(key, value)
        command_class = _class(spark, f"{delta}.commands.WriteIntoDelta")
        merge = some(True) if options.get("mergeSchema") == "true" else none
        try:  # delta-spark 4.4 (pinned in jvm/spark)
            command = command_class(
                log, write_mode, delta_options, nil, configuration, jdf, none, none, False
            )
        except Py4JError as e:  # delta-spark 4.0 (jvm/spark-4.0): fewer arguments
            if isinstance(e, Py4JJavaError):
                raise
            command = command_class(
                log, write_mode, delta_options, nil, configuration, jdf, none, none
            )
        operation = _write_operation(spark, save_mode, merge)

        active = getattr(_class(spark, f"{delta}.OptimisticTransaction$"), "MODULE$")
        removes = _removes(spark, replacing) if known and replacing is not None else None
        txn = log.startTransaction(none, some(jsnapshot))
        if removes is not None:
            txn.readWholeTable()
    except Py4JError as e:
        if isinstance(e, Py4JJavaError):
            raise
        raise Unsupported(str(e).splitlines()[0]) from e
    active.setActive(txn)
    try:
        data = command.writeAndReturnCommitData(txn, session, none, False)
    finally:
        active.clearActive()
    app_id = options.get("txnAppId")
    if app_id is not None:
        txn.readTxn().addOne(app_id)
    actions = data.actions()
    if removes is not None:
        jremoves, count, size = removes
        actions = actions.appendedAll(jremoves)
        metrics = _class(spark, "org.apache.spark.sql.execution.metric.SQLMetrics")
        registered = _class(spark, "scala.collection.immutable.HashMap")()
        removed: dict[str, tuple[str, int]] = {
            "numRemovedFiles": ("number of files removed", count),
            "numRemovedBytes": ("number of bytes removed", size),
        }
        for name, (description, amount) in removed.items():
            metric = metrics.createMetric(session.sparkContext(), description)
            metric.set(amount)
            registered = registered.updated(name, metric)
        txn.registerSQLMetrics(session, registered)
    return Staged(
        spark=spark, txn=txn, actions=actions, tags=data.stringTags(), operation=operation
    )


def _removes(spark: SparkSession, adds: Sequence[str]) -> tuple[Any, int, int]:
    """Delta's ``RemoveFile`` actions of the files ``adds`` (``add`` JSON lines) added, as an
    overwrite removes them (now, as a data change), with their count and total size."""

    action = getattr(_class(spark, "org.apache.spark.sql.delta.actions.Action$"), "MODULE$")
    now = int(time.time() * 1000)
    out = _class(spark, "java.util.ArrayList")()
    size = 0
    for line in adds:
        out.add(action.fromJson(line).removeWithTimestamp(now, True))
        size += int(json.loads(line)["add"].get("size", 0))
    converters = _class(spark, "scala.jdk.javaapi.CollectionConverters")
    return converters.asScala(out).toSeq(), len(adds), size


@dataclass(frozen=True, slots=True)
class Committed:
    """What :func:`commit_on` committed: the version (None: nothing to commit), and that
    version again when it is due for a checkpoint the caller writes (None: not due, or Delta
    wrote its own)."""

    version: int | None
    due: int | None = None


def commit_on(
    staged: Staged,
    user_metadata: str | None,
    *,
    before_commit: Callable[[], None] = lambda: None,
    defer_checkpoint: bool = False,
) -> Committed:
    """Commit what :func:`stage_on` wrote, with Delta's ``WRITE`` operation and
    ``user_metadata`` as the commit's ``userMetadata``, after Delta's conflict check against
    every commit since the staged transaction's snapshot. ``before_commit`` runs first (a
    failpoint). The commit is one py4j call (``dev.lakehouse.write.StagedCommit``).

    ``defer_checkpoint``: the commit runs Delta's post-commit hooks except its checkpoint, and
    says when the committed version is due for one (a multiple of the table's
    ``delta.checkpointInterval``), for the caller to write later
    (:mod:`lakehouse.delta.checkpointer`). Never due when Delta wrote its own checkpoint (not
    deferred, or this delta-spark's hooks are not where this looks)."""
    before_commit()
    commit = _class(staged.spark, "dev.lakehouse.write.StagedCommit").commit
    answer = str(
        commit(
            staged.txn,
            staged.actions,
            staged.operation,
            user_metadata,
            staged.tags,
            defer_checkpoint,
        )
    )
    version, due = (int(part) for part in answer.split())
    if version < 0:
        return Committed(None)
    return Committed(version, version if due else None)


def write_on(
    spark: SparkSession,
    log: Any,
    jsnapshot: Any,
    jdf: Any,
    *,
    mode: str,
    options: dict[str, str],
    replacing: Sequence[str] | None = None,
    before_commit: Callable[[], None] = lambda: None,
    defer_checkpoint: bool = False,
) -> Committed:
    """:func:`stage_on`, then :func:`commit_on` with the ``userMetadata`` option: what
    ``DataFrameWriter.save`` does with these options, without Delta's own look-up of
    ``txnAppId``. ``before_commit`` runs after the data files are written, before the commit.
    Returns what :func:`commit_on` returns.

    Raises:
        Unsupported: as :func:`stage_on`.
    """
    staged = stage_on(spark, log, jsnapshot, jdf, mode=mode, options=options, replacing=replacing)
    return commit_on(
        staged,
        options.get("userMetadata"),
        before_commit=before_commit,
        defer_checkpoint=defer_checkpoint,
    )


@dataclass(frozen=True, slots=True)
class TableRows:
    """One table's share of :func:`stage_tables`: its log and the snapshot the batch read, the
    type of its rows (the JVM ``StructType`` of its column of the input, the table's schema),
    the idempotent transaction the commit records, and the ordinal of the event-time field
    whose largest value is wanted (-1: none)."""

    log: Any
    jsnapshot: Any
    schema: Any
    app_id: str
    version: int
    event_time: int
    #: what the table's writer is made from (:func:`_writer`): its location, Delta's id of
    #: it, the rows' type and its ``delta.*`` properties; None: made for this write alone
    writer_key: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class StagedRows:
    """What :func:`stage_tables` wrote of one table: its staged commit and its rows' count and
    largest event time (epoch milliseconds, Spark's ``unix_millis``; None without rows)."""

    staged: Staged
    count: int
    max_event_time_ms: int | None


def _write_operation(spark: SparkSession, save_mode: Any, merge: Any) -> Any:
    """Delta's ``WRITE`` operation of an append or overwrite (``save_mode``), without
    ``userMetadata`` (:func:`commit_on` sets the commit's): made now, so that a commit cannot
    meet a signature this delta-spark lacks."""
    from py4j.protocol import Py4JError, Py4JJavaError

    none = _none(spark)
    some = _class(spark, "scala.Option").apply
    nil = getattr(_class(spark, "scala.collection.immutable.Nil$"), "MODULE$")
    write_class = _class(spark, "org.apache.spark.sql.delta.DeltaOperations$Write")
    try:  # delta-spark 4.4 (pinned in jvm/spark)
        return write_class(save_mode, some(nil), none, none, none, none, merge, none, none)
    except Py4JError as e:  # delta-spark 4.0 (jvm/spark-4.0): fewer arguments
        if isinstance(e, Py4JJavaError):
            raise
        return write_class(save_mode, some(nil), none, none)


@dataclass(frozen=True, slots=True)
class _Writer:
    """What a table's writes are given while its metadata stays as it is (:func:`_writer`):
    the rows' type as Delta writes it, the data path, Delta's statistics tracker (None: it
    collects none), the Parquet writer factory and the Hadoop configuration the file format
    prepared it with."""

    schema: Any
    data_path: Any
    stats: Any | None
    factory: Any
    conf: Any


#: The writers made, per gateway and :attr:`TableRows.writer_key`. Delta plans a table's file
#: statistics (an expression analysed against the rows' attributes) and Spark's Parquet
#: format prepares its writer on every write; for a batch of a connector's many tables that
#: was most of what preparing their joint write cost, the same each batch.
_WRITERS: weakref.WeakKeyDictionary[Any, dict[tuple[str, ...], _Writer]] = (
    weakref.WeakKeyDictionary()
)
#: The writers kept per gateway, the oldest dropped first (a table whose metadata changed
#: leaves one behind). Each holds two copies of its table's Hadoop configuration (about a
#: thousand keys) in the driver's heap: a few hundred kilobytes.
_WRITERS_KEPT = 256


def _writer(spark: SparkSession, jdf: Any, table: TableRows) -> _Writer:
    """The table's :class:`_Writer` for a write of ``table``'s rows, made as Delta's
    ``TransactionalWrite.writeFiles`` makes its parts (on a transaction started from the
    batch's snapshot for the purpose, never committed), and kept for the next write of the
    same :attr:`TableRows.writer_key`.

    Each part is a function of the table's metadata (its schema and ``delta.*`` settings),
    the rows' type and the session's settings as they were when it was made: Delta's
    statistics tracker holds no state of a write but the statistics of its last job (which
    each job's ``processStats`` replaces), and the factory and configuration none. A table's
    writes are one at a time (one writer per table: the writer lease), so a kept tracker is
    never in two jobs at once."""
    gateway: Any = spark.sparkContext._gateway
    key = table.writer_key
    if key is not None:
        with _lock:
            kept = _WRITERS.get(gateway, {}).get(key)
        if kept is not None:
            return kept
    delta = "org.apache.spark.sql.delta"
    session = spark._jsparkSession
    log = table.log
    txn = log.startTransaction(_none(spark), _class(spark, "scala.Option").apply(table.jsnapshot))
    metadata = txn.metadata()
    # as Delta makes a write's output (makeOutputNullable)
    schema = _class(spark, f"{delta}.schema.SchemaUtils").typeAsNullable(table.schema)
    data_path = log.dataPath()
    attributes = _class(spark, "org.apache.spark.sql.catalyst.types.DataTypeUtils").toAttributes
    pair = txn.getOptionalStatsTrackerAndStatsCollection(
        attributes(schema), data_path, _class(spark, "org.apache.spark.sql.types.StructType")(), jdf
    )
    stats = pair._1()
    conf = session.sessionState().newHadoopConfWithOptions(
        metadata.configuration().concat(log.options())
    )
    job = _class(spark, "org.apache.hadoop.mapreduce.Job").getInstance(conf)
    _class(spark, "org.apache.hadoop.mapreduce.lib.output.FileOutputFormat").setOutputPath(
        job, data_path
    )
    options = _parquet_options(spark, metadata)
    factory = log.fileFormat(txn.protocol(), metadata).prepareWrite(session, job, options, schema)
    made = _Writer(
        schema, data_path, None if stats.isEmpty() else stats.get(), factory, job.getConfiguration()
    )
    if key is not None:
        with _lock:
            kept_here = _WRITERS.setdefault(gateway, {})
            kept_here[key] = made
            while len(kept_here) > _WRITERS_KEPT:
                del kept_here[next(iter(kept_here))]
    return made


def _prepare_outputs(
    spark: SparkSession, jdf: Any, tables: Sequence[TableRows | None], workers: int
) -> Any:
    """Each chosen table prepared for the joint write (``dev.lakehouse.write.JointTables``:
    what Delta's ``TransactionalWrite.writeFiles`` gives Spark's file writer for an append of
    rows of ``table.schema`` to the table, on a transaction started from its snapshot; one
    py4j call per table, its writer parts kept between batches by :func:`_writer`),
    ``workers`` at once. The outputs share one Hadoop configuration (the first table's), each
    carrying the keys where its own differs, and a statistics tracker's copy of a
    configuration equal to it is that one object: what the tasks read once, not once per
    table."""
    from concurrent.futures import ThreadPoolExecutor

    chosen = [(i, t) for i, t in enumerate(tables) if t is not None]
    shared = _class(spark, "org.apache.spark.util.SerializableConfiguration")(
        chosen[0][1].log.newDeltaHadoopConf()
    )
    joint = _class(spark, "dev.lakehouse.write.JointTables")(len(tables), shared)
    session = spark._jsparkSession

    def prepare(item: tuple[int, TableRows]) -> None:
        index, table = item
        writer = _writer(spark, jdf, table)
        joint.prepare(
            index,
            table.log,
            table.jsnapshot,
            session,
            writer.factory,
            writer.conf,
            writer.schema,
            writer.stats,
            writer.data_path,
            table.event_time,
        )

    if workers > 1 and len(chosen) > 1:
        with ThreadPoolExecutor(min(workers, len(chosen))) as pool:
            list(pool.map(prepare, chosen))
    else:
        for item in chosen:
            prepare(item)
    return joint


def _parquet_options(spark: SparkSession, metadata: Any) -> Any:
    """The Parquet writer options Delta's writer gives a table's files (the format version
    the table asks for); none where this delta-spark gives none (4.0)."""
    from py4j.protocol import Py4JError, Py4JJavaError

    empty = _class(spark, "scala.collection.immutable.HashMap")()
    versions = _class(spark, "org.apache.spark.sql.delta.util.TableParquetVersionOption")
    try:
        return versions.getWriterOptions(spark._jsparkSession, empty, metadata.configuration())
    except Py4JError as e:
        if isinstance(e, Py4JJavaError):
            raise
        return empty


def stage_tables(
    spark: SparkSession,
    jdf: Any,
    tables: Sequence[TableRows | None],
    *,
    max_files: int,
    workers: int = 1,
    interpreted: bool = False,
    summarise: bool = False,
) -> tuple[list[StagedRows | None], list[str]]:
    """Write every table's rows in one Spark job (lakehouse's ``MultiTableWrite``), each
    table's files as :func:`stage_on` writes an append's, and stop before the commits: per
    table, a transaction started from its snapshot, holding the files' ``add`` actions
    (Delta's Parquet writer, commit protocol and file statistics for that transaction) and
    the ``SetTransaction`` of ``(app_id, version)``, for :func:`commit_on`. At most
    ``max_files`` files per table.

    ``jdf``'s column ``i`` is table ``i``'s row (a struct) or null; a column whose table is
    None is not written (its result is None). ``workers``: tables whose writers are prepared
    at once (py4j calls, Delta's planning of each table's statistics). ``interpreted``: the
    job's tasks evaluate ``jdf``'s projection and the statistics trackers' interpreted, without
    generating their code (``MultiTableWrite.write``). ``summarise``: ``jdf`` has one more
    column, after the tables', a struct of ``dev.lakehouse.write.BatchSummary``'s fields, which
    each task aggregates; the second answer is the tasks' summaries as JSON (empty without).

    The caller has checked that each table takes its rows as they are: the rows' type is the
    table's schema, the table is not partitioned and has no column mapping, constraints,
    generated or identity columns, and Delta would not reshape the write (optimized writes,
    a file row limit). Delta's writer would change nothing of such an append but the job
    it runs.

    Raises:
        Unsupported: before anything is written, when this delta-spark or this Spark lacks one
            of the internals (the caller writes each table as :func:`stage_on` does).
    """
    from py4j.protocol import Py4JError, Py4JJavaError

    chosen = [(i, t) for i, t in enumerate(tables) if t is not None]
    try:
        joint = _prepare_outputs(spark, jdf, tables, workers)
        write = _class(spark, "dev.lakehouse.write.MultiTableWrite").write
        operation = _write_operation(
            spark, _class(spark, "org.apache.spark.sql.SaveMode").Append, _none(spark)
        )
        # Delta's auto-compaction hook, which the staged commits register (StagedActions)
        getattr(_class(spark, "org.apache.spark.sql.delta.hooks.AutoCompact$"), "MODULE$")
        query = jdf.queryExecution()
    except Py4JError as e:
        if isinstance(e, Py4JJavaError) and "ClassNotFound" not in str(e):
            raise
        raise Unsupported(str(e).splitlines()[0]) from e
    outcome = write(query, joint.outputs(), max_files, interpreted, summarise)
    written = json.loads(str(outcome.writtenJson()))
    tags = _class(spark, "scala.collection.immutable.HashMap")()
    now = int(time.time() * 1000)
    out: list[StagedRows | None] = [None] * len(tables)
    for i, table in chosen:
        # the actions as Delta's writer makes them, and the transaction readied for them
        actions = joint.actions(i, table.app_id, table.version, now)
        rows, biggest = written[i]
        out[i] = StagedRows(
            staged=Staged(
                spark=spark,
                txn=joint.txn(i),
                actions=actions,
                tags=tags,
                operation=operation,
            ),
            count=int(rows),
            max_event_time_ms=None if biggest is None else int(biggest),
        )
    return out, [str(text) for text in outcome.summaries()]
