"""The dead-letter table: records lakehouse could not use, kept with the reason.

Nothing is dropped silently. A record that fails to parse or validate (ingest), or a probe
row the join's policy rejects (late, expired), is appended here with its raw bytes, its
source position and the reason, in the same micro-batch transaction scheme as the data
(``txn=(app_id, batch_id)``), so a replayed batch does not dead-letter twice.

Columns:

============================  ===========  ==================================================
column                        type         meaning
============================  ===========  ==================================================
``_raw_key``                  binary       the record's key bytes, as received (may be NULL)
``_raw_value``                binary       the record's value bytes, as received; for probe
                                           rows, the row as JSON
``_topic``                    string       topic (or directory) it came from
``_partition``                int          partition (file index for the files source)
``_offset``                   bigint       offset (line number for the files source)
``_source_timestamp``         timestamp    the record's timestamp at the source
``_error_kind``               string       machine-readable reason (``malformed_json``, ...)
``_error``                    string       human-readable reason
``_pipeline``                 string       the pipeline id that rejected it
``_batch_id``                 bigint       the micro-batch that rejected it
``_dead_lettered_at``         timestamp    when
============================  ===========  ==================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from lakehouse import delta
from lakehouse.columns import batch_long, batch_now
from lakehouse.table_kinds import TableKind, creation_properties

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

DEAD_LETTER_DDL: Final = (
    "_raw_key binary, _raw_value binary, _topic string, _partition int, _offset bigint, "
    "_source_timestamp timestamp, _error_kind string, _error string, _pipeline string, "
    "_batch_id bigint, _dead_lettered_at timestamp"
)


def to_dead_letters(
    df: DataFrame,
    *,
    raw_key: Column,
    raw_value: Column,
    topic: Column,
    partition: Column,
    offset: Column,
    source_timestamp: Column,
    error_kind: Column,
    error: Column,
    pipeline: str,
    batch_id: int,
) -> DataFrame:
    """Project rows of ``df`` onto the dead-letter layout."""
    from pyspark.sql import functions as F

    return df.select(
        raw_key.cast("binary").alias("_raw_key"),
        raw_value.cast("binary").alias("_raw_value"),
        topic.cast("string").alias("_topic"),
        partition.cast("int").alias("_partition"),
        offset.cast("bigint").alias("_offset"),
        source_timestamp.cast("timestamp").alias("_source_timestamp"),
        error_kind.cast("string").alias("_error_kind"),
        error.cast("string").alias("_error"),
        F.lit(pipeline).alias("_pipeline"),
        batch_long(batch_id).alias("_batch_id"),
        batch_now().alias("_dead_lettered_at"),
    )


def append_dead_letters(
    rows: DataFrame,
    uri: str,
    *,
    app_id: str,
    batch_id: int,
    metadata: Mapping[str, Any] | None = None,
    snap: delta.TableSnapshot | None = None,
) -> delta.WriteResult:
    """Append dead-letter rows idempotently.

    Callers append only batches that rejected something, which they have counted already
    (no job looks): the dead-letter table's history holds only those batches. Replays are
    recognised by the table's transaction version, as for every lakehouse write.
    The table records its kind (:mod:`lakehouse.table_kinds`) and the first pipeline that
    wrote it. ``metadata`` (``lakehouse.*`` keys) goes into the commit (the join records its
    batch plan there). ``snap`` is the caller's snapshot of the table, if it took one.
    """
    return delta.append(
        rows,
        uri,
        txn=(app_id, batch_id),
        max_files=1,
        metadata=metadata,
        snap=snap,
        properties=creation_properties(TableKind.DEAD_LETTER, app_id),
    )
