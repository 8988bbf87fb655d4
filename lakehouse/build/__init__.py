"""The versioned build table: CDC sink, snapshot marker and its signals, build watermark."""

from lakehouse.build.marker import SnapshotStatus as SnapshotStatus
from lakehouse.build.marker import heal_marker as heal_marker
from lakehouse.build.marker import operator_complete as operator_complete
from lakehouse.build.marker import set_marker as set_marker
from lakehouse.build.marker import snapshot_status as snapshot_status
from lakehouse.build.signals import SnapshotOptions as SnapshotOptions
from lakehouse.build.sink import BatchReport as BatchReport
from lakehouse.build.sink import BuildSink as BuildSink
from lakehouse.build.sink import BuildTarget as BuildTarget
from lakehouse.build.sink import TargetReport as TargetReport

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
