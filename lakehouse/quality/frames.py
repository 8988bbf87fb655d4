"""Where the quality report computes: the frames its suites validate, on Spark or on pandas.

The report's decisions (which versions, which checks, what each outcome means) are the same
on both engines; only the frames differ. :class:`Frames` is what a check asks of an engine:
read a table at a version, derive the columns a suite validates, count. Two engines
implement it:

* :class:`SparkFrames`: Spark DataFrames through Delta's ``versionAsOf``, validated by GX's
  Spark datasource. Object storage and clusters need it.
* :class:`~lakehouse.quality._pandas.PandasFrames`: the tables read by delta-rs into pandas,
  validated by GX's pandas datasource; no JVM. A local report answers in seconds instead of
  after a Spark start.

Both engines produce the same columns with the same values (a probe row's string form, its
age, its reason), so the same suites give the same summary. Two tests run both on the same
tables and compare: ``test_the_engines_write_the_same_report`` (``test_quality.py``) and
``test_the_engines_explain_every_row_alike`` (``test_quality_unmatched.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from lakehouse import delta
from lakehouse.join.layout import (
    ARRIVAL_BATCH,
    ARRIVED_AT,
    BATCH_ID,
    BUILD_VERSION,
    JOIN_MODE,
    LATE,
    MATCHED,
    POSITION,
    RELEASED_BY,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from lakehouse.join.options import TimeUnit
    from lakehouse.quality._ledger import Ledger
    from lakehouse.quality.unmatched import LastBatch, Unmatched

#: How the report computes: ``spark`` or ``pandas`` (delta-rs, no JVM).
Engine = Literal["spark", "pandas"]

#: Computed by the report: how long a pending row has waited.
PENDING_AGE: Final = "_pending_age_ms"
#: Computed by the report: NULL for a matched output row, else the row and why it did not.
UNMATCHED: Final = "_unmatched"
#: Dead-letter kinds of probe rows that had arrived (they count as arrived, then dead-lettered).
ARRIVED_KINDS: Final = ("late", "expired", "pending_bound_age", "pending_bound_rows")


class Frames(Protocol):
    """What the checks ask of an engine. A frame is the engine's table type (a Spark
    DataFrame, a pandas DataFrame); the checks only pass frames between these methods and GX.
    """

    engine: Engine

    def read(self, uri: str, version: int) -> Any:
        """The table at ``version``."""
        ...

    def empty_output(self, pending_schema: StructType, id_columns: Sequence[str]) -> Any:
        """An empty stand-in for an output table that does not exist yet, with the columns
        the checks read."""
        ...

    def count(self, df: Any) -> int: ...

    def rows(self, rows: Sequence[tuple[Any, ...]], schema: StructType) -> Any:
        """A frame of ``rows`` with ``schema`` (the accounting and watermark records)."""
        ...

    def probe_ids(self, output: Any, pending: Any, probe_id: str) -> Any:
        """``probe_id``, ``_table`` and ``_batch_id`` of every output and pending row."""
        ...

    def with_reason(self, df: Any, reasons_uri: str, state: str) -> tuple[Any, list[str]]:
        """``df`` with the ``_reason`` of its rows in state ``state`` of the unmatched-rows
        table, joined by source position; unchanged (and no column named) when ``df`` has no
        position columns."""
        ...

    def with_unmatched(self, output: Any, id_columns: Sequence[str], reason: bool) -> Any:
        """``output`` with :data:`UNMATCHED`: NULL for a matched row, else ``col=value ...
        (batch N): reason``."""
        ...

    def released_late(self, output: Any) -> int:
        """Output rows released late (``_released_by = 'late'``)."""
        ...

    def with_pending_age(self, pending: Any, now_ms: int) -> tuple[Any, int | None]:
        """``pending`` with :data:`PENDING_AGE`, and the oldest age."""
        ...

    def malformed_dead_letters(self, uri: str, version: int, ledger: Ledger) -> dict[int, int]:
        """Per batch of the ledger, the join's dead letters that never counted as arrived."""
        ...

    def explain_rows(
        self,
        *,
        output: Any,
        pending: Any,
        build_table: str,
        build_key: Sequence[str],
        probe_id: str,
        probe_key: Sequence[str],
        probe_time: str | None,
        probe_time_unit: TimeUnit,
        last_batch: LastBatch | None,
        uri: str,
        examples: int,
    ) -> Unmatched:
        """Write the unmatched-rows table (:mod:`lakehouse.quality.unmatched`)."""
        ...

    def release(self, *frames: Any) -> None:
        """Free what :meth:`read` kept for the run."""
        ...


def output_stand_in_schema(pending_schema: StructType, id_columns: Sequence[str]) -> StructType:
    """The columns of :meth:`Frames.empty_output`: the probe's id columns (typed as in the
    pending table) and the join lineage the checks read."""
    from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

    return StructType(
        [pending_schema[c] for c in id_columns]
        + [
            StructField(MATCHED, BooleanType(), True),
            StructField(BUILD_VERSION, LongType(), True),
            StructField(JOIN_MODE, StringType(), True),
            StructField(BATCH_ID, LongType(), True),
        ]
    )


def malformed_filter_batches(ledger: Ledger) -> tuple[list[str], list[int]]:
    """The pipelines and batches whose dead letters the accounting looks at."""
    pipelines = sorted({r.pipeline for r in ledger.records if r.pipeline})
    return pipelines, sorted({r.batch_id for r in ledger.records})


class SparkFrames:
    """The report's frames as Spark DataFrames (Delta's ``versionAsOf``); see the module
    docstring."""

    engine: Engine = "spark"

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def read(self, uri: str, version: int) -> DataFrame:
        # the checks scan each table several times: read once
        return delta.read(self.spark, uri, version=version).persist()

    def empty_output(self, pending_schema: StructType, id_columns: Sequence[str]) -> DataFrame:
        return self.spark.createDataFrame([], output_stand_in_schema(pending_schema, id_columns))

    def count(self, df: DataFrame) -> int:
        return int(df.count())

    def rows(self, rows: Sequence[tuple[Any, ...]], schema: StructType) -> DataFrame:
        return self.spark.createDataFrame(list(rows), schema)

    def probe_ids(self, output: DataFrame, pending: DataFrame, probe_id: str) -> DataFrame:
        from pyspark.sql import functions as F

        return output.select(
            F.col(probe_id).alias("probe_id"),
            F.lit("output").alias("_table"),
            F.col(BATCH_ID).cast("bigint").alias("_batch_id"),
        ).unionByName(
            pending.select(
                F.col(probe_id).alias("probe_id"),
                F.lit("pending").alias("_table"),
                F.col(ARRIVAL_BATCH).cast("bigint").alias("_batch_id"),
            )
        )

    def with_reason(
        self, df: DataFrame, reasons_uri: str, state: str
    ) -> tuple[DataFrame, list[str]]:
        from pyspark.sql import functions as F

        from lakehouse.quality.unmatched import REASON, STATE

        if not set(POSITION) <= set(df.columns):
            return df, []
        why = (
            delta.read(self.spark, reasons_uri)
            .filter(F.col(STATE) == F.lit(state))
            .select(*POSITION, REASON)
            .dropDuplicates(list(POSITION))  # so no row of df is repeated
        )
        return df.join(why, list(POSITION), "left"), [REASON]

    def with_unmatched(
        self, output: DataFrame, id_columns: Sequence[str], reason: bool
    ) -> DataFrame:
        from pyspark.sql import functions as F

        from lakehouse.quality.unmatched import REASON

        named = [
            F.concat(F.lit(f"{c}="), F.coalesce(F.col(c).cast("string"), F.lit("NULL")))
            for c in id_columns
        ]
        why = F.col(REASON) if reason else F.lit(None).cast("string")
        return output.withColumn(
            UNMATCHED,
            F.when(F.coalesce(F.col(MATCHED), F.lit(False)), F.lit(None).cast("string")).otherwise(
                F.concat_ws(
                    " ",
                    *named,
                    F.concat(F.lit("(batch "), F.col(BATCH_ID).cast("string"), F.lit("):")),
                    F.coalesce(why, F.lit("reason not recorded")),
                )
            ),
        )

    def released_late(self, output: DataFrame) -> int:
        from pyspark.sql import functions as F

        if RELEASED_BY not in output.columns:
            return 0
        return int(output.filter(F.col(RELEASED_BY) == F.lit(LATE)).count())

    def with_pending_age(self, pending: DataFrame, now_ms: int) -> tuple[DataFrame, int | None]:
        from pyspark.sql import functions as F

        aged = pending.withColumn(
            PENDING_AGE, F.lit(now_ms).cast("bigint") - F.unix_millis(F.col(ARRIVED_AT))
        )
        oldest = aged.agg(F.max(PENDING_AGE)).first()
        return aged, None if oldest is None or oldest[0] is None else int(oldest[0])

    def malformed_dead_letters(self, uri: str, version: int, ledger: Ledger) -> dict[int, int]:
        from pyspark.sql import functions as F

        pipelines, batches = malformed_filter_batches(ledger)
        df = delta.read(self.spark, uri, version=version).filter(
            F.col("_batch_id").isin(batches) & ~F.col("_error_kind").isin(*ARRIVED_KINDS)
        )
        if pipelines:
            df = df.filter(F.col("_pipeline").isin(pipelines))
        return {int(r[0]): int(r[1]) for r in df.groupBy("_batch_id").count().collect()}

    def explain_rows(self, **kw: Any) -> Unmatched:
        from lakehouse.quality.unmatched import explain_rows

        return explain_rows(self.spark, **kw)

    def release(self, *frames: Any) -> None:
        for df in frames:
            df.unpersist()
