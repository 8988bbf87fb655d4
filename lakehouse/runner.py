"""Compose sources, sinks and triggers into running streaming queries.

This module only composes: the decisions live in :mod:`lakehouse.dimension` and
:mod:`lakehouse.join`. It is what ``lakehouse ingest``/``lakehouse join`` and the job entry
points in ``pipelines/`` call. A query that reads Kafka is checked before it starts
(:func:`check_kafka_stream`) and supervised while it runs (:class:`SupervisedQuery`: broker
outages are ridden out by restarting it from its checkpoint; lost offsets are explained).
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lakehouse import jobs
from lakehouse.checkpoint import has_offsets
from lakehouse.config import IngestConfig, JoinConfig, KafkaConfig, Settings, StreamConfig
from lakehouse.delta import checkpointer
from lakehouse.errors import ConfigError
from lakehouse.jobs import Job

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from lakehouse.api import PipelineWriter
    from lakehouse.dimension import BatchReport
    from lakehouse.join import JoinBatchReport, JoinOptions
    from lakehouse.sources import DeltaSourceOptions, KafkaSourceOptions
    from lakehouse.time import Clock


def open_stream(
    spark: SparkSession, cfg: StreamConfig, kafka: KafkaConfig, *, check: bool = True
) -> DataFrame:
    """The raw record stream of a pipeline (Kafka, JSON-lines files, or a Delta table's rows).

    A Kafka stream is checked first (``check``, see :func:`check_kafka_stream`): the brokers
    answer, the topics exist, explicit starting offsets fit.
    """
    from lakehouse.sources import read_files_stream
    from lakehouse.sources.streams import open_kafka_stream

    if cfg.source == "delta":
        from lakehouse.sources.delta import open_delta_stream

        return open_delta_stream(spark, cfg.delta_source)
    if cfg.source == "files":
        assert cfg.path is not None
        options: dict[str, str] = {"format": cfg.file_format}
        if cfg.max_records_per_trigger:
            options["maxFilesPerTrigger"] = str(cfg.max_records_per_trigger)
        return read_files_stream(
            spark, cfg.path, topic=cfg.topics[0] if cfg.topics else None, options=options
        )
    source = kafka_stream(cfg, kafka)
    if check:
        check_kafka_stream(source, cfg.checkpoint)
    return open_kafka_stream(spark, source)


def kafka_stream(cfg: StreamConfig, kafka: KafkaConfig) -> KafkaSourceOptions:
    """The validated Kafka source options of a pipeline (no Spark, no Kafka).

    Raises:
        ConfigError: no bootstrap servers, malformed starting offsets, or a Kafka setting
            without a translation for Spark's Kafka source.
    """
    from lakehouse.sources import kafka_stream_options

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
    return kafka_stream_options(
        bootstrap_servers=kafka.bootstrap_servers,
        topics=cfg.topics,
        starting_offsets=starting,
        options=options,
    )


def kafka_source_options(kafka: KafkaConfig) -> dict[str, str]:
    """The Kafka source options of the ``[kafka]`` settings: the librdkafka settings with the
    ``kafka.`` prefix and the properties file (:mod:`lakehouse.sources.kafka` translates them
    for Spark's source; :mod:`lakehouse.dimension.signals` reads watermarks with them)."""
    options = {f"kafka.{k}": v for k, v in kafka.options.items()}
    if kafka.config_file:
        options["kafka.config.file"] = kafka.config_file
    return options


def check_kafka_stream(source: KafkaSourceOptions, checkpoint: str) -> None:
    """The stream's first contact with Kafka, before Spark starts it.

    Spark's Kafka source waits without a word on a topic that does not exist, and takes
    minutes of retries to report brokers that never answered; this check says so at once,
    naming the address, the topic or the security settings. Without a checkpoint it also
    resolves explicit ``startingOffsets`` (every partition named, each offset held).

    Raises:
        BrokerUnavailableError: no broker answered (a wrong address is not an outage).
        SourceError: a topic does not exist, authentication or authorisation failed, or an
            explicit starting offset is not in its partition.
        ConfigError: explicit ``startingOffsets`` do not name every partition.
    """
    from lakehouse.sources.kafka import KafkaOffsetsReader

    reader = KafkaOffsetsReader(source)
    try:
        if has_offsets(checkpoint):
            reader.watermarks()
        else:
            reader.initialOffset()
    finally:
        reader.stop()


def _check_topic_ids(
    source: KafkaSourceOptions, checkpoint: str, kafka: KafkaConfig | None
) -> None:
    """Refuse a topic recreated since the checkpoint recorded its offsets (see
    :func:`lakehouse.checkpoint.check_topics`)."""
    from lakehouse.checkpoint import check_topics
    from lakehouse.sources.kafka import KafkaOffsetsReader

    reader = KafkaOffsetsReader(source)
    try:
        ids = reader.topic_ids()
    finally:
        reader.stop()
    check_topics(checkpoint, ids, on_recreated=kafka.on_recreated_topic if kafka else "fail")


def _report(message: str) -> None:
    """One line for the operator on stderr, next to the pipeline's progress lines."""
    print(f"lakehouse: {message}", file=sys.stderr, flush=True)


def _first_sentence(text: str) -> str:
    head, sep, _ = text.partition(". ")
    return (head if sep else text).strip()


def _probe_cause(error: BaseException) -> str:
    """The detail of a failed probe ("Connect to ... failed: Connection refused"), without
    the address and advice the outage line already gives."""
    text = str(error)
    match = re.search(r" within \d+ ms while [^:]*: (.*?)\. Check ", text)
    return match.group(1) if match else _first_sentence(text)


def _failure_text(error: BaseException) -> str:
    parts = [str(error)]
    cause = getattr(error, "_cause", None) or error.__cause__
    if cause is not None:
        parts.append(str(cause))
    return "\n".join(parts)


class SupervisedQuery:
    """A streaming query that the runner keeps going through Kafka broker outages.

    It behaves as the :class:`~pyspark.sql.streaming.StreamingQuery` it wraps (attributes
    the class does not define are the current query's) and, when the stream reads Kafka:

    * a failure of Spark's Kafka source because the brokers stopped answering (they were
      reached when the stream started, see :func:`check_kafka_stream`) is an outage: one
      line on stderr per attempt names the address and the retry; the runner waits with
      exponential backoff (``kafka.outage_backoff_ms`` doubling up to
      ``kafka.outage_backoff_max_ms``), asks the brokers directly whether they answer again,
      and then restarts the query from its checkpoint (the batch that failed is replayed:
      the sinks' idempotent writes make that exactly once). After
      ``kafka.outage_timeout_ms`` (0: at once) it gives up with a
      :class:`~lakehouse.errors.BrokerUnavailableError`. The outage clock restarts once a
      restarted query makes progress.
    * offsets Kafka no longer holds (Spark's ``KAFKA_DATA_LOSS``) end it with a
      :class:`~lakehouse.errors.SourceError` naming the topic, the partition and the way on
      (see :func:`lakehouse.sources.kafka.explain_failure`).

    A ``delta`` source's commit that updates or deletes rows ends it with a
    :class:`~lakehouse.errors.SourceError` naming the setting that skips such commits (see
    :func:`lakehouse.sources.delta.explain_failure`).

    Any other failure ends it with Spark's own exception. :meth:`exception` and
    :meth:`awaitTermination` report the final outcome, :attr:`isActive` stays true through
    an outage, and :meth:`stop` stops whichever query runs (or the wait).
    """

    def __init__(
        self,
        start: Callable[[], StreamingQuery],
        *,
        kafka: KafkaConfig | None = None,
        source: KafkaSourceOptions | None = None,
        delta: DeltaSourceOptions | None = None,
        report: Callable[[str], None] = _report,
    ) -> None:
        self._start_query = start
        self._kafka = kafka
        self._source = source
        self._delta = delta
        self._report = report
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._outage_started: float | None = None
        self._query = start()
        self._thread = threading.Thread(
            target=self._supervise, name=f"lakehouse-query-{self._query.name}", daemon=True
        )
        self._thread.start()

    # ---- the StreamingQuery surface

    @property
    def query(self) -> StreamingQuery:
        """The Spark query running now (a new one after each restart)."""
        return self._query

    @property
    def isActive(self) -> bool:
        """Whether the job runs (including while it waits out a broker outage)."""
        return not self._done.is_set()

    def exception(self) -> BaseException | None:
        """Why the job ended: a lakehouse error, Spark's exception, or None."""
        return self._error if self._done.is_set() else None

    def awaitTermination(self, timeout: float | None = None) -> bool | None:
        """Wait until the job ends (stopped, failed, or gave up on an outage).

        Returns None without ``timeout``, else whether it ended within ``timeout`` seconds.

        Raises:
            BaseException: the job ended with an error (see :meth:`exception`).
        """
        ended = self._done.wait(timeout)
        if ended and self._error is not None:
            raise self._error
        return ended if timeout is not None else None

    def stop(self) -> None:
        """Stop the query (or the outage wait) and wait until the job has ended."""
        with self._lock:
            self._stopping.set()
            query = self._query
        query.stop()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def processAllAvailable(self) -> None:
        """Spark's ``processAllAvailable`` on the current query."""
        self._query.processAllAvailable()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._query, name)

    # ---- supervision

    def _supervise(self) -> None:
        try:
            while True:
                query = self._query
                failure: BaseException | None = None
                try:
                    query.awaitTermination()
                except Exception as e:
                    failure = e
                if failure is None or self._stopping.is_set():
                    return
                if self._source is None or self._kafka is None:
                    self._error = self._explained(failure)
                    return
                if self._ride_out(query, failure):
                    continue
                return
        except BaseException as e:  # never leave a job that looks active forever
            self._error = self._error or e
        finally:
            # the Delta checkpoints its last batches made due, written before the job ends
            checkpointer.drain()
            self._done.set()

    def _explained(self, failure: BaseException) -> BaseException:
        """A failure of Delta's source that a setting answers, as its one-line error."""
        if self._delta is None:
            return failure
        from lakehouse.sources.delta import explain_failure

        explained = explain_failure(failure, self._delta)
        if explained is None:
            return failure
        explained.__cause__ = failure
        return explained

    def _watermarks(self, topic: str, partition: int) -> tuple[int, int] | None:
        from lakehouse.sources.kafka import KafkaOffsetsReader

        assert self._source is not None
        reader = KafkaOffsetsReader(replace(self._source, topics=(topic,)))
        try:
            return reader.watermarks().get((topic, partition))
        finally:
            reader.stop()

    def _probe(self, timeout_ms: float) -> BaseException | None:
        """None when the brokers answer for every topic of the stream, else why not."""
        from lakehouse.sources.kafka import KafkaOffsetsReader

        assert self._source is not None
        bounded = replace(
            self._source,
            metadata_timeout_ms=int(max(min(self._source.metadata_timeout_ms, timeout_ms), 1)),
        )
        reader = KafkaOffsetsReader(bounded)
        try:
            reader.watermarks()
        except Exception as e:
            return e
        finally:
            reader.stop()
        return None

    def _ride_out(self, query: StreamingQuery, failure: BaseException) -> bool:
        """Handle a failed Kafka query; True when a new query was started."""
        from lakehouse.errors import BrokerUnavailableError
        from lakehouse.sources.kafka import explain_failure, is_unreachable_failure

        assert self._kafka is not None and self._source is not None
        text = _failure_text(failure)
        explained = explain_failure(text, watermarks=self._watermarks)
        if explained is not None:
            explained.__cause__ = failure
            self._error = explained
            return False
        if not is_unreachable_failure(text):
            unreachable = self._probe(self._source.metadata_timeout_ms)
            if not isinstance(unreachable, BrokerUnavailableError):
                self._error = failure
                return False
        match = re.search(r"(\w+Exception: [^\n]*)", text)
        cause = _first_sentence(match.group(1) if match else text.splitlines()[0])
        kafka, address = self._kafka, self._source.bootstrap_servers
        try:
            progressed = bool(query.recentProgress)
        except Exception:
            progressed = False
        if progressed or self._outage_started is None:
            self._outage_started = time.monotonic()
        started = self._outage_started
        attempt = 0
        while True:
            elapsed_ms = (time.monotonic() - started) * 1000
            remaining_ms = kafka.outage_timeout_ms - elapsed_ms
            if remaining_ms <= 0:
                error = BrokerUnavailableError(
                    f"Kafka at {address!r} stayed unreachable for {elapsed_ms / 1000:.0f} s, "
                    f"longer than kafka.outage_timeout_ms ({kafka.outage_timeout_ms} ms), so "
                    "the query stops. Restart it once the brokers are back: it resumes from "
                    f"its checkpoint. Last error: {cause}"
                )
                error.__cause__ = failure
                self._error = error
                return False
            delay_ms = min(
                kafka.outage_backoff_ms * 2**attempt, kafka.outage_backoff_max_ms, remaining_ms
            )
            attempt += 1
            self._report(
                f"Kafka at {address!r} is unreachable (outage for {elapsed_ms / 1000:.0f} s, "
                f"attempt {attempt}): {cause}; retrying in {delay_ms / 1000:.1f} s, giving up "
                f"after {kafka.outage_timeout_ms / 1000:.0f} s (kafka.outage_timeout_ms)."
            )
            if self._stopping.wait(delay_ms / 1000):
                return False
            unreachable = self._probe(max(delay_ms, 1000))
            if unreachable is not None:
                cause = _probe_cause(unreachable)
                continue
            self._report(
                f"Kafka at {address!r} answers again after "
                f"{time.monotonic() - started:.0f} s and {attempt} retries; restarting the "
                "query from its checkpoint."
            )
            with self._lock:
                if self._stopping.is_set():
                    return False
                self._query = self._start_query()
            return True


def _run(
    writer: PipelineWriter,
    cfg: IngestConfig | JoinConfig,
    *,
    take_over: bool,
    on_notice: Callable[[str], None] | None,
    kafka: KafkaConfig,
    source: KafkaSourceOptions | None,
    delta: DeltaSourceOptions | None = None,
) -> SupervisedQuery:
    """Start a job's writer with the configuration's checkpoint, name and trigger, under one
    writer lease (:meth:`~lakehouse.api.PipelineWriter.hold`) for the whole job, supervised
    (broker outages of a Kafka ``source``, see :class:`SupervisedQuery`): the lease is held
    while the job runs, through an outage too, and released when it ends."""
    writer = writer.queryName(cfg.pipeline_id).option("checkpointLocation", cfg.checkpoint)
    if cfg.trigger == "available-now":
        writer.trigger(availableNow=True)
    elif cfg.trigger == "once":
        writer.trigger(once=True)
    else:
        writer.trigger(processingTime=cfg.interval)
    lease = writer.hold(take_over=take_over)
    if on_notice is not None:
        for holder in lease.taken_from:
            on_notice(f"writer lease taken over from {holder}")

    def start_query() -> StreamingQuery:
        if source is not None:  # the first start, and every restart after an outage
            _check_topic_ids(source, cfg.checkpoint, kafka)
        return writer.start()

    try:
        job = SupervisedQuery(start_query, kafka=kafka, source=source, delta=delta)
    except BaseException:
        lease.release()
        raise

    def lost(message: str) -> None:
        # Stop from the watcher thread (the CLI then reports lakehouse.lease.lost()); the
        # fence covers a batch that is already running.
        job.stop()

    lease.watch(lambda: job.isActive, on_lost=lost)
    return job


def start_ingest(
    spark: SparkSession,
    settings: Settings,
    *,
    on_batch: Callable[[BatchReport], None] | None = None,
    take_over: bool = False,
    on_notice: Callable[[str], None] | None = None,
) -> SupervisedQuery:
    """Start the CDC ingest described by ``settings.ingest`` (:func:`lakehouse.ingest_cdc`
    over the configured source).

    Takes the writer lease of the build tables first (:mod:`lakehouse.lease`): a live
    lease of another job raises :class:`~lakehouse.errors.WriterLeaseError` unless
    ``take_over``; ``on_notice`` hears about leases taken over.

    The tables' notification and heartbeat topics are read in the same stream as the data
    topics (they must exist when the query starts). With a Kafka source the sink also gets a
    probe of the data topics' high watermarks and the query's offsets log, so a snapshot
    signal covers every record produced before it (see :mod:`lakehouse.dimension.signals`).
    """
    from lakehouse.api import ingest_cdc

    cfg: IngestConfig | None = settings.ingest
    if cfg is None:
        raise ConfigError("no [ingest] section in the configuration", setting="ingest")
    signal_topics = list(cfg.signal_topics)
    if signal_topics and cfg.source != "kafka":
        raise ConfigError(
            f"ingest.tables[].notification_topic/heartbeat_topic {signal_topics} need "
            f"source 'kafka' (source {cfg.source!r} has one topic for all records); remove "
            "them, or read the CDC stream from Kafka",
            setting="ingest.tables.notification_topic",
        )
    data_topics = [t for t in cfg.topics if t not in signal_topics]
    stream_cfg = cfg.model_copy(update={"topics": [*data_topics, *signal_topics]})
    source = kafka_stream(stream_cfg, settings.kafka) if cfg.source == "kafka" else None
    writer = ingest_cdc(
        open_stream(spark, stream_cfg, settings.kafka),
        cfg,
        kafka=source,
        on_batch=on_batch,
        lease_timeout_ms=cfg.writer_lease_timeout_ms,
    )
    return _run(
        writer, cfg, take_over=take_over, on_notice=on_notice, kafka=settings.kafka, source=source
    )


def resolve_settings(spark: SparkSession, settings: Settings, command: Job) -> Settings:
    """``settings`` with the ``command`` job's tables given by catalog name replaced by their
    locations (:func:`lakehouse.jobs.resolve_tables`).

    Raises:
        ConfigError: a name is a table of another format, or its schema does not exist.
    """
    cfg = job_settings(settings, command)
    if cfg is None:
        return settings
    return settings.model_copy(update={command: jobs.resolve_tables(spark, cfg)})


def job_settings(settings: Settings, command: Job) -> IngestConfig | JoinConfig | None:
    """The ``[ingest]`` or ``[join]`` section of ``settings``."""
    return settings.ingest if command == "ingest" else settings.join


def check_damage(settings: Settings, command: Job) -> None:
    """Refuse a job whose checkpoint or tables hold a damaged file, without Spark
    (:func:`lakehouse.jobs.check_damage`): the CLI calls it before Spark starts, and every
    start of a query again.

    Raises:
        DamagedStateError: naming the file, what is wrong and the repair.
    """
    cfg = job_settings(settings, command)
    if cfg is not None:
        jobs.check_damage(cfg, cfg.checkpoint)


def check_table_kinds(settings: Settings, command: Job) -> None:
    """Refuse a job given a table of the wrong kind, without Spark when none is running
    (:func:`lakehouse.jobs.check_table_kinds`): the CLI calls it before Spark starts, and
    every start of a query again.

    Raises:
        ConfigError: one line naming the setting, the table, its kind and the kind expected.
    """
    cfg = job_settings(settings, command)
    if cfg is not None:
        jobs.check_table_kinds(cfg)


def check_join_key(settings: Settings) -> None:
    """Refuse a join whose probe key cannot pair up with its build table's key, from the
    build table's properties alone, read by delta-rs (no Spark): the same rule the join
    applies to each batch.

    Raises:
        ConfigError: the build table's key and ``probe_key`` differ in length.
    """
    from lakehouse import delta
    from lakehouse.dimension.layout import PROP_PRIMARY_KEY

    j = settings.join
    if j is None or j.build_key:
        return
    look = delta.peek(j.build_table)  # a table delta-rs cannot open is the join's to check
    if look is None or not look.exists:
        return
    recorded = look.properties.get(PROP_PRIMARY_KEY, "")
    key = [k for k in recorded.split(",") if k]
    if key and len(key) != len(j.probe_key):
        raise ConfigError(
            f"build table '{j.build_table}' has key {key} but join.probe_key (--probe-key) is "
            f"{list(j.probe_key)}; they must pair up in order (or set join.build_key)",
            setting="join.probe_key",
        )


def join_options(cfg: JoinConfig) -> JoinOptions:
    """The :class:`lakehouse.join.JoinOptions` of a join configuration: its own fields, without
    where the probe records come from and how the query runs (source, trigger, checkpoint).
    """
    from lakehouse.join import JoinOptions

    return JoinOptions.model_validate(cfg.model_dump(include=set(JoinOptions.model_fields)))


def start_join(
    spark: SparkSession,
    settings: Settings,
    *,
    on_batch: Callable[[JoinBatchReport], None] | None = None,
    clock: Clock | None = None,
    take_over: bool = False,
    on_notice: Callable[[str], None] | None = None,
) -> SupervisedQuery:
    """Start the temporal join described by ``settings.join`` (:func:`lakehouse.temporal_join`
    over the configured source).

    Takes the writer lease of the output and pending tables first (:mod:`lakehouse.lease`);
    ``take_over`` and ``on_notice`` as in :func:`start_ingest`.
    """
    from lakehouse.api import temporal_join

    cfg: JoinConfig | None = settings.join
    if cfg is None:
        raise ConfigError("no [join] section in the configuration", setting="join")
    source = kafka_stream(cfg, settings.kafka) if cfg.source == "kafka" else None
    writer = temporal_join(
        open_stream(spark, cfg, settings.kafka),
        join_options(cfg),
        on_batch=on_batch,
        clock=clock,
        lease_timeout_ms=cfg.writer_lease_timeout_ms,
    )
    return _run(
        writer,
        cfg,
        take_over=take_over,
        on_notice=on_notice,
        kafka=settings.kafka,
        source=source,
        delta=cfg.delta_source if cfg.source == "delta" else None,
    )
