"""Watermark generators (cf. Flink's ``org.apache.flink.api.common.eventtime``).

A generator sees every event with its timestamp (``on_event``) and is asked periodically for a
watermark (``on_periodic_emit``); it writes to a :class:`~lakehouse.time.WatermarkOutput`. The
join calls ``on_event`` once per micro-batch with the batch's max event time, then
``on_periodic_emit``, and reads the output back.

Periodic generators (:class:`BoundedOutOfOrdernessWatermarks`, :class:`ProcessingTimeWatermarks`)
emit only in ``on_periodic_emit``; punctuated ones (:class:`PunctuatedWatermarkGenerator`) emit
only in ``on_event``. :class:`WatermarksWithIdleness` wraps either and adds idleness.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar, runtime_checkable

from lakehouse.time.clock import Clock, SystemClock
from lakehouse.time.output import WatermarkOutput
from lakehouse.time.watermark import WATERMARK_MIN, Watermark

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


@runtime_checkable
class WatermarkGenerator(Protocol[T_contra]):
    """Decides watermarks from events (cf. Flink's ``WatermarkGenerator``)."""

    def on_event(self, event: T_contra, event_timestamp: int, output: WatermarkOutput) -> None:
        """Called for every event, with its timestamp in epoch milliseconds."""
        ...

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        """Called periodically (the join: once per micro-batch, after its events)."""
        ...


class BoundedOutOfOrdernessWatermarks:
    """Event time that may arrive up to ``max_out_of_orderness_ms`` late (cf. Flink's
    BoundedOutOfOrdernessWatermarks).

    Holds the largest event timestamp seen. Emits, on each periodic emit,
    ``Watermark(max_ts - max_out_of_orderness_ms - 1)``: the ``- 1`` because an event with
    exactly ``max_ts - max_out_of_orderness_ms`` may still come. Before any event it emits
    ``Watermark.MIN`` (the initial maximum is chosen so that the formula gives ``WATERMARK_MIN``,
    as in Flink).

    Args:
        max_out_of_orderness_ms: How late an event may be, ``>= 0``. With 0, timestamps are
            expected to ascend (Flink's ``AscendingTimestampsWatermarks``).

    Raises:
        ValueError: If ``max_out_of_orderness_ms`` is negative.

    Worked example, bound 2, events with timestamps ``[1, 4, 3, 9]``: after ``1`` the watermark
    is ``1 - 2 - 1 = -2``; after ``4`` it is ``1``; ``3`` is late but allowed (``3 > 1``) and
    changes nothing; after ``9`` it is ``6``: events with ``ts <= 6`` are complete.

    >>> from lakehouse.time.output import RecordingWatermarkOutput
    >>> gen, out = BoundedOutOfOrdernessWatermarks(2), RecordingWatermarkOutput()
    >>> for ts in [1, 4, 3, 9]:
    ...     gen.on_event(None, ts, out)
    ...     gen.on_periodic_emit(out)
    ...     print(out.current_watermark.timestamp)
    -2
    1
    1
    6
    """

    __slots__ = ("_max_timestamp", "_out_of_orderness_ms")

    def __init__(self, max_out_of_orderness_ms: int) -> None:
        self._out_of_orderness_ms = _non_negative_ms(
            "max_out_of_orderness_ms", max_out_of_orderness_ms
        )
        # Start so that the lowest watermark is exactly WATERMARK_MIN (as Flink does).
        self._max_timestamp = WATERMARK_MIN + self._out_of_orderness_ms + 1

    @property
    def max_out_of_orderness_ms(self) -> int:
        """The allowed lateness in milliseconds."""
        return self._out_of_orderness_ms

    def on_event(self, event: object, event_timestamp: int, output: WatermarkOutput) -> None:
        """Remember ``event_timestamp`` if it is the largest so far; emits nothing."""
        _check_timestamp(event_timestamp)
        self._max_timestamp = max(self._max_timestamp, event_timestamp)

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        """Emit ``Watermark(max_ts - max_out_of_orderness_ms - 1)``."""
        output.emit_watermark(Watermark(self._max_timestamp - self._out_of_orderness_ms - 1))

    def __repr__(self) -> str:
        bound = self._out_of_orderness_ms
        return f"BoundedOutOfOrdernessWatermarks(max_out_of_orderness_ms={bound})"


class ProcessingTimeWatermarks:
    """The generator of "no watermarks", which per FLIP-326 means processing time.

    Emits ``Watermark.PROCESSING_TIME`` on each periodic emit, nothing on events. (Flink's
    ``NoWatermarksGenerator`` emits nothing at all; FLIP-326 changes it to this.)

    >>> from lakehouse.time.output import RecordingWatermarkOutput
    >>> out = RecordingWatermarkOutput()
    >>> ProcessingTimeWatermarks().on_periodic_emit(out)
    >>> str(out.current_watermark)
    'processing-time'
    """

    __slots__ = ()

    def on_event(self, event: object, event_timestamp: int, output: WatermarkOutput) -> None:
        """Ignore the event: processing time does not depend on events."""

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        """Emit ``Watermark.PROCESSING_TIME``."""
        output.emit_watermark(Watermark.PROCESSING_TIME)

    def __repr__(self) -> str:
        return "ProcessingTimeWatermarks()"


class PunctuatedWatermarkGenerator(Generic[T]):
    """Emits a watermark when an event carries one (a marker, a heartbeat, an end-of-batch row).

    Holds nothing but the extractor. On each event, calls ``extract(event, event_timestamp)``
    and emits the result unless it is ``None``; emits nothing on periodic emit.

    Args:
        extract: Returns the watermark an event carries, or ``None``.

    >>> from lakehouse.time.output import RecordingWatermarkOutput
    >>> gen = PunctuatedWatermarkGenerator.when(lambda event: event == "marker")
    >>> out = RecordingWatermarkOutput()
    >>> gen.on_event("row", 5, out)
    >>> gen.on_event("marker", 7, out)
    >>> out.emitted
    (Watermark(timestamp=7, use_processing_time=False),)
    """

    __slots__ = ("_extract",)

    def __init__(self, extract: Callable[[T, int], Watermark | None]) -> None:
        if not callable(extract):
            raise TypeError(f"extract must be callable, got {type(extract).__name__}.")
        self._extract = extract

    @classmethod
    def when(cls, predicate: Callable[[T], bool]) -> PunctuatedWatermarkGenerator[T]:
        """Emit ``Watermark(event_timestamp)`` for each event matching ``predicate``: the
        marker says that every event up to and including its own timestamp has arrived."""

        def extract(event: T, event_timestamp: int) -> Watermark | None:
            return Watermark(event_timestamp) if predicate(event) else None

        return cls(extract)

    def on_event(self, event: T, event_timestamp: int, output: WatermarkOutput) -> None:
        """Emit the watermark the event carries, if any."""
        _check_timestamp(event_timestamp)
        watermark = self._extract(event, event_timestamp)
        if watermark is not None:
            output.emit_watermark(watermark)

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        """Emit nothing: a punctuated generator speaks only when an event tells it to."""


class WatermarksWithIdleness(Generic[T]):
    """Adds idleness to a generator (cf. Flink's WatermarksWithIdleness).

    Holds the wrapped generator, the clock time of the last event (creation time before the
    first), and whether it has marked the output idle. On a periodic emit, if no event has come
    for ``idle_timeout_ms`` (``now - last_event >= idle_timeout_ms``) it marks the output idle
    and does not ask the wrapped generator; otherwise it delegates. The next event marks the
    output active again, then goes to the wrapped generator.

    Unlike Flink's ``IdlenessTimer``, which starts timing at the first periodic check that saw
    no activity, the timeout here runs from the last event itself: micro-batches are far apart,
    and Flink's way would add up to a whole batch interval to the timeout.

    Args:
        generator: The generator to wrap.
        idle_timeout_ms: How long without events makes the output idle, ``> 0``.
        clock: The clock that measures the timeout.

    Raises:
        ValueError: If ``idle_timeout_ms`` is not positive.

    Worked example, timeout 1000 ms:

    >>> from lakehouse.time.clock import ManualClock
    >>> from lakehouse.time.output import RecordingWatermarkOutput
    >>> clock, out = ManualClock(0), RecordingWatermarkOutput()
    >>> gen = WatermarksWithIdleness(BoundedOutOfOrdernessWatermarks(0), 1000, clock=clock)
    >>> gen.on_event(None, 10, out)
    >>> clock.set(999); gen.on_periodic_emit(out); out.is_idle  # 999 ms quiet: still active
    False
    >>> clock.set(1000); gen.on_periodic_emit(out); out.is_idle  # 1000 ms quiet: idle
    True
    >>> gen.on_event(None, 20, out); out.is_idle  # the next event: active again
    False
    """

    __slots__ = ("_clock", "_generator", "_idle", "_idle_timeout_ms", "_last_activity_ms")

    def __init__(
        self,
        generator: WatermarkGenerator[T],
        idle_timeout_ms: int,
        *,
        clock: Clock | None = None,
    ) -> None:
        if _non_negative_ms("idle_timeout_ms", idle_timeout_ms) == 0:
            raise ValueError(
                "idle_timeout_ms must be > 0 (as in Flink); to never go idle, do not call "
                "with_idleness."
            )
        self._generator = generator
        self._idle_timeout_ms = idle_timeout_ms
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._last_activity_ms = self._clock.now_ms()
        self._idle = False

    @property
    def idle_timeout_ms(self) -> int:
        """The timeout in milliseconds."""
        return self._idle_timeout_ms

    def on_event(self, event: T, event_timestamp: int, output: WatermarkOutput) -> None:
        """Record activity, mark the output active if this generator had marked it idle, and
        pass the event on."""
        self._last_activity_ms = self._clock.now_ms()
        if self._idle:
            self._idle = False
            output.mark_active()
        self._generator.on_event(event, event_timestamp, output)

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        """Mark the output idle after the timeout, else delegate to the wrapped generator."""
        if self._clock.now_ms() - self._last_activity_ms >= self._idle_timeout_ms:
            self._idle = True
            output.mark_idle()
        else:
            self._generator.on_periodic_emit(output)

    def __repr__(self) -> str:
        return (
            f"WatermarksWithIdleness({self._generator!r}, idle_timeout_ms={self._idle_timeout_ms})"
        )


def _non_negative_ms(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int of milliseconds, got {type(value).__name__}.")
    if value < 0:
        raise ValueError(f"{name}={value} must be >= 0 milliseconds.")
    return value


def _check_timestamp(event_timestamp: int) -> None:
    if not isinstance(event_timestamp, int) or isinstance(event_timestamp, bool):
        raise TypeError(
            f"event_timestamp must be an int of epoch milliseconds, got "
            f"{type(event_timestamp).__name__} {event_timestamp!r}; check the timestamp assigner."
        )
