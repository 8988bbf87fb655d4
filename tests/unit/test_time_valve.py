"""The watermark valve: the FLIP-326 table, Flink-style scenarios, restore, and properties checked
against a reference valve that recomputes its output from scratch."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from lakehouse.time import (
    WATERMARK_MAX,
    WATERMARK_MIN,
    ChannelState,
    CombinedWatermark,
    ManualClock,
    Watermark,
    WatermarkError,
    WatermarkStatus,
    WatermarkValve,
)

ACTIVE = WatermarkStatus.ACTIVE
IDLE = WatermarkStatus.IDLE
PT = Watermark.PROCESSING_TIME
NOW_MS = 1_000_000


def et(ts: int) -> Watermark:
    return Watermark(ts)


class ValveOutput:
    """Collects what a valve emits, like the output in Flink's StatusWatermarkValveTest, so that
    each scenario step can assert the exact output and then that nothing else came out."""

    def __init__(self, valve: WatermarkValve | CombinedWatermark) -> None:
        self.valve = valve
        self._seen: deque[Watermark] = deque()

    def watermark(self, channel, watermark: Watermark) -> None:
        emitted = self.valve.input_watermark(channel, watermark)
        if emitted is not None:
            self._seen.append(emitted)

    def status(self, channel, status: WatermarkStatus) -> None:
        emitted = self.valve.input_status(channel, status)
        if emitted is not None:
            self._seen.append(emitted)

    def pop(self) -> Watermark | None:
        return self._seen.popleft() if self._seen else None


def new_valve(num_channels: int, **kwargs) -> tuple[WatermarkValve, ValveOutput]:
    valve = WatermarkValve(num_channels, clock=ManualClock(NOW_MS), **kwargs)
    return valve, ValveOutput(valve)


# -- the proposal's 2x2 table ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("channel_0", "channel_1", "combined"),
    [
        # both event time: the minimum of the two
        (et(10), et(20), et(10)),
        # event time rules: a processing-time channel does not hold an event-time one back
        (et(10), PT, et(10)),
        # the same, whichever channel is which
        (PT, et(20), et(20)),
        # every active channel is processing time: the output is processing time
        (PT, PT, PT),
    ],
    ids=["ET-ET", "ET-PT", "PT-ET", "PT-PT"],
)
def test_flip_table_of_event_and_processing_time(channel_0, channel_1, combined):
    valve, _ = new_valve(2)
    valve.input_watermark(0, channel_0)
    valve.input_watermark(1, channel_1)
    assert valve.current() == combined


# -- scenarios, in the style of Flink's StatusWatermarkValveTest ------------------------------


def test_output_is_the_minimum_and_advances_with_the_slowest_channel():
    valve, out = new_valve(3)
    out.watermark(0, et(10))
    out.watermark(1, et(5))
    # channel 2 has sent nothing: it counts as MIN and holds everything back
    assert out.pop() is None
    out.watermark(2, et(3))
    # min(10, 5, 3)
    assert out.pop() == et(3)
    assert out.pop() is None
    out.watermark(2, et(8))
    # min(10, 5, 8): channel 1 is now the slowest
    assert out.pop() == et(5)
    assert out.pop() is None
    out.watermark(0, et(20))
    # the minimum is still channel 1 at 5
    assert out.pop() is None
    out.watermark(1, et(15))
    # min(20, 15, 8)
    assert out.pop() == et(8)
    assert out.pop() is None
    assert valve.current() == et(8)


def test_channel_without_watermark_holds_back_everything():
    valve, out = new_valve(2)
    out.watermark(0, et(100))
    # channel 1 is at MIN until it speaks
    assert out.pop() is None
    assert valve.current() == Watermark.MIN
    assert valve.channel_state(1) == ChannelState(Watermark.MIN, ACTIVE, aligned=True)


def test_smaller_channel_watermark_is_ignored():
    valve, out = new_valve(1)
    out.watermark(0, et(10))
    assert out.pop() == et(10)
    out.watermark(0, et(7))
    # per-channel watermarks only rise, as in Flink
    assert out.pop() is None
    assert valve.channel_state(0).watermark == et(10)
    out.watermark(0, et(10))
    # the same watermark again says nothing new
    assert out.pop() is None


def test_idle_channel_does_not_hold_back_watermark():
    _valve, out = new_valve(2)
    out.watermark(0, et(10))
    out.watermark(1, et(3))
    assert out.pop() == et(3)
    assert out.pop() is None
    out.status(1, IDLE)
    # channel 1 is left out: only channel 0 at 10 remains
    assert out.pop() == et(10)
    assert out.pop() is None
    out.watermark(0, et(12))
    # channel 0 advances alone
    assert out.pop() == et(12)
    assert out.pop() is None


def test_all_channels_idle_does_not_advance():
    valve, out = new_valve(2)
    out.watermark(0, et(4))
    out.watermark(1, et(6))
    assert out.pop() == et(4)
    out.status(0, IDLE)
    assert out.pop() == et(6)
    out.status(1, IDLE)
    # nobody is active: nothing new can be said
    assert out.pop() is None
    assert valve.status() is IDLE
    out.watermark(1, et(50))
    # a watermark on an idle channel is recorded but does not count
    assert out.pop() is None
    assert valve.channel_state(1) == ChannelState(et(50), IDLE, aligned=False)
    assert valve.current() == et(6)


def test_watermark_recorded_while_idle_counts_once_the_channel_is_active():
    _valve, out = new_valve(2)
    out.status(0, IDLE)
    out.status(1, IDLE)
    out.watermark(0, et(30))
    assert out.pop() is None
    out.status(0, ACTIVE)
    # channel 0 is back at 30 and is the only active channel
    assert out.pop() == et(30)
    assert out.pop() is None


def test_channel_resuming_below_output_is_not_aligned_until_it_catches_up():
    valve, out = new_valve(2)
    out.watermark(0, et(10))
    out.watermark(1, et(10))
    assert out.pop() == et(10)
    out.status(1, IDLE)
    out.watermark(0, et(20))
    # channel 1 idle: channel 0 alone
    assert out.pop() == et(20)
    out.status(1, ACTIVE)
    # channel 1 is back at 10 < 20: it can neither pull the output back nor hold it
    assert out.pop() is None
    assert valve.channel_state(1) == ChannelState(et(10), ACTIVE, aligned=False)
    out.watermark(0, et(25))
    assert out.pop() == et(25)
    out.watermark(1, et(24))
    # still below the output (25): not aligned
    assert out.pop() is None
    out.watermark(1, et(26))
    # channel 1 caught up and takes part again; min(25, 26) is the current output
    assert valve.channel_state(1).aligned
    assert out.pop() is None
    out.watermark(0, et(40))
    # now channel 1 holds the output back: min(40, 26)
    assert out.pop() == et(26)
    assert out.pop() is None


def test_output_becomes_processing_time_when_every_active_channel_is():
    _valve, out = new_valve(2)
    out.watermark(0, PT)
    # channel 1 has sent nothing (event-time MIN): event time rules
    assert out.pop() is None
    out.watermark(1, et(5))
    # event time rules: channel 1 at 5
    assert out.pop() == et(5)
    out.watermark(1, PT)
    # both processing time; event time -> processing time is an advance
    assert out.pop() == PT
    assert out.pop() is None
    out.watermark(0, PT)
    # processing time again is no change
    assert out.pop() is None


def test_idle_event_time_channel_leaves_processing_time_in_charge():
    _valve, out = new_valve(2)
    out.watermark(0, PT)
    out.watermark(1, et(5))
    assert out.pop() == et(5)
    out.status(1, IDLE)
    # the only active channel is processing time
    assert out.pop() == PT
    assert out.pop() is None


def test_event_time_channel_returning_from_idle_cannot_pull_processing_time_back():
    valve, out = new_valve(2)
    out.watermark(0, PT)
    out.status(1, IDLE)
    assert out.pop() == PT
    out.status(1, ACTIVE)
    out.watermark(1, et(1_000))
    # event time is below processing time: channel 1 never catches up, output stays PT
    assert out.pop() is None
    assert valve.current() == PT
    assert valve.channel_state(1) == ChannelState(et(1_000), ACTIVE, aligned=False)


def test_processing_time_channel_counts_as_active_even_when_marked_idle():
    valve, out = new_valve(2)
    out.watermark(0, PT)
    out.status(0, IDLE)
    out.status(1, IDLE)
    # channel 0 follows the wall clock, so idleness says nothing about it (FLIP-326)
    assert out.pop() == PT
    assert valve.status() is ACTIVE
    state = valve.channel_state(0)
    assert state.status is IDLE
    assert state.is_active


def test_channel_switching_back_to_event_time_raises_and_changes_nothing():
    valve, out = new_valve(2)
    out.watermark(0, PT)
    with pytest.raises(WatermarkError, match="may not return to event time"):
        valve.input_watermark(0, et(5))
    assert valve.channel_state(0).watermark == PT
    assert valve.current() == Watermark.MIN


def test_processing_time_watermark_may_not_be_in_the_clocks_future():
    clock = ManualClock(NOW_MS)
    valve = WatermarkValve(1, clock=clock)
    with pytest.raises(WatermarkError, match="may not be in the future"):
        valve.input_watermark(0, Watermark(NOW_MS + 1, True))
    assert valve.channel_state(0).watermark == Watermark.MIN
    # a timestamp at or before now is fine; the output is still PROCESSING_TIME
    assert valve.input_watermark(0, Watermark(NOW_MS, True)) == PT
    clock.advance(10)
    assert valve.input_watermark(0, Watermark(NOW_MS + 10, True)) is None
    assert valve.channel_state(0).watermark == Watermark(NOW_MS + 10, True)


def test_same_status_again_is_a_no_op():
    valve, out = new_valve(2)
    out.status(0, ACTIVE)
    out.status(1, IDLE)
    out.status(1, IDLE)
    assert out.pop() is None
    assert valve.channel_state(1).status is IDLE


# -- the join's two inputs ------------------------------------------------------------------


def test_processing_time_join_waits_for_the_build_snapshot():
    # FLINK-19830: probe rows must not be processed before the build side's snapshot is loaded
    combined = CombinedWatermark(clock=ManualClock(NOW_MS))
    out = ValveOutput(combined)
    out.watermark("probe", PT)
    out.watermark("build", Watermark.MIN)
    # build is loading its snapshot (event-time MIN): nothing may be released
    assert out.pop() is None
    out.watermark("build", PT)
    # snapshot complete: processing time, every waiting probe row is released
    assert out.pop() == PT
    assert out.pop() is None
    assert combined.channel_state("build") == combined.channel_state(1)


def test_row_time_join_follows_the_slower_input():
    combined = CombinedWatermark()
    out = ValveOutput(combined)
    out.watermark("probe", et(100))
    out.watermark("build", et(70))
    assert out.pop() == et(70)
    out.status("build", IDLE)
    # an idle build side does not hold the probe side back
    assert out.pop() == et(100)
    assert out.pop() is None
    assert combined.status() is ACTIVE


@pytest.mark.parametrize("side", ["left", 2, -1, True, None])
def test_unknown_join_input_is_refused(side):
    with pytest.raises(ValueError, match="use 'probe' or 'build'"):
        CombinedWatermark().input_watermark(side, et(1))


# -- restore from a persisted output ----------------------------------------------------------


def test_restored_valve_starts_at_the_persisted_output():
    stored = et(500).to_dict()  # as kept in the Delta commit metadata
    valve, out = new_valve(2, initial_output=Watermark.from_dict(stored))
    assert valve.current() == et(500)
    out.watermark(0, et(300))
    out.watermark(1, et(400))
    # both channels report below the persisted output: it never decreases across restarts
    assert out.pop() is None
    assert valve.current() == et(500)


def test_restored_channel_that_has_not_reported_holds_the_output():
    _valve, out = new_valve(2, initial_output=et(500))
    out.watermark(0, et(900))
    # channel 1 starts at the persisted 500, not MIN and not left out: no jump to 900
    assert out.pop() is None
    out.watermark(1, et(600))
    assert out.pop() == et(600)
    assert out.pop() is None


def test_restored_processing_time_output_stays_processing_time():
    valve, out = new_valve(2, initial_output=Watermark(123, True))
    # normalised: the valve emits processing time only as PROCESSING_TIME
    assert valve.current() == PT
    out.watermark(0, et(10))
    out.watermark(1, et(20))
    # channels start at event-time MIN and may still send event time, but cannot pull PT back
    assert out.pop() is None
    out.watermark(1, PT)
    assert out.pop() is None
    assert valve.current() == PT


def test_restored_combined_watermark_resumes_from_persisted_value():
    combined = CombinedWatermark(initial_output=et(42))
    assert combined.current() == et(42)
    assert combined.input_watermark("probe", et(41)) is None
    assert combined.input_watermark("build", et(50)) is None  # probe still at 42
    assert combined.input_watermark("probe", et(45)) == et(45)


# -- checked invariants of the API ------------------------------------------------------------


@pytest.mark.parametrize("num_channels", [0, -1, True, 1.0])
def test_valve_needs_a_positive_number_of_channels(num_channels):
    with pytest.raises(ValueError, match="num_channels"):
        WatermarkValve(num_channels)


@pytest.mark.parametrize("channel", [2, -1, True])
def test_channel_index_out_of_range_is_refused(channel):
    valve = WatermarkValve(2)
    with pytest.raises(ValueError, match="channel"):
        valve.input_watermark(channel, et(1))
    with pytest.raises(ValueError, match="channel"):
        valve.channel_state(channel)


def test_inputs_of_the_wrong_type_are_refused():
    valve = WatermarkValve(1)
    with pytest.raises(TypeError, match="must be a Watermark"):
        valve.input_watermark(0, 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a WatermarkStatus"):
        valve.input_status(0, "idle")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a Watermark"):
        WatermarkValve(1, initial_output=5)  # type: ignore[arg-type]


def test_repr_shows_the_output():
    assert repr(WatermarkValve(2)) == (
        "WatermarkValve(num_channels=2, current=Watermark(timestamp=-9223372036854775808, "
        "use_processing_time=False))"
    )


# -- properties ------------------------------------------------------------------------------

channel_counts = st.integers(min_value=1, max_value=4)
small_ts = st.integers(min_value=-5, max_value=30)


@settings(max_examples=60)
@given(data=st.data(), num_channels=channel_counts)
def test_output_is_min_over_channels_when_all_are_active(data, num_channels):
    inputs = data.draw(
        st.lists(st.tuples(st.integers(0, num_channels - 1), small_ts), max_size=25),
        label="inputs",
    )
    valve = WatermarkValve(num_channels)
    highest = [Watermark.MIN] * num_channels
    emitted = []
    for channel, ts in inputs:
        result = valve.input_watermark(channel, et(ts))
        highest[channel] = max(highest[channel], et(ts))
        if result is not None:
            emitted.append(result)
        assert valve.current() == min(highest)
    assert emitted == sorted(set(emitted))  # strictly increasing


@settings(max_examples=60)
@given(data=st.data(), num_channels=st.integers(min_value=2, max_value=4))
def test_idle_channels_are_excluded_from_the_minimum(data, num_channels):
    idle = data.draw(
        st.sets(st.integers(0, num_channels - 1), min_size=1, max_size=num_channels - 1),
        label="idle",
    )
    inputs = data.draw(
        st.lists(st.tuples(st.integers(0, num_channels - 1), small_ts), max_size=25),
        label="inputs",
    )
    valve = WatermarkValve(num_channels)
    for channel in idle:
        valve.input_status(channel, IDLE)
    highest = [Watermark.MIN] * num_channels
    for channel, ts in inputs:
        valve.input_watermark(channel, et(ts))
        highest[channel] = max(highest[channel], et(ts))
        assert valve.current() == min(highest[c] for c in range(num_channels) if c not in idle)


@settings(max_examples=40)
@given(
    num_channels=channel_counts,
    inputs=st.lists(st.tuples(st.integers(0, 3), small_ts), max_size=20),
)
def test_all_channels_idle_never_advances(num_channels, inputs):
    valve = WatermarkValve(num_channels)
    for channel in range(num_channels):
        assert valve.input_status(channel, IDLE) is None
    for channel, ts in inputs:
        assert valve.input_watermark(channel % num_channels, et(ts)) is None
    assert valve.current() == Watermark.MIN
    assert valve.status() is IDLE


@settings(max_examples=40)
@given(
    num_channels=channel_counts,
    channel=st.integers(0, 3),
    ts=st.integers(),
    idle=st.booleans(),
)
def test_processing_time_then_event_time_always_raises(num_channels, channel, ts, idle):
    channel %= num_channels
    valve = WatermarkValve(num_channels)
    valve.input_watermark(channel, PT)
    if idle:
        valve.input_status(channel, IDLE)
    before = (valve.current(), valve.channel_state(channel))
    ts = max(min(ts, WATERMARK_MAX), WATERMARK_MIN)
    with pytest.raises(WatermarkError, match="may not return to event time"):
        valve.input_watermark(channel, et(ts))
    assert (valve.current(), valve.channel_state(channel)) == before


class ReferenceValve:
    """The obviously-correct model: keeps only each channel's largest watermark and status and
    recomputes the output from scratch after every input.

    A channel takes part when it is active (status ACTIVE, or processing time) and its watermark
    has reached the current output; the candidate is the minimum over the event-time ones that
    take part, or processing time if all of them are; the output moves only up."""

    def __init__(self, num_channels: int, initial_output: Watermark) -> None:
        self.output = PT if initial_output.use_processing_time else initial_output
        start = Watermark.MIN if initial_output.use_processing_time else initial_output
        self.watermarks = [start] * num_channels
        self.statuses = [ACTIVE] * num_channels

    def is_active(self, channel: int) -> bool:
        return self.statuses[channel] is ACTIVE or self.watermarks[channel].use_processing_time

    def takes_part(self, channel: int) -> bool:
        return self.is_active(channel) and self.watermarks[channel] >= self.output

    def input_watermark(self, channel: int, watermark: Watermark, now_ms: int) -> Watermark | None:
        if watermark.use_processing_time and watermark.timestamp > now_ms:
            raise WatermarkError("future")
        if self.watermarks[channel].use_processing_time and not watermark.use_processing_time:
            raise WatermarkError("back to event time")
        self.watermarks[channel] = max(self.watermarks[channel], watermark)
        return self._recompute()

    def input_status(self, channel: int, status: WatermarkStatus) -> Watermark | None:
        self.statuses[channel] = status
        return self._recompute()

    def _recompute(self) -> Watermark | None:
        taking_part = [
            self.watermarks[c] for c in range(len(self.watermarks)) if self.takes_part(c)
        ]
        if not taking_part:
            return None
        event_time = [wm for wm in taking_part if not wm.use_processing_time]
        candidate = min(event_time) if event_time else PT
        if candidate > self.output:
            self.output = candidate
            return candidate
        return None


class ValveMachine(RuleBasedStateMachine):
    """Drives WatermarkValve and ReferenceValve with the same inputs; the invariants are the
    ones in WatermarkValve's docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock(NOW_MS)

    @initialize(
        num_channels=channel_counts,
        initial_output=st.sampled_from([Watermark.MIN, et(3), PT]),
    )
    def start(self, num_channels: int, initial_output: Watermark) -> None:
        self.valve = WatermarkValve(num_channels, clock=self.clock, initial_output=initial_output)
        self.reference = ReferenceValve(num_channels, initial_output)
        self.previous = self.valve.current()

    def _check_step(self, actual: Watermark | None, expected: Watermark | None) -> None:
        assert actual == expected
        if self.valve.status() is IDLE:
            # all channels idle: no advance
            assert actual is None

    @rule(data=st.data(), ts=st.one_of(small_ts, st.just(Watermark.MIN.timestamp)))
    def event_time_watermark(self, data: st.DataObject, ts: int) -> None:
        channel = data.draw(st.integers(0, self.valve.num_channels - 1))
        self._feed(channel, et(ts))

    @rule(data=st.data(), offset_ms=st.sampled_from([None, -5, 0, 7]))
    def processing_time_watermark(self, data: st.DataObject, offset_ms: int | None) -> None:
        channel = data.draw(st.integers(0, self.valve.num_channels - 1))
        # None: the usual MIN; otherwise now - offset (negative offset: in the future)
        ts = Watermark.MIN.timestamp if offset_ms is None else self.clock.now_ms() - offset_ms
        self._feed(channel, Watermark(ts, True))

    def _feed(self, channel: int, watermark: Watermark) -> None:
        try:
            expected = self.reference.input_watermark(channel, watermark, self.clock.now_ms())
        except WatermarkError:
            with pytest.raises(WatermarkError):
                self.valve.input_watermark(channel, watermark)
            return
        self._check_step(self.valve.input_watermark(channel, watermark), expected)

    @rule(data=st.data(), status=st.sampled_from(WatermarkStatus))
    def status(self, data: st.DataObject, status: WatermarkStatus) -> None:
        channel = data.draw(st.integers(0, self.valve.num_channels - 1))
        expected = self.reference.input_status(channel, status)
        self._check_step(self.valve.input_status(channel, status), expected)

    @rule(delta_ms=st.integers(0, 10))
    def advance_clock(self, delta_ms: int) -> None:
        self.clock.advance(delta_ms)

    @precondition(lambda self: hasattr(self, "valve"))
    @invariant()
    def output_never_decreases(self) -> None:
        assert self.valve.current() >= self.previous
        self.previous = self.valve.current()

    @precondition(lambda self: hasattr(self, "valve"))
    @invariant()
    def output_matches_reference(self) -> None:
        assert self.valve.current() == self.reference.output
        for channel in range(self.valve.num_channels):
            state = self.valve.channel_state(channel)
            assert state.watermark == self.reference.watermarks[channel]
            assert state.status is self.reference.statuses[channel]
            assert state.aligned == self.reference.takes_part(channel)

    @precondition(lambda self: hasattr(self, "valve"))
    @invariant()
    def output_is_min_over_aligned_event_time_channels(self) -> None:
        states = [self.valve.channel_state(c) for c in range(self.valve.num_channels)]
        aligned = [s.watermark for s in states if s.aligned]
        event_time = [wm for wm in aligned if not wm.use_processing_time]
        if event_time:
            # idle and lagging channels are left out of this minimum
            assert self.valve.current() == min(event_time)
        elif aligned:
            # processing time only when every aligned active channel is
            assert self.valve.current() == PT

    @precondition(lambda self: hasattr(self, "valve"))
    @invariant()
    def aligned_channels_are_active(self) -> None:
        for channel in range(self.valve.num_channels):
            state = self.valve.channel_state(channel)
            assert state.is_active or not state.aligned


ValveMachine.TestCase.settings = settings(
    max_examples=80,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_valve_matches_reference_model = ValveMachine.TestCase
