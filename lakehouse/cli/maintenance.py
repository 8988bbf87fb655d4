"""``lakehouse compact``, ``vacuum`` and ``repair``: bounded and damaged state."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from lakehouse.cli._app import ConfigOpt, app, console
from lakehouse.cli._shared import (
    short,
    spark_for,
    table_location,
    with_locations,
)
from lakehouse.errors import ConfigError
from lakehouse.jobs import Job
from lakehouse.table_kinds import TableKind, check_kind, kind_of

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
    table: Annotated[str, typer.Argument(help="Build table: its location or catalog name.")],
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
    """Compact a build table's version log, keeping row-time answers at or after the horizon.

    Per key, keeps every version after the horizon and the latest one at or before it. One
    atomic Delta overwrite; fails with nothing written if the ingest commits meanwhile."""
    from rich.progress import Progress as RichProgress
    from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

    from lakehouse.config import load_settings
    from lakehouse.maintenance import compact, horizon_from_retention
    from lakehouse.maintenance.compact import join_watermark
    from lakehouse.time import WATERMARK_MIN, format_epoch_ms

    settings = with_locations(load_settings(config))
    table = table_location(table, settings=settings)
    if retention is None and horizon is None and settings.maintenance.compact_retention_ms:
        retention = str(settings.maintenance.compact_retention_ms)
    if (retention is None) == (horizon is None):
        raise ConfigError(
            "lakehouse compact needs exactly one of --retention (e.g. 7d: keep a week behind "
            "the build watermark) and --horizon (a time)",
            setting="retention",
        )
    check_kind(table, TableKind.BUILD, setting="TABLE", must_exist=True)
    horizon_ms = (
        horizon_from_retention(table, _duration_ms(retention, "retention"))
        if retention is not None
        else _time_ms(horizon or "", "horizon")
    )
    j = settings.join
    if j is not None and j.mode == "rowtime" and _same_table(j.build_table, table) and not force:
        wm = join_watermark(
            output_table=j.output_table,
            pending_table=j.pending_table,
            dead_letter_table=j.dead_letter_table,
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
    spark = spark_for(settings)
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
    table: Annotated[
        str, typer.Argument(help="A lakehouse Delta table: its location or catalog name.")
    ],
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
    """Delete files old versions no longer need; a dry run unless --apply.

    Every build version the outputs' _build_version still references stays readable."""
    from lakehouse import delta
    from lakehouse.config import load_settings
    from lakehouse.maintenance import vacuum_table

    settings = with_locations(load_settings(config))
    table = table_location(table, settings=settings)
    outputs = [table_location(o, setting="--output", settings=settings) for o in output or []]
    j = settings.join
    if j is not None and _same_table(j.build_table, table):
        outputs.append(j.output_table)
    outputs += settings.maintenance.lineage_outputs
    is_build = kind_of(delta.get_properties(table)) is TableKind.BUILD
    for location in outputs:
        check_kind(location, TableKind.OUTPUT, setting="an output (--output, lineage_outputs)")
    if is_build and not outputs and not ignore_lineage:
        raise ConfigError(
            f"'{table}' is a build table and no output table joining it is configured, so "
            "nothing says which versions the output's _build_version lineage needs. Give "
            "--output LOCATION (repeatable), set join.output_table or "
            "maintenance.lineage_outputs in the configuration, or pass --ignore-lineage",
            setting="maintenance.lineage_outputs",
        )
    spark = spark_for(settings) if outputs else None
    result = vacuum_table(
        spark, table, output_uris=outputs, retention_hours=retention_hours, dry_run=dry_run
    )
    out = Table(title=f"vacuum of {table}", show_header=False, title_justify="left")
    out.add_row("outputs read for lineage", ", ".join(outputs) or "-")
    out.add_row(
        "oldest referenced build version",
        "-" if result.oldest_referenced is None else str(result.oldest_referenced),
    )
    out.add_row("versions kept readable", short(", ".join(map(str, result.kept_versions)) or "-"))
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


# ------------------------------------------------------------------- damaged state


@app.command("repair")
def repair_command(
    job: Annotated[Job, typer.Argument(help="Whose checkpoint and tables.")],
    config: ConfigOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run/--apply", help="Show the repair (default), or do it.")
    ] = True,
) -> None:
    """Repair a job's damaged checkpoint or table files; a dry run unless --apply.

    Damaged files are set aside, never deleted; docs/operations/recovery.md says what each
    repair does. Stop the job first. Needs no Spark (but for tables given by catalog name,
    whose locations the catalog has)."""
    from lakehouse.config import load_settings
    from lakehouse.jobs import damage_checked
    from lakehouse.recovery import apply, plan_repair
    from lakehouse.runner import job_settings

    settings = with_locations(load_settings(config))
    cfg = job_settings(settings, job)
    if cfg is None:
        raise ConfigError(f"the configuration has no [{job}] section", setting=job)
    written, read = damage_checked(cfg)
    plan = plan_repair(
        checkpoint=cfg.checkpoint,
        pipeline_id=cfg.pipeline_id,
        tables=written,
        read_tables=read,
    )
    if not plan.damage:
        console.print(
            f"{job} {cfg.pipeline_id}: nothing damaged (checkpoint {cfg.checkpoint}, "
            f"tables {', '.join(dict.fromkeys([*written, *read]))})",
            markup=False,
            soft_wrap=True,
        )
        return
    for d in plan.damage:
        console.print(f"damaged: {d.path}: {d.problem}", markup=False, soft_wrap=True)
    for step in plan.steps:
        console.print(("would " if dry_run else "") + step.describe(), markup=False, soft_wrap=True)
    if plan.unrepairable:
        apply(plan)  # raises: one line naming what is not repaired and how to do it by hand
    if dry_run:
        console.print(
            "dry run: nothing changed; run again with --apply to repair",
            markup=False,
            soft_wrap=True,
        )
        return
    apply(plan)
    console.print(
        f"repaired: {len(plan.steps)} step(s); start the {job} again to continue", markup=False
    )
