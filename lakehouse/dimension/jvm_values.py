"""A Connect wire value converted to its column's value in Spark SQL: exactly as the Python
decoder converts it, or NULL (the record is then left to Python).

:func:`convert` is the value half of :mod:`lakehouse.dimension.jvm_decode`: each
:data:`~lakehouse.cdc.wire.Conversion` a compiled schema names (a date, a timestamp of a
unit, a ``ZonedTimestamp``, bytes, a ``Decimal``) as a guarded Spark SQL expression that
cannot raise, even in ANSI mode.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from lakehouse.cdc.decode import MAX_EVENT_TIME_MS, MIN_EVENT_TIME_MS
from lakehouse.cdc.wire import MAX_FAST_DECIMAL_BYTES, Conversion

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["convert"]

_MIN_MICROS: Final = MIN_EVENT_TIME_MS * 1000
_MAX_MICROS: Final = MAX_EVENT_TIME_MS * 1000 + 999
_MIN_DAY, _MAX_DAY = -719_162, 2_932_896  # 0001-01-01 and 9999-12-31
_BASE64: Final = r"^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
_ZONED: Final = (
    r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:"
    r"[0-5][0-9](\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-5][0-9])$"
)


def convert(w: Column, conversion: Conversion) -> Column:
    """The column's value of a wire value ``w``, or NULL when the JVM does not convert it
    exactly (so a non-NULL ``w`` with a NULL value leaves the record to Python). Every
    conversion is guarded by its check, so no value can raise (ANSI mode)."""
    from pyspark.sql import functions as F

    if conversion == "same":
        return w
    if conversion == "base64":
        # the pattern leaves both decoders the same bytes (neither checks the unused bits)
        return F.when(w.rlike(_BASE64), F.unbase64(w))
    if conversion == "date":
        return F.when(w.between(_MIN_DAY, _MAX_DAY), F.date_from_unix_date(w))
    if conversion == "ts_millis":
        return F.when(w.between(MIN_EVENT_TIME_MS, MAX_EVENT_TIME_MS), F.timestamp_millis(w))
    if conversion == "ts_micros":
        return F.when(w.between(_MIN_MICROS, _MAX_MICROS), F.timestamp_micros(w))
    if conversion == "ts_nanos":
        return F.timestamp_micros(_floor_1000(w))  # every long fits after the division
    if conversion == "time_millis":
        limit = (2**63 - 1) // 1000
        return F.when(w.between(-limit, limit), w.cast("long") * 1000)
    if conversion == "time_nanos":
        return _floor_1000(w)
    if conversion == "zoned":
        return _zoned(w)
    _, precision, scale = conversion
    return _decimal(w, precision, scale)


def _floor_1000(w: Column) -> Column:
    """``w // 1000`` rounding down, as Python's ``//`` does (exact: in decimal, not double)."""
    from pyspark.sql import functions as F

    return F.floor(w.cast("decimal(20,0)") / F.lit(1000)).cast("long")


def _zoned(w: Column) -> Column:
    """ISO-8601 with an offset, as Debezium writes a ``ZonedTimestamp``; the fraction cut
    to microseconds (not rounded), as the Python decoder does. The first and the last day of
    years 1 to 9999 are left to Python (an offset can move them out of range)."""
    from pyspark.sql import functions as F

    shaped = (
        w.rlike(_ZONED)
        & ~w.startswith("0000")
        & ~w.startswith("0001-01-01")
        & ~w.startswith("9999-12-31")
    )
    fraction = F.rpad(F.substring(F.regexp_extract(w, r"\.([0-9]+)", 1), 1, 6), 6, "0")
    offset = F.regexp_extract(w, r"(Z|[+-][0-9]{2}:[0-9]{2})$", 1)
    text = F.concat(F.substring(w, 1, 19), F.lit("."), fraction, offset)
    return F.when(shaped, F.try_to_timestamp(text, F.lit("yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX")))


def _decimal(w: Column, precision: int, scale: int) -> Column:
    """Base64 of a big-endian two's-complement unscaled value (at most eight bytes) ->
    ``decimal(precision, scale)``, exact: the unscaled value times ``10**-scale`` in decimal
    arithmetic (at most 21 digits), then cast, NULL when it does not fit."""
    from decimal import Decimal

    from pyspark.sql import functions as F

    raw = F.unbase64(w)
    shaped = w.rlike(_BASE64) & F.octet_length(raw).between(1, MAX_FAST_DECIMAL_BYTES)
    hexed = F.hex(raw)
    signed = F.lpad(hexed, 16, F.when(F.substring(hexed, 1, 1) >= "8", "F").otherwise("0"))
    unscaled = F.conv(signed, 16, -10).cast("decimal(19,0)")
    value = unscaled * F.lit(Decimal(1).scaleb(-scale)) if scale else unscaled
    return F.when(shaped, value.try_cast(f"decimal({precision},{scale})"))
