"""The ``lakehouse`` Typer application, its global options and the entry point that turns
errors into one line and an exit code (see :mod:`lakehouse.cli`)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

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
# Progress and notices on stderr are log lines: to a file or a scheduler's log they stay one
# line each (rich would wrap them at 80 columns, mid-phrase); a terminal wraps them itself.
err_console.soft_wrap = not err_console.is_terminal
#: ``--verbose``: an error prints its full trace before its one line.
_verbose = False


#: ``monitoring.log_format``: ``json`` makes every stderr line a JSON object (:func:`say`).
_log_format = "text"


def verbose() -> bool:
    """Whether ``--verbose`` was given: traces with errors, and every batch's line."""
    return _verbose


def set_log_format(log_format: str) -> None:
    """Use ``log_format`` (``text`` or ``json``) for the rest of the command's stderr lines."""
    global _log_format
    _log_format = log_format


def say(message: str, *, event: str = "info", **fields: object) -> None:
    """One line on stderr: ``message`` (rich markup) as it is, or with ``--log-format json``
    an object ``{"event", "time", "message", **fields}`` with the markup stripped."""
    if _log_format == "json":
        import json
        import time

        from rich.text import Text

        from lakehouse.time import format_epoch_ms

        record = {
            "event": event,
            "time": format_epoch_ms(int(time.time() * 1000)),
            "message": Text.from_markup(message).plain,
            **fields,
        }
        err_console.print(json.dumps(record), markup=False, highlight=False, soft_wrap=True)
    else:
        err_console.print(message)


def _print_version(value: bool) -> None:
    if value:
        from lakehouse import __version__

        console.print(f"lakehouse {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="On an error, print its full trace before the one line; print a join's quiet "
            "batches (nothing arrived or released) too.",
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Temporal joins against a CDC-fed, versioned Delta dimension, on Spark."""
    global _verbose
    _verbose = verbose
    if not verbose:
        import logging

        # PySpark logs every failed query as a JSON record with the Java trace, before the
        # exception reaches the command, which reports it in one line
        for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
            logging.getLogger(name).setLevel(logging.CRITICAL)


ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="TOML configuration file.", envvar="LAKEHOUSE_CONFIG"),
]


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app, turning lakehouse errors into one clear line."""
    try:
        # Outside standalone mode click *returns* the code of a ``typer.Exit`` (a failed quality
        # check, a failed demo) instead of raising it: it must reach the exit status.
        code = app(args=argv, standalone_mode=False)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        # Ctrl-C outside a running query (Spark starting, a report being written)
        error_line("interrupted (Ctrl-C)")
        sys.exit(130)
    except LakehouseError as e:
        _trace(e)
        error_line(str(e))
        sys.exit(2 if isinstance(e, ConfigError) else 1)
    except Exception as e:
        cause = _lakehouse_cause(e)
        if cause is None:
            raise
        _trace(e)
        error_line(cause)
        # a run that started (Spark up, a query running) and failed: 1, even when the cause is
        # a setting the records contradict (docs/reference/cli.md: 2 is for before Spark starts)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


def error_line(message: str) -> None:
    """Print ``error: <message>`` as one line: never wrapped at the console's width (80 columns
    when stderr is not a terminal), so a log or a scheduler shows the whole cause in one line
    and a path in it stays whole."""
    if _log_format == "json":
        say(escape(message), event="error")
        return
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)


def _trace(e: BaseException) -> None:
    """Under ``--verbose``: the error's traceback (Spark's error text included) before its
    one line."""
    if _verbose:
        import traceback

        err_console.print("".join(traceback.format_exception(e)), markup=False, highlight=False)


def _lakehouse_cause(e: BaseException) -> str | None:
    """The message of a lakehouse error raised inside a streaming query (Spark wraps it)."""
    # usage errors of the CLI itself (typer vendors click: duck-type its exceptions); a bad
    # value of a flag is one line, as a bad setting is
    code = getattr(e, "exit_code", None)
    if hasattr(e, "show") and isinstance(code, int):
        if hasattr(e, "param_hint") and hasattr(e, "format_message"):
            message = e.format_message().replace("Value error, ", "")
            error_line(message[:1].lower() + message[1:])
        else:
            e.show()
        sys.exit(code)
    # any lakehouse error class, as the Python worker's traceback names it
    found = re.search(r"lakehouse\.errors\.[A-Za-z]+Error: (.*)", str(e))
    return found.group(1) if found else None
