"""Compose sources, sinks and triggers into running streaming queries.

This module only composes: the decisions live in :mod:`lakehouse.build` and
:mod:`lakehouse.join`. It is what ``lakehouse ingest``/``lakehouse join`` and the job entry
points in ``pipelines/`` call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lakehouse.config import IngestConfig, JoinConfig, KafkaConfig, Settings, StreamConfig
from lakehouse.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from lakehouse.build import BatchReport
    from lakehouse.join import JoinBatchReport
    from lakehouse.time import Clock


def open_stream(spark: SparkSession, cfg: StreamConfig, kafka: KafkaConfig) -> DataFrame:
    """The raw record stream of a pipeline (Kafka or JSON-lines files)."""
    from lakehouse.sources import read_files_stream, read_kafka_stream

    if cfg.source == "files":
        assert cfg.path is not None
        options: dict[str, str] = {"format": cfg.file_format}
        if cfg.max_records_per_trigger:
            options["maxFilesPerTrigger"] = str(cfg.max_records_per_trigger)
        return read_files_stream(
            spark, cfg.path, topic=cfg.topics[0] if cfg.topics else None, options=options
        )
    if not kafka.bootstrap_servers:
        raise ConfigError(
            "source 'kafka' needs kafka.bootstrap_servers (or "
            "LAKEHOUSE_KAFKA__BOOTSTRAP_SERVERS, or --bootstrap-servers)",
            setting="kafka.bootstrap_servers",
        )
    options = kafka_source_options(kafka)
    if cfg.max_records_per_trigger:
        options["maxOffsetsPerTrigger"] = str(cfg.max_records_per_trigger)
    starting: Any = cfg.starting_offsets
    if starting not in ("earliest", "latest"):
        import json

        try:
            starting = {
                t: {int(p): int(o) for p, o in parts.items()}
                for t, parts in json.loads(starting).items()
            }
        except (ValueError, AttributeError) as e:
            raise ConfigError(
                f"starting_offsets must be 'earliest', 'latest' or JSON like "
                f'\'{{"topic": {{"0": 42}}}}\', got {cfg.starting_offsets!r}',
                setting="starting_offsets",
            ) from e
    return read_kafka_stream(
        spark,
        bootstrap_servers=kafka.bootstrap_servers,
        topics=cfg.topics,
        starting_offsets=starting,
        options=options,
    )


def kafka_source_options(kafka: KafkaConfig) -> dict[str, str]:
    """The Kafka source options of the ``[kafka]`` settings: librdkafka settings with the
    ``kafka.`` prefix, the properties file, and the broker-outage backoff."""
    options = {f"kafka.{k}": v for k, v in kafka.options.items()}
    if kafka.config_file:
        options["kafka.config.file"] = kafka.config_file
    options["outageTimeoutMs"] = str(kafka.outage_timeout_ms)
    options["outageBackoffMs"] = str(kafka.outage_backoff_ms)
    options["outageBackoffMaxMs"] = str(kafka.outage_backoff_max_ms)
    return options


def _start(
    stream: DataFrame,
    cfg: StreamConfig,
    fn: Callable[[DataFrame, int], None],
    name: str,
    *,
    command: str,
    tables: list[str],
    take_over: bool,
    on_notice: Callable[[str], None] | None,
) -> StreamingQuery:
    """Take the writer lease of ``tables`` (see :mod:`lakehouse.lease`), then start the
    query with the lease's fence before every micro-batch; the lease is released when the
    query stops."""
    from lakehouse.lease import acquire

    lease = acquire(
        tables,
        command=command,
        pipeline_id=cfg.pipeline_id,
        query_name=name,
        checkpoint=cfg.checkpoint,
        timeout_ms=cfg.writer_lease_timeout_ms,
        take_over=take_over,
    )
    if on_notice is not None:
        for holder in lease.taken_from:
            on_notice(f"writer lease taken over from {holder}")

    def fenced(df: DataFrame, batch_id: int) -> None:
        lease.check()  # a job that lost its lease stops before writing anything
        fn(df, batch_id)

    writer = stream.writeStream.queryName(name).option("checkpointLocation", cfg.checkpoint)
    writer = writer.foreachBatch(fenced)
    if cfg.trigger == "available-now":
        writer = writer.trigger(availableNow=True)
    elif cfg.trigger == "once":
        writer = writer.trigger(once=True)
    else:
        writer = writer.trigger(processingTime=cfg.interval)
    try:
        query = writer.start()
    except BaseException:
        lease.release()
        raise

    def lost(message: str) -> None:
        # Stop from the watcher thread (the CLI then reports lakehouse.lease.lost()); the
        # fence covers a batch that is already running.
        query.stop()

    lease.watch(lambda: bool(query.isActive), on_lost=lost)
    return query


def start_ingest(
    spark: SparkSession,
    settings: Settings,
    *,
    on_batch: Callable[[BatchReport], None] | None = None,
    take_over: bool = False,
    on_notice: Callable[[str], None] | None = None,
) -> StreamingQuery:
    """Start the CDC ingest described by ``settings.ingest``.

    Takes the writer lease of the build tables first (:mod:`lakehouse.lease`): a live
    lease of another job raises :class:`~lakehouse.errors.WriterLeaseError` unless
    ``take_over``; ``on_notice`` hears about leases taken over.

    The tables' notification and heartbeat topics are read in the same stream as the data
    topics (they must exist when the query starts). With a Kafka source the sink also gets a
    probe of the data topics' high watermarks and the query's offsets log, so a snapshot
    signal covers every record produced before it (see :mod:`lakehouse.build.signals`).
    """
    from lakehouse.build import BuildSink, BuildTarget, SnapshotOptions
    from lakehouse.build.signals import checkpoint_offsets_reader, kafka_offsets_probe

    cfg: IngestConfig | None = settings.ingest
    if cfg is None:
        raise ConfigError("no [ingest] section in the configuration", setting="ingest")
    targets = [
        BuildTarget(
            t.table,
            key_columns=tuple(t.key),
            source_table=t.source_table,
            event_time_column=t.event_time,
            out_of_orderness_ms=t.out_of_orderness_ms,
            snapshot=SnapshotOptions(
                signals=frozenset(t.snapshot_signals),
                notification_topic=t.notification_topic,
                heartbeat_topic=t.heartbeat_topic,
                resnapshot_join=t.resnapshot_join,
                resnapshot_deletes=t.resnapshot_deletes,
            ),
        )
        for t in cfg.tables
    ]
    signal_topics = sorted({topic for t in targets for topic in t.snapshot.topics})
    if signal_topics and cfg.source != "kafka":
        raise ConfigError(
            f"ingest.tables[].notification_topic/heartbeat_topic {signal_topics} need "
            f"source 'kafka' (source {cfg.source!r} has one topic for all records); remove "
            "them, or read the CDC stream from Kafka",
            setting="ingest.tables.notification_topic",
        )
    data_topics = [t for t in cfg.topics if t not in signal_topics]
    stream_cfg = cfg.model_copy(update={"topics": [*data_topics, *signal_topics]})
    probe = None
    if cfg.source == "kafka" and settings.kafka.bootstrap_servers and data_topics:
        options = kafka_source_options(settings.kafka)
        probe = kafka_offsets_probe(settings.kafka.bootstrap_servers, data_topics, options=options)
    sink = BuildSink(
        targets,
        dead_letter_uri=cfg.dead_letter_table,
        pipeline_id=cfg.pipeline_id,
        on_batch=on_batch,
        offsets_probe=probe,
        planned_offsets=checkpoint_offsets_reader(cfg.checkpoint)
        if cfg.source == "kafka"
        else None,
    )
    return _start(
        open_stream(spark, stream_cfg, settings.kafka),
        cfg,
        sink,
        cfg.pipeline_id,
        command="ingest",
        tables=written_tables(settings, "ingest"),
        take_over=take_over,
        on_notice=on_notice,
    )


def written_tables(settings: Settings, command: str) -> list[str]:
    """The tables a job leases (:mod:`lakehouse.lease`): the build tables of the ingest;
    the output and pending tables of a join (dead-letter tables are shared, not leased)."""
    if command == "ingest":
        return [t.table for t in settings.ingest.tables] if settings.ingest else []
    if settings.join is None:
        return []
    return [settings.join.output_table, settings.join.pending_table]


def join_options(cfg: JoinConfig) -> Any:
    """The :class:`lakehouse.join.JoinOptions` of a join configuration."""
    from lakehouse.join import JoinOptions

    return JoinOptions(
        build_uri=cfg.build_table,
        output_uri=cfg.output_table,
        pending_uri=cfg.pending_table,
        dead_letter_uri=cfg.dead_letter_table,
        pipeline_id=cfg.pipeline_id,
        probe_schema=cfg.probe_schema,
        probe_key=tuple(cfg.probe_key),
        probe_time=cfg.probe_time,
        probe_id=cfg.probe_id,
        build_key=tuple(cfg.build_key),
        mode=cfg.mode,
        join_type=cfg.join_type,
        watermark=cfg.watermark,
        out_of_orderness_ms=cfg.out_of_orderness_ms,
        late_policy=cfg.late_policy,
        build_idle_timeout_ms=cfg.build_idle_timeout_ms,
        pending_ttl_ms=cfg.pending_ttl_ms,
        expiry_policy=cfg.expiry_policy,
        build_prefix=cfg.build_prefix,
        pending_max_rows=cfg.pending_max_rows,
        pending_max_age_ms=cfg.pending_max_age_ms,
        on_pending_bound=cfg.on_pending_bound,
    )


def start_join(
    spark: SparkSession,
    settings: Settings,
    *,
    on_batch: Callable[[JoinBatchReport], None] | None = None,
    clock: Clock | None = None,
    take_over: bool = False,
    on_notice: Callable[[str], None] | None = None,
) -> StreamingQuery:
    """Start the temporal join described by ``settings.join``.

    Takes the writer lease of the output and pending tables first (:mod:`lakehouse.lease`);
    ``take_over`` and ``on_notice`` as in :func:`start_ingest`.
    """
    from lakehouse.join import TemporalJoin

    cfg: JoinConfig | None = settings.join
    if cfg is None:
        raise ConfigError("no [join] section in the configuration", setting="join")
    operator = TemporalJoin(join_options(cfg), clock=clock, on_batch=on_batch)
    stream = open_stream(spark, cfg, settings.kafka)
    if cfg.trigger == "processing-time":
        stream = stream.unionByName(tick_stream(spark))
    return _start(
        stream,
        cfg,
        operator,
        cfg.pipeline_id,
        command="join",
        tables=written_tables(settings, "join"),
        take_over=take_over,
        on_notice=on_notice,
    )


def tick_stream(spark: SparkSession) -> DataFrame:
    """One row per micro-batch, in the raw schema, on :data:`~lakehouse.join.operator.
    TICK_TOPIC`: it makes Spark run the join every trigger interval even when the probe
    stream is quiet, so waiting rows are released as soon as the build side allows."""
    from pyspark.sql import functions as F

    from lakehouse.join.operator import TICK_TOPIC

    ticks = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 1)
        .option("numPartitions", 1)
        .load()
    )
    return ticks.select(
        F.lit(None).cast("binary").alias("key"),
        F.lit(None).cast("binary").alias("value"),
        F.lit(TICK_TOPIC).alias("topic"),
        F.lit(-1).cast("int").alias("partition"),
        F.col("value").alias("offset"),
        F.col("timestamp"),
        F.lit(0).cast("int").alias("timestampType"),
    )
