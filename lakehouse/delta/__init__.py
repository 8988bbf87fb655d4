"""Delta tables through delta-spark: the one package that knows Delta (ARCHITECTURE.md).

A micro-batch takes one :class:`TableSnapshot` of each table it needs (:func:`snapshot`),
decides from those, then writes with :func:`append` / :func:`overwrite` (Delta's idempotent
``txnAppId``/``txnVersion``; :func:`stage_append` writes an append's files before its commit)
and reads pinned versions with :func:`read`.
"""

from lakehouse.delta._engine import LOG_READS as LOG_READS
from lakehouse.delta.commits import CommitInfo as CommitInfo
from lakehouse.delta.commits import WriteResult as WriteResult
from lakehouse.delta.ddl import create_table as create_table
from lakehouse.delta.ddl import local_path as local_path
from lakehouse.delta.ddl import set_properties as set_properties
from lakehouse.delta.ddl import widen_columns as widen_columns
from lakehouse.delta.log import META_CREATING as META_CREATING
from lakehouse.delta.log import META_OPERATION as META_OPERATION
from lakehouse.delta.log import META_REASON as META_REASON
from lakehouse.delta.log import NAMESPACE as NAMESPACE
from lakehouse.delta.log import TableSnapshot as TableSnapshot
from lakehouse.delta.log import batch_scope as batch_scope
from lakehouse.delta.log import commit_info as commit_info
from lakehouse.delta.log import commit_metadata as commit_metadata
from lakehouse.delta.log import get_properties as get_properties
from lakehouse.delta.log import history as history
from lakehouse.delta.log import latest_version as latest_version
from lakehouse.delta.log import peek as peek
from lakehouse.delta.log import snapshot as snapshot
from lakehouse.delta.log import table_exists as table_exists
from lakehouse.delta.log import table_schema as table_schema
from lakehouse.delta.log import transaction_version as transaction_version
from lakehouse.delta.scan import files_at as files_at
from lakehouse.delta.scan import read as read
from lakehouse.delta.scan import read_files as read_files
from lakehouse.delta.scan import row_count as row_count
from lakehouse.delta.scan import scanned_files as scanned_files
from lakehouse.delta.schema import check_compatible as check_compatible
from lakehouse.delta.schema import first_inexact as first_inexact
from lakehouse.delta.schema import inexact as inexact
from lakehouse.delta.schema import same_type as same_type
from lakehouse.delta.schema import spark_schema_to_arrow as spark_schema_to_arrow
from lakehouse.delta.write import JointWrite as JointWrite
from lakehouse.delta.write import StagedAppend as StagedAppend
from lakehouse.delta.write import append as append
from lakehouse.delta.write import compact_files as compact_files
from lakehouse.delta.write import overwrite as overwrite
from lakehouse.delta.write import stage_append as stage_append
from lakehouse.delta.write import stage_appends as stage_appends

__all__ = [
    "NAMESPACE",
    "CommitInfo",
    "JointWrite",
    "StagedAppend",
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
    "peek",
    "read",
    "read_files",
    "row_count",
    "same_type",
    "scanned_files",
    "set_properties",
    "snapshot",
    "spark_schema_to_arrow",
    "stage_append",
    "stage_appends",
    "table_exists",
    "table_schema",
    "transaction_version",
    "widen_columns",
]
