"""Decoders for the logical (semantic) types Debezium and Kafka Connect put in row images.

Each function takes the JSON value as Kafka Connect's ``JsonConverter`` writes it and returns
the Python value, or raises :class:`~lakehouse.errors.CdcDecodeError` with kind
``"invalid_value"``. They are pure and fast; :mod:`lakehouse.cdc.schema` picks one per column
from the Connect schema.

Section names refer to the Debezium connector documentation, "How Debezium <database>
connectors map data types": "Temporal types" (``time.precision.mode``), "Decimal types"
(``decimal.handling.mode``), "Binary types"/"Basic types" (``binary.handling.mode``).

Decisions:

* **Timestamps are timezone-aware UTC** :class:`~datetime.datetime` values, whatever the
  logical type. ``io.debezium.time.Timestamp``/``MicroTimestamp``/``NanoTimestamp`` carry a
  database-local wall-clock time with no zone, encoded as if it were UTC; we keep that reading
  (the instant whose UTC wall clock is the stored value), which is also what Spark shows for a
  ``timestamp`` column in a UTC session. Nanoseconds are truncated to microseconds (floor).
* **Times of day** (``io.debezium.time.Time``/``MicroTime``/``NanoTime``,
  ``org.apache.kafka.connect.data.Time``) become an ``int`` of **microseconds since
  midnight** (Spark type ``bigint``); Spark has no portable time-of-day type. ``ZonedTime``
  stays the ISO string.
* **Decimals are exact** :class:`~decimal.Decimal` values; nothing passes through ``float``.
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Context, Decimal, DecimalException, InvalidOperation
from typing import Any

from lakehouse.errors import CdcDecodeError

__all__ = [
    "MAX_DECIMAL_BYTES",
    "decode_base64",
    "decode_connect_decimal",
    "decode_date",
    "decode_decimal_number",
    "decode_decimal_text",
    "decode_micro_time",
    "decode_micro_timestamp",
    "decode_milli_time",
    "decode_nano_time",
    "decode_nano_timestamp",
    "decode_timestamp",
    "decode_variable_scale_decimal",
    "decode_zoned_timestamp",
    "encode_connect_decimal",
    "rescale",
]

MAX_DECIMAL_BYTES = 1024
"""Longest unscaled decimal accepted, in bytes (about 2,466 digits). PostgreSQL's NUMERIC
allows more, but a longer value is far more likely an attack than data."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DATE = date(1970, 1, 1)
# Exact arithmetic for rescaling: far more digits than any accepted value can hold.
_EXACT = Context(prec=10_000, Emax=10**9, Emin=-(10**9))


def _bad(message: str) -> CdcDecodeError:
    return CdcDecodeError(message, kind="invalid_value")


def _require_int(value: Any, what: str) -> int:
    if type(value) is not int:
        raise _bad(f"{what} must be a JSON integer, got {type(value).__name__} {value!r:.80}")
    return value


def decode_date(days: Any) -> date:
    """``io.debezium.time.Date`` / ``org.apache.kafka.connect.data.Date``: days since the epoch.

    ("Temporal types": DATE -> INT32 ``io.debezium.time.Date``.)

    Example:
        >>> decode_date(16852), decode_date(-1)
        (datetime.date(2016, 2, 21), datetime.date(1969, 12, 31))
    """
    days = _require_int(days, "a Date")
    try:
        return _EPOCH_DATE + timedelta(days=days)
    except OverflowError:
        raise _bad(f"Date {days} days since 1970-01-01 is outside years 1..9999") from None


def _from_epoch_micros(micros: int, what: str) -> datetime:
    try:
        return _EPOCH + timedelta(microseconds=micros)
    except OverflowError:
        raise _bad(f"{what} is outside years 1..9999") from None


def decode_timestamp(millis: Any) -> datetime:
    """``io.debezium.time.Timestamp`` / ``org.apache.kafka.connect.data.Timestamp``: epoch ms.

    ("Temporal types": DATETIME(0-3)/TIMESTAMP(0-3) without zone -> INT64.) Returns an aware
    UTC datetime.

    Example:
        >>> decode_timestamp(1679581805123)
        datetime.datetime(2023, 3, 23, 14, 30, 5, 123000, tzinfo=datetime.timezone.utc)
    """
    millis = _require_int(millis, "a Timestamp")
    return _from_epoch_micros(millis * 1000, f"Timestamp {millis} ms")


def decode_micro_timestamp(micros: Any) -> datetime:
    """``io.debezium.time.MicroTimestamp``: microseconds since the epoch ("Temporal types").

    Example:
        >>> decode_micro_timestamp(-1)
        datetime.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=datetime.timezone.utc)
    """
    micros = _require_int(micros, "a MicroTimestamp")
    return _from_epoch_micros(micros, f"MicroTimestamp {micros} us")


def decode_nano_timestamp(nanos: Any) -> datetime:
    """``io.debezium.time.NanoTimestamp``: nanoseconds since the epoch, floored to
    microseconds ("Temporal types", ``time.precision.mode=adaptive``, TIMESTAMP(7-9)).

    Example:
        >>> decode_nano_timestamp(1_500)
        datetime.datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=datetime.timezone.utc)
    """
    nanos = _require_int(nanos, "a NanoTimestamp")
    return _from_epoch_micros(nanos // 1000, f"NanoTimestamp {nanos} ns")


# ISO-8601 date-time with a mandatory offset, as Java's ISO_OFFSET_DATE_TIME prints it:
# seconds and fraction (up to 9 digits) optional, offset "Z" or +HH[:MM[:SS]].
_ZONED = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?"
    r"(?:([Zz])|([+-])(\d{2})(?::?(\d{2})(?::?(\d{2}))?)?)",
    re.ASCII,
)


def decode_zoned_timestamp(text: Any) -> datetime:
    """``io.debezium.time.ZonedTimestamp``: ISO-8601 text with an offset -> aware UTC datetime.

    ("Temporal types": TIMESTAMP WITH TIME ZONE -> STRING, "A string representation of a
    timestamp with timezone information".) Fractions beyond microseconds are truncated.
    Years outside 0001-9999 (Java prints ``+10000-...``) are rejected.

    Example:
        >>> decode_zoned_timestamp("2011-11-11T03:11:11.123456789Z")
        datetime.datetime(2011, 11, 11, 3, 11, 11, 123456, tzinfo=datetime.timezone.utc)
        >>> decode_zoned_timestamp("2011-11-11T05:11:11+02:00")
        datetime.datetime(2011, 11, 11, 3, 11, 11, tzinfo=datetime.timezone.utc)
    """
    if type(text) is not str:
        raise _bad(f"a ZonedTimestamp must be a JSON string, got {type(text).__name__}")
    m = _ZONED.fullmatch(text)
    if m is None:
        raise _bad(f"ZonedTimestamp {text!r:.80} is not ISO-8601 with an offset")
    year, month, day, hour, minute, second, frac, zulu, sign, oh, om, os_ = m.groups()
    try:
        if zulu:
            tz: timezone = UTC
        else:
            offset = timedelta(hours=int(oh), minutes=int(om or 0), seconds=int(os_ or 0))
            tz = timezone(-offset if sign == "-" else offset)
        micros = int((frac or "0")[:6].ljust(6, "0"))
        value = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second or 0),
            micros,
            tzinfo=tz,
        )
        return value.astimezone(UTC) if tz is not UTC else value
    except (ValueError, OverflowError) as e:
        raise _bad(f"ZonedTimestamp {text!r:.80} is not a valid instant: {e}") from None


def decode_milli_time(millis: Any) -> int:
    """``io.debezium.time.Time`` / ``org.apache.kafka.connect.data.Time``: milliseconds past
    midnight -> microseconds past midnight.

    Example:
        >>> decode_milli_time(36803000)
        36803000000
    """
    return _require_int(millis, "a Time") * 1000


def decode_micro_time(micros: Any) -> int:
    """``io.debezium.time.MicroTime``: microseconds past midnight, returned unchanged.

    Example:
        >>> decode_micro_time(40271000010)
        40271000010
    """
    return _require_int(micros, "a MicroTime")


def decode_nano_time(nanos: Any) -> int:
    """``io.debezium.time.NanoTime``: nanoseconds past midnight -> microseconds (floor).

    Example:
        >>> decode_nano_time(40271000010999)
        40271000010
    """
    return _require_int(nanos, "a NanoTime") // 1000


def decode_base64(text: Any) -> bytes:
    """Kafka Connect ``bytes`` (``JsonConverter`` writes base64) -> :class:`bytes`.

    ("Binary types", ``binary.handling.mode=bytes``; with ``base64``/``hex`` modes the schema
    type is ``string`` and the text is kept as it is.)

    Example:
        >>> decode_base64("Ynl0ZXMAAAAAAA==")
        b'bytes\\x00\\x00\\x00\\x00\\x00'
    """
    if type(text) is not str:
        raise _bad(f"bytes must be a base64 JSON string, got {type(text).__name__}")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(f"{text!r:.80} is not valid base64") from None


def _from_unscaled(unscaled: int, scale: int) -> Decimal:
    # Decimal(int) is exact; scaleb only moves the exponent under the exact context.
    return Decimal(unscaled).scaleb(-scale, _EXACT)


def decode_connect_decimal(text: Any, scale: int) -> Decimal:
    """``org.apache.kafka.connect.data.Decimal`` in its default JSON form: base64 of the
    unscaled value as big-endian two's-complement bytes, with ``parameters.scale``.

    ("Decimal types", ``decimal.handling.mode=precise``.) Empty bytes decode to zero.

    Example:
        >>> decode_connect_decimal("AeI=", 2)      # 0x01E2 = 482
        Decimal('4.82')
        >>> decode_connect_decimal("/h4=", 3)      # 0xFE1E = -482 in two's complement
        Decimal('-0.482')
    """
    raw = decode_base64(text)
    if len(raw) > MAX_DECIMAL_BYTES:
        raise _bad(f"decimal of {len(raw)} bytes exceeds {MAX_DECIMAL_BYTES} bytes")
    return _from_unscaled(int.from_bytes(raw, "big", signed=True), scale)


def encode_connect_decimal(value: Decimal, scale: int) -> str:
    """Inverse of :func:`decode_connect_decimal` (for tests and fixtures).

    Raises:
        ValueError: when ``value`` has more fractional digits than ``scale`` or is not finite.

    Example:
        >>> encode_connect_decimal(Decimal("-0.482"), 3)
        '/h4='
    """
    if not value.is_finite():
        raise ValueError(f"cannot encode {value} as a Connect decimal")
    unscaled = value.scaleb(scale, _EXACT)
    if unscaled != unscaled.to_integral_value():
        raise ValueError(f"{value} has more than {scale} fractional digits")
    n = int(unscaled)
    length = max(1, (n.bit_length() + 8) // 8)
    return base64.b64encode(n.to_bytes(length, "big", signed=True)).decode("ascii")


def rescale(value: Decimal, scale: int) -> Decimal:
    """Give ``value`` exactly ``scale`` fractional digits when that adds only zeros; otherwise
    (more digits than the scale, or not finite) return it unchanged, never rounding.

    Example:
        >>> rescale(Decimal("12345.11"), 3), rescale(Decimal("1.2345"), 2)
        (Decimal('12345.110'), Decimal('1.2345'))
    """
    if value.is_finite() and value.as_tuple().exponent > -scale:  # type: ignore[operator]
        try:
            return value.quantize(Decimal(1).scaleb(-scale), context=_EXACT)
        except DecimalException:  # too many digits for the exact context: keep as sent
            return value
    return value


def decode_decimal_number(value: Any, scale: int | None) -> Decimal:
    """A ``Decimal`` written as a JSON number (``JsonConverter`` ``decimal.format=NUMERIC``,
    or ``decimal.handling.mode=double`` where the schema still names a decimal).

    The JSON parser hands numbers with a fraction over as :class:`~decimal.Decimal`, so the
    digits are the ones in the message. With a ``scale`` the value is padded to it (never
    rounded; see :func:`rescale`).

    Example:
        >>> decode_decimal_number(Decimal("123.4567"), 4), decode_decimal_number(11111, 2)
        (Decimal('123.4567'), Decimal('11111.00'))
    """
    kind = type(value)
    if kind is int:
        result = Decimal(value)
    elif kind is Decimal:
        result = value
    elif kind is float:
        result = Decimal(repr(value))
    else:
        raise _bad(f"a decimal must be a JSON number here, got {kind.__name__} {value!r:.80}")
    return rescale(result, scale) if scale is not None else result


def decode_decimal_text(text: Any, scale: int | None) -> Decimal:
    """A decimal sent as text (``decimal.handling.mode=string``) when the schema names it a
    decimal. ``"NaN"`` and ``"Infinity"`` (PostgreSQL NUMERIC special values, "Decimal
    types") decode to the matching non-finite :class:`~decimal.Decimal`.

    Example:
        >>> decode_decimal_text("-12.5", 2), decode_decimal_text("NAN", None)
        (Decimal('-12.50'), Decimal('NaN'))
    """
    if type(text) is not str:
        raise _bad(f"a decimal string must be a JSON string, got {type(text).__name__}")
    if len(text) > 4 * MAX_DECIMAL_BYTES:
        raise _bad(f"decimal text of {len(text)} characters is too long")
    try:
        result = Decimal(text.strip())
    except InvalidOperation:
        raise _bad(f"{text!r:.80} is not a decimal number") from None
    if result.is_snan():
        raise _bad(f"{text!r:.80} is a signalling NaN")
    return rescale(result, scale) if scale is not None else result


def decode_variable_scale_decimal(value: Any) -> Decimal:
    """``io.debezium.data.VariableScaleDecimal``: ``{"scale": int, "value": base64}``.

    ("Decimal types": NUMERIC/DECIMAL without a scale constraint, ``precise`` mode; the
    struct carries each value's own scale.)

    Example:
        >>> decode_variable_scale_decimal({"scale": 2, "value": "AeI="})
        Decimal('4.82')
    """
    if type(value) is not dict:
        raise _bad(f"a VariableScaleDecimal must be a JSON object, got {type(value).__name__}")
    scale = value.get("scale")
    if type(scale) is not int or not -1000 <= scale <= 1000:
        raise _bad(f"VariableScaleDecimal scale {scale!r:.40} must be an integer in -1000..1000")
    return decode_connect_decimal(value.get("value"), scale)
