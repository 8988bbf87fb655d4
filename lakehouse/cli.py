"""The ``lakehouse`` command line.

Every command reads the same configuration (``--config FILE`` or ``LAKEHOUSE_CONFIG``, then
``LAKEHOUSE_*`` environment variables, then flags; see :mod:`lakehouse.config`). Errors a
user can cause end the command with one line naming the cause and the fix, and exit code 2
for configuration errors, 1 for everything else.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from lakehouse.errors import ConfigError, LakehouseError

app = typer.Typer(
    name="lakehouse",
    help="Temporal joins against a CDC-fed, versioned Delta dimension, on Spark.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="TOML configuration file.", envvar="LAKEHOUSE_CONFIG"),
]


def _spark(settings: Any) -> Any:
    from lakehouse.spark import get_spark

    return get_spark(app_name="lakehouse", master=settings.spark.master, conf=settings.spark.conf)


def _stream_overrides(**flags: Any) -> dict[str, Any]:
    return {k: v for k, v in flags.items() if v not in (None, [], ())}


def _run_query(query: Any, what: str) -> None:
    """Wait for a streaming query; Ctrl-C stops it cleanly (the checkpoint stays valid)."""
    try:
        while query.isActive:
            query.awaitTermination(1)
    except KeyboardInterrupt:
        err_console.print(f"[yellow]stopping {what} (Ctrl-C); it resumes from its checkpoint[/]")
        query.stop()
        return
    if query.exception() is not None:
        raise query.exception()


# ---------------------------------------------------------------------------------- ingest


@app.command()
def ingest(
    config: ConfigOpt = None,
    source: Annotated[str | None, typer.Option(help="kafka or files.")] = None,
    topic: Annotated[list[str] | None, typer.Option(help="Kafka topic (repeatable).")] = None,
    path: Annotated[str | None, typer.Option(help="Directory of JSON-lines files.")] = None,
    file_format: Annotated[str | None, typer.Option(help="lines or envelope.")] = None,
    bootstrap_servers: Annotated[str | None, typer.Option(help="Kafka bootstrap servers.")] = None,
    starting_offsets: Annotated[
        str | None, typer.Option(help="earliest, latest, or JSON {topic: {partition: offset}}.")
    ] = None,
    table: Annotated[str | None, typer.Option(help="Build table location.")] = None,
    key: Annotated[
        list[str] | None,
        typer.Option(help="Key column (repeatable); default from the Debezium key."),
    ] = None,
    source_table: Annotated[
        str | None, typer.Option(help="Only this source table (db.table or schema.table).")
    ] = None,
    event_time: Annotated[
        str | None, typer.Option(help="Row column holding the version start; default source.ts_ms.")
    ] = None,
    out_of_orderness_ms: Annotated[
        int | None, typer.Option(help="Build watermark lag behind the max event time.")
    ] = None,
    dead_letter_table: Annotated[str | None, typer.Option(help="Dead-letter table.")] = None,
    checkpoint: Annotated[str | None, typer.Option(help="Spark checkpoint location.")] = None,
    trigger: Annotated[
        str | None, typer.Option(help="available-now, processing-time or once.")
    ] = None,
    interval: Annotated[
        str | None, typer.Option(help="Trigger interval, e.g. '5 seconds'.")
    ] = None,
    pipeline_id: Annotated[str | None, typer.Option(help="Stable id of this pipeline.")] = None,
) -> None:
    """Ingest a Debezium CDC stream into versioned Delta build tables."""
    from lakehouse.config import load_settings
    from lakehouse.progress import Progress
    from lakehouse.runner import start_ingest

    ingest_flags = _stream_overrides(
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
            _stream_overrides(
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
            "kafka": _stream_overrides(bootstrap_servers=bootstrap_servers),
        },
    )
    spark = _spark(settings)
    progress = Progress(err_console)
    query = start_ingest(spark, settings, on_batch=progress.ingest)
    err_console.print(
        f"ingest [bold]{settings.ingest.pipeline_id}[/] running "
        f"({settings.ingest.trigger}); checkpoint {settings.ingest.checkpoint}"
    )
    _run_query(query, "ingest")


# ------------------------------------------------------------------------------------ join


@app.command()
def join(
    config: ConfigOpt = None,
    source: Annotated[str | None, typer.Option(help="kafka or files.")] = None,
    topic: Annotated[list[str] | None, typer.Option(help="Probe topic (repeatable).")] = None,
    path: Annotated[str | None, typer.Option(help="Directory of probe JSON-lines files.")] = None,
    bootstrap_servers: Annotated[str | None, typer.Option(help="Kafka bootstrap servers.")] = None,
    starting_offsets: Annotated[str | None, typer.Option(help="earliest, latest or JSON.")] = None,
    probe_schema: Annotated[str | None, typer.Option(help="Probe record schema as DDL.")] = None,
    probe_key: Annotated[
        list[str] | None,
        typer.Option(help="Probe column matching the build key (repeatable, in key order)."),
    ] = None,
    probe_time: Annotated[str | None, typer.Option(help="Probe event-time column.")] = None,
    probe_id: Annotated[str | None, typer.Option(help="Probe id column (for quality).")] = None,
    build_table: Annotated[str | None, typer.Option(help="Build table location.")] = None,
    output_table: Annotated[str | None, typer.Option(help="Output table location.")] = None,
    pending_table: Annotated[str | None, typer.Option(help="Pending table location.")] = None,
    dead_letter_table: Annotated[str | None, typer.Option(help="Dead-letter table.")] = None,
    mode: Annotated[str | None, typer.Option(help="rowtime or proctime.")] = None,
    join_type: Annotated[str | None, typer.Option("--join-type", help="inner or left.")] = None,
    watermark: Annotated[
        str | None,
        typer.Option(help="Probe watermark: bounded, ascending or none (processing time)."),
    ] = None,
    out_of_orderness_ms: Annotated[
        int | None, typer.Option(help="Bounded out-of-orderness of the probe, ms.")
    ] = None,
    late_policy: Annotated[str | None, typer.Option(help="join or dead-letter.")] = None,
    build_idle_timeout_ms: Annotated[
        int | None, typer.Option(help="Build table idle after this long without commits.")
    ] = None,
    pending_ttl_ms: Annotated[int | None, typer.Option(help="Expire pending rows after.")] = None,
    expiry_policy: Annotated[str | None, typer.Option(help="release or dead-letter.")] = None,
    build_prefix: Annotated[str | None, typer.Option(help="Prefix of build columns.")] = None,
    checkpoint: Annotated[str | None, typer.Option(help="Spark checkpoint location.")] = None,
    trigger: Annotated[
        str | None, typer.Option(help="available-now, processing-time or once.")
    ] = None,
    interval: Annotated[str | None, typer.Option(help="Trigger interval.")] = None,
    pipeline_id: Annotated[str | None, typer.Option(help="Stable id of this pipeline.")] = None,
) -> None:
    """Join a probe stream with a build table, as of row time or processing time."""
    from lakehouse.config import load_settings
    from lakehouse.progress import Progress
    from lakehouse.runner import start_join

    flags = _stream_overrides(
        source=source,
        topics=topic,
        path=path,
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
        checkpoint=checkpoint,
        trigger=trigger,
        interval=interval,
        pipeline_id=pipeline_id,
    )
    settings = load_settings(
        config,
        overrides={"join": flags, "kafka": _stream_overrides(bootstrap_servers=bootstrap_servers)},
    )
    from lakehouse.runner import join_options

    join_options(settings.join)  # validates the combination before Spark starts
    spark = _spark(settings)
    progress = Progress(err_console)
    query = start_join(spark, settings, on_batch=progress.join)
    err_console.print(
        f"join [bold]{settings.join.pipeline_id}[/] running ({settings.join.mode}, "
        f"{settings.join.trigger}); checkpoint {settings.join.checkpoint}"
    )
    _run_query(query, "join")


# ---------------------------------------------------------------------------------- status


@app.command()
def status(
    table: Annotated[str, typer.Argument(help="A lakehouse Delta table location.")],
    batches: Annotated[int, typer.Option(help="How many recent commits to show.")] = 10,
) -> None:
    """Show a table's marker, versions, watermark, backlog and recent batches."""
    from lakehouse import delta
    from lakehouse.build import layout as L
    from lakehouse.progress import describe_watermark

    version = delta.latest_version(table)
    props = delta.get_properties(table)
    history = delta.history(table, limit=batches)
    summary = Table(title=f"{table}", show_header=False, title_justify="left")
    summary.add_row("version", str(version))
    summary.add_row("rows", str(delta.row_count(table)))
    kind = props.get(L.PROP_TABLE_KIND, "")
    if kind == "build" or L.PROP_SNAPSHOT_COMPLETE in props:
        complete = props.get(L.PROP_SNAPSHOT_COMPLETE, "false")
        summary.add_row("kind", "build table")
        summary.add_row("key", props.get(L.PROP_PRIMARY_KEY, "-"))
        summary.add_row("snapshot complete", complete)
        for label, key in (
            ("completed at", L.PROP_SNAPSHOT_COMPLETED_AT),
            ("completed version", L.PROP_SNAPSHOT_COMPLETED_VERSION),
            ("signal", L.PROP_SNAPSHOT_SIGNAL),
        ):
            if key in props:
                summary.add_row(label, props[key])
        wm = next(
            (h.metadata[L.META_WATERMARK] for h in history if h.metadata.get(L.META_WATERMARK)),
            None,
        )
        summary.add_row("build watermark", describe_watermark(wm))
    pending = next((h.metadata for h in history if "lakehouse.pendingRows" in h.metadata), None)
    if pending is not None:
        import json

        summary.add_row("kind", "pending table")
        summary.add_row("pending backlog", pending["lakehouse.pendingRows"])
        state = json.loads(pending.get("lakehouse.state", "{}"))
        if "combined" in state:
            summary.add_row("combined watermark", describe_watermark(json.dumps(state["combined"])))
    console.print(summary)
    recent = Table(
        "version",
        "time (UTC)",
        "operation",
        "commit metadata",
        title="recent commits",
        title_justify="left",
    )
    for h in history:
        meta = ", ".join(
            f"{k.removeprefix('lakehouse.')}={_short(v)}" for k, v in sorted(h.metadata.items())
        )
        recent.add_row(
            str(h.version),
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(h.timestamp_ms / 1000)),
            h.operation,
            meta,
        )
    console.print(recent)


def _short(value: str, limit: int = 60) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"


# ------------------------------------------------------------------------------------- sql

READ_ONLY_STATEMENTS = (
    "select",
    "with",
    "show",
    "describe",
    "desc",
    "explain",
    "values",
    "table",
    "from",
)


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="A read-only Spark SQL query.")],
    config: ConfigOpt = None,
    table: Annotated[
        list[str] | None, typer.Option(help="Register NAME=LOCATION as a view (repeatable).")
    ] = None,
    as_of: Annotated[
        list[str] | None,
        typer.Option(
            "--as-of", help="Read a table at a version: VERSION (all tables) or NAME=VERSION."
        ),
    ] = None,
    limit: Annotated[int, typer.Option(help="Rows to print at most.")] = 50,
) -> None:
    """Run a read-only SQL query over the project's Delta tables (registered as views)."""
    from lakehouse import delta
    from lakehouse.config import load_settings

    first = query.strip().split(None, 1)[0].lower() if query.strip() else ""
    if first not in READ_ONLY_STATEMENTS:
        raise ConfigError(
            f"lakehouse sql runs read-only queries only ({', '.join(READ_ONLY_STATEMENTS)}); "
            f"got a statement starting with {first!r}. Change the tables with the pipelines.",
            setting="query",
        )
    settings = load_settings(config)
    views = _project_tables(settings)
    for item in table or []:
        name, sep, location = item.partition("=")
        if not sep or not name or not location:
            raise ConfigError(f"--table takes NAME=LOCATION, got {item!r}", setting="table")
        views[name] = location
    if not views:
        raise ConfigError(
            "no tables to query: give --config with [ingest]/[join] sections, or "
            "--table NAME=LOCATION",
            setting="table",
        )
    versions: dict[str, int] = {}
    for item in as_of or []:
        name, sep, version = item.rpartition("=")
        targets = [name] if sep else list(views)
        for target in targets:
            if target not in views:
                raise ConfigError(
                    f"--as-of names unknown table {target!r}; tables: {sorted(views)}",
                    setting="as_of",
                )
            versions[target] = int(version)
    spark = _spark(settings)
    for name, location in views.items():
        if delta.table_exists(location):
            delta.read(spark, location, version=versions.get(name)).createOrReplaceTempView(name)
    result = spark.sql(query)
    rows = result.limit(limit + 1).collect()
    out = Table(*result.columns)
    for row in rows[:limit]:
        out.add_row(*["NULL" if v is None else str(v) for v in row])
    console.print(out)
    if len(rows) > limit:
        console.print(f"[dim](first {limit} rows shown; use --limit)[/]")


def _project_tables(settings: Any) -> dict[str, str]:
    tables: dict[str, str] = {}
    if settings.ingest is not None:
        for t in settings.ingest.tables:
            tables[Path(t.table).name] = t.table
        tables[Path(settings.ingest.dead_letter_table).name] = settings.ingest.dead_letter_table
    if settings.join is not None:
        j = settings.join
        for location in (j.build_table, j.output_table, j.pending_table, j.dead_letter_table):
            tables[Path(location).name] = location
    return {name.replace("-", "_"): loc for name, loc in tables.items()}


# ----------------------------------------------------------------------- snapshot marker


@app.command("snapshot-status")
def snapshot_status(table: Annotated[str, typer.Argument(help="Build table location.")]) -> None:
    """Show a build table's snapshot state (loading, complete, re-snapshot), the signal that
    set the marker and when, pending signals and what they wait for, and any alert
    (ABORTED or SKIPPED snapshots)."""
    from lakehouse.build import snapshot_status as read_status

    status = read_status(table)
    out = Table(
        title=f"snapshot of {table} (version {status.version})",
        show_header=False,
        title_justify="left",
    )
    for label, value in status.rows():
        if label == "ALERT":
            out.add_row(f"[bold red]{label}[/]", f"[bold red]{value}[/]")
        else:
            out.add_row(label, value)
    console.print(out)


@app.command("snapshot-complete")
def snapshot_complete(
    table: Annotated[str, typer.Argument(help="Build table location.")],
    reason: Annotated[str, typer.Option(help="Why (kept in the table's history).")],
) -> None:
    """Operator override: mark a build table's snapshot complete (for sources that cannot
    signal it), or end a re-snapshot. Recorded in the table's history with the reason."""
    from lakehouse.build import operator_complete

    version = operator_complete(table, reason=reason)
    if version is None:
        console.print(f"{table}: snapshot already complete; nothing changed")
        return
    console.print(f"{table}: snapshot marked complete at version {version} (reason: {reason})")


# --------------------------------------------------------------------------------- quality


@app.command()
def quality(
    config: ConfigOpt = None,
    report_dir: Annotated[str | None, typer.Option(help="Where to write the report.")] = None,
    max_pending_age_ms: Annotated[
        int | None, typer.Option(help="Fail when a pending row is older than this.")
    ] = None,
) -> None:
    """Validate the join's output and pending tables with Great Expectations; exit code 1
    when a check fails (for cron or a Databricks job to alert on)."""
    from lakehouse.config import load_settings
    from lakehouse.quality import print_report, run_quality_report

    settings = load_settings(
        config,
        overrides={
            "quality": _stream_overrides(
                report_dir=report_dir, max_pending_age_ms=max_pending_age_ms
            )
        },
    )
    j = settings.join
    if j is None:
        raise ConfigError(
            "lakehouse quality validates a join: the configuration needs a [join] section",
            setting="join",
        )
    if not j.probe_id:
        raise ConfigError(
            "lakehouse quality needs join.probe_id (a column identifying each probe row)",
            setting="join.probe_id",
        )
    spark = _spark(settings)
    report = run_quality_report(
        spark,
        output_uri=j.output_table,
        pending_uri=j.pending_table,
        build_uri=j.build_table,
        dead_letter_uri=j.dead_letter_table,
        probe_id=j.probe_id,
        probe_key=tuple(j.probe_key),
        probe_time=j.probe_time,
        report_dir=settings.quality.report_dir,
        max_pending_age_ms=settings.quality.max_pending_age_ms,
    )
    print_report(report, console=console)
    if not report.success:
        raise typer.Exit(1)


# ------------------------------------------------------------------------------------ demo


@app.command()
def demo(
    source: Annotated[str, typer.Option(help="kafka (embedded broker) or files.")] = "kafka",
    output: Annotated[Path, typer.Option(help="Output directory (cleared first).")] = Path(
        "demo-output"
    ),
    orders: Annotated[int, typer.Option(help="How many orders to produce.")] = 1200,
) -> None:
    """Run the product end to end on generated data: CDC ingest and both joins, then the
    quality report and a summary."""
    from lakehouse.demo import run_demo

    if source not in ("kafka", "files"):
        raise ConfigError(f"--source must be 'kafka' or 'files', got {source!r}", setting="source")
    code = run_demo(source=source, output=output, orders=orders, console=console)  # type: ignore[arg-type]
    if code:
        raise typer.Exit(code)


# ------------------------------------------------------------------------------ smoke test


@app.command()
def smoke(
    directory: Annotated[Path, typer.Option(help="Where to write the table.")] = Path(
        "demo-output/smoke"
    ),
) -> None:
    """Start Spark, write a Delta table, read it back, and say what happened."""
    import shutil

    from lakehouse import delta
    from lakehouse.spark import get_spark

    started = time.monotonic()
    spark = get_spark(app_name="lakehouse-smoke")
    console.print(
        f"Spark {spark.version} up in {time.monotonic() - started:.1f}s "
        f"(master {spark.sparkContext.master})"
    )
    shutil.rmtree(directory, ignore_errors=True)
    uri = str(directory / "table")
    df = spark.sql("SELECT id, CAST(id * 1.5 AS DECIMAL(10, 2)) AS amount FROM range(5)")
    result = delta.append(df, uri, txn=("smoke", 0), metadata={"lakehouse.batchId": 0})
    replay = delta.append(df, uri, txn=("smoke", 0))
    back = delta.read(spark, uri).orderBy("id").collect()
    console.print(
        f"wrote {result.rows} rows as Delta version {result.version} at {uri}; "
        f"replaying the same transaction {'was skipped' if replay.skipped else 'was NOT skipped'}"
        f"; read back {len(back)} rows: {[tuple(r) for r in back]}"
    )
    console.print(f"done in {time.monotonic() - started:.1f}s")


# ------------------------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app, turning lakehouse errors into one clear line."""
    try:
        app(args=argv, standalone_mode=False)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except LakehouseError as e:
        err_console.print(f"[bold red]error:[/] {e}")
        sys.exit(2 if isinstance(e, ConfigError) else 1)
    except Exception as e:
        cause = _lakehouse_cause(e)
        if cause is None:
            raise
        err_console.print(f"[bold red]error:[/] {cause}")
        sys.exit(1)
    sys.exit(0)


def _lakehouse_cause(e: BaseException) -> str | None:
    """The message of a lakehouse error raised inside a streaming query (Spark wraps it)."""
    # usage errors of the CLI itself (typer vendors click: duck-type its exceptions)
    if hasattr(e, "show") and isinstance(getattr(e, "exit_code", None), int):
        e.show()
        sys.exit(e.exit_code)
    text = str(e)
    for name in (
        "ConfigError",
        "SchemaMismatchError",
        "UnsupportedTableError",
        "SourceError",
        "TableNotFoundError",
        "WatermarkError",
        "LakehouseError",
    ):
        marker = f"lakehouse.errors.{name}: "
        if marker in text:
            return text.split(marker, 1)[1].splitlines()[0]
    return None


if __name__ == "__main__":
    main()
