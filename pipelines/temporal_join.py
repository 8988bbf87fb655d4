"""Job entry point: `lakehouse join` for schedulers (local Spark jobs, Databricks Python tasks).

Usage: `python pipelines/temporal_join.py --config lakehouse.toml [flags]`
(the flags of `lakehouse join`).
On Databricks, the active cluster session is used; see README.md, "Running on Databricks".
"""

import sys

from lakehouse.cli import main

if __name__ == "__main__":
    main(["join", *sys.argv[1:]])
