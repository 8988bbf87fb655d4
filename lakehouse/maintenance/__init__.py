"""Bounded state for the tables the pipelines grow: compaction of a build table's version log
(:mod:`.compact`) and a vacuum that keeps the output's ``_build_version`` lineage readable
(:mod:`.vacuum`). The pending table's bound lives in the join (``JoinOptions``)."""

from lakehouse.maintenance.compact import CompactionResult as CompactionResult
from lakehouse.maintenance.compact import compact as compact
from lakehouse.maintenance.compact import compacted as compacted
from lakehouse.maintenance.compact import horizon_from_retention as horizon_from_retention
from lakehouse.maintenance.vacuum import VacuumResult as VacuumResult
from lakehouse.maintenance.vacuum import lineage_versions as lineage_versions
from lakehouse.maintenance.vacuum import vacuum_table as vacuum_table

__all__ = [
    "CompactionResult",
    "VacuumResult",
    "compact",
    "compacted",
    "horizon_from_retention",
    "lineage_versions",
    "vacuum_table",
]
