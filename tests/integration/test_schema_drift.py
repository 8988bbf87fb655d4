"""Schema drift through the real build sink, the real join and real Delta tables.

A new nullable column evolves the build table and the join's output; a dropped column reads
NULL in later versions; an incompatible type change blocks the build table (dead letters,
held watermark, visible status) until ``schema-resolve``; Debezium DDL events are recorded.
"""

from __future__ import annotations

import copy
import json

import pytest
from conftest import FIXTURES
from helpers import add_column, lakehouse_command, raw_records
from pyspark.sql.types import StructType
from typer.testing import CliRunner

from lakehouse import delta
from lakehouse.cli import app
from lakehouse.dimension import BuildSink, BuildTarget
from lakehouse.dimension.layout import META_SCHEMA_BLOCKED, META_SCHEMA_CHANGES, PROP_SCHEMA_BLOCK
from lakehouse.dimension.schema_block import open_block, resolve
from lakehouse.errors import ConfigError
from lakehouse.join import JoinOptions, TemporalJoin
from lakehouse.sources.schema import RAW_SCHEMA_DDL
from lakehouse.testing import DebeziumTable
from lakehouse.testing.debezium import Message

pytestmark = pytest.mark.spark

START = 1_700_000_000_000


def _status(monkeypatch, uri: str) -> str:
    """``lakehouse status`` output, on a console wide enough that no cell wraps."""
    import lakehouse.cli as cli

    monkeypatch.setattr(cli.console, "width", 400)
    shown = CliRunner().invoke(app, ["status", uri])
    assert shown.exit_code == 0, shown.output
    return shown.output


def _raw(spark, records, *, partition=0, first_offset=0, offsets=None, topic="cdc"):
    from datetime import UTC, datetime

    rows = []
    for i, m in enumerate(records):
        offset = offsets[i] if offsets is not None else first_offset + i
        key, value = (m.key_bytes(), m.value_bytes()) if isinstance(m, Message) else m
        rows.append((key, value, topic, partition, offset, datetime.now(UTC), 0))
    return spark.createDataFrame(rows, StructType.fromDDL(RAW_SCHEMA_DDL))


def _fields(value):
    return [f for f in value["schema"]["fields"] if f["field"] in ("before", "after")]


def _drop_column(msg: Message, name: str) -> Message:
    v = copy.deepcopy(dict(msg.value))
    for f in _fields(v):
        f["fields"] = [c for c in f["fields"] if c["field"] != name]
    v["payload"]["after"].pop(name, None)
    return Message(msg.key, v)


def _retype(msg: Message, name: str, connect_type: str, value) -> Message:
    v = copy.deepcopy(dict(msg.value))
    for f in _fields(v):
        f["fields"] = [
            {"type": connect_type, "optional": True, "field": name} if c["field"] == name else c
            for c in f["fields"]
        ]
    v["payload"]["after"][name] = value
    return Message(msg.key, v)


def _sink(tmp, **kw):
    return BuildSink(
        [BuildTarget(str(tmp / "build"), **kw)],
        dead_letter_table=str(tmp / "dlq"),
        pipeline_id="ingest-drift",
    )


def _join(tmp, **kw):
    base = dict(
        build_table=str(tmp / "build"),
        output_table=str(tmp / f"out-{kw.get('mode', 'rowtime')}"),
        pending_table=str(tmp / f"pending-{kw.get('mode', 'rowtime')}"),
        dead_letter_table=str(tmp / "join-dlq"),
        pipeline_id=f"join-{kw.get('mode', 'rowtime')}",
        probe_schema="id bigint, currency string, ts bigint",
        probe_key=("currency",),
        probe_time="ts",
        probe_id="id",
        join_type="left",
    )
    base.update(kw)
    return TemporalJoin(JoinOptions(**base))


def _probe(spark, rows, first_offset=0):
    return raw_records(
        spark,
        [{"id": i, "currency": c, "ts": ts} for i, c, ts in rows],
        first_offset=first_offset,
    )


def test_new_column_reaches_the_output_and_a_dropped_column_reads_null(spark, tmp_path):
    t = DebeziumTable("public", "rates", key="currency", start_ms=START)
    sink = _sink(tmp_path)
    sink.process(_raw(spark, t.snapshot([{"currency": "EUR", "rate": "1.08"}])), 0)
    join = _join(tmp_path, mode="proctime", watermark="none", probe_time=None)
    assert join.process(_probe(spark, [(1, "EUR", 0)]), 0).matched == 1

    # ALTER TABLE rates ADD COLUMN bank text; then the column is dropped again
    added = add_column(t.update({"currency": "EUR", "rate": "1.09"}), "bank", "string", "ECB")
    dropped = _drop_column(
        _drop_column(t.update({"currency": "EUR", "rate": "1.10"}), "bank"), "rate"
    )
    r = sink.process(_raw(spark, [added], first_offset=1), 1)
    assert (r.changes, r.dead_lettered, r.targets[0].schema_block) == (1, 0, None)
    assert join.process(_probe(spark, [(2, "EUR", 0)], first_offset=1), 1).matched == 1
    sink.process(_raw(spark, [dropped], first_offset=2), 2)
    assert join.process(_probe(spark, [(3, "EUR", 0)], first_offset=2), 2).matched == 1

    build = {
        (str(r.rate), r.bank, r._op) for r in delta.read(spark, str(tmp_path / "build")).collect()
    }
    # older versions read NULL for the new column; the version after the drop reads NULL
    assert build == {("1.0800", None, "r"), ("1.0900", "ECB", "u"), ("None", None, "u")}
    out = delta.read(spark, str(tmp_path / "out-proctime"))
    assert "bank" in out.columns and dict(out.dtypes)["bank"] == "string"
    assert sorted((r.id, str(r.rate), r.bank) for r in out.collect()) == [
        (1, "1.0800", None),  # written before the column existed: reads NULL
        (2, "1.0900", "ECB"),
        (3, "None", None),  # joined the version written after both columns were dropped
    ]


def test_a_column_first_seen_as_null_takes_the_type_of_its_first_value(spark, tmp_path):
    # payload-only (no Connect schema): a new column whose first values are NULL must not be
    # fixed as string, or its first real value would block the table
    t = DebeziumTable("public", "rates", key="currency", start_ms=START, with_schema=False)
    sink = _sink(tmp_path)
    first = t.snapshot([{"currency": "EUR", "rate": "1"}])[0]
    with_null = Message(first.key, {**first.value, "after": {**first.value["after"], "n": None}})
    u = t.update({"currency": "EUR", "rate": "2"})
    with_value = Message(u.key, {**u.value, "after": {**u.value["after"], "n": 7}})
    sink.process(_raw(spark, [with_null]), 0)
    r = sink.process(_raw(spark, [with_value], first_offset=1), 1)
    assert (r.dead_lettered, r.targets[0].schema_block) == (0, None)
    df = delta.read(spark, str(tmp_path / "build"))
    assert dict(df.dtypes)["n"] == "bigint"
    assert sorted((x.n is None, x.n) for x in df.collect()) == [(False, 7), (True, None)]


def test_a_lossless_narrower_type_is_accepted(spark, tmp_path):
    t = DebeziumTable("public", "rates", key="currency", start_ms=START)
    sink = _sink(tmp_path)
    snap = add_column(t.snapshot([{"currency": "EUR", "rate": "1"}])[0], "n", "int64", 5)
    sink.process(_raw(spark, [snap]), 0)
    narrower = add_column(t.update({"currency": "EUR", "rate": "2"}), "n", "int32", 6)
    r = sink.process(_raw(spark, [narrower], first_offset=1), 1)
    assert (r.dead_lettered, r.targets[0].rows, r.targets[0].schema_block) == (0, 1, None)


def test_a_value_decoded_in_the_jvm_goes_into_a_wider_column_as_its_json_text_does(
    spark, tmp_path, monkeypatch
):
    """A float32 value into a double column reads as its decimal text (2.2), as the Python
    decoder's record does, not as the float widened bit for bit (2.200000047683716), also
    when the JVM decoded it into a typed float."""
    import lakehouse.dimension.sink as sink_module

    rests = []
    rest = sink_module.decode_rest
    monkeypatch.setattr(
        sink_module, "decode_rest", lambda *a, **k: rests.append(1) or rest(*a, **k)
    )
    t = DebeziumTable("public", "rates", key="currency", start_ms=START)
    sink = _sink(tmp_path)
    snap = add_column(t.snapshot([{"currency": "EUR", "rate": "1"}])[0], "x", "float64", 1.1)
    sink.process(_raw(spark, [snap]), 0)
    for batch, x in ((1, 3.3), (2, 2.2)):  # the float32 schema: new in 1, known in 2
        update = add_column(t.update({"currency": "EUR", "rate": "2"}), "x", "float32", x)
        r = sink.process(_raw(spark, [update], first_offset=batch), batch)
        assert (r.dead_lettered, r.targets[0].rows) == (0, 1)
        assert len(rests) == 1  # batch 1 only, a new schema's: batch 2 is the JVM's alone
    df = delta.read(spark, str(tmp_path / "build"))
    assert dict(df.dtypes)["x"] == "double"
    assert sorted(r.x for r in df.collect()) == [1.1, 2.2, 3.3]


def test_incompatible_type_change_blocks_the_table_until_resolved(spark, tmp_path, monkeypatch):
    uri, dlq = str(tmp_path / "build"), str(tmp_path / "dlq")
    t = DebeziumTable("public", "rates", key="currency", start_ms=START, step_ms=1000)
    sink = _sink(tmp_path)
    snap = t.snapshot([{"currency": c, "rate": "1"} for c in ("EUR", "GBP", "JPY")])
    sink.process(_raw(spark, snap), 0)  # t = START .. START+2000, marker set by 'last'
    rowtime = _join(tmp_path, mode="rowtime")
    proctime = _join(tmp_path, mode="proctime", watermark="none", probe_time=None)

    # batch 1, partition 0: EUR ok, EUR with rate as text (ALTER COLUMN rate TYPE text), EUR
    # ok again (held back: it may come after the bad one); partition 1: GBP (applied)
    eur_ok = t.update({"currency": "EUR", "rate": "2"})  # START+3000
    bad = _retype(t.update({"currency": "EUR", "rate": "3"}), "rate", "string", "3.00")  # +4000
    eur_after = t.update({"currency": "EUR", "rate": "4"})  # +5000
    gbp = t.update({"currency": "GBP", "rate": "5"})  # +6000
    batch1 = _raw(spark, [eur_ok, bad, eur_after], first_offset=10).unionByName(
        _raw(spark, [gbp], partition=1, first_offset=0)
    )
    r1 = sink.process(batch1, 1)
    target = r1.targets[0]
    assert r1.dead_lettered == 2 and r1.errors_by_kind == {}
    assert target.rows == 2 and target.schema_blocked_now
    assert "BLOCKED on schema: column rate changed decimal(12,4) -> string" in target.schema_block
    assert "2 records dead-lettered" in target.schema_block
    block = open_block(delta.get_properties(uri))
    assert (block.column, block.table_type, block.record_type) == (
        "rate",
        "decimal(12,4)",
        "string",
    )
    assert block.first_offset == {"topic": "cdc", "partition": 0, "offset": 11}
    # the watermark stops just below the incompatible change, though GBP's +6000 is applied
    assert block.watermark_ms == START + 4000 - 1 == target.watermark_ms
    dead = {r._offset: (r._error_kind, r._error) for r in delta.read(spark, dlq).collect()}
    assert dead[11][0] == "schema_mismatch" and "column 'rate' has type string" in dead[11][1]
    assert dead[12][0] == "schema_blocked"

    # batch 2: every change of the table is held back; the watermark stays
    jpy = t.update({"currency": "JPY", "rate": "6"})  # +7000
    r2 = sink.process(_raw(spark, [jpy], partition=1, first_offset=1), 2)
    assert (r2.targets[0].rows, r2.dead_lettered) == (0, 1)
    assert r2.targets[0].watermark_ms == START + 3999
    assert "3 records dead-lettered" in r2.targets[0].schema_block

    # row time waits at the held watermark; processing time joins the consistent prefix
    probes = [(1, "EUR", START + 3500), (2, "EUR", START + 5500), (3, "JPY", START + 7500)]
    rr = rowtime.process(_probe(spark, probes), 0)
    assert (rr.released, rr.pending) == (1, 2)
    pr = proctime.process(_probe(spark, probes), 0)
    assert pr.released == 3
    latest = {
        r.currency: str(r.rate) for r in delta.read(spark, str(tmp_path / "out-proctime")).collect()
    }
    assert latest == {"EUR": "2.0000", "JPY": "1.0000"}

    # lakehouse status shows the block
    shown = _status(monkeypatch, uri)
    assert "BLOCKED on schema: column rate changed decimal(12,4) -> string" in shown
    assert "3 records dead-lettered" in shown

    # resolving without accepting the loss of the record that still does not fit: no change
    version = delta.latest_version(uri)
    with pytest.raises(ConfigError, match=r"1 of the 3 records held back .* still do not fit"):
        resolve(spark, uri, reason="bad deploy", dead_letter_table=dlq)
    assert delta.latest_version(uri) == version and open_block(delta.get_properties(uri))

    result = resolve(
        spark, uri, reason="bad deploy rolled back", dead_letter_table=dlq, accept_loss=True
    )
    assert (result.candidates, result.replayed, result.still_incompatible) == (3, 2, 1)
    assert result.cleared and open_block(delta.get_properties(uri)) is None
    versions = sorted(
        (r.currency, str(r.rate), r._kafka_partition, r._kafka_offset)
        for r in delta.read(spark, uri).filter("_op = 'u'").collect()
    )
    assert versions == [
        ("EUR", "2.0000", 0, 10),
        ("EUR", "4.0000", 0, 12),  # replayed with its own position and event time
        ("GBP", "5.0000", 1, 0),
        ("JPY", "6.0000", 1, 1),
    ]
    # again: nothing left to replay, nothing applied twice
    again = resolve(spark, uri, reason="again", dead_letter_table=dlq, accept_loss=True)
    assert (again.replayed, again.already_applied, again.cleared) == (0, 2, False)

    # the ingest goes on normally; the watermark moves again and row time releases
    r3 = sink.process(
        _raw(spark, [t.update({"currency": "JPY", "rate": "7"})], partition=1, first_offset=2), 3
    )
    assert r3.targets[0].schema_block is None and r3.targets[0].watermark_ms == START + 8000 - 1
    rr = rowtime.process(_probe(spark, [], first_offset=3), 1)
    assert rr.released == 1  # id 3 (+7500) waits for the probe watermark (+7499)
    out = {r.id: str(r.rate) for r in delta.read(spark, str(tmp_path / "out-rowtime")).collect()}
    assert out == {1: "2.0000", 2: "4.0000"}  # id 2 joins the replayed EUR version


def test_replay_of_the_blocking_batch_decides_the_same(spark, tmp_path, monkeypatch):
    import lakehouse.dimension.sink as sink_module

    uri = str(tmp_path / "build")
    t = DebeziumTable("public", "rates", key="currency", start_ms=START)
    _sink(tmp_path).process(_raw(spark, t.snapshot([{"currency": "EUR", "rate": "1"}])), 0)
    batch = [
        _retype(t.update({"currency": "EUR", "rate": "2"}), "rate", "string", "2"),
        t.update({"currency": "EUR", "rate": "3"}),
    ]
    real_append = sink_module.delta.append

    def crash(df, table, **kw):
        if table == uri:
            raise RuntimeError("killed after the block commit, before the data commit")
        return real_append(df, table, **kw)

    monkeypatch.setattr(sink_module.delta, "append", crash)
    with pytest.raises(RuntimeError):
        _sink(tmp_path).process(_raw(spark, batch, first_offset=1), 1)
    assert open_block(delta.get_properties(uri)).batch_id == 1
    monkeypatch.undo()
    r = _sink(tmp_path).process(_raw(spark, batch, first_offset=1), 1)
    # the same decision as the first attempt: nothing applied, one block, two dead letters
    # (written once: the first attempt's dead-letter commit is recognised)
    assert r.targets[0].rows == 0 and r.targets[0].schema_blocked_now
    assert delta.read(spark, str(tmp_path / "dlq")).count() == 2
    reasons = [h.metadata.get("lakehouse.reason", "") for h in delta.history(uri)]
    assert sum("BLOCKED on schema" in x for x in reasons) == 1
    data = delta.history(uri)[0]
    assert data.metadata[META_SCHEMA_BLOCKED] == "2"


def test_debezium_schema_change_events_are_recorded_not_dead_lettered(spark, tmp_path, monkeypatch):
    uri = str(tmp_path / "build")
    ddl = (
        FIXTURES / "debezium" / "mysql_2.4.2_schema_change_event_alter_table_schema_null.json"
    ).read_bytes()
    t = DebeziumTable("public", "rates", key="currency", start_ms=START)
    r = _sink(tmp_path).process(
        _raw(spark, [(None, ddl), *t.snapshot([{"currency": "EUR", "rate": "1"}])]), 0
    )
    assert (r.schema_changes, r.dead_lettered, r.targets[0].schema_changes) == (1, 0, 1)
    data = next(h for h in delta.history(uri) if h.operation == "WRITE")
    (event,) = json.loads(data.metadata[META_SCHEMA_CHANGES])
    assert event["ddl"] == "ALTER TABLE test add column v2 varchar(32)"
    assert event["tables"] == ["mydb.test"] and event["offset"] == 0
    assert event["changes"][0]["type"] == "ALTER" and "v2" in event["changes"][0]["columns"]
    assert "ALTER TABLE test add column v2 varchar(32)" in _status(monkeypatch, uri)
    # a DDL of another table is not recorded with this one
    routed = BuildSink(
        [BuildTarget(str(tmp_path / "b2"), source_table="public.rates")],
        dead_letter_table=str(tmp_path / "dlq2"),
        pipeline_id="p2",
    ).process(_raw(spark, [(None, ddl), *t.snapshot([{"currency": "GBP", "rate": "1"}])]), 0)
    assert routed.targets[0].schema_changes == 0 and routed.dead_lettered == 0


def test_a_record_without_its_schema_is_read_with_its_tables_and_blocks_nothing(spark, tmp_path):
    """A stream with Connect schemas in which a producer or SMT dropped the wrapper of some
    records, through the installed ``lakehouse ingest``: those records are read with the
    schema of their table's last records that had one, exactly (the decimal's scale, the
    timestamp's unit); one whose value that schema cannot read is a dead letter saying so,
    and nothing blocks the table."""
    from datetime import UTC, datetime
    from decimal import Decimal

    typed = DebeziumTable("public", "rates", key="currency", start_ms=START)
    bare = DebeziumTable("public", "rates", key="currency", start_ms=START, with_schema=False)
    snapshot = typed.snapshot([{"currency": c, "rate": "1.0"} for c in ("EUR", "GBP")])
    for t in (typed, bare):  # the same clock and positions for both copies
        t.now_ms, t.lsn = typed.now_ms + 60_000, typed.lsn
    eur = bare.update({"currency": "EUR", "rate": "1.2345", "updated_at": 1_700_000_060_000_001})
    typed.now_ms, typed.lsn = bare.now_ms, bare.lsn
    gbp = typed.update({"currency": "GBP", "rate": "1.5"})
    bare.now_ms, bare.lsn = typed.now_ms, typed.lsn
    broken = bare.update({"currency": "GBP", "rate": "1.6"})
    broken.value["after"]["rate"] = "not base64!"
    cdc = tmp_path / "cdc"
    cdc.mkdir()
    for i, batch in enumerate([snapshot, [eur, gbp], [broken]]):
        (cdc / f"{i:04d}.jsonl").write_text("".join(json.dumps(m.value) + "\n" for m in batch))
    cfg = tmp_path / "lakehouse.toml"
    cfg.write_text(
        '[spark]\nmaster = "local[2]"\n[ingest]\npipeline_id = "rates"\nsource = "files"\n'
        f'path = "{cdc}"\ncheckpoint = "{tmp_path}/ck"\n'
        f'dead_letter_table = "{tmp_path}/dead"\ntrigger = "available-now"\n'
        f'max_records_per_trigger = 1\n[[ingest.tables]]\ntable = "{tmp_path}/rates"\n'
        'key = ["currency"]\n'
    )
    ran = lakehouse_command("ingest", "-c", str(cfg))
    assert ran.returncode == 0, ran.stderr[-3000:]
    uri = str(tmp_path / "rates")
    assert delta.get_properties(uri).get(PROP_SCHEMA_BLOCK, "") == ""
    assert "BLOCKED" not in ran.stderr
    rows = {
        (r.currency, r._op): (r.rate, r.updated_at)
        for r in delta.read(spark, uri).collect()
        if r._op == "u"
    }
    # the payload-only update: base64 decimal at the schema's scale, microseconds as time
    assert rows[("EUR", "u")] == (
        Decimal("1.2345"),
        datetime.fromtimestamp(1_700_000_060, UTC).replace(microsecond=1, tzinfo=None),
    )
    assert rows[("GBP", "u")][0] == Decimal("1.5")
    dead = delta.read(spark, str(tmp_path / "dead")).collect()
    assert [d._error_kind for d in dead] == ["invalid_value"]
    assert "column 'rate'" in dead[0]._error and "read with the schema" in dead[0]._error
