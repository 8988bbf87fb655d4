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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lakehouse.errors import ConfigError
from lakehouse.join.options import (  # the join's choices, declared once
    ExpiryPolicy,
    JoinMode,
    JoinType,
    LatePolicy,
    PendingBoundPolicy,
    TimeUnit,
    WatermarkKind,
)

ENV_PREFIX = "LAKEHOUSE_"
Trigger = Literal["available-now", "processing-time", "once"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SparkConfig(_Model):
    """Spark session settings (see :func:`lakehouse.spark.get_spark`)."""

    master: str | None = None
    conf: dict[str, str] = Field(default_factory=dict)


class KafkaConfig(_Model):
    """Connection to the Kafka cluster, shared by ingest and join.

    ``options`` are librdkafka settings (``security.protocol``, ``sasl.mechanism``, ...);
    ``config_file`` is a librdkafka properties file, the place for secrets. confluent-kafka
    uses them as they are; Spark's Kafka source gets them translated for its Java client
    (see :func:`lakehouse.sources._java_client.java_client_properties`; a setting without a
    translation is refused, naming it).
    """

    bootstrap_servers: str | None = None
    config_file: str | None = None
    options: dict[str, str] = Field(default_factory=dict)
    # Broker outages (see lakehouse.runner.SupervisedQuery): restart the query with exponential
    # backoff from outage_backoff_ms up to outage_backoff_max_ms; fail after outage_timeout_ms
    # (0: at once).
    outage_timeout_ms: int = Field(default=600_000, ge=0)
    outage_backoff_ms: int = Field(default=1_000, gt=0)
    outage_backoff_max_ms: int = Field(default=30_000, gt=0)
    # A topic deleted and created again since the checkpoint's offsets were recorded (its
    # topic id changed): "fail" stops before the query starts; "continue" goes on from the
    # checkpoint's offsets, skipping the new topic's records below them (lakehouse.checkpoint).
    on_recreated_topic: Literal["fail", "continue"] = "fail"


class StreamConfig(_Model):
    """Where a pipeline reads from and how it runs."""

    pipeline_id: str
    source: Literal["kafka", "files"] = "kafka"
    topics: list[str] = Field(default_factory=list)
    path: str | None = None
    file_format: Literal["lines", "envelope"] = "lines"
    starting_offsets: str = "earliest"
    checkpoint: str
    trigger: Trigger = "processing-time"
    interval: str = "5 seconds"
    max_records_per_trigger: int | None = Field(default=None, gt=0)
    # A writer lease (lakehouse.lease) whose heartbeat is older than this is stale.
    writer_lease_timeout_ms: int = Field(default=60_000, ge=1_000)

    @model_validator(mode="after")
    def _source_needs_location(self) -> StreamConfig:
        if self.source == "kafka" and not self.topics:
            raise ValueError("source 'kafka' needs topics (e.g. topics = [\"orders\"])")
        if self.source == "files" and not self.path:
            raise ValueError("source 'files' needs path (a directory of JSON-lines files)")
        return self


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
    key: list[str] = Field(default_factory=list)
    source_table: str | None = None
    event_time: str | None = None
    out_of_orderness_ms: int = Field(default=0, ge=0)
    notification_topic: str | None = None
    heartbeat_topic: str | None = None
    snapshot_signals: list[Literal["notification", "heartbeat", "last", "log_record"]] = Field(
        default_factory=lambda: ["notification", "heartbeat", "last", "log_record"]
    )
    resnapshot_join: Literal["last-complete", "latest"] = "last-complete"
    resnapshot_deletes: bool = True
    resnapshot_max_ended: float = Field(default=0.5, ge=0, le=1)
    max_future_ms: int | None = Field(default=86_400_000, gt=0)


class IngestConfig(StreamConfig):
    """The CDC ingest: Debezium records into versioned build tables."""

    tables: list[IngestTableConfig]
    dead_letter_table: str

    @field_validator("tables")
    @classmethod
    def _at_least_one(cls, v: list[IngestTableConfig]) -> list[IngestTableConfig]:
        if not v:
            raise ValueError("give at least one [[ingest.tables]] entry")
        return v


class JoinConfig(StreamConfig):
    """The temporal join (see :class:`lakehouse.join.JoinOptions` for each setting)."""

    probe_schema: str
    probe_key: list[str]
    probe_time: str | None = None
    probe_id: str | None = None
    build_key: list[str] = Field(default_factory=list)
    build_table: str
    output_table: str
    pending_table: str
    dead_letter_table: str
    mode: JoinMode = "rowtime"
    join_type: JoinType = "inner"
    # None: "bounded" for row time; for processing time "none" (FLIP-326: the probe side
    # gives no event-time watermark unless the user configures one)
    watermark: WatermarkKind | None = None
    out_of_orderness_ms: int = Field(default=0, ge=0)
    late_policy: LatePolicy = "join"
    build_idle_timeout_ms: int | None = Field(default=None, gt=0)
    pending_ttl_ms: int | None = Field(default=None, gt=0)
    expiry_policy: ExpiryPolicy = "release"
    build_prefix: str = ""
    pending_max_rows: int | None = Field(default=None, gt=0)
    pending_max_age_ms: int | None = Field(default=None, gt=0)
    on_pending_bound: PendingBoundPolicy = "dead-letter"
    probe_time_unit: TimeUnit = "ms"
    max_future_ms: int | None = Field(default=86_400_000, gt=0)
    # Bounded runs (README "Scheduled and backfill runs"): end the probe input at the end of
    # an available-now run, and optionally declare the build side complete too.
    until_complete: bool = False
    build_complete: bool = False
    # Accept runs whose batches dead-letter every probe record (JoinOptions).
    allow_dead_letters: bool = False

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

    @model_validator(mode="after")
    def _build_complete_needs_the_end(self) -> JoinConfig:
        if self.build_complete and not self.until_complete:
            raise ValueError(
                "build_complete declares the build side complete at the end of the probe "
                "input; it needs until_complete (lakehouse join --until-complete "
                "--build-complete)"
            )
        return self


class QualityConfig(_Model):
    """The scheduled quality report."""

    report_dir: str = "quality-report"
    max_pending_age_ms: int | None = Field(default=None, gt=0)


class MaintenanceConfig(_Model):
    """``lakehouse compact`` and ``lakehouse vacuum`` (see :mod:`lakehouse.maintenance`).

    ``lineage_outputs``: output tables of other joins of the build table (besides
    ``join.output_table``) whose ``_build_version`` lineage vacuum must keep readable.
    ``compact_retention_ms``: the default ``--retention`` of ``lakehouse compact``.
    """

    lineage_outputs: list[str] = Field(default_factory=list)
    compact_retention_ms: int | None = Field(default=None, ge=0)


class Settings(_Model):
    """Everything a lakehouse command can be configured with."""

    spark: SparkConfig = Field(default_factory=SparkConfig)
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    ingest: IngestConfig | None = None
    join: JoinConfig | None = None
    quality: QualityConfig = Field(default_factory=QualityConfig)
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)


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
