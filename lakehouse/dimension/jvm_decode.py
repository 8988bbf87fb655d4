"""The common Debezium record decoded in the JVM, no Python per record.

:func:`decode_fast` gives every raw record the columns of
:data:`lakehouse.dimension.decode.DECODED_DDL`, and after them a typed row-image column per
known schema (:func:`image_columns`), where a record it decodes has its row image. The decode
itself is lakehouse's own JVM code, a Catalyst expression of each record's raw bytes that
returns Spark's own row (``dev.lakehouse.decode.DebeziumDecoder``, ``jvm/decode/``, put on
Spark's classpath by :func:`lakehouse.spark.decoder_class`). This module tells it what it
knows: the Connect schemas seen (:class:`WireSchemas`), each compiled in pure Python by
:mod:`lakehouse.cdc.wire` (which records are eligible and how each column converts: the Python
decoder's rules, one definition), sent to the JVM once per set of known schemas as a JSON
specification (:func:`specification`).

A record whose value (and key) starts with a known Connect schema (``{"schema":S,"payload":``
exactly as ``JsonConverter`` writes it) has its payload read from the byte after that prefix
(the schema, most of the record's text, is matched, not parsed again); it is decoded there only
if the JVM is sure to give exactly what the Python decoder gives:

* the payload is in the canonical form, exactly what Jackson writes of the values it holds:
  every field the schema names, in its order, nothing else, no whitespace, no duplicate key,
  no trailing text, each value of its wire type in the form Jackson writes it (so nothing a
  parse could skip or coerce can differ);
* no ``\\uD800``-``\\uDFFF`` escape (a lone surrogate is the Python decoder's ``encoding``
  error), valid UTF-8, not over the size limit;
* a row-change ``op`` with its row image, a known snapshot phase, an event time and a
  connector position the Python decoder accepts, a transaction block with its id;
* every converted value in range (a date, timestamp or decimal the column can hold; strict
  base64; an ISO-8601 instant with a valid date and offset);
* a key that is absent or decodes the same way.

A record without a Connect schema (``schemas.enable=false``) is read by its values, as the
Python decoder's ``infer_row`` types them, when its row image and key hold scalars only and its
table's build table records no Connect schema (the Python decoder reads such a table's records
with it); its image is JSON text (``_row_json``), its columns exactly the Python decoder's.

Any other record gets a NULL ``_kind``; :func:`lakehouse.dimension.decode.decode_raw`
decodes those in Python (:func:`lakehouse.dimension.decode.decode_record`), in stream order,
so their kinds, dead-letter reasons and schemas are exactly the Python decoder's. Without the
JVM decoder on Spark's classpath every record takes that path (:func:`decode_fast` says so,
once per process).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from lakehouse import spark as spark_setup
from lakehouse.cdc.models import SNAPSHOT_PHASES
from lakehouse.cdc.wire import (
    Conversion,
    ImagePlan,
    WireEnvelope,
    WireKey,
    compile_key,
    compile_value,
    schema_prefix,
)
from lakehouse.dimension.layout import LINEAGE_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
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
    "specification",
]

log = logging.getLogger("lakehouse.dimension")

#: The 64-bit xxHash of a record's raw key and value, in the decode: with the record's
#: position, it finds the record's bytes among the batch's
#: (:func:`lakehouse.dimension.decode.with_raw`).
RAW_HASH: Final = "_raw_hash"
#: The typed row-image columns' names start with this (:func:`image_columns`).
IMAGE_PREFIX: Final = "_image"
#: Schemas known at most, each of values and of keys.
MAX_KNOWN: Final = 256
#: The column types of a row image read without a schema that come out typed
#: (:meth:`WireSchemas.learn_shapes`): ``infer_row``'s scalars, as Spark names them in JSON.
BARE_TYPES: Final = {"string": "string", "bigint": "long", "double": "double", "boolean": "boolean"}
#: Marks whose text is kept (a batch learns at most ``4 * MAX_KNOWN`` new schemas).
MAX_MARKS: Final = 8 * MAX_KNOWN
#: The JVM decoder's fields, before the image slots (its ``FIELDS``), with their types.
DECODER_FIELDS: Final = (
    ("_kind", "string"),
    ("_op", "string"),
    ("_source_table", "string"),
    ("_snapshot_phase", "string"),
    ("_event_time_ms", "bigint"),
    ("_seq", "string"),
    ("_row_columns", "string"),
    ("_key_columns", "string"),
    ("_connect_schema", "string"),
    ("_row_json", "string"),
    ("_key_json", "string"),
    ("_bare", "boolean"),
)

_RESERVED: Final = frozenset(c.casefold() for c in LINEAGE_COLUMNS)
_ROW_JSON_OPTIONS: Final = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timeZone": "UTC",
}
_RAW: Final = ("key", "value", "topic", "partition", "offset", "timestamp")
_DECODED: Final = "_decoded"
#: The JVM decoder's typed keys in its output (one per known key schema); only their JSON
#: text (``_key_json``) is a decoded column.
_KEY_PREFIX: Final = "_key_image"


@dataclass
class WireSchemas:
    """The Connect schemas the JVM decode knows, by their records' prefix text; learned from
    records (:meth:`learn`), most recently seen kept (:data:`MAX_KNOWN` each). One per ingest
    process: a batch's records are decoded in the JVM once their schema was seen in an
    earlier batch or in the batch's first record."""

    values: OrderedDict[str, WireEnvelope | None] = field(default_factory=OrderedDict)
    keys: OrderedDict[str, WireKey | None] = field(default_factory=OrderedDict)
    #: The JVM decoder and the decode's two projections, built for the schemas known last
    #: (:func:`decode_fast`), with what they were built for.
    plan: tuple[Any, _Decoder] | None = field(default=None, repr=False, compare=False)
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

    #: The shapes (``_row_columns`` texts) of the row images the JVM read without a Connect
    #: schema in earlier batches (:meth:`learn_shapes`): such images of these shapes come out
    #: typed, one column per shape, as a known schema's do.
    shapes: OrderedDict[str, None] = field(default_factory=OrderedDict, repr=False)
    #: Whether a batch's first record was looked at for its schema (:meth:`peek`): once per
    #: process, so a stream without Connect schemas pays no job for it in every batch.
    peeked: bool = field(default=False, repr=False, compare=False)

    @property
    def empty(self) -> bool:
        """Whether no value schema is known yet."""
        return not self.values

    def learn_shapes(self, summary: Iterable[Mapping[str, Any]]) -> None:
        """Learn the shapes of the row images the JVM read without a Connect schema, from the
        summary of its decode alone (:func:`lakehouse.dimension.summary.summarise`: change
        entries that kept their raw value and brought no schema); only shapes of the column
        types :data:`BARE_TYPES`, the :data:`MAX_KNOWN` met last."""
        for r in summary:
            if r["_kind"] != "change" or not r.get("kept") or r.get("schema") is not None:
                continue
            columns = r["_row_columns"]
            if columns in self.shapes:
                self.shapes.move_to_end(columns)
            elif columns and all(t in BARE_TYPES for _, t in json.loads(columns)):
                self.shapes[columns] = None
        while len(self.shapes) > MAX_KNOWN:
            self.shapes.popitem(last=False)

    def peek(
        self, first: Callable[[], Iterable[tuple[str | None, str | None]]]
    ) -> list[tuple[str | None, str | None]]:
        """Learn the schemas of a batch's first records (``first()``, :meth:`learn_texts`)
        when none is known and none was peeked at before; ``first`` is called only then.
        Returns the records peeked at (none when it did not look)."""
        if not self.empty or self.peeked:
            return []
        self.peeked = True
        records = list(first())
        self.learn_texts(records)
        return records


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


# ------------------------------------------------------------------ the JVM decoder's input


def _image_type(image: ImagePlan, wire: Mapping[str, Any]) -> dict[str, Any]:
    """The Spark type (JSON form) of a row image the JVM converted: each column's type
    follows from its conversion and, for an unconverted value, its wire type."""
    wire_types = {f["name"]: f["type"] for f in wire["fields"]}
    return {
        "type": "struct",
        "fields": [
            {"name": n, "type": _converted_type(c, wire_types[n]), "nullable": True, "metadata": {}}
            for n, c in image.columns
        ],
    }


def _converted_type(conversion: Conversion, wire: str) -> str:
    if isinstance(conversion, tuple):
        _, precision, scale = conversion
        return f"decimal({precision},{scale})"
    return {
        "same": wire,
        "base64": "binary",
        "date": "date",
        "ts_millis": "timestamp",
        "ts_micros": "timestamp",
        "ts_nanos": "timestamp",
        "zoned": "timestamp",
        "time_millis": "long",
        "time_nanos": "long",
    }[conversion]


def _image_spec(image: ImagePlan | None) -> dict[str, Any] | None:
    if image is None:
        return None
    columns = [[n, list(c) if isinstance(c, tuple) else c] for n, c in image.columns]
    return {"columns": columns, "rowColumns": image.row_columns}


def _wire_field(payload_type: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    return next(f["type"] for f in payload_type["fields"] if f["name"] == name)


def specification(
    values: Sequence[tuple[str, WireEnvelope]],
    keys: Sequence[tuple[str, WireKey]],
    *,
    max_bytes: int,
    start: Mapping[str, str],
    shapes: Sequence[str] = (),
) -> tuple[str, dict[str, Any]]:
    """The JVM decoder's specification (JSON text) for these known value and key schemas
    (``(prefix, compiled)``, in this order), and the Spark type (JSON form) of its output: the
    fields :data:`DECODER_FIELDS`, then each value schema's row-image columns (named as
    :func:`image_columns` finds them: ``_image<i>``, or ``_image<i>a`` and ``_image<i>b`` when
    ``before`` and ``after`` differ in type), then each key schema's typed key (``_key_image<j>``).
    ``shapes``: the ``_row_columns`` texts of row images without a schema that come out typed
    (``_imagev<k>``, :meth:`WireSchemas.learn_shapes`). ``start``: the tables' Connect
    schema texts at the start of the batch (a record of its
    table's start schema says ``''`` in ``_connect_schema``, else :func:`schema_mark`; a
    record without a schema of such a table is read by the Python decoder, with that schema,
    and one of any other table in the JVM, its row image typed from its values).

    >>> text = json.dumps({"type": "struct", "fields": [
    ...     {"field": "after", "type": "struct", "optional": True, "fields": [
    ...         {"field": "id", "type": "int32"}]},
    ...     {"field": "op", "type": "string"}]})
    >>> prefix = '{"schema":' + text + ',"payload":'
    >>> spec, output = specification([(prefix, compile_value(text))], [], max_bytes=99, start={})
    >>> [f["name"] for f in output["fields"]][-2:]
    ['_bare', '_image0a']
    >>> json.loads(spec)["values"][0]["after"]
    {'columns': [['id', 'same']], 'rowColumns': '[["id", "int"]]'}
    """
    fields: list[dict[str, Any]] = [
        {"name": n, "type": t if t != "bigint" else "long", "nullable": True, "metadata": {}}
        for n, t in DECODER_FIELDS
    ]

    def slot(name: str, type_: dict[str, Any]) -> int:
        fields.append({"name": name, "type": type_, "nullable": True, "metadata": {}})
        return len(fields) - 1

    value_specs = []
    for i, (prefix, w) in enumerate(values):
        spec: dict[str, Any] = {
            "prefix": prefix,
            "payload": w.payload_type,
            "after": _image_spec(w.after),
            "before": _image_spec(w.before),
            "sameImages": w.same_images,
            "hasTransaction": w.has_transaction,
            "sameTables": sorted(t for t, text in start.items() if text == w.text),
            "mark": schema_mark(w.text),
        }
        if w.same_images and w.after is not None:
            after = _image_type(w.after, _wire_field(w.payload_type, "after"))
            spec["afterSlot"] = spec["beforeSlot"] = slot(f"{IMAGE_PREFIX}{i}", after)
        else:
            if w.after is not None:
                after = _image_type(w.after, _wire_field(w.payload_type, "after"))
                spec["afterSlot"] = slot(f"{IMAGE_PREFIX}{i}a", after)
            if w.before is not None:
                before = _image_type(w.before, _wire_field(w.payload_type, "before"))
                spec["beforeSlot"] = slot(f"{IMAGE_PREFIX}{i}b", before)
        value_specs.append(spec)
    key_specs = []
    for j, (prefix, k) in enumerate(keys):
        key_type = _image_type(k.image, k.key_type)
        key_specs.append(
            {
                "prefix": prefix,
                "payload": k.key_type,
                "image": _image_spec(k.image),
                "slot": slot(f"{_KEY_PREFIX}{j}", key_type),
            }
        )
    bare_shapes = []
    for s, columns in enumerate(shapes):
        row = {
            "type": "struct",
            "fields": [
                {"name": n, "type": BARE_TYPES[c], "nullable": True, "metadata": {}}
                for n, c in json.loads(columns)
            ],
        }
        bare_shapes.append({"rowColumns": columns, "slot": slot(f"{IMAGE_PREFIX}v{s}", row)})
    text = json.dumps(
        {
            "protocol": spark_setup.DECODE_PROTOCOL,
            "bareShapes": bare_shapes,
            "maxBytes": max_bytes,
            "bare": True,
            "schemaTables": sorted(start),
            "reserved": sorted(_RESERVED),
            "snapshotPhases": sorted(SNAPSHOT_PHASES),
            "slots": len(fields) - len(DECODER_FIELDS),
            "values": value_specs,
            "keys": key_specs,
        }
    )
    return text, {"type": "struct", "fields": fields}


# ------------------------------------------------------------------------------- the decode


@dataclass(frozen=True, slots=True)
class _Decoder:
    """The decode's two projections (each a JVM ``Seq`` of columns, made once): the JVM
    decoder's output beside the raw columns, then the decoded columns out of it."""

    decode: Any
    columns: Any


_warned: set[str] = set()


def decode_fast(
    raw: DataFrame,
    wire: WireSchemas,
    *,
    max_bytes: int,
    start: Mapping[str, str],
) -> DataFrame:
    """The :data:`~lakehouse.dimension.decode.DECODED_DDL` columns of every raw record and the
    typed row-image columns (:func:`image_columns`), decoded in the JVM where that is exact;
    the others have a NULL ``_kind`` (see the module docstring). ``start``: the tables'
    Connect schema texts at the start of the batch. Each change record says its schema in
    ``_connect_schema``: ``''`` when it is its table's ``start`` schema, else
    :func:`schema_mark` of it (the Python pass says the schemas of the records it decodes the
    same way where it can); a record without a schema says NULL. The decoder and its
    projections are built once per set of known schemas and kept on ``wire``
    (:attr:`WireSchemas.plan`).

    Only the records left to Python (NULL ``_kind``, not tombstones) and the change events
    read without a Connect schema keep their raw ``key`` and ``value``, byte for byte (the
    Python pass reads such an event again when a record before it in its source partition
    brought its table's schema); every record has :data:`RAW_HASH` of them."""
    from pyspark.sql import DataFrame as _DataFrame

    # in the order of their text, not of their use: the set, not the order in which the
    # batches' records used the schemas, decides when the decoder is built again
    values = sorted(((p, w) for p, w in wire.values.items() if w is not None), key=_first)
    keys = sorted(((p, k) for p, k in wire.keys.items() if k is not None), key=_first)
    session = raw.sparkSession
    shape: tuple[Any, ...] = (
        tuple(p for p, _ in values),
        tuple(p for p, _ in keys),
        max_bytes,
        tuple(tuple(sorted(t for t, text in start.items() if text == w.text)) for _, w in values),
        tuple(sorted(start)),
        tuple(sorted(wire.shapes)),
        # the JVM objects belong to the gateway (a stopped and restarted SparkContext has a
        # new one)
        session.sparkContext._gateway,
    )
    if wire.plan is None or wire.plan[0] != shape:
        wire.plan = (
            shape,
            _decoder(
                session, values, keys, max_bytes=max_bytes, start=start, shapes=sorted(wire.shapes)
            ),
        )
    decoder = wire.plan[1]
    # each projection is one call (a select of Python columns is a py4j call per column)
    jdf = raw._jdf.select(decoder.decode).select(decoder.columns)
    return _DataFrame(jdf, session)


def _decoder(
    spark: Any,
    values: Sequence[tuple[str, WireEnvelope]],
    keys: Sequence[tuple[str, WireKey]],
    *,
    max_bytes: int,
    start: Mapping[str, str],
    shapes: Sequence[str],
) -> _Decoder:
    """The JVM decoder for these known schemas, and the decode's projections over it; with
    no decoder on the classpath (or no schema known), a projection that decodes nothing."""
    from pyspark.sql import functions as F
    from pyspark.sql.classic.column import Column as _Column
    from pyspark.sql.classic.column import _to_java_column, _to_seq
    from pyspark.sql.types import StructType

    sc = spark.sparkContext
    make = spark_setup.decoder_class(spark)
    if make is None and "decoder" not in _warned:
        _warned.add("decoder")
        log.warning(
            "lakehouse's JVM decoder (%s) is not on Spark's classpath: every record is decoded "
            "in Python, several times slower; fix: install lakehouse from a wheel built by "
            "'make wheel', or run 'make' in the checkout",
            spark_setup.DECODE_JAR.name,
        )
    none = F.lit(None).cast("string")
    first: list[Any] = [*_RAW, F.xxhash64("key", "value").alias(RAW_HASH)]
    images: list[Column] = []
    if make is not None:
        spec, output = specification(values, keys, max_bytes=max_bytes, start=start, shapes=shapes)
        first.insert(0, _Column(make(spec, json.dumps(output))).alias(_DECODED))
        d = F.col(_DECODED)
        decoded = {n: d[n] for n, _ in DECODER_FIELDS}
        names = [f.name for f in StructType.fromJson(output).fields]
        typed_keys = [
            F.to_json(d[n], _ROW_JSON_OPTIONS) for n in names if n.startswith(_KEY_PREFIX)
        ]
        key_json = F.coalesce(decoded["_key_json"], *typed_keys)
        images = [d[n].alias(n) for n in names if n.startswith(IMAGE_PREFIX)]
        kept = decoded["_kind"].isNull() | decoded["_bare"]
    else:
        tombstone = F.col("value").isNull() | (F.octet_length("value") == 0)
        decoded = {n: F.lit(None).cast(t) for n, t in DECODER_FIELDS}
        decoded["_kind"] = F.when(tombstone, F.lit("tombstone"))
        key_json = none
        kept = decoded["_kind"].isNull()
    columns = [
        decoded["_kind"].alias("_kind"),
        none.alias("_error_kind"),
        none.alias("_error"),
        *[decoded[n].alias(n) for n in ("_op", "_source_table", "_snapshot_phase")],
        decoded["_event_time_ms"].alias("_event_time_ms"),
        decoded["_seq"].alias("_seq"),
        # a row image read with its schema is typed, in its schema's image column (below)
        decoded["_row_json"].alias("_row_json"),
        decoded["_row_columns"].alias("_row_columns"),
        key_json.alias("_key_json"),
        decoded["_key_columns"].alias("_key_columns"),
        none.alias("_schema_change"),
        decoded["_connect_schema"].alias("_connect_schema"),
        F.when(kept, F.col("key")).alias("key"),
        F.when(kept, F.col("value")).alias("value"),
        *[F.col(c) for c in _RAW if c not in ("key", "value")],
        F.col(RAW_HASH),
        *images,
    ]

    def seq(cols: Iterable[Any]) -> Any:
        return _to_seq(sc, [_to_java_column(F.col(c) if isinstance(c, str) else c) for c in cols])

    return _Decoder(decode=seq(first), columns=seq(columns))


def _first(pair: tuple[str, Any]) -> str:
    return pair[0]
