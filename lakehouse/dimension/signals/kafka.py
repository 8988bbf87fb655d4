"""Offsets read from outside the batch: the data topics' high watermarks from the brokers
(:func:`kafka_offsets_probe`) and the offsets a streaming query planned, from its checkpoint
(:func:`checkpoint_offsets_reader`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from lakehouse.dimension.signals.kinds import Offsets, OffsetsProbe
from lakehouse.dimension.signals.offsets import merge_offsets, offsets_from_text


def kafka_offsets_probe(
    bootstrap_servers: str, topics: Sequence[str], *, options: Mapping[str, str] | None = None
) -> OffsetsProbe:
    """A probe that reads the current high watermarks of ``topics`` from Kafka.

    It uses the Kafka source's own metadata path (``startingOffsets=latest``), so security
    settings are those of the stream. Runs on the driver; each call opens and closes one
    metadata client.

    Args:
        bootstrap_servers: the brokers.
        topics: the data topics.
        options: the stream's ``kafka.*`` options (and ``kafka.config.file``).
    """
    config = {
        **dict(options or {}),
        "kafka.bootstrap.servers": bootstrap_servers,
        "subscribe": ",".join(topics),
        "startingOffsets": "latest",
    }

    def probe() -> Mapping[str, Mapping[str, int]]:
        from lakehouse.sources.kafka import KafkaSourceOptions, KafkaStreamReader

        reader = KafkaStreamReader(KafkaSourceOptions.from_options(config))
        try:
            return reader.initialOffset()
        finally:
            reader.stop()

    return probe


def planned_offsets(checkpoint_text: str) -> Offsets | None:
    """The Kafka offsets a micro-batch was planned to, from the text of the query's
    write-ahead offsets log entry (``<checkpoint>/offsets/<batch_id>``).

    The entry is ``v1``, a metadata line, then one line per source; lines that are a
    ``{topic: {partition: offset}}`` map are merged. None when there is none (a files
    source, an unknown format).

    >>> planned_offsets('v1\\n{"batchWatermarkMs":0}\\n{"t": {"0": 4, "1": 2}}')
    {'t': {'0': 4, '1': 2}}
    """
    lines = checkpoint_text.splitlines()
    if not lines or not lines[0].startswith("v"):
        return None
    found: list[Offsets] = []
    for line in lines[2:]:
        parsed = offsets_from_text(line.strip())
        if parsed:
            found.append(parsed)
    return merge_offsets(*found) if found else None


def checkpoint_offsets_reader(checkpoint: str) -> Callable[[int], Offsets | None]:
    """A function giving the Kafka offsets a micro-batch was planned to, read from the
    query's write-ahead offsets log (``<checkpoint>/offsets/<batch_id>``, written by Spark
    before the batch runs, and the same for a replay).

    Reads through ``pyarrow.fs`` (local paths, ``file:``, ``s3://``, ``gs://``, ``hdfs://``);
    returns None when the entry cannot be read or holds no Kafka offsets, and the sink then
    counts consumed positions from the records alone.
    """

    def read(batch_id: int) -> Offsets | None:
        from lakehouse.checkpoint import read_text

        text = read_text(f"{checkpoint.rstrip('/')}/offsets/{batch_id}")
        return None if text is None else planned_offsets(text)

    return read
