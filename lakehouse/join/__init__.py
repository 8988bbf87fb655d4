"""The temporal join: release planning (valve), as-of kernel, pending state, output sink."""

from lakehouse.join.build_channel import BuildChannelState as BuildChannelState
from lakehouse.join.build_channel import read_build_channel as read_build_channel
from lakehouse.join.operator import JoinBatchReport as JoinBatchReport
from lakehouse.join.operator import TemporalJoin as TemporalJoin
from lakehouse.join.options import JoinOptions as JoinOptions
from lakehouse.join.state import ReleasePlan as ReleasePlan

__all__ = [
    "BuildChannelState",
    "JoinBatchReport",
    "JoinOptions",
    "ReleasePlan",
    "TemporalJoin",
    "read_build_channel",
]
