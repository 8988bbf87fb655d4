"""Maintenance operations on Delta tables (delta-rs): a rewrite that commits only on the version
it read, and a vacuum that keeps chosen versions readable.

Kept apart from :mod:`.table` (the pipelines' read/append path) but, like it, the only place
that touches delta-rs for these operations (ARCHITECTURE.md: all Delta access behind
``lakehouse/delta``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from deltalake import CommitProperties
from deltalake.exceptions import CommitFailedError

from lakehouse.delta.table import (
    WriteResult,
    _add_actions,
    _encode_metadata,
    _join,
    _open,
    _remove_dir,
    latest_version,
    table_schema,
)
from lakehouse.errors import ConcurrentCommitError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def overwrite_if_unchanged(
    df: DataFrame,
    uri: str,
    *,
    read_version: int,
    metadata: Mapping[str, Any] | None = None,
) -> WriteResult:
    """Replace the table's rows with ``df``'s in one commit, **only if the table is still at
    ``read_version``** (the version ``df`` was computed from).

    Delta's optimistic concurrency, made strict: the commit is attempted once, as version
    ``read_version + 1``. delta-rs would otherwise rebase an overwrite over a concurrent
    append without a conflict (measured with deltalake 1.6.6) and keep the appended files
    next to the rewrite — which a rewrite computed without those rows must not silently
    accept. The table's properties, schema and application transactions are kept (an
    overwrite replaces files, not metadata).

    Raises:
        ConcurrentCommitError: another writer committed after ``read_version``; nothing was
            committed and the staged files are removed.
    """
    schema = table_schema(uri, version=read_version)
    staging = f"c-{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:12]}"
    target = _join(uri, staging)
    df.write.mode("error").parquet(target)
    actions, rows = _add_actions(uri, staging, schema)
    props = CommitProperties(custom_metadata=_encode_metadata(metadata), max_commit_retries=0)
    try:
        _open(uri, read_version).create_write_transaction(
            actions, "overwrite", schema, commit_properties=props
        )
    except CommitFailedError as e:
        _remove_dir(target)
        now = latest_version(uri)
        if now > read_version:
            raise ConcurrentCommitError(
                f"Delta table '{uri}' changed while it was being rewritten: it was read at "
                f"version {read_version} and version(s) {read_version + 1}..{now} were committed "
                "since (a running ingest appending, or a marker change). Nothing was written; "
                "run the command again.",
                table_uri=uri,
            ) from e
        raise
    except Exception:
        _remove_dir(target)
        raise
    return WriteResult(version=read_version + 1, skipped=False, rows=rows, files=len(actions))


def vacuum(
    uri: str,
    *,
    retention_hours: int | None,
    keep_versions: Sequence[int] = (),
    dry_run: bool = True,
    metadata: Mapping[str, Any] | None = None,
) -> list[str]:
    """Delete (or, with ``dry_run``, list) the files the latest version no longer uses and
    that were removed more than ``retention_hours`` ago — except those any version in
    ``keep_versions`` still reads. Files no commit ever referenced (staged by a write still
    running, or by one that failed) are left alone.

    ``retention_hours`` None means the table's ``delta.deletedFileRetentionDuration``
    (default 7 days); an explicit value may be lower than that (the caller decided).

    Returns:
        The files deleted (or that would be), relative to the table root.
    """
    dt = _open(uri)
    return list(
        dt.vacuum(
            retention_hours=retention_hours,
            dry_run=dry_run,
            enforce_retention_duration=retention_hours is None,
            keep_versions=sorted(set(keep_versions)) or None,
            commit_properties=CommitProperties(custom_metadata=_encode_metadata(metadata)),
        )
    )


def oldest_readable_version(uri: str) -> int:
    """The oldest version whose log is still there (older ones are gone after
    ``delta.logRetentionDuration`` and checkpoints): time travel cannot go further back."""
    latest = latest_version(uri)
    history = _open(uri).history()
    versions = [int(entry["version"]) for entry in history if "version" in entry]
    oldest = min(versions, default=latest)
    # the log may have been cleaned below the oldest history entry's checkpoint
    while oldest < latest:
        try:
            _open(uri, oldest)
            return oldest
        except Exception:
            oldest += 1
    return latest


def files_at(uri: str, version: int) -> list[str]:
    """The data files (URIs) the table's snapshot at ``version`` reads."""
    return list(_open(uri, version).file_uris())
