"""Where watermark generators send what they decide (cf. Flink's WatermarkOutput).

:class:`WatermarkOutput` is the protocol a generator writes to. :class:`RecordingWatermarkOutput`
is the implementation the join uses: it keeps the current watermark and idleness of one input,
never lets the watermark decrease (cf. Flink's ``WatermarkToDataOutput``), and records what it
emitted.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from lakehouse.errors import WatermarkError
from lakehouse.time.clock import Clock, SystemClock
from lakehouse.time.watermark import Watermark, WatermarkStatus, format_epoch_ms


@runtime_checkable
class WatermarkOutput(Protocol):
    """The sink of a :class:`~lakehouse.time.WatermarkGenerator`."""

    def emit_watermark(self, watermark: Watermark) -> None:
        """Emit a watermark; an implementation may swallow one that does not advance."""
        ...

    def mark_idle(self) -> None:
        """Mark the output idle: downstream valves leave it out until it is active again."""
        ...

    def mark_active(self) -> None:
        """Mark the output active again."""
        ...


class RecordingWatermarkOutput:
    """A :class:`WatermarkOutput` that keeps one input's watermark and idleness.

    Holds the current watermark (the largest accepted, ``initial`` before any), whether the
    output is idle, and the history of accepted watermarks and status changes, in order.

    Invariants (checked):

    * the current watermark never decreases: a watermark that is not larger is swallowed (not
      recorded), as Flink's ``WatermarkToDataOutput`` does;
    * after processing time, event time is an error (``WatermarkError``), as FLIP-326 specifies
      for ``WatermarkToDataOutput``; a processing-time watermark with a timestamp after the
      clock's now is an error too;
    * an accepted watermark marks an idle output active (as in Flink); a swallowed one does not.

    Args:
        initial: The watermark to start from, e.g. restored from the last micro-batch.
        clock: The clock against which processing-time timestamps are checked.

    Example, the join feeding each micro-batch's max event time as one event:

    >>> out = RecordingWatermarkOutput()
    >>> out.emit_watermark(Watermark(99))
    >>> out.emit_watermark(Watermark(50))  # smaller: swallowed
    >>> out.current_watermark, out.is_idle
    (Watermark(timestamp=99, use_processing_time=False), False)
    >>> out.mark_idle()
    >>> out.emit_watermark(Watermark(120))  # accepted: active again
    >>> [str(wm) for wm in out.emitted]
    ['1970-01-01T00:00:00.099Z', '1970-01-01T00:00:00.120Z']
    >>> out.history[1:3]
    (<WatermarkStatus.IDLE: 'idle'>, <WatermarkStatus.ACTIVE: 'active'>)
    """

    __slots__ = ("_clock", "_current", "_history", "_idle")

    def __init__(self, *, initial: Watermark = Watermark.MIN, clock: Clock | None = None) -> None:
        if not isinstance(initial, Watermark):
            raise TypeError(f"initial must be a Watermark, got {type(initial).__name__}.")
        self._current = initial
        self._idle = False
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._history: list[Watermark | WatermarkStatus] = []

    def emit_watermark(self, watermark: Watermark) -> None:
        """Accept ``watermark`` if it is larger than the current one, else swallow it.

        Raises:
            WatermarkError: On event time after processing time, or on a processing-time
                timestamp after the clock's now. Nothing is recorded.
        """
        if not isinstance(watermark, Watermark):
            raise TypeError(
                f"watermark must be a Watermark, got {type(watermark).__name__} {watermark!r}."
            )
        if self._current.use_processing_time and not watermark.use_processing_time:
            raise WatermarkError(
                f"Output received event-time watermark {watermark} after processing-time "
                f"watermark {self._current}; a stream that has switched to processing time may "
                f"not return to event time (FLIP-326). Fix the watermark generator."
            )
        if watermark.use_processing_time:
            now_ms = self._clock.now_ms()
            if watermark.timestamp > now_ms:
                raise WatermarkError(
                    f"Output received processing-time watermark with timestamp "
                    f"{watermark.timestamp} ({format_epoch_ms(watermark.timestamp)}), after the "
                    f"clock's now {now_ms} ({format_epoch_ms(now_ms)}); a processing-time "
                    f"watermark may not be in the future. Emit Watermark.PROCESSING_TIME."
                )
        if watermark <= self._current:
            return
        if self._idle:
            self.mark_active()
        self._current = watermark
        self._history.append(watermark)

    def mark_idle(self) -> None:
        """Mark the output idle (recorded once per change)."""
        if not self._idle:
            self._idle = True
            self._history.append(WatermarkStatus.IDLE)

    def mark_active(self) -> None:
        """Mark the output active (recorded once per change)."""
        if self._idle:
            self._idle = False
            self._history.append(WatermarkStatus.ACTIVE)

    @property
    def current_watermark(self) -> Watermark:
        """The largest watermark accepted, or ``initial``."""
        return self._current

    @property
    def is_idle(self) -> bool:
        """Whether the output is idle."""
        return self._idle

    @property
    def status(self) -> WatermarkStatus:
        """``IDLE`` or ``ACTIVE``, for feeding a valve's ``input_status``."""
        return WatermarkStatus.IDLE if self._idle else WatermarkStatus.ACTIVE

    @property
    def emitted(self) -> tuple[Watermark, ...]:
        """The accepted watermarks, in order (strictly increasing)."""
        return tuple(item for item in self._history if isinstance(item, Watermark))

    @property
    def history(self) -> tuple[Watermark | WatermarkStatus, ...]:
        """Accepted watermarks and status changes, in order."""
        return tuple(self._history)

    def __repr__(self) -> str:
        return f"RecordingWatermarkOutput(current={self._current!r}, idle={self._idle})"
