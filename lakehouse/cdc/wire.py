"""What the JVM decode needs to know of one Connect schema, decided in pure Python.

The ingest decodes the common record in lakehouse's JVM decoder (a Catalyst expression,
:mod:`lakehouse.dimension.jvm_decode`); this module decides, once per distinct schema on the
driver, whether and how. :func:`compile_value` turns a change event's Connect envelope schema
into a :class:`WireEnvelope`: the Spark type of its payload *as written on the wire* (a
``MicroTimestamp`` is a ``long``, a ``Decimal`` base64 text) and, per row-image column, the
conversion from the wire value to the column's type. :func:`compile_key`
does the same for a key schema.

The rules are the Python decoder's (:mod:`lakehouse.cdc.schema`, :mod:`lakehouse.cdc.models`),
not a second copy of them: column types come from :func:`~lakehouse.cdc.schema.compile_struct`,
the logical types from the same table of logical names, the envelope's field types from the
pydantic models. A schema with anything this module does not convert exactly (an array, a
nested struct or map, ``VariableScaleDecimal``, a decimal wider than eight bytes on the wire, a
decimal sent as text or a number, a source field of a type the models refuse, a column name
the table cannot take) gives ``None``: its records are decoded in Python, as before.

Per record, the JVM decode still sends to Python whatever it is not sure of (see
:mod:`lakehouse.dimension.jvm_decode`); a schema compiled here only makes the common record
eligible.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from lakehouse.cdc._parse import parse_schema, schema_prefix
from lakehouse.cdc.models import ConnectSchema, SourceInfo, TransactionBlock
from lakehouse.cdc.schema import (
    _PHYSICAL,
    SchemaHandle,
    StructPlan,
    check_columns,
    logical_applies,
    source_decimal_applies,
)
from lakehouse.errors import CdcDecodeError

__all__ = [
    "MAX_FAST_DECIMAL_BYTES",
    "Conversion",
    "ImagePlan",
    "WireEnvelope",
    "compile_key",
    "compile_value",
    "schema_prefix",
    "wire_type",
]

MAX_FAST_DECIMAL_BYTES: Final = 8
"""Longest unscaled ``Decimal`` (bytes on the wire) the JVM converts; longer ones (more than
18 digits) are converted in Python."""

#: Spark's JSON type names of the Connect physical types a wire struct may hold.
_WIRE: Final = {
    "boolean": "boolean",
    "int8": "byte",
    "int16": "short",
    "int32": "integer",
    "int64": "long",
    "float": "float",
    "float32": "float",
    "double": "double",
    "float64": "double",
    "string": "string",
    "bytes": "string",  # base64 text
}
_INTS: Final = frozenset({"int8", "int16", "int32", "int64"})

Conversion = (
    Literal[
        "same",
        "base64",
        "date",
        "ts_millis",
        "ts_micros",
        "ts_nanos",
        "zoned",
        "time_millis",
        "time_nanos",
    ]
    | tuple[Literal["decimal"], int, int]
)
"""How a wire value becomes its column's value: unchanged; base64 text -> bytes; days ->
date; epoch milli/micro/nanoseconds -> timestamp; ISO-8601 text with an offset ->
timestamp; milliseconds/nanoseconds past midnight -> microseconds; base64 two's-complement
unscaled bytes -> ``decimal(p, s)`` (``("decimal", p, s)``)."""

#: The conversion of each logical type the JVM converts, by logical name.
_BY_NAME: Final[dict[str, Conversion]] = {
    "io.debezium.time.Date": "date",
    "org.apache.kafka.connect.data.Date": "date",
    "io.debezium.time.Timestamp": "ts_millis",
    "org.apache.kafka.connect.data.Timestamp": "ts_millis",
    "io.debezium.time.MicroTimestamp": "ts_micros",
    "io.debezium.time.NanoTimestamp": "ts_nanos",
    "io.debezium.time.ZonedTimestamp": "zoned",
    "io.debezium.time.Time": "time_millis",
    "org.apache.kafka.connect.data.Time": "time_millis",
    "io.debezium.time.MicroTime": "same",
    "io.debezium.time.NanoTime": "time_nanos",
}
_DECIMAL: Final = "org.apache.kafka.connect.data.Decimal"


@dataclass(frozen=True, slots=True)
class ImagePlan:
    """A row image (or key) the JVM decodes.

    Attributes:
        columns: ``(column, conversion)`` in schema order.
        row_columns: the Python decoder's ``_row_columns`` (or ``_key_columns``) of an image
            of this schema: the same JSON text, so both decoders' records group together.
    """

    columns: tuple[tuple[str, Conversion], ...]
    row_columns: str


@dataclass(frozen=True, slots=True)
class WireEnvelope:
    """A change event's envelope schema, compiled for the JVM decode.

    Attributes:
        payload_type: the payload's Spark type as written on the wire, in Spark's JSON form
            (``StructType.fromJson``): every field of the schema, in schema order, so that
            writing a parsed payload back (``to_json``) gives the text ``JsonConverter``
            wrote.
        after, before: the row images (None when the envelope has no such struct field).
        source_fields: the fields of ``source``, with their Connect physical types.
        envelope_fields: the envelope's own scalar fields (``op``, ``ts_ms``, ...) likewise.
        has_transaction: the envelope has a ``transaction`` struct.
        text: the schema as the Python decoder keeps it (:attr:`SchemaHandle.text`).
        same_images: ``before`` and ``after`` have the same fields and types (as usual): a
            record's one image is converted by one set of conversions.
    """

    payload_type: dict[str, Any]
    after: ImagePlan | None
    before: ImagePlan | None
    source_fields: dict[str, str]
    envelope_fields: dict[str, str]
    has_transaction: bool
    text: str
    same_images: bool = False


def wire_type(s: ConnectSchema) -> dict[str, Any] | str | None:
    """The Spark type (JSON form) of a Connect schema as ``JsonConverter`` writes its values;
    None for a type the JVM decode does not read (array, map, and struct below the top).

    >>> wire_type(ConnectSchema(type="int64", name="io.debezium.time.MicroTimestamp"))
    'long'
    """
    return _WIRE.get(s.type)


def _struct_type(fields: list[tuple[str, Any]]) -> dict[str, Any]:
    return {
        "type": "struct",
        "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields],
    }


def _conversion(s: ConnectSchema, spark_type: str) -> Conversion | None:
    """The conversion of one column the Python decoder types ``spark_type``, or None when the
    JVM does not convert it exactly. Same precedence as the Python decoder: a logical name
    that applies to the physical type, then a decimal named by the source column type, then
    the physical type."""
    if logical_applies(s):
        if s.name == _DECIMAL:
            if s.type != "bytes" or not spark_type.startswith("decimal("):
                return None
            precision, scale = spark_type[len("decimal(") : -1].split(",")
            return ("decimal", int(precision), int(scale))
        return _BY_NAME.get(s.name or "")
    if source_decimal_applies(s):
        return None
    if _TYPE_OF_PHYSICAL.get(s.type) != spark_type:
        return None
    return "base64" if s.type == "bytes" else "same"


#: The column type of each physical type the JVM reads as it is: the Python decoder's, but
#: for structs and maps (which it keeps as JSON text).
_TYPE_OF_PHYSICAL: Final = {
    name: spark_type for name, (_, spark_type) in _PHYSICAL.items() if name not in ("struct", "map")
}


def _image(s: ConnectSchema, plan: StructPlan, reserved: frozenset[str]) -> ImagePlan | None:
    """The image plan of a struct schema the Python decoder compiled to ``plan``."""
    try:
        check_columns(plan.columns)
    except CdcDecodeError:
        return None
    if any(name.casefold() in reserved for name in plan.column_names):
        return None
    columns = _conversions(s, plan)
    return None if columns is None else ImagePlan(columns, json.dumps(list(plan.columns)))


def _conversions(s: ConnectSchema, plan: StructPlan) -> tuple[tuple[str, Conversion], ...] | None:
    """Each column's conversion, or None when the JVM does not convert one of them."""
    columns: list[tuple[str, Conversion]] = []
    for f, (name, spark_type) in zip(s.fields or (), plan.columns, strict=True):
        conversion = _conversion(f, spark_type)
        if conversion is None:
            return None
        columns.append((name, conversion))
    return tuple(columns)


def _image_wire(s: ConnectSchema) -> dict[str, Any] | None:
    fields = []
    for f in s.fields or ():
        t = wire_type(f)
        if t is None or f.field is None:
            return None
        fields.append((f.field, t))
    return _struct_type(fields)


def _accepted(annotation: Any) -> frozenset[str]:
    """The Connect physical types whose values a pydantic field of this annotation takes
    (the models are strict: an ``int`` field takes JSON integers, a ``str`` field strings)."""
    out: set[str] = set()
    for arg in get_args(annotation) if _is_union(annotation) else (annotation,):
        if arg is int:
            out |= _INTS
        elif arg is str or (
            typing.get_origin(arg) is Literal and all(type(v) is str for v in get_args(arg))
        ):
            out.add("string")
    return frozenset(out)


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def _model_types(model: type[Any]) -> dict[str, frozenset[str]]:
    """Wire name -> accepted physical types, for each field of a pydantic model."""
    hints = typing.get_type_hints(model)
    out = {}
    for name, info in model.model_fields.items():
        out[info.alias or name] = _accepted(hints[name])
    return out


_SOURCE_TYPES: Final = _model_types(SourceInfo)
_TRANSACTION_TYPES: Final = _model_types(TransactionBlock)
_ENVELOPE_SCALARS: Final = {
    "op": frozenset({"string"}),
    "ts_ms": _INTS,
    "ts_us": _INTS,
    "ts_ns": _INTS,
}


def _scalar_fields(
    s: ConnectSchema, known: dict[str, frozenset[str]], special: dict[str, frozenset[str]]
) -> dict[str, str] | None:
    """Field -> physical type of a struct of scalars; None when a field's type is not a
    scalar on the wire or not one the model takes."""
    out: dict[str, str] = {}
    for f in s.fields or ():
        if f.field is None or wire_type(f) is None:
            return None
        allowed = special.get(f.field, known.get(f.field))
        if allowed is not None and f.type not in allowed:
            return None
        out[f.field] = f.type
    return out


def compile_value(
    schema_text: str, *, reserved: frozenset[str] = frozenset()
) -> WireEnvelope | None:
    """Compile a change event's Connect envelope schema (its text as the record carries it)
    for the JVM decode; None when its records are decoded in Python.

    ``reserved``: case-folded column names a row image may not have (the build table's own
    columns); an image with one is an error only the Python decoder words.

    >>> text = json.dumps({"type": "struct", "fields": [
    ...     {"field": "after", "type": "struct", "optional": True, "fields": [
    ...         {"field": "id", "type": "int32"},
    ...         {"field": "at", "type": "int64", "name": "io.debezium.time.MicroTimestamp"}]},
    ...     {"field": "source", "type": "struct", "fields": [
    ...         {"field": "connector", "type": "string"}, {"field": "lsn", "type": "int64"}]},
    ...     {"field": "op", "type": "string"}]})
    >>> plan = compile_value(text)
    >>> plan.after.columns, plan.after.row_columns
    ((('id', 'same'), ('at', 'ts_micros')), '[["id", "int"], ["at", "timestamp"]]')
    >>> odd = text.replace('"int32"', '"int32", "name": "io.debezium.data.Odd"')
    >>> compile_value(odd).after.columns  # an unknown logical name reads as its physical type
    (('id', 'same'), ('at', 'ts_micros'))
    """
    try:
        handle = parse_schema(schema_text)
    except (CdcDecodeError, RecursionError):
        return None
    s = handle.schema
    if s.type != "struct" or not s.fields:
        return None
    names = [f.field for f in s.fields]
    if "op" not in names or len(set(names)) != len(names):
        return None
    payload: list[tuple[str, Any]] = []
    images: dict[str, ImagePlan | None] = {"after": None, "before": None}
    wires: dict[str, Any] = {}
    source: dict[str, str] = {}
    envelope: dict[str, str] = {}
    has_transaction = False
    for f in s.fields:
        name = f.field
        assert name is not None
        if name in images:
            plan = _plan(handle, name)
            wire = _image_wire(f) if f.type == "struct" else None
            if plan is None or wire is None:
                return None
            image = _image(f, plan, reserved)
            if image is None:
                return None
            images[name] = image
            wires[name] = wire
            payload.append((name, wire))
        elif name == "source":
            if f.type != "struct":
                return None
            fields = _scalar_fields(
                f, _SOURCE_TYPES, {"snapshot": frozenset({"string", "boolean"})}
            )
            if fields is None:
                return None
            source = fields
            payload.append((name, _image_wire(f)))
        elif name == "transaction":
            if f.type != "struct" or _scalar_fields(f, _TRANSACTION_TYPES, {}) is None:
                return None
            has_transaction = True
            payload.append((name, _image_wire(f)))
        else:
            t = wire_type(f)
            allowed = _ENVELOPE_SCALARS.get(name)
            if t is None or (allowed is not None and f.type not in allowed):
                return None
            envelope[name] = f.type
            payload.append((name, t))
    return WireEnvelope(
        payload_type=_struct_type(payload),
        after=images["after"],
        before=images["before"],
        source_fields=source,
        envelope_fields=envelope,
        has_transaction=has_transaction,
        text=handle.text,
        same_images=images["after"] is not None
        and images["after"] == images["before"]
        and wires["after"] == wires["before"],
    )


def _plan(handle: SchemaHandle, field: str) -> StructPlan | None:
    try:
        return handle.plan(field)
    except (CdcDecodeError, RecursionError):
        return None


@dataclass(frozen=True, slots=True)
class WireKey:
    """A key schema compiled for the JVM decode.

    Attributes:
        key_type: the key payload's Spark type on the wire (JSON form).
        image: its columns' conversions; ``image.row_columns`` is the Python decoder's
            ``_key_columns``.
    """

    key_type: dict[str, Any]
    image: ImagePlan


def compile_key(schema_text: str) -> WireKey | None:
    """Compile a key's Connect schema (a struct) for the JVM decode; None when keys of this
    schema are decoded in Python.

    >>> key = compile_key('{"type":"struct","fields":[{"field":"id","type":"int32"}]}')
    >>> key.image.row_columns
    '["id"]'
    """
    try:
        handle = parse_schema(schema_text)
        plan = handle.plan()
    except (CdcDecodeError, RecursionError):
        return None
    s = handle.schema
    if plan is None or s.type != "struct":
        return None
    wire = _image_wire(s)
    columns = _conversions(s, plan)
    if wire is None or columns is None:
        return None
    return WireKey(wire, ImagePlan(columns, json.dumps(list(plan.column_names))))
