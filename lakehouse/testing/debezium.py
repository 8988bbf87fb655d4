"""Realistic Debezium change streams for tests and demos (pure Python, no Spark).

:class:`DebeziumTable` produces the messages a Debezium PostgreSQL connector (2.x, JSON
converter with ``schemas.enable=true``) sends for one table: a snapshot phase (``op = r``,
``source.snapshot`` ``first`` / ``true`` / ``last``), then inserts, updates, deletes and
truncates with increasing LSNs. Values use Debezium's logical types: decimals as
``org.apache.kafka.connect.data.Decimal`` (base64 two's complement), timestamps as
``io.debezium.time.MicroTimestamp``.

>>> t = DebeziumTable("public", "rates", key="currency", start_ms=1_700_000_000_000)
>>> msgs = t.snapshot([{"currency": "EUR", "rate": "1.0850"}, {"currency": "GBP", "rate": "1.27"}])
>>> [m.value["payload"]["source"]["snapshot"] for m in msgs]
['first', 'last']
>>> m = t.update({"currency": "EUR", "rate": "1.0900"})
>>> m.value["payload"]["op"], m.key["payload"]
('u', {'currency': 'EUR'})
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any


def encode_decimal(value: Decimal | str, scale: int) -> str:
    """Encode a decimal as Kafka Connect does: base64 of the big-endian two's complement
    unscaled value.

    >>> encode_decimal("1.0850", 4)
    'KmI='
    >>> encode_decimal("-0.01", 2)
    '/w=='
    """
    unscaled = int((Decimal(value) * (10**scale)).to_integral_exact())
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


def _wire_json(value: Mapping[str, Any]) -> bytes:
    """JSON as Kafka Connect's ``JsonConverter`` writes it: compact, UTF-8 (not escaped)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True, slots=True)
class Message:
    """One Kafka record: key and value as JSON-ready objects (value None is a tombstone)."""

    key: Mapping[str, Any] | None
    value: Mapping[str, Any] | None

    def key_bytes(self) -> bytes | None:
        """The key as the JSON converter serialises it."""
        return None if self.key is None else _wire_json(self.key)

    def value_bytes(self) -> bytes | None:
        """The value as the JSON converter serialises it."""
        return None if self.value is None else _wire_json(self.value)


class DebeziumTable:
    """Messages of one table: a key column (string), a ``rate`` decimal(12, 4) column, and an
    ``updated_at`` timestamp; the clock advances ``step_ms`` per change.

    Args:
        schema: the Postgres schema (``source.schema``).
        table: the table name.
        key: the primary-key column.
        start_ms: ``source.ts_ms`` of the first message.
        step_ms: how far ``source.ts_ms`` advances per message.
        with_schema: send the Connect schema with every message (as ``schemas.enable=true``).
    """

    SCALE = 4

    def __init__(
        self,
        schema: str,
        table: str,
        *,
        key: str,
        start_ms: int,
        step_ms: int = 1000,
        with_schema: bool = True,
        db: str = "shop",
        lsn: int = 23_000_000,
    ) -> None:
        self.schema, self.table, self.key, self.db = schema, table, key, db
        self.now_ms = start_ms
        self.step_ms = step_ms
        self.with_schema = with_schema
        self.lsn = lsn
        self.tx = 500

    # -------------------------------------------------------------------------- the schemas

    def _row_schema(self, field: str) -> dict[str, Any]:
        return {
            "type": "struct",
            "optional": True,
            "field": field,
            "name": f"dbserver1.{self.schema}.{self.table}.Value",
            "fields": [
                {"type": "string", "optional": False, "field": self.key},
                {
                    "type": "bytes",
                    "optional": True,
                    "field": "rate",
                    "name": "org.apache.kafka.connect.data.Decimal",
                    "version": 1,
                    "parameters": {"scale": str(self.SCALE), "connect.decimal.precision": "12"},
                },
                {
                    "type": "int64",
                    "optional": True,
                    "field": "updated_at",
                    "name": "io.debezium.time.MicroTimestamp",
                    "version": 1,
                },
            ],
        }

    def _envelope_schema(self) -> dict[str, Any]:
        return {
            "type": "struct",
            "optional": False,
            "name": f"dbserver1.{self.schema}.{self.table}.Envelope",
            "fields": [
                self._row_schema("before"),
                self._row_schema("after"),
                {
                    "type": "struct",
                    "optional": False,
                    "field": "source",
                    "name": "io.debezium.connector.postgresql.Source",
                    "fields": [
                        {"type": t, "optional": o, "field": f}
                        for f, t, o in (
                            ("version", "string", False),
                            ("connector", "string", False),
                            ("name", "string", False),
                            ("ts_ms", "int64", False),
                            ("snapshot", "string", True),
                            ("db", "string", False),
                            ("sequence", "string", True),
                            ("schema", "string", False),
                            ("table", "string", False),
                            ("txId", "int64", True),
                            ("lsn", "int64", True),
                        )
                    ],
                },
                {"type": "string", "optional": False, "field": "op"},
                {"type": "int64", "optional": True, "field": "ts_ms"},
            ],
        }

    # ----------------------------------------------------------------------------- messages

    def _image(self, row: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        rate = row.get("rate")
        return {
            self.key: row[self.key],
            "rate": None if rate is None else encode_decimal(rate, self.SCALE),
            "updated_at": row.get("updated_at", self.now_ms * 1000),
        }

    def _message(
        self,
        op: str,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
        snapshot: str,
    ) -> Message:
        self.lsn += 8
        payload = {
            "before": self._image(before),
            "after": self._image(after),
            "source": {
                "version": "2.7.0.Final",
                "connector": "postgresql",
                "name": "dbserver1",
                "ts_ms": self.now_ms,
                "snapshot": snapshot,
                "db": self.db,
                "sequence": json.dumps([None, str(self.lsn)]),
                "schema": self.schema,
                "table": self.table,
                "txId": self.tx,
                "lsn": self.lsn,
            },
            "op": op,
            "ts_ms": self.now_ms + 7,
        }
        value = (
            {"schema": self._envelope_schema(), "payload": payload} if self.with_schema else payload
        )
        key_row = after or before
        key = None
        if key_row is not None:
            key_payload = {self.key: key_row[self.key]}
            key = (
                {
                    "schema": {
                        "type": "struct",
                        "optional": False,
                        "name": f"dbserver1.{self.schema}.{self.table}.Key",
                        "fields": [{"type": "string", "optional": False, "field": self.key}],
                    },
                    "payload": key_payload,
                }
                if self.with_schema
                else key_payload
            )
        self.now_ms += self.step_ms
        return Message(key, value)

    def snapshot(self, rows: Iterable[Mapping[str, Any]]) -> list[Message]:
        """The snapshot phase: one ``r`` per row, first/true/.../last, one transaction."""
        rows = list(rows)
        self.tx += 1
        out = []
        for i, row in enumerate(rows):
            phase = "first" if i == 0 else ("last" if i == len(rows) - 1 else "true")
            if len(rows) == 1:
                phase = "last"
            out.append(self._message("r", None, row, phase))
        return out

    def insert(self, row: Mapping[str, Any]) -> Message:
        """A log-phase insert."""
        self.tx += 1
        return self._message("c", None, row, "false")

    def update(self, row: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> Message:
        """A log-phase update (``before`` as with REPLICA IDENTITY FULL, if given)."""
        self.tx += 1
        return self._message("u", before, row, "false")

    def delete(self, key_value: str, *, tombstone: bool = True) -> list[Message]:
        """A log-phase delete, followed by its Kafka tombstone by default."""
        self.tx += 1
        out = [self._message("d", {self.key: key_value}, None, "false")]
        if tombstone:
            out.append(Message(out[0].key, None))
        return out

    def truncate(self) -> Message:
        """A log-phase truncate (no key, no row images)."""
        self.tx += 1
        msg = self._message("t", None, None, "false")
        return Message(None, msg.value)

    def advance(self, ms: int) -> None:
        """Move the source clock forward."""
        self.now_ms += ms
