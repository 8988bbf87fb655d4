"""Job entry point: `lakehouse demo` for schedulers (cron, Databricks Python tasks).

Usage: `python pipelines/demo.py [flags]` (the flags of `lakehouse demo`).
"""

import sys

from lakehouse.cli import main

if __name__ == "__main__":
    main(["demo", *sys.argv[1:]])
