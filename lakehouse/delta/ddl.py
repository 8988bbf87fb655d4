"""Creating and altering Delta tables: ``CREATE TABLE``, ``ALTER TABLE ... SET TBLPROPERTIES``
(with commit metadata), and widening columns in one rewrite; locations as Spark SQL names them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from lakehouse.delta.log import (
    _USER_METADATA_CONF,
    META_CREATING,
    Metadata,
    _after_write,
    _session,
    _sql_lock,
    _user_metadata,
    snapshot,
)
from lakehouse.delta.scan import read
from lakehouse.delta.schema import check_compatible, first_inexact
from lakehouse.delta.types import widened
from lakehouse.errors import (
    SchemaMismatchError,
)
from lakehouse.failpoints import failpoint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger("lakehouse.delta")


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


def _absolute(uri: str) -> str:
    """The location as Delta's SQL and its table builder need it: a local path made absolute
    (they read ``out/rates`` as a table name, not a path), any other location as it is."""
    path = local_path(uri)
    return uri if path is None else os.path.abspath(path)


def _quote(uri: str) -> str:
    """The path identifier of a table in SQL (``delta.`/abs/path```, see :func:`_absolute`)."""
    return "delta.`" + _absolute(uri).replace("`", "``") + "`"


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
    next ``create_table(exist_ok=True)`` completes. Keys the table has are never changed. The
    first commit's metadata has :data:`~lakehouse.delta.log.META_CREATING`: a reader that
    finds the table without its properties tells a creation under way from a foreign table.

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
    builder = DeltaTable.createIfNotExists(spark).location(_absolute(uri)).addColumns(schema)
    for key, value in (properties or {}).items():
        builder = builder.property(key, str(value))
    try:
        with _sql_metadata(spark, metadata):
            builder.execute()
    except Exception as e:
        if not any(cls in str(e) for cls in _NOT_A_TABLE_YET):
            raise
        writer = spark.createDataFrame([], schema).write.format("delta").mode("append")
        # a reader that finds the table between the two commits knows it is being created
        creating = {META_CREATING: "properties follow"} if properties else {}
        text = _user_metadata({**(metadata or {}), **creating})
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
