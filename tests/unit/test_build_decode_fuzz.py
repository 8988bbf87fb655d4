"""Fuzzing the decoder exactly as the ingest runs it inside a micro-batch.

The ingest decodes records in Spark's Python workers with the ``mapInArrow`` function of
:mod:`lakehouse.dimension.decode`: Arrow record batches of raw records in, one decoded row per
record out. These tests drive that same function with Arrow batches (no Spark needed) of
mutated real Debezium fixtures, random bytes and pathological records (oversized values,
deep nesting, huge strings, NaN/Infinity, wrong encodings), and check the contract the
dead-letter table relies on: the function never raises, every input record gives exactly
one output row, in order, with its raw bytes and position unchanged, and that row is either
decoded (a change with a row image Spark can parse, or a recognised non-change) or an error
with a known kind and a reason. ``tests/unit/test_cdc_decode.py`` fuzzes ``decode_message``
alone; ``tests/integration/test_hostile_records.py`` sends such records through the whole
sink on Spark.
"""

from __future__ import annotations

import codecs
import copy
import json
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from conftest import FIXTURES
from helpers import json_paths
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakehouse.cdc import DECODE_ERROR_KINDS
from lakehouse.dimension.decode import _OUT_FIELDS, _complete_batches, decode_record

FIXTURE_BYTES = {p.name: p.read_bytes() for p in sorted((FIXTURES / "debezium").glob("*.json"))}
KINDS = {"change", "tombstone", "transaction", "schema_change", "error"}
MAX_BYTES = 1 << 20


def _batch(records: list[tuple[bytes | None, bytes | None]]) -> pa.RecordBatch:
    """Records as the Python pass gets them when the JVM decoded none (NULL ``_kind``)."""
    now = datetime.now(UTC)
    return pa.RecordBatch.from_pydict(
        {
            **{
                name: pa.nulls(
                    len(records), pa.int64() if name == "_event_time_ms" else pa.string()
                )
                for name in _OUT_FIELDS
            },
            "key": pa.array([k for k, _ in records], pa.binary()),
            "value": pa.array([v for _, v in records], pa.binary()),
            "topic": pa.array(["cdc"] * len(records), pa.string()),
            "partition": pa.array([0] * len(records), pa.int32()),
            "offset": pa.array(range(len(records)), pa.int64()),
            "timestamp": pa.array([now] * len(records), pa.timestamp("us", tz="UTC")),
        }
    )


def _run(records: list[tuple[bytes | None, bytes | None]], max_bytes: int = MAX_BYTES) -> list:
    """Decode as the executors do; check the per-record contract; return the rows."""
    out = list(_complete_batches(max_bytes, {})(iter([_batch(records)])))
    rows = [r for b in out for r in b.to_pylist()]
    assert len(rows) == len(records)
    for i, (row, (key, value)) in enumerate(zip(rows, records, strict=True)):
        assert (row["offset"], row["key"], row["value"]) == (i, key, value)
        assert row["_kind"] in KINDS
        if row["_kind"] == "error":
            assert row["_error_kind"] in DECODE_ERROR_KINDS, row["_error"]
            assert row["_error"] and not row["_error"].startswith("unexpected decoder failure")
            continue
        assert row["_error_kind"] is None and row["_error"] is None
        if row["_kind"] == "change":
            assert row["_op"] in {"r", "c", "u", "d", "t"}
            columns = json.loads(row["_row_columns"])
            if row["_row_json"] is not None:  # what Spark's from_json parses
                image = json.loads(row["_row_json"])
                assert isinstance(image, dict)
                assert [c for c, _ in columns] == list(image)
            json.loads(row["_key_columns"])
        elif row["_kind"] == "schema_change":
            assert isinstance(json.loads(row["_schema_change"])["tables"], list)
    return rows


# --- strategies ------------------------------------------------------------------------------


@st.composite
def byte_mutations(draw: st.DrawFn) -> bytes:
    data = bytearray(FIXTURE_BYTES[draw(st.sampled_from(sorted(FIXTURE_BYTES)))])
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        action = draw(st.sampled_from(["flip", "truncate", "delete", "duplicate", "splice"]))
        i = draw(st.integers(0, len(data) - 1))
        if action == "flip":
            data[i] = draw(st.integers(0, 255))
        elif action == "truncate":
            data = data[:i]
        elif action == "delete":
            del data[i : i + draw(st.integers(1, 32))]
        elif action == "duplicate":
            data[i:i] = data[i : i + draw(st.integers(1, 64))]
        else:
            other = FIXTURE_BYTES[draw(st.sampled_from(sorted(FIXTURE_BYTES)))]
            data = data[:i] + other[draw(st.integers(0, len(other) - 1)) :]
    return bytes(data)


hostile_values = st.sampled_from(
    [
        None,
        True,
        -1,
        2**70,
        1.5,
        "",
        "x" * 10_000,
        "NaN",
        "Infinity",
        "-Infinity",
        "\u0000",
        "\U0001f600",
        [],
        [1, "a", None],
        {},
        {"nested": {"deeper": [1, 2]}},
    ]
)


@st.composite
def structural_mutations(draw: st.DrawFn) -> bytes:
    """A real fixture with fields deleted or replaced by values of the wrong type."""
    name = draw(st.sampled_from(sorted(FIXTURE_BYTES)))
    document = json.loads(FIXTURE_BYTES[name])
    for _ in range(draw(st.integers(1, 3))):
        paths = json_paths(document)[1:]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = document
        for part in path[:-1]:
            parent = parent[part]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            # a copy: the sampled values are shared between examples
            parent[path[-1]] = copy.deepcopy(draw(hostile_values))
    return json.dumps(document).encode()


def _nested(depth: int, opener: str, closer: str) -> bytes:
    inner = opener * depth + "1" + closer * depth if opener == "[" else None
    if inner is None:
        inner = '{"a":' * depth + "1" + "}" * depth
    return ('{"op":"c","after":{"id":1,"x":' + inner + '},"source":{"ts_ms":1}}').encode()


@st.composite
def encodings(draw: st.DrawFn) -> bytes:
    """A real fixture in another encoding than UTF-8, or with invalid UTF-8 inside."""
    text = FIXTURE_BYTES[draw(st.sampled_from(sorted(FIXTURE_BYTES)))].decode("utf-8")
    how = draw(st.sampled_from(["utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1", "bad"]))
    if how == "latin-1":
        return (text.replace('"', '"\u00e9', 1)).encode("latin-1", "replace")
    if how == "bad":
        raw = bytearray(text.encode())
        raw.insert(draw(st.integers(0, len(raw))), draw(st.sampled_from([0x80, 0xC3, 0xFF])))
        return bytes(raw)
    bom = {"utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE}.get(how, b"")
    return bom + text.encode(how)


pathological = st.sampled_from(
    [
        _nested(10_000, "[", "]"),
        _nested(10_000, "{", "}"),
        _nested(900, "[", "]"),
        b"[" * 200_000,
        b'{"op":"c","after":{"id":NaN},"source":{"ts_ms":1}}',
        b'{"op":"c","after":{"id":-Infinity},"source":{"ts_ms":1}}',
        b'{"op":"c","after":{"id":1e400,"y":-1e400},"source":{"ts_ms":1}}',
        b'{"op":"c","after":{"id":1' + b"0" * 50_000 + b'},"source":{}}',
        b'{"op":"c","after":{"id":"\\ud800"},"source":{"ts_ms":1}}',
        b'{"op":"c","after":{"id":1},"source":{"ts_ms":1},"op":"x"}',
        b'{"op":"c","after":{"id":1,"s":"' + b"x" * (MAX_BYTES + 1) + b'"},"source":{}}',
        b'{"op":"c","after":{"id":1,"s":"' + b"\\u00e9" * 100_000 + b'"},"source":{}}',
        b"",
        b"null",
        b"\xef\xbb\xbf",
    ]
)

records = st.one_of(
    byte_mutations(),
    structural_mutations(),
    encodings(),
    pathological,
    st.binary(max_size=512),
)
keys = st.one_of(
    st.none(),
    st.binary(max_size=64),
    st.sampled_from([b'{"id": 1}', b'{"schema": null, "payload": {"id": 1}}', b"[" * 5000]),
)


@given(batch=st.lists(st.tuples(keys, records), min_size=1, max_size=6))
@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
def test_every_hostile_record_is_decoded_or_has_a_reason(batch):
    _run([(k, v) for k, v in batch])


# --- named cases: what each pathological record becomes --------------------------------------


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (_nested(10_000, "[", "]"), "too_deep"),
        (_nested(10_000, "{", "}"), "too_deep"),
        ('{"op": "c"}'.encode("utf-16"), "encoding"),
        (codecs.BOM_UTF16_BE + '{"op": "c"}'.encode("utf-16-be"), "encoding"),
        (b'{"op":"c","after":{"id":NaN},"source":{}}', "malformed_json"),
        (b'{"op":"c","after":{"id":Infinity},"source":{}}', "malformed_json"),
        (b'{"op":"c","after":{"id":"\xff"},"source":{}}', "encoding"),
        # found by the fuzz test: an event time beyond 64 bits failed the whole Arrow batch
        (b'{"op":"c","after":{"id":1},"source":{"ts_ms":10001111101122565589}}', "invalid_value"),
        (b'{"op":"c","after":{"id":1},"source":{"ts_ms":9000000000000000000}}', "invalid_value"),
    ],
)
def test_pathological_records_are_dead_lettered_with_their_kind(value, kind):
    (row,) = _run([(None, value)])
    assert (row["_kind"], row["_error_kind"]) == ("error", kind), row["_error"]


def test_nan_and_infinity_as_debezium_sends_them_decode_in_double_columns():
    schema = {
        "type": "struct",
        "fields": [
            {
                "field": "after",
                "type": "struct",
                "optional": True,
                "fields": [
                    {"field": "id", "type": "int32"},
                    {"field": "x", "type": "double", "optional": True},
                    {"field": "y", "type": "float", "optional": True},
                ],
            }
        ],
    }
    value = json.dumps(
        {
            "schema": schema,
            "payload": {"op": "c", "after": {"id": 1, "x": "NaN", "y": "-Infinity"}},
        }
    ).encode()
    (row,) = _run([(None, value)])
    assert row["_kind"] == "change", row["_error"]
    # written as the strings Spark's from_json reads into doubles (allowNonNumericNumbers);
    # tests/integration/test_hostile_records.py checks that they land as NaN and -inf
    assert json.loads(row["_row_json"]) == {"id": 1, "x": "NaN", "y": "-Infinity"}


def test_fifty_megabyte_strings_are_too_large_by_default_and_decode_when_allowed():
    huge = b'{"op":"c","after":{"id":1,"s":"' + b"y" * (50 * 1024 * 1024) + b'"},"source":{}}'
    (row,) = _run([(None, huge)], max_bytes=16 * 1024 * 1024)
    assert row["_error_kind"] == "too_large" and "ingest.max_record_bytes" in row["_error"]
    big = decode_record(huge, None, max_bytes=64 * 1024 * 1024)
    assert big["_kind"] == "change" and len(big["_row_json"]) > 50 * 1024 * 1024


def test_a_record_without_a_schema_is_read_with_its_own_source_partition_s_schema():
    """A Spark partition may hold several source partitions, one after the other (the sink
    merges a batch's input partitions into two tasks per core): a record without a Connect
    schema is read with the newest schema of the earlier records of its own topic-partition,
    from its table's recorded one, never with the one another partition moved on to."""
    from lakehouse.testing.debezium import DebeziumTable

    table = DebeziumTable("public", "rates", key="currency", start_ms=1_000)
    first = table.update({"currency": "C1", "rate": "1"}).value
    recorded = first["schema"]
    wider = copy.deepcopy(recorded)
    for image in (f for f in wider["fields"] if f["field"] in ("before", "after")):
        image["fields"].append({"type": "string", "optional": True, "field": "note"})
    payload = {**first["payload"], "after": {**first["payload"]["after"], "note": "x"}}
    moved = json.dumps({"schema": wider, "payload": payload}).encode()
    bare = json.dumps(table.update({"currency": "C2", "rate": "2"}).value["payload"]).encode()
    partitions = [0, 1, 0]
    batch = _batch([(None, moved), (None, bare), (None, bare)])
    batch = batch.set_column(
        batch.schema.get_field_index("partition"), "partition", pa.array(partitions, pa.int32())
    )
    texts = {"public.rates": json.dumps(recorded, separators=(",", ":"))}
    out = list(_complete_batches(MAX_BYTES, texts)(iter([batch])))
    rows = [r for b in out for r in b.to_pylist()]
    assert [r["_kind"] for r in rows] == ["change"] * 3, [r["_error"] for r in rows]
    columns = [[c for c, _ in json.loads(r["_row_columns"])] for r in rows]
    assert "note" in columns[0] and "note" in columns[2], columns
    assert "note" not in columns[1], columns
