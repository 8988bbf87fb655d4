"""Every vendored Debezium fixture decodes, and decodes to the values its source shows.

Provenance and caveats of each file: tests/fixtures/debezium/SOURCES.md.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES

from lakehouse.cdc import (
    ChangeEvent,
    SchemaChange,
    TableChange,
    Tombstone,
    TransactionMarker,
    decode_message,
    row_to_json,
)
from lakehouse.dimension.signals import parse_heartbeat, parse_notification
from lakehouse.errors import CdcDecodeError

DEBEZIUM = FIXTURES / "debezium"
ALL_FIXTURES = sorted(DEBEZIUM.glob("*.json"))
# records of Debezium's notification and heartbeat topics (not change events)
SIGNAL_FIXTURES = sorted((DEBEZIUM / "signals").glob("*.json"))
KEY_MARKER = "_key_"

SPARK_SCALARS = {
    "boolean",
    "tinyint",
    "smallint",
    "int",
    "bigint",
    "float",
    "double",
    "string",
    "binary",
    "date",
    "timestamp",
    "void",
}


def _value_file_for_key(key_file: Path) -> Path:
    # mysql_2.7.0_delete_key_with_schema.json -> mysql_2.7.0_delete_with_schema.json
    return key_file.with_name(key_file.name.replace(KEY_MARKER, "_"))


def _decode(name: str, **kwargs: Any) -> Any:
    return decode_message((DEBEZIUM / name).read_bytes(), **kwargs)


def _valid_spark_type(t: str) -> bool:
    if t in SPARK_SCALARS:
        return True
    if t.startswith("array<") and t.endswith(">"):
        return _valid_spark_type(t[6:-1])
    if t.startswith("decimal(") and t.endswith(")"):
        p, s = (int(x) for x in t[8:-1].split(","))
        return 1 <= p <= 38 and 0 <= s <= p
    return False


def test_fixture_directory_is_not_empty():
    assert len(ALL_FIXTURES) >= 30


@pytest.mark.parametrize("path", ALL_FIXTURES, ids=lambda p: p.name)
def test_every_fixture_decodes(path: Path):
    if KEY_MARKER in path.name:
        # A Kafka key file decodes as the key of its value file.
        event = decode_message(_value_file_for_key(path).read_bytes(), key=path.read_bytes())
        assert isinstance(event, ChangeEvent)
        assert event.key is not None and event.key_columns
        return
    decoded = decode_message(path.read_bytes())
    assert isinstance(decoded, ChangeEvent | TransactionMarker | SchemaChange)
    # str input decodes identically to bytes input
    assert decode_message(path.read_text(encoding="utf-8")) == decoded
    if isinstance(decoded, ChangeEvent):
        if decoded.row is None:
            assert decoded.columns == ()
        else:
            assert [c for c, _ in decoded.columns] == list(decoded.row)
            assert all(_valid_spark_type(t) for _, t in decoded.columns), decoded.columns
            # the row serialises to JSON that parses back (exact decimals as number tokens)
            back = json.loads(row_to_json(decoded.row), parse_float=Decimal)
            assert list(back) == list(decoded.row)


# name -> expected (type, op, snapshot, event_time_ms, seq, source_table). The seq strings are
# written out in full on purpose: they are the stored ordering key.
MYSQL_SEQ = "00000000000000000003.{pos:020d}.{row:020d}"
EXPECTED: dict[str, tuple[str, str, str, int | None, str | None, str | None]] = {
    # Debezium's own serde fixture: legacy boolean snapshot=false, source.ts_ms 0 kept as 0
    "mysql_0.10.0_legacy_boolean_snapshot_create_with_schema_debezium_fixture.json": (
        "c",
        "false",
        0,
        MYSQL_SEQ.format(pos=154, row=0),
        "inventory.customers",
    ),
    # legacy 1.1.1 snapshot row sent as op c with snapshot "true": reported as sent
    "mysql_1.1.1_legacy_snapshot_true_op_c_with_schema.json": (
        "c",
        "true",
        0,
        MYSQL_SEQ.format(pos=154, row=0),
        "inventory.products",
    ),
    "mysql_1.9.5_create_payload_only.json": (
        "c",
        "false",
        1661328018000,
        MYSQL_SEQ.format(pos=392, row=0),
        "inventory.customers",
    ),
    "mysql_1.9.5_create_with_schema.json": (
        "c",
        "false",
        1661328018000,
        MYSQL_SEQ.format(pos=392, row=0),
        "inventory.customers",
    ),
    "mysql_1.9.5_delete_payload_only.json": (
        "d",
        "false",
        1661328550000,
        MYSQL_SEQ.format(pos=1831, row=0),
        "inventory.customers",
    ),
    "mysql_1.9.5_delete_with_schema.json": (
        "d",
        "false",
        1661328550000,
        MYSQL_SEQ.format(pos=1831, row=0),
        "inventory.customers",
    ),
    "mysql_1.9.5_snapshot_read_true_payload_only.json": (
        "r",
        "true",
        1661327688868,
        MYSQL_SEQ.format(pos=157, row=0),
        "inventory.customers",
    ),
    "mysql_1.9.5_snapshot_read_true_with_schema.json": (
        "r",
        "true",
        1661327688868,
        MYSQL_SEQ.format(pos=157, row=0),
        "inventory.customers",
    ),
    # two rows of one multi-row binlog event differ only in `row`
    "mysql_1.9.5_update_payload_only_same_binlog_event_row0.json": (
        "u",
        "false",
        1661328502000,
        MYSQL_SEQ.format(pos=1442, row=0),
        "inventory.customers",
    ),
    "mysql_1.9.5_update_payload_only_same_binlog_event_row1.json": (
        "u",
        "false",
        1661328502000,
        MYSQL_SEQ.format(pos=1442, row=1),
        "inventory.customers",
    ),
    "mysql_1.9.5_update_with_schema.json": (
        "u",
        "false",
        1661328309000,
        MYSQL_SEQ.format(pos=722, row=0),
        "inventory.customers",
    ),
    # Flink CDC snapshot reader: op r with snapshot "false", file "" -> no position
    "mysql_1.9.7_flinkcdc_all_types_read_snapshot_false_with_schema.json": (
        "r",
        "false",
        0,
        None,
        "paimon_sync_table.all_types_table",
    ),
    "mysql_2.7.0_delete_with_schema.json": (
        "d",
        "false",
        1718486007000,
        MYSQL_SEQ.format(pos=632, row=0),
        "inventory.customers",
    ),
    "mysql_2.7.0_snapshot_read_last_in_data_collection_with_schema.json": (
        "r",
        "last_in_data_collection",
        1718461481000,
        MYSQL_SEQ.format(pos=824, row=0),
        "inventory.orders",
    ),
    "mysql_3.0.1_snapshot_read_true_payload_only.json": (
        "r",
        "true",
        1731327511000,
        MYSQL_SEQ.format(pos=797, row=0),
        "inventory.customers",
    ),
    "mysql_3.0.1_update_payload_only.json": (
        "u",
        "false",
        1731327659000,
        MYSQL_SEQ.format(pos=1041, row=0),
        "inventory.customers",
    ),
    # partial envelope without source or ts_ms: nothing to take the time or position from
    "mysql_flinkcdc_all_types_read_decimal_format_numeric_PARTIAL_no_source.json": (
        "r",
        "false",
        None,
        None,
        None,
    ),
    "postgres_1.2.1_create_payload_only.json": (
        "c",
        "false",
        1596010946488,
        "00000000000034132560",
        "inventory.products",
    ),
    "postgres_1.2.1_delete_payload_only.json": (
        "d",
        "false",
        1596010988168,
        "00000000000034133800",
        "inventory.products",
    ),
    "postgres_1.2.1_update_replica_identity_full_payload_only.json": (
        "u",
        "false",
        1596010889629,
        "00000000000034131104",
        "inventory.products",
    ),
    "postgres_1.9.5_snapshot_read_true_with_schema.json": (
        "r",
        "true",
        1664141081149,
        "00000000000024363832",
        "public.customer",
    ),
    "postgres_1.9.7_snapshot_read_last_numeric_types_decimal_double_payload_only.json": (
        "r",
        "last",
        1684404343201,
        "00000000000026519216",
        "public.orders",
    ),
    # same lsn as the "true" snapshot row: the whole snapshot shares one position
    "postgres_1.9.7_snapshot_read_last_payload_only.json": (
        "r",
        "last",
        1685975423896,
        "00000000000023911624",
        "public.orders",
    ),
    "postgres_1.9.7_snapshot_read_last_temporal_types_interval_string_payload_only.json": (
        "r",
        "last",
        1684733351963,
        "00000000000026505352",
        "public.orders",
    ),
    "postgres_1.9.7_snapshot_read_true_payload_only.json": (
        "r",
        "true",
        1685975423896,
        "00000000000023911624",
        "public.orders",
    ),
    "postgres_1.9.7_update_replica_identity_default_payload_only.json": (
        "u",
        "false",
        1686029203809,
        "00000000000023911952",
        "public.orders",
    ),
    "postgres_2.1.4_create_payload_extracted_from_enveloped_message.json": (
        "c",
        "false",
        1733906311010,
        "00000000000034466480",
        "inventory.customers",
    ),
    "postgres_3.0.0_create_temporal_types_arrays_with_schema.json": (
        "c",
        "false",
        1748996736150,
        "00000000000022096576",
        "public.test_data_types",
    ),
    # captured from our own stack (PostgreSQL 15, Debezium 3.5.0 in Kafka Connect): first and
    # last row of one snapshot share its position and time
    "postgres_3.5.0_snapshot_read_first_with_schema.json": (
        "r",
        "first",
        1795582780452,
        "00000000000026505248",
        "public.rates",
    ),
    "postgres_3.5.0_snapshot_read_last_with_schema.json": (
        "r",
        "last",
        1795582780452,
        "00000000000026505248",
        "public.rates",
    ),
    "postgres_3.5.0_update_with_schema.json": (
        "u",
        "false",
        1795582781648,
        "00000000000026505344",
        "public.rates",
    ),
    "postgres_3.5.0_delete_with_schema.json": (
        "d",
        "false",
        1795582781656,
        "00000000000026505600",
        "public.rates",
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_change_event_metadata(name: str):
    op, snapshot, event_time_ms, seq, source_table = EXPECTED[name]
    event = _decode(name)
    assert isinstance(event, ChangeEvent)
    assert (event.op, event.snapshot, event.event_time_ms, event.seq, event.source_table) == (
        op,
        snapshot,
        event_time_ms,
        seq,
        source_table,
    )


def test_every_change_event_fixture_has_expectations():
    # A new change-event fixture needs a row in EXPECTED (the decode test covers it already).
    names = {p.name for p in ALL_FIXTURES if KEY_MARKER not in p.name}
    change_events = {n for n in names if isinstance(_decode(n), ChangeEvent)}
    assert change_events == set(EXPECTED)


def test_multi_row_binlog_event_rows_order_by_row_index():
    row0 = _decode("mysql_1.9.5_update_payload_only_same_binlog_event_row0.json")
    row1 = _decode("mysql_1.9.5_update_payload_only_same_binlog_event_row1.json")
    assert row0.seq < row1.seq


def test_mysql_log_order_matches_seq_order():
    # the tutorial session: snapshot (pos 157), insert (392), update (722), update (1442 row 0/1),
    # delete (1831)
    names = [
        "mysql_1.9.5_snapshot_read_true_payload_only.json",
        "mysql_1.9.5_create_payload_only.json",
        "mysql_1.9.5_update_with_schema.json",
        "mysql_1.9.5_update_payload_only_same_binlog_event_row0.json",
        "mysql_1.9.5_update_payload_only_same_binlog_event_row1.json",
        "mysql_1.9.5_delete_payload_only.json",
    ]
    seqs = [_decode(n).seq for n in names]
    assert seqs == sorted(seqs)


@pytest.mark.parametrize("stem", ["create", "delete", "snapshot_read_true"])
def test_payload_only_and_enveloped_mysql_events_agree(stem: str):
    plain = _decode(f"mysql_1.9.5_{stem}_payload_only.json")
    wrapped = _decode(f"mysql_1.9.5_{stem}_with_schema.json")
    assert plain.row == wrapped.row
    assert (plain.op, plain.seq, plain.event_time_ms, plain.snapshot, plain.source_table) == (
        wrapped.op,
        wrapped.seq,
        wrapped.event_time_ms,
        wrapped.snapshot,
        wrapped.source_table,
    )
    # types differ: the schema says int32, JSON alone can only say bigint
    assert dict(wrapped.columns)["id"] == "int"
    assert dict(plain.columns)["id"] == "bigint"


def test_delete_row_is_the_before_image():
    event = _decode("mysql_1.9.5_delete_with_schema.json")
    assert event.row == {"id": 1006, "first_name": "add1", "last_name": "add2", "email": "add1"}
    pg = _decode("postgres_1.2.1_delete_payload_only.json")
    assert pg.row["description"] == "Big 2-wheel scooter "  # trailing space kept


def test_update_with_replica_identity_default_takes_after_without_before():
    event = _decode("postgres_1.9.7_update_replica_identity_default_payload_only.json")
    assert event.op == "u"
    assert event.row["product_id"] == 3
    assert event.tx_id == "491"


def test_postgres_and_mysql_identify_transactions_and_tables():
    pg = _decode("postgres_2.1.4_create_payload_extracted_from_enveloped_message.json")
    assert (pg.connector, pg.db, pg.schema_name, pg.table, pg.tx_id) == (
        "postgresql",
        "postgres",
        "inventory",
        "customers",
        "767",
    )
    my = _decode("mysql_3.0.1_update_payload_only.json")
    assert (my.connector, my.db, my.schema_name, my.table, my.tx_id) == (
        "mysql",
        "inventory",
        None,
        "customers",
        None,
    )
    assert my.ts_ms == 1731327659957


@pytest.mark.parametrize(
    ("value_name", "key_name", "key", "columns"),
    [
        (
            "mysql_2.7.0_delete_with_schema.json",
            "mysql_2.7.0_delete_key_with_schema.json",
            {"id": 1004},
            ("id",),
        ),
        (
            "mysql_2.7.0_snapshot_read_last_in_data_collection_with_schema.json",
            "mysql_2.7.0_snapshot_read_last_in_data_collection_key_with_schema.json",
            {"order_number": 10004},
            ("order_number",),
        ),
        (
            "postgres_3.5.0_delete_with_schema.json",
            "postgres_3.5.0_delete_key_with_schema.json",
            {"currency": "C0002"},
            ("currency",),
        ),
    ],
)
def test_key_fixtures_decode_as_keys(value_name, key_name, key, columns):
    event = _decode(value_name, key=(DEBEZIUM / key_name).read_bytes())
    assert event.key == key
    assert event.key_columns == columns


def test_tombstone_after_delete_carries_the_delete_key():
    key = (DEBEZIUM / "mysql_2.7.0_delete_key_with_schema.json").read_bytes()
    assert decode_message(None, key=key) == Tombstone(key={"id": 1004}, key_columns=("id",))
    assert decode_message(b"", key=key) == Tombstone(key={"id": 1004}, key_columns=("id",))


def test_mysql_2_7_date_column_decodes_to_a_date():
    event = _decode("mysql_2.7.0_snapshot_read_last_in_data_collection_with_schema.json")
    assert event.row == {
        "order_number": 10004,
        "order_date": date(2016, 2, 21),
        "purchaser": 1003,
        "quantity": 1,
        "product_id": 107,
    }
    assert dict(event.columns)["order_date"] == "date"


def test_flinkcdc_all_types_decimals_are_exact():
    row = _decode("mysql_1.9.7_flinkcdc_all_types_read_snapshot_false_with_schema.json").row
    # decimal.format=NUMERIC: JSON numbers, read without float and padded to the schema scale
    assert row["pt"] == Decimal("1.1")
    assert str(row["_numeric"]) == "12345.110"
    assert str(row["_decimal"]) == "11111"
    # DECIMAL(40,3): the file holds all 36 digits (SOURCES.md's "passed through a double"
    # caveat comes from reading it with float)
    assert str(row["_fixed"]) == "123456789876543212345678987654321.110"
    assert str(row["_fixed_unsigned_zerofill"]) == "123456789876543212345678987654321.330"
    assert str(row["_big_decimal"]) == "2222222222222222300000001111.1234567890"
    # BIGINT UNSIGNED (bigint.unsigned.handling.mode=precise): Decimal scale 0, no precision
    assert row["_bigint_unsigned"] == Decimal(20000000000)
    assert row["_serial"] == Decimal(40000000000)


def test_flinkcdc_all_types_column_types():
    columns = dict(
        _decode("mysql_1.9.7_flinkcdc_all_types_read_snapshot_false_with_schema.json").columns
    )
    assert columns["pt"] == "decimal(2,1)"
    assert columns["_numeric"] == "decimal(8,3)"
    assert columns["_big_decimal"] == "decimal(38,10)"
    assert columns["_bigint_unsigned"] == "decimal(38,0)"
    assert columns["_fixed"] == "string"  # precision 40 > Spark's 38: exact text instead
    assert columns["_tinyint"] == "smallint"
    assert columns["_int_unsigned"] == "bigint"
    assert columns["_float"] == "double"
    assert columns["_bit1"] == "boolean"
    assert columns["_bit"] == "binary"
    assert columns["_date"] == "date"
    assert columns["_datetime6"] == "timestamp"
    assert columns["_timestamp"] == "timestamp"
    assert columns["_time"] == "bigint"
    assert columns["_year"] == "int"
    assert columns["_point"] == "string"


def test_flinkcdc_all_types_temporal_and_other_values():
    row = _decode("mysql_1.9.7_flinkcdc_all_types_read_snapshot_false_with_schema.json").row
    assert row["_date"] == date(2023, 3, 23)  # 19439 days
    assert row["_datetime"] == datetime(2023, 3, 23, 14, 30, 5, tzinfo=UTC)  # 1679581805000
    assert row["_datetime3"] == datetime(2023, 3, 23, 14, 30, 5, 123000, tzinfo=UTC)
    assert row["_datetime6"] == datetime(2023, 3, 23, 14, 30, 5, 123456, tzinfo=UTC)
    assert row["_datetime_p2"] == datetime(2023, 3, 24, 14, 30, 5, 120000, tzinfo=UTC)
    assert row["_timestamp"] == datetime(2023, 3, 23, 22, 0, 10, 123456, tzinfo=UTC)
    assert row["_timestamp0"] == datetime(2023, 3, 23, 7, 10, 0, tzinfo=UTC)
    assert row["_time"] == 36803000000  # MicroTime 10:13:23 in microseconds
    assert row["_year"] == 2023
    assert row["_bin"] == b"bytes\x00\x00\x00\x00\x00"  # BINARY(10) zero padded
    assert row["_bit"] == b"\xc7\x07\x00\x00\x00\x00\x00\x00"
    assert row["_bit1"] is True
    assert row["_json"] == '{"a": "b"}'
    assert row["_enum"] == "value1"
    assert row["_set"] == "a,b"
    assert row["_float"] == 1.5
    assert json.loads(row["_point"]) == {
        "x": 1.0,
        "y": 1.0,
        "wkb": "AQEAAAAAAAAAAADwPwAAAAAAAPA/",
        "srid": None,
    }


def test_flinkcdc_all_types_row_to_json_keeps_decimal_digits():
    row = _decode("mysql_1.9.7_flinkcdc_all_types_read_snapshot_false_with_schema.json").row
    text = row_to_json(row)
    assert '"_fixed":123456789876543212345678987654321.110,' in text
    assert '"_datetime6":"2023-03-23T14:30:05.123456Z"' in text
    assert '"_date":"2023-03-23"' in text
    assert '"_bin":"Ynl0ZXMAAAAAAA=="' in text


def test_postgres_arrays_of_logical_types():
    event = _decode("postgres_3.0.0_create_temporal_types_arrays_with_schema.json")
    row = event.row
    assert row["c_integer"] == [10, 20]
    assert row["c_uuid"] == [
        "123e4567-e89b-12d3-a456-426614174000",
        "987e6543-e21b-45d3-b456-426614174111",
    ]
    assert row["c_jsonb"] == ['{"role": "admin"}', '{"role": "user"}']
    assert row["c_date"] == [date(2025, 1, 30)]  # 20118 days
    assert row["c_timestamp0"] == [datetime(2025, 1, 30, 8, 0, tzinfo=UTC)]
    assert row["c_timestamp3"] == [datetime(2025, 1, 30, 8, 0, 0, 123000, tzinfo=UTC)]
    assert row["c_timestamp4"] == [datetime(2025, 1, 30, 8, 0, 0, 123400, tzinfo=UTC)]
    assert row["c_timestamp6"] == [datetime(2025, 1, 30, 8, 0, 0, 123456, tzinfo=UTC)]
    assert row["c_timestamptz"] == [datetime(2025, 1, 30, 8, 0, tzinfo=UTC)] * 2
    assert row["c_time"] == ["08:00:00Z", "08:30:00Z"]  # ZonedTime stays text
    assert row["c_time_whtz"] == [28800000000, 53130000000]  # 08:00, 14:45:30 in µs
    assert row["c_binary"] == [b"John", b"Jane"]
    columns = dict(event.columns)
    assert columns["c_date"] == "array<date>"
    assert columns["c_timestamptz"] == "array<timestamp>"
    assert columns["c_binary"] == "array<binary>"
    assert columns["c_time_whtz"] == "array<bigint>"


def test_postgres_1_9_5_real_columns_are_float():
    event = _decode("postgres_1.9.5_snapshot_read_true_with_schema.json")
    assert dict(event.columns)["c_discount"] == "float"
    assert event.row["c_discount"] == 0.3173
    assert event.row["c_balance"] == -10.0
    assert event.row["c_since"] == "2015-11-22 00:00:00"  # a varchar in that schema


def test_postgres_decimal_double_mode_without_schema_is_plain_json():
    # decimal.handling.mode=double and no schema: values as JSON gives them
    event = _decode(
        "postgres_1.9.7_snapshot_read_last_numeric_types_decimal_double_payload_only.json"
    )
    assert event.row == {
        "o_key": 0,
        "o_smallint": 32767,
        "o_integer": 2147483647,
        "o_bigint": 9223372036854775807,
        "o_real": 9.999,
        "o_double": 9.999999,
        "o_numeric": 123456.789,
        "o_numeric_6_3": 123.456,
        "o_money": 123.12,
    }
    assert dict(event.columns)["o_bigint"] == "bigint"
    assert dict(event.columns)["o_numeric_6_3"] == "double"


def test_postgres_temporal_types_without_schema_stay_raw():
    # without a schema nothing says 40271000000 is a MicroTime: it stays a number
    row = _decode(
        "postgres_1.9.7_snapshot_read_last_temporal_types_interval_string_payload_only.json"
    ).row
    assert row["o_time_0"] == 40271000000
    assert row["o_timestamp_6"] == 1321009871123456
    assert row["o_timestampz_6"] == "2011-11-11T03:11:11.123456Z"
    assert row["o_interval"] == "P1Y2M3DT4H5M6.78S"
    assert row["o_date"] == "1999-09-09"  # RisingWave's converter, not stock Debezium


def test_flinkcdc_partial_numeric_without_schema():
    event = _decode("mysql_flinkcdc_all_types_read_decimal_format_numeric_PARTIAL_no_source.json")
    row, columns = event.row, dict(event.columns)
    assert row["big_c"] == 9223372036854775807 and columns["big_c"] == "bigint"
    # BIGINT UNSIGNED max does not fit a bigint: exact Decimal, decimal(38,0)
    assert row["big_un_c"] == Decimal("18446744073709551615")
    assert columns["big_un_c"] == "decimal(38,0)"
    assert row["decimal_c"] == 123.4567 and columns["decimal_c"] == "double"
    assert row["date_c"] == 18460
    assert row["varchar_len0_c"] == ""
    assert event.connector is None and event.source_table is None


def test_legacy_fixtures():
    legacy = _decode(
        "mysql_0.10.0_legacy_boolean_snapshot_create_with_schema_debezium_fixture.json"
    )
    assert legacy.snapshot == "false"
    assert legacy.ts_ms == 1465491411815
    old = _decode("mysql_1.1.1_legacy_snapshot_true_op_c_with_schema.json")
    assert old.row["weight"] == 3.140000104904175  # FLOAT shown as double


def test_transaction_metadata_fixtures():
    begin = _decode("postgres_2.4.2_transaction_metadata_begin.json")
    assert begin == TransactionMarker("BEGIN", "35352:3962948040", None, (), 1704269323180)
    end = _decode("postgres_2.4.2_transaction_metadata_end.json")
    assert end == TransactionMarker(
        "END",
        "35352:3962950064",
        11,
        (("public.orders_tx", 5), ("public.person", 6)),
        1704269323180,
    )


def test_schema_change_fixtures():
    create = _decode("mysql_1.7.0_schema_change_event_with_schema.json")
    assert isinstance(create, SchemaChange)
    assert create.ddl is not None and create.ddl.startswith("CREATE TABLE `geom`")
    assert (create.db, create.table, create.table_changes, create.snapshot) == (
        "inventory",
        "geom",
        (),
        "true",
    )
    assert create.event_time_ms == 1638187055631
    alter = _decode("mysql_2.4.2_schema_change_event_alter_table_schema_null.json")
    assert alter.ddl == "ALTER TABLE test add column v2 varchar(32)"
    assert alter.table_changes == (
        TableChange(
            type="ALTER",
            id='"mydb"."test"',
            primary_key_columns=("id",),
            columns=("id", "v1", "v2"),
        ),
    )
    assert (alter.db, alter.connector, alter.event_time_ms) == ("mydb", "mysql", 1718354727000)


def test_postgres_3_5_capture_decimals_positions_and_replica_identity_default():
    first = _decode("postgres_3.5.0_snapshot_read_first_with_schema.json")
    last = _decode("postgres_3.5.0_snapshot_read_last_with_schema.json")
    update = _decode("postgres_3.5.0_update_with_schema.json")
    delete = _decode("postgres_3.5.0_delete_with_schema.json")
    # numeric(10,4), decimal.handling.mode=precise: base64 bytes with the Decimal schema
    assert first.columns == (("currency", "string"), ("rate", "decimal(10,4)"))
    assert first.row == {"currency": "C0001", "rate": Decimal("0.1429")}
    assert last.row == {"currency": "C1000", "rate": Decimal("142.8571")}
    assert update.row == {"currency": "C0001", "rate": Decimal("9.9999")}
    # REPLICA IDENTITY DEFAULT: the delete's before image holds the key only
    assert delete.row == {"currency": "C0002", "rate": None}
    # one snapshot: one transaction and one position; the log after it, in order
    assert (first.tx_id, last.tx_id, update.tx_id, delete.tx_id) == ("732", "732", "733", "734")
    assert first.seq == last.seq < update.seq < delete.seq
    assert (first.connector, first.schema_name, first.table) == ("postgresql", "public", "rates")


def test_signal_fixture_directory_holds_notifications_and_a_heartbeat():
    names = [p.name for p in SIGNAL_FIXTURES]
    assert sum("notification" in n for n in names) >= 2
    assert sum("heartbeat" in n for n in names) >= 1


@pytest.mark.parametrize("path", SIGNAL_FIXTURES, ids=lambda p: p.name)
def test_every_signal_fixture_parses(path: Path):
    where = {"topic": "t", "partition": 0, "offset": 0, "kafka_ts_ms": None}
    if "notification" in path.name:
        assert parse_notification(path.read_bytes(), **where) is not None
    else:
        assert parse_heartbeat(path.read_bytes(), **where) is not None
    # they are not change events: the ingest reads them from their own topics
    with pytest.raises(CdcDecodeError):
        decode_message(path.read_bytes())


def test_debezium_3_5_snapshot_notifications():
    where = {"topic": "n", "partition": 0, "offset": 0, "kafka_ts_ms": None}
    signals = DEBEZIUM / "signals"
    scan_file = signals / "postgres_3.5.0_notification_table_scan_completed_with_schema.json"
    scan = parse_notification(scan_file.read_bytes(), **where)
    assert (scan.aggregate_type, scan.type, scan.collection, scan.status) == (
        "Initial Snapshot",
        "TABLE_SCAN_COMPLETED",
        "public.rates",  # schema.table, without the database
        "SUCCEEDED",
    )
    assert scan.initial and scan.concerns("public.rates") and not scan.concerns("public.fees")
    assert scan.timestamp_ms == 1795582780781  # a JSON number (the documentation shows a string)
    completed = parse_notification(
        (signals / "postgres_3.5.0_notification_completed_with_schema.json").read_bytes(), **where
    )
    assert (completed.type, completed.collection, completed.status) == ("COMPLETED", None, None)
    assert completed.concerns("public.rates") and completed.concerns(None)
    beat = parse_heartbeat(
        (signals / "postgres_3.5.0_heartbeat_with_schema.json").read_bytes(), **where
    )
    assert beat.ts_ms == 1795582780781
