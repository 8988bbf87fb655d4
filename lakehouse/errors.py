"""Errors raised by lakehouse.

All errors raised by the library inherit from :class:`LakehouseError`. Each subclass is one
category a caller may want to handle differently. Messages follow one shape: *what* failed,
*which value*, *why*, and *what to do*. Fields that a caller might need (the setting, the
table, the feature) are kept as attributes, not only in the text.

Bad *records* are not exceptions: a record that fails to decode becomes a dead-letter row.
:class:`CdcDecodeError` exists so the decoder can say why, and is caught at the batch edge.
"""

from __future__ import annotations


class LakehouseError(Exception):
    """Root of every error raised by lakehouse."""


class ConfigError(LakehouseError):
    """Raised when a setting is missing, malformed or inconsistent with another setting."""

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


class EnvironmentSetupError(LakehouseError):
    """Raised when the machine lacks something lakehouse needs (Java, a binary, a port)."""


class UnsupportedTableError(LakehouseError):
    """Raised when a Delta table needs a protocol feature this read path cannot honour."""

    def __init__(self, message: str, *, table_uri: str, feature: str) -> None:
        super().__init__(message)
        self.table_uri = table_uri
        self.feature = feature


class SchemaMismatchError(LakehouseError):
    """Raised when a table written by something else has a schema lakehouse cannot use."""

    def __init__(self, message: str, *, table_uri: str) -> None:
        super().__init__(message)
        self.table_uri = table_uri


class TableNotFoundError(LakehouseError):
    """Raised when a Delta table that must exist is not at the given location."""

    def __init__(self, message: str, *, table_uri: str) -> None:
        super().__init__(message)
        self.table_uri = table_uri

    @classmethod
    def at(cls, uri: str) -> TableNotFoundError:
        """The error for a table that is not at ``uri``, with what to do."""
        return cls(
            f"no Delta table at '{uri}': check the path, or run the job that creates it first",
            table_uri=uri,
        )


class WatermarkError(LakehouseError):
    """Raised when a watermark input breaks the valve's rules (for example a channel returning
    from processing time to event time)."""


class CdcDecodeError(LakehouseError):
    """Raised by the Debezium decoder when a record cannot be decoded; the ingest turns it into
    a dead-letter row with this message as the reason."""

    def __init__(self, message: str, *, kind: str = "invalid") -> None:
        super().__init__(message)
        self.kind = kind


class SourceError(LakehouseError):
    """Raised when a streaming source cannot reach or read its input (broker, directory)."""


class PendingBoundError(LakehouseError):
    """Raised by a join with ``on_pending_bound = 'fail'`` when a batch would leave more (or
    older) pending rows than ``pending_max_rows``/``pending_max_age_ms`` allow. Nothing of the
    batch is written; the query stops until the bound, the policy or the build side changes."""

    def __init__(self, message: str, *, setting: str) -> None:
        super().__init__(message)
        self.setting = setting


class ConcurrentCommitError(LakehouseError):
    """Raised by a maintenance rewrite (``lakehouse compact``) when another writer committed to
    the table after the rewrite read it. Nothing was committed; run it again."""

    def __init__(self, message: str, *, table_uri: str) -> None:
        super().__init__(message)
        self.table_uri = table_uri


class WriterLeaseError(LakehouseError):
    """Raised when a job would write a table that another live job is writing: at start (the
    table's writer lease is held; the message names the holder and how to proceed), or before
    a micro-batch of a job whose lease another job took over (it stops without writing)."""

    def __init__(self, message: str, *, table_uri: str) -> None:
        super().__init__(message)
        self.table_uri = table_uri


class BrokerUnavailableError(SourceError):
    """Raised when no Kafka broker answered within the timeout (refused, timed out, all
    brokers down). Before a pipeline's first contact it is raised at once (a wrong address is
    no outage); after it, the runner rides the outage out by restarting the query from its
    checkpoint with bounded exponential backoff (``kafka.outage_*`` settings) and raises it
    only when the outage outlasts ``kafka.outage_timeout_ms``."""


class DataSafetyError(LakehouseError):
    """Raised when a batch would do lasting damage that its input cannot justify on its own: a
    re-snapshot that would end most of a dimension's keys, a checkpoint that is not the one
    a pipeline id has committed from, a source whose offsets went backwards. Nothing of the
    batch is committed; the message says how to go on on purpose."""

    def __init__(self, message: str, *, table_uri: str | None = None) -> None:
        super().__init__(message)
        self.table_uri = table_uri


class DamagedStateError(LakehouseError):
    """Raised when a job's checkpoint or one of its tables holds a file that does not parse (a
    torn write, a truncated copy, a full disk): the message names the file, what is wrong with
    it and how to repair it (``lakehouse repair``, see :mod:`lakehouse.recovery`)."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path
