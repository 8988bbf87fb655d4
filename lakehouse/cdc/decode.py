"""Decode one Kafka record of a Debezium topic into a typed, immutable Python value.

:func:`decode_message` is the entry point the Spark ingest calls per record (inside
``mapInArrow`` on executors). It returns one of:

* :class:`ChangeEvent` -- a row change (``op`` r, c, u, d, t) with its decoded row image,
  column types, key, event time, position and snapshot phase;
* :class:`Tombstone` -- a null/empty value (the tombstone Debezium sends after a delete so
  that compaction can drop the key; "Tombstone events"). Skip it and count it;
* :class:`TransactionMarker` -- a BEGIN/END record ("Transaction metadata");
* :class:`SchemaChange` -- a DDL record ("Schema change topic").

Anything else raises :class:`~lakehouse.errors.CdcDecodeError`, whose ``kind`` is one of
:data:`DECODE_ERROR_KINDS`; hostile input never escapes as another exception.

Decisions (documented contract):

* **Delete without ``before``**: a ``d`` event whose ``before`` is null (a table with
  ``REPLICA IDENTITY NOTHING``, or a stripped message) is still a valid delete with
  ``row=None`` and ``columns=()``; the row it ends is identified by ``key``. The caller must
  dead-letter it if it has no key either.
* **Truncate** (``t``): ``row=None``, ``columns=()``.
* **Missing ``after``** for ``r``/``c``/``u``: error ``missing_row_image``.
* **``op: "m"``** (PostgreSQL logical decoding message) is not a row change: error
  ``unknown_op``. Debezium sends these to a separate ``<prefix>.message`` topic by default.
* **NaN/Infinity** literals are not JSON and are rejected (``malformed_json``). Columns typed
  ``float``/``double`` accept the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``
  (Jackson's form) and decode them to the float values; numbers beyond the double range
  become ``inf`` as in Java.
* **Legacy boolean snapshot**: ``true`` -> ``"true"``; ``false``, null or missing ->
  ``"false"``. Some producers get ``snapshot`` wrong (Debezium 1.1 sends snapshot rows as
  ``op:"c"`` with ``snapshot:"true"``; Flink CDC's snapshot reader sends ``op:"r"`` with
  ``snapshot:"false"``); both are reported as sent.
* **Decimals** are exact :class:`~decimal.Decimal` values (JSON numbers are never read
  through ``float`` when the schema says decimal); a value whose integer part is too wide for
  its ``decimal(p,s)`` column raises ``invalid_value`` (Spark would null the whole row).
* **Lone UTF-16 surrogates** (``"\\ud800"`` escapes without their pair) cannot be written
  as UTF-8 by Arrow, Spark or Delta and raise ``encoding``, like invalid UTF-8 bytes.
* **Event time**: ``source.ts_ms``, or the envelope ``ts_ms`` when ``source.ts_ms`` is
  missing or null. A ``0`` (legacy MySQL snapshots) is kept as 0. One outside years 1 to
  9999 raises ``invalid_value`` (no timestamp column can hold it).
* **Key**: decoded like a row image; a key that is not JSON, not an object, or fails to
  decode gives ``key=None`` and ``key_columns=()``, never an error.
* **Size**: values over ``max_bytes`` (default 16 MiB) raise ``too_large``; keys over it are
  ignored (``key=None``).
* **Nesting**: JSON nested deeper than the parser's recursion limit (about 1,000 levels, less
  when the caller's stack is already deep) raises ``too_deep``, as does a Connect schema
  nested deeper than 64 levels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pydantic import ValidationError

from lakehouse.cdc._parse import DEFAULT_CACHE, SchemaCache, parse_message, to_text
from lakehouse.cdc.models import (
    ChangeEnvelope,
    SchemaChangeValue,
    SnapshotPhase,
    SourceInfo,
    TransactionMetadataValue,
)
from lakehouse.cdc.schema import SchemaHandle, check_columns, infer_row
from lakehouse.cdc.seq import position_seq
from lakehouse.errors import CdcDecodeError

__all__ = [
    "DECODE_ERROR_KINDS",
    "DEFAULT_MAX_BYTES",
    "ChangeEvent",
    "Decoded",
    "Op",
    "SchemaChange",
    "SnapshotPhase",
    "TableChange",
    "Tombstone",
    "TransactionMarker",
    "decode_message",
]

Op = Literal["r", "c", "u", "d", "t"]
"""Row-change operations: read (snapshot), create, update, delete, truncate."""

DEFAULT_MAX_BYTES: Final = 16 * 1024 * 1024

DECODE_ERROR_KINDS: Final = frozenset(
    {
        "malformed_json",
        "not_an_object",
        "invalid_envelope",
        "unknown_op",
        "missing_row_image",
        "invalid_value",
        "encoding",
        "too_large",
        "too_deep",
        "bad_column_name",
    }
)
"""Every ``CdcDecodeError.kind`` :func:`decode_message` raises."""

_ROW_OPS: Final = frozenset({"r", "c", "u"})
_ALL_OPS: Final = frozenset({"r", "c", "u", "d", "t"})
_NO_SOURCE: Final = SourceInfo()


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One row change.

    Attributes:
        op: ``r`` (snapshot read), ``c``, ``u``, ``d`` or ``t``.
        row: the decoded row image: ``after`` for r/c/u; ``before`` for d (only the key
            columns are non-null under PostgreSQL ``REPLICA IDENTITY DEFAULT``; ``None`` when
            ``before`` is null); ``None`` for t.
        columns: ``(column, Spark SQL type)`` for every column of ``row`` in schema order
            (JSON order without a schema); ``()`` when ``row`` is None. See
            :mod:`lakehouse.cdc.schema` for the types.
        key: the decoded Kafka key (Debezium's key struct) when one was given and decodes.
        key_columns: the key's field names (schema order, or JSON order without a schema).
        event_time_ms: ``source.ts_ms``, else the envelope ``ts_ms``; ``None`` if neither.
        seq: the connector's position (:func:`lakehouse.cdc.seq.position_seq`); ``None`` when
            the connector gives none.
        snapshot: the normalised ``source.snapshot``.
        db: ``source.db``.
        schema_name: ``source.schema`` (PostgreSQL, SQL Server, Oracle).
        table: ``source.table`` (``source.collection`` for MongoDB).
        connector: ``source.connector`` (``mysql``, ``postgresql``, ...).
        tx_id: the transaction: ``transaction.id`` when transaction metadata is on (same form
            as :attr:`TransactionMarker.tx_id`), else PostgreSQL/Oracle ``source.txId``, else
            MySQL ``source.gtid``; ``None`` when unknown.
        ts_ms: the envelope ``ts_ms``: when the connector processed the change.
        schema: the Connect schema the row was decoded with: the record's own, or (a record
            without one, in a stream whose table has one) the schema the caller gave for its
            table; ``None`` when the row was decoded without a schema.
        schema_given: ``schema`` came from the caller, not from the record.
    """

    op: Op
    row: dict[str, Any] | None
    columns: tuple[tuple[str, str], ...]
    key: dict[str, Any] | None
    key_columns: tuple[str, ...]
    event_time_ms: int | None
    seq: str | None
    snapshot: SnapshotPhase
    db: str | None
    schema_name: str | None
    table: str | None
    connector: str | None
    tx_id: str | None
    ts_ms: int | None = None
    schema: SchemaHandle | None = field(default=None, compare=False, repr=False)
    schema_given: bool = False

    @property
    def source_table(self) -> str | None:
        """``schema.table`` when the source has a schema (PostgreSQL, SQL Server, Oracle),
        else ``db.table`` (MySQL), else ``table``; ``None`` when the table is unknown.

        Example:
            >>> e = ChangeEvent("c", {}, (), None, (), None, None, "false", "mydb", "public",
            ...                 "orders", "postgresql", None)
            >>> e.source_table
            'public.orders'
        """
        return _qualified_table(self.schema_name, self.db, self.table)


def _qualified_table(schema_name: str | None, db: str | None, table: str | None) -> str | None:
    """``schema.table``, else ``db.table``, else ``table``; None without a table."""
    if table is None:
        return None
    prefix = schema_name if schema_name is not None else db
    return table if prefix is None else f"{prefix}.{table}"


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A null or empty Kafka value (or ``{"schema": ..., "payload": null}``): the tombstone
    after a delete. Carries the decoded key so the caller can log or count it."""

    key: dict[str, Any] | None = None
    key_columns: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TransactionMarker:
    """A transaction BEGIN or END record ("Transaction metadata").

    Attributes:
        status: ``"BEGIN"`` or ``"END"``.
        tx_id: the transaction id as Debezium writes it (PostgreSQL ``"txId:LSN"``, MySQL a
            GTID or ``file=...,pos=...``).
        event_count: total events in the transaction (END only).
        data_collections: ``(table, event count)`` pairs (END only).
        event_time_ms: the record's ``ts_ms``.
    """

    status: str
    tx_id: str
    event_count: int | None
    data_collections: tuple[tuple[str, int], ...] = ()
    event_time_ms: int | None = None


@dataclass(frozen=True, slots=True)
class TableChange:
    """One entry of a schema change's ``tableChanges``.

    Attributes:
        type: ``CREATE``, ``ALTER`` or ``DROP``.
        id: the table id as Debezium writes it, e.g. ``"mydb"."test"``.
        primary_key_columns: the primary key after the change.
        columns: column names after the change, in table order.
    """

    type: str
    id: str
    primary_key_columns: tuple[str, ...]
    columns: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """A schema change record ("Schema change topic").

    Attributes:
        ddl: the DDL statement.
        db: ``databaseName`` (else ``source.db``).
        table_changes: the structured changes (empty when the connector sent none).
        schema_name: ``schemaName``.
        table: ``source.table``.
        event_time_ms: ``source.ts_ms``, else ``ts_ms``.
        connector: ``source.connector``.
        snapshot: the normalised ``source.snapshot``.
    """

    ddl: str | None
    db: str | None
    table_changes: tuple[TableChange, ...]
    schema_name: str | None = None
    table: str | None = None
    event_time_ms: int | None = None
    connector: str | None = None
    snapshot: SnapshotPhase = "false"


Decoded = ChangeEvent | Tombstone | TransactionMarker | SchemaChange


def _invalid(model: str, e: ValidationError) -> CdcDecodeError:
    err = e.errors(include_url=False)[0]
    loc = ".".join(str(part) for part in err["loc"]) or "(root)"
    got = err.get("input")
    return CdcDecodeError(
        f"invalid {model}: field {loc}: {err['msg']} (got {type(got).__name__} {got!r:.60})",
        kind="invalid_envelope",
    )


#: Event times a timestamp column can hold (years 1 to 9999), in epoch milliseconds.
MIN_EVENT_TIME_MS: Final = -62_135_596_800_000
MAX_EVENT_TIME_MS: Final = 253_402_300_799_999


def _event_time(source: SourceInfo | None, ts_ms: int | None) -> int | None:
    value = source.ts_ms if source is not None and source.ts_ms is not None else ts_ms
    if value is not None and not MIN_EVENT_TIME_MS <= value <= MAX_EVENT_TIME_MS:
        # beyond what a timestamp (and a 64-bit column) holds: the record cannot be placed
        raise CdcDecodeError(
            f"event time {value} ms (source.ts_ms, else ts_ms) is outside the timestamp "
            "range (years 1 to 9999)",
            kind="invalid_value",
        )
    return value


def _decode_key(
    key: Any, max_bytes: int, cache: SchemaCache
) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    if key is None:
        return None, ()
    try:
        text = to_text(key, max_bytes, "key")
        if not text:
            return None, ()
        _, handle, payload = parse_message(text, "key", cache)
        if type(payload) is not dict:
            return None, ()
        plan = handle.plan() if handle is not None else None
        if plan is not None:
            row, _ = plan.decode_row(payload)
            return row, plan.column_names + tuple(k for k in row if k not in plan.field_names)
        row, columns = infer_row(payload)
        return row, tuple(name for name, _ in columns)
    except (CdcDecodeError, RecursionError):
        # The contract: a key that does not decode is absent, not an error.
        return None, ()


def _payload_table(payload: dict[str, Any]) -> str | None:
    """The source table a payload names (:attr:`ChangeEvent.source_table`), read without
    validating the envelope; None when it names none."""
    source = payload.get("source")
    if type(source) is not dict:
        return None

    def text(name: str) -> str | None:
        value = source.get(name)
        return value if type(value) is str else None

    table = text("table")
    return _qualified_table(
        text("schema"), text("db"), text("collection") if table is None else table
    )


def _change_event(
    payload: dict[str, Any],
    handle: SchemaHandle | None,
    key: tuple[dict[str, Any] | None, tuple[str, ...]],
    *,
    given: bool = False,
) -> ChangeEvent:
    op = payload["op"]
    if type(op) is not str:
        raise CdcDecodeError(
            f"op must be a string, got {type(op).__name__} {op!r:.40}", kind="invalid_envelope"
        )
    if op not in _ALL_OPS:
        hint = " (a PostgreSQL logical decoding message, not a row change)" if op == "m" else ""
        raise CdcDecodeError(
            f"op {op!r:.40} is not a row change{hint}; expected one of r, c, u, d, t",
            kind="unknown_op",
        )
    try:
        env = ChangeEnvelope.model_validate(payload)
    except ValidationError as e:
        raise _invalid("change event envelope", e) from None

    if op == "t":
        image, field = None, None
    elif op == "d":
        image, field = env.before, "before"
    else:
        image, field = env.after, "after"
        if image is None:
            raise CdcDecodeError(
                f"op {op!r} has no 'after' row image; the record is truncated or was not "
                "written by Debezium",
                kind="missing_row_image",
            )

    row: dict[str, Any] | None = None
    columns: tuple[tuple[str, str], ...] = ()
    if image is not None:
        plan = handle.plan(field) if handle is not None else None
        if plan is not None:
            try:
                row, columns = plan.decode_row(image)
            except CdcDecodeError as e:
                if not given:
                    raise
                raise CdcDecodeError(
                    f"{e} (the record has no schema of its own; it was read with the schema "
                    "of its table's last records that had one)",
                    kind=e.kind,
                ) from None
        else:
            row, columns = infer_row(image)
        check_columns(columns)

    # A partial envelope without `source` reads as one with every source field missing.
    source = env.source if env.source is not None else _NO_SOURCE
    tx_id: str | None = None
    if env.transaction is not None:
        tx_id = env.transaction.id
    elif source.tx_id is not None:
        tx_id = str(source.tx_id)
    elif source.gtid is not None:
        tx_id = source.gtid

    table = source.table
    if table is None:
        collection = (source.model_extra or {}).get("collection")
        table = collection if type(collection) is str else None
    return ChangeEvent(
        op=op,  # type: ignore[arg-type]  # checked against _ALL_OPS above
        row=row,
        columns=columns,
        key=key[0],
        key_columns=key[1],
        event_time_ms=_event_time(source, env.ts_ms),
        seq=position_seq(source),
        snapshot=source.snapshot,
        db=source.db,
        schema_name=source.schema_name,
        table=table,
        connector=source.connector,
        tx_id=tx_id,
        ts_ms=env.ts_ms,
        schema=handle,
        schema_given=given and handle is not None,
    )


def _transaction_marker(payload: dict[str, Any]) -> TransactionMarker:
    try:
        value = TransactionMetadataValue.model_validate(payload)
    except ValidationError as e:
        raise _invalid("transaction metadata record", e) from None
    collections = tuple((c.data_collection, c.event_count) for c in value.data_collections or ())
    return TransactionMarker(value.status, value.id, value.event_count, collections, value.ts_ms)


def _schema_change(payload: dict[str, Any]) -> SchemaChange:
    try:
        value = SchemaChangeValue.model_validate(payload)
    except ValidationError as e:
        raise _invalid("schema change record", e) from None
    source = value.source
    changes = tuple(
        TableChange(
            type=change.type,
            id=change.id,
            primary_key_columns=tuple(change.table.primary_key_column_names)
            if change.table
            else (),
            columns=tuple(
                c.name
                for c in sorted(
                    change.table.columns,
                    key=lambda c: c.position if c.position is not None else 0,
                )
            )
            if change.table
            else (),
        )
        for change in value.table_changes
    )
    return SchemaChange(
        ddl=value.ddl,
        db=value.database_name
        if value.database_name is not None
        else (source.db if source else None),
        table_changes=changes,
        schema_name=value.schema_name,
        table=source.table if source else None,
        event_time_ms=_event_time(source, value.ts_ms),
        connector=source.connector if source else None,
        snapshot=source.snapshot if source else "false",
    )


def _decode(
    value: Any,
    key: Any,
    max_bytes: int,
    cache: SchemaCache,
    schemas: Mapping[str, SchemaHandle] | None = None,
) -> Decoded:
    if value is None:
        return Tombstone(*_decode_key(key, max_bytes, cache))
    text = to_text(value, max_bytes, "value")
    if not text:
        return Tombstone(*_decode_key(key, max_bytes, cache))
    _, handle, payload = parse_message(text, "value", cache)
    if payload is None:
        return Tombstone(*_decode_key(key, max_bytes, cache))
    if type(payload) is not dict:
        raise CdcDecodeError(
            f"the value (payload) must be a JSON object, got {type(payload).__name__}",
            kind="not_an_object",
        )
    if "op" in payload:
        given = False
        if handle is None and schemas:
            table = _payload_table(payload)
            if table is not None and table in schemas:
                handle, given = schemas[table], True
        return _change_event(payload, handle, _decode_key(key, max_bytes, cache), given=given)
    if "status" in payload and "id" in payload:
        return _transaction_marker(payload)
    if "ddl" in payload or "tableChanges" in payload:
        return _schema_change(payload)
    raise CdcDecodeError(
        "the value has no 'op' field and is neither a transaction marker (status/id) nor a "
        "schema change (ddl/tableChanges); is the topic a Debezium topic?",
        kind="invalid_envelope",
    )


def decode_message(
    value: bytes | str | None,
    key: bytes | str | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    cache: SchemaCache | None = None,
    schemas: Mapping[str, SchemaHandle] | None = None,
) -> Decoded:
    """Decode one Kafka record of a Debezium topic (``JsonConverter``, with or without
    ``schemas.enable``).

    Runs on Spark executors, once per record: JSON is parsed once; the Connect schema of a
    table is parsed and compiled once per process (cached by its text); nothing is logged.

    Args:
        value: the record value: UTF-8 JSON bytes or text. ``None``, empty, ``null`` or a
            wrapper with a null payload is a tombstone.
        key: the record key, decoded into :attr:`ChangeEvent.key` on a best-effort basis.
        max_bytes: largest value accepted (``len`` of bytes, or characters of a str).
        cache: schema cache to use; the default is one per process.
        schemas: Connect envelope schemas by source table (``schema.table``, ``db.table``):
            a change event without a schema of its own (a producer or SMT that dropped it in
            a stream that has one) is decoded with its table's, as if it had carried it. A
            value that does not fit it raises ``invalid_value`` saying so; fields it lacks
            are typed from their values, as without a schema.

    Returns:
        A :class:`ChangeEvent`, :class:`Tombstone`, :class:`TransactionMarker` or
        :class:`SchemaChange`.

    Raises:
        CdcDecodeError: for anything that is not valid Debezium, with ``kind`` in
            :data:`DECODE_ERROR_KINDS`: ``malformed_json`` (not JSON, NaN/Infinity literals),
            ``not_an_object``, ``invalid_envelope`` (wrong-typed metadata, bad schema, no
            ``op``), ``unknown_op``, ``missing_row_image``, ``invalid_value`` (a column value
            that does not match its schema, a malformed position, a number literal out of
            range), ``encoding`` (not UTF-8, lone surrogate escapes, not bytes/str),
            ``too_large``, ``too_deep``. No other exception escapes.

    Example:
        >>> event = decode_message(
        ...     b'{"op":"u","after":{"id":7,"price":1.10},"source":{"connector":"mysql",'
        ...     b'"db":"shop","table":"items","ts_ms":1700000000000,"snapshot":"false",'
        ...     b'"file":"mysql-bin.000003","pos":1442,"row":1}}',
        ...     key=b'{"id":7}',
        ... )
        >>> event.op, event.row, event.source_table, event.key_columns
        ('u', {'id': 7, 'price': 1.1}, 'shop.items', ('id',))
        >>> event.seq
        '00000000000000000003.00000000000000001442.00000000000000000001'
        >>> decode_message(None, key=b'{"id":7}')
        Tombstone(key={'id': 7}, key_columns=('id',))
    """
    try:
        return _decode(value, key, max_bytes, DEFAULT_CACHE if cache is None else cache, schemas)
    except CdcDecodeError:
        raise
    except RecursionError:
        raise CdcDecodeError(
            "the record nests too deeply to decode (recursion limit reached)", kind="too_deep"
        ) from None
    except MemoryError:
        raise
    except Exception as e:
        # Error boundary: a decoder bug must not kill the executor's whole batch. The record
        # goes to the dead-letter table with this reason; the message names the bug.
        raise CdcDecodeError(
            f"unexpected decoder failure {type(e).__name__}: {e}", kind="invalid_value"
        ) from e
