"""Logical-type decoders, one claim per test, with hand-computed values."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakehouse.cdc import ChangeEvent, decode_message
from lakehouse.cdc.logical import (
    decode_base64,
    decode_connect_decimal,
    decode_date,
    decode_decimal_number,
    decode_decimal_text,
    decode_micro_time,
    decode_micro_timestamp,
    decode_milli_time,
    decode_nano_time,
    decode_nano_timestamp,
    decode_timestamp,
    decode_variable_scale_decimal,
    decode_zoned_timestamp,
    encode_connect_decimal,
    rescale,
)
from lakehouse.cdc.schema import compile_struct
from lakehouse.cdc.serialize import dumps_json
from lakehouse.errors import CdcDecodeError

DECIMAL = "org.apache.kafka.connect.data.Decimal"


# --- Decimal (bytes, two's complement, big-endian) ---------------------------------------------


@pytest.mark.parametrize(
    ("b64", "scale", "expected"),
    [
        ("AeI=", 2, Decimal("4.82")),  # 0x01E2 = 482
        ("/h4=", 3, Decimal("-0.482")),  # 0xFE1E = 65054 - 65536 = -482
        ("/4U=", 0, Decimal("-123")),  # 0xFF85 = -123
        ("/w==", 5, Decimal("-0.00001")),  # 0xFF = -1
        ("gA==", 0, Decimal("-128")),  # 0x80 = -128: the sign bit alone
        ("AP8=", 1, Decimal("25.5")),  # 0x00FF = 255: leading zero byte keeps it positive
        ("", 2, Decimal("0.00")),  # no bytes: zero
        ("CUmw9vACMxPESZBQ3jjzTg==", 10, Decimal("1234567890123456789012345678.9012345678")),
        ("+HoR7yoluSb/C8lgAAAAAA==", 0, Decimal("-10000000000000000000000000000000000000")),
    ],
)
def test_connect_decimal_two_complement(b64, scale, expected):
    got = decode_connect_decimal(b64, scale)
    assert got == expected
    assert got.as_tuple().exponent == -scale


@given(
    scale=st.integers(0, 40),
    unscaled=st.integers(-(10**45), 10**45),
)
@settings(max_examples=200, deadline=None)
def test_connect_decimal_round_trip(scale, unscaled):
    value = Decimal(unscaled).scaleb(-scale)
    encoded = encode_connect_decimal(value, scale)
    decoded = decode_connect_decimal(encoded, scale)
    assert decoded == value
    assert decoded.as_tuple().exponent == -scale


def test_connect_decimal_rejects_bad_base64_and_huge_values():
    with pytest.raises(CdcDecodeError, match="not valid base64") as e:
        decode_connect_decimal("not base64!", 2)
    assert e.value.kind == "invalid_value"
    with pytest.raises(CdcDecodeError, match="exceeds 1024 bytes"):
        decode_connect_decimal("AAAA" * 400, 0)


def test_variable_scale_decimal():
    assert decode_variable_scale_decimal({"scale": 2, "value": "AeI="}) == Decimal("4.82")
    assert decode_variable_scale_decimal({"scale": 0, "value": "/4U="}) == Decimal(-123)
    with pytest.raises(CdcDecodeError, match="scale"):
        decode_variable_scale_decimal({"scale": "2", "value": "AeI="})
    with pytest.raises(CdcDecodeError, match="JSON object"):
        decode_variable_scale_decimal("AeI=")


def test_decimal_numbers_and_text():
    assert decode_decimal_number(Decimal("123.4567"), 4) == Decimal("123.4567")
    assert str(decode_decimal_number(346, 2)) == "346.00"
    # more digits than the scale: kept, never rounded
    assert str(decode_decimal_number(Decimal("1.23456"), 2)) == "1.23456"
    assert str(decode_decimal_text("12.5", 3)) == "12.500"
    assert decode_decimal_text("NaN", 2).is_nan()
    assert decode_decimal_text("-Infinity", None) == Decimal("-Infinity")
    with pytest.raises(CdcDecodeError, match="not a decimal"):
        decode_decimal_text("12,5", 2)
    with pytest.raises(CdcDecodeError, match="signalling"):
        decode_decimal_text("sNaN", 2)
    with pytest.raises(CdcDecodeError, match="JSON number"):
        decode_decimal_number("12.5", 2)


def test_rescale_never_rounds():
    assert str(rescale(Decimal("1.5"), 3)) == "1.500"
    assert str(rescale(Decimal("1.5555"), 3)) == "1.5555"
    assert rescale(Decimal("NaN"), 3).is_nan()


# --- dates and timestamps ------------------------------------------------------------------


def test_date_is_days_since_epoch():
    assert decode_date(0) == date(1970, 1, 1)
    assert decode_date(19439) == date(2023, 3, 23)
    assert decode_date(-719162) == date(1, 1, 1)
    with pytest.raises(CdcDecodeError, match="outside years") as e:
        decode_date(-719163)
    assert e.value.kind == "invalid_value"
    with pytest.raises(CdcDecodeError, match="JSON integer"):
        decode_date("2023-03-23")
    with pytest.raises(CdcDecodeError, match="JSON integer"):
        decode_date(True)


def test_timestamps_are_aware_utc():
    assert decode_timestamp(0) == datetime(1970, 1, 1, tzinfo=UTC)
    assert decode_timestamp(1595008822123) == datetime(2020, 7, 17, 18, 0, 22, 123000, tzinfo=UTC)
    assert decode_micro_timestamp(1595008822123456) == datetime(
        2020, 7, 17, 18, 0, 22, 123456, tzinfo=UTC
    )
    assert decode_nano_timestamp(1595008822123456789) == datetime(
        2020, 7, 17, 18, 0, 22, 123456, tzinfo=UTC
    )
    assert decode_timestamp(-1).tzinfo is UTC


def test_nanos_floor_to_micros_before_the_epoch():
    # -1 ns is 1969-12-31T23:59:59.999999999: floored, not rounded towards zero
    assert decode_nano_timestamp(-1) == datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert decode_nano_time(1999) == 1


def test_timestamp_out_of_range():
    with pytest.raises(CdcDecodeError, match="outside years"):
        decode_timestamp(2**62)
    with pytest.raises(CdcDecodeError, match="outside years"):
        decode_micro_timestamp(-(2**63))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2020-07-17T18:00:22Z", datetime(2020, 7, 17, 18, 0, 22, tzinfo=UTC)),
        ("2025-01-30T08:00:00.000000Z", datetime(2025, 1, 30, 8, 0, tzinfo=UTC)),
        ("2011-11-11T03:11:11.1Z", datetime(2011, 11, 11, 3, 11, 11, 100000, tzinfo=UTC)),
        ("2011-11-11T03:11:11.123456789Z", datetime(2011, 11, 11, 3, 11, 11, 123456, tzinfo=UTC)),
        ("2011-11-11T05:11:11+02:00", datetime(2011, 11, 11, 3, 11, 11, tzinfo=UTC)),
        ("2011-11-10T21:41:11-05:30", datetime(2011, 11, 11, 3, 11, 11, tzinfo=UTC)),
        ("2011-11-11T03:11Z", datetime(2011, 11, 11, 3, 11, tzinfo=UTC)),
        ("0001-01-01T00:00:00+00:00", datetime(1, 1, 1, tzinfo=UTC)),
    ],
)
def test_zoned_timestamp(text, expected):
    got = decode_zoned_timestamp(text)
    assert got == expected
    assert got.tzinfo is UTC


@pytest.mark.parametrize(
    "text",
    [
        "2011-11-11T03:11:11",  # no offset: not a zoned timestamp
        "2011-11-11",  # a date
        "+10000-01-01T00:00:00Z",  # Java's form for years past 9999
        "2011-13-11T03:11:11Z",  # month 13
        "2011-11-11T03:11:11.1234567890Z",  # 10 fraction digits
        "0001-01-01T00:00:00+01:00",  # before year 1 in UTC
        "2011-11-11T03:11:11+25:00",  # offset too large
        "",
    ],
)
def test_zoned_timestamp_rejects(text):
    with pytest.raises(CdcDecodeError) as e:
        decode_zoned_timestamp(text)
    assert e.value.kind == "invalid_value"


def test_times_of_day_are_micros_since_midnight():
    assert decode_milli_time(36803000) == 36803000000  # Time (ms)
    assert decode_micro_time(40271000010) == 40271000010  # MicroTime
    assert decode_nano_time(40271000010999) == 40271000010  # NanoTime, floored
    with pytest.raises(CdcDecodeError):
        decode_micro_time(1.5)


def test_base64_bytes():
    assert decode_base64("Sm9obg==") == b"John"
    assert decode_base64("") == b""
    with pytest.raises(CdcDecodeError, match="not valid base64"):
        decode_base64("Sm9obg")  # missing padding
    with pytest.raises(CdcDecodeError, match="base64 JSON string"):
        decode_base64(5)


# --- the same decoders, chosen by a Connect schema ------------------------------------------


def _field(name: str, type_: str, logical: str | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"field": name, "type": type_, "optional": True, **extra}
    if logical is not None:
        out["name"] = logical
    return out


def _envelope(fields: list[dict[str, Any]], after: dict[str, Any]) -> bytes:
    value = {"type": "struct", "name": "t.Value", "optional": True, "fields": fields}
    schema = {
        "type": "struct",
        "name": "t.Envelope",
        "fields": [
            {**value, "field": "before"},
            {**value, "field": "after"},
            {"type": "string", "field": "op"},
        ],
    }
    # dumps_json writes Decimal values as number tokens with their exact text
    return dumps_json({"schema": schema, "payload": {"op": "c", "after": after}}).encode()


def _decode_one(field: dict[str, Any], value: Any) -> tuple[Any, str]:
    event = decode_message(_envelope([field], {field["field"]: value}))
    assert isinstance(event, ChangeEvent)
    return event.row[field["field"]], dict(event.columns)[field["field"]]


@pytest.mark.parametrize(
    ("field", "value", "expected", "spark_type"),
    [
        (_field("d", "int32", "io.debezium.time.Date"), 18460, date(2020, 7, 17), "date"),
        (_field("d", "int32", "org.apache.kafka.connect.data.Date"), 1, date(1970, 1, 2), "date"),
        (
            _field("t", "int64", "io.debezium.time.Timestamp"),
            1595008822123,
            datetime(2020, 7, 17, 18, 0, 22, 123000, tzinfo=UTC),
            "timestamp",
        ),
        (
            _field("t", "int64", "org.apache.kafka.connect.data.Timestamp"),
            1000,
            datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
            "timestamp",
        ),
        (
            _field("t", "int64", "io.debezium.time.MicroTimestamp"),
            1595008822123456,
            datetime(2020, 7, 17, 18, 0, 22, 123456, tzinfo=UTC),
            "timestamp",
        ),
        (
            _field("t", "int64", "io.debezium.time.NanoTimestamp"),
            1595008822123456789,
            datetime(2020, 7, 17, 18, 0, 22, 123456, tzinfo=UTC),
            "timestamp",
        ),
        (
            _field("t", "string", "io.debezium.time.ZonedTimestamp"),
            "2020-07-17T20:00:22+02:00",
            datetime(2020, 7, 17, 18, 0, 22, tzinfo=UTC),
            "timestamp",
        ),
        (_field("t", "int32", "io.debezium.time.Time"), 64822000, 64822000000, "bigint"),
        (_field("t", "int64", "io.debezium.time.MicroTime"), 64822000000, 64822000000, "bigint"),
        (_field("t", "int64", "io.debezium.time.NanoTime"), 64822000000123, 64822000000, "bigint"),
        (_field("t", "string", "io.debezium.time.ZonedTime"), "11:11:11Z", "11:11:11Z", "string"),
        (_field("y", "int32", "io.debezium.time.Year"), 2021, 2021, "int"),
        (_field("j", "string", "io.debezium.data.Json"), '{"a": 1}', '{"a": 1}', "string"),
        (
            _field("u", "string", "io.debezium.data.Uuid"),
            "123e4567-e89b-12d3-a456-426614174000",
            "123e4567-e89b-12d3-a456-426614174000",
            "string",
        ),
        (
            _field("e", "string", "io.debezium.data.Enum", parameters={"allowed": "a,b"}),
            "a",
            "a",
            "string",
        ),
        (
            _field("b", "bytes", "io.debezium.data.Bits", parameters={"length": "8"}),
            "xw==",
            b"\xc7",
            "binary",
        ),
        (_field("m", "int64", "io.debezium.time.MicroDuration"), 3600000000, 3600000000, "bigint"),
        # Decimal as base64 bytes, with and without precision
        (
            _field(
                "p", "bytes", DECIMAL, parameters={"scale": "2", "connect.decimal.precision": "10"}
            ),
            "AeI=",
            Decimal("4.82"),
            "decimal(10,2)",
        ),
        (
            _field("p", "bytes", DECIMAL, parameters={"scale": "0"}),
            "/4U=",
            Decimal(-123),
            "decimal(38,0)",
        ),
        # decimal.format=NUMERIC: a JSON number in a bytes Decimal column
        (
            _field(
                "p", "bytes", DECIMAL, parameters={"scale": "3", "connect.decimal.precision": "8"}
            ),
            12345.11,
            Decimal("12345.110"),
            "decimal(8,3)",
        ),
        # precision beyond Spark's 38: exact Decimal, string column
        (
            _field(
                "p", "bytes", DECIMAL, parameters={"scale": "3", "connect.decimal.precision": "40"}
            ),
            "AeI=",
            Decimal("0.482"),
            "string",
        ),
        (
            _field(
                "v",
                "struct",
                "io.debezium.data.VariableScaleDecimal",
                fields=[{"field": "scale", "type": "int32"}, {"field": "value", "type": "bytes"}],
            ),
            {"scale": 3, "value": "/h4="},
            Decimal("-0.482"),
            "string",
        ),
        # decimal.handling.mode=string with column.propagate.source.type
        (
            _field(
                "s",
                "string",
                parameters={
                    "__debezium.source.column.type": "NUMERIC",
                    "__debezium.source.column.length": "6",
                    "__debezium.source.column.scale": "3",
                },
            ),
            "123.456",
            Decimal("123.456"),
            "decimal(6,3)",
        ),
        # decimal.handling.mode=double with column.propagate.source.type
        (
            _field(
                "s",
                "double",
                parameters={
                    "__debezium.source.column.type": "DECIMAL UNSIGNED",
                    "__debezium.source.column.length": "8",
                    "__debezium.source.column.scale": "2",
                },
            ),
            123.12,
            Decimal("123.12"),
            "decimal(8,2)",
        ),
        # decimal.handling.mode=string/double without anything naming a decimal: the plain type
        (_field("s", "string"), "123.456", "123.456", "string"),
        (_field("s", "double"), 123.456, 123.456, "double"),
        # physical types
        (_field("i", "int8"), -128, -128, "tinyint"),
        (_field("i", "int16"), 32767, 32767, "smallint"),
        (_field("i", "int32"), -(2**31), -(2**31), "int"),
        (_field("i", "int64"), 2**63 - 1, 2**63 - 1, "bigint"),
        (_field("f", "float"), 3.14, 3.14, "float"),
        (_field("f", "double"), 7, 7.0, "double"),
        # out of the double range: +inf, as Java's Double.parseDouble reads it
        (_field("f", "double"), Decimal("1e400"), math.inf, "double"),
        (_field("f", "boolean"), False, False, "boolean"),
        (_field("b", "bytes"), "Sm9obg==", b"John", "binary"),
        (
            _field("a", "array", items={"type": "int32", "name": "io.debezium.time.Date"}),
            [0, None, 1],
            [date(1970, 1, 1), None, date(1970, 1, 2)],
            "array<date>",
        ),
        (
            _field("a", "array", items={"type": "array", "items": {"type": "string"}}),
            [["x"], []],
            [["x"], []],
            "array<array<string>>",
        ),
        (
            _field("m", "map", keys={"type": "string"}, values={"type": "int32"}),
            {"a": 1},
            '{"a":1}',
            "string",
        ),
        (
            _field(
                "g",
                "struct",
                "io.debezium.data.geometry.Point",
                fields=[{"field": "x", "type": "double"}, {"field": "y", "type": "double"}],
            ),
            {"x": 1.0, "y": 2.5},
            '{"x":1.0,"y":2.5}',
            "string",
        ),
        # unknown logical name: the physical type
        (_field("x", "int64", "com.example.Custom"), 5, 5, "bigint"),
        # known logical name on an unexpected physical type: the physical type
        (_field("x", "string", "io.debezium.time.Date"), "1999-09-09", "1999-09-09", "string"),
    ],
)
def test_schema_driven_decoding(field, value, expected, spark_type):
    got, got_type = _decode_one(field, value)
    assert got == expected
    assert type(got) is type(expected)
    assert got_type == spark_type


def test_decimal_that_just_fits():
    field = _field(
        "p", "bytes", DECIMAL, parameters={"scale": "2", "connect.decimal.precision": "4"}
    )
    assert _decode_one(field, Decimal("99.99"))[0] == Decimal("99.99")
    assert _decode_one(field, 0)[0] == Decimal("0.00")
    assert _decode_one(field, Decimal("1.2300"))[0] == Decimal("1.2300")  # zeros are no digits


def test_decimal_with_more_digits_than_its_scale_is_refused_not_rounded():
    field = _field(
        "p", "bytes", DECIMAL, parameters={"scale": "2", "connect.decimal.precision": "4"}
    )
    with pytest.raises(CdcDecodeError, match=r"-0.001 has more fractional digits than "):
        _decode_one(field, Decimal("-0.001"))


def test_decimal_keeps_the_messages_digits():
    got, _ = _decode_one(
        _field("p", "bytes", DECIMAL, parameters={"scale": "3", "connect.decimal.precision": "40"}),
        Decimal("123456789876543212345678987654321.110"),
    )
    assert str(got) == "123456789876543212345678987654321.110"


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity"])
def test_double_columns_accept_jacksons_non_finite_strings(text):
    got, _ = _decode_one(_field("f", "double"), text)
    assert repr(got) == repr(float(text))


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        (_field("i", "int8"), 128, "int8"),
        (_field("i", "int32"), "5", "int32"),
        (_field("i", "int64"), True, "int64"),
        (_field("i", "int64"), 1.5, "int64"),
        (_field("f", "double"), "1.5", "JSON number"),
        (_field("b", "boolean"), 1, "boolean"),
        (_field("s", "string"), 5, "JSON string"),
        (_field("b", "bytes"), "%%%", "base64"),
        (_field("a", "array", items={"type": "int32"}), {"a": 1}, "JSON array"),
        (_field("a", "array", items={"type": "int32"}), ["x"], "int32"),
        (_field("g", "struct", fields=[]), [1], "JSON object"),
        (_field("d", "int32", "io.debezium.time.Date"), 10**9, "outside years"),
        (_field("t", "string", "io.debezium.time.ZonedTimestamp"), "yesterday", "ISO-8601"),
        (_field("p", "bytes", DECIMAL, parameters={"scale": "2"}), True, "decimal"),
        # decimal(4,2) holds 2 integer digits: Spark would null the whole row, so reject the value
        (
            _field(
                "p", "bytes", DECIMAL, parameters={"scale": "2", "connect.decimal.precision": "4"}
            ),
            Decimal("123.45"),
            "does not fit decimal\\(4,2\\)",
        ),
    ],
)
def test_wrong_values_name_the_column(field, value, match):
    with pytest.raises(CdcDecodeError, match=match) as e:
        _decode_one(field, value)
    assert e.value.kind == "invalid_value"
    assert f"column {field['field']!r}" in str(e.value)


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        ({"type": "struct", "fields": [{"field": "x", "type": "int128"}]}, "unknown type"),
        ({"type": "struct", "fields": [{"type": "int32"}]}, "no 'field' name"),
        (
            {
                "type": "struct",
                "fields": [{"field": "x", "type": "int32"}, {"field": "x", "type": "int32"}],
            },
            "duplicate",
        ),
        ({"type": "struct", "fields": [{"field": "x", "type": "array"}]}, "items"),
        ({"type": "struct", "fields": [{"field": "p", "type": "bytes", "name": DECIMAL}]}, "scale"),
        (
            {
                "type": "struct",
                "fields": [
                    {"field": "p", "type": "bytes", "name": DECIMAL, "parameters": {"scale": "two"}}
                ],
            },
            "integer",
        ),
        ({"type": "struct", "fields": [{"field": 5, "type": "int32"}]}, "field"),
        (
            {
                "type": "struct",
                "fields": [
                    {"field": "p", "type": "bytes", "name": DECIMAL, "parameters": {"scale": "²"}}
                ],
            },
            "integer",
        ),
        ({"type": "string"}, "struct"),
    ],
)
def test_malformed_schemas_are_invalid_envelopes(schema, match):
    with pytest.raises(CdcDecodeError, match=match) as e:
        compile_struct(schema)
    assert e.value.kind == "invalid_envelope"


def test_deeply_nested_schema_is_too_deep():
    inner: dict[str, Any] = {"type": "int32"}
    for _ in range(100):
        inner = {"type": "array", "items": inner}
    with pytest.raises(CdcDecodeError) as e:
        compile_struct({"type": "struct", "fields": [{"field": "x", **inner}]})
    assert e.value.kind == "too_deep"


def test_plan_keeps_fields_the_schema_lacks_and_nulls_missing_ones():
    plan = compile_struct(
        {
            "type": "struct",
            "fields": [{"field": "id", "type": "int32"}, {"field": "name", "type": "string"}],
        }
    )
    row, columns = plan.decode_row({"id": 1, "extra": 2.5})
    assert row == {"id": 1, "name": None, "extra": 2.5}
    assert columns == (("id", "int"), ("name", "string"), ("extra", "double"))
