"""Job entry point: `lakehouse ingest` for schedulers (local Spark jobs, Databricks Python tasks).

Usage: `python pipelines/ingest_cdc.py --config lakehouse.toml [flags]`
(the flags of `lakehouse ingest`).
On Databricks, the active cluster session is used; see README.md, "Running on Databricks".
"""

import sys

from lakehouse.cli import main

if __name__ == "__main__":
    main(["ingest", *sys.argv[1:]])
