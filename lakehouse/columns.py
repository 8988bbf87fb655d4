"""Column expressions for values that change with every micro-batch.

Spark writes a long or timestamp literal into the Java source it generates for a query's
stages, and caches each compiled class by that source. A value that changes each batch (the
wall clock, a watermark, a batch id) put in a plan as a plain literal makes every batch
compile its stages anew: tens of milliseconds a class (Janino), and then the new class's first
rows run in the JVM's interpreter until the JIT compiles it again. :func:`batch_long` holds
such a value where the generated source only references it, so the classes compiled for one
batch serve the next.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["batch_long", "batch_now", "batch_timestamp_ms"]


def batch_long(value: int) -> Column:
    """``value`` as a ``bigint`` column whose generated code does not depend on the value.

    A decimal literal is referenced from generated code, not written into it; adding the
    partition id times zero makes the expression not foldable, so the optimizer neither turns
    the cast back into a long literal nor unwraps a comparison with it into one. Exact for
    every long. The expression is non-deterministic to Spark (the partition id): use it in a
    projection, a filter or an aggregate, not in a join condition.
    """
    from decimal import Decimal

    from pyspark.sql import functions as F

    held = F.lit(Decimal(value)).cast("decimal(20,0)")
    return (held + F.spark_partition_id() * F.lit(0)).cast("bigint")


def batch_timestamp_ms(epoch_ms: int) -> Column:
    """A timestamp column of ``epoch_ms`` (milliseconds), as :func:`batch_long` holds it."""
    from pyspark.sql import functions as F

    return F.timestamp_millis(batch_long(epoch_ms))


def batch_now(epoch_us: int | None = None) -> Column:
    """The wall clock at the call (or ``epoch_us``, microseconds), to the microsecond, as a
    timestamp column that :func:`batch_long` holds: what a batch stamps its rows with
    (``current_timestamp()`` would be a new literal each batch)."""
    import time

    from pyspark.sql import functions as F

    return F.timestamp_micros(batch_long(time.time_ns() // 1000 if epoch_us is None else epoch_us))
