"""The end of a re-snapshot: keys the re-snapshot did not re-read are deleted.

A re-snapshot (Debezium's blocking or initial snapshot run again) re-reads every row of the
source table; a key it did not re-read was deleted at the source while the connector was not
streaming. :func:`synthetic_deletes` writes a delete for each such *ghost* key when the
re-snapshot completes, so the build table's latest versions equal the source again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from lakehouse import delta
from lakehouse.columns import batch_now
from lakehouse.dimension.layout import (
    EVENT_TIME,
    INGESTED_AT,
    KAFKA_TOPIC,
    OP,
    PROP_SNAPSHOT_LAST_COMPLETE,
    ROW_IDENTITY,
    SEQ,
    SNAPSHOT,
    SYNTHETIC_DELETE_TOPIC,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def synthetic_deletes(
    uri: str,
    key_columns: Sequence[str],
    props: Mapping[str, str],
    batch_rows: DataFrame | None,
) -> tuple[DataFrame, int] | None:
    """Deletes for the keys a completed re-snapshot did not re-read, and how many keys are
    alive before them (the share :meth:`BuildSink._check_ended_share` bounds).

    A key is a *ghost* when its latest version (by ``_event_time``, ``_seq``; truncates
    included) is alive and none of its rows was added since the re-snapshot started — a row
    the last complete version (``lakehouse.snapshot.lastCompleteVersion``) does not hold, or
    one of this batch. Rows are told apart by what they are (key, op, event time, ``_seq``,
    source position: the log is append-only, and no two of its rows share all of them), never
    by the file that holds them: a compaction (``OPTIMIZE``) during the re-snapshot moves
    every row into new files, and would make every key look re-read. Each ghost gets a delete
    at the re-snapshot's newest event time (never before its own latest version; ``_seq``
    extends the version's so the delete sorts after it), with NULL value columns and
    ``_kafka_topic`` :data:`~lakehouse.dimension.layout.SYNTHETIC_DELETE_TOPIC`. Reads the
    table at two versions (a re-snapshot is rare). None when the table has no key or no last
    complete version.
    """
    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    last_complete = props.get(PROP_SNAPSHOT_LAST_COMPLETE, "")
    if not key_columns or not last_complete.isdigit():
        return None
    spark = SparkSession.getActiveSession()
    assert spark is not None
    table = delta.read(spark, uri)
    if any(k not in table.columns for k in key_columns):
        return None
    identity = [
        c
        for c in (*key_columns, *ROW_IDENTITY)
        if c in table.columns  # a table written before a lineage column existed lacks it
    ]
    before = (
        delta.read(spark, uri, version=int(last_complete))
        .select(*[F.col(c).alias(f"_old_{c}") for c in identity])
        .distinct()
        .withColumn("_old", F.lit(True))
    )
    same = F.lit(True)
    for c in identity:  # NULL-safe: synthetic deletes have no source position
        same = same & F.col(c).eqNullSafe(F.col(f"_old_{c}"))
    every = (
        table.join(before, same, "left")
        .withColumn("_new", F.col("_old").isNull())
        .drop("_old", *[f"_old_{c}" for c in identity])
    )
    if batch_rows is not None:
        every = every.unionByName(
            batch_rows.withColumn("_new", F.lit(True)), allowMissingColumns=True
        )
    touched = every.filter("_new").select(*key_columns).distinct()
    resnapshot_time = (
        every.filter(F.col("_new") & F.col(SNAPSHOT)).agg(F.max(EVENT_TIME)).collect()[0][0]
    )
    truncated = every.filter(F.col(OP) == "t").agg(F.max(EVENT_TIME)).collect()[0][0]
    order = Window.partitionBy(*key_columns).orderBy(F.col(EVENT_TIME).desc(), F.col(SEQ).desc())
    latest = (
        every.filter(F.col(OP) != "t")
        .withColumn("_rn", F.row_number().over(order))
        .filter("_rn = 1")
        .filter(F.col(OP) != "d")
    )
    if truncated is not None:
        latest = latest.filter(F.col(EVENT_TIME) > F.lit(truncated))
    live = latest.count()
    ghosts = latest.join(touched, list(key_columns), "left_anti")
    when = (
        F.col(EVENT_TIME)
        if resnapshot_time is None
        else F.greatest(F.col(EVENT_TIME), F.lit(resnapshot_time))
    )
    columns = []
    for f in table.schema.fields:
        if f.name in key_columns:
            columns.append(F.col(f.name))
        elif f.name == OP:
            columns.append(F.lit("d").alias(OP))
        elif f.name == EVENT_TIME:
            columns.append(when.alias(EVENT_TIME))
        elif f.name == SEQ:
            columns.append(F.concat(F.col(SEQ), F.lit("~resnapshot-delete")).alias(SEQ))
        elif f.name == SNAPSHOT:
            columns.append(F.lit(True).alias(SNAPSHOT))
        elif f.name == INGESTED_AT:
            columns.append(batch_now().alias(INGESTED_AT))
        elif f.name == KAFKA_TOPIC:
            columns.append(F.lit(SYNTHETIC_DELETE_TOPIC).alias(KAFKA_TOPIC))
        else:
            columns.append(F.lit(None).cast(f.dataType).alias(f.name))
    return ghosts.select(*columns), live
