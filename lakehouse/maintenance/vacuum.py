"""A vacuum that respects lineage (``lakehouse vacuum``).

Every output row records in ``_build_version`` the build table version it joined: time travel
to that version re-derives the row. A plain vacuum deletes the files of old versions once they
are older than the retention, and breaks that. This one keeps every version still needed
readable while it removes the rest: Delta's ``VACUUM ... USING INVENTORY`` is given every data
file of the table except those the kept versions read, so it cannot delete those:

* every ``_build_version`` value present in the configured output tables (the rows still in
  the output: what the output's own retention kept);
* the build version pinned by each output's newest batch plans (a batch replayed after a
  crash re-reads it, even when it released nothing);
* during a re-snapshot, ``lakehouse.snapshot.lastCompleteVersion`` (joins read it).

The latest version is always kept by vacuum itself. Files no commit references (a write that
failed) are deleted like removed ones once older than the retention, as Delta's vacuum does;
a write still running has newer files than any retention. The default is a dry run that
lists what would go.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakehouse import delta
from lakehouse.delta.maintenance import oldest_readable_version, vacuum
from lakehouse.dimension.layout import PROP_SNAPSHOT_LAST_COMPLETE, PROP_SNAPSHOT_STATE
from lakehouse.join.layout import BUILD_VERSION, META_PLAN

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_PLAN_HISTORY = 16
#: Commit metadata of a vacuum: the build versions it kept readable (the first 1,000).
META_KEPT_VERSIONS = delta.NAMESPACE + "keptVersions"


@dataclass(frozen=True, slots=True, kw_only=True)
class VacuumResult:
    """What a vacuum did (or, dry run, would do).

    Attributes:
        table_uri: the vacuumed table.
        dry_run: nothing was deleted.
        files: the files deleted (or that would be), relative to the table root.
        kept_versions: versions kept readable for lineage.
        oldest_referenced: the oldest build version the outputs reference (None: none).
        unreadable: referenced versions whose log is already gone (time travel to them was
            impossible before this vacuum; rows referencing them cannot be re-derived).
        retention_hours: the retention used (None: the table's default).
    """

    table_uri: str
    dry_run: bool
    files: tuple[str, ...]
    kept_versions: tuple[int, ...]
    oldest_referenced: int | None
    unreadable: tuple[int, ...]
    retention_hours: int | None


def lineage_versions(spark: SparkSession, build_table: str, output_uris: Sequence[str]) -> set[int]:
    """The build versions that must stay readable for the outputs' lineage (module docstring)."""
    from pyspark.sql import functions as F

    versions: set[int] = set()
    for uri in output_uris:
        if not delta.table_exists(uri):
            continue
        df = delta.read(spark, uri)
        if BUILD_VERSION in df.columns:
            rows = df.select(BUILD_VERSION).where(F.col(BUILD_VERSION).isNotNull())
            versions.update(int(r[0]) for r in rows.distinct().collect())
        for entry in delta.history(uri, limit=_PLAN_HISTORY):
            plan = entry.metadata.get(META_PLAN)
            if plan:
                pinned = json.loads(plan).get("buildVersion")
                if pinned is not None:
                    versions.add(int(pinned))
    if delta.table_exists(build_table):
        props = delta.get_properties(build_table)
        last_complete = props.get(PROP_SNAPSHOT_LAST_COMPLETE, "")
        if props.get(PROP_SNAPSHOT_STATE) == "resnapshot" and last_complete.isdigit():
            versions.add(int(last_complete))
    return versions


def vacuum_table(
    spark: SparkSession | None,
    uri: str,
    *,
    output_uris: Sequence[str] = (),
    retention_hours: int | None = None,
    dry_run: bool = True,
) -> VacuumResult:
    """Vacuum ``uri``, keeping readable every version the ``output_uris``' lineage needs.

    Args:
        spark: reads the outputs' ``_build_version`` (None when ``output_uris`` is empty).
        uri: the table to vacuum (a build table when ``output_uris`` is given).
        output_uris: output tables of joins that read ``uri``.
        retention_hours: remove files removed from the table longer ago than this; None: the
            table's ``delta.deletedFileRetentionDuration`` (7 days by default). A lower value
            than the table's is accepted (the operator's decision).
        dry_run: only list the files.
    """
    referenced: set[int] = set()
    if output_uris:
        assert spark is not None, "reading the outputs' lineage needs Spark"
        referenced = lineage_versions(spark, uri, output_uris)
    latest = delta.latest_version(uri)
    referenced = {v for v in referenced if v <= latest}
    floor = oldest_readable_version(uri) if referenced else 0
    keep = tuple(sorted(v for v in referenced if v >= floor))
    unreadable = tuple(sorted(v for v in referenced if v < floor))
    files = vacuum(
        uri,
        retention_hours=retention_hours,
        keep_versions=keep,
        dry_run=dry_run,
        metadata={delta.META_OPERATION: "vacuum", META_KEPT_VERSIONS: list(keep)[:1000]},
    )
    return VacuumResult(
        table_uri=uri,
        dry_run=dry_run,
        files=tuple(sorted(files)),
        kept_versions=keep,
        oldest_referenced=min(referenced) if referenced else None,
        unreadable=unreadable,
        retention_hours=retention_hours,
    )
