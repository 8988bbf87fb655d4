"""Reading Delta tables: a version pinned with ``versionAsOf`` (:func:`read`), or the parquet
files of a version when its files alone are the table (:func:`read_files`, :func:`files_at`).
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakehouse.delta.log import (
    TableSnapshot,
    _first_line,
    _look,
    _session,
    local_path,
    snapshot,
)
from lakehouse.errors import (
    TableNotFoundError,
    UnsupportedTableError,
)
from lakehouse.spark import session_identity

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


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


@dataclass(slots=True)
class _Scan:
    session: str  # lakehouse.spark.session_identity
    frame: DataFrame
    files: frozenset[str] | None = None  # its inputFiles(), once asked


#: The scans :func:`read_files` made, per version, with the (JVM) session they belong to and
#: their input files once asked (:func:`scanned_files`): a join reading the same build version
#: batch after batch gets the same DataFrame, with no new listing of its files by Spark's file
#: index and no new look at its plan.
_FRAMES: collections.OrderedDict[tuple[str, str, int], _Scan] = collections.OrderedDict()
_frames_lock = threading.Lock()


def read_files(
    spark: SparkSession, snap: TableSnapshot, *, version: int, overwritten: bool = False
) -> DataFrame:
    """Read a version as a plain parquet scan of exactly its files, when
    :meth:`TableSnapshot.readable_by_files` allows (the same rows as :func:`read`, in a form
    whose file set callers can cache and extend); Delta's own read otherwise.

    ``overwritten``: the table is written by full overwrites (a join's pending table), so the
    latest version's files are those its last overwrite added
    (:meth:`TableSnapshot.files_by_commits`), without Delta listing the version's state.
    """
    if not snap.readable_by_files():
        return read(spark, snap.uri, version=version)
    key = (snap.uri, snap.table_id, version)
    cached = _VERSION_FILES.get(key)
    if cached is None:
        told = snap.files_by_commits() if overwritten and version == snap.version else None
        if told is not None:
            cached = (tuple(sorted(told)), snap.schema)
        else:
            delta_df = read(spark, snap.uri, version=version)
            files = tuple(sorted(local_path(f) for f in delta_df.inputFiles()))
            schema = snap.schema if version == snap.version else delta_df.schema
            cached = (files, schema)
        _VERSION_FILES[key] = cached
        while len(_VERSION_FILES) > _VERSION_FILES_MAX:
            _VERSION_FILES.popitem(last=False)
    files, schema = cached
    if not files:
        return spark.createDataFrame([], schema)
    session = session_identity(spark)
    with _frames_lock:
        scan = _FRAMES.get(key)
        if scan is not None and scan.session == session:
            _FRAMES.move_to_end(key)
            return scan.frame
    df = spark.read.schema(schema).parquet(*files)
    with _frames_lock:
        _FRAMES[key] = _Scan(session, df)
        while len(_FRAMES) > _VERSION_FILES_MAX:
            _FRAMES.popitem(last=False)
    return df


def scanned_files(df: DataFrame) -> frozenset[str] | None:
    """``df.inputFiles()`` when ``df`` is a scan :func:`read_files` made, which is a plain
    parquet scan of exactly those files (asked of Spark once per scan); None for any other
    DataFrame, whose plan the caller must look at."""
    with _frames_lock:
        scan = next((s for s in _FRAMES.values() if s.frame is df), None)
    if scan is None:
        return None
    if scan.files is None:
        scan.files = frozenset(df.inputFiles())
    return scan.files


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


def row_count(uri: str, *, version: int | None = None, spark: SparkSession | None = None) -> int:
    """Rows in the table at a version (Delta answers from its file statistics)."""
    snap = _look(uri, spark)
    if version is None and not isinstance(snap, TableSnapshot):
        return int(snap.require().row_count())
    return int(read(_session(spark), uri, version=version).count())
