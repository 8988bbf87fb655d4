"""Which column types hold which values: the type algebra of schema evolution.

Pure functions over Spark SQL types (no session needed). Two questions are asked of a
column whose type in new data (the *record* type) differs from the table's:

* :func:`fits`: do the record's values go into the table's column as they are, without loss,
  whatever the values? Then nothing changes.
* :func:`widened`: otherwise, which type holds every value of both, so that the table can
  change to it (:func:`lakehouse.delta.widen_columns`) instead of refusing the data? None
  when no such type exists: a true conflict (``string`` and ``bigint``, ``decimal(38,0)`` and
  ``double``, a struct and an array).

One widening is exact only value by value: ``bigint`` to ``double`` (a double holds every
integer up to 2^53 exactly, and only some beyond). :func:`value_checked` names it; whoever
applies it checks the values (the table's and the new data's) and refuses the change when one
would not survive. Every other widening here is exact for every value.

Delta's own type-widening table feature could change a column without rewriting its files,
but it adds the reader feature ``typeWidening`` that delta-rs and Polars cannot read (measured:
deltalake 1.6.6, polars 2.1.0 refuse the table), and it refuses ``bigint`` to ``double``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.types import DataType

#: Integral types by width, and the decimal digits their values can need.
_INTEGRAL_DIGITS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 19}
_INTEGRAL_RANK = {"tinyint": 1, "smallint": 2, "int": 3, "bigint": 4}
#: Integral types whose every value a double holds exactly (2^31 < 2^53).
_EXACT_IN_DOUBLE = frozenset({"tinyint", "smallint", "int"})
#: The widest decimal Spark and Delta know.
MAX_PRECISION = 38


def fits(record: DataType, table: DataType) -> bool:
    """Whether values of the record's type go into the table's column without loss.

    >>> from pyspark.sql.types import DecimalType, IntegerType, LongType, StringType
    >>> fits(IntegerType(), LongType()), fits(LongType(), IntegerType())
    (True, False)
    >>> fits(DecimalType(10, 2), DecimalType(12, 4)), fits(DecimalType(12, 4), DecimalType(10, 2))
    (True, False)
    >>> fits(StringType(), LongType())
    False

    A string column holds any value as its JSON text (Spark's ``from_json`` reads a number,
    an object or an array into a string field as its text), and arrays fit element-wise:

    >>> from pyspark.sql.types import ArrayType
    >>> fits(ArrayType(LongType()), StringType()), fits(LongType(), StringType())
    (True, True)
    >>> fits(ArrayType(IntegerType()), ArrayType(LongType()))
    True
    """
    from pyspark.sql.types import ArrayType, DecimalType, DoubleType, FloatType, StringType

    if record == table:
        return True
    if isinstance(table, StringType):
        return True
    if isinstance(record, ArrayType) and isinstance(table, ArrayType):
        return fits(record.elementType, table.elementType)
    r, t = record.simpleString(), table.simpleString()
    if r in _INTEGRAL_RANK and t in _INTEGRAL_RANK:
        return _INTEGRAL_RANK[r] <= _INTEGRAL_RANK[t]
    if isinstance(table, DoubleType) and (isinstance(record, FloatType) or r in _EXACT_IN_DOUBLE):
        return True
    if isinstance(table, DecimalType):
        if isinstance(record, DecimalType):
            return (
                record.scale <= table.scale
                and record.precision - record.scale <= table.precision - table.scale
            )
        digits = _INTEGRAL_DIGITS.get(r)
        return digits is not None and digits <= table.precision - table.scale
    return False


def widened(a: DataType, b: DataType) -> DataType | None:
    """The narrowest type that holds the values of both ``a`` and ``b``, or None.

    Symmetric. Integers widen to the wider integer, to ``double`` alongside a float or a
    double, and to a decimal with enough integer digits alongside a decimal; decimals to
    the larger integer part and the larger scale (up to precision 38); ``float`` to
    ``double``; arrays element by element. Nothing else widens: text, booleans, times,
    structs and decimals next to doubles are true conflicts.

    >>> from pyspark.sql.types import DecimalType, DoubleType, IntegerType, LongType
    >>> widened(LongType(), IntegerType()), widened(LongType(), DoubleType())
    (LongType(), DoubleType())
    >>> widened(LongType(), DecimalType(38, 0)), widened(DecimalType(10, 2), DecimalType(5, 4))
    (DecimalType(38,0), DecimalType(12,4))
    >>> widened(DecimalType(38, 0), DoubleType()) is None
    True
    """
    from pyspark.sql.types import ArrayType, DecimalType, DoubleType, FloatType

    if a == b:
        return a
    if fits(a, b) and not _is_string(b):
        return b
    if fits(b, a) and not _is_string(a):
        return a
    if isinstance(a, ArrayType) and isinstance(b, ArrayType):
        element = widened(a.elementType, b.elementType)
        return None if element is None else ArrayType(element, True)
    sa, sb = a.simpleString(), b.simpleString()
    floating = (FloatType, DoubleType)
    if (sa in _INTEGRAL_RANK and isinstance(b, floating)) or (
        sb in _INTEGRAL_RANK and isinstance(a, floating)
    ):
        return DoubleType()
    da, db = _as_decimal(a), _as_decimal(b)
    if da is not None and db is not None:
        scale = max(da[1], db[1])
        whole = max(da[0] - da[1], db[0] - db[1])
        if whole + scale <= MAX_PRECISION:
            return DecimalType(whole + scale, scale)
    return None


def value_checked(old: DataType, new: DataType) -> bool:
    """Whether changing a column from ``old`` to ``new`` is exact only value by value
    (``bigint`` into ``double``, also inside arrays), so the values must be checked first.

    >>> from pyspark.sql.types import ArrayType, DoubleType, IntegerType, LongType
    >>> value_checked(LongType(), DoubleType()), value_checked(IntegerType(), DoubleType())
    (True, False)
    >>> value_checked(ArrayType(LongType()), ArrayType(DoubleType()))
    True
    """
    from pyspark.sql.types import ArrayType, DoubleType, LongType

    if isinstance(old, ArrayType) and isinstance(new, ArrayType):
        return value_checked(old.elementType, new.elementType)
    return isinstance(old, LongType) and isinstance(new, DoubleType)


def _is_string(t: DataType) -> bool:
    """A string, or an array of them: text holds numbers as JSON text, which is not a
    widening of a numeric column (it would turn the numbers it holds into text)."""
    from pyspark.sql.types import ArrayType, StringType

    if isinstance(t, ArrayType):
        return _is_string(t.elementType)
    return isinstance(t, StringType)


def _as_decimal(t: DataType) -> tuple[int, int] | None:
    """(precision, scale) of a decimal, or of the decimal an integral type needs."""
    from pyspark.sql.types import DecimalType

    if isinstance(t, DecimalType):
        return t.precision, t.scale
    digits = _INTEGRAL_DIGITS.get(t.simpleString())
    return None if digits is None else (digits, 0)
