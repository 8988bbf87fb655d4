"""The CDC build sink on real Spark and real Delta tables."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from conftest import FIXTURES
from helpers import add_column, assert_rows_equal, data_commit_of_batch
from pyspark.sql.types import StructType

from lakehouse import delta
from lakehouse.dimension import BuildSink, BuildTarget
from lakehouse.dimension.decode import decode_raw
from lakehouse.dimension.layout import (
    INGESTED_AT,
    META_BATCH_ID,
    META_END_OFFSETS,
    META_MAX_EVENT_TIME,
    META_WATERMARK,
    PROP_SNAPSHOT_COMPLETE,
    PROP_SNAPSHOT_COMPLETED_VERSION,
    PROP_SNAPSHOT_SIGNAL,
)
from lakehouse.errors import ConfigError
from lakehouse.sources.schema import RAW_SCHEMA_DDL
from lakehouse.testing import DebeziumTable

pytestmark = pytest.mark.spark


def _raw(spark, messages, *, partition=0, first_offset=0, topic="cdc"):
    from datetime import UTC, datetime

    rows = []
    for i, m in enumerate(messages):
        key = m.key_bytes() if hasattr(m, "key_bytes") else m[0]
        value = m.value_bytes() if hasattr(m, "value_bytes") else m[1]
        rows.append((key, value, topic, partition, first_offset + i, datetime.now(UTC), 0))
    return spark.createDataFrame(rows, StructType.fromDDL(RAW_SCHEMA_DDL))


def _sink(tmp, **kw):
    target = BuildTarget(str(tmp / "build"), **kw)
    return BuildSink([target], dead_letter_table=str(tmp / "dlq"), pipeline_id="ingest-test")


def _rates():
    t = DebeziumTable("public", "rates", key="currency", start_ms=1_700_000_000_000)
    snap = t.snapshot(
        [
            {"currency": c, "rate": r}
            for c, r in [("EUR", "1.0850"), ("GBP", "1.2700"), ("JPY", "0.0067")]
        ]
    )
    log = [
        t.update({"currency": "EUR", "rate": "1.0900"}),
        *t.delete("GBP"),
        t.insert({"currency": "GBP", "rate": "1.2500"}),
        t.update({"currency": "JPY", "rate": "0.0068"}),
    ]
    return snap, log


def _versions(spark, uri):
    return [
        (r.currency, r.rate, r._op, r._event_time, r._seq) for r in delta.read(spark, uri).collect()
    ]


def test_marker_is_set_exactly_when_the_snapshot_ends(spark, tmp_path):
    snap, log = _rates()
    sink = _sink(tmp_path)
    uri = str(tmp_path / "build")
    r0 = sink.process(_raw(spark, snap[:2]), 0)  # first, true: not over yet
    assert r0.targets[0].rows == 2 and not r0.targets[0].snapshot_complete
    assert delta.get_properties(uri)[PROP_SNAPSHOT_COMPLETE] == "false"
    r1 = sink.process(_raw(spark, snap[2:], first_offset=2), 1)  # the 'last' record
    assert r1.targets[0].marker_set_now
    props = delta.get_properties(uri)
    assert props[PROP_SNAPSHOT_COMPLETE] == "true"
    assert props[PROP_SNAPSHOT_SIGNAL] == "last"
    # the marker names the data version that holds the last snapshot row, and comes after it
    completed = int(props[PROP_SNAPSHOT_COMPLETED_VERSION])
    assert completed == r1.targets[0].version < delta.latest_version(uri)
    assert delta.read(spark, uri, version=completed).count() == 3
    r2 = sink.process(_raw(spark, log, first_offset=3), 2)
    assert r2.tombstones == 1 and not r2.targets[0].marker_set_now
    assert sorted((c, str(rate), op) for c, rate, op, *_ in _versions(spark, uri)) == [
        ("EUR", "1.0850", "r"),
        ("EUR", "1.0900", "u"),
        ("GBP", "1.2500", "c"),
        ("GBP", "1.2700", "r"),
        ("GBP", "None", "d"),
        ("JPY", "0.0067", "r"),
        ("JPY", "0.0068", "u"),
    ]


def test_log_record_after_snapshot_rows_sets_marker(spark, tmp_path):
    # parallel snapshots never send 'last': the first log-phase record proves it is over
    t = DebeziumTable("public", "rates", key="currency", start_ms=1_700_000_000_000)
    snap = t.snapshot(
        [
            {"currency": "EUR", "rate": "1"},
            {"currency": "USD", "rate": "1"},
            {"currency": "CHF", "rate": "1"},
        ]
    )[:2]  # no 'last'
    sink = _sink(tmp_path)
    sink.process(_raw(spark, snap), 0)
    assert delta.get_properties(str(tmp_path / "build"))[PROP_SNAPSHOT_COMPLETE] == "false"
    sink.process(_raw(spark, [t.update({"currency": "EUR", "rate": "2"})], first_offset=2), 1)
    props = delta.get_properties(str(tmp_path / "build"))
    assert props[PROP_SNAPSHOT_COMPLETE] == "true"
    assert props[PROP_SNAPSHOT_SIGNAL] == "log_record"


def test_out_of_order_delivery_across_partitions_gives_the_same_table(spark, tmp_path):
    snap, log = _rates()
    in_order = _sink(tmp_path / "a")
    in_order.process(_raw(spark, snap + log), 0)
    # the same records over two partitions, delivered in two batches in the "wrong" order
    p0 = [m for i, m in enumerate(snap + log) if i % 2 == 0]
    p1 = [m for i, m in enumerate(snap + log) if i % 2 == 1]
    swapped = _sink(tmp_path / "b")
    swapped.process(_raw(spark, list(reversed(p1)), partition=1), 0)
    swapped.process(_raw(spark, list(reversed(p0)), partition=0), 1)
    assert_rows_equal(
        _versions(spark, str(tmp_path / "b" / "build")),
        _versions(spark, str(tmp_path / "a" / "build")),
    )


def test_bad_records_go_to_dead_letter_table_and_batch_goes_on(spark, tmp_path):
    snap, _ = _rates()
    good = snap[0]
    bad = [
        (None, b'{"payload": {"op": "c", "after": {"currency": "X"'),  # truncated
        (None, b"\xff\xfe not utf-8"),
        (None, b'{"op": "x", "after": {"currency": "X"}, "source": {"ts_ms": 1}}'),  # unknown op
        (None, b'{"op": 5, "after": "nope", "source": {"ts_ms": 1}}'),  # wrong types
        (None, b"[1, 2, 3]"),
    ]
    records = [(good.key_bytes(), good.value_bytes()), *bad]
    report = _sink(tmp_path).process(_raw(spark, records), 0)
    assert report.changes == 1 and report.dead_lettered == 5
    dead = delta.read(spark, str(tmp_path / "dlq")).collect()
    assert sorted(r._offset for r in dead) == [1, 2, 3, 4, 5]
    kinds = {r._offset: r._error_kind for r in dead}
    assert kinds[1] == "malformed_json" and kinds[2] == "encoding" and kinds[3] == "unknown_op"
    assert all(r._raw_value is not None and r._error for r in dead)
    assert "internal_error" not in kinds.values()


def test_replayed_batch_is_a_no_op(spark, tmp_path):
    snap, _log = _rates()
    sink = _sink(tmp_path)
    sink.process(_raw(spark, snap), 0)
    before = delta.latest_version(str(tmp_path / "build"))
    assert sink.process(_raw(spark, snap), 0).skipped
    assert delta.latest_version(str(tmp_path / "build")) == before
    assert delta.read(spark, str(tmp_path / "build")).count() == 3


def test_crash_between_data_and_marker_commit_is_healed_on_restart(spark, tmp_path, monkeypatch):
    snap, _ = _rates()
    import lakehouse.dimension.sink as sink_module

    def crash(*args, **kwargs):
        raise RuntimeError("killed after the data commit")

    monkeypatch.setattr(sink_module, "set_marker", crash)
    with pytest.raises(RuntimeError):
        _sink(tmp_path).process(_raw(spark, snap), 0)
    uri = str(tmp_path / "build")
    assert delta.get_properties(uri)[PROP_SNAPSHOT_COMPLETE] == "false"
    monkeypatch.undo()
    restarted = _sink(tmp_path)
    assert restarted.process(_raw(spark, snap), 0).skipped  # data already there
    props = delta.get_properties(uri)
    assert props[PROP_SNAPSHOT_COMPLETE] == "true"
    assert int(props[PROP_SNAPSHOT_COMPLETED_VERSION]) == data_commit_of_batch(uri, 0)


def test_commit_metadata_records_batch_watermark_and_offsets(spark, tmp_path):
    snap, _ = _rates()
    sink = _sink(tmp_path, out_of_orderness_ms=500)
    sink.process(_raw(spark, snap, partition=3, first_offset=10), 7)
    data = next(c for c in delta.history(str(tmp_path / "build")) if c.operation == "WRITE")
    max_ts = 1_700_000_000_000 + 2000
    assert data.metadata[META_BATCH_ID] == "7"
    assert data.metadata[META_MAX_EVENT_TIME] == str(max_ts)
    assert data.metadata[META_WATERMARK] == str(max_ts - 500 - 1)
    assert json.loads(data.metadata[META_END_OFFSETS]) == {"cdc": {"3": 13}}


def test_missing_key_column_is_a_clear_error(spark, tmp_path):
    snap, _ = _rates()
    with pytest.raises(ConfigError, match=r"key column\(s\) \['id'\] are not in the row image"):
        _sink(tmp_path, key_columns=("id",)).process(_raw(spark, snap), 0)


def test_decimal_and_timestamp_values_land_typed(spark, tmp_path):
    snap, _ = _rates()
    _sink(tmp_path).process(_raw(spark, snap), 0)
    df = delta.read(spark, str(tmp_path / "build"))
    assert dict(df.dtypes)["rate"] == "decimal(12,4)"
    assert dict(df.dtypes)["updated_at"] == "timestamp"
    assert {r.currency: r.rate for r in df.collect()}["EUR"] == Decimal("1.0850")


def test_every_real_fixture_decodes_on_the_executors_without_internal_errors(spark):
    files = sorted(FIXTURES.glob("debezium/*.json"))
    records = [(None, p.read_bytes()) for p in files]
    rows = decode_raw(_raw(spark, records)).select("_kind", "_error_kind", "offset").collect()
    assert len(rows) == len(files)
    errors = {files[r.offset].name: r._error_kind for r in rows if r._kind == "error"}
    # the two Kafka *key* fixtures are not change events; everything else decodes
    assert set(errors) <= {p.name for p in files if "_key_" in p.name}, errors
    assert "internal_error" not in errors.values()


def test_tables_worked_on_at_once_end_as_tables_worked_on_one_by_one(spark, tmp_path):
    """``table_parallelism``: four tables of one connector, their snapshots, updates, a new
    column, deletes with tombstones and an undecodable record, ingested one table at a time
    and four at once: the same rows, dead letters, markers and batch bookkeeping."""
    names = ("rates", "fees", "taxes", "duties")
    batches: list[list] = []
    source = {
        n: DebeziumTable("public", n, key="currency", start_ms=1_000, step_ms=10) for n in names
    }
    batches.append(
        [m for t in source.values() for m in t.snapshot([{"currency": "C0", "rate": "1"}])]
    )
    batches.append(
        [source[n].update({"currency": f"C{i}", "rate": f"2.{i}"}) for n in names for i in range(3)]
        + [(None, b"{not json")]
    )
    batches.append(
        [source["fees"].update({"currency": "C1", "rate": "3", "note": "new column"})]
        + [m for n in ("rates", "duties") for m in source[n].delete("C0")]
    )

    def ingest(parallelism: int) -> dict[str, list]:
        root = tmp_path / f"p{parallelism}"
        sink = BuildSink(
            [
                BuildTarget(str(root / n), key_columns=("currency",), source_table=f"public.{n}")
                for n in names
            ],
            dead_letter_table=str(root / "dlq"),
            pipeline_id="parallel",
            table_parallelism=parallelism,
        )
        offset = 0
        for batch_id, messages in enumerate(batches):
            report = sink.process(_raw(spark, messages, first_offset=offset), batch_id)
            assert [t.table_uri for t in report.targets] == [str(root / n) for n in names]
            offset += len(messages)
        seen: dict[str, list] = {}
        for n in names:
            uri = str(root / n)
            rows = delta.read(spark, uri).drop(INGESTED_AT).collect()  # the wall clock
            seen[n] = sorted(map(tuple, rows), key=repr)
            props = delta.get_properties(uri)
            seen[f"{n} marker"] = [
                props.get(PROP_SNAPSHOT_COMPLETE),
                props.get(PROP_SNAPSHOT_SIGNAL),
            ]
            commits = [c.metadata for c in delta.history(uri)]
            seen[f"{n} batches"] = sorted(
                ((m.get(META_BATCH_ID), m.get(META_WATERMARK)) for m in commits), key=repr
            )
        dead = delta.read(spark, str(root / "dlq"))
        seen["dead letters"] = sorted(
            map(tuple, dead.select("_error_kind", "_error", "_offset").collect()), key=repr
        )
        return seen

    one_by_one, at_once = ingest(1), ingest(4)
    assert one_by_one == at_once
    assert one_by_one["fees"] and one_by_one["dead letters"]


def test_a_table_s_plan_expressions_are_made_once_while_its_columns_stay(spark, tmp_path):
    """The sink keeps a table's plan expressions between batches while its row images and
    columns are the same, and makes new ones when a column comes; a kept table's rows (the
    columns the batch's joint write selects) are the same objects batch after batch, the wall
    clock read from the batch's records: each batch's rows are the changes it brought,
    stamped with that batch's ingest time."""
    from lakehouse.dimension.plan import RowParts, _Expressions

    t = DebeziumTable("public", "rates", key="currency", start_ms=1_700_000_000_000)
    sink = _sink(tmp_path, key_columns=("currency",))
    offset = 0

    def run(messages, batch_id):
        nonlocal offset
        sink.process(_raw(spark, messages, first_offset=offset), batch_id)
        offset += len(messages)

    def kept(kind):
        return {k: v for k, v in sink._expressions.items() if isinstance(v, kind)}

    run(t.snapshot([{"currency": "EUR", "rate": "1.0000"}]), 0)
    for b in (1, 2, 3):
        run([t.update({"currency": "EUR", "rate": f"{b}.0000"})], b)
    made, parts = kept(_Expressions), kept(RowParts)
    assert len(made) == 2, list(made)  # the snapshot's image, then the log's
    assert all(p.joint is not None for p in parts.values())
    run([add_column(t.update({"currency": "EUR", "rate": "4.0000"}), "note", "string", "new")], 4)
    assert len(kept(_Expressions)) == 3
    assert all(sink._expressions[k] is v for k, v in {**made, **parts}.items())
    assert len(kept(RowParts)) > len(parts)  # the new column's rows
    rows = delta.read(spark, str(tmp_path / "build")).orderBy("_seq").collect()
    assert [(str(r["rate"]), r["note"]) for r in rows] == [
        ("1.0000", None),
        ("1.0000", None),
        ("2.0000", None),
        ("3.0000", None),
        ("4.0000", "new"),
    ]
    stamps = [r[INGESTED_AT] for r in rows[1:]]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
