"""Configuration: one TOML file, overridden by environment variables, overridden by flags.

Precedence (highest first): command-line flags, ``LAKEHOUSE_*`` environment variables, the
TOML file, defaults. Everything is validated by pydantic before any Spark or Delta work; an
invalid setting stops the command with a :class:`~lakehouse.errors.ConfigError` that names
the setting (``join.mode``) and what is wrong.

Environment variables address a setting by its path, upper-case, sections joined by two
underscores: ``LAKEHOUSE_JOIN__MODE=proctime``, ``LAKEHOUSE_KAFKA__BOOTSTRAP_SERVERS=...``.
List values are comma-separated (``LAKEHOUSE_JOIN__PROBE_KEY=currency``).

Kafka credentials never go on the command line: put them in a librdkafka properties file
(``kafka.config_file``) or in ``LAKEHOUSE_KAFKA__OPTIONS__SASL_PASSWORD``-style variables.

Example (``lakehouse.toml``)::

    [kafka]
    bootstrap_servers = "localhost:9092"

    [ingest]
    pipeline_id = "ingest-rates"
    source = "kafka"
    topics = ["dbserver1.public.rates"]
    checkpoint = "state/ingest-rates"
    dead_letter_table = "tables/dead_letter"

    [[ingest.tables]]
    table = "tables/rates"
    key = ["currency"]

    [join]
    pipeline_id = "join-orders"
    source = "kafka"
    topics = ["orders"]
    probe_schema = "order_id bigint, currency string, amount decimal(12,2), order_ts timestamp"
    probe_key = ["currency"]
    probe_time = "order_ts"
    probe_id = "order_id"
    build_table = "tables/rates"
    output_table = "tables/orders_enriched"
    pending_table = "tables/orders_pending"
    dead_letter_table = "tables/dead_letter"
    checkpoint = "state/join-orders"
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lakehouse.errors import ConfigError
from lakehouse.join.options import JoinOptions  # the join's settings, declared once

if TYPE_CHECKING:
    from lakehouse.dimension.signals.options import SnapshotOptions
    from lakehouse.sources.delta import DeltaSourceOptions

ENV_PREFIX = "LAKEHOUSE_"
Trigger = Literal["available-now", "processing-time", "once"]
Source = Literal["kafka", "files", "delta"]
FileFormat = Literal["lines", "envelope"]
LogFormat = Literal["text", "json"]
SnapshotSignal = Literal["notification", "heartbeat", "last", "log_record"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class SparkConfig(_Model):
    """Spark session settings (see :func:`lakehouse.spark.get_spark`)."""

    master: str | None = None
    """Spark master (`local[2]`, `spark://host:7077`, ...); default `LAKEHOUSE_SPARK_MASTER`,
    else `local[*]`. Ignored when a Spark session already exists (Databricks).
    """
    conf: dict[str, str] = Field(default_factory=dict)
    """Extra Spark configuration, set when lakehouse starts the session
    (`LAKEHOUSE_SPARK_CONF="k=v;k2=v2"` too). `spark.lakehouse.join.asof.narrowMaxBuildRows`
    (default 10000000) is the largest build table, in rows, that a row-time join looks up
    without a shuffle.
    """


class KafkaConfig(_Model):
    """Connection to the Kafka cluster, shared by ingest and join.

    ``options`` are librdkafka settings (``security.protocol``, ``sasl.mechanism``, ...);
    ``config_file`` is a librdkafka properties file, the place for secrets. confluent-kafka
    uses them as they are; Spark's Kafka source gets them translated for its Java client
    (see :func:`lakehouse.sources._java_client.java_client_properties`; a setting without a
    translation is refused, naming it).
    """

    bootstrap_servers: str | None = None
    """Kafka brokers, `host:port[,host:port...]`."""
    config_file: str | None = None
    """A librdkafka properties file: the place for credentials (never the command line)."""
    options: dict[str, str] = Field(default_factory=dict)
    """librdkafka settings (`security.protocol`, `sasl.mechanism`, ...), translated for Spark's
    Kafka source; a setting without a translation is refused, naming it.
    """
    outage_timeout_ms: int = Field(default=600_000, ge=0)
    """A running pipeline rides out a broker outage this long, restarting its query, then fails
    (`0`: at once).
    """
    outage_backoff_ms: int = Field(default=1_000, gt=0)
    """First retry delay during a broker outage; doubled up to `outage_backoff_max_ms`."""
    outage_backoff_max_ms: int = Field(default=30_000, gt=0)
    """Longest retry delay during a broker outage."""
    on_recreated_topic: Literal["fail", "continue"] = "fail"
    """A topic deleted and created again since the checkpoint recorded its offsets: `fail` stops
    before the query starts; `continue` goes on from the recorded offsets, skipping the new
    topic's records below them.
    """


class StreamConfig(_Model):
    """Where a pipeline reads from and how it runs."""

    source: Source = "kafka"
    """Where records come from: `kafka` (Spark's Kafka source), `files` (a directory of
    JSON-lines files) or, for the join's probe side, `delta` (a Delta table's appends).
    """
    topics: list[str] = Field(default_factory=list)
    """Kafka topics (source `kafka`)."""
    path: str | None = None
    """Directory of JSON-lines files (source `files`)."""
    file_format: FileFormat = "lines"
    """Files: `lines` (one record value per line) or `envelope` (`{"key", "value", "partition",
    "offset", "timestamp"}` per line).
    """
    delta_table: str | None = None
    """The Delta table to stream (source `delta`): its catalog name (`bronze.orders`) or its
    path; each row's columns are parsed as `probe_schema`.
    """
    starting_offsets: str = "earliest"
    """`earliest`, `latest`, or JSON `{"topic": {"partition": offset}}`; used only when the
    checkpoint is new.
    """
    starting_version: int | Literal["latest"] | None = None
    """Delta: the first table version to read, or `latest`; default the whole table. Used only
    when the checkpoint is new.
    """
    starting_timestamp: str | None = None
    """Delta: read from the first commit at or after this time (`2026-01-01`), instead of
    `starting_version`.
    """
    skip_change_commits: bool = False
    """Delta: skip commits that update or delete rows (rows joined before stay as they were)
    instead of stopping at them.
    """
    ignore_deletes: bool = False
    """Delta: skip commits that only delete rows (a retention job dropping old partitions)."""
    checkpoint: str
    """Spark checkpoint location (a path or `s3a://` URI every node reaches)."""
    trigger: Trigger = "processing-time"
    """`processing-time` runs a batch every `interval`; `available-now` processes what is there
    and stops; `once` runs one batch.
    """
    interval: str = "5 seconds"
    """Trigger interval of `processing-time`, e.g. `"5 seconds"`."""
    max_records_per_trigger: int | None = Field(default=None, gt=0)
    """Most input per batch: Kafka offsets (`maxOffsetsPerTrigger`) or files (files and Delta
    sources); unlimited by default (Delta: 1000 files).
    """
    max_bytes_per_trigger: str | None = None
    """Delta: soft bound on a batch's input (`512m`, `1g`)."""
    writer_lease_timeout_ms: int = Field(default=60_000, ge=1_000)
    """A writer lease without a heartbeat for this long is stale (the heartbeat comes every
    quarter of it).
    """

    @field_validator("starting_version")
    @classmethod
    def _a_version(cls, v: int | str | None) -> int | str | None:
        if isinstance(v, int) and v < 0:
            raise ValueError(f"a table version is 0 or more, or 'latest' (got {v})")
        return v

    @model_validator(mode="after")
    def _source_needs_location(self) -> StreamConfig:
        if self.source == "kafka" and not self.topics:
            raise ValueError("source 'kafka' needs topics (e.g. topics = [\"orders\"])")
        if self.source == "files" and not self.path:
            raise ValueError("source 'files' needs path (a directory of JSON-lines files)")
        if self.source == "delta" and not self.delta_table:
            raise ValueError(
                "source 'delta' needs delta_table (a catalog name such as bronze.orders, or a path)"
            )
        return self

    @property
    def delta_source(self) -> DeltaSourceOptions:
        """The Delta source options of source `delta`.

        Raises:
            ConfigError: a Delta setting is out of range, or the source is not `delta`.
        """
        from lakehouse.sources.delta import DeltaSourceOptions

        if self.source != "delta" or not self.delta_table:
            raise ConfigError(f"source is {self.source!r}, not 'delta'", setting="source")
        return DeltaSourceOptions(
            table=self.delta_table,
            starting_version=self.starting_version,
            starting_timestamp=self.starting_timestamp,
            max_files_per_trigger=self.max_records_per_trigger,
            max_bytes_per_trigger=self.max_bytes_per_trigger,
            skip_change_commits=self.skip_change_commits,
            ignore_deletes=self.ignore_deletes,
        )


class IngestTableConfig(_Model):
    """One build table fed by the ingest (see :class:`lakehouse.dimension.BuildTarget`).

    The snapshot settings (see :class:`lakehouse.dimension.SnapshotOptions`):
    ``notification_topic`` (Debezium's ``notification.sink.topic.name``) and
    ``heartbeat_topic`` (``__debezium-heartbeat.<topic.prefix>``) are read in the same stream
    as the data topics; ``snapshot_signals`` lists the signals that may set the marker (a
    topic signal without its topic is inactive); ``resnapshot_join`` says what joins read
    during a re-snapshot; ``resnapshot_deletes`` ends, at the end of a re-snapshot, the keys
    it did not re-read, and ``resnapshot_max_ended`` is the largest share of the live keys it
    may end before the ingest stops instead.
    """

    table: str
    """Build table: its location (a path or URI) or its catalog name (`schema.table`,
    `catalog.schema.table`; created and registered at the schema's location when new).
    """
    key: list[str] = Field(default_factory=list)
    """Primary-key columns; default the Debezium record key's fields."""
    source_table: str | None = None
    """Route only this source table's records here (`db.table` or `schema.table`); default all.
    One marker per build table.
    """
    event_time: str | None = None
    """Row column giving each version's start (timestamp, date, epoch ms or ISO string); default
    the change's `source.ts_ms`.
    """
    out_of_orderness_ms: int = Field(default=0, ge=0)
    """Build watermark = max event time - this - 1 ms."""
    notification_topic: str | None = None
    """Debezium notification topic (`notification.sink.topic.name`): the strongest snapshot
    signal. Kafka only.
    """
    heartbeat_topic: str | None = None
    """Debezium heartbeat topic (`__debezium-heartbeat.<topic.prefix>`). Kafka only."""
    snapshot_signals: list[SnapshotSignal] = Field(
        default_factory=lambda: list(get_args(SnapshotSignal))
    )
    """Which signals may set the snapshot marker: `notification`, `heartbeat`, `last`,
    `log_record` (a topic signal without its topic is inactive).
    """
    resnapshot_join: Literal["last-complete", "latest"] = "last-complete"
    """During a re-snapshot, joins read the last complete version (`last-complete`) or the half
    re-read latest one (`latest`).
    """
    resnapshot_deletes: bool = True
    """When a re-snapshot completes, end the versions of keys it did not re-read (synthetic
    deletes). Set `false` for filtered re-snapshots.
    """
    resnapshot_max_ended: float = Field(default=0.5, ge=0, le=1)
    """The largest share of the live keys a completing re-snapshot may end; more stops the
    ingest with an alert (`1`: no check).
    """
    max_future_ms: int | None = Field(default=86_400_000, gt=0)
    """A change whose event time is further than this past the wall clock is dead-lettered
    (`future_event_time`).
    """

    @property
    def snapshot(self) -> SnapshotOptions:
        """The table's snapshot settings, as the build sink takes them."""
        from lakehouse.dimension.signals.options import SnapshotOptions

        return SnapshotOptions(
            signals=frozenset(self.snapshot_signals),
            notification_topic=self.notification_topic,
            heartbeat_topic=self.heartbeat_topic,
            resnapshot_join=self.resnapshot_join,
            resnapshot_deletes=self.resnapshot_deletes,
            resnapshot_max_ended=self.resnapshot_max_ended,
        )


class IngestOptions(_Model):
    """The CDC ingest: Debezium records into versioned build tables. The Python API takes it
    (:func:`lakehouse.ingest_cdc`); the ``[ingest]`` section is it plus where the records come
    from and how the query runs (:class:`IngestConfig`)."""

    pipeline_id: str
    """Stable id of the pipeline: the Delta transaction app id of every write. Keep it across
    restarts; it is bound to its checkpoint.
    """
    tables: list[IngestTableConfig]
    """The build tables, one `[[ingest.tables]]` entry each."""
    dead_letter_table: str
    """Where records that cannot become versions go, with their reason."""
    max_record_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    """The largest record (key or value, in bytes) decoded; a larger one is dead-lettered
    (`too_large`), kept whole."""
    table_parallelism: int = Field(default=4, ge=1)
    """How many build tables a batch works on at once: their reads of the Delta log, plans,
    statistics, writes, commits and markers overlap, and Spark runs their jobs side by side.
    `1` works through the tables one by one."""
    decode_tasks: int | None = Field(default=None, ge=1)
    """The most Spark tasks that decode a batch: its input partitions (Spark's Kafka source
    plans one per topic-partition read, and a connector writes a topic per table) are merged,
    without a shuffle, into at most this many. Each task generates the decode's code for
    every Connect schema seen, a cost per task and not per record. Unset: twice Spark's
    default parallelism (two tasks per core the application has when the batch starts: one
    computes while the other waits on its source); on a cluster that scales its executors
    with the work, set twice the cores it may scale to."""

    @field_validator("tables")
    @classmethod
    def _at_least_one(cls, v: list[IngestTableConfig]) -> list[IngestTableConfig]:
        if not v:
            raise ValueError("give at least one [[ingest.tables]] entry")
        return v

    @property
    def signal_topics(self) -> tuple[str, ...]:
        """The tables' notification and heartbeat topics, sorted: read in the same stream as
        the data topics."""
        return tuple(sorted({topic for t in self.tables for topic in t.snapshot.topics}))


class IngestConfig(StreamConfig, IngestOptions):
    """The CDC ingest: :class:`IngestOptions` (each of its fields is the ``[ingest]`` key of
    the same name), and where its records come from and how it runs (:class:`StreamConfig`)."""

    @field_validator("source")
    @classmethod
    def _records_not_rows(cls, v: str) -> str:
        if v == "delta":
            raise ValueError(
                "source 'delta' streams a Delta table's rows to the join's probe side; the "
                "ingest reads Debezium records: use source 'kafka' or 'files'"
            )
        return v


class JoinConfig(StreamConfig, JoinOptions):
    """The temporal join: :class:`lakehouse.join.JoinOptions` (each of its fields is the
    ``[join]`` key of the same name), and where its probe records come from and how it runs
    (:class:`StreamConfig`)."""

    @model_validator(mode="before")
    @classmethod
    def _until_complete_runs_available_now(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not data.get("until_complete"):
            return data
        trigger = data.get("trigger")
        if trigger not in (None, "available-now"):
            raise ValueError(
                f"until_complete ends the probe input when an available-now run has read it; "
                f"it cannot run with trigger '{trigger}'. Drop the trigger setting or use "
                "trigger = 'available-now'"
            )
        return {**data, "trigger": "available-now"}


class QualityConfig(_Model):
    """The scheduled quality report."""

    report_dir: str = "quality-report"
    """Where `lakehouse quality` writes Data Docs, `summary.json`, `watermarks.png` and
    `unmatched_rows`.
    """
    max_pending_age_ms: int | None = Field(default=None, gt=0)
    """The report fails when a pending row is older than this; off by default."""
    engine: Literal["auto", "pandas", "spark"] = "auto"
    """`pandas`: read the tables with delta-rs and validate on pandas, no JVM (local tables
    only); `spark`: on Spark (object storage, clusters); `auto`: pandas when every table is
    local and delta-rs reads it, else Spark.
    """


class MaintenanceConfig(_Model):
    """``lakehouse compact`` and ``lakehouse vacuum`` (see :mod:`lakehouse.maintenance`).

    ``lineage_outputs``: output tables of other joins of the build table (besides
    ``join.output_table``) whose ``_build_version`` lineage vacuum must keep readable.
    ``compact_retention_ms``: the default ``--retention`` of ``lakehouse compact``.
    """

    lineage_outputs: list[str] = Field(default_factory=list)
    """Output tables (besides `join.output_table`) whose `_build_version` lineage `lakehouse
    vacuum` keeps readable.
    """
    compact_retention_ms: int | None = Field(default=None, ge=0)
    """Default `--retention` of `lakehouse compact`."""


class MonitoringConfig(_Model):
    """What `lakehouse ingest` and `lakehouse join` export while they run (see
    :mod:`lakehouse.metrics`)."""

    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """Serve Prometheus metrics at `http://metrics_host:metrics_port/metrics` while a pipeline
    runs (0: any free port, printed at start); off by default.
    """
    metrics_host: str = "127.0.0.1"
    """The address the metrics endpoint listens on; `0.0.0.0` lets other hosts scrape it."""
    log_format: LogFormat = "text"
    """`text`: one line per batch for people; `json`: one JSON object per batch, notice and
    error on stderr, for log pipelines.
    """


class Settings(_Model):
    """Everything a lakehouse command can be configured with."""

    spark: SparkConfig = Field(default_factory=SparkConfig)
    """The Spark session."""
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    """The Kafka cluster, shared by ingest and join."""
    ingest: IngestConfig | None = None
    """The CDC ingest."""
    join: JoinConfig | None = None
    """The temporal join."""
    quality: QualityConfig = Field(default_factory=QualityConfig)
    """The quality report."""
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)
    """Compaction and vacuum."""
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig)
    """Metrics and log format of the running pipelines."""


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        elif value is not None:
            out[key] = value
    return out


_LIST_FIELDS = {"topics", "key", "probe_key", "build_key", "snapshot_signals", "lineage_outputs"}


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Settings from ``LAKEHOUSE_SECTION__FIELD[__SUBFIELD]`` environment variables.

    >>> env_overrides({"LAKEHOUSE_JOIN__MODE": "proctime", "LAKEHOUSE_JOIN__PROBE_KEY": "a,b"})
    {'join': {'mode': 'proctime', 'probe_key': ['a', 'b']}}
    """
    environ = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        path = name[len(ENV_PREFIX) :].split("__")
        keys = [p.lower() for p in path]
        if keys[:2] in (["kafka", "options"], ["spark", "conf"]) and len(keys) > 2:
            # librdkafka and Spark keys are dotted: SASL_PASSWORD -> sasl.password
            sub = ".".join(keys[2:]).replace("_", ".")
            keys = [*keys[:2], sub]
        node = out
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = (
            [v.strip() for v in value.split(",") if v.strip()]
            if keys[-1] in _LIST_FIELDS
            else value
        )
    return out


def _may_hold_secret(loc: str) -> bool:
    """Whether a setting's value may be a credential, so messages must not echo it: any
    librdkafka option or Spark setting (passwords, keys, tokens live there), or a name
    that says so."""
    lowered = loc.lower()
    return lowered.startswith(("kafka.options", "spark.conf")) or any(
        word in lowered for word in ("password", "secret", "token", "credential", "sasl")
    )


def load_settings(
    path: str | Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Load and validate the settings (file < environment < ``overrides``).

    Args:
        path: a TOML file; None means none (``LAKEHOUSE_CONFIG`` is used if set).
        overrides: settings from flags, as nested dicts; None values mean "not given".
        environ: the environment (default ``os.environ``).

    Raises:
        ConfigError: the file is missing or not TOML, or a setting is invalid; the message
            and ``setting`` name the first invalid setting.
    """
    environ = os.environ if environ is None else environ
    path = path or environ.get("LAKEHOUSE_CONFIG")
    data: dict[str, Any] = {}
    if path:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"configuration file '{p}' does not exist", setting="config")
        try:
            data = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(
                f"configuration file '{p}' is not valid TOML: {e}", setting="config"
            ) from e
    data = _deep_merge(data, env_overrides(environ))
    data = _deep_merge(data, overrides or {})
    try:
        return Settings.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"])
            got = err.get("input")
            shown = "" if err["type"] == "missing" or isinstance(got, dict) else f" (got {got!r})"
            if _may_hold_secret(loc):
                shown = " (value not shown: it may be a secret)"
            problems.append((loc, f"'{loc}': {err['msg']}{shown}"))
        text = "; ".join(p for _, p in problems)
        noun = "setting" if len(problems) == 1 else f"{len(problems)} settings"
        raise ConfigError(f"invalid {noun}: {text}", setting=problems[0][0]) from e
