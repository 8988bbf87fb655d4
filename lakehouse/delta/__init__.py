"""Delta tables through delta-spark: the one module that knows Delta (ARCHITECTURE.md).

A micro-batch takes one :class:`TableSnapshot` of each table it needs (:func:`snapshot`),
decides from those, then writes with :func:`append` / :func:`overwrite` (Delta's idempotent
``txnAppId``/``txnVersion``) and reads pinned versions with :func:`read`.
"""

from lakehouse.delta._engine import LOG_READS as LOG_READS
from lakehouse.delta.table import META_OPERATION as META_OPERATION
from lakehouse.delta.table import META_REASON as META_REASON
from lakehouse.delta.table import NAMESPACE as NAMESPACE
from lakehouse.delta.table import CommitInfo as CommitInfo
from lakehouse.delta.table import TableSnapshot as TableSnapshot
from lakehouse.delta.table import WriteResult as WriteResult
from lakehouse.delta.table import append as append
from lakehouse.delta.table import batch_scope as batch_scope
from lakehouse.delta.table import check_compatible as check_compatible
from lakehouse.delta.table import commit_info as commit_info
from lakehouse.delta.table import commit_metadata as commit_metadata
from lakehouse.delta.table import compact_files as compact_files
from lakehouse.delta.table import create_table as create_table
from lakehouse.delta.table import files_at as files_at
from lakehouse.delta.table import first_inexact as first_inexact
from lakehouse.delta.table import get_properties as get_properties
from lakehouse.delta.table import history as history
from lakehouse.delta.table import inexact as inexact
from lakehouse.delta.table import latest_version as latest_version
from lakehouse.delta.table import local_path as local_path
from lakehouse.delta.table import overwrite as overwrite
from lakehouse.delta.table import read as read
from lakehouse.delta.table import read_files as read_files
from lakehouse.delta.table import row_count as row_count
from lakehouse.delta.table import same_type as same_type
from lakehouse.delta.table import set_properties as set_properties
from lakehouse.delta.table import snapshot as snapshot
from lakehouse.delta.table import spark_schema_to_arrow as spark_schema_to_arrow
from lakehouse.delta.table import table_exists as table_exists
from lakehouse.delta.table import table_schema as table_schema
from lakehouse.delta.table import transaction_version as transaction_version
from lakehouse.delta.table import widen_columns as widen_columns

__all__ = [
    "NAMESPACE",
    "CommitInfo",
    "TableSnapshot",
    "WriteResult",
    "append",
    "batch_scope",
    "check_compatible",
    "commit_info",
    "commit_metadata",
    "compact_files",
    "create_table",
    "files_at",
    "first_inexact",
    "get_properties",
    "history",
    "inexact",
    "latest_version",
    "local_path",
    "overwrite",
    "read",
    "read_files",
    "row_count",
    "same_type",
    "set_properties",
    "snapshot",
    "spark_schema_to_arrow",
    "table_exists",
    "table_schema",
    "transaction_version",
    "widen_columns",
]
