"""Job entry point: `lakehouse quality` for schedulers (cron, Databricks Python tasks).

Usage: `python pipelines/quality_report.py [flags]` (the flags of `lakehouse quality`).
"""

import sys

from lakehouse.cli import main

if __name__ == "__main__":
    main(["quality", *sys.argv[1:]])
