"""The pydantic models of Debezium messages: frozen, strict, open to new fields."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES
from pydantic import ValidationError

from lakehouse.cdc.models import (
    ChangeEnvelope,
    ConnectMessage,
    SchemaChangeValue,
    SourceInfo,
    TransactionMetadataValue,
    normalize_snapshot,
)

DEBEZIUM = FIXTURES / "debezium"


def _load(name: str) -> dict:
    return json.loads((DEBEZIUM / name).read_text(encoding="utf-8"))


def test_enveloped_fixture_validates_with_and_without_the_wrapper():
    message = ConnectMessage.model_validate(_load("mysql_2.7.0_delete_with_schema.json"))
    assert message.schema_ is not None and message.schema_.name == (
        "testc.inventory.customers.Envelope"
    )
    assert [f.field for f in message.schema_.fields or []][:3] == ["before", "after", "source"]
    env = ChangeEnvelope.model_validate(message.payload)
    assert (env.op, env.ts_us, env.source.server_id, env.source.thread) == (
        "d",
        1718486007972986,
        223344,
        13,
    )
    # connector fields the model does not name are kept as extras
    assert env.source.model_extra == {"thread": 13, "query": None}


def test_postgres_source_fields_and_aliases():
    source = ChangeEnvelope.model_validate(
        _load("postgres_2.1.4_create_payload_extracted_from_enveloped_message.json")
    ).source
    assert (source.schema_name, source.tx_id, source.lsn, source.sequence) == (
        "inventory",
        767,
        34466480,
        '["34442256","34466480"]',
    )


def test_models_are_frozen():
    source = SourceInfo.model_validate({"connector": "mysql"})
    with pytest.raises(ValidationError):
        source.connector = "postgresql"  # type: ignore[misc]


def test_strict_types_do_not_coerce():
    with pytest.raises(ValidationError):
        SourceInfo.model_validate({"ts_ms": "1700000000000"})
    with pytest.raises(ValidationError):
        SourceInfo.model_validate({"pos": True})
    with pytest.raises(ValidationError):
        ChangeEnvelope.model_validate({"op": "z"})


@pytest.mark.parametrize(
    ("raw", "phase"),
    [
        (True, "true"),
        (False, "false"),
        (None, "false"),
        ("true", "true"),
        ("first", "first"),
        ("first_in_data_collection", "first_in_data_collection"),
        ("last_in_data_collection", "last_in_data_collection"),
        ("last", "last"),
        ("false", "false"),
        ("incremental", "incremental"),
    ],
)
def test_snapshot_values(raw, phase):
    assert normalize_snapshot(raw) == phase
    assert SourceInfo.model_validate({"snapshot": raw}).snapshot == phase


@pytest.mark.parametrize("raw", ["TRUE", "yes", 1, 0, ""])
def test_unknown_snapshot_values_are_rejected(raw):
    with pytest.raises(ValueError, match="snapshot"):
        normalize_snapshot(raw)


def test_transaction_and_schema_change_models():
    end = TransactionMetadataValue.model_validate(
        _load("postgres_2.4.2_transaction_metadata_end.json")["payload"]
    )
    assert [(c.data_collection, c.event_count) for c in end.data_collections or []] == [
        ("public.orders_tx", 5),
        ("public.person", 6),
    ]
    change = SchemaChangeValue.model_validate(
        _load("mysql_2.4.2_schema_change_event_alter_table_schema_null.json")["payload"]
    )
    table = change.table_changes[0].table
    assert table is not None
    assert [c.type_name for c in table.columns] == ["INT", "TIMESTAMP", "VARCHAR"]
    assert table.primary_key_column_names == ["id"]
