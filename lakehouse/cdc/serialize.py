"""JSON output for decoded rows that Spark's ``from_json`` reads back into the right types.

Decoded values are Python objects (:class:`~decimal.Decimal`, :class:`~datetime.date`,
aware :class:`~datetime.datetime`, :class:`bytes`). This module writes them as JSON that
Spark's ``from_json`` parses into the matching Spark SQL type:

=====================  ==============================================  ================
Python value           JSON written                                    Spark type
=====================  ==============================================  ================
``Decimal``            a number token with the decimal's exact text    ``decimal(p,s)``
``date``               ``"YYYY-MM-DD"``                                ``date``
``datetime``           ``"YYYY-MM-DDTHH:MM:SS.ffffffZ"`` (in UTC)      ``timestamp``
``bytes``              base64 string                                   ``binary``
``time``               ``"HH:MM:SS.ffffff"``                           ``string``
``float`` NaN/±inf     ``"NaN"``, ``"Infinity"``, ``"-Infinity"``      ``float/double``
``Decimal`` NaN/±inf   ``null``                                        ``decimal``
=====================  ==============================================  ================

Why a custom writer: the standard library's :mod:`json` cannot write a number token from
text, so a :class:`~decimal.Decimal` would have to pass through ``float`` (losing digits) or
become a string. :func:`row_to_json` writes the decimal's own text as the number token, so
``Decimal("123456789876543212345678987654321.110")`` reaches Spark digit for digit.

Non-finite floats are written as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``
(JSON has no literal for them; Jackson writes them so too): Spark's ``from_json`` reads these
strings into ``float``/``double`` columns (``allowNonNumericNumbers``, on by default), so a NaN
in the source stays a NaN in the table instead of turning into NULL. Non-finite decimals
become ``null``: Spark's decimals have no NaN or infinity.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from datetime import UTC, date, datetime, time
from decimal import Decimal
from json.encoder import encode_basestring_ascii as _quote
from typing import Any

__all__ = ["dumps_json", "format_timestamp", "row_to_json", "to_json_compatible"]


def format_timestamp(value: datetime) -> str:
    """Format a datetime as ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` in UTC.

    Aware datetimes are converted to UTC; naive ones are taken to be UTC already (the decoder
    never returns naive datetimes).

    Example:
        >>> from datetime import timedelta, timezone
        >>> format_timestamp(datetime(2011, 11, 11, 5, 11, 11, 5, timezone(timedelta(hours=2))))
        '2011-11-11T03:11:11.000005Z'
        >>> format_timestamp(datetime(5, 1, 2))
        '0005-01-02T00:00:00.000000Z'
    """
    if value.tzinfo is not None:
        value = value.astimezone(UTC)
    return (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:"
        f"{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}Z"
    )


def to_json_compatible(value: Any) -> Any:
    """Convert a decoded value into values :func:`dumps_json` writes as Spark-readable JSON.

    Dates, datetimes, times and bytes become strings; lists, tuples and dicts are converted
    element by element; non-finite floats and decimals become ``None``. Finite
    :class:`~decimal.Decimal` values are **kept** as ``Decimal``: they must be written as
    number tokens with their exact text, which :func:`dumps_json` and :func:`row_to_json` do
    (the standard :func:`json.dumps` cannot).

    Args:
        value: a value from a decoded row, or any nesting of them.

    Returns:
        ``None``, ``bool``, ``int``, finite ``float``, finite ``Decimal``, ``str``, or
        ``list``/``dict`` of these.

    Raises:
        TypeError: for a value of another type, or a dict key that is not a string.

    Example:
        >>> from datetime import date
        >>> to_json_compatible(
        ...     {"d": date(2023, 3, 23), "b": b"\\x01", "n": [Decimal("1.10"), float("nan")]}
        ... )
        {'d': '2023-03-23', 'b': 'AQ==', 'n': [Decimal('1.10'), None]}
    """
    if value is None or value is True or value is False:
        return value
    kind = type(value)
    if kind is str or kind is int:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal):
        if not value.is_finite():
            return None
        return value if type(value) is Decimal else Decimal(value)
    if isinstance(value, datetime):
        return format_timestamp(value)
    if isinstance(value, date):
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if isinstance(value, time):
        return value.replace(tzinfo=None).isoformat(timespec="microseconds")
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"JSON object keys must be strings, got {type(key).__name__}")
            out[key] = to_json_compatible(item)
        return out
    if isinstance(value, list | tuple):
        return [to_json_compatible(item) for item in value]
    # Subclasses of the JSON scalars (IntEnum, StrEnum, ...) become the plain type.
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return to_json_compatible(float(value))
    if isinstance(value, str):
        return str(value)
    raise TypeError(f"cannot convert a {kind.__name__} to JSON")


_NON_FINITE = {"nan": '"NaN"', "inf": '"Infinity"', "-inf": '"-Infinity"'}


def _write(value: Any, out: list[str]) -> None:
    # Fast paths for what decoded rows hold; anything else goes through to_json_compatible.
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    else:
        kind = type(value)
        if kind is str:
            out.append(_quote(value))
        elif kind is int:
            out.append(int.__repr__(value))
        elif kind is float:
            out.append(float.__repr__(value) if math.isfinite(value) else _NON_FINITE[str(value)])
        elif kind is Decimal:
            # str() of a finite Decimal is always a valid JSON number ("1.10", "1E+3", "-0").
            out.append(str(value) if value.is_finite() else "null")
        elif kind is dict:
            _write_object(value, out)
        elif kind is list or kind is tuple:
            if not value:
                out.append("[]")
                return
            out.append("[")
            first = True
            for item in value:
                if not first:
                    out.append(",")
                first = False
                _write(item, out)
            out.append("]")
        else:
            # to_json_compatible returns only the exact builtin types handled above.
            _write(to_json_compatible(value), out)


def _write_object(value: Mapping[str, Any], out: list[str]) -> None:
    if not value:
        out.append("{}")
        return
    sep = "{"
    for key, item in value.items():
        if type(key) is not str:
            if not isinstance(key, str):
                raise TypeError(f"JSON object keys must be strings, got {type(key).__name__}")
            key = str(key)
        out.append(sep)
        out.append(_quote(key))
        out.append(":")
        _write(item, out)
        sep = ","
    out.append("}")


def dumps_json(value: Any) -> str:
    """Write any decoded value as compact JSON (ASCII only), decimals exact.

    Example:
        >>> dumps_json({"a": [Decimal("-0.00"), 1.5, None], "é": "ü"})
        '{"a":[-0.00,1.5,null],"\\\\u00e9":"\\\\u00fc"}'
    """
    out: list[str] = []
    _write(value, out)
    return "".join(out)


def row_to_json(row: Mapping[str, Any]) -> str:
    """Write a decoded row as one JSON object for Spark's ``from_json``.

    Decimals are written as number tokens with their exact text (no float rounding), dates as
    ``"YYYY-MM-DD"``, datetimes as ``"YYYY-MM-DDTHH:MM:SS.ffffffZ"`` in UTC, bytes as base64.
    NaN and infinite floats are written as ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (which
    Spark reads into double columns); non-finite decimals as ``null``.
    The output is ASCII (other characters are ``\\uXXXX`` escapes), so it always encodes,
    even when a string holds a lone surrogate from a ``\\ud800`` escape in the input.

    Args:
        row: column name -> decoded value, as in ``ChangeEvent.row``.

    Returns:
        The JSON text.

    Raises:
        TypeError: for a value that has no JSON form, or a non-string key.

    Example:
        >>> from datetime import date, datetime, timezone
        >>> row_to_json({
        ...     "price": Decimal("123456789876543212345678987654321.110"),
        ...     "day": date(2023, 3, 23),
        ...     "at": datetime(2023, 3, 23, 22, 0, 10, 123456, tzinfo=timezone.utc),
        ...     "raw": b"bytes",
        ...     "ratio": float("inf"),
        ... })
        '{"price":123456789876543212345678987654321.110,"day":"2023-03-23","at":"2023-03-23T22:00:10.123456Z","raw":"Ynl0ZXM=","ratio":"Infinity"}'
    """
    out: list[str] = []
    _write_object(row, out)
    return "".join(out)
