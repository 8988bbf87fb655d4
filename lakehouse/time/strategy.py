"""WatermarkStrategy: a timestamp assigner plus a watermark generator factory (cf. Flink's).

A strategy is an immutable option object: it describes how an input's watermarks are made and
builds a fresh generator for each run. The probe side of the join takes one.

>>> from lakehouse.time.output import RecordingWatermarkOutput
>>> strategy = WatermarkStrategy.for_bounded_out_of_orderness(5_000).with_timestamp_assigner(
...     lambda row: row["ts_ms"]
... )
>>> gen, out = strategy.create_watermark_generator(), RecordingWatermarkOutput()
>>> row = {"ts_ms": 60_000}
>>> gen.on_event(row, strategy.extract_timestamp(row), out)
>>> gen.on_periodic_emit(out)
>>> out.current_watermark.timestamp  # 60_000 - 5_000 - 1
54999
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from lakehouse.time.clock import Clock
from lakehouse.time.generators import (
    BoundedOutOfOrdernessWatermarks,
    ProcessingTimeWatermarks,
    WatermarkGenerator,
    WatermarksWithIdleness,
)

T = TypeVar("T")

TimestampAssigner = Callable[[T], int]
"""Returns an event's timestamp in epoch milliseconds (cf. Flink's ``TimestampAssigner``)."""


@dataclass(frozen=True, slots=True)
class WatermarkStrategy(Generic[T]):
    """How one input's timestamps and watermarks are made (cf. Flink's WatermarkStrategy).

    Build one with a ``for_*`` / ``no_watermarks`` constructor, then refine it with
    :meth:`with_timestamp_assigner` and :meth:`with_idleness`; each returns a new strategy.

    Attributes:
        generator_factory: Makes a fresh generator (one per run; generators hold state).
        timestamp_assigner: Returns an event's timestamp. ``None`` means the events *are*
            their timestamps (ints), which is how the join feeds a micro-batch's max event time.
        idle_timeout_ms: If set, generators are wrapped in :class:`WatermarksWithIdleness`.

    Invariants (checked at construction): ``generator_factory`` is callable, and
    ``idle_timeout_ms`` is ``None`` or a positive int.

    >>> strategy = WatermarkStrategy.no_watermarks().with_idleness(60_000)
    >>> strategy.idle_timeout_ms
    60000
    >>> strategy.create_watermark_generator()
    WatermarksWithIdleness(ProcessingTimeWatermarks(), idle_timeout_ms=60000)
    """

    generator_factory: Callable[[], WatermarkGenerator[T]]
    timestamp_assigner: TimestampAssigner[T] | None = None
    idle_timeout_ms: int | None = None

    def __post_init__(self) -> None:
        if not callable(self.generator_factory):
            raise TypeError(
                f"generator_factory must be a callable that returns a WatermarkGenerator, got "
                f"{type(self.generator_factory).__name__}."
            )
        if self.timestamp_assigner is not None and not callable(self.timestamp_assigner):
            raise TypeError(
                f"timestamp_assigner must be callable, got "
                f"{type(self.timestamp_assigner).__name__}."
            )
        if self.idle_timeout_ms is not None:
            _check_ms("idle_timeout_ms", self.idle_timeout_ms)
            if self.idle_timeout_ms <= 0:
                raise ValueError(
                    f"idle_timeout_ms={self.idle_timeout_ms} must be > 0 (as in Flink); to "
                    f"never go idle, do not call with_idleness."
                )

    # -- constructors -----------------------------------------------------------------------

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness_ms: int) -> WatermarkStrategy[Any]:
        """Event time, with events up to ``max_out_of_orderness_ms`` late.

        Emits ``max_ts - max_out_of_orderness_ms - 1`` (see
        :class:`~lakehouse.time.BoundedOutOfOrdernessWatermarks`).

        Raises:
            ValueError: If ``max_out_of_orderness_ms`` is negative (checked here, not later).
        """
        _check_ms("max_out_of_orderness_ms", max_out_of_orderness_ms)
        if max_out_of_orderness_ms < 0:
            raise ValueError(
                f"max_out_of_orderness_ms={max_out_of_orderness_ms} must be >= 0; use 0 for "
                f"ascending timestamps (for_monotonous_timestamps)."
            )
        return WatermarkStrategy(
            functools.partial(BoundedOutOfOrdernessWatermarks, max_out_of_orderness_ms)
        )

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy[Any]:
        """Event time with ascending timestamps: bounded out-of-orderness with 0, emitting
        ``max_ts - 1`` (more events with ``max_ts`` itself may still come)."""
        return WatermarkStrategy.for_bounded_out_of_orderness(0)

    @staticmethod
    def no_watermarks() -> WatermarkStrategy[Any]:
        """Processing time: emits ``Watermark.PROCESSING_TIME``, as FLIP-326 redefines
        "no watermarks"."""
        return WatermarkStrategy(ProcessingTimeWatermarks)

    @staticmethod
    def for_generator(factory: Callable[[], WatermarkGenerator[T]]) -> WatermarkStrategy[T]:
        """Any generator, e.g. a :class:`~lakehouse.time.PunctuatedWatermarkGenerator`.

        Args:
            factory: Makes a fresh generator on each call.

        >>> from lakehouse.time.generators import PunctuatedWatermarkGenerator
        >>> strategy = WatermarkStrategy.for_generator(
        ...     lambda: PunctuatedWatermarkGenerator.when(lambda e: e.get("marker", False))
        ... )
        >>> type(strategy.create_watermark_generator()).__name__
        'PunctuatedWatermarkGenerator'
        """
        return WatermarkStrategy(factory)

    # -- refinements ------------------------------------------------------------------------

    def with_timestamp_assigner(self, assigner: TimestampAssigner[T]) -> WatermarkStrategy[T]:
        """A copy that takes event timestamps from ``assigner``."""
        return dataclasses.replace(self, timestamp_assigner=assigner)

    def with_idleness(self, idle_timeout_ms: int) -> WatermarkStrategy[T]:
        """A copy whose generators mark the output idle after ``idle_timeout_ms`` without
        events, and active again on the next event (see
        :class:`~lakehouse.time.WatermarksWithIdleness`).

        Raises:
            ValueError: If ``idle_timeout_ms`` is not positive.
        """
        return dataclasses.replace(self, idle_timeout_ms=idle_timeout_ms)

    # -- use --------------------------------------------------------------------------------

    def create_watermark_generator(self, *, clock: Clock | None = None) -> WatermarkGenerator[T]:
        """A fresh generator for one run.

        Args:
            clock: The clock for idleness (the system clock if ``None``); ignored without
                :meth:`with_idleness`.
        """
        generator = self.generator_factory()
        if self.idle_timeout_ms is None:
            return generator
        return WatermarksWithIdleness(generator, self.idle_timeout_ms, clock=clock)

    def extract_timestamp(self, event: T) -> int:
        """The event's timestamp in epoch milliseconds.

        Raises:
            TypeError: If the assigner (or, without one, the event itself) is not an int.

        >>> WatermarkStrategy.for_monotonous_timestamps().extract_timestamp(1_000)
        1000
        """
        timestamp = event if self.timestamp_assigner is None else self.timestamp_assigner(event)
        if not isinstance(timestamp, int) or isinstance(timestamp, bool):
            source = (
                "the event itself (no timestamp assigner is set; call with_timestamp_assigner)"
                if self.timestamp_assigner is None
                else "the timestamp assigner's result"
            )
            raise TypeError(
                f"Event timestamp must be an int of epoch milliseconds, but {source} is "
                f"{type(timestamp).__name__} {timestamp!r}."
            )
        return timestamp


def _check_ms(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int of milliseconds, got {type(value).__name__}.")
