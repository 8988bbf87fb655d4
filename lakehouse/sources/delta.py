"""A Delta table as a stream of probe records, through Delta's own streaming source.

:func:`lakehouse.sources.read_delta_stream` opens ``spark.readStream.format("delta")`` on a
table (its catalog name, or its path) and turns each row into a raw record
(:data:`~lakehouse.sources.schema.RAW_SCHEMA`), so the join reads a bronze Delta table the
way it reads a Kafka topic: ``value`` is the row as a JSON object (:func:`rows_as_records`),
parsed by the join against ``probe_schema`` like any other record, so a column that
contradicts it is a dead letter with the reason and the row kept whole.

**Positions.** Delta's streaming source gives no position per row (no offset, and its
micro-batches expose no ``_metadata`` columns), and a replayed batch may read the same rows
split over files differently. A row's position is therefore a hash of its content:
``partition`` the 32-bit Murmur3 hash of ``value`` and ``offset`` its 64-bit xxHash, both
deterministic, so a replay after a crash sees every row at the position it had, and the
join's replay makes the same decisions (exactly once, as with Kafka). Two rows with the same
content are one position: they are joined, kept pending and evicted together, and come out
as the two rows they are. Equal-time rows are ordered by this position, not by commit order.

**Changes in the table.** Delta's source streams appends. A commit that updates or deletes
rows fails the query (``DELTA_SOURCE_TABLE_IGNORE_CHANGES``), which the runner reports in one
line (:func:`explain_failure`); with ``skip_change_commits`` such commits are skipped whole:
rows already joined stay in the output as they were, and rows an update rewrote are not
joined again. ``ignore_deletes`` skips commits that only delete (a retention job that drops
old partitions).

Options (:class:`DeltaSourceOptions`) are Delta's own: ``startingVersion``,
``startingTimestamp``, ``maxFilesPerTrigger``, ``maxBytesPerTrigger``, ``skipChangeCommits``,
``ignoreDeletes``; the starting point is used only when the checkpoint is new.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from lakehouse.delta.names import in_catalog, is_catalog_name
from lakehouse.errors import ConfigError, SourceError, TableNotFoundError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DELTA_SOURCE_NAME: Final = "delta"

#: Delta's error classes for a commit the streaming source cannot pass on as appends.
_CHANGE_ERRORS: Final = ("DELTA_SOURCE_TABLE_IGNORE_CHANGES", "DELTA_SOURCE_IGNORE_DELETE")

#: ``to_json``'s time formats: microseconds kept (Spark's default writes milliseconds).
_JSON_OPTIONS: Final = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
}


@dataclass(frozen=True)
class DeltaSourceOptions:
    """How to stream a Delta table's appends (Delta's source options, checked here).

    Attributes:
        table: the table's catalog name (``bronze.orders``) or its location (a path or URI).
        starting_version: the first version to read, or ``"latest"`` (only what is committed
            after the query starts); default the whole table, then what is appended. Used only
            when the checkpoint is new.
        starting_timestamp: the first commit at or after this time (``2026-01-01`` or an ISO
            timestamp), instead of ``starting_version``.
        max_files_per_trigger: most new files per micro-batch (Delta's default: 1000).
        max_bytes_per_trigger: soft bound on a micro-batch's input (``"1g"``, ``"512m"``).
        skip_change_commits: skip commits that update or delete rows instead of failing.
        ignore_deletes: skip commits that only delete rows (partitions dropped by retention).

    Raises:
        ConfigError: a setting is out of range, or two of them contradict each other.
    """

    table: str
    starting_version: int | Literal["latest"] | None = None
    starting_timestamp: str | None = None
    max_files_per_trigger: int | None = None
    max_bytes_per_trigger: str | None = None
    skip_change_commits: bool = False
    ignore_deletes: bool = False

    def __post_init__(self) -> None:
        if not self.table.strip():
            raise ConfigError(
                "source 'delta' needs delta_table (a catalog name or a path)",
                setting="delta_table",
            )
        if self.starting_version is not None and self.starting_timestamp is not None:
            raise ConfigError(
                "give starting_version or starting_timestamp for a Delta source, not both",
                setting="starting_version",
            )
        if isinstance(self.starting_version, int) and self.starting_version < 0:
            raise ConfigError(
                f"starting_version {self.starting_version} is negative; give a table version "
                "(0 is the first) or 'latest'",
                setting="starting_version",
            )
        if self.max_files_per_trigger is not None and self.max_files_per_trigger < 1:
            raise ConfigError(
                f"max_files_per_trigger {self.max_files_per_trigger} must be at least 1",
                setting="max_records_per_trigger",
            )
        size = self.max_bytes_per_trigger
        if size is not None and not re.fullmatch(r"[0-9]+\s*[kKmMgGtT]?[bB]?", size.strip()):
            raise ConfigError(
                f"max_bytes_per_trigger {size!r} is not a size; write it as 536870912, '512m' "
                "or '1g'",
                setting="max_bytes_per_trigger",
            )

    @property
    def is_name(self) -> bool:
        """Whether :attr:`table` is a catalog name (see :func:`is_catalog_name`)."""
        return is_catalog_name(self.table)

    @property
    def spark_options(self) -> dict[str, str]:
        """The options of Spark's Delta source."""
        options: dict[str, str] = {}
        if self.starting_version is not None:
            options["startingVersion"] = str(self.starting_version)
        if self.starting_timestamp is not None:
            options["startingTimestamp"] = self.starting_timestamp
        if self.max_files_per_trigger is not None:
            options["maxFilesPerTrigger"] = str(self.max_files_per_trigger)
        if self.max_bytes_per_trigger is not None:
            options["maxBytesPerTrigger"] = self.max_bytes_per_trigger.strip()
        if self.skip_change_commits:
            options["skipChangeCommits"] = "true"
        if self.ignore_deletes:
            options["ignoreDeletes"] = "true"
        return options


def open_delta_stream(spark: SparkSession, options: DeltaSourceOptions) -> DataFrame:
    """The raw-record stream of a Delta table (see the module docstring).

    Raises:
        TableNotFoundError: no table of that name in the catalog, or no Delta table at that
            location.
    """
    from lakehouse import delta

    reader = spark.readStream.format(DELTA_SOURCE_NAME).options(**options.spark_options)
    if options.is_name:
        if not in_catalog(spark, options.table, setting="join.delta_table"):
            here = delta.table_exists(f"./{options.table}", spark=spark)
            fix = (
                f"a Delta table is in the directory ./{options.table}: write "
                f"'./{options.table}' to read it by path"
                if here
                else "check the name, or give the table's path (a name is schema.table or "
                "catalog.schema.table; write a directory whose name has a dot as ./name)"
            )
            raise TableNotFoundError(
                f"no table {options.table!r} in Spark's catalog (join.delta_table); {fix}",
                table_uri=options.table,
            )
        rows = reader.table(options.table)
    else:
        if not delta.table_exists(options.table, spark=spark):
            raise TableNotFoundError(
                f"no Delta table at {options.table!r} (join.delta_table): check the path, or "
                "create the table first",
                table_uri=options.table,
            )
        rows = reader.load(options.table)
    return rows_as_records(rows, topic=options.table)


def rows_as_records(rows: DataFrame, *, topic: str) -> DataFrame:
    """Rows of any (streaming) DataFrame as raw records: ``value`` the row as a JSON object
    (times in UTC with microseconds), ``topic`` as given, ``partition`` and ``offset`` hashes
    of the value (the row's position, see the module docstring), no key and no timestamp.

    The join parses ``value`` against its ``probe_schema``, so ``rows`` may have more columns
    than the join reads; they stay in ``value`` (and in a dead letter's raw record).
    """
    from pyspark.sql import functions as F

    from lakehouse.sources.schema import TIMESTAMP_TYPE_NONE

    value = F.to_json(F.struct(*[F.col(f"`{c}`") for c in rows.columns]), _JSON_OPTIONS)
    return rows.select(value.cast("binary").alias("value")).select(
        F.lit(None).cast("binary").alias("key"),
        F.col("value"),
        F.lit(topic).alias("topic"),
        F.hash("value").alias("partition"),
        F.xxhash64("value").alias("offset"),
        F.lit(None).cast("timestamp").alias("timestamp"),
        F.lit(TIMESTAMP_TYPE_NONE).cast("int").alias("timestampType"),
    )


def explain_failure(error: BaseException, options: DeltaSourceOptions) -> SourceError | None:
    """The one-line :class:`SourceError` for a failure of Delta's source that a setting
    answers (a commit that changed rows), or None for any other failure.

    >>> e = Exception("[DELTA_SOURCE_TABLE_IGNORE_CHANGES] Detected a data update ... at "
    ...               "version 3.")
    >>> print(explain_failure(e, DeltaSourceOptions(table="bronze.orders")))
    Delta table 'bronze.orders' (join.delta_table) has a commit that updates or deletes rows ...
    """
    text = str(error)
    if not any(code in text for code in _CHANGE_ERRORS):
        return None
    version = re.search(r"at version (\d+)", text)
    at = f" (version {version.group(1)})" if version else ""
    return SourceError(
        f"Delta table {options.table!r} (join.delta_table) has a commit that updates or deletes "
        f"rows{at}; the join streams appends only. Set join.skip_change_commits = true to skip "
        "such commits (rows already joined stay as they are; rewritten rows are not joined "
        "again), or restart from a new checkpoint with join.starting_version after it"
    )
