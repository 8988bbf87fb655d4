"""What the quality report reads: the join's tables pinned at one consistent pair of
versions, the build table's snapshot marker, and the frames the suites validate.

Consistency: the pending table is pinned at its latest version, and the output table at the
newest version written by a batch at or before the pending version's batch (the join writes
output before pending), so a pipeline running during the report cannot make a released row
look duplicated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakehouse import delta
from lakehouse.dimension.layout import (
    PROP_PRIMARY_KEY,
    PROP_SNAPSHOT_COMPLETE,
    PROP_SNAPSHOT_COMPLETED_VERSION,
    PROP_SNAPSHOT_FIRST_COMPLETED_VERSION,
    PROP_SNAPSHOT_STATE,
)
from lakehouse.errors import ConfigError, TableNotFoundError
from lakehouse.join.layout import (
    ARRIVAL_BATCH,
    ARRIVED_AT,
    BATCH_ID,
    BUILD_VERSION,
    JOIN_MODE,
    MATCHED,
)
from lakehouse.quality import _ledger
from lakehouse.quality._ledger import Accounting, Ledger

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


@dataclass(frozen=True, slots=True)
class TableVersion:
    """A table the report read and the version it read (None: the table does not exist or
    holds nothing of the validated batches)."""

    uri: str
    version: int | None


# Join lineage columns the report reads (lakehouse.join.layout).
_MATCHED = MATCHED
_BUILD_VERSION = BUILD_VERSION
_JOIN_MODE = JOIN_MODE
_BATCH_ID = BATCH_ID
_ARRIVED_AT = ARRIVED_AT
_ARRIVAL_BATCH = ARRIVAL_BATCH


# ------------------------------------------------------------------------------ versions


@dataclass(frozen=True, slots=True)
class Pinned:
    """The table versions a run validates, and what was read from metadata to choose them."""

    output_table: str
    output_version: int | None
    pending_table: str
    pending_version: int
    pending_schema: StructType
    ledger: Ledger
    build_table: str
    build: BuildMarker
    dead_letter_table: str | None
    dead_letter_version: int | None
    id_columns: tuple[str, ...]  # probe id first, then key and time columns

    def tables(self) -> dict[str, TableVersion]:
        tables = {
            "output": TableVersion(self.output_table, self.output_version),
            "pending": TableVersion(self.pending_table, self.pending_version),
            "build": TableVersion(self.build_table, self.build.version),
        }
        if self.dead_letter_table:
            tables["dead_letter"] = TableVersion(self.dead_letter_table, self.dead_letter_version)
        return tables


def pin_tables(
    *,
    output_table: str,
    pending_table: str,
    build_table: str,
    dead_letter_table: str | None,
    probe_id: str,
    probe_key: Sequence[str],
    probe_time: str | None,
) -> Pinned:
    """Choose the versions to validate and check the named columns (metadata only).

    Pending at its latest version, output at the newest version of a batch at or before the
    pending version's last batch (see the module docstring), build and dead-letter at their
    latest versions.
    """
    if not delta.table_exists(pending_table):
        raise TableNotFoundError(
            f"no pending table at '{pending_table}': the quality report needs the join's "
            "pending table (pending_table); check the path or run the join first",
            table_uri=pending_table,
        )
    ledger = _ledger.read_ledger(
        pending_table, output_table=output_table, dead_letter_table=dead_letter_table
    )
    pending_version = (
        ledger.version if ledger.version is not None else delta.latest_version(pending_table)
    )
    output_version = ledger.output_version
    dead_letter_version = (
        delta.latest_version(dead_letter_table)
        if dead_letter_table and delta.table_exists(dead_letter_table)
        else None
    )
    id_columns = tuple(dict.fromkeys([probe_id, *probe_key, *([probe_time] if probe_time else [])]))
    settings = {
        **({probe_time: "probe_time"} if probe_time else {}),
        **dict.fromkeys(probe_key, "probe_key"),
        probe_id: "probe_id",
    }
    pending_schema = delta.table_schema(pending_table, version=pending_version)
    require_columns(
        "pending",
        pending_table,
        pending_schema.fieldNames(),
        {**settings, _ARRIVED_AT: "pending_table", _ARRIVAL_BATCH: "pending_table"},
    )
    if output_version is not None:
        require_columns(
            "output",
            output_table,
            delta.table_schema(output_table, version=output_version).fieldNames(),
            {
                **settings,
                **dict.fromkeys((_MATCHED, _BUILD_VERSION, _JOIN_MODE, _BATCH_ID), "output_table"),
            },
        )
    return Pinned(
        output_table=output_table,
        output_version=output_version,
        pending_table=pending_table,
        pending_version=pending_version,
        pending_schema=pending_schema,
        ledger=ledger,
        build_table=build_table,
        build=build_marker(build_table),
        dead_letter_table=dead_letter_table,
        dead_letter_version=dead_letter_version,
        id_columns=id_columns,
    )


# ---------------------------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True)
class BuildMarker:
    version: int | None
    complete: bool
    completed_version: int | None
    properties: Mapping[str, str]
    key: tuple[str, ...] = ()  # lakehouse.primaryKey


def build_marker(uri: str) -> BuildMarker:
    """The build table's snapshot marker at its latest version.

    The version no processing-time row may be older than is the one at which the snapshot
    first completed (``lakehouse.snapshot.firstCompletedVersion``): a later re-snapshot moves
    ``completedVersion`` forward, but rows joined before it were joined against a complete
    dimension, and during a re-snapshot the join stays on the last complete version. It counts
    while the marker is set or a re-snapshot runs; tables written before that property
    existed fall back to ``completedVersion`` when the marker is set."""
    if not delta.table_exists(uri):
        return BuildMarker(None, False, None, {})
    version = delta.latest_version(uri)
    props = delta.get_properties(uri, version=version)
    marker = {k: v for k, v in props.items() if k.startswith("lakehouse.snapshot.")}
    complete = props.get(PROP_SNAPSHOT_COMPLETE, "false").strip().lower() == "true"
    first = props.get(PROP_SNAPSHOT_FIRST_COMPLETED_VERSION, "").strip()
    raw = props.get(PROP_SNAPSHOT_COMPLETED_VERSION, "").strip()
    # a re-snapshot clears `complete` but the join stays on the last complete version; a
    # marker taken back in any other way means no processing-time row may exist
    resnapshot = props.get(PROP_SNAPSHOT_STATE, "").strip() == "resnapshot"
    completed: int | None = None
    if (complete or resnapshot) and first.lstrip("-").isdigit():
        completed = int(first)
    elif complete and raw.lstrip("-").isdigit():
        completed = int(raw)
    key = tuple(k.strip() for k in props.get(PROP_PRIMARY_KEY, "").split(",") if k.strip())
    return BuildMarker(version, completed is not None, completed, marker, key)


def accounting_rows(a: Accounting) -> tuple[list[tuple[int | None, ...]], StructType]:
    """The accounting as one row (the frame ``probe_rows_accounted`` validates)."""
    from pyspark.sql.types import LongType, StructField, StructType

    values = {
        "arrived": a.arrived,
        "accounted": a.accounted,
        "baseline": a.baseline,
        "arrived_sum": a.arrived_sum,
        "released_sum": a.released_sum,
        "dead_lettered_sum": a.dead_lettered_sum,
        "malformed": a.malformed,
        "pending_rows": a.pending_rows,
        "pending_rows_recorded": a.pending_rows_recorded,
        "batches": a.batches,
    }
    schema = StructType([StructField(k, LongType(), True) for k in values])
    return [tuple(values.values())], schema


def watermark_rows(ledger: Ledger) -> tuple[list[tuple[Any, ...]], StructType]:
    """The combined watermark of each batch beside the previous one, with their order (the
    frame ``watermark_monotonic`` validates)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    orders = _ledger.watermark_orders(r.combined for r in ledger.records)
    rows: list[tuple[Any, ...]] = []
    previous = None
    for r in ledger.records:
        rows.append(
            (
                r.batch_id,
                r.version,
                str(r.combined),
                None if previous is None else str(previous),
                orders[r.combined],
                None if previous is None else orders[previous],
                str(r.probe),
                str(r.build),
            )
        )
        previous = r.combined
    schema = StructType(
        [
            StructField("batch_id", LongType(), False),
            StructField("version", LongType(), False),
            StructField("combined", StringType(), False),
            StructField("previous_combined", StringType(), True),
            StructField("combined_order", LongType(), False),
            StructField("previous_combined_order", LongType(), True),
            StructField("probe", StringType(), False),
            StructField("build", StringType(), False),
        ]
    )
    return rows, schema


def require_columns(
    table: str, uri: str, available: Sequence[str], required: Mapping[str, str]
) -> None:
    """Raise ConfigError naming the setting of the first required column that is missing.

    ``required`` maps each column to the setting that names it."""
    missing = [c for c in required if c not in available]
    if missing:
        raise ConfigError(
            f"{table} table '{uri}' has no column(s) {missing} (columns: {sorted(available)}); "
            "check probe_id, probe_key and probe_time against the join's configuration, and "
            f"that '{uri}' is the join's {table} table",
            setting=required[missing[0]],
        )
