"""The Python API: a streaming DataFrame in, Spark's own ``DataStreamWriter`` out.

:func:`ingest_cdc` and :func:`temporal_join` take a stream of raw records (the columns of
Spark's Kafka source: ``key``, ``value``, ``topic``, ``partition``, ``offset``,
``timestamp``, ``timestampType``; :func:`lakehouse.read_kafka_stream`,
:func:`lakehouse.read_files_stream` and :func:`lakehouse.read_delta_stream` give them, and
:func:`lakehouse.rows_as_records` makes them of any stream of rows) and the job's options,
and return a :class:`PipelineWriter`: a :class:`pyspark.sql.streaming.DataStreamWriter`
whose ``foreachBatch`` is already the job's. Trigger, checkpoint and query name are set as on any
Spark stream::

    from lakehouse import JoinOptions, read_kafka_stream, temporal_join

    query = (
        temporal_join(orders, JoinOptions(...))
        .option("checkpointLocation", "state/join-orders")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()

``lakehouse ingest`` and ``lakehouse join`` are built on these two functions (one code path);
the command line adds its settings file, progress output, and riding out Kafka outages.

Contract of the writer (what a plain ``DataStreamWriter`` would not do):

* **A checkpoint is required**, given as the ``checkpointLocation`` option (or Spark's
  ``spark.sql.streaming.checkpointLocation`` with a query name): exactly-once rests on it,
  and each table records the checkpoint it was written from.
* **``start()`` guards the tables** before Spark starts the query (:func:`lakehouse.jobs.guard`):
  no damaged file, tables of the right kind, the checkpoint bound to this pipeline, and the
  writer lease of the tables it writes, which the query holds while it runs (heartbeat) and
  gives back when it stops. Each micro-batch first checks the lease is still its own.
* **The sink is the job's**: ``foreachBatch``, ``foreach``, ``format`` and ``toTable`` raise
  ``TypeError``; ``start()`` takes no ``path``, ``format`` or ``partitionBy``.
* **The session gets the settings the job needs**: ``spark.sql.session.timeZone=UTC`` (the
  tables' times are UTC), Parquet timestamps in microseconds and Arrow for pandas; the
  session must have delta-spark and Spark's Kafka source on its classpath.

Spark Connect sessions are not supported: their ``foreachBatch`` runs the function in a
separate Python process on the server, away from the lease and the progress callbacks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming import DataStreamWriter

from lakehouse.config import IngestOptions
from lakehouse.delta.names import register_created
from lakehouse.errors import ConfigError
from lakehouse.jobs import JobOptions, guard, job_of, resolve_tables
from lakehouse.join.options import JoinOptions
from lakehouse.lease import DEFAULT_TIMEOUT_MS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

    from lakehouse.dimension import BatchReport
    from lakehouse.join import JoinBatchReport
    from lakehouse.lease import WriterLease
    from lakehouse.sources import KafkaSourceOptions
    from lakehouse.time import Clock

__all__ = ["PipelineWriter", "ingest_cdc", "temporal_join"]

#: Spark's setting of the checkpoint root used when a query has a name but no location.
_CHECKPOINT_ROOT = "spark.sql.streaming.checkpointLocation"


class PipelineWriter(DataStreamWriter):
    """Spark's ``DataStreamWriter`` for one lakehouse job (see the module docstring).

    Obtain it from :func:`ingest_cdc` or :func:`temporal_join`; set trigger, checkpoint and
    query name as on any writer, then :meth:`start` it.
    """

    def __init__(
        self,
        df: DataFrame,
        options: JobOptions,
        handler: Callable[[DataFrame, int], None],
        *,
        lease_timeout_ms: int = DEFAULT_TIMEOUT_MS,
        on_checkpoint: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(df)
        self.job_options = options
        self._handler = handler
        self._lease_timeout_ms = lease_timeout_ms
        self._on_checkpoint = on_checkpoint
        self._checkpoint_option: str | None = None
        self._query_name: str | None = None
        self._lease: WriterLease | None = None
        self._checkpoint: str | None = None
        self._identity: dict[str, str] = {}
        DataStreamWriter.foreachBatch(self, self._batch)

    # ---- Spark's settings, seen on their way to Spark

    def option(self, key: str, value: Any) -> PipelineWriter:
        """Spark's ``option``; the checkpoint location is remembered for the guard."""
        if key.lower() == "checkpointlocation":
            self._checkpoint_option = None if value is None else str(value)
        super().option(key, value)
        return self

    def options(self, **options: Any) -> PipelineWriter:
        """Spark's ``options`` (see :meth:`option`)."""
        for key, value in options.items():
            self.option(key, value)
        return self

    def queryName(self, queryName: str) -> PipelineWriter:
        """Spark's ``queryName``; the name also goes into the writer lease."""
        super().queryName(queryName)
        self._query_name = queryName
        return self

    # ---- the sink is the job's

    def foreachBatch(self, func: Any) -> PipelineWriter:
        raise TypeError(self._own_sink("foreachBatch"))

    def foreach(self, f: Any) -> PipelineWriter:
        raise TypeError(self._own_sink("foreach"))

    def format(self, source: str) -> PipelineWriter:
        raise TypeError(self._own_sink("format"))

    def toTable(self, *args: Any, **kwargs: Any) -> StreamingQuery:
        raise TypeError(self._own_sink("toTable"))

    def _own_sink(self, method: str) -> str:
        return (
            f"this writer's sink is the lakehouse {job_of(self.job_options)}: {method}() would "
            "replace it; set the trigger, checkpointLocation and queryName, then start()"
        )

    # ---- start

    @property
    def checkpoint(self) -> str | None:
        """The checkpoint the query will use: the ``checkpointLocation`` option, else Spark's
        ``spark.sql.streaming.checkpointLocation`` root with the query name, else None."""
        if self._checkpoint_option:
            return self._checkpoint_option
        root = self._spark.conf.get(_CHECKPOINT_ROOT, None)
        if root and self._query_name:
            return f"{root.rstrip('/')}/{self._query_name}"
        return None

    def hold(self, *, take_over: bool = False) -> WriterLease:
        """Guard the job's tables and take their writer lease (:func:`lakehouse.jobs.guard`),
        for a caller that starts the query more than once under one lease (the command line
        restarts it after a Kafka outage). The caller watches and releases the lease;
        :meth:`start` does both by itself when no lease is held. A writer that holds the
        lease of its checkpoint already gets the same lease back.

        Raises:
            ConfigError: no checkpoint is set, a table of the wrong kind, or a checkpoint
                bound to another pipeline.
            DamagedStateError, WriterLeaseError: as :func:`lakehouse.jobs.guard`.
        """
        checkpoint = self.checkpoint
        if self._lease is not None and not self._lease.released and checkpoint == self._checkpoint:
            return self._lease  # held already (a second call changes nothing)
        if checkpoint is None:
            raise ConfigError(
                f"the lakehouse {job_of(self.job_options)} needs a checkpoint (exactly-once "
                "rests on it): add .option('checkpointLocation', '<path every node reaches>') "
                "before start()",
                setting="checkpointLocation",
            )
        lease = guard(
            self.job_options,
            checkpoint,
            query_name=self._query_name or self.job_options.pipeline_id,
            lease_timeout_ms=self._lease_timeout_ms,
            take_over=take_over,
        )
        self._lease, self._checkpoint = lease, checkpoint
        self._identity = {}
        if self._on_checkpoint is not None:
            self._on_checkpoint(checkpoint)
        return lease

    def start(
        self,
        path: str | None = None,
        format: str | None = None,
        outputMode: str | None = None,
        partitionBy: str | list[str] | None = None,
        queryName: str | None = None,
        **options: Any,
    ) -> StreamingQuery:
        """Guard the tables, take their writer lease, and start the query (Spark's
        ``start``). The lease is held while the query runs and given back when it stops.

        Raises:
            TypeError: a ``path``, ``format`` or ``partitionBy`` (the job writes its own
                tables).
            ConfigError, DamagedStateError, WriterLeaseError: as :meth:`hold`.
        """
        if path is not None or format is not None or partitionBy is not None:
            raise TypeError(
                f"the lakehouse {job_of(self.job_options)} writes its own tables: start() "
                "takes no path, format or partitionBy"
            )
        if queryName is not None:
            self.queryName(queryName)
        self.options(**options)
        if outputMode is not None:
            self.outputMode(outputMode)
        held = self._lease is not None and not self._lease.released
        lease = self._lease if held else self.hold()
        assert lease is not None
        try:
            query = super().start()
        except BaseException:
            if not held:
                lease.release()
            raise
        if not held:
            lease.watch(lambda: query.isActive, on_lost=lambda _: query.stop())
        return query

    # ---- every micro-batch

    def _batch(self, df: DataFrame, batch_id: int) -> None:
        from lakehouse import delta
        from lakehouse.checkpoint import binding_metadata
        from lakehouse.failpoints import failpoint

        failpoint("batch.start", batch_id)
        assert self._lease is not None and self._checkpoint is not None
        self._lease.check()  # a job that lost its lease stops before writing anything
        if not self._identity:  # Spark has written the checkpoint's id by the first batch
            self._identity = binding_metadata(self._checkpoint)
        with delta.commit_metadata(self._identity):  # every version names its checkpoint
            self._handler(df, batch_id)
        register_created(self._spark)  # tables given by a name the catalog did not know yet
        failpoint(f"{job_of(self.job_options)}.batch_end", batch_id)


def ingest_cdc(
    changes: DataFrame,
    options: IngestOptions,
    *,
    kafka: KafkaSourceOptions | None = None,
    on_batch: Callable[[BatchReport], None] | None = None,
    lease_timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> PipelineWriter:
    """The CDC ingest of ``changes`` (raw Debezium records) into the build tables of
    ``options``, as a writer to start.

    Args:
        changes: a streaming DataFrame of raw records, the columns of Spark's Kafka source
            (``key``, ``value``, ``topic``, ``partition``, ``offset``, ``timestamp``,
            ``timestampType``). When a table has a ``notification_topic`` or
            ``heartbeat_topic``, the stream must read those topics too.
        options: the build tables, the dead-letter table and the pipeline id.
        kafka: the Kafka source options the stream was opened with
            (:func:`lakehouse.kafka_stream_options`), when it reads Kafka: a snapshot signal
            then covers every record produced before it (the topics' high watermarks are
            read when it arrives) and partitions whose tail holds no record. Without it a
            signal covers what the stream has consumed.
        on_batch: called with each micro-batch's report.
        lease_timeout_ms: a writer lease without a heartbeat for this long is stale.

    Raises:
        ConfigError: ``changes`` lacks the raw columns.
    """
    from lakehouse.dimension import BuildSink, BuildTarget
    from lakehouse.dimension.signals import checkpoint_offsets_reader, kafka_offsets_probe

    raw = _raw_records(changes, "ingest_cdc")
    options = resolve_tables(raw.sparkSession, options)
    targets = [
        BuildTarget(
            t.table,
            key_columns=tuple(t.key),
            source_table=t.source_table,
            event_time_column=t.event_time,
            out_of_orderness_ms=t.out_of_orderness_ms,
            max_future_ms=t.max_future_ms,
            snapshot=t.snapshot,
        )
        for t in options.tables
    ]
    probe = None
    if kafka is not None:
        signal_topics = set(options.signal_topics)
        data_topics = [t for t in kafka.topics if t not in signal_topics]
        if data_topics:
            probe = kafka_offsets_probe(
                kafka.bootstrap_servers, data_topics, options=kafka.kafka_options
            )
    sink = BuildSink(
        targets,
        dead_letter_table=options.dead_letter_table,
        pipeline_id=options.pipeline_id,
        max_record_bytes=options.max_record_bytes,
        table_parallelism=options.table_parallelism,
        decode_tasks=options.decode_tasks,
        on_batch=on_batch,
        offsets_probe=probe,
    )

    def bind(checkpoint: str) -> None:
        if kafka is not None:  # the offsets each batch was planned to, from Spark's log
            sink.planned_offsets = checkpoint_offsets_reader(checkpoint)

    return PipelineWriter(raw, options, sink, lease_timeout_ms=lease_timeout_ms, on_checkpoint=bind)


def temporal_join(
    probe: DataFrame,
    options: JoinOptions,
    *,
    on_batch: Callable[[JoinBatchReport], None] | None = None,
    clock: Clock | None = None,
    lease_timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> PipelineWriter:
    """The temporal join of ``probe`` (raw records whose ``value`` is a JSON object of
    ``options.probe_schema``) with the build table of ``options``, as a writer to start.

    The stream is joined with one tick per micro-batch, so a processing-time trigger runs
    the join every interval even when the probe is quiet, and an available-now run has a
    batch even when no probe row is new: waiting rows are released as soon as the build side
    allows.

    Args:
        probe: a streaming DataFrame of raw records, the columns of Spark's Kafka source
            (``key``, ``value``, ``topic``, ``partition``, ``offset``, ``timestamp``,
            ``timestampType``).
        options: the join (:class:`~lakehouse.join.JoinOptions`).
        on_batch: called with each micro-batch's report.
        clock: the wall clock (tests pin it).
        lease_timeout_ms: a writer lease without a heartbeat for this long is stale.

    Raises:
        ConfigError: ``probe`` lacks the raw columns.
    """
    from lakehouse.join import TemporalJoin

    stream = _raw_records(probe, "temporal_join").unionByName(tick_stream(probe))
    options = resolve_tables(stream.sparkSession, options)
    operator = TemporalJoin(options, clock=clock, on_batch=on_batch, ticks=True)
    return PipelineWriter(stream, options, operator, lease_timeout_ms=lease_timeout_ms)


def tick_stream(like: DataFrame) -> DataFrame:
    """One row per micro-batch, in the raw schema, on :data:`~lakehouse.join.layout.
    TICK_TOPIC`, from the session of ``like``."""
    from pyspark.sql import functions as F

    from lakehouse.join.layout import TICK_TOPIC

    ticks = (
        like.sparkSession.readStream.format("rate-micro-batch")
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


def _raw_records(df: DataFrame, function: str) -> DataFrame:
    """``df``'s raw record columns, in the raw schema's order (a ``key`` or ``value`` of
    strings becomes bytes; other columns, such as Kafka's ``headers``, are left out), on a
    session prepared for the job.

    Raises:
        ConfigError: ``df`` is not streaming, is a Spark Connect DataFrame, or lacks a raw
            column or has one of another type.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StringType

    from lakehouse.sources import RAW_SCHEMA, RAW_SCHEMA_DDL
    from lakehouse.spark import prepare_session

    if not hasattr(df, "_jdf"):
        raise ConfigError(
            f"lakehouse.{function} needs a classic Spark session, not Spark Connect (its "
            "foreachBatch runs in a separate process on the server)",
            setting="spark",
        )
    if not df.isStreaming:
        raise ConfigError(
            f"lakehouse.{function} takes a streaming DataFrame (spark.readStream...), got a "
            "batch one",
            setting="input",
        )
    prepare_session(df.sparkSession)
    have = {f.name: f.dataType for f in df.schema.fields}
    columns = []
    for field in RAW_SCHEMA.fields:
        got = have.get(field.name)
        if got == field.dataType:
            columns.append(F.col(field.name))
        elif isinstance(field.dataType, BinaryType) and isinstance(got, StringType):
            columns.append(F.col(field.name).cast("binary"))
        else:
            found = "missing" if got is None else f"of type {got.simpleString()}"
            raise ConfigError(
                f"lakehouse.{function} reads raw records ({RAW_SCHEMA_DDL}, the columns of "
                f"Spark's Kafka source); column {field.name!r} is {found}. Read the stream "
                "with lakehouse.read_kafka_stream, read_files_stream or read_delta_stream, "
                "turn rows into records with lakehouse.rows_as_records, or select those "
                "columns",
                setting="input",
            )
    return df.select(*columns)
