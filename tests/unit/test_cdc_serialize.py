"""JSON output of decoded rows: exact decimals, UTC timestamps, base64 bytes."""

from __future__ import annotations

import json
from collections import OrderedDict
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from enum import IntEnum

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakehouse.cdc import row_to_json, to_json_compatible
from lakehouse.cdc.serialize import dumps_json


def test_decimal_is_written_as_its_exact_text():
    assert row_to_json({"x": Decimal("123456789876543212345678987654321.110")}) == (
        '{"x":123456789876543212345678987654321.110}'
    )
    assert row_to_json({"x": Decimal("0.10")}) == '{"x":0.10}'
    assert row_to_json({"x": Decimal("-0")}) == '{"x":-0}'
    assert row_to_json({"x": Decimal("1E+3")}) == '{"x":1E+3}'


@pytest.mark.parametrize("value", [Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity")])
def test_non_finite_decimals_become_null(value):
    # Spark's decimals have no NaN or infinity
    assert row_to_json({"x": value}) == '{"x":null}'
    assert to_json_compatible(value) is None


@pytest.mark.parametrize(
    ("value", "text"),
    [(float("nan"), '"NaN"'), (float("inf"), '"Infinity"'), (float("-inf"), '"-Infinity"')],
)
def test_non_finite_floats_are_written_as_the_strings_spark_reads_into_doubles(value, text):
    assert row_to_json({"x": value, "a": [value]}) == f'{{"x":{text},"a":[{text}]}}'
    assert to_json_compatible(value) is None


def test_datetimes_are_utc_with_micros_and_z():
    cet = timezone(timedelta(hours=1))
    assert row_to_json({"t": datetime(2023, 3, 23, 23, 0, 10, 5, tzinfo=cet)}) == (
        '{"t":"2023-03-23T22:00:10.000005Z"}'
    )
    assert to_json_compatible(datetime(2023, 3, 23, tzinfo=UTC)) == "2023-03-23T00:00:00.000000Z"
    # naive datetimes are taken as UTC (the decoder never returns them)
    assert to_json_compatible(datetime(999, 1, 2, 3, 4, 5)) == "0999-01-02T03:04:05.000000Z"


def test_dates_bytes_times_and_nesting():
    value = {
        "d": date(5, 1, 1),
        "b": b"\x00\xff",
        "t": time(8, 30),
        "n": [(1, True), None],
        "o": OrderedDict(a=1),
    }
    assert to_json_compatible(value) == {
        "d": "0005-01-01",
        "b": "AP8=",
        "t": "08:30:00.000000",
        "n": [[1, True], None],
        "o": {"a": 1},
    }
    assert dumps_json(value) == (
        '{"d":"0005-01-01","b":"AP8=","t":"08:30:00.000000","n":[[1,true],null],"o":{"a":1}}'
    )


def test_scalar_subclasses_become_plain_types():
    class Level(IntEnum):
        HIGH = 3

    assert row_to_json({"l": Level.HIGH, "s": Decimal("1.5")}) == '{"l":3,"s":1.5}'
    assert type(to_json_compatible(Level.HIGH)) is int


def test_output_is_ascii_even_with_lone_surrogates():
    text = row_to_json({"s": "é\ud800"})
    assert text == '{"s":"\\u00e9\\ud800"}'
    text.encode("ascii")


def test_unsupported_values_raise_type_error():
    with pytest.raises(TypeError, match="set"):
        row_to_json({"x": {1, 2}})
    with pytest.raises(TypeError, match="keys must be strings"):
        dumps_json({1: "a"})
    with pytest.raises(TypeError, match="keys must be strings"):
        to_json_compatible({1: "a"})


finite_decimals = st.decimals(allow_nan=False, allow_infinity=False)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False)
    | finite_decimals
)


@given(
    st.dictionaries(
        st.text(max_size=8),
        st.recursive(
            json_scalars,
            lambda inner: (
                st.lists(inner, max_size=4)
                | st.dictionaries(st.text(max_size=8), inner, max_size=4)
            ),
            max_leaves=10,
        ),
        max_size=6,
    )
)
@settings(max_examples=60, deadline=None)
def test_row_to_json_round_trips_exactly(row):
    back = json.loads(row_to_json(row), parse_float=Decimal)
    assert back == _floats_as_written(row)


def _floats_as_written(value):
    # A float is written as its shortest repr, which parse_float=Decimal reads digit for digit.
    if type(value) is float:
        return Decimal(repr(value))
    if isinstance(value, list):
        return [_floats_as_written(v) for v in value]
    if isinstance(value, dict):
        return {k: _floats_as_written(v) for k, v in value.items()}
    return value


@given(finite_decimals)
@settings(max_examples=200)
def test_decimal_text_survives(value):
    back = json.loads(row_to_json({"x": value}), parse_float=Decimal, parse_int=Decimal)["x"]
    assert back == value
    assert str(back) == str(value) or back.as_tuple().exponent >= 0
