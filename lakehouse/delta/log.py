"""One look at a Delta table: its snapshot (version, properties, schema, protocol, recent
commits and their metadata), the session it is read through, and the commit metadata a batch
writes with.

:func:`snapshot` reads a table's log once and returns a :class:`TableSnapshot` that the batch
decides from; parsed commits are kept per process (a commit file never changes). Delta itself
refuses to read a table whose protocol it cannot honour; the few places that read a pinned
version's parquet files directly (the row-time join's caches) do so only when
:meth:`TableSnapshot.readable_by_files` says the files alone are the table.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import json
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote

from lakehouse.delta import _engine
from lakehouse.delta.commits import CommitInfo
from lakehouse.delta.inspect import open_view
from lakehouse.errors import (
    TableNotFoundError,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

NAMESPACE = "lakehouse."
#: Commit metadata: why a commit that is not a batch's was made (the history shows it).
META_REASON = NAMESPACE + "reason"
#: Commit metadata: the maintenance operation of a commit (``compact``, ``vacuum``).
META_OPERATION = NAMESPACE + "operation"
#: Commit metadata of the first of a creation's two commits (an empty write; the properties
#: follow, see :func:`lakehouse.delta.create_table`): its table is being created.
META_CREATING = NAMESPACE + "creating"

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
#: How many of a table's newest commits :meth:`TableSnapshot.transaction_version` reads for an
#: application's transaction before it asks Delta to rebuild the table's state: a batch writes
#: its transaction in its data commit, and the commits after it (markers, properties, a
#: compaction) are few.
TXN_SCAN_COMMITS = 50
_parsed_lock = threading.Lock()  # foreachBatch handlers of several queries share it

#: SQL commands that carry commit metadata set it on the session: one at a time.
_sql_lock = threading.Lock()


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
        log: Any = None,
        jsnapshot: Any = None,
    ) -> None:
        self.spark = spark
        self.uri = uri
        self._log = log
        self._jsnapshot = jsnapshot
        #: the version, ``metaData`` action and listed commit files, read once (one py4j call)
        self._facts = _engine.describe(spark, jsnapshot) if jsnapshot is not None else None
        version = self._facts.version if self._facts is not None else -1
        self.exists = version >= 0
        self.version = version if self.exists else -1
        self._metadata: Mapping[str, Any] = self._facts.metadata if self._facts else {}
        self.properties: Mapping[str, str] = _engine.properties_of(self._metadata)
        self._schema: StructType | None = None
        self._commits: dict[int, CommitInfo | None] = {}
        self._txns: dict[str, int] | None = None
        self._live: dict[int, list[str] | None] = {}  # live_adds by limit

    def __repr__(self) -> str:
        return f"TableSnapshot({self.uri!r}, version={self.version})"

    @property
    def table_id(self) -> str:
        """Delta's id of the table (a table deleted and created again gets a new one)."""
        return str(self._metadata.get("id", "")) if self.exists else ""

    @property
    def schema(self) -> StructType:
        """The table schema (empty when there is no table)."""
        from pyspark.sql.types import StructType

        if self._schema is None:
            text = self._metadata.get("schemaString") if self.exists else None
            # Delta's Snapshot.schema is this text parsed (an empty struct without one)
            self._schema = StructType.fromJson(json.loads(text)) if text else StructType([])
        return self._schema

    @property
    def partition_columns(self) -> tuple[str, ...]:
        """The table's partition columns (none when there is no table)."""
        return tuple(str(c) for c in self._metadata.get("partitionColumns") or ())

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
            assert self._facts is not None  # a table exists: it has a snapshot
            # the file's length and time where the listing gave them: a torn newest commit
            # that `lakehouse repair` removed is written again, as another file
            stamp = self._facts.commits.get(version, (-1, -1))
            known = (self._facts.log_path, self.table_id, version, *stamp)
            with _parsed_lock:
                found = _PARSED_COMMITS.get(known)
            if found is None:
                lines = _engine.commit_lines(self.spark, self._log, version, self._jsnapshot)
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

        A commit records the transactions it sets, so the newest of the last
        :data:`TXN_SCAN_COMMITS` commits that set ``app_id`` holds its last version (their
        parses are kept by the process). Only when none of them did does Delta rebuild the
        table's state (Spark jobs over the log); an idempotent write of the same snapshot in the
        same batch reuses that state. A table whose every commit since its creation is among
        them needs no rebuild either: its commits are its whole history.
        """
        if not self.exists:
            return None
        read = 0
        for info in self.commits(TXN_SCAN_COMMITS):
            if app_id in info.app_transactions:
                return info.app_transactions[app_id]
            read += 1
        if read == self.version + 1:
            return None
        if self._txns is None:
            self._txns = _engine.transactions(self._jsnapshot)
        return self._txns.get(app_id)

    def records(self, app_id: str, version: int) -> bool:
        """Whether the table records ``app_id`` at ``version`` or later (a replayed batch)."""
        recorded = self.transaction_version(app_id)
        return recorded is not None and recorded >= version

    def files_by_commits(self, limit: int = 8) -> tuple[str, ...] | None:
        """The table's data files as its own commits tell them, without Delta listing its
        state (a Spark job): the files the newest full overwrite added, when every later
        commit changed no file (a property set, say). A table whose every data commit is a
        full overwrite (a join's pending table) is read this way batch after batch.

        None when the last ``limit`` commits do not tell: an append, a compaction, a delete,
        an overwrite with a predicate or of partitions; then Delta's read is the answer.
        """
        adds = self.live_adds(limit)
        if adds is None:
            return None
        base = str(self._log.dataPath().toString()).rstrip("/")
        return tuple(_data_path(base, unquote(json.loads(a)["add"]["path"])) for a in adds)

    def live_adds(self, limit: int = 8) -> list[str] | None:
        """The ``add`` actions (JSON lines, as the log holds them) of the files
        :meth:`files_by_commits` tells: every file of the table; None when the last ``limit``
        commits do not tell. Asked once per snapshot (a row-time batch reads the pending
        table's files, then overwrites them)."""
        if limit not in self._live:
            self._live[limit] = self._live_adds(limit)
        return self._live[limit]

    def _live_adds(self, limit: int) -> list[str] | None:
        if not self.exists:
            return None
        for version in range(self.version, max(self.version - limit, -1) - 1, -1):
            if version < 0:
                return []  # only metadata commits since the table was created: no files
            lines = _engine.commit_lines(self.spark, self._log, version, self._jsnapshot)
            if not lines:
                return None
            added, changed = _overwrite_adds(lines)
            if added is not None:
                return added
            if changed:
                return None
        return None

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
            and not self.partition_columns
        )


def _overwrite_adds(lines: list[str]) -> tuple[list[str] | None, bool]:
    """``(its add actions, True)`` for a commit that replaced every file of the table (an
    overwrite without a predicate, of every partition); ``(None, whether it added or removed
    files)`` for any other.

    >>> info = '{"commitInfo":{"operation":"WRITE","operationParameters":{"mode":"Overwrite"}}}'
    >>> _overwrite_adds([info, '{"add":{"path":"a%20b.parquet"}}', '{"remove":{"path":"c"}}'])
    (['{"add":{"path":"a%20b.parquet"}}'], True)
    >>> _overwrite_adds(['{"commitInfo":{"operation":"SET TBLPROPERTIES"}}'])
    (None, False)
    >>> _overwrite_adds(['{"commitInfo":{"operation":"WRITE","operationParameters":'
    ...     '{"mode":"Append"}}}', '{"add":{"path":"d"}}'])
    (None, True)
    """
    params: dict[str, Any] = {}
    operation = ""
    added: list[str] = []
    changed = False
    for line in lines:
        if line.startswith('{"commitInfo"'):
            info = json.loads(line)["commitInfo"]
            operation = str(info.get("operation", ""))
            params = info.get("operationParameters") or {}
        elif line.startswith('{"add"'):
            added.append(line)
            changed = True
        elif line.startswith(('{"remove"', '{"cdc"')):
            changed = True
    replaced = (
        operation == "WRITE"
        and params.get("mode") == "Overwrite"
        and "predicate" not in params
        and not params.get("isDynamicPartitionOverwrite")
    )
    return (added, True) if replaced else (None, changed)


def _data_path(base: str, path: str) -> str:
    """A data file's location: ``path`` as the log holds it (decoded), relative to ``base``
    (the table's location) unless absolute, spelled by :func:`local_path`."""
    return local_path(path if "://" in path or path.startswith("/") else f"{base}/{path}")


def local_path(uri: str) -> str:
    """A local file's URI as a plain path (the spelling Spark's own parquet scans compare
    equal with); any other URI as it is.

    >>> local_path("file:/tmp/t/part-0.parquet"), local_path("s3a://b/t/part-0.parquet")
    ('/tmp/t/part-0.parquet', 's3a://b/t/part-0.parquet')
    """
    if uri.startswith("file:"):
        return "/" + uri[len("file:") :].lstrip("/")
    return uri


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


def _after_write(spark: SparkSession, uri: str, *, log: Any = None) -> TableSnapshot:
    """The table as this process's own commit left it: the snapshot Delta installed after the
    commit (no listing of the log). Replaces the batch scope's snapshot of the table. ``log``:
    the table's ``DeltaLog`` the commit was made through (None: looked up, which copies the
    session's Hadoop configuration)."""
    if log is None:
        log = _engine.delta_log(spark, uri)
    snap = TableSnapshot(spark, uri, log=log, jsnapshot=_engine.installed(log))
    scope = _scope.get()
    if scope is not None:
        scope[uri] = snap
    return snap


def peek(uri: str) -> Any | None:
    """A read-only look at the log that never starts Spark: the engine's
    :class:`TableSnapshot` when a Spark session is running, else delta-rs's
    :class:`~lakehouse.delta.inspect.LogView`; None when delta-rs cannot open the table (a
    protocol feature it lacks, object storage whose credentials only Spark's configuration
    holds). Checks that run before Spark starts read tables this way."""
    from pyspark.sql import SparkSession

    scope = _scope.get()
    if scope is not None and uri in scope:
        return scope[uri]  # the engine's look of this batch (no py4j call to ask for a session)
    if SparkSession.getActiveSession() is None:
        return open_view(uri)
    return snapshot(uri)


def _look(uri: str, spark: SparkSession | None) -> Any:
    """A read-only look at the log: :func:`peek` (no JVM started for a status command), and
    the engine's :class:`TableSnapshot` where delta-rs cannot read the table or ``spark`` is
    given."""
    view = peek(uri) if spark is None else None
    return view if view is not None else snapshot(uri, spark=spark)


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


def table_schema(
    uri: str, *, version: int | None = None, spark: SparkSession | None = None
) -> StructType:
    """Return the table's schema."""
    from pyspark.sql.types import StructType

    snap = _look(uri, spark).require()
    if version is None or version == snap.version:
        return snap.schema
    if not isinstance(snap, TableSnapshot):
        return snap.schema_at(version)
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
