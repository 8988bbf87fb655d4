"""What the as-of paths share: the probe time column, and whether a build is a plain scan of
parquet files (the narrow path and the processing-time snapshots need one)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: The released probe rows' event time in µs, which :func:`~lakehouse.join.asof.join_as_of`
#: expects on row-time input.
PROBE_TIME_US = "_probe_time_us"


def scan_files(build: DataFrame) -> tuple[frozenset[str], bool]:
    """``build``'s input files, and whether ``build`` is exactly a parquet scan of them
    (:func:`is_plain_scan`). A scan :func:`lakehouse.delta.read_files` made is one by
    construction, and its files are known without asking Spark again."""
    from lakehouse.delta import scanned_files

    files = scanned_files(build)
    if files is not None:
        return files, True
    files = frozenset(build.inputFiles())
    return files, is_plain_scan(build, files)


def is_plain_scan(build: DataFrame, files: frozenset[str]) -> bool:
    """Whether ``build`` is exactly a parquet scan of ``files`` with its schema (so that a scan
    of a subset of them is the same rows restricted to those files). Spark reports the files
    as URIs (``file:///...``) while the reader may have been given plain local paths, and
    the plan keeps the strings it was given, so both spellings are tried."""
    if not files:
        return False
    listed = sorted(files)
    spellings = [listed]
    local = [f.removeprefix("file://") if f.startswith("file:///") else f for f in listed]
    if local != listed:
        spellings.append(local)
    reader = build.sparkSession.read.schema(build.schema)
    return any(build.sameSemantics(reader.parquet(*paths)) for paths in spellings)
