"""Debezium change events: envelope models (pydantic v2), decoding, positions, JSON output.

Pure Python (no Spark): the ingest calls :func:`decode_message` per record on executors.

Example:
    >>> from lakehouse.cdc import ChangeEvent, decode_message, row_to_json
    >>> event = decode_message('{"op":"c","after":{"id":1,"price":9.99},"source":{}}')
    >>> isinstance(event, ChangeEvent), row_to_json(event.row)
    (True, '{"id":1,"price":9.99}')
"""

from lakehouse.cdc._parse import parse_schema as parse_schema
from lakehouse.cdc.decode import DECODE_ERROR_KINDS as DECODE_ERROR_KINDS
from lakehouse.cdc.decode import DEFAULT_MAX_BYTES as DEFAULT_MAX_BYTES
from lakehouse.cdc.decode import ChangeEvent as ChangeEvent
from lakehouse.cdc.decode import Decoded as Decoded
from lakehouse.cdc.decode import Op as Op
from lakehouse.cdc.decode import SchemaChange as SchemaChange
from lakehouse.cdc.decode import TableChange as TableChange
from lakehouse.cdc.decode import Tombstone as Tombstone
from lakehouse.cdc.decode import TransactionMarker as TransactionMarker
from lakehouse.cdc.decode import decode_message as decode_message
from lakehouse.cdc.models import SnapshotPhase as SnapshotPhase
from lakehouse.cdc.schema import SchemaHandle as SchemaHandle
from lakehouse.cdc.seq import format_seq as format_seq
from lakehouse.cdc.serialize import row_to_json as row_to_json
from lakehouse.cdc.serialize import to_json_compatible as to_json_compatible

__all__ = [
    "DECODE_ERROR_KINDS",
    "DEFAULT_MAX_BYTES",
    "ChangeEvent",
    "Decoded",
    "Op",
    "SchemaChange",
    "SchemaHandle",
    "SnapshotPhase",
    "TableChange",
    "Tombstone",
    "TransactionMarker",
    "decode_message",
    "format_seq",
    "parse_schema",
    "row_to_json",
    "to_json_compatible",
]
