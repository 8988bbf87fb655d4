"""Delta table access: the one place lakehouse touches the Delta protocol (via delta-rs)."""

from lakehouse.delta.table import CommitInfo as CommitInfo
from lakehouse.delta.table import WriteResult as WriteResult
from lakehouse.delta.table import append as append
from lakehouse.delta.table import arrow_schema_to_spark as arrow_schema_to_spark
from lakehouse.delta.table import check_compatible as check_compatible
from lakehouse.delta.table import check_readable as check_readable
from lakehouse.delta.table import commit_info as commit_info
from lakehouse.delta.table import create_table as create_table
from lakehouse.delta.table import get_properties as get_properties
from lakehouse.delta.table import history as history
from lakehouse.delta.table import latest_version as latest_version
from lakehouse.delta.table import overwrite as overwrite
from lakehouse.delta.table import read as read
from lakehouse.delta.table import row_count as row_count
from lakehouse.delta.table import set_properties as set_properties
from lakehouse.delta.table import spark_schema_to_arrow as spark_schema_to_arrow
from lakehouse.delta.table import table_exists as table_exists
from lakehouse.delta.table import table_schema as table_schema
from lakehouse.delta.table import transaction_version as transaction_version

__all__ = [
    "CommitInfo",
    "WriteResult",
    "append",
    "arrow_schema_to_spark",
    "check_compatible",
    "check_readable",
    "commit_info",
    "create_table",
    "get_properties",
    "history",
    "latest_version",
    "overwrite",
    "read",
    "row_count",
    "set_properties",
    "spark_schema_to_arrow",
    "table_exists",
    "table_schema",
    "transaction_version",
]
