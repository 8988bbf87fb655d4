"""Delta tables through delta-rs, computed on by Spark.

The Delta JVM connector is not available on every machine lakehouse runs on, so the Delta
protocol (log, commits, transactions, properties, time travel) is handled by delta-rs
(``deltalake``) while Spark does the computing:

* **Writes**: Spark writes parquet files on its executors into a fresh directory under the
  table root; the driver reads only the files' footers (row counts and min/max statistics) and
  commits them as ``add`` actions in one Delta transaction. Batch data never passes through
  the driver.
* **Reads**: the file list of one pinned table version is taken from the Delta log and
  handed to Spark's parquet reader with the table's schema. The directory is never re-listed,
  so files of later or failed commits are never seen.

Idempotence (exactly once) is the caller's contract with Spark's ``foreachBatch``: a write
with ``txn=(app_id, version)`` is a **no-op when the table already records ``app_id`` at a
version >= ``version``**. delta-rs records application transactions but does not skip a
replayed one by itself (measured: two appends with the same transaction both commit), so the
check is made here, before any file is written, on the snapshot the commit is then based on:
two writers of the same batch racing (two instances of one pipeline) both pass the check, but
the later commit conflicts with the earlier one's transaction and is skipped, never written
twice (tests/integration/test_writer_race.py).

Only this package imports ``deltalake``: it is the seam where a delta-spark engine could be
slotted in where the JVM connector is present.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError
from deltalake.exceptions import TableNotFoundError as _DeltaTableNotFound
from deltalake.transaction import AddAction

from lakehouse.errors import SchemaMismatchError, TableNotFoundError, UnsupportedTableError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

#: Prefix of every key lakehouse writes into table properties and commit metadata. delta-rs
#: reserves the plain commit-info keys (``operation``, ``readVersion``, ...).
NAMESPACE = "lakehouse."

#: Commit metadata: a mapping, or a callable giving it once the data files are written.
Metadata = Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None

#: Reader features this read path honours. Anything else in a table's protocol is refused:
#: reading such a table from its plain file list would return wrong rows (deletion vectors
#: hide rows the files still hold; column mapping renames the files' physical columns).
#: See https://github.com/delta-io/delta/blob/master/PROTOCOL.md#table-features
SUPPORTED_READER_FEATURES = frozenset(
    {"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck", "checkpointProtection"}
)

_FEATURE_ADVICE = {
    "deletionVectors": (
        "disable deletion vectors on the table (ALTER TABLE ... SET TBLPROPERTIES "
        "('delta.enableDeletionVectors' = false) and REORG TABLE ... APPLY (PURGE)) "
        "or read it with delta-spark"
    ),
    "columnMapping": "rewrite the table without column mapping, or read it with delta-spark",
}


@dataclass(frozen=True, slots=True)
class CommitInfo:
    """One entry of a table's history.

    Attributes:
        version: the table version the commit created.
        timestamp_ms: commit time, epoch milliseconds.
        operation: Delta operation name (``WRITE``, ``SET TBLPROPERTIES``, ...).
        metadata: the ``lakehouse.*`` keys of the commit's custom metadata, values as written.
    """

    version: int
    timestamp_ms: int
    operation: str
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What a write did.

    Attributes:
        version: the table version it created; the version already recorded when skipped.
        skipped: True when the table already held the transaction (a replayed batch).
        rows: rows written (0 when skipped).
        files: data files added.
    """

    version: int
    skipped: bool
    rows: int
    files: int


# --------------------------------------------------------------------------------------------
# Opening and checking


def table_exists(uri: str) -> bool:
    """Return True when a Delta table (a ``_delta_log`` with a commit) is at ``uri``."""
    return DeltaTable.is_deltatable(uri)


def _open(uri: str, version: int | None = None) -> DeltaTable:
    try:
        return DeltaTable(uri) if version is None else DeltaTable(uri, version=version)
    except _DeltaTableNotFound as e:
        raise TableNotFoundError(
            f"no Delta table at '{uri}'"
            + (f" (version {version})" if version is not None else "")
            + ": check the path, or run the job that creates it first",
            table_uri=uri,
        ) from e
    except Exception as e:  # delta-rs raises plain exceptions for a missing version
        if version is not None and "version" in str(e).lower():
            raise TableNotFoundError(
                f"Delta table '{uri}' has no version {version}: {e}", table_uri=uri
            ) from e
        raise


def check_readable(uri: str, dt: DeltaTable | None = None) -> None:
    """Refuse a table whose protocol needs reader features this path cannot honour.

    Raises:
        UnsupportedTableError: the table uses deletion vectors, column mapping, or another
            reader feature outside :data:`SUPPORTED_READER_FEATURES`.
    """
    dt = dt or _open(uri)
    protocol = dt.protocol()
    features = set(protocol.reader_features or [])
    mapping_mode = (dt.metadata().configuration or {}).get("delta.columnMapping.mode", "none")
    if protocol.min_reader_version == 2 and mapping_mode != "none":
        features.add("columnMapping")
    for feature in sorted(features - SUPPORTED_READER_FEATURES):
        advice = _FEATURE_ADVICE.get(feature, "read it with delta-spark")
        raise UnsupportedTableError(
            f"Delta table '{uri}' requires reader feature '{feature}', which lakehouse "
            f"cannot read; {advice}.",
            table_uri=uri,
            feature=feature,
        )
    if dt.metadata().partition_columns:
        raise UnsupportedTableError(
            f"Delta table '{uri}' is partitioned by {dt.metadata().partition_columns}; "
            "lakehouse reads only unpartitioned tables (partition values are not stored in "
            "the data files). Rewrite it unpartitioned or read it with delta-spark.",
            table_uri=uri,
            feature="partitionColumns",
        )


# --------------------------------------------------------------------------------------------
# Metadata: versions, properties, history, transactions


def latest_version(uri: str) -> int:
    """Return the latest committed version of the table."""
    return _open(uri).version()


def row_count(uri: str, *, version: int | None = None) -> int:
    """Rows in the table at a version, from the log's file statistics (no data is read)."""
    return int(_open(uri, version).count())


def get_properties(uri: str, *, version: int | None = None) -> dict[str, str]:
    """Return the table properties (``delta.*`` and ``lakehouse.*``) at a version."""
    return dict(_open(uri, version).metadata().configuration or {})


def set_properties(
    uri: str, properties: Mapping[str, str], *, metadata: Mapping[str, Any] | None = None
) -> int:
    """Set table properties in one commit and return the new version.

    Custom keys (``lakehouse.*``) are allowed: delta-rs 1.x rejects unknown keys unless told
    not to (``raise_if_not_exists=False``), which this function does. ``metadata`` goes into
    the commit's custom metadata, so the history shows why the properties changed.
    """
    dt = _open(uri)
    dt.alter.set_table_properties(
        {k: str(v) for k, v in properties.items()},
        raise_if_not_exists=False,
        commit_properties=CommitProperties(custom_metadata=_encode_metadata(metadata)),
    )
    return _open(uri).version()


def transaction_version(uri: str, app_id: str) -> int | None:
    """Return the last version recorded for application transaction ``app_id``, or None."""
    return _open(uri).transaction_version(app_id)


def history(uri: str, *, limit: int | None = None) -> list[CommitInfo]:
    """Return the table's commits, newest first, with their ``lakehouse.*`` metadata."""
    entries = _open(uri).history(limit)
    out: list[CommitInfo] = []
    for entry in entries:
        meta = {k: str(v) for k, v in entry.items() if k.startswith(NAMESPACE)}
        out.append(
            CommitInfo(
                version=int(entry["version"]),
                timestamp_ms=int(entry.get("timestamp", 0)),
                operation=str(entry.get("operation", "")),
                metadata=meta,
            )
        )
    return out


def commit_info(uri: str, version: int) -> CommitInfo | None:
    """Return the commit that created ``version``, or None when the log no longer has it."""
    latest = latest_version(uri)
    if version > latest:
        return None
    for entry in history(uri, limit=latest - version + 1):
        if entry.version == version:
            return entry
    return None


def _encode_metadata(metadata: Mapping[str, Any] | None) -> dict[str, str]:
    """Stringify commit metadata values; keys must already carry the ``lakehouse.`` prefix."""
    encoded: dict[str, str] = {}
    for key, value in (metadata or {}).items():
        if not key.startswith(NAMESPACE):
            raise ValueError(f"commit metadata key {key!r} must start with {NAMESPACE!r}")
        encoded[key] = value if isinstance(value, str) else json.dumps(value, allow_nan=False)
    return encoded


# --------------------------------------------------------------------------------------------
# Schemas


def spark_schema_to_arrow(schema: StructType) -> pa.Schema:
    """Convert a Spark schema to the Arrow schema of the Delta table (timestamps as UTC µs)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def arrow_schema_to_spark(schema: pa.Schema) -> StructType:
    """Convert a Delta table's Arrow schema to a Spark schema."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def table_schema(uri: str, *, version: int | None = None) -> pa.Schema:
    """Return the table's schema as Arrow."""
    return pa.schema(_open(uri, version).schema().to_arrow())


def create_table(
    uri: str,
    schema: pa.Schema | StructType,
    *,
    properties: Mapping[str, str] | None = None,
    exist_ok: bool = False,
    metadata: Mapping[str, Any] | None = None,
) -> int:
    """Create an empty, unpartitioned Delta table and return its version (0).

    Args:
        uri: table location (local path or object-store URI).
        schema: columns; a Spark schema is converted with :func:`spark_schema_to_arrow`.
        properties: table properties; custom ``lakehouse.*`` keys are accepted.
        exist_ok: when the table exists already, check that it has every column of
            ``schema`` with the same type and return its latest version instead of failing.
        metadata: ``lakehouse.*`` commit metadata of the create commit.

    Raises:
        SchemaMismatchError: ``exist_ok`` and the existing table lacks a column or types differ.
    """
    arrow = schema if isinstance(schema, pa.Schema) else spark_schema_to_arrow(schema)
    if table_exists(uri):
        if not exist_ok:
            raise SchemaMismatchError(f"a Delta table already exists at '{uri}'", table_uri=uri)
        check_compatible(uri, arrow, allow_new_columns=False)
        return latest_version(uri)
    if "://" not in uri:
        os.makedirs(uri, exist_ok=True)
    DeltaTable.create(
        uri,
        arrow,
        configuration=dict(properties or {}),
        raise_if_key_not_exists=False,
        commit_properties=CommitProperties(custom_metadata=_encode_metadata(metadata)),
    )
    return 0


def check_compatible(uri: str, incoming: pa.Schema, *, allow_new_columns: bool) -> list[pa.Field]:
    """Compare an incoming schema with the table's; return the incoming fields it lacks.

    A column present in the table but missing from ``incoming`` is fine (it reads NULL in the
    new rows). A column with another type is not.

    Raises:
        SchemaMismatchError: a type differs, or a column is new and ``allow_new_columns`` is
            False. The message names the table, the column and both types.
    """
    existing = table_schema(uri)
    new_fields: list[pa.Field] = []
    for incoming_field in incoming:
        idx = existing.get_field_index(incoming_field.name)
        if idx < 0:
            new_fields.append(incoming_field)
            continue
        have = existing.field(idx).type
        if not _same_type(have, incoming_field.type):
            raise SchemaMismatchError(
                f"Delta table '{uri}': column '{incoming_field.name}' has type {have}, but the "
                f"data has type {incoming_field.type}. Write to a new table, or cast the column "
                "to the table's type.",
                table_uri=uri,
            )
    if new_fields and not allow_new_columns:
        names = ", ".join(f.name for f in new_fields)
        raise SchemaMismatchError(
            f"Delta table '{uri}' lacks column(s) {names} that the data has. Use schema "
            "evolution (schema_mode='merge') or write to a new table.",
            table_uri=uri,
        )
    return new_fields


def _same_type(a: pa.DataType, b: pa.DataType) -> bool:
    # Delta has one string, one binary and one timestamp(us, UTC) type; Arrow has several
    # spellings of each.
    def norm(t: pa.DataType) -> pa.DataType:
        if pa.types.is_large_string(t) or pa.types.is_string_view(t):
            return pa.string()
        if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
            return pa.binary()
        if pa.types.is_timestamp(t):
            return pa.timestamp("us", tz="UTC" if t.tz else None)
        if pa.types.is_large_list(t) or pa.types.is_list_view(t):
            return pa.list_(norm(t.value_type))
        if pa.types.is_list(t):
            return pa.list_(norm(t.value_type))
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, norm(f.type)) for f in t])
        if pa.types.is_map(t):
            return pa.map_(norm(t.key_type), norm(t.item_type))
        return t

    return norm(a) == norm(b)


# --------------------------------------------------------------------------------------------
# Reading


def read(spark: SparkSession, uri: str, *, version: int | None = None) -> DataFrame:
    """Read the table at ``version`` (latest when None) as a Spark DataFrame.

    The DataFrame reads exactly the files of that version's snapshot, with the table's schema
    (columns added later read as NULL in older files). It is lazy: nothing is scanned until
    an action runs.

    Raises:
        TableNotFoundError: no table, or no such version.
        UnsupportedTableError: see :func:`check_readable`.
    """
    dt = _open(uri, version)
    check_readable(uri, dt)
    schema = arrow_schema_to_spark(pa.schema(dt.schema().to_arrow()))
    files = dt.file_uris()
    if not files:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*files)


# --------------------------------------------------------------------------------------------
# Writing


def append(
    df: DataFrame,
    uri: str,
    *,
    txn: tuple[str, int] | None = None,
    metadata: Metadata = None,
    schema_mode: Literal["strict", "merge"] = "strict",
    max_files: int | None = None,
) -> WriteResult:
    """Append a DataFrame to the table, creating the table when it does not exist.

    Args:
        df: the rows; its schema must match the table's (see ``schema_mode``).
        uri: table location.
        txn: ``(app_id, version)``. The write is a **no-op when the table already records
            ``app_id`` at a version >= ``version``** (a replayed micro-batch), and records
            the transaction otherwise. Without it, every call appends.
        metadata: ``lakehouse.*`` keys for the commit's custom metadata (values are
            stringified; non-strings as JSON). They appear in :func:`history`. A callable
            is called once the data files are written, just before the commit: the place
            for figures the write itself computes (``DataFrame.observe`` metrics).
        schema_mode: ``"merge"`` adds the DataFrame's new columns to the table (older rows
            read NULL); ``"strict"`` refuses them. Type changes are always refused.
        max_files: coalesce the DataFrame to at most this many files first (small batches
            otherwise leave one small file per Spark partition).

    Returns:
        What was written. An empty DataFrame still commits (recording the transaction and
        the metadata), so every batch leaves a trace in the history.

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
    )


def overwrite(
    df: DataFrame,
    uri: str,
    *,
    txn: tuple[str, int] | None = None,
    metadata: Metadata = None,
    max_files: int | None = None,
) -> WriteResult:
    """Replace the table's rows with the DataFrame's, in one commit (older versions stay
    readable by time travel). Idempotence and metadata as in :func:`append`."""
    return _write(
        df,
        uri,
        mode="overwrite",
        txn=txn,
        metadata=metadata,
        schema_mode="merge",
        max_files=max_files,
    )


def _write(
    df: DataFrame,
    uri: str,
    *,
    mode: Literal["append", "overwrite"],
    txn: tuple[str, int] | None,
    metadata: Metadata,
    schema_mode: Literal["strict", "merge"],
    max_files: int | None,
) -> WriteResult:
    arrow_schema = spark_schema_to_arrow(df.schema)
    if not table_exists(uri):
        try:
            create_table(uri, arrow_schema)
        except Exception:
            if not table_exists(uri):
                raise  # not a concurrent writer creating it first
    # The transaction check and the commit use ONE snapshot: a writer that commits the same
    # app transaction after this snapshot makes our commit conflict (delta-rs checks the
    # app ids a commit carries against the winning commits) instead of writing the batch
    # twice. Re-opening the table for the commit would hide that writer's commit.
    dt = _open(uri)
    if _already_recorded(dt, txn):
        return WriteResult(version=dt.version(), skipped=True, rows=0, files=0)
    new_fields = check_compatible(uri, arrow_schema, allow_new_columns=schema_mode == "merge")
    if new_fields:
        _add_columns(uri, new_fields)
        dt = _open(uri)
        if _already_recorded(dt, txn):
            return WriteResult(version=dt.version(), skipped=True, rows=0, files=0)
    table_arrow = pa.schema(dt.schema().to_arrow())

    staging = f"w-{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:12]}"
    target = _join(uri, staging)
    to_write = df.coalesce(max_files) if max_files else df
    to_write.write.mode("error").parquet(target)
    actions, rows = _add_actions(uri, staging, table_arrow)

    props = CommitProperties(
        custom_metadata=_encode_metadata(metadata() if callable(metadata) else metadata),
        app_transactions=[Transaction(txn[0], txn[1])] if txn is not None else None,
    )
    try:
        dt.create_write_transaction(actions, mode, table_arrow, commit_properties=props)
    except Exception as e:
        _remove_dir(target)
        if isinstance(e, CommitFailedError) and txn is not None:
            # A concurrent commit won. If it recorded this batch (another instance of the same
            # pipeline), the batch is written: skip, exactly as a replay would.
            current = _open(uri)
            if _already_recorded(current, txn):
                return WriteResult(version=current.version(), skipped=True, rows=0, files=0)
        raise
    return WriteResult(version=latest_version(uri), skipped=False, rows=rows, files=len(actions))


def _already_recorded(dt: DeltaTable, txn: tuple[str, int] | None) -> bool:
    """The snapshot records ``txn``'s app id at a version >= ``txn``'s (a replayed batch)."""
    if txn is None:
        return False
    recorded = dt.transaction_version(txn[0])
    return recorded is not None and recorded >= txn[1]


def _add_columns(uri: str, fields: Iterable[pa.Field]) -> None:
    from deltalake import Field as DeltaField
    from deltalake import Schema as DeltaSchema

    delta_fields = DeltaSchema.from_arrow(pa.schema([f.with_nullable(True) for f in fields])).fields
    dt = _open(uri)
    dt.alter.add_columns(
        list(delta_fields) if not isinstance(delta_fields, DeltaField) else [delta_fields],
        commit_properties=CommitProperties(
            custom_metadata={"lakehouse.schemaChange": json.dumps([f.name for f in fields])}
        ),
    )


def _join(uri: str, name: str) -> str:
    return uri.rstrip("/") + "/" + name


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    if "://" in uri:
        return pafs.FileSystem.from_uri(uri)
    return pafs.LocalFileSystem(), os.path.abspath(uri)


def _remove_dir(uri: str) -> None:
    fs, path = _filesystem(uri)
    # best effort: the files of a failed commit are unreferenced and vacuum removes them
    with contextlib.suppress(FileNotFoundError, OSError):
        fs.delete_dir(path)


def _add_actions(uri: str, staging: str, schema: pa.Schema) -> tuple[list[AddAction], int]:
    """Turn the parquet files Spark wrote under ``staging`` into Delta ``add`` actions.

    Only footers are read: row counts and per-column min/max/null counts, which become the
    file's Delta statistics so readers can skip files. Empty files are deleted, not added.
    """
    fs, root = _filesystem(uri)
    selector = pafs.FileSelector(root + "/" + staging, recursive=False)
    actions: list[AddAction] = []
    total = 0
    for info in fs.get_file_info(selector):
        base = info.base_name
        if not base.endswith(".parquet") or base.startswith((".", "_")):
            continue
        with fs.open_input_file(info.path) as handle:
            meta = pq.ParquetFile(handle).metadata
        if meta.num_rows == 0:
            fs.delete_file(info.path)
            continue
        total += meta.num_rows
        actions.append(
            AddAction(
                path=f"{staging}/{base}",
                size=info.size,
                partition_values={},
                modification_time=int((info.mtime_ns or time.time_ns()) // 1_000_000),
                data_change=True,
                stats=json.dumps(_file_stats(meta, schema), default=str),
            )
        )
    return actions, total


_STATS_TYPES = (
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_string,
    pa.types.is_date,
    pa.types.is_boolean,
)


def _file_stats(meta: pq.FileMetaData, schema: pa.Schema) -> dict[str, Any]:
    """Delta file statistics from a parquet footer (PROTOCOL.md#per-file-statistics).

    Only flat columns of simple types get min/max; a value that would be imprecise is left
    out rather than guessed, since readers use the statistics to skip files.
    """
    stats: dict[str, Any] = {
        "numRecords": meta.num_rows,
        "minValues": {},
        "maxValues": {},
        "nullCount": {},
    }
    wanted = {f.name: f.type for f in schema if any(test(f.type) for test in _STATS_TYPES)}
    paths = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    for name, typ in wanted.items():
        idx = paths.get(name)
        if idx is None:
            continue
        mins, maxs, nulls, complete = [], [], 0, True
        for rg in range(meta.num_row_groups):
            col = meta.row_group(rg).column(idx)
            st = col.statistics
            if st is None or not st.has_null_count:
                complete = False
                break
            nulls += st.null_count
            if st.has_min_max:
                mins.append(st.min)
                maxs.append(st.max)
        if not complete:
            continue
        stats["nullCount"][name] = nulls
        if mins and not (
            pa.types.is_floating(typ)
            # NaN and ±inf have no JSON number form (delta-rs refuses the log entry)
            and any(isinstance(v, float) and not math.isfinite(v) for v in mins + maxs)
        ):
            lo, hi = min(mins), max(maxs)
            if isinstance(lo, bytes):
                continue
            stats["minValues"][name] = lo.isoformat() if hasattr(lo, "isoformat") else lo
            stats["maxValues"][name] = hi.isoformat() if hasattr(hi, "isoformat") else hi
    return stats
