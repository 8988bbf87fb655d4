"""Watermarks that carry both event time and processing time (FLIP-326), in pure Python.

This package never imports Spark, nor anything from lakehouse except ``lakehouse.errors``.
Every public name is re-exported here from the module that defines it.

>>> from lakehouse.time import CombinedWatermark, Watermark
>>> join = CombinedWatermark()
>>> join.input_watermark("probe", Watermark(1_000)) is None  # build has sent nothing: MIN
True
>>> join.input_watermark("build", Watermark(2_000))
Watermark(timestamp=1000, use_processing_time=False)
"""

from lakehouse.errors import WatermarkError as WatermarkError
from lakehouse.time.clock import Clock as Clock
from lakehouse.time.clock import ManualClock as ManualClock
from lakehouse.time.clock import SystemClock as SystemClock
from lakehouse.time.generators import (
    BoundedOutOfOrdernessWatermarks as BoundedOutOfOrdernessWatermarks,
)
from lakehouse.time.generators import ProcessingTimeWatermarks as ProcessingTimeWatermarks
from lakehouse.time.generators import (
    PunctuatedWatermarkGenerator as PunctuatedWatermarkGenerator,
)
from lakehouse.time.generators import WatermarkGenerator as WatermarkGenerator
from lakehouse.time.generators import WatermarksWithIdleness as WatermarksWithIdleness
from lakehouse.time.output import RecordingWatermarkOutput as RecordingWatermarkOutput
from lakehouse.time.output import WatermarkOutput as WatermarkOutput
from lakehouse.time.strategy import TimestampAssigner as TimestampAssigner
from lakehouse.time.strategy import WatermarkStrategy as WatermarkStrategy
from lakehouse.time.valve import ChannelState as ChannelState
from lakehouse.time.valve import CombinedWatermark as CombinedWatermark
from lakehouse.time.valve import JoinInput as JoinInput
from lakehouse.time.valve import WatermarkValve as WatermarkValve
from lakehouse.time.watermark import WATERMARK_MAX as WATERMARK_MAX
from lakehouse.time.watermark import WATERMARK_MIN as WATERMARK_MIN
from lakehouse.time.watermark import Watermark as Watermark
from lakehouse.time.watermark import WatermarkStatus as WatermarkStatus
from lakehouse.time.watermark import format_epoch_ms as format_epoch_ms

__all__ = [
    "WATERMARK_MAX",
    "WATERMARK_MIN",
    "BoundedOutOfOrdernessWatermarks",
    "ChannelState",
    "Clock",
    "CombinedWatermark",
    "JoinInput",
    "ManualClock",
    "ProcessingTimeWatermarks",
    "PunctuatedWatermarkGenerator",
    "RecordingWatermarkOutput",
    "SystemClock",
    "TimestampAssigner",
    "Watermark",
    "WatermarkError",
    "WatermarkGenerator",
    "WatermarkOutput",
    "WatermarkStatus",
    "WatermarkStrategy",
    "WatermarkValve",
    "WatermarksWithIdleness",
    "format_epoch_ms",
]
