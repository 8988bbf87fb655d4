"""Watermark values, their order and serialisation, clocks, and the package's import rules."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

import lakehouse.time
from lakehouse.errors import LakehouseError
from lakehouse.time import (
    WATERMARK_MAX,
    WATERMARK_MIN,
    Clock,
    ManualClock,
    SystemClock,
    Watermark,
    WatermarkError,
    WatermarkStatus,
)

timestamps = st.integers(min_value=WATERMARK_MIN, max_value=WATERMARK_MAX)
watermarks = st.builds(Watermark, timestamps, st.booleans())


# -- the value ------------------------------------------------------------------------------


def test_sentinels_are_the_flip_values():
    assert WATERMARK_MIN == -(2**63)
    assert Watermark(WATERMARK_MIN, False) == Watermark.MIN
    assert Watermark(WATERMARK_MIN, True) == Watermark.PROCESSING_TIME
    assert Watermark(5) == Watermark(5, use_processing_time=False)
    assert Watermark.MIN.is_min
    assert not Watermark.PROCESSING_TIME.is_min


def test_watermark_is_immutable_and_slotted():
    wm = Watermark(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        wm.timestamp = 2  # type: ignore[misc]
    assert not hasattr(wm, "__dict__")
    assert dataclasses.replace(wm, use_processing_time=True) == Watermark(1, True)
    assert len({Watermark(1), Watermark(1), Watermark(1, True)}) == 2


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        # bool is an int subclass, but True is not a timestamp
        ((True,), TypeError, "must be an int"),
        # a float would silently lose milliseconds past 2**53
        ((1.5,), TypeError, "must be an int"),
        # watermarks are Java longs, as in Flink
        ((WATERMARK_MIN - 1,), ValueError, "outside"),
        ((WATERMARK_MAX + 1,), ValueError, "outside"),
        # the flag is a bool, not a truthy value
        ((1, 1), TypeError, "use_processing_time must be a bool"),
    ],
)
def test_invalid_watermark_is_refused(args, error, match):
    with pytest.raises(error, match=match):
        Watermark(*args)


@pytest.mark.parametrize(
    ("smaller", "larger"),
    [
        # event time is ordered by timestamp
        (Watermark(1), Watermark(2)),
        (Watermark.MIN, Watermark(WATERMARK_MIN + 1)),
        # processing time is beyond every event time, even the largest
        (Watermark(WATERMARK_MAX), Watermark.PROCESSING_TIME),
        # processing-time watermarks are ordered by timestamp among themselves
        (Watermark.PROCESSING_TIME, Watermark(0, True)),
    ],
)
def test_order_puts_processing_time_after_event_time(smaller, larger):
    assert smaller < larger
    assert smaller <= larger
    assert larger > smaller
    assert larger >= smaller
    assert not larger < smaller
    assert max(smaller, larger) is larger


@given(watermarks, watermarks)
def test_order_is_total_and_consistent_with_equality(a, b):
    assert (a < b) + (a == b) + (a > b) == 1
    assert (a <= b) == (a < b or a == b)


def test_comparison_with_other_types_is_refused():
    with pytest.raises(TypeError):
        _ = Watermark(1) < 2  # type: ignore[operator]
    assert Watermark(1) != 1


@pytest.mark.parametrize(
    ("watermark", "text"),
    [
        # event time reads as ISO 8601 in UTC, with milliseconds
        (Watermark(0), "1970-01-01T00:00:00.000Z"),
        (Watermark(1_700_000_000_123), "2023-11-14T22:13:20.123Z"),
        (Watermark(-1), "1969-12-31T23:59:59.999Z"),
        # the sentinels read as names
        (Watermark.MIN, "MIN"),
        (Watermark.PROCESSING_TIME, "processing-time"),
        # a processing-time watermark with a timestamp shows it
        (Watermark(0, True), "processing-time@1970-01-01T00:00:00.000Z"),
        # Flink's end of event time (a bounded input has ended) reads as a name too
        (Watermark(WATERMARK_MAX), "MAX"),
        # beyond year 9999 there is no ISO form: plain milliseconds
        (Watermark(WATERMARK_MAX - 1), f"{WATERMARK_MAX - 1} ms"),
    ],
)
def test_str_is_readable(watermark, text):
    assert str(watermark) == text


@pytest.mark.parametrize(
    ("watermark", "ts_ms", "covered"),
    [
        # the boundary is included: ts <= watermark is complete
        (Watermark(10), 10, True),
        (Watermark(10), 9, True),
        (Watermark(10), 11, False),
        # MIN covers nothing but MIN itself (as in Flink, such rows are immediately late)
        (Watermark.MIN, WATERMARK_MIN + 1, False),
        # processing time covers every row
        (Watermark.PROCESSING_TIME, WATERMARK_MAX, True),
    ],
)
def test_covers_releases_rows_at_or_below_the_watermark(watermark, ts_ms, covered):
    assert watermark.covers(ts_ms) is covered


# -- serialisation --------------------------------------------------------------------------


def test_to_dict_uses_strings_so_json_keeps_every_bit():
    stored = json.dumps(Watermark.MIN.to_dict())
    assert stored == '{"timestamp": "-9223372036854775808", "use_processing_time": "false"}'
    assert Watermark.from_dict(json.loads(stored)) == Watermark.MIN


@given(watermarks)
def test_from_dict_inverts_to_dict(watermark):
    stored = watermark.to_dict()
    assert all(isinstance(v, str) for v in stored.values())
    assert Watermark.from_dict(json.loads(json.dumps(stored))) == watermark


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # a hand-written dict may use native types
        ({"timestamp": 7, "use_processing_time": True}, Watermark(7, True)),
        # the flag defaults to event time, and its case does not matter
        ({"timestamp": "7"}, Watermark(7)),
        ({"timestamp": "-7", "use_processing_time": "TRUE"}, Watermark(-7, True)),
        # unknown keys are ignored so that a newer writer may add fields
        ({"timestamp": "7", "use_processing_time": "false", "source": "x"}, Watermark(7)),
    ],
)
def test_from_dict_accepts_native_types_and_ignores_extra_keys(data, expected):
    assert Watermark.from_dict(data) == expected


@pytest.mark.parametrize(
    ("data", "match"),
    [
        # the timestamp is required
        ({"use_processing_time": "false"}, "has no 'timestamp' key"),
        # timestamps are integers of milliseconds, never floats or words
        ({"timestamp": "1.5"}, "not an integer"),
        ({"timestamp": 1.0}, "not an integer"),
        ({"timestamp": True}, "not an integer"),
        ({"timestamp": "+-1"}, "not an integer"),
        # the flag is 'true' or 'false'
        ({"timestamp": "1", "use_processing_time": "yes"}, "expected 'true' or 'false'"),
        # a parsable value out of range is still invalid
        ({"timestamp": str(WATERMARK_MAX + 1)}, "Stored watermark is invalid"),
    ],
)
def test_from_dict_refuses_malformed_values_with_a_watermark_error(data, match):
    with pytest.raises(WatermarkError, match=match):
        Watermark.from_dict(data)


def test_watermark_error_is_a_lakehouse_error():
    assert issubclass(WatermarkError, LakehouseError)
    assert lakehouse.time.WatermarkError is lakehouse.errors.WatermarkError


def test_status_values_are_stable_strings():
    assert [s.value for s in WatermarkStatus] == ["active", "idle"]


# -- clocks ---------------------------------------------------------------------------------


def test_manual_clock_moves_only_when_told():
    clock = ManualClock(100)
    assert clock.now_ms() == 100
    clock.advance(50)
    assert clock.now_ms() == 150
    clock.set(10)  # backwards on purpose: a stepped host clock
    assert clock.now_ms() == 10
    assert repr(clock) == "ManualClock(now_ms=10)"


def test_manual_clock_refuses_negative_advance_and_non_int():
    clock = ManualClock()
    with pytest.raises(ValueError, match="use set"):
        clock.advance(-1)
    with pytest.raises(TypeError, match="must be an int"):
        clock.set(1.5)  # type: ignore[arg-type]
    assert clock.now_ms() == 0


def test_system_clock_reads_epoch_milliseconds():
    before = time.time_ns() // 1_000_000
    now = SystemClock().now_ms()
    after = time.time_ns() // 1_000_000
    assert before <= now <= after


def test_clocks_satisfy_the_protocol():
    assert isinstance(ManualClock(), Clock)
    assert isinstance(SystemClock(), Clock)


# -- package rules --------------------------------------------------------------------------


def test_public_api_is_importable_from_the_package():
    from lakehouse.time import (  # noqa: F401
        Watermark,
        WatermarkError,
        WatermarkStatus,
        WatermarkStrategy,
        WatermarkValve,
    )

    assert sorted(lakehouse.time.__all__) == sorted(set(lakehouse.time.__all__))
    for name in lakehouse.time.__all__:
        assert hasattr(lakehouse.time, name), name


def test_importing_lakehouse_time_loads_no_spark_and_only_lakehouse_errors():
    code = (
        "import sys, lakehouse.time\n"
        "mods = sorted(m for m in sys.modules if m.split('.')[0] in ('lakehouse', 'pyspark', "
        "'py4j', 'deltalake', 'pyarrow', 'pandas'))\n"
        "print('\\n'.join(mods))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(result.stdout.split())
    allowed = {"lakehouse", "lakehouse.errors", "lakehouse.time"}
    assert {m for m in loaded if not m.startswith("lakehouse.time.")} <= allowed, loaded
