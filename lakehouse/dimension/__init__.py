"""The versioned build table: CDC sink, snapshot marker and its signals, build watermark."""

from lakehouse.dimension.marker import SnapshotStatus as SnapshotStatus
from lakehouse.dimension.marker import heal_marker as heal_marker
from lakehouse.dimension.marker import operator_complete as operator_complete
from lakehouse.dimension.marker import set_marker as set_marker
from lakehouse.dimension.marker import snapshot_status as snapshot_status
from lakehouse.dimension.signals import SnapshotOptions as SnapshotOptions
from lakehouse.dimension.sink import BuildSink as BuildSink
from lakehouse.dimension.targets import BatchReport as BatchReport
from lakehouse.dimension.targets import BuildTarget as BuildTarget
from lakehouse.dimension.targets import TargetReport as TargetReport

__all__ = [
    "BatchReport",
    "BuildSink",
    "BuildTarget",
    "SnapshotOptions",
    "SnapshotStatus",
    "TargetReport",
    "heal_marker",
    "operator_complete",
    "set_marker",
    "snapshot_status",
]
