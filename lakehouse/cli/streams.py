"""``lakehouse ingest`` and ``lakehouse join``: the streaming jobs."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from lakehouse.cli._app import ConfigOpt, app, err_console, error_line
from lakehouse.cli._shared import (
    flag_overrides,
    notice,
    refuse_if_written,
    require_build_table,
    require_source,
    run_query,
    spark_for,
    with_schema_block_notice,
)

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
    from lakehouse.runner import check_damage, start_ingest

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
        },
    )
    require_source(settings, "ingest")
    refuse_if_written(settings, "ingest", take_over)
    check_damage(settings, "ingest")  # before Spark starts
    spark = spark_for(settings)
    progress = Progress(err_console)
    query = start_ingest(
        spark, settings, on_batch=progress.ingest, take_over=take_over, on_notice=notice
    )
    err_console.print(
        f"ingest [bold]{settings.ingest.pipeline_id}[/] running "
        f"({settings.ingest.trigger}); checkpoint {settings.ingest.checkpoint}"
    )
    run_query(query, "ingest")


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
    from lakehouse.runner import check_damage, start_join

    flags = flag_overrides(
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
        overrides={"join": flags, "kafka": flag_overrides(bootstrap_servers=bootstrap_servers)},
    )
    from lakehouse.runner import join_options

    join_options(settings.join)  # validates the combination before Spark starts
    require_source(settings, "join")
    require_build_table(settings.join.build_table, wait=wait_for_build)
    refuse_if_written(settings, "join", take_over)
    check_damage(settings, "join")  # before Spark starts
    spark = spark_for(settings)
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
        on_batch=with_schema_block_notice(on_batch, settings.join.build_table),
        take_over=take_over,
        on_notice=notice,
    )
    cfg = settings.join
    err_console.print(
        f"join [bold]{cfg.pipeline_id}[/] running ({cfg.mode}, {cfg.trigger}"
        f"{', until complete' if cfg.until_complete else ''}); checkpoint {cfg.checkpoint}"
    )
    if not run_query(query, "join"):
        return
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


def _finish_bounded_run(cfg: Any, plan: Any) -> None:
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
