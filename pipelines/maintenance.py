"""Job entry point for scheduled maintenance: `lakehouse compact` and `lakehouse vacuum`.

Usage: `python pipelines/maintenance.py compact BUILD_TABLE --retention 7d -c lakehouse.toml`
or `python pipelines/maintenance.py vacuum TABLE --apply -c lakehouse.toml`
(the arguments of the commands). Schedule it when convenient: compaction fails with nothing
written if the ingest commits meanwhile (run it again), and vacuum keeps the output's lineage.
"""

import sys

from lakehouse.cli import main

COMMANDS = ("compact", "vacuum")

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: python pipelines/maintenance.py {{{'|'.join(COMMANDS)}}} ARGS...")
    main(sys.argv[1:])
