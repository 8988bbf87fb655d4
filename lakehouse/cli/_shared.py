"""What the commands share: the Spark session, flag overrides, checks before Spark starts,
notices, and waiting for a streaming query."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from rich.markup import escape

from lakehouse.cli._app import say
from lakehouse.jobs import Job

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.config import Settings
    from lakehouse.join.operator import JoinBatchReport
    from lakehouse.runner import SupervisedQuery


def spark_for(settings: Settings) -> SparkSession:
    """The Spark session for a command, from ``settings.spark`` (master and conf)."""
    from lakehouse.spark import get_spark

    return get_spark(app_name="lakehouse", master=settings.spark.master, conf=settings.spark.conf)


def with_locations(settings: Settings) -> Settings:
    """``settings`` with each table given by catalog name replaced by its location, resolved
    through the catalog of a Spark session started for it (:mod:`lakehouse.delta.names`);
    ``settings`` itself, and no Spark, when every table is a location.

    Raises:
        ConfigError: a name is a table of another format, or its schema does not exist.
    """
    from lakehouse.delta.names import is_catalog_name, resolve
    from lakehouse.jobs import has_catalog_names
    from lakehouse.runner import job_settings, resolve_settings

    spark: SparkSession | None = None
    for job in ("ingest", "join"):
        cfg = job_settings(settings, job)
        if cfg is not None and has_catalog_names(cfg):
            spark = spark or spark_for(settings)
            settings = resolve_settings(spark, settings, job)
    lineage = settings.maintenance.lineage_outputs
    if any(is_catalog_name(t) for t in lineage):
        spark = spark or spark_for(settings)
        located = [resolve(spark, t, setting="maintenance.lineage_outputs") for t in lineage]
        maintenance = settings.maintenance.model_copy(update={"lineage_outputs": located})
        settings = settings.model_copy(update={"maintenance": maintenance})
    return settings


def table_location(table: str, *, setting: str = "TABLE", settings: Settings | None = None) -> str:
    """The location of a table given on the command line: itself, or for a catalog name the
    location the catalog records (a Spark session is started for it, with the ``[spark]``
    settings of ``settings``, else ``LAKEHOUSE_SPARK_CONF``'s: the catalog's among them).

    Raises:
        TableNotFoundError: the catalog has no table of that name.
        ConfigError: the name is a table of another format.
    """
    from lakehouse.delta.names import is_catalog_name, resolve
    from lakehouse.spark import get_spark

    if not is_catalog_name(table):
        return table
    spark = spark_for(settings) if settings is not None else get_spark(app_name="lakehouse")
    return resolve(spark, table, setting=setting, new=False)


def flag_overrides(**flags: Any) -> dict[str, Any]:
    """The flags the user gave (not None, not empty), as configuration overrides."""
    return {k: v for k, v in flags.items() if v not in (None, [], ())}


def refuse_if_written(settings: Settings, command: Job, take_over: bool) -> None:
    """Refuse before Spark starts when another live job writes the tables (the runner's
    lease decides for good when the query starts)."""
    from lakehouse.jobs import written_tables
    from lakehouse.lease import ensure_free
    from lakehouse.runner import job_settings

    cfg = job_settings(settings, command)
    ensure_free(written_tables(cfg) if cfg is not None else [], take_over=take_over)


def require_source(settings: Settings, command: Job) -> None:
    """Refuse before Spark starts a files source whose directory does not exist (Spark would
    start, then fail its first batch), or a Delta source's path that holds no Delta table (a
    catalog name is looked up when Spark is up).

    Raises:
        ConfigError: the directory or the table is missing.
    """
    import os

    from lakehouse.delta import local_path
    from lakehouse.errors import ConfigError

    cfg = settings.ingest if command == "ingest" else settings.join
    if cfg is not None and cfg.source == "delta" and cfg.delta_table:
        _require_delta_source(cfg.delta_table)
        return
    path = None if cfg is None or cfg.source != "files" or not cfg.path else local_path(cfg.path)
    if path is None:
        return
    if not os.path.isdir(path):
        raise ConfigError(
            f"directory {os.path.abspath(path)!r} ({command}.path) does not exist; create "
            "it (it may be empty) or fix the path",
            setting=f"{command}.path",
        )


def _require_delta_source(table: str) -> None:
    """Refuse a local Delta source path without a table (see :func:`require_source`)."""
    import os

    from lakehouse import delta
    from lakehouse.delta.names import is_catalog_name
    from lakehouse.errors import ConfigError

    path = None if is_catalog_name(table) else delta.local_path(table)
    if path is not None and not delta.table_exists(table):
        raise ConfigError(
            f"no Delta table at {os.path.abspath(path)!r} (join.delta_table); check the path, "
            "or give the table's catalog name",
            setting="join.delta_table",
        )


def require_build_table(uri: str, *, wait: bool) -> None:
    """Refuse, before Spark starts, a join whose build table does not exist (a typo would
    otherwise keep every row pending, exit 0); with ``wait`` say that the join waits."""
    from lakehouse import delta
    from lakehouse.errors import TableNotFoundError

    if delta.table_exists(uri):
        return
    if wait:
        notice(
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


def notice(message: str) -> None:
    """A line on stderr for something the user should know that is no error."""
    say(f"[yellow]{escape(message)}[/]", event="notice")


def with_schema_block_notice(
    on_batch: Callable[[JoinBatchReport], None], build_table: str
) -> Callable[[JoinBatchReport], None]:
    """Wrap the join's progress callback: after each batch, say when the build table is
    blocked on schema (the dimension misses changes: row time waits, processing time joins
    the last consistent version)."""

    def notify(report: JoinBatchReport) -> None:
        on_batch(report)
        from lakehouse import delta
        from lakehouse.dimension.schema_block import open_block

        if not delta.table_exists(build_table):
            return
        block = open_block(delta.get_properties(build_table))
        if block is not None:
            say(
                f"  [bold red]build table {escape(build_table)} {escape(block.describe())}[/]; "
                "row-time joins wait at its watermark, processing-time joins read its last "
                "consistent version",
                event="alert",
            )

    return notify


def run_query(query: SupervisedQuery, what: Job, *, bounded: bool) -> None:
    """Wait for a streaming query to end by itself.

    SIGINT (Ctrl-C) and SIGTERM (what Databricks, Kubernetes and systemd send to stop a job)
    stop it cleanly: the query is stopped (a batch in flight is abandoned whole, as after a
    crash, and runs again on the next start; the checkpoint stays consistent), the writer
    lease is released, Spark stops, and the command says after which batch. A ``bounded``
    run (``available-now`` or ``once``: it ends by itself when its input is read) then exits
    with 128 + the signal's number (130, 143), as a shell reports a process the signal ended,
    so a scheduler never records an interrupted run as done; a processing-time run, which a
    signal is the way to end, exits 0. A second signal during the stop ends the process at
    once.

    Raises:
        typer.Exit: a bounded run stopped by a signal.
    """
    import signal

    import typer

    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        # Only note it: raising here could cut a py4j call in half (the main thread polls
        # the JVM). The loop below sees it within half a second.
        received.append(signum)
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_DFL)  # a second signal ends the process at once

    stoppers = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, on_signal) for s in stoppers}
    try:
        while query.isActive and not received:
            time.sleep(0.5)
        if received:
            name = signal.Signals(received[0]).name
            how = "Ctrl-C" if received[0] == signal.SIGINT else name
            say(f"[yellow]stopping {what} ({how}); it resumes from its checkpoint[/]")
            query.stop()
            done = _last_batch(query)
            _stop_spark()
            where = f"after batch {done}" if done is not None else "before its first batch ended"
            # a bounded run stopped before its input was read exits 128 + the signal; a
            # continuous run ends this way, and exits 0
            code = 128 + received[0] if bounded else 0
            unread = ", before its input was read" if bounded else ""
            exit_code = f". Exit code {code}" if bounded else ""
            say(
                f"[yellow]{what} stopped by {name} {where}{unread}[/]; the next run goes on from "
                f"its checkpoint{exit_code}",
                event="stopped",
                signal=name,
                last_batch=done,
                exit_code=code,
            )
            if code:
                raise typer.Exit(code)
            return
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    error = query.exception()
    if error is not None:
        raise error
    from lakehouse.lease import lost

    if lost() is not None:  # stopped because another job took its tables over
        from lakehouse.errors import WriterLeaseError

        raise WriterLeaseError(str(lost()), table_uri="")


def _last_batch(query: SupervisedQuery) -> int | None:
    """The id of the query's last completed batch, if any."""
    try:
        progress = query.lastProgress
    except Exception:  # the query is gone with its JVM side: nothing more to say
        return None
    return None if not progress else int(progress["batchId"])


def _stop_spark() -> None:
    """Stop the command's Spark session before the process exits, so PySpark's accumulator
    server does not outlive the JVM and print a trace."""
    from pyspark.sql import SparkSession

    from lakehouse.delta import checkpointer

    session = SparkSession.getActiveSession()
    if session is not None:
        checkpointer.drain()  # the Delta checkpoints the command's commits made due
        session.stop()


def short(value: str, limit: int = 60) -> str:
    """``value`` cut to ``limit`` characters for a table cell."""
    return value if len(value) <= limit else value[: limit - 1] + "…"


def setting_help(model: type[BaseModel], name: str) -> str:
    """The help of a flag that overrides a setting: the setting's meaning, declared once (its
    docstring in :mod:`lakehouse.config`, which the configuration reference shows too)."""
    return " ".join((model.model_fields[name].description or "").split())
