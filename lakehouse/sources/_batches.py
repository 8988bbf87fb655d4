"""Build Arrow record batches of the raw schema (private to :mod:`lakehouse.sources`).

The files source yields ``pyarrow.RecordBatch`` objects from ``read()`` instead of Python tuples,
so Spark skips its per-cell conversion of tuples. Measured on this project's 2-core box with
100-byte values: Spark's conversion of raw-schema tuples ran at about 190k rows/s, building
the batches here at about 2M rows/s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse.sources.schema import arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa

#: Records per Arrow batch handed to Spark.
DEFAULT_BATCH_ROWS = 10_000


class RawBatchBuilder:
    """Collects raw records of one topic column by column and cuts them into Arrow batches.

    Not thread-safe; one builder per ``read()`` call. ``timestamp_us`` is epoch microseconds
    (UTC) or None.
    """

    def __init__(self, topic: str, *, max_rows: int = DEFAULT_BATCH_ROWS) -> None:
        self._topic = topic
        self._max_rows = max_rows
        self._schema = arrow_schema()
        self._reset()

    def _reset(self) -> None:
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._partitions: list[int] = []
        self._offsets: list[int] = []
        self._timestamps: list[int | None] = []
        self._timestamp_types: list[int] = []

    def __len__(self) -> int:
        return len(self._offsets)

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        offset: int,
        timestamp_us: int | None,
        timestamp_type: int,
    ) -> pa.RecordBatch | None:
        """Add one record; return a full batch when ``max_rows`` records are buffered."""
        self._keys.append(key)
        self._values.append(value)
        self._partitions.append(partition)
        self._offsets.append(offset)
        self._timestamps.append(timestamp_us)
        self._timestamp_types.append(timestamp_type)
        if len(self._offsets) >= self._max_rows:
            return self.flush()
        return None

    def flush(self) -> pa.RecordBatch | None:
        """Return the buffered records as a batch (None when empty) and clear the buffer."""
        import pyarrow as pa

        n = len(self._offsets)
        if n == 0:
            return None
        s = self._schema
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(self._keys, type=s.field("key").type),
                pa.array(self._values, type=s.field("value").type),
                pa.array([self._topic] * n, type=s.field("topic").type),
                pa.array(self._partitions, type=s.field("partition").type),
                pa.array(self._offsets, type=s.field("offset").type),
                pa.array(self._timestamps, type=s.field("timestamp").type),
                pa.array(self._timestamp_types, type=s.field("timestampType").type),
            ],
            schema=s,
        )
        self._reset()
        return batch
