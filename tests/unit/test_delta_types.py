"""The type algebra of schema evolution (:mod:`lakehouse.delta.types`): pure, no Spark session."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    ByteType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lakehouse.delta.types import MAX_PRECISION, fits, value_checked, widened

_SCALARS = [
    ByteType(),
    ShortType(),
    IntegerType(),
    LongType(),
    FloatType(),
    DoubleType(),
    StringType(),
    BooleanType(),
    TimestampType(),
    StructType([StructField("k", LongType())]),
]


def _decimals() -> st.SearchStrategy[DataType]:
    return st.integers(1, MAX_PRECISION).flatmap(
        lambda p: st.integers(0, p).map(lambda s: DecimalType(p, s))
    )


types: st.SearchStrategy[DataType] = st.recursive(
    st.one_of(st.sampled_from(_SCALARS), _decimals()),
    lambda inner: inner.map(lambda t: ArrayType(t, True)),
    max_leaves=3,
)


@given(types, types)
def test_widening_is_symmetric(a, b):
    assert widened(a, b) == widened(b, a)


@given(types, types)
def test_a_widened_type_holds_both_losslessly_or_by_checked_values(a, b):
    w = widened(a, b)
    if w is None:
        return
    for t in (a, b):
        assert fits(t, w) or value_checked(t, w), (t, w)


@given(types)
def test_every_type_widens_with_itself_to_itself(a):
    assert widened(a, a) == a


@given(types, types)
def test_what_fits_needs_no_change(a, b):
    # text holds anything as JSON text, but turning numbers into text is not a widening
    if fits(a, b) and "string" not in b.simpleString():
        assert widened(a, b) == b


def test_true_conflicts_do_not_widen():
    assert widened(StringType(), LongType()) is None  # text into numbers: never silently
    assert widened(DecimalType(38, 0), DoubleType()) is None
    assert widened(DecimalType(38, 20), LongType()) is None  # 19 + 20 digits > 38
    assert widened(StructType([StructField("k", LongType())]), ArrayType(LongType())) is None
    assert widened(BooleanType(), IntegerType()) is None
    assert widened(ArrayType(StringType()), ArrayType(LongType())) is None


def test_integer_and_decimal_widen_to_the_digits_of_both():
    assert widened(LongType(), DecimalType(10, 2)) == DecimalType(21, 2)
    assert widened(IntegerType(), DecimalType(5, 4)) == DecimalType(14, 4)
    assert widened(FloatType(), IntegerType()) == DoubleType()
    assert widened(ArrayType(LongType()), ArrayType(DoubleType())) == ArrayType(DoubleType())
