"""``lakehouse status`` and ``lakehouse sql``: looking at the tables."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from lakehouse.cli._app import ConfigOpt, app, console
from lakehouse.cli._shared import (
    notice,
    short,
    spark_for,
    table_location,
    with_locations,
)
from lakehouse.delta import local_path
from lakehouse.delta.query import query as run_local
from lakehouse.dimension.layout import (
    META_SCHEMA_CHANGES,
    META_WATERMARK,
    PROP_PRIMARY_KEY,
    PROP_SNAPSHOT_COMPLETE,
    PROP_SNAPSHOT_COMPLETED_AT,
    PROP_SNAPSHOT_COMPLETED_VERSION,
    PROP_SNAPSHOT_SIGNAL,
)
from lakehouse.dimension.scd import backquoted, dimension_views
from lakehouse.errors import ConfigError, UnsupportedTableError
from lakehouse.join.layout import META_PENDING_BOUND_ALERT, META_PENDING_ROWS, META_STATE
from lakehouse.table_kinds import TableKind, describe, kind_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.config import Settings

# ---------------------------------------------------------------------------------- status


@app.command()
def status(
    table: Annotated[
        str, typer.Argument(help="A lakehouse Delta table: its location or catalog name.")
    ],
    batches: Annotated[int, typer.Option(help="How many recent commits to show.")] = 10,
) -> None:
    """Show a table's marker, versions, watermark, backlog and recent batches."""
    from lakehouse import delta
    from lakehouse.progress import describe_watermark

    table = table_location(table)

    version = delta.latest_version(table)
    props = delta.get_properties(table)
    history = delta.history(table, limit=batches)
    summary = Table(title=f"{table}", show_header=False, title_justify="left")
    summary.add_row("version", str(version))
    rows = delta.row_count(table)
    summary.add_row("rows", str(rows))
    from lakehouse.lease import holder_state, read_lease

    holder = read_lease(table)
    if holder is not None:  # the job writing it (docs/operations/concurrent-writers.md)
        stale = holder_state(holder)
        summary.add_row(
            "writer", holder.describe() + (f" [yellow](stale: {stale})[/]" if stale else "")
        )
    kind = kind_of(props)
    summary.add_row("kind", describe(props))
    if kind is TableKind.BUILD:
        complete = props.get(PROP_SNAPSHOT_COMPLETE, "false")
        summary.add_row("key", props.get(PROP_PRIMARY_KEY, "-"))
        summary.add_row("snapshot complete", complete)
        for label, key in (
            ("completed at", PROP_SNAPSHOT_COMPLETED_AT),
            ("completed version", PROP_SNAPSHOT_COMPLETED_VERSION),
            ("signal", PROP_SNAPSHOT_SIGNAL),
        ):
            if key in props:
                summary.add_row(label, props[key])
        wm = next(
            (h.metadata[META_WATERMARK] for h in history if h.metadata.get(META_WATERMARK)),
            None,
        )
        summary.add_row("build watermark", describe_watermark(wm))
        _schema_rows(summary, table, props, history)
    pending = next((h.metadata for h in history if META_PENDING_ROWS in h.metadata), None)
    if kind is TableKind.PENDING or (kind is None and pending is not None):
        import json

        pending = pending or {}
        summary.add_row("pending backlog", pending.get(META_PENDING_ROWS, str(rows)))
        state = json.loads(pending.get(META_STATE, "{}"))
        if "combined" in state:
            summary.add_row("combined watermark", describe_watermark(json.dumps(state["combined"])))
        if state.get("evictedTotal"):
            summary.add_row("evicted by the pending bound", str(state["evictedTotal"]))
        alert = next(
            (h.metadata for h in history if h.metadata.get(META_PENDING_BOUND_ALERT)), None
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
            f"{k.removeprefix('lakehouse.')}={short(v)}" for k, v in sorted(h.metadata.items())
        )
        recent.add_row(
            str(h.version),
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(h.timestamp_ms / 1000)),
            h.operation,
            meta,
        )
    console.print(recent)


def _schema_rows(summary: Table, table: str, props: dict[str, str], history: list[Any]) -> None:
    """A build table's schema state: an open block (in red), the last resolution, and the
    last Debezium schema change (DDL) recorded."""
    import json

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
    ddl = next((h for h in history if h.metadata.get(META_SCHEMA_CHANGES)), None)
    if ddl is not None:
        events = json.loads(ddl.metadata[META_SCHEMA_CHANGES])
        summary.add_row(
            "last schema change",
            f"version {ddl.version}: {short(str(events[-1].get('ddl')), 100)}"
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
    query: Annotated[
        str,
        typer.Argument(
            help="A read-only query: DuckDB's SQL for local tables (--engine auto), Spark SQL "
            "with --engine spark or on object storage."
        ),
    ],
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
    engine: Annotated[
        str,
        typer.Option(
            help="duckdb (no Spark: about a second, DuckDB's SQL), spark (Spark SQL), or auto "
            "(duckdb for local tables, else spark)."
        ),
    ] = "auto",
) -> None:
    """Run a read-only SQL query over the project's Delta tables (registered as views; each
    build table also as <table>_scd2 and <table>_current)."""
    from lakehouse import delta
    from lakehouse.config import load_settings

    first = query.strip().split(None, 1)[0].lower() if query.strip() else ""
    if first not in READ_ONLY_STATEMENTS:
        raise ConfigError(_not_a_query(first), setting="query")
    settings = with_locations(load_settings(config))
    views = _project_tables(settings)
    given: dict[str, str] = {}
    for item in table or []:
        name, sep, location = item.partition("=")
        if not sep or not name or not location:
            raise ConfigError(f"--table takes NAME=LOCATION, got {item!r}", setting="table")
        views[name], given[name] = location, item
    # a configured table nothing has written yet (no dead letters so far) is no view; a query
    # naming it is told so
    unwritten = {
        name: location
        for name, location in views.items()
        if local_path(location) is not None and not delta.table_exists(location)
    }
    for name, item in given.items():
        if name in unwritten:
            raise ConfigError(
                f"--table {item}: there is no Delta table at {unwritten[name]}", setting="table"
            )
    for name, location in unwritten.items():
        del views[name]
        if re.search(rf"\b{re.escape(name)}\b", query, re.IGNORECASE):
            raise ConfigError(
                f"table {name} ({location}) has not been written yet: nothing the pipelines "
                "did so far went there",
                setting="query",
            )
    if not views and unwritten:
        raise ConfigError(
            f"no table to query: none of {', '.join(sorted(unwritten))} has been written yet; "
            "run the pipelines first",
            setting="table",
        )
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
    if engine not in ("auto", "duckdb", "spark"):
        raise ConfigError(
            f"--engine must be auto, duckdb or spark, got {engine!r}", setting="engine"
        )
    if engine == "duckdb" or (
        engine == "auto" and all(local_path(uri) is not None for uri in views.values())
    ):
        try:
            found = run_local(
                query, views, versions=versions, limit=limit, derived=dimension_views(views)
            )
        except UnsupportedTableError as e:
            if engine == "duckdb":
                raise
            notice(f"{e}; running the query on Spark instead")
        else:
            _print_rows(found.columns, found.rows, limit)
            return
    spark = spark_for(settings)
    for name, location in views.items():
        if delta.table_exists(location):
            delta.read(spark, location, version=versions.get(name)).createOrReplaceTempView(name)
    for name, view in dimension_views(views, quote=backquoted).items():
        spark.sql(view).createOrReplaceTempView(name)
    # only the registered tables: no `SELECT ... FROM parquet.`/any/path``
    spark.conf.set("spark.sql.runSQLOnFiles", "false")
    try:
        _check_read_only(spark, query)
        result = spark.sql(query)
        rows = result.limit(limit + 1).collect()
    except Exception as e:
        line = _query_error(e, views)
        if line is None:
            raise
        raise ConfigError(line, setting="query") from e
    _print_rows(tuple(result.columns), rows, limit)


#: First words of statements that change something: refused as writes, not as typos.
WRITE_STATEMENTS = (
    "insert",
    "update",
    "delete",
    "merge",
    "create",
    "drop",
    "alter",
    "truncate",
    "copy",
    "replace",
    "optimize",
    "vacuum",
    "restore",
    "set",
    "reset",
    "use",
    "cache",
    "refresh",
    "load",
    "msck",
    "analyze",
    "attach",
    "install",
)


def _not_a_query(first: str) -> str:
    """Why a statement starting with ``first`` is refused: a write, or a word that starts no
    SQL statement (a typo: the nearest read-only keyword is suggested).

    >>> _not_a_query("selec")
    "'selec' starts no SQL statement; did you mean SELECT?"
    >>> _not_a_query("insert")[:46]
    'lakehouse sql runs read-only queries only (sel'
    """
    import difflib

    if first and first not in WRITE_STATEMENTS:
        near = difflib.get_close_matches(first, READ_ONLY_STATEMENTS, n=1, cutoff=0.6)
        hint = f"did you mean {near[0].upper()}?" if near else "a query starts with SELECT"
        return f"{first!r} starts no SQL statement; {hint}"
    return (
        f"lakehouse sql runs read-only queries only ({', '.join(READ_ONLY_STATEMENTS)}); "
        f"got a statement starting with {first!r}. Change the tables with the pipelines."
    )


def _print_rows(columns: tuple[str, ...], rows: list[Any], limit: int) -> None:
    out = Table(*columns)
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


def _check_read_only(spark: SparkSession, query: str) -> None:
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


def _query_error(e: BaseException, views: dict[str, str]) -> str | None:
    """One line for a query Spark refused (parse or analysis error): its error class and
    first sentence, where in the query, and for an unknown table the tables there are. None
    for anything else (a failure of Spark itself keeps its trace)."""
    java = getattr(e, "java_exception", None)  # the read-only check's parser call
    text = str(java.getMessage()) if java is not None else str(e)
    found = re.match(r"\s*\[([A-Z_.]+)\]\s*(.*)", text)
    if found is None:
        return None
    kind, rest = found.group(1), found.group(2)
    message = rest.split("\n", 1)[0].split(" SQLSTATE", 1)[0].strip()
    where = re.search(r"\(line (\d+), pos (\d+)\)|line (\d+) pos (\d+)", text)
    at = ""
    if where is not None:
        line, pos = (g for g in where.groups() if g is not None)
        at = f" (line {line}, column {int(pos) + 1})"
    hint = ""
    if kind.startswith("TABLE_OR_VIEW_NOT_FOUND"):
        hint = f"; the tables are {', '.join(sorted(views))} (--table NAME=LOCATION adds one)"
    return f"Spark refused the query: {message}{at} [{kind}]{hint}"


def _project_tables(settings: Settings) -> dict[str, str]:
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
    if settings.join is not None:
        # the quality report's table of unmatched and pending rows, once a report wrote it
        from lakehouse.quality.unmatched import TABLE_NAME

        location = str(Path(settings.quality.report_dir) / TABLE_NAME)
        local = local_path(location)
        if local is not None and (Path(local) / "_delta_log").is_dir():  # no Spark for this
            tables[TABLE_NAME] = location
    return {name.replace("-", "_"): loc for name, loc in tables.items()}
