"""The watermark valve: combines per-channel watermarks into one (cf. Flink's StatusWatermarkValve).

The temporal join has two inputs, probe and build, and releases waiting probe rows by their
*combined* watermark. :class:`WatermarkValve` does the combining for any number of channels;
:class:`CombinedWatermark` names the two channels of the join.

The rules, from FLIP-326 (which extends Flink's ``StatusWatermarkValve`` with processing time):

* A channel is *active* when its last status is ``ACTIVE``, or when its last watermark is
  processing time: processing time advances with the wall clock, data or not, so idleness says
  nothing about such a channel.
* If any active channel is event time, the combined watermark is the minimum over the active
  event-time channels. A channel that has sent nothing yet counts as ``Watermark.MIN`` and so
  holds everything back, as in Flink.
* If every active channel is processing time, the combined watermark is
  ``Watermark.PROCESSING_TIME``.
* Idle channels are left out; when every channel is idle the combined watermark does not move.
* The combined watermark never decreases, in the order of :class:`~lakehouse.time.Watermark`
  (event times by value, processing time after all of them).

The proposal's 2x2 table for two channels (``ET(t)`` event time, ``PT`` processing time):

=============  =============  ======================================
channel 0      channel 1      combined
=============  =============  ======================================
``ET(10)``     ``ET(20)``     ``ET(10)``: the minimum
``ET(10)``     ``PT``         ``ET(10)``: event time rules
``PT``         ``ET(20)``     ``ET(20)``: event time rules
``PT``         ``PT``         ``PT``
=============  =============  ======================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from lakehouse.errors import WatermarkError
from lakehouse.time.clock import Clock, SystemClock
from lakehouse.time.watermark import Watermark, WatermarkStatus, format_epoch_ms

JoinInput = Literal["probe", "build"]
"""The two inputs of the temporal join: ``"probe"`` is channel 0, ``"build"`` is channel 1."""

_JOIN_CHANNELS: Final[dict[str, int]] = {"probe": 0, "build": 1}


@dataclass(frozen=True, slots=True)
class ChannelState:
    """A read-only snapshot of one channel of a :class:`WatermarkValve`.

    Attributes:
        watermark: The largest watermark the channel has sent (processing time once it has
            switched). Before its first watermark it is ``Watermark.MIN``, or the restored output
            when the valve was created with an event-time ``initial_output``.
        status: The last status the channel sent (``ACTIVE`` initially).
        aligned: Whether the channel takes part in the minimum: it is active and has caught up
            with the valve's output (Flink's "aligned"). A channel that resumes from idle below
            the output is not aligned until its watermark reaches the output.
    """

    watermark: Watermark
    status: WatermarkStatus
    aligned: bool

    @property
    def is_active(self) -> bool:
        """Active status, or a processing-time watermark (which always counts as active)."""
        return self.status is WatermarkStatus.ACTIVE or self.watermark.use_processing_time


class _Channel:
    """The valve's mutable per-channel record; exposed only as a ChannelState snapshot."""

    __slots__ = ("aligned", "status", "watermark")

    def __init__(self, watermark: Watermark, status: WatermarkStatus, aligned: bool) -> None:
        self.watermark = watermark
        self.status = status
        self.aligned = aligned


class WatermarkValve:
    """Combines per-channel watermarks (cf. Flink's StatusWatermarkValve), with FLIP-326's
    processing time.

    Holds, per channel, the largest watermark received, the last status, and whether the channel
    is aligned (active and caught up with the output). Holds the last combined watermark it
    emitted. Each ``input_*`` call returns the new combined watermark when it advanced, else
    ``None``; the valve never emits the same or a smaller watermark twice.

    Invariants (checked):

    * the output never decreases (processing time counts as beyond all event times);
    * the output is the minimum over active, aligned event-time channels; idle ones are left
      out, and with every channel idle the output does not move;
    * the output is processing time only when every aligned active channel is;
    * a channel never returns from processing time to event time (raises ``WatermarkError``);
    * a processing-time watermark never carries a timestamp after the clock's now (raises
      ``WatermarkError``).

    Alignment, as in Flink: a channel that returns from idle with a watermark below the output
    does not pull the output back and does not hold it; it is left out until its own watermark
    reaches the output. In particular, once the output is processing time, an event-time channel
    can never catch up, so the output stays processing time. A channel's event-time watermark
    that is not larger than the one it sent before is ignored (per-channel watermarks only rise).

    A watermark that arrives on an idle channel is recorded, but the channel stays idle (and out
    of the minimum) until ``input_status(ACTIVE)``, unless it is processing time.

    Restoring: the join persists :meth:`current` between micro-batches. Pass it back as
    ``initial_output`` and the new valve starts there: every channel starts at that watermark
    (so a channel that has not reported yet holds the output where it was), and nothing below
    it is ever emitted. For a processing-time ``initial_output`` channels start at
    ``Watermark.MIN``; they are left out until they send processing time.

    Args:
        num_channels: Number of input channels, ``> 0``; channels are ``0 .. num_channels-1``.
        clock: The clock against which processing-time timestamps are checked.
        initial_output: The output to start from (a persisted :meth:`current`); a
            processing-time value is normalised to ``Watermark.PROCESSING_TIME``.

    Raises:
        ValueError: If ``num_channels`` is not a positive int.

    Example (two channels; comments give the state after each input):

    >>> valve = WatermarkValve(2)
    >>> valve.input_watermark(0, Watermark(10)) is None  # channel 1 has sent nothing: MIN
    True
    >>> valve.input_watermark(1, Watermark(20))  # min(10, 20)
    Watermark(timestamp=10, use_processing_time=False)
    >>> valve.input_status(0, WatermarkStatus.IDLE)  # channel 0 left out: 20
    Watermark(timestamp=20, use_processing_time=False)
    >>> valve.input_watermark(1, Watermark.PROCESSING_TIME)  # only active channel is PT
    Watermark(timestamp=-9223372036854775808, use_processing_time=True)
    >>> valve.input_status(0, WatermarkStatus.ACTIVE) is None  # ET(10) cannot pull PT back
    True
    >>> str(valve.current())
    'processing-time'
    """

    def __init__(
        self,
        num_channels: int,
        *,
        clock: Clock | None = None,
        initial_output: Watermark = Watermark.MIN,
    ) -> None:
        if not isinstance(num_channels, int) or isinstance(num_channels, bool):
            raise ValueError(
                f"WatermarkValve(num_channels={num_channels!r}): num_channels must be an int."
            )
        if num_channels <= 0:
            raise ValueError(
                f"WatermarkValve(num_channels={num_channels}): a valve needs at least one "
                f"channel; pass the number of inputs to combine (the join uses 2)."
            )
        _check_watermark("initial_output", initial_output)
        self._clock: Clock = clock if clock is not None else SystemClock()
        # The valve only ever emits processing time as PROCESSING_TIME, so compare against that.
        self._output: Watermark = (
            Watermark.PROCESSING_TIME if initial_output.use_processing_time else initial_output
        )
        # Every channel starts where the restored output is: the output was the minimum over
        # the aligned channels when it was emitted, so no channel was below it. A channel cannot
        # start as processing time (it could then never send event time), hence MIN.
        start = Watermark.MIN if initial_output.use_processing_time else initial_output
        self._channels: list[_Channel] = [
            _Channel(start, WatermarkStatus.ACTIVE, aligned=start >= self._output)
            for _ in range(num_channels)
        ]

    # -- inputs -----------------------------------------------------------------------------

    def input_watermark(self, channel: int, watermark: Watermark) -> Watermark | None:
        """Feed a watermark from ``channel``.

        Args:
            channel: The channel index, ``0 <= channel < num_channels``.
            watermark: The channel's new watermark.

        Returns:
            The new combined watermark if it advanced, else ``None``.

        Raises:
            WatermarkError: If the channel has sent processing time and now sends event time,
                or if a processing-time watermark's timestamp is after the clock's now. The
                valve is unchanged.
            ValueError: If ``channel`` is out of range.
        """
        state = self._channel(channel)
        _check_watermark("watermark", watermark)
        if watermark.use_processing_time:
            now_ms = self._clock.now_ms()
            if watermark.timestamp > now_ms:
                raise WatermarkError(
                    f"Channel {channel} sent processing-time watermark with timestamp "
                    f"{watermark.timestamp} ({format_epoch_ms(watermark.timestamp)}), after the "
                    f"clock's now {now_ms} ({format_epoch_ms(now_ms)}); a processing-time "
                    f"watermark may not be in the future. Send Watermark.PROCESSING_TIME, or "
                    f"check the clock passed to the valve."
                )
            if not state.watermark.use_processing_time or watermark > state.watermark:
                state.watermark = watermark
            # Processing time is beyond every output the valve can have emitted, so the channel
            # is caught up at once, and it counts as active whatever its status (FLIP-326).
            state.aligned = True
        else:
            if state.watermark.use_processing_time:
                raise WatermarkError(
                    f"Channel {channel} sent event-time watermark {watermark} after "
                    f"processing-time watermark {state.watermark}; a channel that has switched "
                    f"to processing time may not return to event time (FLIP-326). Fix the "
                    f"channel's WatermarkStrategy, or create a new valve for a new run."
                )
            # Flink's StatusWatermarkValve: only a larger watermark changes the channel.
            if watermark <= state.watermark:
                return None
            state.watermark = watermark
            # A lagging channel rejoins once it reaches the output; idle ones stay out.
            if (
                state.status is WatermarkStatus.ACTIVE
                and not state.aligned
                and watermark >= self._output
            ):
                state.aligned = True
        return self._advance()

    def input_status(self, channel: int, status: WatermarkStatus) -> Watermark | None:
        """Feed a status change from ``channel``.

        Marking a channel idle may advance the output (it no longer holds the minimum back).
        Marking it active never lowers the output: the channel rejoins the minimum only if its
        watermark has reached the output.

        Args:
            channel: The channel index, ``0 <= channel < num_channels``.
            status: The channel's new status; the same status again is a no-op.

        Returns:
            The new combined watermark if it advanced, else ``None``.

        Raises:
            ValueError: If ``channel`` is out of range.
            TypeError: If ``status`` is not a :class:`WatermarkStatus`.
        """
        state = self._channel(channel)
        if not isinstance(status, WatermarkStatus):
            raise TypeError(
                f"status must be a WatermarkStatus, got {type(status).__name__} {status!r}."
            )
        if status is state.status:
            return None
        state.status = status
        if state.watermark.use_processing_time:
            # A processing-time channel counts as active whatever its status (FLIP-326).
            state.aligned = True
        elif status is WatermarkStatus.IDLE:
            state.aligned = False
        else:
            # Flink: a resumed channel is aligned only if it has caught up with the output.
            state.aligned = state.watermark >= self._output
        return self._advance()

    # -- read-only accessors ----------------------------------------------------------------

    @property
    def num_channels(self) -> int:
        """The number of channels."""
        return len(self._channels)

    def current(self) -> Watermark:
        """The last combined watermark emitted (``initial_output`` before the first)."""
        return self._output

    def channel_state(self, channel: int) -> ChannelState:
        """A snapshot of ``channel``'s watermark, status and alignment.

        Raises:
            ValueError: If ``channel`` is out of range.
        """
        state = self._channel(channel)
        return ChannelState(state.watermark, state.status, state.aligned)

    def status(self) -> WatermarkStatus:
        """``IDLE`` when no channel is active (cf. Flink's combined WatermarkStatus), else
        ``ACTIVE``."""
        if any(self._is_active(state) for state in self._channels):
            return WatermarkStatus.ACTIVE
        return WatermarkStatus.IDLE

    def __repr__(self) -> str:
        return f"WatermarkValve(num_channels={self.num_channels}, current={self._output!r})"

    # -- internals --------------------------------------------------------------------------

    @staticmethod
    def _is_active(state: _Channel) -> bool:
        return state.status is WatermarkStatus.ACTIVE or state.watermark.use_processing_time

    def _channel(self, channel: int) -> _Channel:
        if not isinstance(channel, int) or isinstance(channel, bool):
            raise ValueError(f"channel must be an int index, got {type(channel).__name__}.")
        if not 0 <= channel < len(self._channels):
            raise ValueError(
                f"channel {channel} is out of range for a valve with {len(self._channels)} "
                f"channel(s); use 0..{len(self._channels) - 1}."
            )
        return self._channels[channel]

    def _advance(self) -> Watermark | None:
        # Flink's findAndOutputNewMinWatermarkAcrossAlignedChannels. Aligned implies active.
        aligned = [state.watermark for state in self._channels if state.aligned]
        if not aligned:
            # Every channel is idle or lagging: nothing new can be said (all idle: no advance).
            return None
        event_time = [wm for wm in aligned if not wm.use_processing_time]
        # Any event-time channel rules; processing time only when every aligned channel is.
        candidate = min(event_time) if event_time else Watermark.PROCESSING_TIME
        # Monotone by construction, as in Flink: emit only a strictly larger watermark.
        if candidate > self._output:
            self._output = candidate
            return candidate
        return None


class CombinedWatermark:
    """The valve of a two-input operator: the join's ``"probe"`` and ``"build"`` inputs.

    A thin wrapper over a 2-channel :class:`WatermarkValve` (probe is channel 0, build is
    channel 1) with the same rules, invariants and restore semantics; inputs are named by
    :data:`JoinInput` or by index.

    Args:
        clock: The clock against which processing-time timestamps are checked.
        initial_output: The persisted combined watermark to resume from.

    Example, a processing-time join waiting for the build side's snapshot (FLINK-19830):

    >>> combined = CombinedWatermark()
    >>> combined.input_watermark("probe", Watermark.PROCESSING_TIME) is None
    True
    >>> str(combined.current())  # the build side is still loading its snapshot: MIN
    'MIN'
    >>> str(combined.input_watermark("build", Watermark.PROCESSING_TIME))  # snapshot complete
    'processing-time'
    """

    def __init__(
        self, *, clock: Clock | None = None, initial_output: Watermark = Watermark.MIN
    ) -> None:
        self._valve = WatermarkValve(2, clock=clock, initial_output=initial_output)

    def input_watermark(self, side: JoinInput | int, watermark: Watermark) -> Watermark | None:
        """Feed a watermark from ``side``; see :meth:`WatermarkValve.input_watermark`."""
        return self._valve.input_watermark(_join_channel(side), watermark)

    def input_status(self, side: JoinInput | int, status: WatermarkStatus) -> Watermark | None:
        """Feed a status change from ``side``; see :meth:`WatermarkValve.input_status`."""
        return self._valve.input_status(_join_channel(side), status)

    def current(self) -> Watermark:
        """The last combined watermark emitted (``initial_output`` before the first)."""
        return self._valve.current()

    def channel_state(self, side: JoinInput | int) -> ChannelState:
        """A snapshot of one input's state."""
        return self._valve.channel_state(_join_channel(side))

    def status(self) -> WatermarkStatus:
        """``IDLE`` when neither input is active, else ``ACTIVE``."""
        return self._valve.status()

    def __repr__(self) -> str:
        return f"CombinedWatermark(current={self._valve.current()!r})"


def _join_channel(side: JoinInput | int) -> int:
    if isinstance(side, str):
        if side not in _JOIN_CHANNELS:
            raise ValueError(f"join input {side!r} is unknown; use 'probe' or 'build' (or 0/1).")
        return _JOIN_CHANNELS[side]
    if isinstance(side, int) and not isinstance(side, bool) and side in (0, 1):
        return side
    raise ValueError(f"join input {side!r} is unknown; use 'probe' or 'build' (or 0/1).")


def _check_watermark(name: str, value: Watermark) -> None:
    if not isinstance(value, Watermark):
        raise TypeError(f"{name} must be a Watermark, got {type(value).__name__} {value!r}.")
