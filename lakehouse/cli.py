"""The ``lakehouse`` command line.

Every command reads the same configuration (``--config FILE`` or ``LAKEHOUSE_CONFIG``, then
``LAKEHOUSE_*`` environment variables, then flags; see :mod:`lakehouse.config`). Errors a
user can cause end the command with one line naming the cause and the fix (``--verbose``
prints the trace too), and exit code 2 for configuration errors, 1 for everything else; a
``join --until-complete`` that leaves rows pending exits 3.
"""

from __future__ import annotations

import re
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
#: ``--verbose``: an error prints its full trace before its one line.
_verbose = False


@app.callback()
def _options(
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="On an error, print its full trace before the one line."
        ),
    ] = False,
) -> None:
    """Temporal joins against a CDC-fed, versioned Delta dimension, on Spark."""
    global _verbose
    _verbose = verbose


ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="TOML configuration file.", envvar="LAKEHOUSE_CONFIG"),
]


def _spark(settings: Any) -> Any:
    from lakehouse.spark import get_spark

    return get_spark(app_name="lakehouse", master=settings.spark.master, conf=settings.spark.conf)


def _stream_overrides(**flags: Any) -> dict[str, Any]:
    return {k: v for k, v in flags.items() if v not in (None, [], ())}


def _refuse_if_written(settings: Any, command: str, take_over: bool) -> None:
    """Refuse before Spark starts when another live job writes the tables (the runner's
    lease decides for good when the query starts)."""
    from lakehouse.lease import ensure_free
    from lakehouse.runner import written_tables

    ensure_free(written_tables(settings, command), take_over=take_over)


def _require_build_table(uri: str, *, wait: bool) -> None:
    """Refuse, before Spark starts, a join whose build table does not exist (a typo would
    otherwise keep every row pending, exit 0); with ``wait`` say that the join waits."""
    from lakehouse import delta
    from lakehouse.errors import TableNotFoundError

    if delta.table_exists(uri):
        return
    if wait:
        _notice(
            f"build table {uri} does not exist yet: the join waits for it (rows stay pending "
            "until its snapshot is complete)"
        )
        return
    raise TableNotFoundError(
        f"build table {uri!r} (join setting build_table) does not exist. Run `lakehouse "
        "ingest` first or fix the path; to start the join before the ingest on purpose, pass "
        "--wait-for-build",
        table_uri=uri,
    )


def _notice(message: str) -> None:
    err_console.print(f"[yellow]{message}[/]")


def _with_schema_block_notice(on_batch: Any, build_table: str) -> Any:
    """Wrap the join's progress callback: after each batch, say when the build table is
    blocked on schema (the dimension misses changes: row time waits, processing time joins
    the last consistent version)."""

    def notify(report: Any) -> None:
        on_batch(report)
        from lakehouse import delta
        from lakehouse.dimension.schema_block import open_block

        if not delta.table_exists(build_table):
            return
        block = open_block(delta.get_properties(build_table))
        if block is not None:
            err_console.print(
                f"  [bold red]build table {build_table} {block.describe()}[/]; row-time "
                "joins wait at its watermark, processing-time joins read its last consistent "
                "version"
            )

    return notify


def _run_query(query: Any, what: str) -> bool:
    """Wait for a streaming query; Ctrl-C stops it cleanly (the checkpoint stays valid, the
    writer lease is released). True when the query ended by itself (not by Ctrl-C)."""
    import signal

    # PySpark's SIGINT handler calls into the JVM from inside the handler, which breaks (a
    # py4j traceback instead of a clean stop) when the main thread is itself in a JVM call,
    # as in awaitTermination. Plain KeyboardInterrupt, and short JVM calls between sleeps.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        while query.isActive:
            time.sleep(0.5)
    except KeyboardInterrupt:
        err_console.print(f"[yellow]stopping {what} (Ctrl-C); it resumes from its checkpoint[/]")
        query.stop()
        return False
    finally:
        signal.signal(signal.SIGINT, previous)
    if query.exception() is not None:
        raise query.exception()
    from lakehouse.lease import lost

    if lost() is not None:  # stopped because another job took its tables over
        from lakehouse.errors import WriterLeaseError

        raise WriterLeaseError(str(lost()), table_uri="")
    return True


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
    take_over: Annotated[
        bool,
        typer.Option(
            "--take-over", help="Take the build tables' writer lease even from a live job."
        ),
    ] = False,
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
    _refuse_if_written(settings, "ingest", take_over)
    spark = _spark(settings)
    progress = Progress(err_console)
    query = start_ingest(
        spark, settings, on_batch=progress.ingest, take_over=take_over, on_notice=_notice
    )
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
    pending_max_rows: Annotated[
        int | None, typer.Option(help="Most rows the pending table may hold.")
    ] = None,
    pending_max_age_ms: Annotated[
        int | None, typer.Option(help="Oldest a pending row may be (probe time), ms.")
    ] = None,
    on_pending_bound: Annotated[
        str | None, typer.Option(help="Rows over the bound: dead-letter or fail.")
    ] = None,
    probe_time_unit: Annotated[
        str | None, typer.Option(help="Unit of epoch numbers in the probe time: s, ms or us.")
    ] = None,
    max_future_ms: Annotated[
        int | None, typer.Option(help="Dead-letter probe times this far past the wall clock.")
    ] = None,
    checkpoint: Annotated[str | None, typer.Option(help="Spark checkpoint location.")] = None,
    trigger: Annotated[
        str | None, typer.Option(help="available-now, processing-time or once.")
    ] = None,
    interval: Annotated[str | None, typer.Option(help="Trigger interval.")] = None,
    pipeline_id: Annotated[str | None, typer.Option(help="Stable id of this pipeline.")] = None,
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
            help="Bounded run: read the probe input available now, end it, release every "
            "row the build side can answer; exit 3 if any row is left pending.",
        ),
    ] = False,
    build_complete: Annotated[
        bool,
        typer.Option(
            "--build-complete",
            help="With --until-complete: the build table holds every change up to the probe's "
            "times, so the end releases every row (once the snapshot marker is set).",
        ),
    ] = False,
    allow_dead_letters: Annotated[
        bool,
        typer.Option(
            "--allow-dead-letters",
            help="Accept batches whose probe records are all dead-lettered (otherwise a "
            "warning, and exit 1 at the end of an available-now run).",
        ),
    ] = False,
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
        overrides={"join": flags, "kafka": _stream_overrides(bootstrap_servers=bootstrap_servers)},
    )
    from lakehouse.runner import join_options

    join_options(settings.join)  # validates the combination before Spark starts
    _require_build_table(settings.join.build_table, wait=wait_for_build)
    _refuse_if_written(settings, "join", take_over)
    spark = _spark(settings)
    progress = Progress(err_console)
    plans: list[Any] = []
    all_dead: list[Any] = []

    def on_batch(report: Any) -> None:
        progress.join(report)
        if report.plan is not None:
            plans.append(report.plan)
        if report.all_dead_lettered:
            all_dead.append(report)
            err_console.print(
                f"  [bold yellow]warning: every probe record of batch {report.batch_id} "
                f"({report.malformed}) was dead-lettered[/], e.g. {report.malformed_example}; "
                f"they are in {settings.join.dead_letter_table}"
            )

    query = start_join(
        spark,
        settings,
        on_batch=_with_schema_block_notice(on_batch, settings.join.build_table),
        take_over=take_over,
        on_notice=_notice,
    )
    cfg = settings.join
    err_console.print(
        f"join [bold]{cfg.pipeline_id}[/] running ({cfg.mode}, {cfg.trigger}"
        f"{', until complete' if cfg.until_complete else ''}); checkpoint {cfg.checkpoint}"
    )
    if not _run_query(query, "join"):
        return
    if all_dead and cfg.trigger != "processing-time" and not cfg.allow_dead_letters:
        batches = ", ".join(str(r.batch_id) for r in all_dead)
        err_console.print(
            f"[bold red]error:[/] every probe record of batch(es) {batches} was dead-lettered "
            f"(e.g. {all_dead[0].malformed_example}); they are kept in {cfg.dead_letter_table} "
            "with the reason. Fix the probe input or join.probe_schema and replay them, or "
            "pass --allow-dead-letters when such batches are expected"
        )
        raise typer.Exit(1)
    if cfg.until_complete:
        _finish_bounded_run(cfg, plans[-1] if plans else None)


def _finish_bounded_run(cfg: Any, plan: Any) -> None:
    """After a ``--until-complete`` run: one line saying it is complete, or why rows are
    left pending and what to do (exit 3: a scheduler's retry after the ingest finishes it)."""
    from lakehouse.join.operator import last_state
    from lakehouse.time import Watermark

    state = last_state(
        output_uri=cfg.output_table,
        pending_uri=cfg.pending_table,
        dead_letter_uri=cfg.dead_letter_table,
        pipeline_id=cfg.pipeline_id,
    )
    pending = 0 if state is None else state.pending_rows
    if not pending:
        err_console.print(
            f"[green]join {cfg.pipeline_id} complete:[/] the probe input is joined, nothing "
            f"is pending (output {cfg.output_table})"
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
    err_console.print(
        f"[bold yellow]join {cfg.pipeline_id} incomplete:[/] {pending} row(s) left pending "
        f"in {cfg.pending_table}; {why}. Exit code 3"
    )
    raise typer.Exit(3)


# ---------------------------------------------------------------------------------- status


@app.command()
def status(
    table: Annotated[str, typer.Argument(help="A lakehouse Delta table location.")],
    batches: Annotated[int, typer.Option(help="How many recent commits to show.")] = 10,
) -> None:
    """Show a table's marker, versions, watermark, backlog and recent batches."""
    from lakehouse import delta
    from lakehouse.dimension import layout as L
    from lakehouse.progress import describe_watermark

    version = delta.latest_version(table)
    props = delta.get_properties(table)
    history = delta.history(table, limit=batches)
    summary = Table(title=f"{table}", show_header=False, title_justify="left")
    summary.add_row("version", str(version))
    summary.add_row("rows", str(delta.row_count(table)))
    from lakehouse.lease import holder_state, read_lease

    holder = read_lease(table)
    if holder is not None:  # the job writing it (see "Concurrent writers" in the README)
        stale = holder_state(holder)
        summary.add_row(
            "writer", holder.describe() + (f" [yellow](stale: {stale})[/]" if stale else "")
        )
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
        _schema_rows(summary, table, props, history)
    pending = next((h.metadata for h in history if "lakehouse.pendingRows" in h.metadata), None)
    if pending is not None:
        import json

        summary.add_row("kind", "pending table")
        summary.add_row("pending backlog", pending["lakehouse.pendingRows"])
        state = json.loads(pending.get("lakehouse.state", "{}"))
        if "combined" in state:
            summary.add_row("combined watermark", describe_watermark(json.dumps(state["combined"])))
        if state.get("evictedTotal"):
            summary.add_row("evicted by the pending bound", str(state["evictedTotal"]))
        alert = next(
            (h.metadata for h in history if h.metadata.get("lakehouse.pendingBoundAlert")), None
        )
        if alert is not None:
            summary.add_row(
                "[bold red]ALERT[/]",
                f"[bold red]{alert['lakehouse.pendingBoundAlert']}[/] (rows in the dead-letter "
                "table with _error_kind pending_bound_*)",
            )
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


def _schema_rows(summary: Table, table: str, props: dict[str, str], history: list[Any]) -> None:
    """A build table's schema state: an open block (in red), the last resolution, and the
    last Debezium schema change (DDL) recorded."""
    import json

    from lakehouse.dimension import layout as L
    from lakehouse.dimension.schema_block import blocked_total, last_resolved, open_block

    block = open_block(props)
    if block is not None:
        summary.add_row(
            "[bold red]schema[/]", f"[bold red]{block.describe(blocked_total(table))}[/]"
        )
        summary.add_row("block reason", block.reason)
    else:
        summary.add_row("schema", "ok")
    resolved = last_resolved(props)
    if resolved is not None:
        summary.add_row(
            "last schema block",
            f"column {resolved['block']['column']}, resolved {resolved['resolvedAt']}: "
            f"{resolved['reason']} (replayed {resolved['replayed']}, left dead-lettered "
            f"{resolved['stillIncompatible']})",
        )
    ddl = next((h for h in history if h.metadata.get(L.META_SCHEMA_CHANGES)), None)
    if ddl is not None:
        events = json.loads(ddl.metadata[L.META_SCHEMA_CHANGES])
        summary.add_row(
            "last schema change",
            f"version {ddl.version}: {_short(str(events[-1].get('ddl')), 100)}"
            + (f" (+{len(events) - 1} more in that commit)" if len(events) > 1 else ""),
        )


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
    # only the registered tables: no `SELECT ... FROM parquet.`/any/path``
    spark.conf.set("spark.sql.runSQLOnFiles", "false")
    _check_read_only(spark, query)
    result = spark.sql(query)
    rows = result.limit(limit + 1).collect()
    out = Table(*result.columns)
    for row in rows[:limit]:
        out.add_row(*["NULL" if v is None else str(v) for v in row])
    console.print(out)
    if len(rows) > limit:
        console.print(f"[dim](first {limit} rows shown; use --limit)[/]")


#: Functions that call arbitrary Java methods: refused by ``lakehouse sql``.
_JVM_CALL_FUNCTIONS = re.compile(r"`?\b(reflect|java_method|try_reflect)\b`?\s*\(", re.IGNORECASE)
#: Parsed-plan node classes of statements that write, whatever word they start with
#: (``FROM t INSERT ...``, ``WITH x AS (...) INSERT ...``).
_WRITE_NODES = re.compile(
    r"Insert|Merge|Delete|Update|Create|Replace|Drop|Alter|Truncate|Cache|Refresh|Load|Set|"
    r"Reset|Add|Use|Command"
)


def _check_read_only(spark: Any, query: str) -> None:
    """Refuse a query that would write or escape the registered tables, before running it:
    its parsed plan must hold no write or command node (Spark runs commands eagerly in
    ``spark.sql``), and it must not call Java methods (``reflect``)."""
    if _JVM_CALL_FUNCTIONS.search(query):
        raise ConfigError(
            "lakehouse sql refuses reflect/java_method (they call Java methods); query the "
            "tables with SQL functions only",
            setting="query",
        )
    jvm_plan = spark._jsparkSession.sessionState().sqlParser().parsePlan(query)
    first = query.strip().split(None, 1)[0].lower()
    pending = [jvm_plan]
    while pending:
        node = pending.pop()
        name = node.getClass().getSimpleName()
        harmless = first in ("explain", "describe", "desc", "show") and node is jvm_plan
        if not harmless and _WRITE_NODES.search(name):
            raise ConfigError(
                f"lakehouse sql runs read-only queries only; this one contains a {name} "
                "(a write or a command). Change the tables with the pipelines.",
                setting="query",
            )
        children = node.children()
        pending.extend(children.apply(i) for i in range(children.size()))


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
    for location in settings.maintenance.lineage_outputs:  # the other joins' outputs
        tables[Path(location).name] = location
    return {name.replace("-", "_"): loc for name, loc in tables.items()}


# ------------------------------------------------------------------- bounded state


def _duration_ms(text: str, setting: str) -> int:
    """``7d``, ``12h``, ``30m``, ``90s``, ``500ms`` or plain milliseconds."""
    units = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    raw = text.strip().lower()
    for unit in ("ms", "d", "h", "m", "s"):
        if raw.endswith(unit) and raw[: -len(unit)].strip().isdigit():
            return int(raw[: -len(unit)]) * units[unit]
    if raw.isdigit():
        return int(raw)
    raise ConfigError(
        f"--{setting} takes a duration like 7d, 12h, 30m, 90s, 500ms or milliseconds; got {text!r}",
        setting=setting,
    )


def _time_ms(text: str, setting: str) -> int:
    """An ISO-8601 time (UTC unless it says otherwise) or epoch milliseconds."""
    from datetime import UTC, datetime

    raw = text.strip()
    if raw.lstrip("-").isdigit():
        return int(raw)
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError as e:
        raise ConfigError(
            f"--{setting} takes an ISO-8601 time (2024-05-01T00:00:00Z) or epoch ms; got {text!r}",
            setting=setting,
        ) from e
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def _same_table(a: str, b: str) -> bool:
    import os

    def norm(uri: str) -> str:
        return uri.rstrip("/") if "://" in uri else os.path.abspath(uri)

    return norm(a) == norm(b)


@app.command("compact")
def compact_command(
    table: Annotated[str, typer.Argument(help="Build table location.")],
    retention: Annotated[
        str | None,
        typer.Option(help="History to keep behind the build watermark: 7d, 12h, 30m, 90s, ms."),
    ] = None,
    horizon: Annotated[
        str | None, typer.Option(help="The horizon itself: ISO-8601 time or epoch ms.")
    ] = None,
    config: ConfigOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be dropped; write nothing.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Compact past the configured join's watermark.")
    ] = False,
) -> None:
    """Compact a build table's version log: per key, keep every version after the horizon
    and the latest one at or before it; row-time answers at or after the horizon do not
    change. One atomic Delta overwrite; fails with nothing written if the ingest commits
    meanwhile."""
    from rich.progress import Progress as RichProgress
    from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

    from lakehouse.config import load_settings
    from lakehouse.maintenance import compact, horizon_from_retention
    from lakehouse.maintenance.compact import join_watermark
    from lakehouse.time import WATERMARK_MIN, format_epoch_ms

    settings = load_settings(config)
    if retention is None and horizon is None and settings.maintenance.compact_retention_ms:
        retention = str(settings.maintenance.compact_retention_ms)
    if (retention is None) == (horizon is None):
        raise ConfigError(
            "lakehouse compact needs exactly one of --retention (e.g. 7d: keep a week behind "
            "the build watermark) and --horizon (a time)",
            setting="retention",
        )
    horizon_ms = (
        horizon_from_retention(table, _duration_ms(retention, "retention"))
        if retention is not None
        else _time_ms(horizon or "", "horizon")
    )
    j = settings.join
    if j is not None and j.mode == "rowtime" and _same_table(j.build_table, table) and not force:
        wm = join_watermark(
            output_uri=j.output_table,
            pending_uri=j.pending_table,
            dead_letter_uri=j.dead_letter_table,
            pipeline_id=j.pipeline_id,
        )
        if wm is None or (
            not wm.use_processing_time
            and (wm.timestamp == WATERMARK_MIN or wm.timestamp < horizon_ms)
        ):
            where = "has not run yet" if wm is None else f"is at watermark {wm}"
            raise ConfigError(
                f"join '{j.pipeline_id}' {where}, behind the horizon "
                f"{format_epoch_ms(horizon_ms)}: rows it has yet to release could need the "
                "versions compaction drops. Use a longer --retention or an earlier --horizon, "
                "or --force",
                setting="retention",
            )
    spark = _spark(settings)
    with RichProgress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console
    ) as bar:
        task = bar.add_task(f"compacting {table}", total=None)
        result = compact(
            spark,
            table,
            horizon_ms=horizon_ms,
            dry_run=dry_run,
            on_step=lambda text: bar.update(task, description=f"{table}: {text}"),
        )
        bar.update(task, description=f"{table}: done", total=1, completed=1)
    out = Table(title=f"compaction of {table}", show_header=False, title_justify="left")
    out.add_row("horizon", f"{format_epoch_ms(result.horizon_ms)} ({result.horizon_ms} ms)")
    out.add_row("read version", str(result.read_version))
    out.add_row("rows before", str(result.rows_before))
    out.add_row("rows after", str(result.rows_after))
    out.add_row(
        "dropped",
        f"{result.superseded} superseded, {result.deletes} deletes, {result.truncated} ended "
        f"by a truncate, {result.truncates} truncates",
    )
    if result.dry_run:
        out.add_row("written", "nothing (--dry-run)")
    elif result.version is None:
        out.add_row("written", "nothing: no version can be dropped at this horizon")
    else:
        out.add_row("written", f"version {result.version} (older versions: time travel)")
    out.add_row("time", f"{result.seconds:.1f}s")
    console.print(out)


@app.command("vacuum")
def vacuum_command(
    table: Annotated[str, typer.Argument(help="A lakehouse Delta table location.")],
    config: ConfigOpt = None,
    output: Annotated[
        list[str] | None,
        typer.Option(help="Output table joining this build table (repeatable)."),
    ] = None,
    retention_hours: Annotated[
        int | None,
        typer.Option(help="Delete files removed longer ago than this; default the table's (7d)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run/--apply", help="List only (default), or delete.")
    ] = True,
    ignore_lineage: Annotated[
        bool, typer.Option("--ignore-lineage", help="Vacuum a build table without outputs.")
    ] = False,
) -> None:
    """Delete files old versions no longer need, keeping readable every build version the
    outputs' _build_version still references. Dry run unless --apply."""
    from lakehouse import delta
    from lakehouse.config import load_settings
    from lakehouse.dimension import layout as L
    from lakehouse.maintenance import vacuum_table

    settings = load_settings(config)
    outputs = list(output or [])
    j = settings.join
    if j is not None and _same_table(j.build_table, table):
        outputs.append(j.output_table)
    outputs += settings.maintenance.lineage_outputs
    props = delta.get_properties(table)
    is_build = props.get(L.PROP_TABLE_KIND) == "build" or L.PROP_SNAPSHOT_COMPLETE in props
    if is_build and not outputs and not ignore_lineage:
        raise ConfigError(
            f"'{table}' is a build table and no output table joining it is configured, so "
            "nothing says which versions the output's _build_version lineage needs. Give "
            "--output LOCATION (repeatable), set join.output_table or "
            "maintenance.lineage_outputs in the configuration, or pass --ignore-lineage",
            setting="maintenance.lineage_outputs",
        )
    spark = _spark(settings) if outputs else None
    result = vacuum_table(
        spark, table, output_uris=outputs, retention_hours=retention_hours, dry_run=dry_run
    )
    out = Table(title=f"vacuum of {table}", show_header=False, title_justify="left")
    out.add_row("outputs read for lineage", ", ".join(outputs) or "-")
    out.add_row(
        "oldest referenced build version",
        "-" if result.oldest_referenced is None else str(result.oldest_referenced),
    )
    out.add_row("versions kept readable", _short(", ".join(map(str, result.kept_versions)) or "-"))
    out.add_row(
        "retention",
        "the table's (delta.deletedFileRetentionDuration)"
        if retention_hours is None
        else f"{retention_hours} h",
    )
    if result.unreadable:
        out.add_row(
            "[bold red]ALERT[/]",
            f"[bold red]versions {list(result.unreadable)} are referenced but their log is "
            "gone (delta.logRetentionDuration): those rows cannot be re-derived[/]",
        )
    verb = "would delete" if result.dry_run else "deleted"
    out.add_row(verb, f"{len(result.files)} file(s)")
    console.print(out)
    for name in result.files[:50]:
        console.print(f"  {name}")
    if len(result.files) > 50:
        console.print(f"  ... and {len(result.files) - 50} more")
    if result.dry_run and result.files:
        console.print("dry run: nothing deleted; run again with --apply to delete these files")


# ----------------------------------------------------------------------- snapshot marker


@app.command("snapshot-status")
def snapshot_status(table: Annotated[str, typer.Argument(help="Build table location.")]) -> None:
    """Show a build table's snapshot state (loading, complete, re-snapshot), the signal that
    set the marker and when, pending signals and what they wait for, and any alert
    (ABORTED or SKIPPED snapshots)."""
    from lakehouse.dimension import snapshot_status as read_status

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
    from lakehouse.dimension import operator_complete

    version = operator_complete(table, reason=reason)
    if version is None:
        console.print(f"{table}: snapshot already complete; nothing changed")
        return
    console.print(f"{table}: snapshot marked complete at version {version} (reason: {reason})")


@app.command("schema-resolve")
def schema_resolve(
    table: Annotated[str, typer.Argument(help="Build table location.")],
    reason: Annotated[str, typer.Option(help="Why (kept in the table's history).")],
    dead_letter_table: Annotated[
        str | None,
        typer.Option(help="The ingest's dead-letter table: replay the records the block held."),
    ] = None,
    accept_loss: Annotated[
        bool,
        typer.Option(
            "--accept-loss",
            help="Resume although some held records do not fit (they stay dead-lettered).",
        ),
    ] = False,
    config: ConfigOpt = None,
) -> None:
    """Resolve a build table's schema block (stop the ingest first): replay the records the
    block held back that fit the table, and clear the block. See README, "Schema drift"."""
    from lakehouse.config import load_settings
    from lakehouse.dimension.schema_block import resolve

    settings = load_settings(config)
    if dead_letter_table is None and settings.ingest is not None:
        dead_letter_table = settings.ingest.dead_letter_table
    spark = _spark(settings)
    result = resolve(
        spark, table, reason=reason, dead_letter_uri=dead_letter_table, accept_loss=accept_loss
    )
    what = (
        f"{table}: replayed {result.replayed} of {result.candidates} held-back records"
        + (f" (version {result.version})" if result.version is not None else "")
        + (f", {result.already_applied} already in the table" if result.already_applied else "")
    )
    if result.still_incompatible:
        what += f", {result.still_incompatible} still do not fit and stay dead-lettered"
    console.print(what)
    if result.cleared:
        console.print(f"{table}: schema block cleared (reason: {reason}); restart the ingest")


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
        # Outside standalone mode click *returns* the code of a ``typer.Exit`` (a failed quality
        # check, a failed demo) instead of raising it: it must reach the exit status.
        code = app(args=argv, standalone_mode=False)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except LakehouseError as e:
        _trace(e)
        err_console.print(f"[bold red]error:[/] {e}")
        sys.exit(2 if isinstance(e, ConfigError) else 1)
    except Exception as e:
        cause = _lakehouse_cause(e)
        if cause is None:
            raise
        _trace(e)
        err_console.print(f"[bold red]error:[/] {cause}")
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


def _trace(e: BaseException) -> None:
    """Under ``--verbose``: the error's traceback (Spark's error text included) before its
    one line."""
    if _verbose:
        import traceback

        err_console.print("".join(traceback.format_exception(e)), markup=False, highlight=False)


def _lakehouse_cause(e: BaseException) -> str | None:
    """The message of a lakehouse error raised inside a streaming query (Spark wraps it)."""
    # usage errors of the CLI itself (typer vendors click: duck-type its exceptions)
    if hasattr(e, "show") and isinstance(getattr(e, "exit_code", None), int):
        e.show()
        sys.exit(e.exit_code)
    # any lakehouse error class, as the Python worker's traceback names it
    found = re.search(r"lakehouse\.errors\.[A-Za-z]+Error: (.*)", str(e))
    return found.group(1) if found else None


if __name__ == "__main__":
    main()
