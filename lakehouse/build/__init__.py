"""The versioned build table: CDC sink, snapshot marker, build watermark."""

from lakehouse.build.marker import heal_marker as heal_marker
from lakehouse.build.marker import set_marker as set_marker
from lakehouse.build.sink import BatchReport as BatchReport
from lakehouse.build.sink import BuildSink as BuildSink
from lakehouse.build.sink import BuildTarget as BuildTarget
from lakehouse.build.sink import TargetReport as TargetReport

__all__ = ["BatchReport", "BuildSink", "BuildTarget", "TargetReport", "heal_marker", "set_marker"]
