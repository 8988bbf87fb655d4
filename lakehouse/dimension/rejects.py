"""The ingest batch's rejected records, as one append to the dead-letter table.

A record is rejected by the decode (``_kind = 'error'``: malformed, unknown logical type,
out of range, ...), by a target's plan (a row the table cannot take, e.g. a column
collision), or as an unreadable signal record (``invalid_signal``). Every one of them
becomes a dead letter with its raw key and value, its source position and the reason:
nothing is dropped. The batch's dead letters are appended in one commit carrying the batch's
idempotent transaction, so a replay writes none twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from lakehouse.dead_letter import append_dead_letters, to_dead_letters
from lakehouse.dimension.decode import with_raw

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lakehouse.dimension.batch_signals import BatchSignals


def write_rejects(
    decoded: DataFrame,
    data: DataFrame,
    signal_df: DataFrame | None,
    signals: BatchSignals,
    refused: Sequence[Callable[[], DataFrame | None]],
    rejected_records: int,
    *,
    table: str,
    pipeline_id: str,
    batch_id: int,
) -> int:
    """Append the batch's rejected records to the dead-letter table ``table`` in one commit;
    returns how many.

    ``decoded``: the batch's decoded records (its ``_kind = 'error'`` rows are rejected);
    ``data``: the source records ``decoded`` is of (a record refused by a plan was decoded,
    maybe in the JVM, which keeps no raw bytes: they are joined back from here);
    ``refused``: makes each target's refused rows (where it has some: each is a Spark
    analysis on the driver); ``rejected_records``: how many records the
    decode and the plans rejected, counted already: nothing is written, and no job looks,
    when there are none and no signal was unreadable."""
    from pyspark.sql import functions as F

    if rejected_records + len(signals.invalid) == 0:
        return 0
    rejected = [_dead_letters(decoded.filter(F.col("_kind") == "error"), pipeline_id, batch_id)]
    if signals.invalid and signal_df is not None:
        rejected.append(_invalid_signals(signal_df, signals, pipeline_id, batch_id))
    for make in refused:
        frame = make()
        if frame is not None:
            rejected.append(_dead_letters(with_raw(frame, data), pipeline_id, batch_id))
    dead = rejected[0]
    for extra in rejected[1:]:
        dead = dead.unionByName(extra)
    return append_dead_letters(dead, table, app_id=pipeline_id, batch_id=batch_id).rows


def _dead_letters(rows: DataFrame, pipeline_id: str, batch_id: int) -> DataFrame:
    """``rows`` (source columns plus ``_error_kind``, ``_error``) as dead letters."""
    from pyspark.sql import functions as F

    return to_dead_letters(
        rows,
        raw_key=F.col("key"),
        raw_value=F.col("value"),
        topic=F.col("topic"),
        partition=F.col("partition"),
        offset=F.col("offset"),
        source_timestamp=F.col("timestamp"),
        error_kind=F.col("_error_kind"),
        error=F.col("_error"),
        pipeline=pipeline_id,
        batch_id=batch_id,
    )


def _invalid_signals(
    signal_df: DataFrame, signals: BatchSignals, pipeline_id: str, batch_id: int
) -> DataFrame:
    """The unreadable notification/heartbeat records, as dead letters."""
    from pyspark.sql import functions as F

    reasons = signal_df.sparkSession.createDataFrame(
        list(signals.invalid), "topic string, partition int, offset bigint, _error string"
    )
    bad = signal_df.join(reasons, ["topic", "partition", "offset"]).withColumn(
        "_error_kind", F.lit("invalid_signal")
    )
    return _dead_letters(bad, pipeline_id, batch_id)
