"""The common Debezium record decoded in the JVM: ``from_json`` and Spark SQL conversions, no
Python per record.

:func:`decode_fast` gives every raw record the columns of
:data:`lakehouse.dimension.decode.DECODED_DDL`, and after them a typed row-image column per
known schema (:func:`image_columns`), where a record it decodes has its row image. A record
whose value (and key) starts with a known Connect schema (``{"schema":S,"payload":`` exactly
as ``JsonConverter`` writes it, see :class:`WireSchemas`) has its payload parsed with its
schema's wire type (:mod:`lakehouse.cdc.wire`), from the byte after that prefix (the schema,
most of the record's text, is matched, not parsed again), and converted in Spark SQL
(:mod:`lakehouse.dimension.jvm_values`); it is
decoded there only if the JVM is sure to give exactly what the Python decoder gives:

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

Any other record gets a NULL ``_kind``; :func:`lakehouse.dimension.decode.decode_raw`
decodes those in Python (:func:`lakehouse.dimension.decode.decode_record`), in stream order,
so their kinds, dead-letter reasons and schemas are exactly the Python decoder's.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from lakehouse.cdc.decode import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS
from lakehouse.cdc.models import SNAPSHOT_PHASES
from lakehouse.cdc.seq import SEQ_COMPONENT_WIDTH
from lakehouse.cdc.wire import (
    ImagePlan,
    WireEnvelope,
    WireKey,
    compile_key,
    compile_value,
    schema_prefix,
)
from lakehouse.dimension.jvm_values import convert
from lakehouse.dimension.layout import LINEAGE_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation
    from pyspark.sql.types import StructType

__all__ = [
    "IMAGE_PREFIX",
    "MAX_KNOWN",
    "RAW_HASH",
    "WireSchemas",
    "decode_fast",
    "image_columns",
    "image_groups",
    "row_text",
    "schema_mark",
]

#: The 64-bit xxHash of a record's raw key and value, in the decode: with the record's
#: position, it finds the record's bytes among the batch's
#: (:func:`lakehouse.dimension.decode.with_raw`).
RAW_HASH: Final = "_raw_hash"
#: The typed row-image columns' names start with this (:func:`image_columns`).
IMAGE_PREFIX: Final = "_image"
#: Schemas known at most, each of values and of keys (one ``from_json`` branch each).
MAX_KNOWN: Final = 256
#: Marks whose text is kept (a batch learns at most ``4 * MAX_KNOWN`` new schemas).
MAX_MARKS: Final = 8 * MAX_KNOWN

_RESERVED: Final = frozenset(c.casefold() for c in LINEAGE_COLUMNS)
_JSON_OPTIONS: Final = {"mode": "PERMISSIVE", "allowNonNumericNumbers": "false"}
#: ``substring``'s length up to the end (SQL's own default)
_TO_END: Final = 2**31 - 1
_ROW_JSON_OPTIONS: Final = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timeZone": "UTC",
}


#: One step of the decode: a projection (``select``; in :attr:`WireSchemas.plan`, its columns
#: as one JVM ``Seq``), or a metric collected there (``records``, ``jvm_values``; each a new
#: :class:`~pyspark.sql.Observation` per batch).
_Step = tuple[str, tuple[Any, ...]]


@dataclass
class WireSchemas:
    """The Connect schemas the JVM decode knows, by their records' prefix text; learned from
    records (:meth:`learn`), most recently seen kept (:data:`MAX_KNOWN` each). One per ingest
    process: a batch's records are decoded in the JVM once their schema was seen in an
    earlier batch or in the batch's first record."""

    values: OrderedDict[str, WireEnvelope | None] = field(default_factory=OrderedDict)
    keys: OrderedDict[str, WireKey | None] = field(default_factory=OrderedDict)
    #: The decode's projections built for the schemas known last (:func:`decode_fast`), with
    #: what they were built for.
    plan: tuple[Any, tuple[_Step, ...]] | None = field(default=None, repr=False, compare=False)
    #: The text of each mark written, kept longer than the schemas themselves: a batch's
    #: records name a schema that learning the batch's new ones may have pushed out.
    texts: OrderedDict[str, str] = field(default_factory=OrderedDict, repr=False)

    def learn_texts(self, records: Iterable[tuple[str | None, str | None]]) -> None:
        """Learn the schemas of ``(key, value)`` record texts (each compiled once; a schema
        the JVM does not decode is remembered as such)."""
        for key, value in records:
            self._learn(value, self.values, _compile_value)
            self._learn(key, self.keys, compile_key)
        for w in self.values.values():
            if w is not None:
                mark = schema_mark(w.text)
                self.texts[mark] = w.text
                self.texts.move_to_end(mark)
        while len(self.texts) > MAX_MARKS:
            self.texts.popitem(last=False)

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
        """The schema text of each ``_connect_schema`` mark the decode writes: of the schemas
        known now and of the last :data:`MAX_MARKS` known before."""
        return dict(self.texts)

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


def _from_json(payload: Column, payload_type: dict[str, Any]) -> Column:
    """The payload parsed from its text (a record's :func:`_tail`). Text after the payload
    (the record's closing brace) is not read; :func:`_canonical` checks all of it."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    return F.from_json(payload, StructType.fromJson(payload_type), _JSON_OPTIONS)


def _tail(raw: str, known: Sequence[str], by: Column) -> Column:
    """The text of a record (column ``raw``, bytes) after its known schema's prefix (the
    prefix ``known[by]``, which it starts with): its payload and closing brace. Parsed from
    there, the record's schema (most of its text) is not read again."""
    from pyspark.sql import functions as F

    if not known:
        return F.lit(None).cast("string")
    start = _by_schema(by, [len(prefix.encode("utf-8")) + 1 for prefix in known])
    return F.col(raw).substr(start, F.lit(_TO_END)).cast("string")


def _whole(raw: str, known: Sequence[str], by: Column, tail: str) -> Column:
    """A record's raw bytes (column ``raw``) where they were kept, else put together again
    from its known schema's prefix (``known[by]``) and its :func:`_tail`: the same bytes (a
    cast between binary and string keeps every byte)."""
    from pyspark.sql import functions as F

    if not known:
        return F.col(raw)
    prefix = _by_schema(by, [text.encode("utf-8") for text in known])
    return F.coalesce(F.col(raw), F.concat(prefix, F.col(tail).cast("binary")))


def _by_schema(by: Column, literals: Sequence[Any]) -> Column:
    """``literals[by]``: the literal of a record's known schema (NULL for none)."""
    from pyspark.sql import functions as F

    picked = F.when(by == 0, F.lit(literals[0]))
    for i, literal in enumerate(literals[1:], start=1):
        picked = picked.when(by == i, F.lit(literal))
    return picked


def _written_back(parsed: Column) -> Column:
    """The parsed payload written back as JSON, and the wrapper's closing brace."""
    from pyspark.sql import functions as F

    return F.concat(F.to_json(parsed, {"ignoreNullFields": "false"}), F.lit("}"))


def _canonical(tail: Column, written: Column) -> Column:
    """The record's text after its schema's prefix (:func:`_tail`) is exactly ``written``
    (the parsed payload written back, :func:`_written_back`): nothing the parse skipped,
    coerced or stopped at (malformed text, text after the payload) can differ, and the
    record is what ``to_json`` of its decoded payload gives. NULL for a record of another
    schema (its ``written`` is NULL), as each schema's parse is."""
    return (
        (tail == written)
        # a \uD800-\uDFFF escape makes the text differ from what Jackson writes back; this
        # holds also if a Jackson version wrote a lone surrogate as its escape
        & ~_surrogate(written)
    )


def _in(value: Column, lo: int, hi: int) -> Column:
    return value.isNull() | value.between(lo, hi)


def _image(
    image: ImagePlan, struct: Column, converted: list[str], *, as_json: bool = False
) -> tuple[Column, Column]:
    """``(row, fits)`` of a row image whose converted values are the columns ``converted``:
    the row as a struct of the column types (as JSON text with ``as_json``; NULL image: NULL
    row, fits)."""
    from pyspark.sql import functions as F

    values, fits = [], F.lit(True)
    for (name, _), column in zip(image.columns, converted, strict=True):
        values.append(F.col(column).alias(name))
        fits = fits & (struct[name].isNull() | F.col(column).isNotNull())
    row = F.struct(*values)
    if as_json:
        row = F.to_json(row, _ROW_JSON_OPTIONS)
    return F.when(struct.isNotNull(), row), struct.isNull() | fits


def image_columns(schema: StructType) -> list[tuple[str, StructType]]:
    """The typed row-image columns of a decoded frame's ``schema``: name and row type, one
    per known value schema (two when its ``before`` and ``after`` differ in type). A record
    the JVM decoded has its row image in one of them (its ``_row_json`` is NULL); every other
    record has them all NULL."""
    from pyspark.sql.types import StructType

    return [
        (f.name, f.dataType)
        for f in schema.fields
        if f.name.startswith(IMAGE_PREFIX) and isinstance(f.dataType, StructType)
    ]


def image_groups(schema: StructType) -> dict[str, tuple[str, ...]]:
    """The typed row-image columns of a decoded frame's ``schema`` (:func:`image_columns`)
    by the value schema they are of: ``{"_image3": ("_image3",), "_image4": ("_image4a",
    "_image4b")}``. A record's image is in at most one group.

    >>> from pyspark.sql.types import LongType, StringType, StructField as F, StructType
    >>> row = StructType([F("a", LongType())])
    >>> image_groups(StructType([F("_image0", row), F("_image1a", row), F("_image1b", row),
    ...     F("_image2", StringType())]))
    {'_image0': ('_image0',), '_image1': ('_image1a', '_image1b')}
    """
    groups: dict[str, tuple[str, ...]] = {}
    for name, _ in image_columns(schema):
        group = name.rstrip("ab")
        groups[group] = (*groups.get(group, ()), name)
    return groups


def row_text(images: Sequence[tuple[str, StructType]]) -> Column:
    """A decoded record's row image as JSON text, whichever decoder decoded it: its
    ``_row_json``, else its typed image (in one of ``images``, :func:`image_columns`)
    written as the JVM wrote ``_row_json`` before images were typed (what ``from_json``
    reads back into the column types). Evaluated only where used: the path for a value whose
    column type differs from the record's."""
    from pyspark.sql import functions as F

    return F.coalesce(
        F.col("_row_json"),
        *[F.to_json(F.col(name), _ROW_JSON_OPTIONS) for name, _ in images],
    )


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


def _converted(name: str, image: ImagePlan) -> list[str]:
    """The names of the columns that hold an image's converted values."""
    return [f"{name}_{i}" for i in range(len(image.columns))]


def _conversions(name: str, image: ImagePlan, struct: Column) -> list[Column]:
    return [
        convert(struct[column], conversion).alias(alias)
        for (column, conversion), alias in zip(image.columns, _converted(name, image), strict=True)
    ]


def _value_output(
    i: int, envelope: WireEnvelope, start: Mapping[str, str]
) -> tuple[dict[str, Column], Column, dict[str, Column]]:
    """The decoded fields of records of value schema ``i``, whether the JVM decodes the
    record exactly, and its typed row-image columns (by name, see :func:`image_columns`)."""
    from pyspark.sql import functions as F

    payload = F.col(f"_v{i}")
    op = payload["op"]
    source = payload["source"] if envelope.source_fields else F.lit(None)
    source_fields = envelope.source_fields
    table = _source_table(source, source_fields)
    snapshot, snapshot_ok = _snapshot(source, source_fields)
    event_time = F.coalesce(
        _field(source, source_fields, "ts_ms", "long"),
        _field(payload, envelope.envelope_fields, "ts_ms", "long"),
    )
    seq, seq_ok = _position(source, source_fields)
    row_op = op.isin("r", "c", "u")
    empty = F.lit("[]")
    if envelope.same_images and envelope.after is not None:
        image = F.col(f"_v{i}image")
        row, fits = _image(envelope.after, image, _converted(f"_v{i}i", envelope.after))
        columns = F.lit(envelope.after.row_columns)
        image_ok = F.when(row_op, image.isNotNull() & fits).when(op == "d", fits)
        image_ok = image_ok.otherwise(F.lit(True))
        images = {f"{IMAGE_PREFIX}{i}": F.when(row_op | (op == "d"), row)}
        row_columns = (
            F.when(row_op, columns).when((op == "d") & image.isNotNull(), columns).otherwise(empty)
        )
    else:
        image_ok, images, row_columns = _images(i, envelope, payload, op)
    ok = (
        F.col(f"_v{i}canonical")
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
    fields: dict[str, Column] = {
        "_op": op,
        "_source_table": table,
        "_snapshot_phase": snapshot,
        "_event_time_ms": event_time,
        "_seq": seq,
        "_row_columns": row_columns,
        "_connect_schema": schema,
    }
    return fields, F.coalesce(ok, F.lit(False)), images


def _chosen(payload: Column) -> Column:
    """The row image a record carries: ``before`` for a delete, else ``after``."""
    from pyspark.sql import functions as F

    return F.when(payload["op"] == "d", payload["before"]).otherwise(payload["after"])


def _images(
    i: int, envelope: WireEnvelope, payload: Column, op: Column
) -> tuple[Column, dict[str, Column], Column]:
    """``(image ok, typed row-image columns, row columns)`` when ``before`` and ``after``
    differ in type: one image column each (``after`` of a row change, ``before`` of a
    delete)."""
    from pyspark.sql import functions as F

    row_op = op.isin("r", "c", "u")
    empty = F.lit("[]")
    if envelope.after is not None:
        after, after_ok = _image(
            envelope.after, payload["after"], _converted(f"_v{i}a", envelope.after)
        )
        after_ok = payload["after"].isNotNull() & after_ok
        after_columns = F.lit(envelope.after.row_columns)
    else:
        after, after_ok, after_columns = F.lit(None), F.lit(False), empty
    if envelope.before is not None:
        before, before_ok = _image(
            envelope.before, payload["before"], _converted(f"_v{i}b", envelope.before)
        )
        before_columns = F.when(
            payload["before"].isNotNull(), F.lit(envelope.before.row_columns)
        ).otherwise(empty)
    else:
        before, before_ok, before_columns = F.lit(None), F.lit(True), empty
    image_ok = F.when(row_op, after_ok).when(op == "d", before_ok).otherwise(F.lit(True))
    images = {}
    if envelope.after is not None:
        images[f"{IMAGE_PREFIX}{i}a"] = F.when(row_op, after)
    if envelope.before is not None:
        images[f"{IMAGE_PREFIX}{i}b"] = F.when(op == "d", before)
    row_columns = F.when(row_op, after_columns).when(op == "d", before_columns).otherwise(empty)
    return image_ok, images, row_columns


def _key_output(j: int, key: WireKey) -> tuple[dict[str, Column], Column]:
    from pyspark.sql import functions as F

    payload = F.col(f"_k{j}")
    row, fits = _image(key.image, payload, _converted(f"_k{j}k", key.image), as_json=True)
    ok = F.col(f"_k{j}canonical") & payload.isNotNull() & fits
    fields = {"_key_json": row, "_key_columns": F.lit(key.image.row_columns)}
    return fields, F.coalesce(ok, F.lit(False))


def _surrogate(text: Column) -> Column:
    return text.contains("\\ud") | text.contains("\\uD")


def decode_fast(
    raw: DataFrame,
    wire: WireSchemas,
    *,
    max_bytes: int,
    start: Mapping[str, str],
    observation: Observation | None = None,
) -> DataFrame:
    """The :data:`~lakehouse.dimension.decode.DECODED_DDL` columns of every raw record and the
    typed row-image columns (:func:`image_columns`), decoded in the JVM where that is exact;
    the others have a NULL ``_kind`` (see the module docstring). ``start``: the tables'
    Connect schema texts at the start of the batch. Each change record says its schema in
    ``_connect_schema``: ``''`` when it is its table's ``start`` schema, else
    :func:`schema_mark` of it (the Python pass says the schemas of the records it decodes the
    same way where it can). ``observation``: receives ``jvm_values``, the records whose value
    the JVM decoded, once the result is computed. The projections are built once per set of
    known schemas and kept on ``wire`` (:attr:`WireSchemas.plan`).

    Only the records left to Python (NULL ``_kind``, not tombstones) keep their raw ``key``
    and ``value``, byte for byte; every record has :data:`RAW_HASH` of them."""
    from pyspark.sql import Observation

    # in the order of their text, not of their use: the set, not the order in which the
    # batches' records used the schemas, decides when the projections are built again
    values = sorted(((p, w) for p, w in wire.values.items() if w is not None), key=_first)
    keys = sorted(((p, k) for p, k in wire.keys.items() if k is not None), key=_first)
    shape: tuple[Any, ...] = (
        tuple(p for p, _ in values),
        tuple(p for p, _ in keys),
        max_bytes,
        tuple(tuple(sorted(t for t, text in start.items() if text == w.text)) for _, w in values),
    )
    # the JVM objects of the projections belong to the gateway (a stopped and restarted
    # SparkContext has a new one)
    shape = (*shape, raw.sparkSession.sparkContext._gateway)
    if wire.plan is None or wire.plan[0] != shape:
        # built once per set of known schemas, not per batch: thousands of py4j calls
        steps = _decode_steps(values, keys, max_bytes=max_bytes, start=start)
        wire.plan = (shape, _in_jvm(raw, steps))
    # each projection is one call (a select of Python columns is a call per column)
    jdf, session = raw._jdf, raw.sparkSession
    for kind, columns in wire.plan[1]:
        if kind == "select":
            jdf = jdf.select(columns)
            continue
        metric = Observation()
        if kind == "jvm_values" and observation is not None:
            metric = observation
        jdf = type(raw)(jdf, session).observe(metric, *columns)._jdf
    return type(raw)(jdf, session)


def _in_jvm(raw: DataFrame, steps: tuple[_Step, ...]) -> tuple[_Step, ...]:
    """``steps`` with each projection's columns as one JVM ``Seq``, made once."""
    from pyspark.sql.classic.column import _to_java_column, _to_seq

    sc = raw.sparkSession.sparkContext
    return tuple(
        (kind, _to_seq(sc, [_to_java_column(c) for c in columns]) if kind == "select" else columns)
        for kind, columns in steps
    )


def _decode_steps(
    values: list[tuple[str, WireEnvelope]],
    keys: list[tuple[str, WireKey]],
    *,
    max_bytes: int,
    start: Mapping[str, str],
) -> tuple[_Step, ...]:
    """The decode's projections for these known schemas (see :func:`decode_fast`)."""
    from pyspark.sql import functions as F

    steps: list[_Step] = []
    text = F.col("value").cast("string")
    key_text = F.col("key").cast("string")
    sid = F.lit(None).cast("int")
    if values:
        usable = F.octet_length("value") <= max_bytes
        branches = F.when(text.startswith(values[0][0]), F.lit(0))
        for i, (prefix, _) in enumerate(values[1:], start=1):
            branches = branches.when(text.startswith(prefix), F.lit(i))
        sid = F.when(usable, branches)
    kid = F.lit(None).cast("int")
    if keys:
        branches = F.when(key_text.startswith(keys[0][0]), F.lit(0))
        for j, (prefix, _) in enumerate(keys[1:], start=1):
            branches = branches.when(key_text.startswith(prefix), F.lit(j))
        kid = F.when(F.octet_length("key") <= max_bytes, branches)

    def select(*columns: Any) -> None:
        steps.append(("select", columns))

    tombstone = F.col("value").isNull() | (F.octet_length("value") == 0)
    no_key = (
        F.col("key").isNull() | (F.octet_length("key") == 0) | (F.octet_length("key") > max_bytes)
    )
    select(
        *_RAW,
        sid.alias("_sid"),
        kid.alias("_kid"),
        F.xxhash64("key", "value").alias(RAW_HASH),
        tombstone.alias("_tombstone"),
        no_key.alias("_no_key"),
    )
    value_prefixes, key_prefixes = [p for p, _ in values], [p for p, _ in keys]
    # A record of a known schema is its schema's prefix and its tail: from here on only the
    # tail is carried (each projection copies every column it passes on, and the schema is
    # most of a record's text); the raw bytes are put together again only for the records
    # left to Python (below)
    select(
        *[c for c in _RAW if c not in ("key", "value")],
        "_sid",
        "_kid",
        RAW_HASH,
        "_tombstone",
        "_no_key",
        F.when(F.col("_sid").isNull(), F.col("value")).alias("value"),
        F.when(F.col("_kid").isNull(), F.col("key")).alias("key"),
        _tail("value", value_prefixes, F.col("_sid")).alias("_tail"),
        _tail("key", key_prefixes, F.col("_kid")).alias("_key_tail"),
    )
    # Each step is a projection of its own, so that each parse runs once per record, only for
    # the records of its schema. A parse (from_json) is evaluated outside Spark's generated
    # code; putting the key's between the value's work and the rest keeps each generated
    # method small enough for the JVM to compile (HotSpot leaves methods over 8000 bytes
    # interpreted).
    select(
        "*",
        *[
            F.when(F.col("_sid") == i, _from_json(F.col("_tail"), w.payload_type)).alias(f"_v{i}")
            for i, (_, w) in enumerate(values)
        ],
    )
    select(
        "*",
        *[
            _chosen(F.col(f"_v{i}")).alias(f"_v{i}image")
            for i, (_, w) in enumerate(values)
            if w.same_images
        ],
    )
    converted: list[Column] = []
    for i, (_, w) in enumerate(values):
        payload = F.col(f"_v{i}")
        converted.append(_written_back(F.col(f"_v{i}")).alias(f"_v{i}written"))
        if w.same_images and w.after is not None:
            converted += _conversions(f"_v{i}i", w.after, F.col(f"_v{i}image"))
            continue
        if w.after is not None:
            converted += _conversions(f"_v{i}a", w.after, payload["after"])
        if w.before is not None:
            converted += _conversions(f"_v{i}b", w.before, payload["before"])
    select("*", *converted)
    # Spark fuses a chain of projections into one generated method, and HotSpot leaves a
    # method of over 8000 bytes of bytecode interpreted (several times slower). Collecting a
    # metric is not fused: here it cuts the chain in parts the JVM compiles.
    steps.append(("records", (F.count(F.lit(1)).alias("records"),)))
    select(
        "*",
        *[
            _canonical(F.col("_tail"), F.col(f"_v{i}written")).alias(f"_v{i}canonical")
            for i in range(len(values))
        ],
    )
    sid, kid = F.col("_sid"), F.col("_kid")
    value_decoded = [_value_output(i, w, start) for i, (_, w) in enumerate(values)]
    value_outputs = [(fields, ok) for fields, ok, _ in value_decoded]
    value_ok = F.coalesce(
        *[F.when(sid == i, ok) for i, (_, ok) in enumerate(value_outputs)], F.lit(False)
    )
    select("*", value_ok.alias("_value_ok"))
    # (the records whose value the JVM decodes; and a second cut)
    steps.append(("jvm_values", (F.count_if(F.col("_value_ok")).alias("jvm_values"),)))
    select(
        "*",
        *[
            F.when(F.col("_kid") == j, _from_json(F.col("_key_tail"), k.key_type)).alias(f"_k{j}")
            for j, (_, k) in enumerate(keys)
        ],
    )
    converted = []
    for j, (_, k) in enumerate(keys):
        parsed = F.col(f"_k{j}")
        converted.append(
            _canonical(F.col("_key_tail"), _written_back(parsed)).alias(f"_k{j}canonical")
        )
        converted += _conversions(f"_k{j}k", k.image, parsed)
    select("*", *converted)
    key_outputs = [_key_output(j, k) for j, (_, k) in enumerate(keys)]
    key_ok = F.col("_no_key") | F.coalesce(
        *[F.when(kid == j, ok) for j, (_, ok) in enumerate(key_outputs)], F.lit(False)
    )
    # whether a record is decoded here, once per record; then each field of its schema's
    select("*", (F.col("_value_ok") & key_ok & ~F.col("_tombstone")).alias("_fast"))
    fast = F.col("_fast")
    left = ~F.col("_tombstone") & ~fast

    def field(name: str, outputs: list[tuple[dict[str, Column], Column]], by: Column) -> Column:
        picked = [F.when(by == n, fields[name]) for n, (fields, _) in enumerate(outputs)]
        return F.coalesce(*picked) if picked else F.lit(None)

    select(
        F.when(F.col("_tombstone"), F.lit("tombstone")).when(fast, F.lit("change")).alias("_kind"),
        F.lit(None).cast("string").alias("_error_kind"),
        F.lit(None).cast("string").alias("_error"),
        *[
            F.when(fast, field(name, value_outputs, sid)).alias(name)
            for name in ("_op", "_source_table", "_snapshot_phase")
        ],
        F.when(fast, field("_event_time_ms", value_outputs, sid))
        .cast("bigint")
        .alias("_event_time_ms"),
        F.when(fast, field("_seq", value_outputs, sid)).cast("string").alias("_seq"),
        # the JVM's row image is typed, in its schema's image column (below)
        F.lit(None).cast("string").alias("_row_json"),
        F.when(fast, field("_row_columns", value_outputs, sid))
        .cast("string")
        .alias("_row_columns"),
        F.when(fast & ~F.col("_no_key"), field("_key_json", key_outputs, kid))
        .cast("string")
        .alias("_key_json"),
        F.when(
            fast, F.coalesce(field("_key_columns", key_outputs, kid).cast("string"), F.lit("[]"))
        ).alias("_key_columns"),
        F.lit(None).cast("string").alias("_schema_change"),
        F.when(fast, field("_connect_schema", value_outputs, sid))
        .cast("string")
        .alias("_connect_schema"),
        F.when(left, _whole("key", key_prefixes, kid, "_key_tail")).alias("key"),
        F.when(left, _whole("value", value_prefixes, sid, "_tail")).alias("value"),
        *[c for c in _RAW if c not in ("key", "value")],
        RAW_HASH,
        *[
            F.when(fast & (sid == i), image).alias(name)
            for i, (_, _, images) in enumerate(value_decoded)
            for name, image in images.items()
        ],
    )
    return tuple(steps)


_RAW: Final = ("key", "value", "topic", "partition", "offset", "timestamp")


def _first(pair: tuple[str, Any]) -> str:
    return pair[0]
