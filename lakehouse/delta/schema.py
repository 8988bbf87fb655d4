"""Schemas of Delta tables: Arrow types of Spark schemas, whether a DataFrame fits a table
(:func:`check_compatible`), and which values a widening would not keep exactly
(:func:`first_inexact`, :func:`inexact`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lakehouse.delta.log import table_schema
from lakehouse.delta.types import value_checked
from lakehouse.errors import (
    SchemaMismatchError,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructType


def spark_schema_to_arrow(schema: StructType) -> Any:
    """Convert a Spark schema to Arrow (timestamps as UTC µs), as Delta stores them."""
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema)  # pyspark 4.0: timestamp_utc=True, the same schema


def check_compatible(
    uri: str,
    incoming: StructType,
    *,
    allow_new_columns: bool,
    existing: StructType | None = None,
) -> list[str]:
    """Compare an incoming schema with the table's; return the incoming columns it lacks.

    A column present in the table but missing from ``incoming`` is fine (it reads NULL in the
    new rows). A column with another type is not.

    Raises:
        SchemaMismatchError: a type differs, or a column is new and ``allow_new_columns`` is
            False. The message names the table, the column and both types.
    """
    have = existing if existing is not None else table_schema(uri)
    by_name = {f.name: f for f in have.fields}
    new: list[str] = []
    for column in incoming.fields:
        current = by_name.get(column.name)
        if current is None:
            new.append(column.name)
            continue
        if not same_type(current.dataType, column.dataType):
            raise SchemaMismatchError(
                f"Delta table '{uri}': column '{column.name}' has type "
                f"{current.dataType.simpleString()}, but the data has type "
                f"{column.dataType.simpleString()}. Write to a new table, or cast the column "
                "to the table's type.",
                table_uri=uri,
            )
    if new and not allow_new_columns:
        raise SchemaMismatchError(
            f"Delta table '{uri}' lacks column(s) {', '.join(new)} that the data has. Use "
            "schema evolution (schema_mode='merge') or write to a new table.",
            table_uri=uri,
        )
    return new


def same_type(a: DataType, b: DataType) -> bool:
    """Whether two Spark types are the same Delta type (nullability aside)."""
    return a.simpleString() == b.simpleString()


def first_inexact(df: DataFrame, name: str, old: DataType, new: DataType) -> str | None:
    """A value of column ``name`` (of type ``old``) that would not survive a change to
    ``new``, as text; None when every value does, or when the change is exact by type
    (:func:`lakehouse.delta.types.value_checked` is false: no job runs)."""
    from pyspark.sql import functions as F

    if not value_checked(old, new):
        return None
    lost = inexact(F.col(name), old, new)
    bad = df.filter(lost).select(F.col(name).cast("string").alias("v")).first()
    return None if bad is None else str(bad["v"])


def inexact(column: Column, old: DataType, new: DataType) -> Column:
    """True where a non-NULL value of ``column`` (of type ``old``) is not the same value
    once cast to ``new``: the check behind :func:`lakehouse.delta.types.value_checked`
    changes (arrays: any element)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, DecimalType

    if isinstance(old, ArrayType) and isinstance(new, ArrayType):
        return F.coalesce(
            F.exists(column, lambda x: inexact(x, old.elementType, new.elementType)), F.lit(False)
        )
    exact = DecimalType(38, 0)
    return column.isNotNull() & ~column.try_cast(new).try_cast(exact).eqNullSafe(
        column.try_cast(exact)
    )
