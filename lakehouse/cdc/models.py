"""Pydantic v2 models of Debezium messages, with and without the Kafka Connect wrapper.

A Debezium message on a table topic is one of:

* a **change event** (Debezium docs, "Data change events" / "Change event values"): an envelope
  ``{"before", "after", "source", "op", "ts_ms", "transaction"}``, modelled by
  :class:`ChangeEnvelope` with its :class:`SourceInfo` and :class:`TransactionBlock`;
* a **tombstone**: a Kafka record whose value is null, sent after a delete so that log
  compaction can drop the key ("Tombstone events"). It has no model; it is the absence of one.

On other topics, two more message kinds appear and are recognised, not treated as errors:

* **transaction metadata** ("Transaction metadata"): BEGIN/END records,
  :class:`TransactionMetadataValue`;
* **schema change events** ("Schema change topic"): DDL records, :class:`SchemaChangeValue`.

With the Kafka Connect ``JsonConverter`` and ``schemas.enable=true`` each of these values
(and each key) is wrapped as ``{"schema": <Connect schema>, "payload": <value>}``, modelled by
:class:`ConnectMessage` and :class:`ConnectSchema`. With ``schemas.enable=false`` the payload
comes alone.

All models are frozen. Envelope models keep unknown fields (``extra="allow"``) because
connectors add fields over time (``ts_us``/``ts_ns`` in 2.x, ``sequence`` in 1.5, connector
specific positions). Field types are checked strictly (no ``"123"`` -> ``123`` coercion):
a record whose metadata has the wrong type is a bad record, not something to guess at.

Example:
    >>> env = ChangeEnvelope.model_validate(
    ...     {"op": "c", "after": {"id": 1}, "source": {"connector": "mysql", "snapshot": True}}
    ... )
    >>> env.op, env.source.snapshot
    ('c', 'true')
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "SNAPSHOT_PHASES",
    "ChangeEnvelope",
    "ConnectMessage",
    "ConnectSchema",
    "DataCollectionCount",
    "EnvelopeOp",
    "SchemaChangeColumn",
    "SchemaChangeTable",
    "SchemaChangeTableChange",
    "SchemaChangeValue",
    "SnapshotPhase",
    "SourceInfo",
    "TransactionBlock",
    "TransactionMetadataValue",
    "normalize_snapshot",
]

EnvelopeOp = Literal["r", "c", "u", "d", "t", "m"]
"""Every ``op`` a Debezium envelope may carry. ``"m"`` is a Postgres logical decoding message
(``pg_logical_emit_message``), which is not a row change."""

SnapshotPhase = Literal[
    "true",
    "first",
    "first_in_data_collection",
    "last_in_data_collection",
    "last",
    "false",
    "incremental",
]
"""``source.snapshot`` after normalisation (see :func:`normalize_snapshot`)."""

SNAPSHOT_PHASES: frozenset[str] = frozenset(
    (
        "true",
        "first",
        "first_in_data_collection",
        "last_in_data_collection",
        "last",
        "false",
        "incremental",
    )
)


def normalize_snapshot(value: object) -> str:
    """Normalise ``source.snapshot`` to one :data:`SnapshotPhase` string.

    Debezium 0.x and the legacy 1.x MySQL connector send a JSON boolean; later versions send
    an enum string ("Change event values", ``source.snapshot``). ``True`` becomes ``"true"``;
    ``False`` and ``None`` (field absent or null, as for streaming events of some connectors)
    become ``"false"``. Strings must be one of the known phases, exactly.

    Args:
        value: the raw JSON value of ``source.snapshot``.

    Returns:
        The phase string.

    Raises:
        ValueError: when the value is another string or another type.

    Example:
        >>> normalize_snapshot(True), normalize_snapshot(None), normalize_snapshot("last")
        ('true', 'false', 'last')
    """
    if value is None or value is False:
        return "false"
    if value is True:
        return "true"
    if isinstance(value, str) and value in SNAPSHOT_PHASES:
        return value
    raise ValueError(
        f"source.snapshot {value!r} is not a known snapshot phase; expected a boolean or one of "
        f"{sorted(SNAPSHOT_PHASES)}"
    )


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow", strict=True, populate_by_name=True)


class SourceInfo(_Strict):
    """The ``source`` block of an event: where and when the change happened.

    Common fields ("Change event values", ``source``) plus the position fields of each
    connector, all optional because connectors and versions differ:

    * MySQL/MariaDB: ``file``, ``pos``, ``row``, ``gtid``, ``server_id``, ``thread``, ``query``;
    * PostgreSQL: ``lsn``, ``txId`` (as :attr:`tx_id`), ``xmin``, ``sequence`` (1.5+, a JSON
      text ``["<last commit lsn>","<lsn>"]``);
    * SQL Server: ``change_lsn``, ``commit_lsn``, ``event_serial_no``;
    * Oracle: ``scn``, ``commit_scn`` (strings of decimal digits).
    """

    version: str | None = None
    connector: str | None = None
    name: str | None = None
    ts_ms: int | None = None
    ts_us: int | None = None
    ts_ns: int | None = None
    snapshot: SnapshotPhase = "false"
    db: str | None = None
    schema_name: str | None = Field(default=None, alias="schema")
    table: str | None = None
    sequence: str | None = None
    # MySQL / MariaDB binlog position
    file: str | None = None
    pos: int | None = None
    row: int | None = None
    gtid: str | None = None
    server_id: int | None = None
    # PostgreSQL WAL position; Oracle sends txId as a string
    lsn: int | None = None
    tx_id: int | str | None = Field(default=None, alias="txId")
    xmin: int | None = None
    # SQL Server
    change_lsn: str | None = None
    commit_lsn: str | None = None
    event_serial_no: int | None = None
    # Oracle
    scn: str | int | None = None
    commit_scn: str | int | None = None

    @field_validator("snapshot", mode="before")
    @classmethod
    def _normalize_snapshot(cls, value: object) -> str:
        return normalize_snapshot(value)


class TransactionBlock(_Strict):
    """The ``transaction`` block of a data event when ``provide.transaction.metadata`` is on
    ("Transaction metadata", "Data events enrichment")."""

    id: str
    total_order: int | None = None
    data_collection_order: int | None = None


class ChangeEnvelope(_Strict):
    """The value of a Debezium data change event ("Change event values").

    ``before`` and ``after`` are the raw row images exactly as JSON gave them; logical types
    are decoded separately, driven by the Connect schema when there is one.
    """

    op: EnvelopeOp
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    source: SourceInfo | None = None
    ts_ms: int | None = None
    ts_us: int | None = None
    ts_ns: int | None = None
    transaction: TransactionBlock | None = None


class DataCollectionCount(_Strict):
    """One entry of ``data_collections`` in a transaction END record."""

    data_collection: str
    event_count: int


class TransactionMetadataValue(_Strict):
    """A transaction BEGIN or END record on the ``<topic.prefix>.transaction`` topic
    ("Transaction metadata"). ``event_count`` and ``data_collections`` are null on BEGIN."""

    status: Literal["BEGIN", "END"]
    id: str
    event_count: int | None = None
    data_collections: list[DataCollectionCount] | None = None
    ts_ms: int | None = None


class SchemaChangeColumn(_Strict):
    """One column of a table in a schema change event (2.x adds ``comment`` and more)."""

    name: str
    type_name: str | None = Field(default=None, alias="typeName")
    position: int | None = None
    optional: bool | None = None


class SchemaChangeTable(_Strict):
    """The table structure after a schema change."""

    primary_key_column_names: list[str] = Field(default_factory=list, alias="primaryKeyColumnNames")
    columns: list[SchemaChangeColumn] = Field(default_factory=list)


class SchemaChangeTableChange(_Strict):
    """One element of ``tableChanges``: ``type`` is CREATE, ALTER or DROP."""

    type: str
    id: str
    table: SchemaChangeTable | None = None


class SchemaChangeValue(_Strict):
    """A record on the schema change topic ("Schema change topic"). It has no ``op``."""

    source: SourceInfo | None = None
    ts_ms: int | None = None
    database_name: str | None = Field(default=None, alias="databaseName")
    schema_name: str | None = Field(default=None, alias="schemaName")
    ddl: str | None = None
    table_changes: list[SchemaChangeTableChange] = Field(default_factory=list, alias="tableChanges")


class ConnectSchema(BaseModel):
    """A Kafka Connect schema as ``JsonConverter`` writes it (``schemas.enable=true``).

    ``type`` is the physical type (``int8`` .. ``int64``, ``float``, ``double``, ``boolean``,
    ``string``, ``bytes``, ``array``, ``map``, ``struct``); ``name`` the optional logical type
    (``io.debezium.time.Date``, ``org.apache.kafka.connect.data.Decimal``, ...);
    ``parameters`` its string parameters (``scale``, ``connect.decimal.precision``, ...).
    """

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    type: str
    optional: bool = False
    name: str | None = None
    version: int | None = None
    parameters: dict[str, Any] | None = None
    field: str | None = None
    fields: list[ConnectSchema] | None = None
    items: ConnectSchema | None = None
    keys: ConnectSchema | None = None
    values: ConnectSchema | None = None
    doc: str | None = None


class ConnectMessage(BaseModel):
    """The ``JsonConverter`` wrapper ``{"schema": ..., "payload": ...}``. A null ``schema``
    occurs when an embedding engine passes schemaless values in the wrapper."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    schema_: ConnectSchema | None = Field(default=None, alias="schema")
    payload: Any = None
