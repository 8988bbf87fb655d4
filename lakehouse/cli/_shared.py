"""What the commands share: the Spark session, flag overrides, checks before Spark starts,
notices, and waiting for a streaming query."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel
from rich.markup import escape

from lakehouse.cli._app import err_console

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.config import Settings
    from lakehouse.join.operator import JoinBatchReport
    from lakehouse.runner import SupervisedQuery

#: The two streaming jobs, as the commands and their settings sections name them.
Job = Literal["ingest", "join"]


def spark_for(settings: Settings) -> SparkSession:
    """The Spark session for a command, from ``settings.spark`` (master and conf)."""
    from lakehouse.spark import get_spark

    return get_spark(app_name="lakehouse", master=settings.spark.master, conf=settings.spark.conf)


def flag_overrides(**flags: Any) -> dict[str, Any]:
    """The flags the user gave (not None, not empty), as configuration overrides."""
    return {k: v for k, v in flags.items() if v not in (None, [], ())}


def refuse_if_written(settings: Settings, command: Job, take_over: bool) -> None:
    """Refuse before Spark starts when another live job writes the tables (the runner's
    lease decides for good when the query starts)."""
    from lakehouse.lease import ensure_free
    from lakehouse.runner import written_tables

    ensure_free(written_tables(settings, command), take_over=take_over)


def require_source(settings: Settings, command: Job) -> None:
    """Refuse before Spark starts a files source whose directory does not exist (Spark would
    start, then fail its first batch).

    Raises:
        ConfigError: the directory is missing.
    """
    import os

    from lakehouse.delta import local_path
    from lakehouse.errors import ConfigError

    cfg = settings.ingest if command == "ingest" else settings.join
    path = None if cfg is None or cfg.source != "files" or not cfg.path else local_path(cfg.path)
    if path is None:
        return
    if not os.path.isdir(path):
        raise ConfigError(
            f"directory {os.path.abspath(path)!r} ({command}.path) does not exist; create "
            "it (it may be empty) or fix the path",
            setting=f"{command}.path",
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
    err_console.print(f"[yellow]{escape(message)}[/]")


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
            err_console.print(
                f"  [bold red]build table {escape(build_table)} {escape(block.describe())}[/]; "
                "row-time "
                "joins wait at its watermark, processing-time joins read its last consistent "
                "version"
            )

    return notify


def run_query(query: SupervisedQuery, what: Job) -> bool:
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


def short(value: str, limit: int = 60) -> str:
    """``value`` cut to ``limit`` characters for a table cell."""
    return value if len(value) <= limit else value[: limit - 1] + "…"


def setting_help(model: type[BaseModel], name: str) -> str:
    """The help of a flag that overrides a setting: the setting's meaning, declared once (its
    docstring in :mod:`lakehouse.config`, which the configuration reference shows too)."""
    return " ".join((model.model_fields[name].description or "").split())
