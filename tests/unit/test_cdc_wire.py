"""Which Connect schemas the JVM decode reads, and how (lakehouse.cdc.wire), without Spark."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lakehouse.cdc.wire import compile_key, compile_value, schema_prefix

DECIMAL = "org.apache.kafka.connect.data.Decimal"


def _envelope(*columns: dict[str, Any], source: list[dict[str, Any]] | None = None) -> str:
    row = {"type": "struct", "optional": True, "fields": list(columns)}
    fields = [
        {**row, "field": "before"},
        {**row, "field": "after"},
        {
            "type": "struct",
            "field": "source",
            "fields": source
            or [{"type": "string", "field": "connector"}, {"type": "int64", "field": "lsn"}],
        },
        {"type": "string", "field": "op"},
        {"type": "int64", "field": "ts_ms", "optional": True},
    ]
    return json.dumps({"type": "struct", "fields": fields})


@pytest.mark.parametrize(
    ("column", "conversion"),
    [
        ({"type": "int8"}, "same"),
        ({"type": "float"}, "same"),
        ({"type": "bytes"}, "base64"),
        ({"type": "bytes", "name": "io.debezium.data.Bits"}, "base64"),
        ({"type": "string", "name": "io.debezium.data.Json"}, "same"),
        ({"type": "int32", "name": "io.debezium.time.Date"}, "date"),
        ({"type": "int64", "name": "io.debezium.time.Timestamp"}, "ts_millis"),
        ({"type": "int64", "name": "io.debezium.time.MicroTimestamp"}, "ts_micros"),
        ({"type": "int64", "name": "io.debezium.time.NanoTimestamp"}, "ts_nanos"),
        ({"type": "string", "name": "io.debezium.time.ZonedTimestamp"}, "zoned"),
        ({"type": "int32", "name": "io.debezium.time.Time"}, "time_millis"),
        ({"type": "int64", "name": "io.debezium.time.MicroTime"}, "same"),
        ({"type": "int64", "name": "io.debezium.time.NanoTime"}, "time_nanos"),
        # a logical name on a physical type it does not apply to reads as the physical type
        ({"type": "string", "name": "io.debezium.time.Date"}, "same"),
        (
            {"type": "bytes", "name": DECIMAL, "parameters": {"scale": "2"}},
            ("decimal", 38, 2),
        ),
        (
            {
                "type": "bytes",
                "name": DECIMAL,
                "parameters": {"scale": "4", "connect.decimal.precision": "12"},
            },
            ("decimal", 12, 4),
        ),
    ],
)
def test_each_column_type_the_jvm_reads_has_the_python_decoders_type(column, conversion):
    plan = compile_value(_envelope({**column, "field": "x"}))
    assert plan is not None
    assert plan.after is not None and plan.after.columns == (("x", conversion),)


@pytest.mark.parametrize(
    "column",
    [
        {"type": "array", "items": {"type": "int32"}},
        {"type": "map", "keys": {"type": "string"}, "values": {"type": "int32"}},
        {"type": "struct", "fields": [{"type": "int32", "field": "a"}]},
        {
            "type": "struct",
            "name": "io.debezium.data.VariableScaleDecimal",
            "fields": [{"type": "int32", "field": "scale"}, {"type": "bytes", "field": "value"}],
        },
        # wider than Spark's decimals: the Python decoder keeps it as text
        {
            "type": "bytes",
            "name": DECIMAL,
            "parameters": {"scale": "2", "connect.decimal.precision": "40"},
        },
        # a decimal sent as text, named so by its source column type
        {"type": "string", "parameters": {"__debezium.source.column.type": "NUMERIC"}},
    ],
)
def test_a_schema_with_a_column_the_jvm_does_not_read_is_decoded_in_python(column):
    assert (
        compile_value(_envelope({"type": "int32", "field": "id"}, {**column, "field": "x"})) is None
    )


@pytest.mark.parametrize(
    "source",
    [
        [{"type": "string", "field": "lsn"}],  # the models take lsn as an integer
        [{"type": "int64", "field": "db"}],
        [{"type": "int32", "field": "snapshot"}],
        [{"type": "array", "items": {"type": "string"}, "field": "extra"}],
    ],
)
def test_a_source_block_the_models_refuse_is_decoded_in_python(source):
    assert compile_value(_envelope({"type": "int32", "field": "id"}, source=source)) is None


def test_source_fields_the_models_take_are_read_in_the_jvm():
    source = [
        {"type": "boolean", "field": "snapshot"},  # the legacy boolean
        {"type": "string", "field": "txId"},  # Oracle's; PostgreSQL's is an integer
        {"type": "string", "field": "thread_name"},  # not in the models: kept as it is
    ]
    plan = compile_value(_envelope({"type": "int32", "field": "id"}, source=source))
    assert plan is not None
    assert plan.source_fields == {"snapshot": "boolean", "txId": "string", "thread_name": "string"}


def test_names_the_table_cannot_take_leave_the_record_to_python():
    assert compile_value(_envelope({"type": "int32", "field": "a b"})) is None
    assert (
        compile_value(_envelope({"type": "int32", "field": "A"}, {"type": "int32", "field": "a"}))
        is None
    )
    reserved = frozenset({"_op"})
    assert compile_value(_envelope({"type": "int32", "field": "_OP"}), reserved=reserved) is None


def test_what_is_not_a_change_event_schema_is_not_compiled():
    assert compile_value('{"type":"struct","fields":[{"type":"string","field":"ddl"}]}') is None
    assert compile_value("null") is None
    assert compile_value("{not json") is None


def test_the_row_columns_are_the_python_decoders_text():
    plan = compile_value(
        _envelope(
            {"type": "int32", "field": "id"},
            {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "field": "at"},
        )
    )
    assert plan is not None and plan.after is not None
    assert plan.after.row_columns == json.dumps([["id", "int"], ["at", "timestamp"]])


def test_keys_compile_with_their_column_names():
    key = compile_key('{"type":"struct","fields":[{"type":"string","field":"currency"}]}')
    assert key is not None and key.image.row_columns == '["currency"]'
    assert compile_key('{"type":"int32"}') is None


def test_only_the_compact_wrapper_has_a_prefix():
    assert schema_prefix('{"schema":{"type":"int32"},"payload":1}') == (
        '{"schema":{"type":"int32"},"payload":',
        '{"type":"int32"}',
    )
    assert schema_prefix('{"payload":1,"schema":{"type":"int32"}}') is None
    assert schema_prefix('{"schema":{"type":"int32"} ,"payload":1}') is None
    assert schema_prefix('{"schema":{"type":') is None


def test_a_mark_names_its_schema_after_newer_schemas_pushed_it_out():
    """A batch's records name their schemas by marks; learning the batch's new schemas may
    push those out of what the JVM decodes, but not out of what the marks say."""
    from lakehouse.dimension.jvm_decode import MAX_KNOWN, WireSchemas, schema_mark

    texts = [_envelope({"type": "int32", "field": f"c{i}"}) for i in range(MAX_KNOWN + 5)]
    wire = WireSchemas()
    wire.learn_texts([(None, f'{{"schema":{texts[0]},"payload":null}}')])
    first = next(w for w in wire.values.values() if w is not None).text
    wire.learn_texts([(None, f'{{"schema":{t},"payload":null}}') for t in texts[1:]])
    assert first not in {w.text for w in wire.values.values() if w is not None}
    assert len(wire.values) == MAX_KNOWN
    assert wire.marks()[schema_mark(first)] == first
