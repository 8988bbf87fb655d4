"""A read-only look at a table's log without Spark, through delta-rs (``deltalake``).

Commands that only show a table (``lakehouse status``, ``snapshot-status``) should answer in
about a second, not after a JVM starts. When no Spark session is running, :func:`lakehouse.
delta.peek` (and so ``table_exists``, ``history``, ``table_schema`` and the other read-only
looks) hands out a :class:`LogView` instead of the engine's snapshot: the same read-only
answers (version, properties, schema, recent commits and their ``userMetadata``, app
transactions, row count from the file statistics), read by delta-rs. Nothing here writes.

When delta-rs cannot open a table (a protocol feature it lacks, a storage scheme it has no
credentials for, such as ``dbfs:/``), :func:`open_view` returns None and the caller asks the
engine instead.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from lakehouse.delta.commits import CommitInfo
from lakehouse.errors import TableNotFoundError

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


class LogView:
    """A table's log as delta-rs reads it; the read-only part of
    :class:`lakehouse.delta.TableSnapshot`'s interface."""

    def __init__(self, uri: str, table: Any | None) -> None:
        self.uri = uri
        self._table = table
        self.exists = table is not None
        self.version = int(table.version()) if table is not None else -1
        self.properties: Mapping[str, str] = (
            dict(table.metadata().configuration or {}) if table is not None else {}
        )
        self._history: dict[int, Any] | None = None

    def __repr__(self) -> str:
        return f"LogView({self.uri!r}, version={self.version})"

    def require(self) -> LogView:
        """Return self; raise :class:`TableNotFoundError` when there is no table."""
        if not self.exists:
            raise TableNotFoundError.at(self.uri)
        return self

    def _entries(self, limit: int) -> dict[int, Any]:
        if self._history is None or len(self._history) < min(limit, self.version + 1):
            entries = self._table.history(limit) if self._table is not None else []
            self._history = {int(e["version"]): e for e in entries if "version" in e}
        return self._history

    def commit(self, version: int) -> Any:
        """The commit that created ``version`` (None when the log no longer has it)."""
        entry = self._entries(self.version - version + 1).get(version)
        if entry is None:
            return None
        metadata: dict[str, str] = {}
        with contextlib.suppress(ValueError, TypeError):
            decoded = json.loads(entry.get("userMetadata") or "{}")
            if isinstance(decoded, dict):
                metadata = {
                    str(k): str(v) for k, v in decoded.items() if k.startswith("lakehouse.")
                }
        metrics = entry.get("operationMetrics") or {}
        return CommitInfo(
            version=version,
            timestamp_ms=int(entry.get("timestamp", 0) or 0),
            operation=str(entry.get("operation", "")),
            metadata=metadata,
            rows=int(metrics.get("numOutputRows", 0) or 0),
        )

    def commits(self, limit: int) -> Iterator[Any]:
        """The last ``limit`` commits, newest first."""
        self._entries(limit)
        for version in range(self.version, max(self.version - limit, -1), -1):
            info = self.commit(version)
            if info is not None:
                yield info

    def transaction_version(self, app_id: str) -> int | None:
        """The last version recorded for application transaction ``app_id``, or None."""
        return None if self._table is None else self._table.transaction_version(app_id)

    def row_count(self) -> int:
        """Rows, from the file statistics (no data is read)."""
        return 0 if self._table is None else int(self._table.count())

    @property
    def schema(self) -> StructType:
        """The table schema at :attr:`version` (empty when there is no table)."""
        return self.schema_at(self.version)

    def schema_at(self, version: int) -> StructType:
        """The table schema at ``version``. Delta's schema JSON is Spark's, so the type is
        the one the engine reports.

        Raises:
            TableNotFoundError: no table, or the log no longer reaches ``version``.
        """
        from pyspark.sql.types import StructType

        if self._table is None:
            return StructType([])
        table = self._table
        if version != self.version:
            from deltalake import DeltaTable

            try:
                table = DeltaTable(self.uri, version=version)
            except Exception as e:
                raise TableNotFoundError(
                    f"Delta table '{self.uri}' has no version {version} (latest "
                    f"{self.version}): {str(e).strip().splitlines()[0] if str(e).strip() else e}",
                    table_uri=self.uri,
                ) from e
        return StructType.fromJson(json.loads(table.schema().to_json()))


def open_view(uri: str) -> LogView | None:
    """A :class:`LogView` of ``uri`` (``exists`` False when there is no table there), or None
    when delta-rs cannot read the table (then use the engine)."""
    try:
        from deltalake import DeltaTable
    except ImportError:
        return None
    try:
        if not DeltaTable.is_deltatable(uri):
            return LogView(uri, None)
        return LogView(uri, DeltaTable(uri))
    except Exception:
        return None
