"""Delta tables through delta-spark, the engine lakehouse's users run.

Every table a pipeline reads or writes goes through this module, and this module through
delta-spark only (Databricks runs the same engine; Unity Catalog accepts commits from it):

* **Writes** are DataFrame writes (``format("delta")``) with Delta's own idempotent
  transaction options ``txnAppId``/``txnVersion`` (the documented ``foreachBatch`` idiom):
  a write whose ``(app_id, version)`` the table already records at a version >= ``version``
  is a no-op. lakehouse looks first, on the same snapshot the write then uses, so a replay
  is reported as skipped without starting a job; a second copy of the same pipeline racing
  this one loses with Delta's ``ConcurrentTransactionException`` and is reported as skipped
  too, never writing the batch twice (tests/integration/test_writer_race.py).
* **Commit metadata** is Delta's ``userMetadata``: a JSON object of ``lakehouse.*`` keys.
* **Properties** are set with ``ALTER TABLE delta.`uri` SET TBLPROPERTIES``.
* **Reads** pin a version with ``versionAsOf``.
* **One look per batch.** :func:`snapshot` reads a table's log once and returns a
  :class:`TableSnapshot` (version, properties, schema, protocol, its last commits' metadata
  and, on demand, its app transactions) that the batch decides from.

Delta itself refuses to read a table whose protocol it cannot honour; the few places that
read a pinned version's parquet files directly (the row-time join's caches) do so only when
:meth:`TableSnapshot.readable_by_files` says the files alone are the table.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import json
import logging
import os
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from lakehouse.delta import _engine
from lakehouse.errors import (
    ConcurrentCommitError,
    SchemaMismatchError,
    TableNotFoundError,
    UnsupportedTableError,
)
from lakehouse.failpoints import failpoint

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

#: Prefix of every key lakehouse writes into table properties and commit metadata.
NAMESPACE = "lakehouse."
#: Commit metadata: why a commit that is not a batch's was made (the history shows it).
META_REASON = NAMESPACE + "reason"
#: Commit metadata: the maintenance operation of a commit (``compact``, ``vacuum``).
META_OPERATION = NAMESPACE + "operation"

log = logging.getLogger("lakehouse.delta")

#: How a write treats columns the table lacks and types that differ (see :func:`append`).
SchemaMode = Literal["strict", "merge", "widen"]

#: Commit metadata: ``lakehouse.*`` keys; values are stringified (non-strings as JSON).
Metadata = Mapping[str, Any] | None

#: Reader features under which a version's parquet files, read with the table schema, are
#: exactly its rows. Others change what the files mean: deletion vectors hide rows the files
#: still hold, column mapping renames the files' physical columns, type widening leaves older
#: files with narrower types. See https://github.com/delta-io/delta/blob/master/PROTOCOL.md
FILE_READABLE_FEATURES = frozenset(
    {"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck", "checkpointProtection"}
)

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
#: Session setting through which Delta takes ``userMetadata`` for SQL commands.
_USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
#: Parsed commits by (log path, table id, version, file length, file time), newest kept: a
#: micro-batch looks at its tables' recent commits, and each is read from storage once per
#: process, not once per batch. A commit file is written once (Delta's put-if-absent), a table
#: created again in the same place gets a new id, and a commit written again after a repair is
#: another file (the newest commits are listed with their length and time), so an entry never
#: goes stale. Only the ``commitInfo`` and ``txn`` actions are kept (:class:`CommitInfo`), a few
#: hundred bytes each.
_PARSED_COMMITS: collections.OrderedDict[tuple[str, str, int, int, int], CommitInfo] = (
    collections.OrderedDict()
)
_MAX_PARSED_COMMITS = 4096
_parsed_lock = threading.Lock()  # foreachBatch handlers of several queries share it

#: SQL commands that carry commit metadata set it on the session: one at a time.
_sql_lock = threading.Lock()


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitInfo:
    """One commit of a table's history.

    Attributes:
        version: the table version the commit created.
        timestamp_ms: commit time, epoch milliseconds.
        operation: Delta's operation name (``WRITE``, ``SET TBLPROPERTIES``, ...).
        metadata: the ``lakehouse.*`` keys of the commit's ``userMetadata``, values as written.
        app_transactions: the ``(app_id -> version)`` transactions the commit recorded.
        rows: rows the commit wrote (``numOutputRows``), 0 when it wrote none.
    """

    version: int
    timestamp_ms: int
    operation: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    app_transactions: Mapping[str, int] = field(default_factory=dict)
    rows: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteResult:
    """What a write did.

    Attributes:
        version: the table version it created; the version already there when skipped.
        skipped: True when the table already held the transaction (a replayed batch).
        rows: rows written (0 when skipped).
    """

    version: int
    skipped: bool
    rows: int


class TableSnapshot:
    """One look at a table's log: everything a micro-batch decides from, read once.

    Built by :func:`snapshot`. The version, properties, schema and protocol come with it; the
    metadata of recent commits (:meth:`commits`) and the app transactions
    (:meth:`transaction_version`) are read the first time they are asked for and kept. A
    snapshot never changes: a batch that wrote the table takes a new one to see its write.

    Attributes:
        uri: the table location.
        exists: False when no Delta table is at ``uri`` (then ``version`` is -1).
        version: the latest version at the time of the look.
        properties: table properties (``delta.*`` and ``lakehouse.*``).
    """

    def __init__(
        self,
        spark: SparkSession,
        uri: str,
        *,
        log: Any | None = None,
        jsnapshot: Any | None = None,
    ) -> None:
        self.spark = spark
        self.uri = uri
        self._log = log
        self._jsnapshot = jsnapshot
        self.exists = jsnapshot is not None and int(jsnapshot.version()) >= 0
        self.version = int(jsnapshot.version()) if self.exists else -1
        self.properties: Mapping[str, str] = _engine.properties(jsnapshot) if self.exists else {}
        self._schema: StructType | None = None
        self._commits: dict[int, CommitInfo | None] = {}
        self._files: dict[int, Any] | None = None
        self._txns: dict[str, int] | None = None
        self._log_key: tuple[str, str] | None = None  # (log path, table id), asked once

    def __repr__(self) -> str:
        return f"TableSnapshot({self.uri!r}, version={self.version})"

    @property
    def table_id(self) -> str:
        """Delta's id of the table (a table deleted and created again gets a new one)."""
        return str(self._jsnapshot.metadata().id()) if self.exists else ""

    @property
    def schema(self) -> StructType:
        """The table schema (empty when there is no table)."""
        from pyspark.sql.types import StructType

        if self._schema is None:
            self._schema = (
                StructType.fromJson(json.loads(_engine.schema_json(self._jsnapshot)))
                if self.exists
                else StructType([])
            )
        return self._schema

    def require(self) -> TableSnapshot:
        """Return self; raise :class:`TableNotFoundError` when there is no table."""
        if not self.exists:
            raise TableNotFoundError.at(self.uri)
        return self

    def commit(self, version: int) -> CommitInfo | None:
        """The commit that created ``version`` (None when the log no longer has it)."""
        if version < 0 or version > self.version:
            return None
        if version not in self._commits:
            # a version of a table is committed once: its parse is kept for the process
            if self._log_key is None:
                self._log_key = (str(self._log.logPath()), self.table_id)
            if self._files is None:
                self._files = _engine.commit_files(self._jsnapshot)
            status = self._files.get(version)
            # the file's length and time where the listing gave them: a torn newest commit
            # that `lakehouse repair` removed is written again, as another file
            stamp = (-1, -1) if status is None else _engine.file_stamp(status)
            known = (*self._log_key, version, *stamp)
            with _parsed_lock:
                found = _PARSED_COMMITS.get(known)
            if found is None:
                lines = _engine.commit_lines(self.spark, self._log, version, status)
                found = _parse_commit(version, lines) if lines else None
                if found is not None:
                    with _parsed_lock:
                        _PARSED_COMMITS[known] = found
                        while len(_PARSED_COMMITS) > _MAX_PARSED_COMMITS:
                            _PARSED_COMMITS.popitem(last=False)
            self._commits[version] = found
        return self._commits[version]

    def commits(self, limit: int) -> Iterator[CommitInfo]:
        """The last ``limit`` commits, newest first (fewer when the log holds fewer)."""
        for version in range(self.version, max(self.version - limit, -1), -1):
            info = self.commit(version)
            if info is not None:
                yield info

    def find(self, limit: int, **metadata: str) -> CommitInfo | None:
        """The newest of the last ``limit`` commits whose metadata has every given key/value,
        keys spelled without the ``lakehouse.`` prefix (``find(8, pipeline="p", batchId="3")``)."""
        wanted = {NAMESPACE + k: v for k, v in metadata.items()}
        for info in self.commits(limit):
            if all(info.metadata.get(k) == v for k, v in wanted.items()):
                return info
        return None

    def transaction_version(self, app_id: str) -> int | None:
        """The last version recorded for application transaction ``app_id``, or None.

        Delta rebuilds the table's state for this (small Spark jobs over the log); an
        idempotent write of the same snapshot in the same batch reuses it.
        """
        if not self.exists:
            return None
        if self._txns is None:
            self._txns = _engine.transactions(self._jsnapshot)
        return self._txns.get(app_id)

    def records(self, app_id: str, version: int) -> bool:
        """Whether the table records ``app_id`` at ``version`` or later (a replayed batch)."""
        recorded = self.transaction_version(app_id)
        return recorded is not None and recorded >= version

    def readable_by_files(self) -> bool:
        """Whether the parquet files of a version, read with the table schema, are exactly its
        rows: no partition columns, no column mapping, and only reader features in
        :data:`FILE_READABLE_FEATURES`."""
        if not self.exists:
            return False
        _, features = _engine.reader_features(self._jsnapshot)
        mapping = self.properties.get("delta.columnMapping.mode", "none")
        return (
            set(features) <= FILE_READABLE_FEATURES
            and mapping == "none"
            and not _engine.partition_columns(self._jsnapshot)
        )


def _parse_commit(version: int, lines: list[str]) -> CommitInfo:
    info: dict[str, Any] = {}
    txns: dict[str, int] = {}
    for line in lines:
        # only the two actions we need; add/remove lines (most of a commit) are not parsed
        if line.startswith('{"commitInfo"'):
            info = json.loads(line)["commitInfo"]
        elif line.startswith('{"txn"'):
            txn = json.loads(line)["txn"]
            txns[str(txn["appId"])] = int(txn["version"])
    metadata: dict[str, str] = {}
    raw = info.get("userMetadata")
    if raw:
        with contextlib.suppress(ValueError, TypeError):
            decoded = json.loads(raw)
            if isinstance(decoded, dict):
                metadata = {
                    str(k): str(v) for k, v in decoded.items() if str(k).startswith(NAMESPACE)
                }
    metrics = info.get("operationMetrics") or {}
    return CommitInfo(
        version=version,
        timestamp_ms=int(info.get("inCommitTimestamp") or info.get("timestamp") or 0),
        operation=str(info.get("operation", "")),
        metadata=metadata,
        app_transactions=txns,
        rows=int(metrics.get("numOutputRows", 0) or 0),
    )


# --------------------------------------------------------------------------------------------
# Sessions and snapshots


def _session(spark: SparkSession | None = None) -> SparkSession:
    if spark is not None:
        return spark
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    from lakehouse.spark import get_spark

    return get_spark()


#: The snapshots of the running batch scope (see :func:`batch_scope`), per thread of control.
_scope: contextvars.ContextVar[dict[str, TableSnapshot] | None] = contextvars.ContextVar(
    "lakehouse_delta_batch_scope", default=None
)


@contextlib.contextmanager
def batch_scope() -> Iterator[None]:
    """Within it, each table's log is read at most once.

    A micro-batch handler runs its body inside one: the first :func:`snapshot` of a table
    reads its log, later ones (and every function of this module that looks at the table)
    get the same snapshot, and a write of this process replaces it with the snapshot Delta
    installed after the commit (no listing). The handler is the table's only writer (the
    writer lease), so nothing else changes what it decides from; a racing writer of the same
    batch still loses in Delta's own conflict check.
    """
    token = _scope.set({})
    try:
        yield
    finally:
        _scope.reset(token)


def snapshot(uri: str, *, spark: SparkSession | None = None) -> TableSnapshot:
    """Look at the table's log once (one listing of ``_delta_log``); inside a
    :func:`batch_scope`, once per scope.

    A missing table is not an error here: the snapshot says ``exists=False``.
    """
    scope = _scope.get()
    if scope is not None and uri in scope:
        return scope[uri]
    spark = _session(spark)
    log = _engine.delta_log(spark, uri)
    jsnapshot = _engine.latest(spark, log, uri)
    snap = TableSnapshot(spark, uri, log=log, jsnapshot=jsnapshot)
    if scope is not None:
        scope[uri] = snap
    return snap


def _after_write(spark: SparkSession, uri: str) -> TableSnapshot:
    """The table as this process's own commit left it: the snapshot Delta installed after the
    commit (no listing of the log). Replaces the batch scope's snapshot of the table."""
    log = _engine.delta_log(spark, uri)
    snap = TableSnapshot(spark, uri, log=log, jsnapshot=_engine.installed(log))
    scope = _scope.get()
    if scope is not None:
        scope[uri] = snap
    return snap


def _look(uri: str, spark: SparkSession | None) -> Any:
    """A read-only look at the log: without any Spark session, delta-rs's :class:`~lakehouse.
    delta.inspect.LogView` when it can open the table (no JVM started for a status command);
    the engine's :class:`TableSnapshot` otherwise."""
    if spark is None:
        from pyspark.sql import SparkSession

        if SparkSession.getActiveSession() is None:
            from lakehouse.delta.inspect import open_view

            view = open_view(uri)
            if view is not None:
                return view
    return snapshot(uri, spark=spark)


def table_exists(uri: str, *, spark: SparkSession | None = None) -> bool:
    """Return True when a Delta table (a ``_delta_log`` with a commit) is at ``uri``."""
    return bool(_look(uri, spark).exists)


def latest_version(uri: str, *, spark: SparkSession | None = None) -> int:
    """Return the latest committed version of the table."""
    return int(_look(uri, spark).require().version)


def get_properties(
    uri: str, *, version: int | None = None, spark: SparkSession | None = None
) -> dict[str, str]:
    """Return the table properties (``delta.*`` and ``lakehouse.*``) at a version."""
    snap = _look(uri, spark).require()
    if version is None or version == snap.version:
        return dict(snap.properties)
    if not isinstance(snap, TableSnapshot):
        snap = snapshot(uri, spark=spark).require()
    return _engine.properties(_snapshot_at(snap, version))


def _snapshot_at(snap: TableSnapshot, version: int) -> Any:
    try:
        return _engine.snapshot_at(snap.spark, snap._log, version)
    except Exception as e:
        raise TableNotFoundError(
            f"Delta table '{snap.uri}' has no version {version} (latest {snap.version}): "
            f"{_first_line(e)}",
            table_uri=snap.uri,
        ) from e


def transaction_version(uri: str, app_id: str, *, spark: SparkSession | None = None) -> int | None:
    """Return the last version recorded for application transaction ``app_id``, or None."""
    return _look(uri, spark).require().transaction_version(app_id)


def history(
    uri: str, *, limit: int | None = None, spark: SparkSession | None = None
) -> list[CommitInfo]:
    """Return the table's commits, newest first, with their ``lakehouse.*`` metadata."""
    snap = _look(uri, spark).require()
    return list(snap.commits(limit if limit is not None else snap.version + 1))


def commit_info(uri: str, version: int, *, spark: SparkSession | None = None) -> CommitInfo | None:
    """Return the commit that created ``version``, or None when the log no longer has it."""
    return _look(uri, spark).require().commit(version)


def row_count(uri: str, *, version: int | None = None, spark: SparkSession | None = None) -> int:
    """Rows in the table at a version (Delta answers from its file statistics)."""
    snap = _look(uri, spark)
    if version is None and not isinstance(snap, TableSnapshot):
        return int(snap.require().row_count())
    return int(read(_session(spark), uri, version=version).count())


def table_schema(
    uri: str, *, version: int | None = None, spark: SparkSession | None = None
) -> StructType:
    """Return the table's schema."""
    from pyspark.sql.types import StructType

    snap = snapshot(uri, spark=spark).require()
    if version is None or version == snap.version:
        return snap.schema
    return StructType.fromJson(json.loads(_engine.schema_json(_snapshot_at(snap, version))))


def _encode_metadata(metadata: Metadata) -> dict[str, str]:
    """Stringify commit metadata values; keys must already carry the ``lakehouse.`` prefix."""
    encoded: dict[str, str] = {}
    for key, value in (metadata or {}).items():
        if not key.startswith(NAMESPACE):
            raise ValueError(f"commit metadata key {key!r} must start with {NAMESPACE!r}")
        encoded[key] = value if isinstance(value, str) else json.dumps(value, allow_nan=False)
    return encoded


#: Metadata every commit inside :func:`commit_metadata` carries (a job's identity).
_job_metadata: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "lakehouse_delta_job_metadata", default=None
)


@contextlib.contextmanager
def commit_metadata(metadata: Mapping[str, Any]) -> Iterator[None]:
    """Every commit made within carries ``metadata`` (``lakehouse.*`` keys) as well as its
    own; a commit's own keys win. The runner wraps each micro-batch in it, so every version
    a job writes names the checkpoint it came from (:mod:`lakehouse.checkpoint`)."""
    token = _job_metadata.set({**(_job_metadata.get() or {}), **metadata})
    try:
        yield
    finally:
        _job_metadata.reset(token)


def _user_metadata(metadata: Metadata) -> str | None:
    encoded = _encode_metadata({**(_job_metadata.get() or {}), **(metadata or {})})
    return json.dumps(encoded, sort_keys=True) if encoded else None


def _first_line(e: BaseException) -> str:
    text = str(getattr(e, "desc", None) or e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# --------------------------------------------------------------------------------------------
# Schemas


def spark_schema_to_arrow(schema: StructType) -> Any:
    """Convert a Spark schema to Arrow (timestamps as UTC µs), as Delta stores them."""
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema)  # pyspark 4.0: timestamp_utc=True, the same schema


def check_compatible(
    uri: str,
    incoming: StructType,
    *,
    allow_new_columns: bool,
    existing: StructType | None = None,
) -> list[str]:
    """Compare an incoming schema with the table's; return the incoming columns it lacks.

    A column present in the table but missing from ``incoming`` is fine (it reads NULL in the
    new rows). A column with another type is not.

    Raises:
        SchemaMismatchError: a type differs, or a column is new and ``allow_new_columns`` is
            False. The message names the table, the column and both types.
    """
    have = existing if existing is not None else table_schema(uri)
    by_name = {f.name: f for f in have.fields}
    new: list[str] = []
    for column in incoming.fields:
        current = by_name.get(column.name)
        if current is None:
            new.append(column.name)
            continue
        if not same_type(current.dataType, column.dataType):
            raise SchemaMismatchError(
                f"Delta table '{uri}': column '{column.name}' has type "
                f"{current.dataType.simpleString()}, but the data has type "
                f"{column.dataType.simpleString()}. Write to a new table, or cast the column "
                "to the table's type.",
                table_uri=uri,
            )
    if new and not allow_new_columns:
        raise SchemaMismatchError(
            f"Delta table '{uri}' lacks column(s) {', '.join(new)} that the data has. Use "
            "schema evolution (schema_mode='merge') or write to a new table.",
            table_uri=uri,
        )
    return new


def same_type(a: DataType, b: DataType) -> bool:
    """Whether two Spark types are the same Delta type (nullability aside)."""
    return a.simpleString() == b.simpleString()


# --------------------------------------------------------------------------------------------
# Creating and altering


@contextlib.contextmanager
def _sql_metadata(spark: SparkSession, metadata: Metadata) -> Iterator[None]:
    """Give the SQL commands run inside ``userMetadata`` (Delta takes it from the session)."""
    text = _user_metadata(metadata)
    with _sql_lock:
        if text is None:
            spark.conf.unset(_USER_METADATA_CONF)
            yield
            return
        spark.conf.set(_USER_METADATA_CONF, text)
        try:
            yield
        finally:
            spark.conf.unset(_USER_METADATA_CONF)


#: A URI scheme (``s3://``, ``dbfs:/``, ``abfss://``); two characters at least, so that a
#: Windows drive letter is no scheme.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")


def local_path(uri: str) -> str | None:
    """The file-system path of a local table location (a plain path, relative or absolute,
    or a ``file:`` URI), or None for a location on other storage (``s3://``, ``dbfs:/``...).

    >>> local_path("out/rates"), local_path("file:///tmp/t"), local_path("dbfs:/t")
    ('out/rates', '/tmp/t', None)
    """
    if uri.startswith("file:"):
        return "/" + uri.removeprefix("file:").lstrip("/")
    return None if _SCHEME.match(uri) else uri


def _quote(uri: str) -> str:
    """The path identifier of a table in SQL. Delta reads ``delta.`out/rates``` as a table
    name, not a path (TABLE_OR_VIEW_NOT_FOUND): a local path is made absolute."""
    path = local_path(uri)
    if path is not None:
        uri = os.path.abspath(path)
    return "delta.`" + uri.replace("`", "``") + "`"


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def create_table(
    uri: str,
    schema: StructType,
    *,
    properties: Mapping[str, str] | None = None,
    exist_ok: bool = False,
    metadata: Metadata = None,
    spark: SparkSession | None = None,
) -> int:
    """Create an empty, unpartitioned Delta table and return its version (0).

    Args:
        uri: table location (local path or object-store URI).
        schema: the columns.
        properties: table properties; custom ``lakehouse.*`` keys are accepted.
        exist_ok: when the table exists already, check that it has every column of
            ``schema`` with the same type, set those of ``properties`` it does not have at
            all (finishing a creation a crash cut between its two commits, see below), and
            return its latest version instead of failing.
        metadata: ``lakehouse.*`` commit metadata of the create commit.

    A location that already holds files but no commit (a writer's lease, ``_lakehouse/``; the
    ``_delta_log/`` a process killed inside its first commit leaves behind) is refused by
    Delta's ``CREATE TABLE``. There the table is created by an empty write, and the properties
    follow in a second commit: a crash between the two leaves a table without them, which the
    next ``create_table(exist_ok=True)`` completes. Keys the table has are never changed.

    Raises:
        SchemaMismatchError: ``exist_ok`` and the existing table lacks a column or types differ.
    """
    from delta.tables import DeltaTable

    spark = _session(spark)
    snap = snapshot(uri, spark=spark)
    if snap.exists:
        if not exist_ok:
            raise SchemaMismatchError(f"a Delta table already exists at '{uri}'", table_uri=uri)
        check_compatible(uri, schema, allow_new_columns=False, existing=snap.schema)
        missing = {k: v for k, v in (properties or {}).items() if k not in snap.properties}
        if missing:
            log.warning(
                "Delta table %s: finishing its creation, which a crash interrupted: setting %s",
                uri,
                ", ".join(sorted(missing)),
            )
            return set_properties(uri, missing, metadata=metadata, spark=spark)
        return snap.version
    builder = DeltaTable.createIfNotExists(spark).location(uri).addColumns(schema)
    for key, value in (properties or {}).items():
        builder = builder.property(key, str(value))
    try:
        with _sql_metadata(spark, metadata):
            builder.execute()
    except Exception as e:
        if not any(cls in str(e) for cls in _NOT_A_TABLE_YET):
            raise
        writer = spark.createDataFrame([], schema).write.format("delta").mode("append")
        text = _user_metadata(metadata)
        if text is not None:
            writer = writer.option("userMetadata", text)
        writer.save(uri)
        if properties:
            _after_write(spark, uri)
            failpoint("create.before_properties")
            set_properties(uri, properties, metadata=metadata, spark=spark)
    _after_write(spark, uri)
    return 0


#: Delta's refusals of ``CREATE TABLE`` at a location that holds files but no commit: a lease
#: (``NON_EMPTY_LOCATION``), a ``_delta_log/`` without a commit, as a process killed inside
#: its first commit leaves it (``DELTA_TABLE_NOT_FOUND``; ``DELTA_MISSING_DELTA_TABLE`` in
#: older releases).
_NOT_A_TABLE_YET = ("NON_EMPTY_LOCATION", "DELTA_TABLE_NOT_FOUND", "DELTA_MISSING_DELTA_TABLE")


def set_properties(
    uri: str,
    properties: Mapping[str, str],
    *,
    metadata: Metadata = None,
    spark: SparkSession | None = None,
) -> int:
    """Set table properties in one commit (``ALTER TABLE ... SET TBLPROPERTIES``) and return
    the new version. ``metadata`` goes into the commit's ``userMetadata``, so the history
    shows why the properties changed."""
    spark = _session(spark)
    snapshot(uri, spark=spark).require()
    pairs = ", ".join(f"{_sql_string(k)} = {_sql_string(str(v))}" for k, v in properties.items())
    with _sql_metadata(spark, metadata):
        spark.sql(f"ALTER TABLE {_quote(uri)} SET TBLPROPERTIES ({pairs})")
    return _after_write(spark, uri).version


def widen_columns(
    uri: str,
    types: Mapping[str, DataType],
    *,
    metadata: Metadata = None,
    spark: SparkSession | None = None,
) -> int:
    """Change columns to wider types (:func:`lakehouse.delta.types.widened`) in one commit
    that rewrites the table's rows with the new types, and return its version.

    Every row, property and application transaction stays; older versions stay readable
    with their old types by time travel. Delta's ``typeWidening`` feature is not used: it
    would make the table unreadable to delta-rs and Polars (:mod:`lakehouse.delta.types`).
    The cost is one rewrite of the table per change, which a column's type makes rarely.

    Raises:
        SchemaMismatchError: a type is not a widening of the column's, a column is missing,
            or a value the table holds would not survive the change (``bigint`` values
            beyond 2^53 into ``double``); the message names the column and the value.
    """
    from pyspark.sql import functions as F

    from lakehouse.delta.types import widened

    spark = _session(spark)
    snap = snapshot(uri, spark=spark).require()
    current = {f.name: f.dataType for f in snap.schema.fields}
    for name, new in types.items():
        old = current.get(name)
        if old is None or widened(old, new) != new:
            have = "no such column" if old is None else f"type {old.simpleString()}"
            raise SchemaMismatchError(
                f"Delta table '{uri}': column '{name}' ({have}) cannot widen to "
                f"{new.simpleString()}",
                table_uri=uri,
            )
    df = read(spark, uri, version=snap.version)
    for name, new in types.items():
        bad = first_inexact(df, name, current[name], new)
        if bad is not None:
            raise SchemaMismatchError(
                f"Delta table '{uri}': column '{name}' cannot widen from "
                f"{current[name].simpleString()} to {new.simpleString()}: it holds "
                f"{bad}, which {new.simpleString()} does not hold exactly",
                table_uri=uri,
            )
    widened_df = df.select(
        *[
            F.col(f.name).cast(types[f.name]).alias(f.name) if f.name in types else F.col(f.name)
            for f in snap.schema.fields
        ]
    )
    writer = widened_df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
    text = _user_metadata(metadata)
    if text is not None:
        writer = writer.option("userMetadata", text)
    writer.save(uri)
    return _after_write(spark, uri).version


def first_inexact(df: DataFrame, name: str, old: DataType, new: DataType) -> str | None:
    """A value of column ``name`` (of type ``old``) that would not survive a change to
    ``new``, as text; None when every value does, or when the change is exact by type
    (:func:`lakehouse.delta.types.value_checked` is false: no job runs)."""
    from pyspark.sql import functions as F

    from lakehouse.delta.types import value_checked

    if not value_checked(old, new):
        return None
    lost = inexact(F.col(name), old, new)
    bad = df.filter(lost).select(F.col(name).cast("string").alias("v")).first()
    return None if bad is None else str(bad["v"])


def inexact(column: Column, old: DataType, new: DataType) -> Column:
    """True where a non-NULL value of ``column`` (of type ``old``) is not the same value
    once cast to ``new``: the check behind :func:`lakehouse.delta.types.value_checked`
    changes (arrays: any element)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, DecimalType

    if isinstance(old, ArrayType) and isinstance(new, ArrayType):
        return F.coalesce(
            F.exists(column, lambda x: inexact(x, old.elementType, new.elementType)), F.lit(False)
        )
    exact = DecimalType(38, 0)
    return column.isNotNull() & ~column.try_cast(new).try_cast(exact).eqNullSafe(
        column.try_cast(exact)
    )


# --------------------------------------------------------------------------------------------
# Reading


def read(spark: SparkSession, uri: str, *, version: int | None = None) -> DataFrame:
    """Read the table at ``version`` (latest when None) as a Spark DataFrame (Delta's
    ``versionAsOf``). Lazy: nothing is scanned until an action runs.

    Raises:
        TableNotFoundError: no table, or no such version.
        UnsupportedTableError: Delta refuses the table's protocol.
    """
    snap = snapshot(uri, spark=spark).require()
    if version is not None and version > snap.version:
        raise TableNotFoundError(
            f"Delta table '{uri}' has no version {version} (latest {snap.version})",
            table_uri=uri,
        )
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    try:
        return reader.load(uri)
    except Exception as e:
        raise _read_error(uri, version, e) from e


#: The file list and schema of table versions already read: a version never changes, so a
#: join pinning the same build version batch after batch asks Delta for its files once.
_VERSION_FILES: collections.OrderedDict[tuple[str, str, int], tuple[tuple[str, ...], Any]] = (
    collections.OrderedDict()
)
_VERSION_FILES_MAX = 64


def read_files(spark: SparkSession, snap: TableSnapshot, *, version: int) -> DataFrame:
    """Read a version as a plain parquet scan of exactly its files, when
    :meth:`TableSnapshot.readable_by_files` allows (the same rows as :func:`read`, in a form
    whose file set callers can cache and extend); Delta's own read otherwise."""
    if not snap.readable_by_files():
        return read(spark, snap.uri, version=version)
    key = (snap.uri, snap.table_id, version)
    cached = _VERSION_FILES.get(key)
    if cached is None:
        delta_df = read(spark, snap.uri, version=version)
        # local files as plain paths: the spelling Spark's own parquet scans compare equal with
        files = tuple(sorted(_local_path(f) for f in delta_df.inputFiles()))
        schema = snap.schema if version == snap.version else delta_df.schema
        cached = (files, schema)
        _VERSION_FILES[key] = cached
        while len(_VERSION_FILES) > _VERSION_FILES_MAX:
            _VERSION_FILES.popitem(last=False)
    files, schema = cached
    if not files:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*files)


def _local_path(uri: str) -> str:
    if uri.startswith("file:"):
        return "/" + uri[len("file:") :].lstrip("/")
    return uri


def files_at(uri: str, version: int, *, spark: SparkSession | None = None) -> list[str]:
    """The data files (URIs) the table's snapshot at ``version`` reads."""
    spark = _session(spark)
    return sorted(read(spark, uri, version=version).inputFiles())


def _read_error(uri: str, version: int | None, e: Exception) -> Exception:
    text = _first_line(e)
    if "DELTA_UNSUPPORTED_FEATURES_FOR_READ" in text or "UnsupportedTableFeature" in text:
        return UnsupportedTableError(
            f"Delta table '{uri}' needs a feature this delta-spark cannot read: {text}",
            table_uri=uri,
            feature="protocol",
        )
    if "VERSION" in text.upper() and version is not None:
        return TableNotFoundError(
            f"Delta table '{uri}' has no version {version}: {text}", table_uri=uri
        )
    return e


# --------------------------------------------------------------------------------------------
# Writing


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
    )


def overwrite(
    df: DataFrame,
    uri: str,
    *,
    txn: tuple[str, int] | None = None,
    metadata: Metadata = None,
    max_files: int | None = None,
    snap: TableSnapshot | None = None,
) -> WriteResult:
    """Replace the table's rows with the DataFrame's, in one commit (older versions stay
    readable by time travel; properties and app transactions stay). Idempotence and metadata
    as in :func:`append`."""
    return _write(
        df,
        uri,
        mode="overwrite",
        txn=txn,
        metadata=metadata,
        schema_mode="merge",
        max_files=max_files,
        snap=snap,
    )


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
) -> WriteResult:
    spark = df.sparkSession
    snap = snap if snap is not None else snapshot(uri, spark=spark)
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
    writer = (df.coalesce(max_files) if max_files else df).write.format("delta").mode(mode)
    if txn is not None:
        writer = writer.option("txnAppId", txn[0]).option("txnVersion", str(txn[1]))
    text = _user_metadata(metadata)
    if text is not None:
        writer = writer.option("userMetadata", text)
    if schema_mode != "strict":
        writer = writer.option("mergeSchema", "true")
    try:
        writer.save(uri)
    except Exception as e:
        name = _java_class(e)
        if txn is not None and "ConcurrentTransaction" in name:
            # another copy of this pipeline committed the same batch first: written once
            return WriteResult(version=_after_write(spark, uri).version, skipped=True, rows=0)
        if "Concurrent" in name or "DELTA_CONCURRENT" in str(e):
            raise ConcurrentCommitError(
                f"Delta table '{uri}' changed while this write committed: {_first_line(e)}",
                table_uri=uri,
            ) from e
        if "DELTA_FAILED_TO_MERGE_FIELDS" in str(e) or "SCHEMA" in str(e).split("]")[0].upper():
            raise SchemaMismatchError(
                f"Delta table '{uri}' refused the data's schema: {_first_line(e)}",
                table_uri=uri,
            ) from e
        raise
    after = _after_write(spark, uri)
    info = after.commit(after.version)
    before = snap.version if snap.exists else -1
    if compact_every is None:
        compact_every = int(spark.conf.get(COMPACT_EVERY_CONF, str(COMPACT_EVERY_VERSIONS)))
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


def _meet_types(df: DataFrame, uri: str, snap: TableSnapshot) -> tuple[DataFrame, TableSnapshot]:
    """The ``"widen"`` schema mode of :func:`append`: cast what fits the table, widen the
    table where the data is wider, refuse the rest (:func:`check_compatible` then names it)."""
    from pyspark.sql import functions as F

    from lakehouse.delta.types import fits, widened

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
    if casts:
        df = df.select(
            *[F.col(c).cast(casts[c]).alias(c) if c in casts else F.col(c) for c in df.columns]
        )
    if wider:
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
