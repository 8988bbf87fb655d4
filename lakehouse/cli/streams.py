"""``lakehouse ingest`` and ``lakehouse join``: the streaming jobs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated

import typer

from lakehouse.cli._app import (
    ConfigOpt,
    app,
    err_console,
    error_line,
    say,
    set_log_format,
    verbose,
)
from lakehouse.cli._shared import (
    flag_overrides,
    notice,
    refuse_if_written,
    require_build_table,
    require_source,
    run_query,
    setting_help,
    spark_for,
    with_schema_block_notice,
)
from lakehouse.config import (
    FileFormat,
    IngestConfig,
    IngestTableConfig,
    JoinConfig,
    KafkaConfig,
    LogFormat,
    MonitoringConfig,
    Source,
    Trigger,
)
from lakehouse.errors import ConfigError
from lakehouse.join.options import (  # closed choices are Literals at every layer
    ExpiryPolicy,
    JoinMode,
    JoinType,
    LatePolicy,
    PendingBoundPolicy,
    TimeUnit,
    WatermarkKind,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.config import Settings
    from lakehouse.join.operator import JoinBatchReport
    from lakehouse.join.state import ReleasePlan
    from lakehouse.progress import Progress

# ---------------------------------------------------------------------------------- ingest


#: The [monitoring] flags of both pipelines.
MetricsPortOpt = Annotated[
    int | None, typer.Option(help=setting_help(MonitoringConfig, "metrics_port"))
]
LogFormatOpt = Annotated[
    LogFormat | None, typer.Option(help=setting_help(MonitoringConfig, "log_format"))
]


@app.command()
def ingest(
    config: ConfigOpt = None,
    source: Annotated[
        Source | None, typer.Option(help=setting_help(IngestConfig, "source"))
    ] = None,
    topic: Annotated[
        list[str] | None, typer.Option(help=setting_help(IngestConfig, "topics"))
    ] = None,
    path: Annotated[str | None, typer.Option(help=setting_help(IngestConfig, "path"))] = None,
    file_format: Annotated[
        FileFormat | None, typer.Option(help=setting_help(IngestConfig, "file_format"))
    ] = None,
    bootstrap_servers: Annotated[
        str | None, typer.Option(help=setting_help(KafkaConfig, "bootstrap_servers"))
    ] = None,
    starting_offsets: Annotated[
        str | None, typer.Option(help=setting_help(IngestConfig, "starting_offsets"))
    ] = None,
    table: Annotated[
        str | None, typer.Option(help=setting_help(IngestTableConfig, "table"))
    ] = None,
    key: Annotated[
        list[str] | None,
        typer.Option(help=setting_help(IngestTableConfig, "key")),
    ] = None,
    source_table: Annotated[
        str | None, typer.Option(help=setting_help(IngestTableConfig, "source_table"))
    ] = None,
    event_time: Annotated[
        str | None, typer.Option(help=setting_help(IngestTableConfig, "event_time"))
    ] = None,
    out_of_orderness_ms: Annotated[
        int | None, typer.Option(help=setting_help(IngestTableConfig, "out_of_orderness_ms"))
    ] = None,
    dead_letter_table: Annotated[
        str | None, typer.Option(help=setting_help(IngestConfig, "dead_letter_table"))
    ] = None,
    checkpoint: Annotated[
        str | None, typer.Option(help=setting_help(IngestConfig, "checkpoint"))
    ] = None,
    trigger: Annotated[
        Trigger | None, typer.Option(help=setting_help(IngestConfig, "trigger"))
    ] = None,
    interval: Annotated[
        str | None, typer.Option(help=setting_help(IngestConfig, "interval"))
    ] = None,
    pipeline_id: Annotated[
        str | None, typer.Option(help=setting_help(IngestConfig, "pipeline_id"))
    ] = None,
    metrics_port: MetricsPortOpt = None,
    log_format: LogFormatOpt = None,
    take_over: Annotated[
        bool,
        typer.Option(
            "--take-over", help="Take the build tables' writer lease even from a live job."
        ),
    ] = False,
) -> None:
    """Ingest a Debezium CDC stream into versioned Delta build tables."""
    from lakehouse.config import load_settings
    from lakehouse.jobs import has_catalog_names
    from lakehouse.runner import check_damage, check_table_kinds, resolve_settings, start_ingest

    ingest_flags = flag_overrides(
        source=source,
        topics=topic,
        path=path,
        file_format=file_format,
        starting_offsets=starting_offsets,
        dead_letter_table=dead_letter_table,
        checkpoint=checkpoint,
        trigger=trigger,
        interval=interval,
        pipeline_id=pipeline_id,
    )
    if table:
        ingest_flags["tables"] = [
            flag_overrides(
                table=table,
                key=key,
                source_table=source_table,
                event_time=event_time,
                out_of_orderness_ms=out_of_orderness_ms,
            )
        ]
    settings = load_settings(
        config,
        overrides={
            "ingest": ingest_flags,
            "kafka": flag_overrides(bootstrap_servers=bootstrap_servers),
            "monitoring": flag_overrides(metrics_port=metrics_port, log_format=log_format),
        },
    )
    assert settings.ingest is not None  # the flags' overrides make the section
    set_log_format(settings.monitoring.log_format)
    require_source(settings, "ingest")
    named = has_catalog_names(settings.ingest)
    if not named:  # catalog names need Spark: start() checks those after resolving them
        refuse_if_written(settings, "ingest", take_over)
        check_damage(settings, "ingest")  # before Spark starts
        check_table_kinds(settings, "ingest")
    with monitored(settings, settings.ingest.pipeline_id) as (progress, on_spark):
        spark = spark_for(settings)
        on_spark(spark)
        if named:
            settings = resolve_settings(spark, settings, "ingest")
        assert settings.ingest is not None
        query = start_ingest(
            spark, settings, on_batch=progress.ingest, take_over=take_over, on_notice=notice
        )
        say(
            f"ingest [bold]{settings.ingest.pipeline_id}[/] running "
            f"({settings.ingest.trigger}); checkpoint {settings.ingest.checkpoint}",
            event="started",
        )
        run_query(query, "ingest", bounded=settings.ingest.trigger != "processing-time")


# ------------------------------------------------------------------------------------ join


@app.command()
def join(
    config: ConfigOpt = None,
    source: Annotated[Source | None, typer.Option(help=setting_help(JoinConfig, "source"))] = None,
    topic: Annotated[
        list[str] | None, typer.Option(help=setting_help(JoinConfig, "topics"))
    ] = None,
    path: Annotated[str | None, typer.Option(help=setting_help(JoinConfig, "path"))] = None,
    delta_table: Annotated[
        str | None, typer.Option(help=setting_help(JoinConfig, "delta_table"))
    ] = None,
    bootstrap_servers: Annotated[
        str | None, typer.Option(help=setting_help(KafkaConfig, "bootstrap_servers"))
    ] = None,
    starting_offsets: Annotated[
        str | None, typer.Option(help=setting_help(JoinConfig, "starting_offsets"))
    ] = None,
    probe_schema: Annotated[
        str | None, typer.Option(help=setting_help(JoinConfig, "probe_schema"))
    ] = None,
    probe_key: Annotated[
        list[str] | None,
        typer.Option(help=setting_help(JoinConfig, "probe_key")),
    ] = None,
    probe_time: Annotated[
        str | None, typer.Option(help=setting_help(JoinConfig, "probe_time"))
    ] = None,
    probe_id: Annotated[str | None, typer.Option(help=setting_help(JoinConfig, "probe_id"))] = None,
    build_table: Annotated[
        str | None, typer.Option(help=setting_help(JoinConfig, "build_table"))
    ] = None,
    output_table: Annotated[
        str | None, typer.Option(help=setting_help(JoinConfig, "output_table"))
    ] = None,
    pending_table: Annotated[
        str | None, typer.Option(help=setting_help(JoinConfig, "pending_table"))
    ] = None,
    dead_letter_table: Annotated[
        str | None, typer.Option(help=setting_help(JoinConfig, "dead_letter_table"))
    ] = None,
    mode: Annotated[JoinMode | None, typer.Option(help=setting_help(JoinConfig, "mode"))] = None,
    join_type: Annotated[
        JoinType | None, typer.Option("--join-type", help=setting_help(JoinConfig, "join_type"))
    ] = None,
    watermark: Annotated[
        WatermarkKind | None,
        typer.Option(help=setting_help(JoinConfig, "watermark")),
    ] = None,
    out_of_orderness_ms: Annotated[
        int | None, typer.Option(help=setting_help(JoinConfig, "out_of_orderness_ms"))
    ] = None,
    late_policy: Annotated[
        LatePolicy | None, typer.Option(help=setting_help(JoinConfig, "late_policy"))
    ] = None,
    build_idle_timeout_ms: Annotated[
        int | None, typer.Option(help=setting_help(JoinConfig, "build_idle_timeout_ms"))
    ] = None,
    pending_ttl_ms: Annotated[
        int | None, typer.Option(help=setting_help(JoinConfig, "pending_ttl_ms"))
    ] = None,
    expiry_policy: Annotated[
        ExpiryPolicy | None, typer.Option(help=setting_help(JoinConfig, "expiry_policy"))
    ] = None,
    build_prefix: Annotated[
        str | None, typer.Option(help=setting_help(JoinConfig, "build_prefix"))
    ] = None,
    pending_max_rows: Annotated[
        int | None, typer.Option(help=setting_help(JoinConfig, "pending_max_rows"))
    ] = None,
    pending_max_age_ms: Annotated[
        int | None, typer.Option(help=setting_help(JoinConfig, "pending_max_age_ms"))
    ] = None,
    on_pending_bound: Annotated[
        PendingBoundPolicy | None, typer.Option(help=setting_help(JoinConfig, "on_pending_bound"))
    ] = None,
    probe_time_unit: Annotated[
        TimeUnit | None, typer.Option(help=setting_help(JoinConfig, "probe_time_unit"))
    ] = None,
    max_future_ms: Annotated[
        int | None, typer.Option(help=setting_help(JoinConfig, "max_future_ms"))
    ] = None,
    checkpoint: Annotated[
        str | None, typer.Option(help=setting_help(JoinConfig, "checkpoint"))
    ] = None,
    trigger: Annotated[
        Trigger | None, typer.Option(help=setting_help(JoinConfig, "trigger"))
    ] = None,
    interval: Annotated[str | None, typer.Option(help=setting_help(JoinConfig, "interval"))] = None,
    pipeline_id: Annotated[
        str | None, typer.Option(help=setting_help(JoinConfig, "pipeline_id"))
    ] = None,
    metrics_port: MetricsPortOpt = None,
    log_format: LogFormatOpt = None,
    take_over: Annotated[
        bool,
        typer.Option(
            "--take-over", help="Take the output tables' writer lease even from a live job."
        ),
    ] = False,
    wait_for_build: Annotated[
        bool,
        typer.Option(
            "--wait-for-build",
            help="Start even when the build table does not exist yet, and wait for it.",
        ),
    ] = False,
    until_complete: Annotated[
        bool,
        typer.Option(
            "--until-complete",
            help=setting_help(JoinConfig, "until_complete"),
        ),
    ] = False,
    build_complete: Annotated[
        bool,
        typer.Option(
            "--build-complete",
            help=setting_help(JoinConfig, "build_complete"),
        ),
    ] = False,
    allow_dead_letters: Annotated[
        bool,
        typer.Option(
            "--allow-dead-letters",
            help=setting_help(JoinConfig, "allow_dead_letters"),
        ),
    ] = False,
) -> None:
    """Join a probe stream with a build table, as of row time or processing time."""
    from lakehouse.config import load_settings
    from lakehouse.jobs import has_catalog_names
    from lakehouse.runner import (
        check_damage,
        check_join_key,
        check_table_kinds,
        resolve_settings,
    )

    flags = flag_overrides(
        source=source,
        topics=topic,
        path=path,
        delta_table=delta_table,
        starting_offsets=starting_offsets,
        probe_schema=probe_schema,
        probe_key=probe_key,
        probe_time=probe_time,
        probe_id=probe_id,
        build_table=build_table,
        output_table=output_table,
        pending_table=pending_table,
        dead_letter_table=dead_letter_table,
        mode=mode,
        join_type=join_type,
        watermark=watermark,
        out_of_orderness_ms=out_of_orderness_ms,
        late_policy=late_policy,
        build_idle_timeout_ms=build_idle_timeout_ms,
        pending_ttl_ms=pending_ttl_ms,
        expiry_policy=expiry_policy,
        build_prefix=build_prefix,
        pending_max_rows=pending_max_rows,
        pending_max_age_ms=pending_max_age_ms,
        on_pending_bound=on_pending_bound,
        probe_time_unit=probe_time_unit,
        max_future_ms=max_future_ms,
        checkpoint=checkpoint,
        trigger=trigger,
        interval=interval,
        pipeline_id=pipeline_id,
        until_complete=until_complete or None,
        build_complete=build_complete or None,
        allow_dead_letters=allow_dead_letters or None,
    )
    settings = load_settings(
        config,
        overrides={
            "join": flags,
            "kafka": flag_overrides(bootstrap_servers=bootstrap_servers),
            "monitoring": flag_overrides(metrics_port=metrics_port, log_format=log_format),
        },
    )
    assert settings.join is not None  # the flags' overrides make the section
    set_log_format(settings.monitoring.log_format)
    require_source(settings, "join")
    named = has_catalog_names(settings.join)
    if not named:  # catalog names need Spark: these run once they are resolved
        require_build_table(settings.join.build_table, wait=wait_for_build)
        refuse_if_written(settings, "join", take_over)
        check_damage(settings, "join")  # before Spark starts
        check_table_kinds(settings, "join")
        check_join_key(settings)
    with monitored(settings, settings.join.pipeline_id) as (progress, on_spark):
        spark = spark_for(settings)
        on_spark(spark)
        if named:
            settings = resolve_settings(spark, settings, "join")
            assert settings.join is not None
            require_build_table(settings.join.build_table, wait=wait_for_build)
            check_join_key(settings)
        _run_join(spark, settings, progress, take_over=take_over)


def _run_join(
    spark: SparkSession, settings: Settings, progress: Progress, *, take_over: bool
) -> None:
    from lakehouse.runner import start_join

    join = settings.join
    assert join is not None
    plans: list[ReleasePlan] = []
    all_dead: list[JoinBatchReport] = []

    def on_batch(report: JoinBatchReport) -> None:
        progress.join(report)
        if report.plan is not None:
            plans.append(report.plan)
        if report.all_dead_lettered:
            all_dead.append(report)
            say(
                f"  [bold yellow]warning: every probe record of batch {report.batch_id} "
                f"({report.malformed}) was dead-lettered[/], e.g. {report.malformed_example}; "
                f"they are in {join.dead_letter_table}",
                event="warning",
            )

    query = start_join(
        spark,
        settings,
        on_batch=with_schema_block_notice(on_batch, join.build_table),
        take_over=take_over,
        on_notice=notice,
    )
    cfg = join
    say(
        f"join [bold]{cfg.pipeline_id}[/] running ({cfg.mode}, {cfg.trigger}"
        f"{', until complete' if cfg.until_complete else ''}); checkpoint {cfg.checkpoint}",
        event="started",
    )
    run_query(query, "join", bounded=cfg.trigger != "processing-time")
    if all_dead and cfg.trigger != "processing-time" and not cfg.allow_dead_letters:
        batches = ", ".join(str(r.batch_id) for r in all_dead)
        error_line(
            f"every probe record of batch(es) {batches} was dead-lettered "
            f"(e.g. {all_dead[0].malformed_example}); they are kept in {cfg.dead_letter_table} "
            "with the reason. Fix the probe input or join.probe_schema and replay them, or "
            "pass --allow-dead-letters when such batches are expected"
        )
        raise typer.Exit(1)
    if cfg.until_complete:
        _finish_bounded_run(cfg, plans[-1] if plans else None)


def _finish_bounded_run(cfg: JoinConfig, plan: ReleasePlan | None) -> None:
    """After a ``--until-complete`` run: one line saying it is complete, or why rows are
    left pending and what to do (exit 3: a scheduler's retry after the ingest finishes it)."""
    from lakehouse.join.operator import last_state
    from lakehouse.time import Watermark

    state = last_state(
        output_table=cfg.output_table,
        pending_table=cfg.pending_table,
        dead_letter_table=cfg.dead_letter_table,
        pipeline_id=cfg.pipeline_id,
    )
    pending = 0 if state is None else state.pending_rows
    if not pending:
        say(
            f"[green]join {cfg.pipeline_id} complete:[/] the probe input is joined, nothing "
            f"is pending (output {cfg.output_table})",
            event="complete",
        )
        return
    if plan is None or plan.build_version is None:
        why = f"build table {cfg.build_table} does not exist yet; run `lakehouse ingest`"
    elif plan.build == Watermark.MIN:
        why = (
            f"build table {cfg.build_table} has no snapshot marker yet (its snapshot is "
            "loading): nothing joins a half-loaded dimension; run the ingest until the "
            "snapshot completes"
        )
    else:
        why = (
            f"their times are after the build watermark {plan.build}: the build table may "
            "still change there. Run `lakehouse ingest` to move it, set "
            "join.build_idle_timeout_ms for a quiet dimension, or pass --build-complete if "
            "the build table already holds every change up to the probe's times"
        )
    say(
        f"[bold yellow]join {cfg.pipeline_id} incomplete:[/] {pending} row(s) left pending "
        f"in {cfg.pending_table}; {why}. Exit code 3",
        event="incomplete",
        pending=pending,
    )
    raise typer.Exit(3)


@contextlib.contextmanager
def monitored(
    settings: Settings, pipeline: str
) -> Iterator[tuple[Progress, Callable[[SparkSession], None]]]:
    """The progress printer of a pipeline, and what monitoring needs of Spark once it runs.

    With ``monitoring.metrics_port`` the Prometheus endpoint listens before Spark starts (a
    port in use is refused in one line, exit 2), Spark's query progress joins it through a
    listener (the second value: call it with the session), and it closes when the run ends.
    """
    from lakehouse.metrics import Metrics, spark_progress_listener
    from lakehouse.progress import Progress

    m = settings.monitoring
    metrics = server = None
    if m.metrics_port is not None:
        metrics = Metrics()
        try:
            server = metrics.serve(m.metrics_host, m.metrics_port)
        except OSError as e:
            raise ConfigError(
                f"monitoring.metrics_port (--metrics-port): cannot listen on "
                f"{m.metrics_host}:{m.metrics_port}: {e.strerror or e}; choose a free port (0: "
                "any)",
                setting="monitoring.metrics_port",
            ) from e
        url = f"http://{m.metrics_host}:{server.server_address[1]}/metrics"
        say(f"metrics at {url}", event="metrics", url=url)

    def on_spark(spark: SparkSession) -> None:
        if metrics is not None:
            spark.streams.addListener(spark_progress_listener(metrics))

    progress = Progress(
        err_console,
        verbose=verbose(),
        log_format=m.log_format,
        metrics=metrics,
        pipeline=pipeline,
    )
    try:
        yield progress, on_spark
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
