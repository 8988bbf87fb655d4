"""Open raw record streams: Kafka through Spark's own source, JSON-lines files through
lakehouse's Python data source, Delta tables through Delta's source.

These helpers validate their arguments in the calling process before any Spark work, so
a bad setting fails with a :class:`ConfigError` at once rather than when the query starts.
Both streams have the raw schema (:data:`~lakehouse.sources.schema.RAW_SCHEMA`).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from lakehouse.errors import ConfigError
from lakehouse.sources.delta import DeltaSourceOptions, open_delta_stream
from lakehouse.sources.files import FILES_SOURCE_NAME, FilesDataSource, FilesSourceOptions
from lakehouse.sources.kafka import KAFKA_SOURCE_NAME, KafkaSourceOptions
from lakehouse.sources.schema import RAW_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_registered: weakref.WeakSet[SparkSession] = weakref.WeakSet()


def register_sources(spark: SparkSession) -> None:
    """Register the ``lakehouse-files`` data source with ``spark``; idempotent.

    A session is registered once; later calls with the same session do nothing (Spark
    would otherwise log a warning about replacing the data source). Kafka needs no
    registration: it is Spark's own ``kafka`` source.
    """
    if spark in _registered:
        return
    spark.dataSource.register(FilesDataSource)
    _registered.add(spark)


def read_kafka_stream(
    spark: SparkSession,
    *,
    bootstrap_servers: str,
    topics: str | Sequence[str],
    starting_offsets: Literal["earliest", "latest"] | Mapping[str, Mapping[int, int]] = "earliest",
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """Open a streaming DataFrame of raw Kafka records through Spark's Kafka source.

    Returns the raw schema's columns of ``spark.readStream.format("kafka")`` (Spark's Kafka
    schema without ``headers``). Options are described in :mod:`lakehouse.sources.kafka`:
    ``kafka.``-prefixed settings are librdkafka names, translated for Spark's Java client;
    ``failOnDataLoss`` stays ``true`` unless given.

    Args:
        spark: the session.
        bootstrap_servers: ``host:port[,host:port...]``.
        topics: a topic name, a comma-separated list, or a sequence of names.
        starting_offsets: ``"earliest"``, ``"latest"``, or per topic ``{partition: offset}``
            with -2 for earliest and -1 for latest. Used only without a checkpoint.
        options: further options, e.g. ``{"kafka.security.protocol": "SASL_SSL",
            "kafka.config.file": "/secrets/kafka.properties", "maxOffsetsPerTrigger": "10000"}``.

    Raises:
        ConfigError: the options are invalid or cannot be translated (checked here, without
            contacting Kafka).
    """
    return open_kafka_stream(
        spark,
        kafka_stream_options(
            bootstrap_servers=bootstrap_servers,
            topics=topics,
            starting_offsets=starting_offsets,
            options=options,
        ),
    )


def open_kafka_stream(spark: SparkSession, options: KafkaSourceOptions) -> DataFrame:
    """The raw-schema stream of Spark's Kafka source with validated ``options``."""
    reader = spark.readStream.format(KAFKA_SOURCE_NAME).options(**options.spark_options)
    return reader.load().select(*RAW_SCHEMA.fieldNames())


def kafka_stream_options(
    *,
    bootstrap_servers: str,
    topics: str | Sequence[str],
    starting_offsets: Literal["earliest", "latest"] | Mapping[str, Mapping[int, int]] = "earliest",
    options: Mapping[str, str] | None = None,
) -> KafkaSourceOptions:
    """The validated options of :func:`read_kafka_stream` (same arguments); no Spark, no Kafka.

    Raises:
        ConfigError: as :func:`read_kafka_stream`.
    """
    names = topics.split(",") if isinstance(topics, str) else list(topics)
    starting: str
    if isinstance(starting_offsets, str):
        starting = starting_offsets
    else:
        starting = json.dumps(
            {
                topic: {str(p): int(o) for p, o in offsets.items()}
                for topic, offsets in starting_offsets.items()
            }
        )
    merged: dict[str, str] = {str(k): str(v) for k, v in (options or {}).items()}
    for key in ("subscribe", "startingoffsets", "kafka.bootstrap.servers"):
        if any(k.lower() == key for k in merged):
            raise ConfigError(
                f"give {key!r} as an argument of read_kafka_stream, not in options.",
                setting=key,
            )
    merged.update(
        {
            "kafka.bootstrap.servers": bootstrap_servers,
            "subscribe": ",".join(n.strip() for n in names),
            "startingOffsets": starting,
        }
    )
    return KafkaSourceOptions.from_options(merged)


def read_files_stream(
    spark: SparkSession,
    path: str,
    *,
    topic: str | None = None,
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """Open a streaming DataFrame over a JSON-lines directory (see :mod:`lakehouse.sources.files`).

    Args:
        spark: the session; the sources are registered on it if needed.
        path: the directory (local or mounted on every node).
        topic: the ``topic`` column's value; default the directory's base name.
        options: further options: ``format`` (``lines`` or ``envelope``),
            ``maxFilesPerTrigger``.

    Raises:
        ConfigError: the options are invalid (checked here; the directory is not read).
    """
    merged: dict[str, str] = {str(k): str(v) for k, v in (options or {}).items()}
    if topic is not None:
        merged["topic"] = topic
    FilesSourceOptions.from_options({**merged, "path": path})
    register_sources(spark)
    return spark.readStream.format(FILES_SOURCE_NAME).options(**merged).load(path)


def read_delta_stream(
    spark: SparkSession,
    table: str,
    *,
    starting_version: int | Literal["latest"] | None = None,
    starting_timestamp: str | None = None,
    max_files_per_trigger: int | None = None,
    max_bytes_per_trigger: str | None = None,
    skip_change_commits: bool = False,
    ignore_deletes: bool = False,
) -> DataFrame:
    """Open a streaming DataFrame of raw records over a Delta table's appends (each row's
    ``value`` is the row as a JSON object; see :mod:`lakehouse.sources.delta`).

    Args:
        spark: the session (with delta-spark).
        table: the table's catalog name (``bronze.orders``) or its location (a path or URI;
            see :func:`lakehouse.delta.names.is_catalog_name`).
        starting_version: the first version to read, or ``"latest"``; default the whole table.
            Used only without a checkpoint.
        starting_timestamp: the first commit at or after this time, instead.
        max_files_per_trigger: most new files per micro-batch.
        max_bytes_per_trigger: soft bound on a micro-batch's input (``"1g"``).
        skip_change_commits: skip commits that update or delete rows instead of failing.
        ignore_deletes: skip commits that only delete rows.

    Raises:
        ConfigError: the options are invalid.
        TableNotFoundError: the table does not exist.
    """
    return open_delta_stream(
        spark,
        DeltaSourceOptions(
            table=table,
            starting_version=starting_version,
            starting_timestamp=starting_timestamp,
            max_files_per_trigger=max_files_per_trigger,
            max_bytes_per_trigger=max_bytes_per_trigger,
            skip_change_commits=skip_change_commits,
            ignore_deletes=ignore_deletes,
        ),
    )
