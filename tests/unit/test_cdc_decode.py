"""decode_message: message kinds, the documented decisions, every error kind, hostile input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES
from helpers import json_paths
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakehouse.cdc import (
    DECODE_ERROR_KINDS,
    ChangeEvent,
    SchemaChange,
    Tombstone,
    TransactionMarker,
    decode_message,
)
from lakehouse.cdc._parse import SchemaCache
from lakehouse.cdc.serialize import dumps_json
from lakehouse.errors import CdcDecodeError

DEBEZIUM = FIXTURES / "debezium"
FIXTURE_TEXTS = {p.name: p.read_text(encoding="utf-8") for p in sorted(DEBEZIUM.glob("*.json"))}

SOURCE = {
    "connector": "postgresql",
    "db": "shop",
    "schema": "public",
    "table": "items",
    "ts_ms": 1700000000000,
    "snapshot": "false",
    "lsn": 42,
    "txId": 7,
}


def _msg(**payload: Any) -> bytes:
    return dumps_json(payload).encode()


def _raises(kind: str, value: Any, key: Any = None, **kwargs: Any) -> CdcDecodeError:
    with pytest.raises(CdcDecodeError) as e:
        decode_message(value, key, **kwargs)
    assert e.value.kind == kind, str(e.value)
    return e.value


# --- message kinds ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"",
        "",
        b"null",
        " null ",
        b'{"schema":null,"payload":null}',
        b'{"schema":{"type":"struct","fields":[]},"payload":null}',
    ],
)
def test_tombstones(value):
    # a null/empty Kafka value, or a wrapper around a null payload
    assert decode_message(value) == Tombstone()


def test_tombstone_with_a_schemaless_key():
    assert decode_message(None, key=b'{"id": 5, "region": "eu"}') == Tombstone(
        key={"id": 5, "region": "eu"}, key_columns=("id", "region")
    )


def test_transaction_markers():
    begin = decode_message(
        _msg(status="BEGIN", id="571:53195829", event_count=None, data_collections=None, ts_ms=1)
    )
    assert begin == TransactionMarker("BEGIN", "571:53195829", None, (), 1)
    end = decode_message(
        _msg(
            status="END",
            id="571:53195832",
            event_count=2,
            data_collections=[{"data_collection": "s.a", "event_count": 2}],
        )
    )
    assert end == TransactionMarker("END", "571:53195832", 2, (("s.a", 2),), None)


def test_transaction_marker_with_bad_status_is_invalid():
    err = _raises("invalid_envelope", _msg(status="COMMIT", id="1"))
    assert "status" in str(err)


def test_schema_change_without_table_changes():
    change = decode_message(
        _msg(
            source={"connector": "mysql", "db": "inv", "ts_ms": 5},
            databaseName="inv",
            ddl="DROP TABLE t",
            tableChanges=[],
        )
    )
    assert change == SchemaChange(
        ddl="DROP TABLE t", db="inv", table_changes=(), event_time_ms=5, connector="mysql"
    )


# --- change events and the documented decisions ---------------------------------------------


def test_delete_without_before_relies_on_the_key():
    event = decode_message(_msg(op="d", before=None, after=None, source=SOURCE), key=b'{"id": 3}')
    assert isinstance(event, ChangeEvent)
    assert (event.op, event.row, event.columns, event.key, event.key_columns) == (
        "d",
        None,
        (),
        {"id": 3},
        ("id",),
    )


def test_truncate_has_no_row():
    event = decode_message(_msg(op="t", source=SOURCE, ts_ms=9))
    assert (event.op, event.row, event.columns, event.seq) == ("t", None, (), "0" * 18 + "42")


@pytest.mark.parametrize("op", ["r", "c", "u"])
def test_missing_after_is_an_error(op):
    err = _raises("missing_row_image", _msg(op=op, before={"id": 1}, after=None, source=SOURCE))
    assert "after" in str(err)


def test_postgres_logical_decoding_message_is_not_a_row_change():
    err = _raises(
        "unknown_op",
        _msg(op="m", ts_ms=1, source=SOURCE, message={"prefix": "p", "content": "AA=="}),
    )
    assert "logical decoding message" in str(err)


@pytest.mark.parametrize(
    ("snapshot", "expected"),
    [
        (True, "true"),
        (False, "false"),
        (None, "false"),
        ("incremental", "incremental"),
        ("first", "first"),
        ("first_in_data_collection", "first_in_data_collection"),
    ],
)
def test_snapshot_is_normalised(snapshot, expected):
    source = {**SOURCE, "snapshot": snapshot}
    assert decode_message(_msg(op="r", after={"id": 1}, source=source)).snapshot == expected


def test_missing_snapshot_is_false():
    source = {k: v for k, v in SOURCE.items() if k != "snapshot"}
    assert decode_message(_msg(op="c", after={"id": 1}, source=source)).snapshot == "false"


def test_event_time_falls_back_to_envelope_ts_ms():
    source = {**SOURCE, "ts_ms": None}
    assert decode_message(_msg(op="c", after={}, source=source, ts_ms=77)).event_time_ms == 77
    assert decode_message(_msg(op="c", after={}, ts_ms=78)).event_time_ms == 78
    assert decode_message(_msg(op="c", after={})).event_time_ms is None


def test_transaction_id_prefers_the_transaction_block():
    tx = {"id": "571:53195829", "total_order": 1, "data_collection_order": 1}
    event = decode_message(_msg(op="c", after={}, source=SOURCE, transaction=tx))
    assert event.tx_id == "571:53195829"
    assert decode_message(_msg(op="c", after={}, source=SOURCE)).tx_id == "7"
    mysql = {"connector": "mysql", "gtid": "3E11FA47-71CA-11E1-9E33-C80AA9429562:23"}
    assert decode_message(_msg(op="c", after={}, source=mysql)).tx_id == mysql["gtid"]


def test_unknown_envelope_and_source_fields_are_kept_out_of_the_way():
    event = decode_message(
        _msg(op="c", after={"id": 1}, source={**SOURCE, "new_field": [1]}, new_top_level={"x": 1})
    )
    assert event.row == {"id": 1}


def test_mongodb_collection_is_the_table():
    event = decode_message(
        _msg(
            op="c",
            after={"_id": 1},
            source={"connector": "mongodb", "db": "inv", "collection": "customers"},
        )
    )
    assert (event.table, event.source_table, event.seq) == ("customers", "inv.customers", None)


def test_schemaless_value_types():
    event = decode_message(
        b'{"op":"c","after":{"i":1,"big":18446744073709551615,"f":1.50,"s":"x","b":true,'
        b'"n":null,"o":{"k":1.10},"a":[1,2.5],"e":[],"m":[1,"x"]}}'
    )
    assert event.row == {
        "i": 1,
        "big": 18446744073709551615,
        "f": 1.5,
        "s": "x",
        "b": True,
        "n": None,
        "o": '{"k":1.10}',
        "a": [1.0, 2.5],
        "e": [],
        "m": '[1,"x"]',
    }
    assert event.columns == (
        ("i", "bigint"),
        ("big", "decimal(38,0)"),
        ("f", "double"),
        ("s", "string"),
        ("b", "boolean"),
        ("n", "void"),
        ("o", "string"),
        ("a", "array<double>"),
        ("e", "array<void>"),
        ("m", "string"),
    )


# --- keys ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        b"not json",
        b"[1, 2]",
        b'"1004"',
        b"\xff\xfe",
        b"",
        b'{"schema": {"type": "int32"}, "payload": 5}',
        b'{"schema": {"type": "struct", "fields": [{"field": "id", '
        b'"type": "int32"}]}, "payload": {"id": "x"}}',
        b"[" * 5000,
        12345,
    ],
)
def test_undecodable_keys_are_absent_not_errors(key):
    event = decode_message(_msg(op="c", after={"id": 1}, source=SOURCE), key=key)
    assert (event.key, event.key_columns) == (None, ())


def test_key_larger_than_max_bytes_is_ignored():
    event = decode_message(_msg(op="c", after={"id": 1}), key=b'{"id": 1}', max_bytes=1000)
    assert event.key == {"id": 1}
    event = decode_message(
        _msg(op="c", after={"id": 1}), key=b'{"id": 1}' + b" " * 1000, max_bytes=1000
    )
    assert event.key is None


def test_key_with_schema_decodes_logical_types_in_schema_order():
    key = dumps_json(
        {
            "schema": {
                "type": "struct",
                "fields": [
                    {"field": "day", "type": "int32", "name": "io.debezium.time.Date"},
                    {"field": "id", "type": "int64"},
                ],
            },
            "payload": {"id": 1, "day": 0},
        }
    )
    event = decode_message(_msg(op="c", after={"id": 1}), key=key)
    assert event.key_columns == ("day", "id")
    assert str(event.key["day"]) == "1970-01-01"


# --- every error kind -----------------------------------------------------------------------


ERROR_CASES = [
    ("malformed_json", b'{"op": "c", '),
    ("malformed_json", b'{"op": "c"} trailing'),
    ("malformed_json", b"{'op': 'c'}"),
    ("malformed_json", b'{"op": "c", "after": {"x": NaN}}'),
    ("malformed_json", b'{"op": "c", "after": {"x": -Infinity}}'),
    ("malformed_json", b"   "),
    ("not_an_object", b"[1, 2]"),
    ("not_an_object", b'"text"'),
    ("not_an_object", b"42"),
    ("not_an_object", b'{"schema": null, "payload": [1]}'),
    ("invalid_envelope", b'{"op": 5, "after": {}}'),
    ("invalid_envelope", b'{"op": null, "after": {}}'),
    ("invalid_envelope", b'{"op": "c", "after": "x"}'),
    ("invalid_envelope", b'{"op": "c", "after": {}, "source": {"ts_ms": "abc"}}'),
    ("invalid_envelope", b'{"op": "c", "after": {}, "source": {"ts_ms": 1.5}}'),
    ("invalid_envelope", b'{"op": "c", "after": {}, "source": {"snapshot": "maybe"}}'),
    ("invalid_envelope", b'{"op": "c", "after": {}, "source": "mysql"}'),
    ("invalid_envelope", b'{"op": "c", "after": {}, "ts_ms": "1"}'),
    ("invalid_envelope", b'{"op": "c", "after": {}, "transaction": {"id": 5}}'),
    ("invalid_envelope", b'{"before": null, "after": {"id": 1}}'),
    ("invalid_envelope", b'{"schema": 5, "payload": {"op": "c", "after": {}}}'),
    (
        "invalid_envelope",
        b'{"schema": {"type": "struct", "fields": [{"field": "after", '
        b'"type": "struct", "fields": [{"field": "x", "type": "uint8"}]}]}, '
        b'"payload": {"op": "c", "after": {"x": 1}}}',
    ),
    ("bad_column_name", b'{"op": "c", "after": {"id": 1, "ID": 2}}'),
    ("bad_column_name", b'{"op": "c", "after": {"a b": 1}}'),
    ("too_deep", b'{"op": "c", "after": {"d": ' + b"[" * 40 + b"]" * 40 + b"}}"),
    ("unknown_op", b'{"op": "x", "after": {}}'),
    ("unknown_op", b'{"op": "C", "after": {}}'),
    ("missing_row_image", b'{"op": "c", "after": null}'),
    (
        "invalid_value",
        b'{"schema": {"type": "struct", "fields": [{"field": "after", '
        b'"type": "struct", "fields": [{"field": "x", "type": "int32"}]}]}, '
        b'"payload": {"op": "c", "after": {"x": "one"}}}',
    ),
    (
        "invalid_value",
        b'{"op": "c", "after": {}, "source": {"connector": "postgresql", "lsn": -5}}',
    ),
    ("invalid_value", b'{"op": "c", "after": {"x": 1' + b"0" * 5000 + b"}}"),
    ("encoding", b'{"op": "c", "after": {"name": "\xff"}}'),
    ("invalid_value", b'{"op": "c", "after": {"x": 1e99999999999999999999}}'),
    ("encoding", b"\xfe\xff\x00{"),
    ("encoding", b'{"op": "c", "after": {"name": "\\ud800"}}'),
    ("encoding", b'{"op": "c", "after": {"\\udc00": 1}}'),
    ("too_deep", b"[" * 100_000 + b"]" * 100_000),
    ("too_deep", b'{"op": "c", "after": {"x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}}"),
]


@pytest.mark.parametrize(("kind", "value"), ERROR_CASES)
def test_error_kinds(kind, value):
    err = _raises(kind, value)
    assert not str(err).startswith("unexpected decoder failure")


def test_every_error_kind_is_tested():
    assert {kind for kind, _ in ERROR_CASES} | {"too_large"} == DECODE_ERROR_KINDS


def test_surrogate_pairs_and_escaped_backslashes_are_fine():
    event = decode_message(b'{"op": "c", "after": {"e": "\\ud83d\\ude00", "b": "\\\\ud800"}}')
    assert event.row == {"e": "\U0001f600", "b": "\\ud800"}


def test_deeply_nested_schema_in_a_message_is_too_deep():
    # 600 nested arrays: within the JSON parser's limit, beyond pydantic's validation depth
    inner = '{"type": "int32"}'
    for _ in range(600):
        inner = '{"type": "array", "items": ' + inner + "}"
    after = '{"type": "struct", "field": "after", "fields": [{"field": "x", ' + inner[1:] + "]}"
    schema = '{"type": "struct", "fields": [' + after + "]}"
    _raises("too_deep", '{"schema": ' + schema + ', "payload": {"op": "c", "after": {"x": 1}}}')


def test_too_large():
    err = _raises("too_large", b'{"op": "c", "after": {}}', max_bytes=10)
    assert "limit of 10 bytes (ingest.max_record_bytes)" in str(err)
    _raises("too_large", '{"op": "c", "after": {}}', max_bytes=10)
    assert isinstance(decode_message(b'{"op":"c","after":{}}', max_bytes=21), ChangeEvent)


def test_value_of_the_wrong_python_type():
    _raises("encoding", 12345)


def test_bytes_like_values_and_a_byte_order_mark():
    text = '\ufeff{"op": "c", "after": {"id": 1}}'
    for value in (text, text.encode(), bytearray(text.encode()), memoryview(text.encode())):
        assert decode_message(value).row == {"id": 1}


def test_error_messages_say_what_failed():
    err = _raises("invalid_envelope", b'{"op": "c", "after": {}, "source": {"ts_ms": "abc"}}')
    assert "source.ts_ms" in str(err) and "'abc'" in str(err)
    err = _raises("malformed_json", b'{"op": "c", ')
    assert "line 1" in str(err)


# --- schema cache -----------------------------------------------------------------------------


def _wrapped(fields: list[dict[str, Any]], after: dict[str, Any], pretty: bool = False) -> str:
    value = {"type": "struct", "optional": True, "fields": fields}
    schema = {
        "type": "struct",
        "fields": [{**value, "field": "before"}, {**value, "field": "after"}],
    }
    message = {"schema": schema, "payload": {"op": "c", "after": after}}
    return json.dumps(message, indent=2) if pretty else json.dumps(message)


def test_schema_cache_reuses_the_plan_and_sees_schema_changes():
    cache = SchemaCache(max_entries=2)
    v1 = _wrapped([{"field": "d", "type": "int32", "name": "io.debezium.time.Date"}], {"d": 1})
    first = decode_message(v1, cache=cache)
    again = decode_message(v1.replace('"d": 1', '"d": 2'), cache=cache)
    assert len(cache) == 1
    assert (str(first.row["d"]), str(again.row["d"])) == ("1970-01-02", "1970-01-03")
    # ALTER TABLE: same table, new schema text, new plan
    v2 = _wrapped([{"field": "d", "type": "int32"}], {"d": 1})
    assert decode_message(v2, cache=cache).row == {"d": 1}
    assert len(cache) == 2
    decode_message(_wrapped([{"field": "e", "type": "int32"}], {"e": 1}), cache=cache)
    assert len(cache) == 2  # bounded


def test_pretty_printed_and_reordered_wrappers_decode_the_same():
    fields = [{"field": "d", "type": "int32", "name": "io.debezium.time.Date"}]
    compact = decode_message(_wrapped(fields, {"d": 1}), cache=SchemaCache())
    pretty = decode_message(_wrapped(fields, {"d": 1}, pretty=True), cache=SchemaCache())
    message = json.loads(_wrapped(fields, {"d": 1}))
    reordered = decode_message(
        json.dumps({"payload": message["payload"], "schema": message["schema"]}),
        cache=SchemaCache(),
    )
    assert compact == pretty == reordered


def test_cached_schema_prefix_followed_by_garbage_is_still_malformed():
    cache = SchemaCache()
    good = _wrapped([{"field": "x", "type": "int32"}], {"x": 1})
    decode_message(good, cache=cache)
    bad = good[: good.index('"payload"')] + '"payload": {"op": "c", "after": {"x": 1}'
    _raises("malformed_json", bad, cache=cache)
    # a third top-level key: not JsonConverter's wrapper, so not a change event either
    _raises("invalid_envelope", good[:-1] + ', "extra": 1}', cache=cache)


# --- hostile input --------------------------------------------------------------------------


def _check_only_decode_errors(value: Any, key: Any = None) -> None:
    try:
        decode_message(value, key)
    except CdcDecodeError as e:
        assert e.kind in DECODE_ERROR_KINDS
        assert not str(e).startswith("unexpected decoder failure"), str(e)


@given(value=st.binary(max_size=300), key=st.none() | st.binary(max_size=50))
@settings(max_examples=300, deadline=None)
def test_arbitrary_bytes_raise_only_decode_errors(value, key):
    _check_only_decode_errors(value, key)


def _mutate(text: str, data: st.DataObject) -> str:
    for _ in range(data.draw(st.integers(1, 4))):
        if not text:
            break
        i = data.draw(st.integers(0, len(text) - 1))
        j = data.draw(st.integers(i, min(len(text), i + 8)))
        action = data.draw(st.sampled_from(["delete", "insert", "replace", "duplicate"]))
        piece = data.draw(
            st.sampled_from(
                [
                    '"',
                    "{",
                    "}",
                    "[",
                    "]",
                    ",",
                    ":",
                    "null",
                    "-1",
                    "1e999",
                    "true",
                    '"x"',
                    "\\",
                    "\\u0000",
                    "\x00",
                    "NaN",
                    "é",
                    "\ud800",
                ]
            )
        )
        if action == "delete":
            text = text[:i] + text[j:]
        elif action == "insert":
            text = text[:i] + piece + text[i:]
        elif action == "replace":
            text = text[:i] + piece + text[j:]
        else:
            text = text[:j] + text[i:j] + text[j:]
    return text


@given(name=st.sampled_from(sorted(FIXTURE_TEXTS)), data=st.data())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_fixture_texts_raise_only_decode_errors(name, data):
    text = _mutate(FIXTURE_TEXTS[name], data)
    _check_only_decode_errors(text)
    _check_only_decode_errors(text.encode("utf-8", "surrogatepass"))


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=5)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(name=st.sampled_from(sorted(FIXTURE_TEXTS)), data=st.data())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fixtures_with_a_value_replaced_raise_only_decode_errors(name, data):
    # structural mutation: reaches the envelope, schema and logical-type code paths
    document = json.loads(FIXTURE_TEXTS[name])
    path = data.draw(st.sampled_from(json_paths(document)[1:]))
    target = document
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = data.draw(json_values)
    _check_only_decode_errors(json.dumps(document))


def test_lakehouse_cdc_does_not_import_pyspark():
    code = (
        "import sys, lakehouse.cdc, lakehouse.cdc.decode; "
        "assert 'pyspark' not in sys.modules, 'pyspark imported'"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2]
    )


# -- a record without its schema in a stream with schemas: read with its table's -----------


def _rates_pair():
    """The same update, with its Connect schema and without it (a dropped wrapper)."""
    from lakehouse.testing import DebeziumTable

    with_schema = DebeziumTable("public", "rates", key="currency", start_ms=1_700_000_000_000)
    without = DebeziumTable(
        "public", "rates", key="currency", start_ms=1_700_000_000_000, with_schema=False
    )
    row = {"currency": "EUR", "rate": "1.0850", "updated_at": 1_700_000_000_123_456}
    return with_schema.update(row), without.update(row)


def test_a_payload_only_change_is_read_with_its_tables_schema():
    from lakehouse.cdc import parse_schema

    schemaful, bare = _rates_pair()
    typed = decode_message(json.dumps(schemaful.value))
    untyped = decode_message(json.dumps(bare.value))
    # typed from its values alone it contradicts the table: the decimal is base64 text
    assert dict(untyped.columns)["rate"] == "string"
    table = parse_schema(typed.schema.text)
    read = decode_message(json.dumps(bare.value), schemas={"public.rates": table})
    assert (read.row, read.columns) == (typed.row, typed.columns)
    assert read.schema_given and not typed.schema_given
    # another table's schema is not used
    other = decode_message(json.dumps(bare.value), schemas={"public.fees": table})
    assert dict(other.columns)["rate"] == "string"


def test_a_payload_only_value_its_tables_schema_cannot_read_is_refused_saying_so():
    from lakehouse.cdc import parse_schema

    schemaful, bare = _rates_pair()
    table = parse_schema(decode_message(json.dumps(schemaful.value)).schema.text)
    bad = json.loads(json.dumps(bare.value))
    bad["after"]["rate"] = "not base64!"
    with pytest.raises(CdcDecodeError) as e:
        decode_message(json.dumps(bad), schemas={"public.rates": table})
    assert e.value.kind == "invalid_value" and "column 'rate'" in str(e.value)
    assert "read with the schema of its table's last records" in str(e.value)
    # a column the schema lacks is typed from its value, as without a schema
    bad["after"]["rate"] = None
    bad["after"]["note"] = "new"
    read = decode_message(json.dumps(bad), schemas={"public.rates": table})
    assert dict(read.columns)["note"] == "string" and read.row["rate"] is None
