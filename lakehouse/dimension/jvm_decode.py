"""The common Debezium record decoded in the JVM: ``from_json`` and Spark SQL conversions, no
Python per record.

:func:`decode_fast` gives every raw record the columns of
:data:`lakehouse.dimension.decode.DECODED_DDL`. A record whose value (and key) starts with a
known Connect schema (``{"schema":S,"payload":`` exactly as ``JsonConverter`` writes it, see
:class:`WireSchemas`) is parsed with its schema's wire type (:mod:`lakehouse.cdc.wire`) and
converted in Spark SQL; it is decoded there only if the JVM is sure to give exactly what the
Python decoder gives:

* the text is what ``to_json`` writes of the parsed payload: every field the schema names,
  in its order, nothing else, no duplicate key, no trailing text, each value of its wire type
  (so nothing the parse skipped or coerced can differ);
* no ``\\uD800``-``\\uDFFF`` escape (a lone surrogate is the Python decoder's ``encoding``
  error), not over the size limit;
* a row-change ``op`` with its row image, a known snapshot phase, an event time and a
  connector position the Python decoder accepts, a transaction block with its id;
* every converted value in range (a date, timestamp or decimal the column can hold; strict
  base64; an ISO-8601 instant with a valid date and offset);
* a key that is absent or decodes the same way.

Any other record gets a NULL ``_kind``; :func:`complete` decodes those in Python
(:func:`lakehouse.dimension.decode.decode_record`), in stream order, so their kinds, dead-letter
reasons and schemas are exactly the Python decoder's.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from lakehouse.cdc.decode import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS
from lakehouse.cdc.models import SNAPSHOT_PHASES
from lakehouse.cdc.seq import SEQ_COMPONENT_WIDTH
from lakehouse.cdc.wire import (
    Conversion,
    ImagePlan,
    WireEnvelope,
    WireKey,
    compile_key,
    compile_value,
    schema_prefix,
)
from lakehouse.dimension import layout as L

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["MAX_KNOWN", "WireSchemas", "decode_fast", "schema_mark"]

#: Schemas known at most, each of values and of keys (one ``from_json`` branch each).
MAX_KNOWN: Final = 16

_RESERVED: Final = frozenset(c.casefold() for c in L.LINEAGE_COLUMNS)
_JSON_OPTIONS: Final = {
    "mode": "PERMISSIVE",
    "columnNameOfCorruptRecord": "_corrupt",
    "allowNonNumericNumbers": "false",
}
_ROW_JSON_OPTIONS: Final = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timeZone": "UTC",
}
_MIN_MICROS: Final = MIN_EVENT_TIME_MS * 1000
_MAX_MICROS: Final = MAX_EVENT_TIME_MS * 1000 + 999
_MIN_DAY, _MAX_DAY = -719_162, 2_932_896  # 0001-01-01 and 9999-12-31
_BASE64: Final = r"^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
_ZONED: Final = (
    r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:"
    r"[0-5][0-9](\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-5][0-9])$"
)


@dataclass
class WireSchemas:
    """The Connect schemas the JVM decode knows, by their records' prefix text; learned from
    records (:meth:`learn`), most recently seen kept (:data:`MAX_KNOWN` each). One per ingest
    process: a batch's records are decoded in the JVM once their schema was seen in an
    earlier batch or in the batch's first record."""

    values: OrderedDict[str, WireEnvelope | None] = field(default_factory=OrderedDict)
    keys: OrderedDict[str, WireKey | None] = field(default_factory=OrderedDict)

    def learn_texts(self, records: Iterable[tuple[str | None, str | None]]) -> None:
        """Learn the schemas of ``(key, value)`` record texts (each compiled once; a schema
        the JVM does not decode is remembered as such)."""
        for key, value in records:
            self._learn(value, self.values, _compile_value)
            self._learn(key, self.keys, compile_key)

    @staticmethod
    def _learn(text: str | None, known: OrderedDict[str, Any], compile: Any) -> None:
        found = None if not text else schema_prefix(text)
        if found is None:
            return
        prefix, schema = found
        if prefix in known:
            known.move_to_end(prefix)
            return
        known[prefix] = compile(schema)
        while len(known) > MAX_KNOWN:
            known.popitem(last=False)

    def marks(self) -> dict[str, str]:
        """The schema text of each ``_connect_schema`` mark the JVM decode writes."""
        return {schema_mark(w.text): w.text for w in self.values.values() if w is not None}

    @property
    def empty(self) -> bool:
        """Whether no value schema is known yet."""
        return not self.values


def schema_mark(text: str) -> str:
    """What a record the JVM decoded says in ``_connect_schema`` of its schema, when that is
    not its table's at the start of the batch (``''`` when it is): ``#`` and the schema's
    hash, not its text, which would be kept once per record.

    >>> schema_mark('{"type":"struct"}')[:13]
    '#f81fd2a263f6'
    """
    return "#" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _compile_value(schema: str) -> WireEnvelope | None:
    return compile_value(schema, reserved=_RESERVED)


def _from_json(text: Column, payload_type: dict[str, Any]) -> Column:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    wrapper = StructType.fromJson(
        {
            "type": "struct",
            "fields": [
                {"name": "payload", "type": payload_type, "nullable": True, "metadata": {}},
                {"name": "_corrupt", "type": "string", "nullable": True, "metadata": {}},
            ],
        }
    )
    return F.from_json(text, wrapper, _JSON_OPTIONS)


def _canonical(text: Column, prefix: str, parsed: Column) -> Column:
    """The text is exactly ``prefix`` + the parsed payload written back + ``}``."""
    from pyspark.sql import functions as F

    return parsed["_corrupt"].isNull() & (
        text
        == F.concat(
            F.lit(prefix), F.to_json(parsed["payload"], {"ignoreNullFields": "false"}), F.lit("}")
        )
    )


def _in(value: Column, lo: int, hi: int) -> Column:
    return value.isNull() | value.between(lo, hi)


def _convert(w: Column, conversion: Conversion) -> tuple[Column, Column]:
    """``(value, fits)`` of a wire value: the column's value, and whether the JVM converts it
    exactly (NULL converts to NULL and fits). Every conversion is guarded by its check, so no
    value can raise (ANSI mode)."""
    from pyspark.sql import functions as F

    true = F.lit(True)
    if conversion == "same":
        return w, true
    if conversion == "base64":
        ok = w.isNull() | (w.rlike(_BASE64) & (F.base64(F.unbase64(w)) == w))
        return F.when(ok, F.unbase64(w)), ok
    if conversion == "date":
        ok = _in(w, _MIN_DAY, _MAX_DAY)
        return F.when(ok, F.date_from_unix_date(w)), ok
    if conversion == "ts_millis":
        ok = _in(w, MIN_EVENT_TIME_MS, MAX_EVENT_TIME_MS)
        return F.when(ok, F.timestamp_millis(w)), ok
    if conversion == "ts_micros":
        ok = _in(w, _MIN_MICROS, _MAX_MICROS)
        return F.when(ok, F.timestamp_micros(w)), ok
    if conversion == "ts_nanos":
        return F.timestamp_micros(_floor_1000(w)), true  # every long fits after the division
    if conversion == "time_millis":
        limit = (2**63 - 1) // 1000
        ok = _in(w, -limit, limit)
        return F.when(ok, w.cast("long") * 1000), ok
    if conversion == "time_nanos":
        return _floor_1000(w), true
    if conversion == "zoned":
        return _zoned(w)
    _, precision, scale = conversion
    return _decimal(w, precision, scale)


def _floor_1000(w: Column) -> Column:
    """``w // 1000`` rounding down, as Python's ``//`` does (exact: in decimal, not double)."""
    from pyspark.sql import functions as F

    return F.floor(w.cast("decimal(20,0)") / F.lit(1000)).cast("long")


def _zoned(w: Column) -> tuple[Column, Column]:
    """ISO-8601 with an offset, as Debezium writes a ``ZonedTimestamp``; the fraction cut
    to microseconds (not rounded), as the Python decoder does."""
    from pyspark.sql import functions as F

    shaped = w.rlike(_ZONED) & ~w.startswith("0000")
    fraction = F.rpad(F.substring(F.regexp_extract(w, r"\.([0-9]+)", 1), 1, 6), 6, "0")
    offset = F.regexp_extract(w, r"(Z|[+-][0-9]{2}:[0-9]{2})$", 1)
    text = F.concat(F.substring(w, 1, 19), F.lit("."), fraction, offset)
    parsed = F.when(shaped, F.try_to_timestamp(text, F.lit("yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX")))
    ok = w.isNull() | (
        shaped & parsed.isNotNull() & F.unix_micros(parsed).between(_MIN_MICROS, _MAX_MICROS)
    )
    return F.when(ok, parsed), ok


def _decimal(w: Column, precision: int, scale: int) -> tuple[Column, Column]:
    """Base64 of a big-endian two's-complement unscaled value (at most eight bytes) ->
    ``decimal(precision, scale)``, exact: written out as decimal text and cast."""
    from pyspark.sql import functions as F

    raw = F.unbase64(w)
    shaped = w.rlike(_BASE64) & (F.base64(raw) == w) & F.octet_length(raw).between(1, 8)
    hexed = F.hex(raw)
    signed = F.lpad(hexed, 16, F.when(F.substring(hexed, 1, 1) >= "8", "F").otherwise("0"))
    unscaled = F.conv(signed, 16, -10)
    negative = unscaled.startswith("-")
    magnitude = F.regexp_replace(unscaled, "^-", "")
    # lpad cuts a longer text: pad only up to scale + 1 digits
    digits = F.lpad(magnitude, F.greatest(F.length(magnitude), F.lit(scale + 1)), "0")
    if scale == 0:
        text = unscaled
    else:
        size = F.length(digits)
        text = F.concat(
            F.when(negative, F.lit("-")).otherwise(F.lit("")),
            digits.substr(F.lit(1), size - scale),
            F.lit("."),
            digits.substr(size - scale + 1, F.lit(scale)),
        )
    value = F.when(shaped, text.try_cast(f"decimal({precision},{scale})"))
    ok = w.isNull() | (shaped & value.isNotNull())
    return F.when(ok, value), ok


def _image(image: ImagePlan, struct: Column) -> tuple[Column, Column]:
    """``(row JSON, fits)`` of a row image (NULL image: NULL JSON, fits)."""
    from pyspark.sql import functions as F

    values, fits = [], F.lit(True)
    for name, conversion in image.columns:
        value, ok = _convert(struct[name], conversion)
        values.append(value.alias(name))
        fits = fits & ok
    row = F.when(struct.isNotNull(), F.to_json(F.struct(*values), _ROW_JSON_OPTIONS))
    return row, struct.isNull() | fits


def _field(struct: Column, fields: Mapping[str, str], name: str, cast: str) -> Column:
    from pyspark.sql import functions as F

    return struct[name] if name in fields else F.lit(None).cast(cast)


def _padded(number: Column) -> Column:
    from pyspark.sql import functions as F

    return F.lpad(number.cast("string"), SEQ_COMPONENT_WIDTH, "0")


def _position(source: Column, fields: Mapping[str, str]) -> tuple[Column, Column]:
    """``(seq, ok)``: the connector position as :func:`lakehouse.cdc.seq.position_seq` writes
    it, for PostgreSQL, MySQL and MariaDB (other connectors with a position: not ok)."""
    from pyspark.sql import functions as F

    connector = _field(source, fields, "connector", "string")
    lsn = _field(source, fields, "lsn", "long")
    file = _field(source, fields, "file", "string")
    pos = _field(source, fields, "pos", "long")
    row = F.coalesce(_field(source, fields, "row", "long"), F.lit(0))
    number = F.regexp_extract(file, r"([0-9]+)\z", 1)
    file_number = number.try_cast("decimal(20,0)")
    binlog = file.isNotNull() & (number != "") & pos.isNotNull()
    mysql = connector.isin("mysql", "mariadb")
    seq = F.when((connector == "postgresql") & lsn.isNotNull(), _padded(lsn)).when(
        mysql & binlog,
        F.concat_ws(".", _padded(file_number), _padded(pos), _padded(row)),
    )
    ok = (
        F.when(connector == "postgresql", lsn.isNull() | (lsn >= 0))
        .when(mysql, ~binlog | (file_number.isNotNull() & (pos >= 0) & (row >= 0)))
        .when(connector.isin("sqlserver", "oracle"), F.lit(False))
        .otherwise(F.lit(True))
    )
    return seq, ok


def _snapshot(source: Column, fields: Mapping[str, str]) -> tuple[Column, Column]:
    """``(phase, ok)``: ``source.snapshot`` normalised as the models normalise it."""
    from pyspark.sql import functions as F

    kind = fields.get("snapshot")
    if kind is None:
        return F.lit("false"), F.lit(True)
    value = source["snapshot"]
    if kind == "boolean":
        return F.when(value, F.lit("true")).otherwise(F.lit("false")), F.lit(True)
    ok = value.isNull() | value.isin(*sorted(SNAPSHOT_PHASES))
    return F.coalesce(value, F.lit("false")), ok


def _source_table(source: Column, fields: Mapping[str, str]) -> Column:
    from pyspark.sql import functions as F

    table = _field(source, fields, "table", "string")
    if fields.get("collection") == "string":
        table = F.coalesce(table, source["collection"])
    prefix = F.coalesce(
        _field(source, fields, "schema", "string"), _field(source, fields, "db", "string")
    )
    return F.when(table.isNotNull(), F.concat_ws(".", prefix, table))


#: The fields of a fast decode's output struct, in :data:`DECODED_DDL` order.
_OUT: Final = (
    "_op",
    "_source_table",
    "_snapshot_phase",
    "_event_time_ms",
    "_seq",
    "_row_json",
    "_row_columns",
    "_connect_schema",
)


def _value_output(
    prefix: str, envelope: WireEnvelope, parsed: Column, start: Mapping[str, str]
) -> Column:
    """The decoded fields of records of one value schema, and ``ok``."""
    from pyspark.sql import functions as F

    payload = parsed["payload"]
    op = payload["op"]
    source = payload["source"] if envelope.source_fields else F.lit(None)
    fields = envelope.source_fields
    table = _source_table(source, fields)
    snapshot, snapshot_ok = _snapshot(source, fields)
    event_time = F.coalesce(
        _field(source, fields, "ts_ms", "long"),
        _field(payload, envelope.envelope_fields, "ts_ms", "long"),
    )
    seq, seq_ok = _position(source, fields)
    row_op = op.isin("r", "c", "u")
    empty = F.lit("[]")
    if envelope.after is not None:
        after, after_ok = _image(envelope.after, payload["after"])
        after_ok = payload["after"].isNotNull() & after_ok
        after_columns = F.lit(envelope.after.row_columns)
    else:
        after, after_ok, after_columns = F.lit(None), F.lit(False), empty
    if envelope.before is not None:
        before, before_ok = _image(envelope.before, payload["before"])
        before_columns = F.when(
            payload["before"].isNotNull(), F.lit(envelope.before.row_columns)
        ).otherwise(empty)
    else:
        before, before_ok, before_columns = F.lit(None), F.lit(True), empty
    image_ok = F.when(row_op, after_ok).when(op == "d", before_ok).otherwise(F.lit(True))
    ok = (
        _canonical(F.col("_text"), prefix, parsed)
        & op.isin("r", "c", "u", "d", "t")
        & image_ok
        & snapshot_ok
        & seq_ok
        & _in(event_time, MIN_EVENT_TIME_MS, MAX_EVENT_TIME_MS)
    )
    if envelope.has_transaction:
        ok = ok & (payload["transaction"].isNull() | payload["transaction"]["id"].isNotNull())
    same = sorted(t for t, text in start.items() if text == envelope.text)
    schema = F.when(table.isin(*same), F.lit("")).when(
        table.isNotNull(), F.lit(schema_mark(envelope.text))
    )
    return F.struct(
        op.alias("_op"),
        table.alias("_source_table"),
        snapshot.alias("_snapshot_phase"),
        event_time.alias("_event_time_ms"),
        seq.alias("_seq"),
        F.when(row_op, after).when(op == "d", before).alias("_row_json"),
        F.when(row_op, after_columns)
        .when(op == "d", before_columns)
        .otherwise(empty)
        .alias("_row_columns"),
        schema.alias("_connect_schema"),
        F.coalesce(ok, F.lit(False)).alias("ok"),
    )


def _key_output(key: WireKey, parsed: Column, prefix: str) -> Column:
    from pyspark.sql import functions as F

    row, fits = _image(key.image, parsed["payload"])
    ok = _canonical(F.col("_key_text"), prefix, parsed) & parsed["payload"].isNotNull() & fits
    return F.struct(
        row.alias("_key_json"),
        F.lit(key.image.row_columns).alias("_key_columns"),
        F.coalesce(ok, F.lit(False)).alias("ok"),
    )


def _surrogate(text: Column) -> Column:
    return text.contains("\\ud") | text.contains("\\uD")


def decode_fast(
    raw: DataFrame, wire: WireSchemas, *, max_bytes: int, start: Mapping[str, str]
) -> DataFrame:
    """The :data:`~lakehouse.dimension.decode.DECODED_DDL` columns of every raw record, decoded
    in the JVM where that is exact; the others have a NULL ``_kind`` (see the module
    docstring). ``start``: the tables' Connect schema texts at the start of the batch. Each
    change record says its schema in ``_connect_schema``: ``''`` when it is its table's
    ``start`` schema, else :func:`schema_mark` of it (the Python decoder writes the text, and
    only where a partition's records move to another schema)."""
    from pyspark.sql import functions as F

    values = [(p, w) for p, w in wire.values.items() if w is not None]
    keys = [(p, k) for p, k in wire.keys.items() if k is not None]
    text = F.col("value").cast("string")
    key_text = F.col("key").cast("string")
    sid = F.lit(None).cast("int")
    if values:
        usable = (F.octet_length("value") <= max_bytes) & ~_surrogate(text)
        branches = F.when(text.startswith(values[0][0]), F.lit(0))
        for i, (prefix, _) in enumerate(values[1:], start=1):
            branches = branches.when(text.startswith(prefix), F.lit(i))
        sid = F.when(usable, branches)
    kid = F.lit(None).cast("int")
    if keys:
        branches = F.when(key_text.startswith(keys[0][0]), F.lit(0))
        for j, (prefix, _) in enumerate(keys[1:], start=1):
            branches = branches.when(key_text.startswith(prefix), F.lit(j))
        kid = F.when((F.octet_length("key") <= max_bytes) & ~_surrogate(key_text), branches)
    # each step a projection of its own: a parse is evaluated once per record, only for
    # the records of its schema
    staged = raw.select(
        *_RAW,
        text.alias("_text"),
        sid.alias("_sid"),
        key_text.alias("_key_text"),
        kid.alias("_kid"),
    )
    staged = staged.select(
        "*",
        *[
            F.when(F.col("_sid") == i, _from_json(F.col("_text"), w.payload_type)).alias(f"_v{i}")
            for i, (_, w) in enumerate(values)
        ],
        *[
            F.when(F.col("_kid") == j, _from_json(F.col("_key_text"), k.key_type)).alias(f"_k{j}")
            for j, (_, k) in enumerate(keys)
        ],
    )
    value_out = F.coalesce(
        *[
            F.when(F.col("_sid") == i, _value_output(p, w, F.col(f"_v{i}"), start))
            for i, (p, w) in enumerate(values)
        ],
        F.lit(None).cast(_value_struct()),
    )
    key_out = F.coalesce(
        *[
            F.when(F.col("_kid") == j, _key_output(k, F.col(f"_k{j}"), p))
            for j, (p, k) in enumerate(keys)
        ],
        F.lit(None).cast("struct<_key_json:string,_key_columns:string,ok:boolean>"),
    )
    no_key = (
        F.col("key").isNull() | (F.octet_length("key") == 0) | (F.octet_length("key") > max_bytes)
    )
    staged = staged.select(
        *_RAW, value_out.alias("_out"), key_out.alias("_kout"), no_key.alias("_no_key")
    )
    tombstone = F.col("value").isNull() | (F.octet_length("value") == 0)
    fast = F.coalesce(F.col("_out.ok"), F.lit(False)) & (
        F.col("_no_key") | F.coalesce(F.col("_kout.ok"), F.lit(False))
    )
    return staged.select(
        F.when(tombstone, F.lit("tombstone")).when(fast, F.lit("change")).alias("_kind"),
        F.lit(None).cast("string").alias("_error_kind"),
        F.lit(None).cast("string").alias("_error"),
        *[F.when(fast & ~tombstone, F.col(f"_out.{name}")).alias(name) for name in _OUT[:5]],
        F.when(fast & ~tombstone, F.col("_out._row_json")).alias("_row_json"),
        F.when(fast & ~tombstone, F.col("_out._row_columns")).alias("_row_columns"),
        F.when(fast & ~tombstone & ~F.col("_no_key"), F.col("_kout._key_json")).alias("_key_json"),
        F.when(fast & ~tombstone, F.coalesce(F.col("_kout._key_columns"), F.lit("[]"))).alias(
            "_key_columns"
        ),
        F.lit(None).cast("string").alias("_schema_change"),
        F.when(fast & ~tombstone, F.col("_out._connect_schema")).alias("_connect_schema"),
        *_RAW,
    )


_RAW: Final = ("key", "value", "topic", "partition", "offset", "timestamp")


def _value_struct() -> str:
    return (
        "struct<_op:string,_source_table:string,_snapshot_phase:string,_event_time_ms:bigint,"
        "_seq:string,_row_json:string,_row_columns:string,_connect_schema:string,ok:boolean>"
    )
