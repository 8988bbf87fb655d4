"""What a table's history records, as lakehouse reads it: one commit (:class:`CommitInfo`),
whichever engine read it, and what a write did (:class:`WriteResult`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitInfo:
    """One commit of a table's history.

    Attributes:
        version: the table version the commit created.
        timestamp_ms: commit time, epoch milliseconds.
        operation: Delta's operation name (``WRITE``, ``SET TBLPROPERTIES``, ...).
        metadata: the ``lakehouse.*`` keys of the commit's ``userMetadata``, values as written.
        app_transactions: the ``(app_id -> version)`` transactions the commit recorded.
        rows: rows the commit wrote (``numOutputRows``), 0 when it wrote none.
    """

    version: int
    timestamp_ms: int
    operation: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    app_transactions: Mapping[str, int] = field(default_factory=dict)
    rows: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteResult:
    """What a write did.

    Attributes:
        version: the table version it created; the version already there when skipped.
        skipped: True when the table already held the transaction (a replayed batch).
        rows: rows written (0 when skipped).
    """

    version: int
    skipped: bool
    rows: int
