"""Watermark strategies, generators, idleness and the recording output."""

from __future__ import annotations

import dataclasses
import itertools
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakehouse.time import (
    WATERMARK_MIN,
    BoundedOutOfOrdernessWatermarks,
    ManualClock,
    ProcessingTimeWatermarks,
    PunctuatedWatermarkGenerator,
    RecordingWatermarkOutput,
    Watermark,
    WatermarkError,
    WatermarkGenerator,
    WatermarkOutput,
    WatermarkStatus,
    WatermarkStrategy,
    WatermarksWithIdleness,
)

PT = Watermark.PROCESSING_TIME
IDLE = "idle"
ACTIVE = "active"


class ListOutput:
    """Records every call a generator makes, unfiltered, so that a test sees exactly what the
    generator emitted (then asserts that nothing else came out)."""

    def __init__(self) -> None:
        self._seen: deque[Watermark | str] = deque()

    def emit_watermark(self, watermark: Watermark) -> None:
        self._seen.append(watermark)

    def mark_idle(self) -> None:
        self._seen.append(IDLE)

    def mark_active(self) -> None:
        self._seen.append(ACTIVE)

    def pop(self) -> Watermark | str | None:
        return self._seen.popleft() if self._seen else None


def test_outputs_and_generators_satisfy_their_protocols():
    assert isinstance(ListOutput(), WatermarkOutput)
    assert isinstance(RecordingWatermarkOutput(), WatermarkOutput)
    for generator in (
        BoundedOutOfOrdernessWatermarks(0),
        ProcessingTimeWatermarks(),
        PunctuatedWatermarkGenerator.when(bool),
        WatermarksWithIdleness(ProcessingTimeWatermarks(), 1, clock=ManualClock()),
    ):
        assert isinstance(generator, WatermarkGenerator)


# -- bounded out-of-orderness ---------------------------------------------------------------


def test_bounded_out_of_orderness_emits_max_minus_bound_minus_one():
    gen = WatermarkStrategy.for_bounded_out_of_orderness(10).create_watermark_generator()
    out = ListOutput()
    gen.on_periodic_emit(out)
    # no event yet: exactly MIN, as in Flink
    assert out.pop() == Watermark.MIN
    assert out.pop() is None
    gen.on_event("a", 100, out)
    # events themselves emit nothing: this generator is periodic
    assert out.pop() is None
    gen.on_periodic_emit(out)
    # 100 - 10 - 1
    assert out.pop() == Watermark(89)
    assert out.pop() is None
    gen.on_event("b", 95, out)
    gen.on_periodic_emit(out)
    # a late event (95 < 100) does not move the watermark back
    assert out.pop() == Watermark(89)
    gen.on_event("c", 130, out)
    gen.on_periodic_emit(out)
    assert out.pop() == Watermark(119)
    assert out.pop() is None


@settings(max_examples=60)
@given(
    bound=st.integers(0, 1_000),
    timestamps=st.lists(st.integers(-(10**12), 10**12), min_size=1, max_size=20),
)
def test_bounded_watermark_is_max_timestamp_less_bound_less_one(bound, timestamps):
    gen = BoundedOutOfOrdernessWatermarks(bound)
    out = ListOutput()
    for ts in timestamps:
        gen.on_event(None, ts, out)
    gen.on_periodic_emit(out)
    assert out.pop() == Watermark(max(timestamps) - bound - 1)


def test_bounded_watermark_never_goes_below_min_for_tiny_timestamps():
    gen = BoundedOutOfOrdernessWatermarks(5)
    out = ListOutput()
    gen.on_event(None, WATERMARK_MIN, out)
    gen.on_periodic_emit(out)
    assert out.pop() == Watermark.MIN


def test_monotonous_timestamps_is_bounded_with_zero():
    strategy = WatermarkStrategy.for_monotonous_timestamps()
    gen = strategy.create_watermark_generator()
    assert repr(gen) == "BoundedOutOfOrdernessWatermarks(max_out_of_orderness_ms=0)"
    out = ListOutput()
    gen.on_event(None, 50, out)
    gen.on_periodic_emit(out)
    # 50 - 1: another event at exactly 50 may still come
    assert out.pop() == Watermark(49)
    assert out.pop() is None


@pytest.mark.parametrize(
    ("bound", "error"),
    [(-1, ValueError), (1.5, TypeError), (True, TypeError)],
)
def test_bounded_out_of_orderness_is_checked_when_the_strategy_is_built(bound, error):
    with pytest.raises(error, match="max_out_of_orderness_ms"):
        WatermarkStrategy.for_bounded_out_of_orderness(bound)
    with pytest.raises(error, match="max_out_of_orderness_ms"):
        BoundedOutOfOrdernessWatermarks(bound)


def test_event_timestamp_must_be_an_int():
    with pytest.raises(TypeError, match="check the timestamp assigner"):
        BoundedOutOfOrdernessWatermarks(0).on_event(None, 1.5, ListOutput())  # type: ignore[arg-type]


# -- no watermarks = processing time --------------------------------------------------------


def test_no_watermarks_means_processing_time():
    gen = WatermarkStrategy.no_watermarks().create_watermark_generator()
    out = ListOutput()
    gen.on_event("row", 123, out)
    # events say nothing about processing time
    assert out.pop() is None
    gen.on_periodic_emit(out)
    assert out.pop() == PT
    assert out.pop() is None


# -- punctuated -----------------------------------------------------------------------------


def test_punctuated_generator_emits_on_marker_events_only():
    strategy = WatermarkStrategy.for_generator(
        lambda: PunctuatedWatermarkGenerator.when(lambda row: row.get("marker", False))
    )
    gen = strategy.create_watermark_generator()
    out = ListOutput()
    gen.on_event({"id": 1}, 10, out)
    assert out.pop() is None
    gen.on_event({"marker": True}, 15, out)
    # the marker declares its own timestamp complete
    assert out.pop() == Watermark(15)
    assert out.pop() is None
    gen.on_periodic_emit(out)
    # punctuated generators do not emit periodically
    assert out.pop() is None


def test_punctuated_generator_with_an_extractor():
    gen = PunctuatedWatermarkGenerator(
        lambda row, ts: Watermark(row["upto"]) if "upto" in row else None
    )
    out = ListOutput()
    gen.on_event({"upto": 7}, 10, out)
    assert out.pop() == Watermark(7)
    gen.on_event({"x": 1}, 11, out)
    assert out.pop() is None


def test_punctuated_generator_needs_a_callable():
    with pytest.raises(TypeError, match="extract must be callable"):
        PunctuatedWatermarkGenerator(42)  # type: ignore[arg-type]


def test_for_generator_makes_a_fresh_generator_per_run():
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(0)
    first = strategy.create_watermark_generator()
    second = strategy.create_watermark_generator()
    assert first is not second
    out = ListOutput()
    first.on_event(None, 100, out)
    second.on_periodic_emit(out)
    # generators hold state; a new run starts from nothing
    assert out.pop() == Watermark.MIN


# -- idleness -------------------------------------------------------------------------------


def test_idleness_marks_idle_after_timeout_and_active_on_next_event():
    clock = ManualClock(0)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(0).with_idleness(1_000)
    gen = strategy.create_watermark_generator(clock=clock)
    out = ListOutput()
    gen.on_event(None, 10, out)
    clock.set(999)
    gen.on_periodic_emit(out)
    # 999 ms without events: still active, the wrapped generator emits
    assert out.pop() == Watermark(9)
    assert out.pop() is None
    clock.set(1_000)
    gen.on_periodic_emit(out)
    # 1000 ms without events: idle, and the wrapped generator is not asked
    assert out.pop() == IDLE
    assert out.pop() is None
    clock.set(5_000)
    gen.on_periodic_emit(out)
    # still idle (the output is told again; marking idle is idempotent)
    assert out.pop() == IDLE
    gen.on_event(None, 20, out)
    # the next event: active again, before the event reaches the wrapped generator
    assert out.pop() == ACTIVE
    assert out.pop() is None
    gen.on_periodic_emit(out)
    assert out.pop() == Watermark(19)
    assert out.pop() is None


def test_input_without_any_event_goes_idle_after_timeout_from_creation():
    clock = ManualClock(5_000)
    gen = WatermarksWithIdleness(ProcessingTimeWatermarks(), 100, clock=clock)
    out = ListOutput()
    clock.advance(99)
    gen.on_periodic_emit(out)
    assert out.pop() == PT
    clock.advance(1)
    gen.on_periodic_emit(out)
    assert out.pop() == IDLE
    assert out.pop() is None


def test_idleness_with_punctuated_generator_reactivates_then_emits():
    clock = ManualClock(0)
    gen = WatermarksWithIdleness(
        PunctuatedWatermarkGenerator.when(lambda e: e == "marker"), 10, clock=clock
    )
    out = RecordingWatermarkOutput()
    clock.set(10)
    gen.on_periodic_emit(out)
    assert out.is_idle
    gen.on_event("marker", 3, out)
    assert not out.is_idle
    assert out.history == (WatermarkStatus.IDLE, WatermarkStatus.ACTIVE, Watermark(3))


@pytest.mark.parametrize(
    ("timeout", "error"), [(0, ValueError), (-1, ValueError), (1.0, TypeError)]
)
def test_idle_timeout_must_be_positive(timeout, error):
    with pytest.raises(error, match="idle_timeout_ms"):
        WatermarkStrategy.no_watermarks().with_idleness(timeout)
    with pytest.raises(error, match="idle_timeout_ms"):
        WatermarksWithIdleness(ProcessingTimeWatermarks(), timeout)


# -- the strategy as a value ----------------------------------------------------------------


def test_strategy_is_immutable_and_refinements_return_copies():
    base = WatermarkStrategy.for_bounded_out_of_orderness(5)
    refined = base.with_timestamp_assigner(lambda row: row["ts"]).with_idleness(60_000)
    assert base.timestamp_assigner is None
    assert base.idle_timeout_ms is None
    assert refined.idle_timeout_ms == 60_000
    assert refined.extract_timestamp({"ts": 7}) == 7
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.idle_timeout_ms = 1  # type: ignore[misc]
    assert isinstance(
        refined.create_watermark_generator(clock=ManualClock()), WatermarksWithIdleness
    )


def test_without_assigner_the_event_is_its_timestamp():
    strategy = WatermarkStrategy.for_monotonous_timestamps()
    assert strategy.extract_timestamp(1_700_000_000_000) == 1_700_000_000_000
    with pytest.raises(TypeError, match="call with_timestamp_assigner"):
        strategy.extract_timestamp({"ts": 1})


def test_assigner_must_return_an_int():
    strategy = WatermarkStrategy.no_watermarks().with_timestamp_assigner(lambda row: "soon")
    with pytest.raises(TypeError, match="timestamp assigner's result is str"):
        strategy.extract_timestamp({})


def test_strategy_checks_its_fields():
    with pytest.raises(TypeError, match="generator_factory must be a callable"):
        WatermarkStrategy(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="timestamp_assigner must be callable"):
        WatermarkStrategy(ProcessingTimeWatermarks, timestamp_assigner=3)  # type: ignore[arg-type]


# -- the recording output -------------------------------------------------------------------


def test_recording_output_swallows_watermarks_that_do_not_advance():
    out = RecordingWatermarkOutput()
    out.emit_watermark(Watermark.MIN)  # equal to the initial MIN: swallowed
    out.emit_watermark(Watermark(10))
    out.emit_watermark(Watermark(10))
    out.emit_watermark(Watermark(3))
    out.emit_watermark(Watermark(12))
    assert out.emitted == (Watermark(10), Watermark(12))
    assert out.current_watermark == Watermark(12)


def test_recording_output_takes_event_time_to_processing_time_as_an_advance():
    out = RecordingWatermarkOutput()
    out.emit_watermark(Watermark(10))
    out.emit_watermark(PT)
    out.emit_watermark(PT)
    assert out.emitted == (Watermark(10), PT)
    with pytest.raises(WatermarkError, match="may not return to event time"):
        out.emit_watermark(Watermark(99))
    assert out.current_watermark == PT


def test_recording_output_refuses_processing_time_from_the_future():
    out = RecordingWatermarkOutput(clock=ManualClock(100))
    with pytest.raises(WatermarkError, match="may not be in the future"):
        out.emit_watermark(Watermark(101, True))
    out.emit_watermark(Watermark(100, True))
    assert out.current_watermark == Watermark(100, True)


def test_recording_output_records_status_changes_once():
    out = RecordingWatermarkOutput()
    out.mark_active()  # already active: nothing to record
    out.mark_idle()
    out.mark_idle()
    assert out.is_idle
    assert out.status is WatermarkStatus.IDLE
    out.emit_watermark(Watermark.MIN)  # swallowed: does not reactivate (as in Flink)
    assert out.is_idle
    out.emit_watermark(Watermark(1))  # accepted: reactivates
    assert out.status is WatermarkStatus.ACTIVE
    assert out.history == (WatermarkStatus.IDLE, WatermarkStatus.ACTIVE, Watermark(1))


def test_recording_output_restored_from_a_persisted_watermark_never_goes_below_it():
    out = RecordingWatermarkOutput(initial=Watermark(500))
    gen = WatermarkStrategy.for_bounded_out_of_orderness(0).create_watermark_generator()
    gen.on_event(None, 300, out)
    gen.on_periodic_emit(out)
    assert out.current_watermark == Watermark(500)
    assert out.emitted == ()


@settings(max_examples=60)
@given(
    st.lists(
        st.one_of(st.builds(Watermark, st.integers(-50, 50)), st.just(PT)),
        max_size=30,
    )
)
def test_recording_output_emits_strictly_increasing_watermarks(watermarks):
    out = RecordingWatermarkOutput()
    for wm in watermarks:
        try:
            out.emit_watermark(wm)
        except WatermarkError:
            assert out.current_watermark.use_processing_time
            assert not wm.use_processing_time
    emitted = list(out.emitted)
    assert all(a < b for a, b in itertools.pairwise(emitted))
    assert out.current_watermark == max([Watermark.MIN, *emitted])


def test_join_feeds_each_micro_batch_max_event_time_as_one_event():
    # How the temporal join drives a probe strategy: one event per micro-batch, then a periodic
    # emit, then it reads the watermark and idleness back to feed the valve.
    clock = ManualClock(0)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(5).with_idleness(60_000)
    gen = strategy.create_watermark_generator(clock=clock)
    out = RecordingWatermarkOutput(clock=clock)
    seen = []
    for batch_max_ts in [100, 90, None, 200]:  # None: an empty micro-batch
        clock.advance(40_000)
        if batch_max_ts is not None:
            gen.on_event(batch_max_ts, strategy.extract_timestamp(batch_max_ts), out)
        gen.on_periodic_emit(out)
        seen.append((out.current_watermark.timestamp, out.is_idle))
    assert seen == [(94, False), (94, False), (94, False), (194, False)]
    clock.advance(60_000)
    gen.on_periodic_emit(out)
    assert out.is_idle
