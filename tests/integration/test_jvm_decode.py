"""One answer, two paths: the JVM decode gives exactly what the Python decoder gives.

Each test decodes the same records three ways and compares them field by field: the Python
decoder alone (:func:`lakehouse.dimension.decode.decode_record`, in stream order, the
reference), the JVM decode alone (:func:`lakehouse.dimension.jvm_decode.decode_fast`, the
records it decodes), and the ingest's decode (:func:`lakehouse.dimension.decode.decode_raw`:
the JVM, then Python for the rest). Row images are compared in the column types: the
JVM's typed image as it is, against the Python decoder's text as ``from_json`` reads it (a
key's text, and an image decoded in Python, are read the same way); the rest as text.
Records: every fixture in ``tests/fixtures/debezium`` as captured and as ``JsonConverter``
writes it (compact), and Hypothesis envelopes over every logical type, with edge values and
with the textual changes (spacing, extra keys, duplicates, trailing text) that must send a
record to Python.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from conftest import FIXTURES
from helpers import same_summary, summary_in_tasks
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakehouse.cdc import decode_message, parse_schema
from lakehouse.cdc.wire import compile_value, schema_prefix
from lakehouse.dimension.connect_schemas import newest_in_batch
from lakehouse.dimension.decode import _OUT_FIELDS, decode_raw, decode_record
from lakehouse.dimension.jvm_decode import WireSchemas, decode_fast, image_columns, row_text
from lakehouse.dimension.layout import INGESTED_AT, META_BATCH_ID, META_ROWS, META_WATERMARK
from lakehouse.dimension.summary import summarise
from lakehouse.errors import CdcDecodeError

MAX_BYTES = 1 << 20
Record = tuple[bytes | None, bytes | None]


def _compact(raw: bytes) -> bytes:
    return json.dumps(json.loads(raw), separators=(",", ":"), ensure_ascii=False).encode()


def _python(records: Sequence[Record], start: Mapping[str, str]) -> list[dict[str, Any]]:
    schemas = {table: parse_schema(text) for table, text in start.items()}
    return [decode_record(v, k, max_bytes=MAX_BYTES, schemas=schemas) for k, v in records]


def _own_schema(value: bytes | None) -> str | None:
    """The text of a record's own Connect schema, as the Python decoder keeps it."""
    try:
        decoded = decode_message(value, max_bytes=MAX_BYTES)
    except CdcDecodeError:
        return None
    schema = getattr(decoded, "schema", None)
    return None if schema is None else schema.text


def _raw(spark: Any, records: Sequence[Record]) -> Any:
    rows = [(k, v, "cdc", 0, i) for i, (k, v) in enumerate(records)]
    return (
        spark.createDataFrame(
            rows, "key binary, value binary, topic string, partition int, offset bigint"
        )
        # Kafka's timestamps: fixed (two jobs over the records see the same), out of order
        .selectExpr("*", "timestamp_millis(1767225600000 + (offset * 7919) % 1000) AS timestamp")
        .coalesce(1)  # one partition: the stream order the Python reference decodes in
    )


class _Unlearning(WireSchemas):
    """Knows no schema, ever: every record goes to the Python decoder."""

    def learn_texts(self, pairs: Any) -> None:
        pass


def _learned(records: Sequence[Record]) -> WireSchemas:
    wire = WireSchemas()
    texts = []
    for k, v in records:
        texts.append(tuple(None if b is None else b.decode("utf-8", "replace") for b in (k, v)))
    wire.learn_texts(texts)  # type: ignore[arg-type]
    return wire


def _rows(df: Any) -> list[dict[str, Any]]:
    """The decoded records in offset order; a typed row image as its JSON text, flagged
    (``_typed``), so that it is compared as it is, not read back."""
    from pyspark.sql import functions as F

    columns = image_columns(df.schema)
    images = [n for n, _ in columns]
    typed = F.lit(False)
    for n in images:
        typed = typed | F.col(n).isNotNull()
    shown = (
        df.withColumn("_both", typed & F.col("_row_json").isNotNull())
        .withColumn("_row_json", row_text(columns))
        .withColumn("_typed", typed)
    )
    rows = shown.drop(*images).collect()
    # a record has its image as text or typed, never both (the plan takes the typed one first)
    assert not [r["offset"] for r in rows if r["_both"]]
    return [r.asDict() for r in sorted(rows, key=lambda r: r["offset"])]


_SHOWN = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX", "timeZone": "UTC"}


def _images(
    spark: Any, pairs: list[tuple[str, str | None, str | None, bool]]
) -> list[tuple[Any, Any]]:
    """Both row images of each pair as Spark reads them into the columns' types; the first,
    when typed (the pair's flag), as it is: its text is the typed value written out."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    out = []
    by_columns: dict[str, list[tuple[str | None, str | None, bool]]] = {}
    for columns, a, b, typed in pairs:
        by_columns.setdefault(columns, []).append((a, b, typed))
    for columns, texts in by_columns.items():
        fields = [
            StructField(n, StructType.fromDDL(f"x {t}").fields[0].dataType, True)
            for n, t in json.loads(columns)
            if "void" not in t
        ]
        schema = StructType(fields or [StructField("_", "string", True)])  # type: ignore[arg-type]
        df = spark.createDataFrame(texts, "a string, b string, typed boolean")
        # written back by Spark (Python's datetime cannot hold every timestamp Spark can)
        shown = [F.to_json(F.from_json(c, schema), _SHOWN) for c in ("a", "b")]
        shown[0] = F.when(F.col("typed"), F.col("a")).otherwise(shown[0])
        out += [(r[0], r[1]) for r in df.select(*shown).collect()]
    return out


def _assert_same(
    spark: Any,
    got: list[dict[str, Any]],
    want: list[dict[str, Any]],
    what: str,
    records: Sequence[Record],
    schemas: Mapping[str, str],
) -> None:
    """Field by field; a record the JVM decoded names its schema by a mark (``''`` for its
    table's at the start, else ``#hash``), which must be its own schema."""
    assert len(got) == len(want)
    images: list[tuple[str, str | None, str | None, bool]] = []
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if g["_kind"] is None:
            continue  # not decoded on this path
        for name in _OUT_FIELDS:
            if name in ("_row_json", "_key_json"):
                assert (g[name] is None) == (w[name] is None), (what, i, name, g, w)
                columns = w["_row_columns"] if name == "_row_json" else None
                if g[name] is not None:
                    if columns is None:  # a key: its columns are names only
                        columns = json.dumps([[c, "string"] for c in json.loads(w["_key_columns"])])
                    typed = name == "_row_json" and g["_typed"]
                    images.append((columns, g[name], w[name], typed))
            elif name == "_connect_schema" and g[name] is not None and g[name][:1] in ("", "#"):
                mark = g[name] or g["_source_table"]
                assert schemas[mark] == _own_schema(records[i][1]), (what, i, mark)
            else:
                assert g[name] == w[name], (what, i, name, g[name], w[name])
    for a, b in _images(spark, images):
        assert a == b, what


def _after_its_schema(records: Sequence[Record], want: Sequence[Mapping[str, Any]]) -> set[int]:
    """The records without a schema of their own that follow one of their table's with a
    schema (one source partition here): the Python decoder reads them with that schema, the
    JVM alone by their values (its Python pass reads them again)."""
    seen: set[str] = set()
    out = set()
    for i, ((_, value), w) in enumerate(zip(records, want, strict=True)):
        if _own_schema(value) is not None:
            seen.add(w["_source_table"])
        elif w["_source_table"] in seen:
            out.add(i)
    return out


def _three_ways(spark: Any, records: Sequence[Record], start: Mapping[str, str]) -> dict[str, int]:
    """Decode all three ways and compare; returns how many records the JVM decoded alone (and
    how many of those its Python pass reads again, see :func:`_after_its_schema`)."""
    want = _python(records, start)
    raw = _raw(spark, records)
    wire = _learned(records)
    schemas = {**start, **wire.marks()}  # what a mark names: a table's start schema, or a hash
    fast_df = decode_fast(raw, wire, max_bytes=MAX_BYTES, start=start)
    # the batch's summary as the one-pass write's tasks take it, as the summary's own job does
    same_summary(summary_in_tasks(fast_df), summarise(fast_df))
    fast = _rows(fast_df)
    again = {i for i in _after_its_schema(records, want) if fast[i]["_kind"] is not None}
    alone = [{**r, "_kind": None} if i in again else r for i, r in enumerate(fast)]
    _assert_same(spark, alone, want, "jvm", records, schemas)
    # a record left to Python has its own bytes, whether kept or put together again
    left = [(i, r["key"], r["value"]) for i, r in enumerate(fast) if r["_kind"] is None]
    assert left == [(i, *records[i]) for i, _, _ in left]
    decoded = decode_raw(raw, max_record_bytes=MAX_BYTES, schemas=start, wire=wire)
    try:
        both = _rows(decoded)
    finally:
        decoded.unpersist()
    assert all(r["_kind"] is not None for r in both)
    _assert_same(spark, both, want, "ingest", records, schemas)
    if wire.shapes:  # images without a schema, of the shapes the ingest learnt: typed now
        typed = _rows(decode_fast(raw, wire, max_bytes=MAX_BYTES, start=start))
        alone = [{**r, "_kind": None} if i in again else r for i, r in enumerate(typed)]
        _assert_same(spark, alone, want, "jvm, typed", records, schemas)
    return {
        "jvm": sum(r["_kind"] == "change" for r in fast),
        "again": len(again),
        "changes": sum(r["_kind"] == "change" for r in want),
    }


# --- the fixtures ----------------------------------------------------------------------------

FIXTURE_BYTES = [p.read_bytes() for p in sorted((FIXTURES / "debezium").glob("*.json"))]


def test_every_fixture_decodes_the_same_in_the_jvm_and_in_python(spark):
    keys = [v for v in FIXTURE_BYTES if b'"payload"' in v and b'"op"' not in v]
    records: list[Record] = []
    for i, value in enumerate(FIXTURE_BYTES):
        key = _compact(keys[i % len(keys)]) if keys and i % 3 else None
        records += [(key, value), (key, _compact(value)), (None, _compact(value))]
    counts = _three_ways(spark, records, {})
    # at least the compact form (without a key) of every captured change event whose schema
    # the JVM reads and whose fields are in their schema's order, as JsonConverter writes them
    assert counts["jvm"] >= sum(_in_jvm(_compact(v)) for v in FIXTURE_BYTES) >= 12, counts


def _in_jvm(value: bytes) -> bool:
    found = schema_prefix(value.decode())
    if found is None or compile_value(found[1]) is None:
        return False
    document = json.loads(value)
    schema, payload = document["schema"], document["payload"]
    ordered = list(payload) == [f["field"] for f in schema["fields"]]
    python = decode_record(value, None, max_bytes=MAX_BYTES)
    return ordered and python["_kind"] == "change"


# --- Hypothesis envelopes ---------------------------------------------------------------------

_I64 = 2**63
_ZONED = st.one_of(
    st.builds(
        lambda y, mo, d, h, mi, s, frac, off: (
            f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{frac}{off}"
        ),
        st.integers(0, 9999),
        st.integers(1, 12),
        st.integers(1, 31),
        st.integers(0, 23),
        st.integers(0, 59),
        st.integers(0, 59),
        st.sampled_from(["", ".1", ".123456", ".123456789", ".5000000"]),
        st.sampled_from(["Z", "+02:00", "-05:30", "+18:00", "+19:00", "-00:00"]),
    ),
    st.sampled_from(
        ["2011-11-11 03:11:11Z", "2011-11-11t03:11:11Z", "2011-11-11T03:11Z", "x", "", "24:00"]
    ),
)


def _decimal_bytes(n: int) -> str:
    length = max(1, (n.bit_length() + 8) // 8)
    return base64.b64encode(n.to_bytes(length, "big", signed=True)).decode()


_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_PRECISE = {"type": "bytes", "name": _DECIMAL}

#: column kind -> (Connect field schema without its name, usual JSON values, edge values)
_KINDS: dict[str, tuple[dict[str, Any], Any, Any]] = {
    "boolean": ({"type": "boolean"}, st.booleans(), st.just(1)),
    "int8": ({"type": "int8"}, st.integers(-128, 127), st.sampled_from([-129, 128])),
    "int16": ({"type": "int16"}, st.integers(-(2**15), 2**15 - 1), st.just(2**15)),
    "int32": ({"type": "int32"}, st.integers(-(2**31), 2**31 - 1), st.sampled_from(["7", 2**31])),
    "int64": ({"type": "int64"}, st.integers(-_I64, _I64 - 1), st.sampled_from([_I64, 1.5])),
    "float": ({"type": "float"}, st.floats(width=32, allow_nan=False), st.just("NaN")),
    "double": (
        {"type": "double"},
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from(["NaN", "Infinity", "-Infinity", "+INF", 1e400]),
    ),
    "string": ({"type": "string"}, st.text(max_size=12), st.sampled_from([5, "\x00\u2028"])),
    "json": (
        {"type": "string", "name": "io.debezium.data.Json"},
        st.just('{"a": [1]}'),
        st.just({}),
    ),
    "bytes": (
        {"type": "bytes"},
        st.binary(max_size=9).map(lambda b: base64.b64encode(b).decode()),
        st.sampled_from(["QR==", "Q", "Q===", "!!!!", "QQ"]),
    ),
    "date": (
        {"type": "int32", "name": "io.debezium.time.Date"},
        st.integers(-719_162, 2_932_896),
        st.sampled_from([-719_163, 2_932_897, -(2**31)]),
    ),
    "ts": (
        {"type": "int64", "name": "io.debezium.time.Timestamp"},
        st.integers(-62_135_596_800_000, 253_402_300_799_999),
        st.sampled_from([-62_135_596_800_001, 253_402_300_800_000, _I64 - 1]),
    ),
    "micro_ts": (
        {"type": "int64", "name": "io.debezium.time.MicroTimestamp"},
        st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999),
        st.sampled_from([-62_135_596_800_000_001, 253_402_300_800_000_000]),
    ),
    "nano_ts": (
        {"type": "int64", "name": "io.debezium.time.NanoTimestamp"},
        st.integers(-_I64, _I64 - 1),
        st.just(-1),
    ),
    "zoned": ({"type": "string", "name": "io.debezium.time.ZonedTimestamp"}, _ZONED, _ZONED),
    "time": (
        {"type": "int32", "name": "io.debezium.time.Time"},
        st.integers(0, 86_399_999),
        st.sampled_from([-1, 2**31 - 1]),
    ),
    "micro_time": (
        {"type": "int64", "name": "io.debezium.time.MicroTime"},
        st.integers(0, 86_399_999_999),
        st.just(_I64 - 1),
    ),
    "nano_time": (
        {"type": "int64", "name": "io.debezium.time.NanoTime"},
        st.integers(0, 86_399_999_999_999),
        st.sampled_from([-1, -_I64]),
    ),
    "decimal": (
        {**_PRECISE, "parameters": {"scale": "3", "connect.decimal.precision": "12"}},
        st.integers(-(10**12) + 1, 10**12 - 1).map(_decimal_bytes),
        st.sampled_from([_decimal_bytes(10**12), _decimal_bytes(2**70), "AA==", "", 1.5]),
    ),
    "decimal0": (
        {**_PRECISE, "parameters": {"scale": "0"}},
        st.integers(-(2**63), 2**63 - 1).map(_decimal_bytes),
        st.integers(-(2**80), 2**80).map(_decimal_bytes),
    ),
    "variable": (
        {
            "type": "struct",
            "name": "io.debezium.data.VariableScaleDecimal",
            "fields": [{"field": "scale", "type": "int32"}, {"field": "value", "type": "bytes"}],
        },
        st.just({"scale": 2, "value": "AeI="}),
        st.just({"scale": "x"}),
    ),
    "array": (
        {"type": "array", "items": {"type": "int32"}},
        st.lists(st.integers(0, 9)),
        st.just(1),
    ),
}


def _value(draw: st.DrawFn, kind: str) -> Any:
    """A usual value, now and then NULL or an edge value (out of range, of another type)."""
    _, usual, edge = _KINDS[kind]
    roll = draw(st.integers(0, 15))
    return None if roll == 0 else draw(edge) if roll == 1 else draw(usual)


@st.composite
def _envelope_schema(draw: st.DrawFn) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    kinds = draw(st.lists(st.sampled_from(sorted(_KINDS)), min_size=1, max_size=5))
    columns = [("id", "int32")] + [(f"c{i}_{k}", k) for i, k in enumerate(kinds)]
    fields = [{**_KINDS[k][0], "optional": n != "id", "field": n} for n, k in columns]
    fields[0] = {"type": "int32", "optional": False, "field": "id"}
    row = {"type": "struct", "optional": True, "name": "db.t.Value", "fields": fields}
    connector = draw(st.sampled_from(["postgresql", "mysql", "sqlserver", "mongodb"]))
    source_fields = [
        {"type": "string", "optional": False, "field": "version"},
        {"type": "string", "optional": False, "field": "connector"},
        {"type": "int64", "optional": False, "field": "ts_ms"},
        {"type": "string", "optional": True, "field": "snapshot"},
        {"type": "string", "optional": False, "field": "db"},
        {"type": "string", "optional": True, "field": "table"},
    ]
    if connector == "postgresql":
        source_fields += [
            {"type": "string", "optional": False, "field": "schema"},
            {"type": "int64", "optional": True, "field": "lsn"},
        ]
    elif connector == "mysql":
        source_fields += [
            {"type": "string", "optional": False, "field": "file"},
            {"type": "int64", "optional": False, "field": "pos"},
            {"type": "int32", "optional": True, "field": "row"},
        ]
    elif connector == "sqlserver":
        source_fields += [{"type": "string", "optional": True, "field": "commit_lsn"}]
    envelope = [
        {**row, "field": "before"},
        {**row, "field": "after"},
        {"type": "struct", "optional": False, "field": "source", "fields": source_fields},
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
    ]
    if draw(st.booleans()):
        envelope.append(
            {
                "type": "struct",
                "optional": True,
                "field": "transaction",
                "fields": [
                    {"type": "string", "optional": False, "field": "id"},
                    {"type": "int64", "optional": False, "field": "total_order"},
                ],
            }
        )
    schema = {"type": "struct", "optional": False, "name": "db.t.Envelope", "fields": envelope}
    return schema, columns


@st.composite
def _payload(draw: st.DrawFn, schema: dict[str, Any], columns: list[tuple[str, str]]) -> Any:
    def image() -> dict[str, Any] | None:
        if draw(st.integers(0, 9)) == 0:
            return None
        image: dict[str, Any] = {"id": draw(st.integers(0, 5))}
        for n, k in columns[1:]:
            image[n] = _value(draw, k)
        return image

    op = draw(st.sampled_from(["r", "c", "c", "u", "u", "d", "t", "m"]))
    source_names = [f["field"] for f in schema["fields"][2]["fields"]]
    values = {
        "version": "2.7.0.Final",
        "connector": draw(
            st.sampled_from(["postgresql", "postgresql", "mysql", "mariadb", "oracle", "x"])
        ),
        "ts_ms": draw(st.sampled_from([0, 1_700_000_000_000, -1, 2**62])),
        "snapshot": draw(st.sampled_from(["true", "false", "false", "last", None, "bogus"])),
        "db": "db",
        "table": draw(st.sampled_from(["t", None])),
        "schema": "public",
        "lsn": draw(st.none() | st.integers(-5, 2**62)),
        "file": draw(st.sampled_from(["mysql-bin.000003", "", "bin", "b.1" + "0" * 25])),
        "pos": draw(st.integers(-1, 10_000)),
        "row": draw(st.none() | st.integers(-1, 3)),
        "commit_lsn": draw(st.none() | st.just("00000027:00000758:0003")),
    }
    payload: dict[str, Any] = {
        "before": image() if op in ("d", "u") else None,
        "after": image() if op in ("r", "c", "u") else None,
        "source": {n: values[n] for n in source_names},
        "op": op,
        "ts_ms": draw(st.none() | st.integers(0, 1_800_000_000_000)),
    }
    if len(schema["fields"]) > 5:
        payload["transaction"] = draw(st.none() | st.just({"id": "571:53195832", "total_order": 1}))
    return payload


_KEY_SCHEMA = {
    "type": "struct",
    "optional": False,
    "name": "db.t.Key",
    "fields": [{"type": "int32", "optional": False, "field": "id"}],
}


def _wire(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


@st.composite
def _records(draw: st.DrawFn) -> list[Record]:
    """Records of one or two schemas, mostly as JsonConverter writes them, some changed."""
    schemas = [draw(_envelope_schema()) for _ in range(draw(st.integers(1, 2)))]
    out: list[Record] = []
    for _ in range(draw(st.integers(1, 20))):
        schema, columns = draw(st.sampled_from(schemas))
        payload = draw(_payload(schema, columns))
        text = _wire({"schema": schema, "payload": payload})
        how = draw(st.sampled_from(["wire"] * 12 + ["spaced", "extra", "twice", "tail", "bare"]))
        if how == "spaced":
            text = json.dumps({"schema": schema, "payload": payload}).encode()
        elif how == "extra" and payload.get("after"):
            payload["after"]["zz"] = 1
            text = _wire({"schema": schema, "payload": payload})
        elif how == "twice":
            text = text[:-1] + b',"payload":null}'
        elif how == "tail":
            text += b" {}"
        elif how == "bare":
            text = _wire(payload)
        key_id = (payload.get("after") or payload.get("before") or {}).get("id", 1)
        key = draw(
            st.sampled_from(
                [
                    None,
                    b"",
                    *[_wire({"schema": _KEY_SCHEMA, "payload": {"id": key_id}})] * 3,
                    _wire({"id": key_id}),
                    b"garbage",
                ]
            )
        )
        out.append((key, text if draw(st.integers(0, 19)) else None))
    return out


@given(records=_records())
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
def test_generated_envelopes_decode_the_same_in_the_jvm_and_in_python(spark, records):
    _three_ways(spark, records, {})


# --- records without their schema (schemas.enable=false) ------------------------------------

#: What a column of a record without a schema holds: usual values, and edge ones (a big
#: integer, an infinite or huge number, odd text, a nested object or an array).
_BARE_USUAL = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
_BARE_EDGE = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from(["é", "\u2028", 'a"b\\c\n', "\x00\x7f", "\U0001f600"]),
    st.just({"nested": 1}),
    st.just([1, 2]),
)
_BARE_NAMES = st.sampled_from(["price", "name", "at", "n", "flag"])
_ODD_NAMES = st.one_of(
    st.sampled_from(["Price", "x y", "", "é", "_op", 'a"b', "k" * 300]), st.text(max_size=4)
)


def _usual(draw: st.DrawFn, usual: Any, edge: Any) -> Any:
    """Mostly a usual value, now and then an edge one."""
    return draw(edge) if draw(st.integers(0, 9)) == 0 else draw(usual)


@st.composite
def _bare_payload(draw: st.DrawFn) -> dict[str, Any]:
    def image() -> dict[str, Any] | None:
        if draw(st.integers(0, 9)) == 0:
            return None
        row: dict[str, Any] = {"id": draw(st.integers(0, 5))}
        for name in draw(st.lists(_BARE_NAMES, max_size=4)):
            row[_usual(draw, st.just(name), _ODD_NAMES)] = _usual(draw, _BARE_USUAL, _BARE_EDGE)
        return row

    op = _usual(draw, st.sampled_from(["r", "c", "u", "d", "t"]), st.sampled_from(["m", 5]))
    source: dict[str, Any] = {
        "version": "2.7.0.Final",
        "connector": _usual(
            draw, st.sampled_from(["postgresql", "mysql"]), st.sampled_from(["oracle", "x", 7])
        ),
        "ts_ms": _usual(
            draw, st.integers(0, 2**41), st.sampled_from([-(2**62), 2**62, 1.5, "5", None])
        ),
        "snapshot": _usual(
            draw,
            st.sampled_from(["true", "false", "last", None, True, False]),
            st.just("bogus"),
        ),
        "db": "db",
        "schema": _usual(draw, st.sampled_from(["public", None]), st.just(3)),
        "table": _usual(draw, st.sampled_from(["t", "u"]), st.just(None)),
        "lsn": _usual(draw, st.none() | st.integers(0, 2**62), st.sampled_from([-5, 2**64])),
        "file": _usual(draw, st.just("mysql-bin.000003"), st.sampled_from(["", "bin"])),
        "pos": _usual(draw, st.integers(0, 10_000), st.just(-1)),
        "txId": _usual(draw, st.integers(0, 99), st.sampled_from(["5", 1.5])),
    }
    for name in draw(st.sets(st.sampled_from(sorted(source)), max_size=3)):
        del source[name]
    if draw(st.integers(0, 9)) == 0:  # the model's own name for "schema"
        source["schema_name"] = draw(st.sampled_from(["other", 5]))
    payload: dict[str, Any] = {
        "before": image() if op in ("d", "u") else None,
        "after": image() if op in ("r", "c", "u") else _usual(draw, st.none(), st.just(3)),
        "source": _usual(draw, st.just(source), st.sampled_from([None, "s"])),
        "op": op,
        "ts_ms": _usual(
            draw, st.sampled_from([None, 1_700_000_000_005]), st.sampled_from([2**63 + 1, True])
        ),
    }
    if draw(st.integers(0, 4)) == 0:
        payload["transaction"] = draw(st.sampled_from([None, {"id": "1:2"}, {"total_order": 1}]))
    if draw(st.integers(0, 4)) == 0:
        payload["extra"] = _usual(draw, _BARE_USUAL, _BARE_EDGE)
    return payload


@st.composite
def _bare_records(draw: st.DrawFn) -> list[Record]:
    """Records without Connect schemas, mostly as JsonConverter writes them, some changed;
    keys bare, wrapped, odd or none."""
    out: list[Record] = []
    for _ in range(draw(st.integers(1, 20))):
        payload = draw(_bare_payload())
        how = draw(st.sampled_from(["wire"] * 10 + ["spaced", "twice", "tail", "bom", "wrapped"]))
        text = _wire(payload)
        if how == "spaced":
            text = json.dumps(payload, ensure_ascii=draw(st.booleans())).encode()
        elif how == "twice":
            text = text[:-1] + b',"op":"c"}'
        elif how == "tail":
            text += b" x"
        elif how == "bom":
            text = b"\xef\xbb\xbf" + text
        elif how == "wrapped":
            text = _wire({"schema": None, "payload": payload})
        image = payload.get("after") or payload.get("before")
        key_id = image.get("id", 1) if isinstance(image, dict) else 1
        key = draw(
            st.sampled_from(
                [
                    None,
                    b"",
                    *[_wire({"id": key_id})] * 3,
                    _wire({"schema": _KEY_SCHEMA, "payload": {"id": 1}}),
                    _wire({"id": {"a": 1}}),
                    b'{"payload": 1}',
                    b"7",
                    b"garbage",
                ]
            )
        )
        out.append((key, text if draw(st.integers(0, 19)) else None))
    return out


@given(records=_bare_records(), start=st.sampled_from([{}, {"public.t": "t"}]))
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
def test_generated_records_without_schemas_decode_the_same_in_the_jvm_and_in_python(
    spark, records, start
):
    """The JVM types a row image from its values as the Python decoder does; a table whose
    build table records a Connect schema is left to Python (which reads it with that)."""
    if start:
        start = {"public.t": parse_schema(json.dumps(_table_schema(True))).text}
    _three_ways(spark, records, start)


def test_plain_records_without_schemas_are_decoded_in_the_jvm(spark):
    """The tutorial's kind of stream (payload only): every change decoded in the JVM."""
    records: list[Record] = [
        (
            _wire({"region": "EU", "sku": f"A-{i}"}),
            _wire(
                {
                    "before": None,
                    "after": {"region": "EU", "sku": f"A-{i}", "price": 10.0 + i, "n": i},
                    "source": {
                        "version": "2.7.0.Final",
                        "connector": "postgresql",
                        "ts_ms": 1_772_438_400_000 + i,
                        "snapshot": "true" if i < 3 else "false",
                        "db": "shop",
                        "schema": "public",
                        "table": "prices",
                        "lsn": 100 + i,
                    },
                    "op": "r" if i < 3 else "u",
                    "ts_ms": 1_772_438_400_005 + i,
                }
            ),
        )
        for i in range(6)
    ]
    counts = _three_ways(spark, records, {})
    assert counts["jvm"] == counts["changes"] == 6
    # the shapes learnt, the images come out typed (no JSON text to parse again)
    wire = _learned(records)
    decode_raw(_raw(spark, records), max_record_bytes=MAX_BYTES, wire=wire).unpersist()
    typed = _rows(decode_fast(_raw(spark, records), wire, max_bytes=MAX_BYTES, start={}))
    assert [(r["_typed"], r["_kind"]) for r in typed] == [(True, "change")] * 6


#: Bytes put inside a JSON string: well-formed UTF-8 of 2, 3 and 4 bytes (and a byte order
#: mark's character, which is text inside a string), then what strict UTF-8 refuses: overlong
#: forms, a surrogate, a code point beyond U+10FFFF, a truncated character, stray bytes.
_WELL_FORMED = [b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\xef\xbb\xbf"]
_ILL_FORMED = [
    b"\xc0\xaf",
    b"\xe0\x80\xaf",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xe2\x82",
    b"\x80",
    b"\xf5\x80\x80\x80",
    b"\xc2",
]


def test_text_that_is_not_strict_utf8_goes_to_python_with_and_without_schemas(spark):
    """Well-formed characters are decoded in the JVM, with a Connect schema and without; a
    record with any ill-formed byte sequence is the Python decoder's (its dead letter)."""
    records: list[Record] = []
    for i, inside in enumerate(_WELL_FORMED + _ILL_FORMED):
        bare = {
            "before": None,
            "after": {"sku": f"A-{i}-@", "n": i},
            "source": {
                "connector": "postgresql",
                "ts_ms": 1_700_000_000_000 + i,
                "db": "shop",
                "schema": "public",
                "table": "prices",
                "lsn": 100 + i,
            },
            "op": "c",
        }
        records.append((None, _wire(bare).replace(b"-@", b"-" + inside)))
        records.append((None, _change(i, False).replace(b'"db":"db"', b'"db":"d' + inside + b'"')))
    counts = _three_ways(spark, records, {})
    assert counts["jvm"] == counts["changes"] == 2 * len(_WELL_FORMED), counts


def test_a_record_without_a_schema_after_its_tables_schema_is_read_with_it(spark):
    """The JVM reads records without a schema by their values; one that follows a record of
    its table with a Connect schema (in its source partition) is read with that schema, by
    the Python pass, as the Python decoder reads it."""
    records: list[Record] = [
        (None, _change(1, True, wrapped=False)),  # no schema yet: typed from its values
        (None, _change(2, True)),
        (None, _change(3, True, wrapped=False)),  # read with record 2's schema
    ]
    want = _python(records, {})
    assert json.loads(want[0]["_row_columns"]) == [["id", "bigint"], ["n", "bigint"]]
    assert json.loads(want[2]["_row_columns"]) == [["id", "int"], ["n", "bigint"]]
    first = WireSchemas()
    # record 2 to Python, or to the JVM; then again with the shapes the first run learnt (the
    # JVM's image of record 3 typed, and dropped when Python reads it again)
    for wire in (first, _learned(records), first):
        decoded = decode_raw(_raw(spark, records), max_record_bytes=MAX_BYTES, wire=wire)
        try:
            both = _rows(decoded)
        finally:
            decoded.unpersist()
        _assert_same(spark, both, want, "ingest", records, wire.marks())
    assert first.shapes


# --- stream order: schemas move on as the records go -----------------------------------------


def _table_schema(extra: bool) -> dict[str, Any]:
    fields = [{"type": "int32", "optional": False, "field": "id"}]
    if extra:
        fields.append({"type": "int64", "optional": True, "field": "n"})
    row = {"type": "struct", "optional": True, "name": "db.t.Value", "fields": fields}
    return {
        "type": "struct",
        "optional": False,
        "name": "db.t.Envelope",
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            {
                "type": "struct",
                "optional": False,
                "field": "source",
                "fields": [
                    {"type": "string", "optional": False, "field": "connector"},
                    {"type": "int64", "optional": False, "field": "ts_ms"},
                    {"type": "string", "optional": False, "field": "db"},
                    {"type": "string", "optional": False, "field": "schema"},
                    {"type": "string", "optional": True, "field": "table"},
                    {"type": "int64", "optional": True, "field": "lsn"},
                ],
            },
            {"type": "string", "optional": False, "field": "op"},
        ],
    }


def _change(i: int, extra: bool, wrapped: bool = True) -> bytes:
    after: dict[str, Any] = {"id": i}
    if extra:
        after["n"] = 2**40 + i
    source = {
        "connector": "postgresql",
        "ts_ms": 1_700_000_000_000 + i,
        "db": "db",
        "schema": "public",
        "table": "t",
        "lsn": 100 + i,
    }
    payload = {"after": after, "before": None, "source": source, "op": "c"}
    payload = {k: payload[k] for k in ("before", "after", "source", "op")}
    return _wire({"schema": _table_schema(extra), "payload": payload} if wrapped else payload)


@pytest.mark.parametrize("start_extra", [None, False, True])
def test_a_record_without_its_schema_is_read_with_the_schema_before_it_on_both_paths(
    spark, start_extra
):
    """The JVM decodes the wrapped records; the payload-only ones are read with the newest
    schema of its table before it in the stream (here, one the JVM decoded): by Python, from
    the start when the table's build table records a schema, else by the JVM's Python pass
    (the JVM alone reads them by their values)."""
    records: list[Record] = [
        (None, _change(1, False)),
        (None, _change(2, True)),
        (None, _change(3, True, wrapped=False)),
        (None, _change(4, False)),
        (None, _change(5, False, wrapped=False)),
    ]
    start = {}
    if start_extra is not None:
        start = {"public.t": parse_schema(json.dumps(_table_schema(start_extra))).text}
    counts = _three_ways(spark, records, start)
    if start:
        assert counts == {"jvm": 3, "again": 0, "changes": 5}
    else:
        assert counts == {"jvm": 5, "again": 2, "changes": 5}
    payload_only = _python(records, start)[2]
    assert json.loads(payload_only["_row_columns"]) == [["id", "int"], ["n", "bigint"]]
    # the schema kept for the next batch: the newest record's that had one (record 4's)
    wire = _learned(records)
    decoded = decode_raw(_raw(spark, records), schemas=start, wire=wire)
    try:
        newest = newest_in_batch(summarise(decoded)[0], start, wire.marks())
    finally:
        decoded.unpersist()
    assert newest == {"public.t": parse_schema(json.dumps(_table_schema(False))).text}


def test_the_schema_kept_is_the_newest_records_on_both_paths(spark):
    """The schema kept for the next batch is that of the table's newest record by connector
    position, not the last schema change in stream order: here an older record with another
    schema arrives after a newer one with the start schema."""
    start_text = parse_schema(json.dumps(_table_schema(False))).text
    start = {"public.t": start_text}
    records: list[Record] = [(None, _change(5, False)), (None, _change(3, True))]
    kept = []
    for wire in (_learned(records), _Unlearning()):  # the JVM first; then Python alone
        decoded = decode_raw(_raw(spark, records), schemas=start, wire=wire)
        try:
            kept.append(newest_in_batch(summarise(decoded)[0], start, wire.marks()))
        finally:
            decoded.unpersist()
    assert kept == [start, start]


# --- where the JVM decoder comes from ----------------------------------------------------------


def test_without_the_jvm_decoder_every_record_is_decoded_in_python_alike(
    spark, monkeypatch, caplog
):
    """A Spark without lakehouse's jar decodes every record in Python, with the same answer,
    and says so once."""
    import lakehouse.dimension.jvm_decode as jvm_decode

    records: list[Record] = [(None, _change(i, i % 2 == 0)) for i in range(4)]
    want = _python(records, {})
    monkeypatch.setattr("lakehouse.spark.decoder_class", lambda spark: None)
    monkeypatch.setattr(jvm_decode, "_warned", set())
    wire = _learned(records)
    with caplog.at_level("WARNING", logger="lakehouse.dimension"):
        fast = _rows(decode_fast(_raw(spark, records), wire, max_bytes=MAX_BYTES, start={}))
        decoded = decode_raw(_raw(spark, records), max_record_bytes=MAX_BYTES, wire=wire)
    try:
        both = _rows(decoded)
    finally:
        decoded.unpersist()
    assert [r["_kind"] for r in fast] == [None] * 4
    _assert_same(spark, both, want, "python", records, wire.marks())
    warned = [r.getMessage() for r in caplog.records if "JVM decoder" in r.getMessage()]
    assert len(warned) == 1 and "fix:" in warned[0], warned


def test_a_session_lakehouse_did_not_start_gets_the_jvm_decoder_added(tmp_path):
    """A notebook's or a runtime's own session (no lakehouse jar on its classpath) is given
    the jar as ``ADD JAR`` gives one, and decodes in the JVM: here a fresh JVM."""
    import subprocess
    import sys
    from pathlib import Path

    from lakehouse.spark import DECODE_JAR

    records = [_change(i, False).decode() for i in range(5)]
    (tmp_path / "records.json").write_text(json.dumps(records))
    script = """
import json, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .getOrCreate())
assert "lakehouse" not in spark.conf.get("spark.jars", "")
from lakehouse.dimension.decode import decode_raw
from lakehouse.dimension.jvm_decode import WireSchemas, image_columns
records = json.load(open(sys.argv[1]))
rows = [(None, r.encode(), "cdc", 0, i) for i, r in enumerate(records)]
raw = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, "
                            "offset bigint").selectExpr("*", "current_timestamp() AS timestamp")
decoded = decode_raw(raw, wire=WireSchemas())
typed = [n for n, _ in image_columns(decoded.schema)]
out = decoded.selectExpr("_kind", f"coalesce({', '.join(typed)}) IS NOT NULL AS typed").collect()
print(json.dumps([[r["_kind"], r["typed"]] for r in out]))
"""
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "records.json")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert DECODE_JAR.is_file()
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [["change", True]] * 5
    assert "JVM decoder" not in done.stderr


# ------------------------------------------------------------------ whole ingests, both ways


def _scenario_batches(*, bare: bool = False) -> list[list[tuple[bytes | None, bytes | None, int]]]:
    """The crash tests' change log (tests/scenario.py) up to its schema block, as the
    connector writes it: the table's creation, a dead letter, the marker, a widening, a
    re-snapshot and its end, a block and the update it holds back; ``bare``: the same
    payloads without their Connect schemas (``schemas.enable=false``)."""
    import scenario

    out = []
    for lines in scenario.cdc_batches()[:6]:
        batch = []
        for text in lines:
            try:
                document = json.loads(text)
                if bare and isinstance(document, dict) and "payload" in document:
                    document = document["payload"]
                value = _wire(document)
            except ValueError:  # the undecodable line stays as it is
                value = text.encode()
            batch.append((None, None if text == "null" else value, 0))
        out.append(batch)
    return out


def _demo_batches() -> list[list[tuple[bytes | None, bytes | None, int]]]:
    """The demo's change log (three partitions, keyed; malformed records among them)."""
    from lakehouse.demo.data import make_demo_data

    return [list(wave.cdc) for wave in make_demo_data(changes=120).waves]


def _ingest_each_batch(spark: Any, root: Any, batches: Sequence[Sequence[Any]]) -> Any:
    """Run the build sink over ``batches`` (one micro-batch each) into tables under ``root``;
    returns the sink."""
    from datetime import UTC, datetime

    from pyspark.sql.types import StructType

    from lakehouse.dimension import BuildSink, BuildTarget
    from lakehouse.sources.schema import RAW_SCHEMA_DDL

    sink = BuildSink(
        [BuildTarget(str(root / "build"), key_columns=("currency",))],
        dead_letter_table=str(root / "dead"),
        pipeline_id="both-ways",
    )
    offsets: dict[int, int] = {}
    at = datetime(2026, 1, 1, tzinfo=UTC)
    for batch_id, records in enumerate(batches):
        rows = []
        for key, value, partition in records:
            offset = offsets[partition] = offsets.get(partition, -1) + 1
            rows.append((key, value, "cdc", partition, offset, at, 0))
        sink.process(spark.createDataFrame(rows, StructType.fromDDL(RAW_SCHEMA_DDL)), batch_id)
    return sink


def _table_content(spark: Any, root: Any) -> dict[str, Any]:
    """What the two runs must share: every build and dead-letter column but the wall-clock
    ones, the properties two runs agree on, and each commit's batch, watermark and rows."""
    import scenario

    from lakehouse import delta

    build, dead = str(root / "build"), str(root / "dead")
    rows = delta.read(spark, build).drop(INGESTED_AT)
    dead_rows = delta.read(spark, dead).drop("_dead_lettered_at")
    commits = [
        {k: c.metadata.get(k) for k in (META_BATCH_ID, META_WATERMARK, META_ROWS)}
        for c in reversed(delta.history(build))
        if c.operation == "WRITE"
    ]

    def values(df: Any) -> list[tuple[Any, ...]]:  # the tables' own paths said alike
        rows = [tuple(str(v).replace(str(root), "<root>") for v in r) for r in df.collect()]
        return sorted(rows, key=repr)

    return {
        "columns": rows.columns,
        "types": rows.schema.simpleString(),
        "rows": values(rows),
        "dead": values(dead_rows),
        "properties": scenario.same_properties(delta.get_properties(build)),
        "commits": commits,
    }


@pytest.mark.parametrize("inputs", ["scenario", "bare", "demo"])
def test_an_ingest_writes_the_same_tables_whichever_path_decodes(
    spark, tmp_path, monkeypatch, inputs
):
    """The build table, its dead letters, its properties and its commits: the same content
    when the JVM decodes what it can as when Python decodes every record (``bare``: the
    scenario without Connect schemas, every record typed from its values)."""
    batches = _demo_batches() if inputs == "demo" else _scenario_batches(bare=inputs == "bare")
    jvm = _ingest_each_batch(spark, tmp_path / "jvm", batches)
    # the JVM took the common records: it learnt their schemas
    if inputs != "bare":
        assert any(w is not None for w in jvm._wire.values.values())
    with monkeypatch.context() as m:
        m.setattr("lakehouse.dimension.sink.WireSchemas", _Unlearning)
        m.setattr("lakehouse.spark.decoder_class", lambda spark: None)
        python = _ingest_each_batch(spark, tmp_path / "python", batches)
    assert python._wire.empty
    got, want = _table_content(spark, tmp_path / "jvm"), _table_content(spark, tmp_path / "python")
    for part in want:
        assert got[part] == want[part], part
    assert want["rows"] and want["dead"]
