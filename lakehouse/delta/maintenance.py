"""Maintenance operations on Delta tables, through delta-spark: deleting chosen rows of an
append-only table (compaction), and a vacuum that keeps chosen versions readable.

Kept apart from the pipelines' read and write path (:mod:`.scan`, :mod:`.write`) but, like
it, the only place that runs these operations (ARCHITECTURE.md: all Delta access behind
``lakehouse/delta``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lakehouse.delta import _engine
from lakehouse.delta.commits import WriteResult
from lakehouse.delta.ddl import _quote, _sql_metadata
from lakehouse.delta.log import _after_write, _first_line, _session, snapshot
from lakehouse.delta.scan import files_at
from lakehouse.delta.write import _java_class
from lakehouse.errors import ConcurrentCommitError
from lakehouse.failpoints import failpoint

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def delete_rows(
    victims: DataFrame,
    uri: str,
    *,
    on: Sequence[str],
    read_version: int,
    metadata: Mapping[str, Any] | None = None,
) -> WriteResult:
    """Delete from the table every row equal, on the columns ``on`` (NULL equal to NULL), to a
    row of ``victims``, in one commit (Delta's ``MERGE ... WHEN MATCHED THEN DELETE``).

    Only the files that hold such rows are rewritten. Rows appended while it runs are not in
    ``victims`` and are kept: Delta lets blind appends commit beside it. A change of the
    table's metadata or of the files it read in the meantime makes it fail instead.

    ``read_version`` is the version ``victims`` were computed from; a table already past it
    when the delete starts is refused, so the victims are never applied to rows they were not
    chosen from.

    Raises:
        ConcurrentCommitError: the table changed after ``read_version``, or a concurrent
            commit conflicted; nothing was committed.
    """
    from delta.tables import DeltaTable

    spark = victims.sparkSession
    before = snapshot(uri, spark=spark)
    if before.version != read_version:
        raise _changed(uri, read_version, before.version)
    condition = " AND ".join(f"t.`{c}` <=> v.`{c}`" for c in on)
    target = DeltaTable.forPath(spark, uri).alias("t")
    try:
        with _sql_metadata(spark, metadata):
            target.merge(victims.alias("v"), condition).whenMatchedDelete().execute()
    except Exception as e:
        if "Concurrent" in _java_class(e) or "DELTA_CONCURRENT" in str(e):
            raise ConcurrentCommitError(
                f"Delta table '{uri}' changed while it was being rewritten: "
                f"{_first_line(e)}. Nothing was written; run the command again.",
                table_uri=uri,
            ) from e
        raise
    after = _after_write(spark, uri)
    return WriteResult(version=after.version, skipped=False, rows=0)


def _changed(uri: str, read_version: int, now: int) -> ConcurrentCommitError:
    return ConcurrentCommitError(
        f"Delta table '{uri}' changed while it was being rewritten: it was read at "
        f"version {read_version} and version(s) {read_version + 1}..{now} were committed "
        "since (a running ingest appending, or a marker change). Nothing was written; "
        "run the command again.",
        table_uri=uri,
    )


def vacuum(
    uri: str,
    *,
    retention_hours: int | None,
    keep_versions: Sequence[int] = (),
    dry_run: bool = True,
    metadata: Mapping[str, Any] | None = None,
    spark: SparkSession | None = None,
) -> list[str]:
    """Delete (or, with ``dry_run``, list) the files the latest version does not read and
    that are older than ``retention_hours`` — except those any version in ``keep_versions``
    still reads (Delta's ``VACUUM ... USING INVENTORY``, given every data file of the table
    but those).

    ``retention_hours`` None means the table's ``delta.deletedFileRetentionDuration``
    (default 7 days); an explicit value may be lower than that (the caller decided).

    Returns:
        The files deleted (or that would be), relative to the table root.
    """
    from pyspark.sql import functions as F

    spark = _session(spark)
    snap = snapshot(uri, spark=spark).require()
    protected: set[str] = set()
    for version in sorted(set(keep_versions)):
        protected.update(_normal(f) for f in files_at(uri, version, spark=spark))
    listing = (
        spark.read.format("binaryFile")
        .option("recursiveFileLookup", "true")
        .load(uri)
        .select(
            F.col("path"),
            F.col("length"),
            F.lit(False).alias("isDir"),
            F.unix_millis(F.col("modificationTime")).alias("modificationTime"),
        )
    )
    rows = [r for r in listing.collect() if _normal(r["path"]) not in protected]
    base = str(snap._log.dataPath().toString()).rstrip("/")  # the form Delta matches on
    inventory = spark.createDataFrame(
        [(_rebase(r["path"], base), r["length"], False, r["modificationTime"]) for r in rows],
        "path string, length bigint, isDir boolean, modificationTime bigint",
    )
    view = f"lakehouse_vacuum_inventory_{abs(hash((uri, tuple(protected)))) % 10**9}"
    inventory.createOrReplaceTempView(view)
    retain = "" if retention_hours is None else f" RETAIN {int(retention_hours)} HOURS"
    statement = f"VACUUM {_quote(uri)} USING INVENTORY (SELECT * FROM {view}){retain}"
    check = "spark.databricks.delta.retentionDurationCheck.enabled"
    previous = spark.conf.get(check, None)
    if retention_hours is not None:
        spark.conf.set(check, "false")  # the caller chose the retention
    try:
        listed = [str(r[0]) for r in spark.sql(statement + " DRY RUN").collect()]
        if not dry_run and listed:
            failpoint("vacuum.before_delete")
            with _sql_metadata(spark, metadata):
                spark.sql(statement).collect()
    finally:
        if previous is None:
            spark.conf.unset(check)
        else:
            spark.conf.set(check, previous)
        spark.catalog.dropTempView(view)
    return sorted(_relative(p, base) for p in listed)


def _normal(path: str) -> str:
    """A file URI as a plain path (Spark writes ``file:/x``, ``file:///x`` or ``/x``)."""
    for prefix in ("file://", "file:"):
        if path.startswith(prefix):
            path = path[len(prefix) :]
            break
    return "/" + path.lstrip("/") if not path.startswith(("s3", "gs", "abfs", "hdfs")) else path


def _rebase(path: str, base: str) -> str:
    """``path`` in the form of ``base`` (Delta keeps inventory entries under ``base/``)."""
    if base.startswith("file:"):
        return "file:" + _normal(path)
    return path


def _relative(path: str, base: str) -> str:
    plain, root = _normal(path), _normal(base)
    return plain[len(root) + 1 :] if plain.startswith(root + "/") else plain


def oldest_readable_version(uri: str, *, spark: SparkSession | None = None) -> int:
    """The oldest version Delta can still time-travel to (older commits are gone after
    ``delta.logRetentionDuration`` and checkpoints)."""

    spark = _session(spark)
    snap = snapshot(uri, spark=spark).require()
    low, high = 0, snap.version
    # versions readable form a suffix of [0, latest]: find its start by bisection
    while low < high:
        middle = (low + high) // 2
        try:
            _engine.snapshot_at(spark, snap._log, middle)
            high = middle
        except Exception:
            low = middle + 1
    return low
