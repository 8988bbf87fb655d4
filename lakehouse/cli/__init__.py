"""The ``lakehouse`` command line.

Every command reads the same configuration (``--config FILE`` or ``LAKEHOUSE_CONFIG``, then
``LAKEHOUSE_*`` environment variables, then flags; see :mod:`lakehouse.config`). Errors a
user can cause end the command with one line naming the cause and the fix (``--verbose``
prints the trace too), and exit code 2 for configuration errors, 1 for everything else; a
``join --until-complete`` that leaves rows pending exits 3.

One module per concern: :mod:`~lakehouse.cli.streams` (ingest, join),
:mod:`~lakehouse.cli.tables` (status, sql), :mod:`~lakehouse.cli.maintenance` (compact,
vacuum), :mod:`~lakehouse.cli.snapshot` (the marker, schema blocks),
:mod:`~lakehouse.cli.reports` (quality, demo, smoke); the commands are thin: each parses its
flags, calls the library, and prints.
"""

# Importing a module registers its commands; this order is the order of `lakehouse --help`.
# isort: off
from lakehouse.cli import streams  # noqa: F401  ingest, join
from lakehouse.cli import tables  # noqa: F401  status, sql
from lakehouse.cli import maintenance  # noqa: F401  compact, vacuum, repair
from lakehouse.cli import snapshot  # noqa: F401  snapshot-status, -complete, schema-resolve
from lakehouse.cli import reports  # noqa: F401  quality, demo, smoke

# isort: on
from lakehouse.cli._app import app as app
from lakehouse.cli._app import console as console
from lakehouse.cli._app import err_console as err_console
from lakehouse.cli._app import main as main

__all__ = ["app", "console", "err_console", "main"]
