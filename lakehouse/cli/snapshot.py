"""``lakehouse snapshot-status``, ``snapshot-complete`` and ``schema-resolve``: a build table's
snapshot marker and schema block."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from lakehouse.cli._app import ConfigOpt, app, console
from lakehouse.cli._shared import (
    spark_for,
    table_location,
    with_locations,
)
from lakehouse.table_kinds import TableKind, check_kind

# ----------------------------------------------------------------------- snapshot marker


@app.command("snapshot-status")
def snapshot_status(
    table: Annotated[str, typer.Argument(help="Build table: its location or catalog name.")],
) -> None:
    """Show a build table's snapshot state: loading, complete or re-snapshot.

    Also the signal that set the marker and when, pending signals and what they wait for, and
    any alert (ABORTED or SKIPPED snapshots)."""
    from lakehouse.dimension import snapshot_status as read_status

    table = table_location(table)

    check_kind(table, TableKind.BUILD, setting="TABLE")
    status = read_status(table)
    out = Table(
        title=f"snapshot of {table} (version {status.version})",
        show_header=False,
        title_justify="left",
    )
    for label, value in status.rows():
        if label == "ALERT":
            out.add_row(f"[bold red]{label}[/]", f"[bold red]{escape(value)}[/]")
        else:
            out.add_row(label, escape(value))
    console.print(out)


@app.command("snapshot-complete")
def snapshot_complete(
    table: Annotated[str, typer.Argument(help="Build table: its location or catalog name.")],
    reason: Annotated[str, typer.Option(help="Why (kept in the table's history).")],
) -> None:
    """Operator override: mark a build table's snapshot complete, or end a re-snapshot.

    For sources that cannot signal it. Recorded in the table's history with the reason."""
    from lakehouse.dimension import operator_complete

    table = table_location(table)

    check_kind(table, TableKind.BUILD, setting="TABLE")
    version = operator_complete(table, reason=reason)
    if version is None:
        console.print(f"{table}: snapshot already complete; nothing changed", markup=False)
        return
    console.print(
        f"{table}: snapshot marked complete at version {version} (reason: {reason})", markup=False
    )


@app.command("schema-resolve")
def schema_resolve(
    table: Annotated[str, typer.Argument(help="Build table: its location or catalog name.")],
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
    """Resolve a build table's schema block (stop the ingest first).

    Replays the records the block held back that fit the table, and clears the block. See
    the documentation's "Schema drift" (docs/operations/schema-drift.md)."""
    from lakehouse.config import load_settings
    from lakehouse.dimension.schema_block import resolve

    settings = with_locations(load_settings(config))
    if dead_letter_table is None and settings.ingest is not None:
        dead_letter_table = settings.ingest.dead_letter_table
    table = table_location(table, settings=settings)
    if dead_letter_table is not None:
        dead_letter_table = table_location(
            dead_letter_table, setting="--dead-letter-table", settings=settings
        )
    check_kind(table, TableKind.BUILD, setting="TABLE", must_exist=True)
    if dead_letter_table is not None:
        check_kind(dead_letter_table, TableKind.DEAD_LETTER, setting="--dead-letter-table")
    spark = spark_for(settings)
    result = resolve(
        spark, table, reason=reason, dead_letter_table=dead_letter_table, accept_loss=accept_loss
    )
    what = (
        f"{table}: replayed {result.replayed} of {result.candidates} held-back records"
        + (f" (version {result.version})" if result.version is not None else "")
        + (f", {result.already_applied} already in the table" if result.already_applied else "")
    )
    if result.still_incompatible:
        what += f", {result.still_incompatible} still do not fit and stay dead-lettered"
    console.print(what, markup=False)
    if result.cleared:
        console.print(
            f"{table}: schema block cleared (reason: {reason}); restart the ingest", markup=False
        )
