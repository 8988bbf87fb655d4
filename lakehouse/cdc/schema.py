"""Row-image decoding: compiled from a Kafka Connect schema, or inferred without one.

With a Connect schema (``schemas.enable=true``) each column gets a decoder and a Spark SQL
type, compiled once per distinct schema into a :class:`StructPlan` (callers cache plans, see
:mod:`lakehouse.cdc._parse`). Without a schema, :func:`infer_row` takes values as JSON gives
them and infers a type per value.

Column values and their Spark types (the ``columns`` of a decoded event), by Connect physical
type or logical name (Debezium docs, "How Debezium connectors map data types": "Basic
types", "Temporal types", "Decimal types", "Spatial data types"):

* ``boolean`` -> ``bool``, ``boolean``;
* ``int8``/``int16``/``int32``/``int64`` -> ``int``, ``tinyint``/``smallint``/``int``/
  ``bigint``;
* ``float`` (float32) / ``double`` (float64) -> ``float``, ``float``/``double``;
* ``string``, also ``io.debezium.data.Json``/``Uuid``/``Enum``/``EnumSet``/``Xml``,
  ``io.debezium.time.ZonedTime``/``Interval`` -> ``str``, ``string``;
* ``bytes``, also ``io.debezium.data.Bits`` -> ``bytes``, ``binary``;
* ``io.debezium.time.Date``, Connect ``Date`` -> ``date``, ``date``;
* ``io.debezium.time.Timestamp``/``MicroTimestamp``/``NanoTimestamp``/``ZonedTimestamp``,
  Connect ``Timestamp`` -> aware UTC ``datetime``, ``timestamp``;
* ``io.debezium.time.Time``/``MicroTime``/``NanoTime``, Connect ``Time`` -> ``int``
  microseconds past midnight, ``bigint``;
* ``io.debezium.time.Year`` -> ``int``, ``int``;
* Connect ``Decimal`` (base64 bytes, or a JSON number with ``decimal.format=NUMERIC``) ->
  ``Decimal``, ``decimal(p,s)`` (see below);
* ``io.debezium.data.VariableScaleDecimal`` -> ``Decimal``, ``string``;
* ``array`` -> ``list``, ``array<T>``;
* ``struct`` (geometry, ...) and ``map`` -> their JSON text (``str``), ``string``.

Decimal types: precision comes from ``connect.decimal.precision`` (or the propagated source
column length), else 38 (Spark's maximum). When Spark cannot hold the decimal (precision over
38, negative scale, or a scale that varies per value as with ``VariableScaleDecimal``) the
column type is ``string`` and the value is still an exact ``Decimal``; :func:`row_to_json`
writes it as a number token, which Spark's ``from_json`` stores as its exact text in a
``string`` column. A value too wide for its ``decimal(p,s)`` raises ``invalid_value``
(Spark's ``from_json`` would null the whole row). A string or double column is decoded as a
``Decimal`` only when the schema names it a decimal: logical name
``org.apache.kafka.connect.data.Decimal``, or the source column type
(``column.propagate.source.type``) is DECIMAL/NUMERIC/MONEY.

Unknown logical names fall back to the physical type. Value types are checked against the
schema (a string in an ``int32`` column raises ``invalid_value``); ``optional`` is not
enforced (a null is accepted in any column).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pydantic import ValidationError

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
)
from lakehouse.cdc.models import ConnectSchema
from lakehouse.cdc.serialize import dumps_json
from lakehouse.errors import CdcDecodeError

__all__ = [
    "MAX_COLUMN_NAME_LENGTH",
    "MAX_SCHEMA_DEPTH",
    "MAX_TYPE_DEPTH",
    "SchemaHandle",
    "StructPlan",
    "check_columns",
    "compile_struct",
    "infer_row",
    "infer_value",
    "logical_applies",
    "source_decimal_applies",
]

Decoder = Callable[[Any], Any]
Columns = tuple[tuple[str, str], ...]

MAX_SCHEMA_DEPTH = 64
"""Deepest Connect schema nesting compiled; deeper raises ``too_deep``."""

MAX_TYPE_DEPTH = 32
"""Deepest nesting of a column's type (``array<array<...>>``) a table may get. Arrow's C data
interface stops at 64 levels (Polars, delta-rs and PyArrow then cannot open the table), and
a type deep enough to reach that is no data model but a hostile or broken record."""

MAX_COLUMN_NAME_LENGTH = 255
"""Longest column name a table may get (metastores and SQL tools cap names near this)."""

#: Characters Delta refuses in column names of a table without column mapping.
_BAD_NAME_CHARS = frozenset(" ,;{}()\n\t=")

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_INT_TEXT = re.compile(r"\s*[+-]?[0-9]{1,9}\s*")
_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_DECIMAL_SOURCE_TYPES = frozenset(
    {"DECIMAL", "NUMERIC", "DEC", "FIXED", "NUMBER", "MONEY", "SMALLMONEY"}
)


def _bad(message: str) -> CdcDecodeError:
    return CdcDecodeError(message, kind="invalid_value")


def _bad_schema(message: str) -> CdcDecodeError:
    return CdcDecodeError(f"invalid Kafka Connect schema: {message}", kind="invalid_envelope")


# --- physical types -------------------------------------------------------------------------


def _int_decoder(bits: int) -> Decoder:
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def decode(value: Any) -> int:
        if type(value) is int and lo <= value <= hi:
            return value
        raise _bad(
            f"expected an int{bits} (JSON integer in {lo}..{hi}), got "
            f"{type(value).__name__} {value!r:.80}"
        )

    return decode


def _to_float(value: Any) -> float:
    kind = type(value)
    if kind is float:
        return value
    if kind is Decimal:
        return float(value)  # like Java's Double.parseDouble: out of range -> +-inf
    if kind is int:
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if kind is str and value in _NONFINITE:
        # Jackson (inside JsonConverter) writes non-finite doubles as these strings.
        return _NONFINITE[value]
    raise _bad(f"expected a JSON number, got {kind.__name__} {value!r:.80}")


def _to_bool(value: Any) -> bool:
    if type(value) is bool:
        return value
    raise _bad(f"expected a JSON boolean, got {type(value).__name__} {value!r:.80}")


def _to_str(value: Any) -> str:
    if type(value) is str:
        return value
    raise _bad(f"expected a JSON string, got {type(value).__name__} {value!r:.80}")


def _struct_text(value: Any) -> str:
    if type(value) is dict:
        return dumps_json(value)
    raise _bad(f"expected a JSON object, got {type(value).__name__} {value!r:.80}")


def _map_text(value: Any) -> str:
    # JsonConverter writes maps with string keys as objects and others as [[k, v], ...].
    if type(value) is dict or type(value) is list:
        return dumps_json(value)
    raise _bad(f"expected a JSON object or array for a map, got {type(value).__name__}")


def _array_decoder(item: Decoder) -> Decoder:
    def decode(value: Any) -> list[Any]:
        if type(value) is not list:
            raise _bad(f"expected a JSON array, got {type(value).__name__} {value!r:.80}")
        return [None if x is None else item(x) for x in value]

    return decode


_PHYSICAL: dict[str, tuple[Decoder, str]] = {
    "boolean": (_to_bool, "boolean"),
    "int8": (_int_decoder(8), "tinyint"),
    "int16": (_int_decoder(16), "smallint"),
    "int32": (_int_decoder(32), "int"),
    "int64": (_int_decoder(64), "bigint"),
    "float": (_to_float, "float"),
    "float32": (_to_float, "float"),
    "double": (_to_float, "double"),
    "float64": (_to_float, "double"),
    "string": (_to_str, "string"),
    "bytes": (decode_base64, "binary"),
    "struct": (_struct_text, "string"),
    "map": (_map_text, "string"),
}
_INT_TYPES = frozenset({"int8", "int16", "int32", "int64"})
_FLOAT_TYPES = frozenset({"float", "float32", "double", "float64"})


# --- logical types --------------------------------------------------------------------------


def _int_param(params: dict[str, Any], key: str) -> int | None:
    raw = params.get(key)
    if raw is None:
        return None
    if type(raw) is int:
        value = raw
    elif type(raw) is str and _INT_TEXT.fullmatch(raw):
        value = int(raw)
    else:
        raise _bad_schema(f"parameter {key!r} must be an integer, got {raw!r:.40}")
    if not -1000 <= value <= 100_000:
        raise _bad_schema(f"parameter {key!r} = {value} is out of range")
    return value


def _decimal_column(
    decoder: Decoder, precision: int | None, scale: int | None
) -> tuple[Decoder, str]:
    """The Spark type of a decimal column, and a decoder that checks values fit it.

    A value whose integer part is too wide for ``decimal(p,s)`` is an ``invalid_value``:
    Spark's ``from_json`` would otherwise turn the whole row into nulls. So is a value with
    non-zero fractional digits beyond the scale: Spark would round it silently (trailing
    zeros are fine).

    Example:
        >>> decode, typ = _decimal_column(lambda v: Decimal(v), 6, 2)
        >>> decode("12.5000"), typ
        (Decimal('12.5000'), 'decimal(6,2)')
        >>> decode("12.505")
        Traceback (most recent call last):
        ...
        lakehouse.errors.CdcDecodeError: 12.505 has more fractional digits than decimal(6,2) ...
    """
    if scale is None or scale < 0 or scale > 38:
        return decoder, "string"
    p = 38 if precision is None else max(precision, scale, 1)
    if p > 38:
        return decoder, "string"
    spark_type = f"decimal({p},{scale})"
    integer_digits = p - scale

    def decode(value: Any) -> Decimal:
        result = decoder(value)
        if result and result.is_finite():
            if result.adjusted() >= integer_digits:
                raise _bad(f"{result} does not fit {spark_type}")
            exponent = result.normalize().as_tuple().exponent
            if isinstance(exponent, int) and exponent < -scale:
                raise _bad(
                    f"{result} has more fractional digits than {spark_type} holds; it would "
                    "be rounded"
                )
        return result

    return decode, spark_type


def _decimal_decoder(physical: str, scale: int | None) -> Decoder | None:
    if physical == "bytes":
        if scale is None:
            raise _bad_schema("a bytes Decimal needs the 'scale' parameter")
        s = scale

        def decode(value: Any) -> Decimal:
            if type(value) is str:
                return decode_connect_decimal(value, s)
            return decode_decimal_number(value, s)  # decimal.format=NUMERIC

        return decode
    if physical == "string":
        return lambda value: decode_decimal_text(value, scale)
    if physical in _FLOAT_TYPES or physical in _INT_TYPES:
        return lambda value: decode_decimal_number(value, scale)
    return None


def _connect_decimal(s: ConnectSchema, depth: int) -> tuple[Decoder, str] | None:
    params = s.parameters or {}
    scale = _int_param(params, "scale")
    if scale is not None and not -1000 <= scale <= 1000:
        raise _bad_schema(f"Decimal scale {scale} is out of range")
    precision = _int_param(params, "connect.decimal.precision")
    if precision is None:
        precision = _int_param(params, "__debezium.source.column.length")
    decoder = _decimal_decoder(s.type, scale)
    if decoder is None:
        return None
    return _decimal_column(decoder, precision, scale)


def _source_decimal(s: ConnectSchema) -> tuple[Decoder, str] | None:
    # decimal.handling.mode=string|double with column.propagate.source.type: the physical type
    # is string/double, and the source column type says it is a decimal.
    params = s.parameters
    if not params:
        return None
    source_type = params.get("__debezium.source.column.type")
    if type(source_type) is not str or not source_type.strip():
        return None
    if source_type.split()[0].upper() not in _DECIMAL_SOURCE_TYPES:
        return None
    scale = _int_param(params, "__debezium.source.column.scale")
    if scale is not None and not 0 <= scale <= 1000:
        scale = None
    precision = _int_param(params, "__debezium.source.column.length")
    decoder = _decimal_decoder(s.type, scale)
    if decoder is None:
        return None
    return _decimal_column(decoder, precision, scale)


def _typed(
    physical: frozenset[str], decoder: Decoder, spark_type: str
) -> Callable[[ConnectSchema, int], tuple[Decoder, str] | None]:
    def compile_logical(s: ConnectSchema, depth: int) -> tuple[Decoder, str] | None:
        return (decoder, spark_type) if s.type in physical else None

    return compile_logical


_INTS = frozenset({"int32", "int64"})
_STRING = frozenset({"string"})
_LOGICAL: dict[str, Callable[[ConnectSchema, int], tuple[Decoder, str] | None]] = {
    # "Temporal types"
    "io.debezium.time.Date": _typed(_INTS, decode_date, "date"),
    "org.apache.kafka.connect.data.Date": _typed(_INTS, decode_date, "date"),
    "io.debezium.time.Timestamp": _typed(_INTS, decode_timestamp, "timestamp"),
    "org.apache.kafka.connect.data.Timestamp": _typed(_INTS, decode_timestamp, "timestamp"),
    "io.debezium.time.MicroTimestamp": _typed(_INTS, decode_micro_timestamp, "timestamp"),
    "io.debezium.time.NanoTimestamp": _typed(_INTS, decode_nano_timestamp, "timestamp"),
    "io.debezium.time.ZonedTimestamp": _typed(_STRING, decode_zoned_timestamp, "timestamp"),
    "io.debezium.time.Time": _typed(_INTS, decode_milli_time, "bigint"),
    "org.apache.kafka.connect.data.Time": _typed(_INTS, decode_milli_time, "bigint"),
    "io.debezium.time.MicroTime": _typed(_INTS, decode_micro_time, "bigint"),
    "io.debezium.time.NanoTime": _typed(_INTS, decode_nano_time, "bigint"),
    # "Decimal types"
    "org.apache.kafka.connect.data.Decimal": _connect_decimal,
    "io.debezium.data.VariableScaleDecimal": _typed(
        frozenset({"struct"}), decode_variable_scale_decimal, "string"
    ),
}


def logical_applies(s: ConnectSchema) -> bool:
    """Whether ``s`` is read by its logical name (a known name on a physical type it
    applies to), as :func:`compile_struct` reads it."""
    compile_logical = _LOGICAL.get(s.name) if s.name is not None else None
    try:
        return compile_logical is not None and compile_logical(s, 0) is not None
    except CdcDecodeError:
        return False


def source_decimal_applies(s: ConnectSchema) -> bool:
    """Whether ``s`` is read as a decimal because its source column type says so (a
    ``string`` or floating-point column under ``column.propagate.source.type``)."""
    if s.type != "string" and s.type not in _FLOAT_TYPES:
        return False
    try:
        return _source_decimal(s) is not None
    except CdcDecodeError:
        return True


def _compile(s: ConnectSchema, depth: int) -> tuple[Decoder, str]:
    """Decoder (applied to non-null values) and Spark type of one Connect schema."""
    if depth > MAX_SCHEMA_DEPTH:
        raise CdcDecodeError(
            f"Kafka Connect schema nests deeper than {MAX_SCHEMA_DEPTH} levels", kind="too_deep"
        )
    if s.name is not None:
        logical = _LOGICAL.get(s.name)
        if logical is not None:
            compiled = logical(s, depth)
            if compiled is not None:
                return compiled
    if s.type in ("string",) or s.type in _FLOAT_TYPES:
        compiled = _source_decimal(s)
        if compiled is not None:
            return compiled
    if s.type == "array":
        if s.items is None:
            raise _bad_schema("an array schema needs 'items'")
        item, item_type = _compile(s.items, depth + 1)
        return _array_decoder(item), f"array<{item_type}>"
    physical = _PHYSICAL.get(s.type)
    if physical is None:
        raise _bad_schema(f"unknown type {s.type!r:.40}")
    return physical


@dataclass(frozen=True, slots=True)
class StructPlan:
    """Compiled decoders for the fields of one Connect ``struct`` schema (a row image).

    Attributes:
        name: the struct's schema name, e.g. ``dbserver1.inventory.customers.Value``.
        columns: ``(column, Spark type)`` for every field, in schema order.
        decoders: ``(column, decoder)`` in the same order; a decoder takes a non-null value.
        field_names: the set of column names, to spot payload fields the schema lacks.
    """

    name: str | None
    columns: Columns
    decoders: tuple[tuple[str, Decoder], ...]
    field_names: frozenset[str]

    @property
    def column_names(self) -> tuple[str, ...]:
        """Column names in schema order."""
        return tuple(name for name, _ in self.columns)

    def decode_row(self, image: dict[str, Any]) -> tuple[dict[str, Any], Columns]:
        """Decode one row image.

        Fields missing from the image are ``None``. Fields the schema lacks are kept, typed by
        :func:`infer_value`, after the schema's columns.

        Raises:
            CdcDecodeError: kind ``invalid_value`` naming the column whose value is wrong.

        Example:
            >>> plan = compile_struct({"type": "struct", "fields": [
            ...     {"field": "id", "type": "int32"},
            ...     {"field": "day", "type": "int32", "name": "io.debezium.time.Date"}]})
            >>> plan.decode_row({"id": 1, "day": 19439})
            ({'id': 1, 'day': datetime.date(2023, 3, 23)}, (('id', 'int'), ('day', 'date')))
        """
        row: dict[str, Any] = {}
        name = ""
        try:
            for name, decode in self.decoders:
                value = image.get(name)
                row[name] = None if value is None else decode(value)
        except CdcDecodeError as e:
            raise CdcDecodeError(f"column {name!r}: {e}", kind=e.kind) from None
        columns = self.columns
        if not image.keys() <= self.field_names:
            extra: list[tuple[str, str]] = []
            for key, value in image.items():
                if key not in self.field_names:
                    row[key], spark_type = infer_value(value)
                    extra.append((key, spark_type))
            columns = columns + tuple(extra)
        return row, columns


def _validate(schema: Any) -> ConnectSchema:
    if isinstance(schema, ConnectSchema):
        return schema
    if type(schema) is not dict:
        raise _bad_schema(f"expected a JSON object, got {type(schema).__name__}")
    try:
        return ConnectSchema.model_validate(schema)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        if err["type"] == "recursion_depth_exceeded":
            raise CdcDecodeError(
                "Kafka Connect schema nests too deeply to validate", kind="too_deep"
            ) from None
        loc = ".".join(str(part) for part in err["loc"])
        if len(loc) > 120:
            loc = "..." + loc[-117:]
        raise _bad_schema(f"{loc}: {err['msg']}" if loc else err["msg"]) from None


def compile_struct(schema: Any, depth: int = 0) -> StructPlan:
    """Compile a Connect ``struct`` schema (a dict as parsed from JSON, or a
    :class:`~lakehouse.cdc.models.ConnectSchema`) into a :class:`StructPlan`.

    Raises:
        CdcDecodeError: ``invalid_envelope`` when the schema is malformed or not a struct;
            ``too_deep`` when it nests deeper than :data:`MAX_SCHEMA_DEPTH`.

    Example:
        >>> compile_struct({"type": "struct", "fields": [
        ...     {"field": "price", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
        ...      "parameters": {"scale": "2", "connect.decimal.precision": "10"}},
        ...     {"field": "tags", "type": "array", "items": {"type": "string"}}]}).columns
        (('price', 'decimal(10,2)'), ('tags', 'array<string>'))
    """
    s = _validate(schema)
    if s.type != "struct" or s.fields is None:
        raise _bad_schema(f"expected a struct with 'fields', got type {s.type!r:.40}")
    decoders: list[tuple[str, Decoder]] = []
    columns: list[tuple[str, str]] = []
    for f in s.fields:
        if f.field is None:
            raise _bad_schema("a struct field has no 'field' name")
        if not f.field.isascii():
            try:
                f.field.encode("utf-8")
            except UnicodeEncodeError:
                raise CdcDecodeError(
                    f"field name {f.field!r:.60} holds a lone UTF-16 surrogate", kind="encoding"
                ) from None
        decoder, spark_type = _compile(f, depth + 1)
        decoders.append((f.field, decoder))
        columns.append((f.field, spark_type))
    names = frozenset(name for name, _ in columns)
    if len(names) != len(columns):
        raise _bad_schema(f"struct {s.name!r} has duplicate field names")
    return StructPlan(s.name, tuple(columns), tuple(decoders), names)


class SchemaHandle:
    """A parsed Connect schema of one message, with struct plans compiled on first use.

    One handle is cached per distinct schema text (see :mod:`lakehouse.cdc._parse`), so each
    plan is compiled once per schema per process. Not thread-safe beyond the GIL: two threads
    may both compile a plan, with the same result.
    """

    __slots__ = ("_plans", "_text", "raw", "schema")

    def __init__(self, schema: Any) -> None:
        """Validate ``schema``.

        Raises:
            CdcDecodeError: ``invalid_envelope`` when it is not a valid Connect schema.
        """
        self.schema = _validate(schema)
        #: the schema as it came (a dict parsed from the message), kept to write it down
        self.raw = schema
        self._text: str | None = None
        self._plans: dict[str | None, StructPlan | None] = {}

    @property
    def text(self) -> str:
        """The schema as compact JSON, numbers exact (:func:`dumps_json`): the same schema
        from the same converter has the same text."""
        if self._text is None:
            raw = self.raw
            if not isinstance(raw, dict):
                raw = self.schema.model_dump(by_alias=True, exclude_none=True)
            self._text = dumps_json(raw)
        return self._text

    def plan(self, field: str | None = None) -> StructPlan | None:
        """Plan for the root struct (``field=None``, as for a key) or for the struct-typed root
        field ``field`` (``"after"``, ``"before"`` of an envelope); ``None`` when there is no
        such struct."""
        try:
            return self._plans[field]
        except KeyError:
            pass
        plan: StructPlan | None = None
        if field is None:
            if self.schema.type == "struct":
                plan = compile_struct(self.schema)
        elif self.schema.type == "struct" and self.schema.fields:
            for f in self.schema.fields:
                if f.field == field and f.type == "struct":
                    plan = compile_struct(f, 1)
                    break
        self._plans[field] = plan
        return plan


def _type_depth(spark_type: str) -> int:
    depth = deepest = 0
    for ch in spark_type:
        if ch == "<":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ">":
            depth -= 1
    return deepest


def check_columns(columns: Columns) -> None:
    """Refuse a row image that must not change a table's schema: a type nested deeper than
    :data:`MAX_TYPE_DEPTH`, a column name Delta cannot hold (empty, longer than
    :data:`MAX_COLUMN_NAME_LENGTH`, or with one of `` ,;{}()\\n\\t=``), or two names that differ
    only in case (Spark and Delta resolve names case-insensitively: one would shadow the
    other, and every batch holding both would fail).

    Raises:
        CdcDecodeError: ``too_deep`` or ``bad_column_name``, naming the column.

    Example:
        >>> check_columns((("id", "bigint"), ("ID", "string")))
        Traceback (most recent call last):
        ...
        lakehouse.errors.CdcDecodeError: columns 'id' and 'ID' differ only in case; ...
        >>> check_columns((("tags", "array<" * 40 + "bigint" + ">" * 40),))
        Traceback (most recent call last):
        ...
        lakehouse.errors.CdcDecodeError: column 'tags' nests 40 levels deep (limit 32)
    """
    seen: dict[str, str] = {}
    for name, spark_type in columns:
        shown = repr(name[:60] + ("..." if len(name) > 60 else ""))
        if not name:
            raise CdcDecodeError("a column has the empty name", kind="bad_column_name")
        if len(name) > MAX_COLUMN_NAME_LENGTH:
            raise CdcDecodeError(
                f"column {shown} has a name of {len(name)} characters "
                f"(limit {MAX_COLUMN_NAME_LENGTH})",
                kind="bad_column_name",
            )
        bad = sorted(set(name) & _BAD_NAME_CHARS)
        if bad:
            raise CdcDecodeError(
                f"column {shown} holds {''.join(bad)!r}, which Delta refuses in column names; "
                "rename it at the source or with a Debezium column.rename/ReplaceField SMT",
                kind="bad_column_name",
            )
        folded = name.casefold()
        if folded in seen:
            raise CdcDecodeError(
                f"columns {seen[folded]!r} and {name!r} differ only in case; Spark and Delta "
                "read names case-insensitively, so one would hide the other",
                kind="bad_column_name",
            )
        seen[folded] = name
        depth = _type_depth(spark_type)
        if depth > MAX_TYPE_DEPTH:
            raise CdcDecodeError(
                f"column {shown} nests {depth} levels deep (limit {MAX_TYPE_DEPTH})",
                kind="too_deep",
            )


# --- without a schema -----------------------------------------------------------------------


def infer_value(value: Any) -> tuple[Any, str]:
    """Value and Spark type of a JSON value with no schema ("values as JSON gives them").

    ``int`` -> ``bigint`` (beyond 64 bits: ``Decimal``, ``decimal(38,0)`` or ``string``);
    numbers with a fraction or exponent -> ``float``, ``double``; ``str`` -> ``string``;
    ``bool`` -> ``boolean``; an object -> its JSON text, ``string``; an array ->
    ``array<T>`` when its non-null elements share one type (integers and doubles mix as
    ``double``), else its JSON text as ``string``; ``None`` -> ``void``.

    Example:
        >>> infer_value([1, None, 2.5])
        ([1.0, None, 2.5], 'array<double>')
        >>> infer_value({"a": Decimal("1.10")})
        ('{"a":1.10}', 'string')
    """
    if value is None:
        return None, "void"
    kind = type(value)
    if kind is str:
        return value, "string"
    if kind is bool:
        return value, "boolean"
    if kind is int:
        if _I64_MIN <= value <= _I64_MAX:
            return value, "bigint"
        return Decimal(value), ("decimal(38,0)" if abs(value) < 10**38 else "string")
    if kind is Decimal:
        return float(value), "double"
    if kind is float:
        return value, "double"
    if kind is dict:
        return dumps_json(value), "string"
    if kind is list:
        return _infer_list(value)
    raise _bad(f"unexpected {kind.__name__} value in a row image")


def _infer_list(value: list[Any]) -> tuple[Any, str]:
    items: list[Any] = []
    types: set[str] = set()
    for x in value:
        item, spark_type = infer_value(x)
        items.append(item)
        if spark_type != "void":
            types.add(spark_type)
    if not types:
        return items, "array<void>"
    if len(types) == 1:
        return items, f"array<{types.pop()}>"
    if types <= {"bigint", "double"}:
        return [None if x is None else float(x) for x in items], "array<double>"
    return dumps_json(value), "string"


def infer_row(image: dict[str, Any]) -> tuple[dict[str, Any], Columns]:
    """Decode a row image without a schema: :func:`infer_value` per field, in JSON order.

    Example:
        >>> infer_row({"id": 1001, "email": "a@b.c", "price": None})
        ({'id': 1001, 'email': 'a@b.c', 'price': None},
         (('id', 'bigint'), ('email', 'string'), ('price', 'void')))
    """
    row: dict[str, Any] = {}
    columns: list[tuple[str, str]] = []
    for key, value in image.items():
        row[key], spark_type = infer_value(value)
        columns.append((key, spark_type))
    return row, tuple(columns)
