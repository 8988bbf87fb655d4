"""No record and no operator mistake may wipe, corrupt or silently skip data (issue 18).

Each case builds its hostile input in the test and hands it to the real batch handlers (the
ingest's ``BuildSink``, the join's ``TemporalJoin``) or the installed command, on real Spark
and real Delta tables.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import lakehouse_command
from test_snapshot_signals import T0, Stream, _rates, _raw, _sink, _target

from lakehouse import delta
from lakehouse.checkpoint import META_CHECKPOINT, META_CHECKPOINT_ID, checkpoint_id
from lakehouse.delta.write import AUTO_COMPACT
from lakehouse.dimension import BuildSink, BuildTarget
from lakehouse.dimension.layout import (
    EVENT_TIME,
    OP,
    PROP_SCHEMA_BLOCK,
    PROP_SNAPSHOT_ALERT,
    PROP_SNAPSHOT_COMPLETE,
    SEQ,
)
from lakehouse.dimension.marker import phase_of
from lakehouse.errors import DataSafetyError
from lakehouse.join import JoinOptions, TemporalJoin, read_build_channel
from lakehouse.join.operator import last_state

pytestmark = pytest.mark.spark

KEYS = [f"C{i:02d}" for i in range(80)]


def _live_keys(spark, uri: str) -> set[str]:
    """Keys whose latest version (by event time, then position) is not a delete."""
    rows = delta.read(spark, uri).collect()
    latest: dict[str, tuple] = {}
    for r in rows:
        order = (r[EVENT_TIME], r[SEQ])
        if r.currency not in latest or order > latest[r.currency][0]:
            latest[r.currency] = (order, r[OP])
    return {k for k, (_, op) in latest.items() if op != "d"}


def _loaded(spark, tmp_path, **options):
    t, s = _rates(), Stream()
    target = _target(tmp_path, **options)
    sink = _sink(tmp_path, target)
    snap = t.snapshot([{"currency": c, "rate": "1.0"} for c in KEYS])
    sink.process(_raw(spark, s.records(snap)), 0)
    assert phase_of(delta.get_properties(target.table_uri)) == "complete"
    return t, s, target, sink, snap


def test_replayed_snapshot_rows_do_not_start_a_resnapshot_nor_end_keys(spark, tmp_path):
    t, s, target, sink, snap = _loaded(spark, tmp_path)
    uri = target.table_uri
    sink.process(_raw(spark, s.records([t.update({"currency": "C05", "rate": "2.0"})])), 1)
    # byte-identical copies of two old snapshot rows, the last one among them, written again
    report = sink.process(_raw(spark, s.records([snap[3], snap[-1]])), 2)
    assert not report.targets[0].resnapshot_started and report.targets[0].synthetic_deletes == 0
    props = delta.get_properties(uri)
    assert phase_of(props) == "complete" and props[PROP_SNAPSHOT_COMPLETE] == "true"
    assert _live_keys(spark, uri) == set(KEYS)
    # and the join still reads the latest version, with C05's update in it
    channel = read_build_channel(uri)
    assert not channel.resnapshot and channel.version == delta.latest_version(uri)


def test_a_resnapshot_that_would_end_most_keys_stops_and_alerts(spark, tmp_path):
    t, s, target, sink, _ = _loaded(spark, tmp_path)
    uri = target.table_uri
    complete = delta.latest_version(uri)
    t.advance(3_600_000)  # a real new snapshot run (newer positions), that reads 4 keys only
    again = t.snapshot([{"currency": c, "rate": "1.5"} for c in KEYS[:4]])
    sink.process(_raw(spark, s.records(again[:2])), 1)
    assert phase_of(delta.get_properties(uri)) == "resnapshot"
    before = delta.latest_version(uri)
    rest = s.records(again[2:])
    with pytest.raises(DataSafetyError, match=r"would end 76 of 80 live keys .*max_ended"):
        sink.process(_raw(spark, rest), 2)
    props = delta.get_properties(uri)
    # nothing of the batch committed (only the alert); joins keep the last complete version
    assert delta.latest_version(uri) == before + 1
    assert "would end 76 of 80" in props[PROP_SNAPSHOT_ALERT]
    assert read_build_channel(uri).version == complete
    assert _live_keys(spark, uri) == set(KEYS)

    # the operator says the source really lost them: the same batch commits and ends them
    sink = _sink(tmp_path, _target(tmp_path, resnapshot_max_ended=1.0))
    report = sink.process(_raw(spark, rest), 2)
    assert report.targets[0].marker_set_now and report.targets[0].synthetic_deletes == 76
    assert _live_keys(spark, uri) == set(KEYS[:4])
    assert delta.get_properties(uri)[PROP_SNAPSHOT_ALERT] == ""


# ------------------------------------------------------------- a pipeline id and its checkpoint


def _ingest_config(tmp: Path, cdc: Path, *, pipeline: str, checkpoint: str) -> Path:
    cfg = tmp / f"{pipeline}-{checkpoint}.toml"
    cfg.write_text(
        '[spark]\nmaster = "local[1]"\n'
        'conf = { "spark.sql.shuffle.partitions" = "1", "spark.ui.enabled" = "false" }\n'
        f'[ingest]\npipeline_id = "{pipeline}"\nsource = "files"\npath = "{cdc}"\n'
        f'checkpoint = "{tmp / checkpoint}"\ndead_letter_table = "{tmp}/dead_letter"\n'
        'trigger = "available-now"\n'
        f'[[ingest.tables]]\ntable = "{tmp}/rates"\nkey = ["currency"]\n'
    )
    return cfg


@pytest.mark.slow
def test_a_pipeline_id_is_refused_a_checkpoint_it_did_not_commit_from(spark, tmp_path):
    cdc = tmp_path / "cdc"
    cdc.mkdir()
    t = _rates()
    snap = t.snapshot([{"currency": c, "rate": "1.0"} for c in ("EUR", "GBP", "JPY")])
    (cdc / "0001.jsonl").write_text("".join(json.dumps(m.value) + "\n" for m in snap))
    table = str(tmp_path / "rates")
    first = lakehouse_command(
        "ingest", "-c", str(_ingest_config(tmp_path, cdc, pipeline="rates", checkpoint="ck"))
    )
    assert first.returncode == 0, first.stderr
    assert delta.row_count(table) == 3
    before = delta.latest_version(table)

    # the checkpoint is lost (deleted, mistyped): a new one under the same pipeline id would
    # skip its batches as already committed; refused before Spark starts, in one line
    t.advance(60_000)
    updates = [t.update({"currency": c, "rate": "1.5"}) for c in ("EUR", "GBP", "JPY")]
    (cdc / "0002.jsonl").write_text("".join(json.dumps(m.value) + "\n" for m in updates))
    fresh = lakehouse_command(
        "ingest", "-c", str(_ingest_config(tmp_path, cdc, pipeline="rates", checkpoint="ck-new"))
    )
    assert fresh.returncode == 1
    assert (
        f"error: pipeline 'rates' has committed batches up to 0 to {table} from {tmp_path / 'ck'}, "
        f"and the checkpoint {tmp_path / 'ck-new'} is new" in fresh.stderr
    )
    assert "new pipeline_id" in fresh.stderr and "Traceback" not in fresh.stderr
    assert delta.latest_version(table) == before

    # another job's checkpoint (it ran under another pipeline id) is refused too
    other = lakehouse_command(
        "ingest", "-c", str(_ingest_config(tmp_path, cdc, pipeline="other", checkpoint="ck-other"))
    )
    assert other.returncode == 0, other.stderr
    swapped = lakehouse_command(
        "ingest", "-c", str(_ingest_config(tmp_path, cdc, pipeline="rates", checkpoint="ck-other"))
    )
    assert swapped.returncode == 1
    assert "is another one (query id" in swapped.stderr and "Traceback" not in swapped.stderr

    # its own checkpoint continues it; every commit names the checkpoint it came from
    again = lakehouse_command(
        "ingest", "-c", str(_ingest_config(tmp_path, cdc, pipeline="rates", checkpoint="ck"))
    )
    assert again.returncode == 0, again.stderr
    newest = delta.snapshot(table).find(5, pipeline="rates")
    assert newest.metadata[META_CHECKPOINT] == str(tmp_path / "ck")
    assert newest.metadata[META_CHECKPOINT_ID] == checkpoint_id(str(tmp_path / "ck"))


# ------------------------------------------------------------------------- event-time sanity


def test_probe_time_numbers_are_read_in_their_unit_and_the_far_future_is_dead_lettered(
    spark, tmp_path
):
    _, s, target, _, _ = _loaded(spark, tmp_path)  # 80 keys, source times from 1.7e12 ms on
    options = JoinOptions(
        build_table=target.table_uri,
        output_table=str(tmp_path / "out"),
        pending_table=str(tmp_path / "pending"),
        dead_letter_table=str(tmp_path / "join_dlq"),
        pipeline_id="join",
        probe_schema="id bigint, currency string, ts timestamp",
        probe_key=("currency",),
        probe_time="ts",
        probe_id="id",
        mode="rowtime",
        join_type="left",
        pending_max_age_ms=60_000,  # a bound that one far-future row used to turn on everyone
    )
    orders = [
        {"id": 1, "currency": "C01", "ts": "2023-11-14T22:13:21Z"},
        {"id": 2, "currency": "C02", "ts": 1_700_000_001_000},  # epoch ms, not seconds
        {"id": 3, "currency": "C03", "ts": 1_700_000_001_000_000},  # microseconds: year ~55,800
        {"id": 4, "currency": "C04", "ts": "soon"},
        {"id": 5, "currency": "C05", "ts": 1_700_000_002_000},
    ]
    records = s.records([(None, json.dumps(o).encode()) for o in orders], topic="orders")
    report = TemporalJoin(options).process(_raw(spark, records), 0)
    assert report.dead_lettered == 2 and report.evicted == 0

    dead = {
        r._offset: (r._error_kind, r._error)
        for r in delta.read(spark, str(tmp_path / "join_dlq")).collect()
    }
    assert dead[2][0] == "future_time" and "column 'ts' holds '1700000001000000'" in dead[2][1]
    assert "probe_time_unit" in dead[2][1]
    assert dead[3][0] == "bad_time" and "holds 'soon'" in dead[3][1]
    # the good rows are joined or pending at their own time, none evicted
    kept = [
        (r.id, r.t)
        for table in ("out", "pending")
        if delta.table_exists(str(tmp_path / table))
        for r in delta.read(spark, str(tmp_path / table))
        .selectExpr("id", "unix_millis(ts) AS t")
        .collect()
    ]
    assert sorted(kept) == [(1, 1_700_000_001_000), (2, 1_700_000_001_000), (5, 1_700_000_002_000)]
    state = last_state(
        output_table=options.output_table,
        pending_table=options.pending_table,
        dead_letter_table=options.dead_letter_table,
        pipeline_id="join",
    )
    assert state.probe_max_ts_ms == 1_700_000_002_000


def test_a_build_change_from_the_far_future_is_dead_lettered_not_a_version(spark, tmp_path):
    t, s, target, sink, _ = _loaded(spark, tmp_path)
    uri = target.table_uri
    watermark = read_build_channel(uri).event_watermark_ms
    t.advance(3 * 10**12)  # source.ts_ms in the year 2118: a wrong clock
    records = s.records([t.update({"currency": "C07", "rate": "9"})])
    report = sink.process(_raw(spark, records), 1)
    assert report.targets[0].rows == 0 and report.dead_lettered == 1
    dead = delta.read(spark, str(tmp_path / "dlq")).collect()
    assert [d._error_kind for d in dead] == ["future_event_time"]
    assert "max_future_ms" in dead[0]._error
    # decoded in the JVM, which keeps no raw bytes: the dead letter has the record's own
    ((_, _, offset, key, value, _),) = records
    assert (dead[0]._offset, dead[0]._raw_key, dead[0]._raw_value) == (offset, key, value)
    assert read_build_channel(uri).event_watermark_ms == watermark  # it did not move


# ---------------------------------------------------------------- records that change a schema


def _change(i: int, after: dict, *, op: str = "u", snapshot: str | None = None) -> bytes:
    """A schemaless Debezium change (no Connect schema, as with ``schemas.enable=false``)."""
    source = {"ts_ms": 1_700_000_000_000 + i, "db": "shop", "table": "items"}
    if snapshot is not None:
        source["snapshot"] = snapshot
    return json.dumps(
        {"op": op, "before": None, "after": after, "source": source, "ts_ms": source["ts_ms"]}
    ).encode()


def _typed_change(i: int, after: dict[str, tuple[str, object]]) -> bytes:
    """A Debezium change with its Connect schema (``schemas.enable=true``): ``after`` maps
    each column to its Connect type and value."""
    row = {
        "type": "struct",
        "optional": True,
        "fields": [{"type": t, "optional": True, "field": n} for n, (t, _) in after.items()],
    }
    source = {
        "type": "struct",
        "optional": False,
        "field": "source",
        "fields": [
            {"type": "int64", "optional": False, "field": "ts_ms"},
            {"type": "string", "optional": False, "field": "db"},
            {"type": "string", "optional": False, "field": "table"},
        ],
    }
    schema = {
        "type": "struct",
        "optional": False,
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            source,
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }
    ts = 1_700_000_000_000 + i
    payload = {
        "op": "u",
        "before": None,
        "after": {n: v for n, (_, v) in after.items()},
        "source": {"ts_ms": ts, "db": "shop", "table": "items"},
        "ts_ms": ts,
    }
    return json.dumps({"schema": schema, "payload": payload}).encode()


def _readable_everywhere(spark, uri: str) -> int:
    """The table opens with Spark, delta-rs and Polars; its row count."""
    import polars as pl
    from deltalake import DeltaTable

    n = delta.read(spark, uri).count()
    assert DeltaTable(uri).to_pyarrow_table().num_rows == n
    assert pl.read_delta(uri).height == n
    return n


def test_records_that_would_break_the_schema_are_dead_lettered_and_the_table_stays_readable(
    spark, tmp_path
):
    from pyspark.sql.types import ArrayType, StringType

    uri = str(tmp_path / "items")
    sink = BuildSink(
        [BuildTarget(uri, key_columns=("id",))],
        dead_letter_table=str(tmp_path / "dlq"),
        pipeline_id="ingest",
    )
    hostile = {
        1: {"id": 1, "ID": 2},  # names that differ only in case
        2: {"id": 2, "deep": json.loads("[" * 70 + "]" * 70)},  # 70 levels of arrays
        3: {"id": 3, "_op": "x"},  # a lineage column's name
        4: {"id": 4, "a b": 1},  # a name Delta refuses
        5: {"id": 5, "n" * 300: 1},  # too long a name
    }
    fine = {
        0: {"id": 0, "tags": [], "doc": {"k": 1}},  # an empty array: no void column
        6: {"id": 6, "tags": ["a"], "doc": [1, 2]},  # typed later; an array in a text column
    }
    values = {**hostile, **fine}
    records = [("cdc", 0, i, None, _change(i, values[i], op="c"), T0) for i in sorted(values)]
    report = sink.process(_raw(spark, records), 0)
    assert report.dead_lettered == 5

    dead = {
        d._offset: (d._error_kind, d._error)
        for d in delta.read(spark, str(tmp_path / "dlq")).collect()
    }
    assert dead[1][0] == "bad_column_name" and "'id' and 'ID' differ only in case" in dead[1][1]
    assert dead[2] == ("too_deep", "column 'deep' nests 70 levels deep (limit 32)")
    assert dead[3][0] == "reserved_column" and "['_op']" in dead[3][1]
    assert dead[4][0] == "bad_column_name" and "'a b'" in dead[4][1]
    assert dead[5][0] == "bad_column_name" and "300 characters" in dead[5][1]

    schema = delta.table_schema(uri)
    assert schema["tags"].dataType == ArrayType(StringType())
    assert schema["doc"].dataType == StringType()
    assert "void" not in schema.simpleString()
    assert _readable_everywhere(spark, uri) == 2
    rows = {r.id: (r.tags, r.doc) for r in delta.read(spark, uri).collect()}
    assert rows == {0: ([], '{"k":1}'), 6: (["a"], "[1,2]")}

    # the next batch goes on (no crash loop on a record), and a replay changes nothing
    again = [("cdc", 0, 7, None, _change(7, {"id": 7, "tags": [1]}), T0)]
    sink.process(_raw(spark, again), 1)
    version = delta.latest_version(uri)
    sink.process(_raw(spark, again), 1)
    assert delta.latest_version(uri) == version
    assert _readable_everywhere(spark, uri) == 3


# ------------------------------------------------------------------------------ type changes


def _items_sink(tmp_path, name: str = "items", key: str = "id") -> tuple[BuildSink, str]:
    uri = str(tmp_path / name)
    sink = BuildSink(
        [BuildTarget(uri, key_columns=(key,))],
        dead_letter_table=str(tmp_path / "dlq"),
        pipeline_id="ingest",
    )
    return sink, uri


def _dead(spark, tmp_path) -> dict[int, tuple[str, str]]:
    return {
        d._offset: (d._error_kind, d._error)
        for d in delta.read(spark, str(tmp_path / "dlq")).collect()
    }


def test_schemaless_numbers_that_grow_widen_their_column_instead_of_blocking(spark, tmp_path):
    from decimal import Decimal

    from pyspark.sql.types import ArrayType, DecimalType, DoubleType, LongType

    sink, uri = _items_sink(tmp_path)
    first = {"id": 1, "x": 1, "y": 5, "arr": [1]}
    sink.process(_raw(spark, [("cdc", 0, 0, None, _change(0, first), T0)]), 0)
    schema = delta.table_schema(uri)
    assert (schema["x"].dataType, schema["y"].dataType) == (LongType(), LongType())

    # 1 then 1.5, 5 then 2^70, [1] then [0.5]: each column widens, nothing is blocked
    grown = {"id": 2, "x": 1.5, "y": 2**70, "arr": [0.5]}
    batch = _raw(spark, [("cdc", 0, 1, None, _change(1, grown), T0)])
    report = sink.process(batch, 1)
    assert report.dead_lettered == 0
    schema = delta.table_schema(uri)
    assert schema["x"].dataType == DoubleType()
    assert schema["y"].dataType == DecimalType(38, 0)
    assert schema["arr"].dataType == ArrayType(DoubleType())
    assert not delta.get_properties(uri).get(PROP_SCHEMA_BLOCK)
    rows = {r.id: (r.x, r.y, r.arr) for r in delta.read(spark, uri).collect()}
    assert rows == {1: (1.0, Decimal(5), [1.0]), 2: (1.5, Decimal(2**70), [0.5])}
    version = delta.latest_version(uri)
    assert "columns widened" in delta.history(uri, limit=2)[1].metadata["lakehouse.reason"]
    sink.process(batch, 1)  # a replay: the table is wide already, and the batch committed
    assert delta.latest_version(uri) == version

    # an integer goes into the double column when a double holds it exactly; one beyond
    # 2^53 that it does not is dead-lettered with the value, never rounded
    later = [
        ("cdc", 0, 2, None, _change(2, {"id": 3, "x": 7}), T0),
        ("cdc", 0, 3, None, _change(3, {"id": 4, "x": 2**53 + 1}), T0),
    ]
    report = sink.process(_raw(spark, later), 2)
    assert report.dead_lettered == 1
    kind, reason = _dead(spark, tmp_path)[3]
    assert kind == "invalid_value" and "holds 9007199254740993" in reason
    assert {r.id: r.x for r in delta.read(spark, uri).collect()}[3] == 7.0
    assert _readable_everywhere(spark, uri) == 3


def test_a_wider_connect_type_widens_the_column_and_a_payload_only_record_reads_with_it(
    spark, tmp_path
):
    from pyspark.sql.types import FloatType, IntegerType, LongType

    sink, uri = _items_sink(tmp_path)
    typed = {"id": ("int32", 1), "qty": ("int32", 5), "price": ("float", 1.5)}
    sink.process(_raw(spark, [("cdc", 0, 0, None, _typed_change(0, typed), T0)]), 0)
    schema = delta.table_schema(uri)
    assert (schema["qty"].dataType, schema["price"].dataType) == (IntegerType(), FloatType())

    # the source widened qty (ALTER COLUMN TYPE bigint), then a record came without schema:
    # it is read with the schema the stream's last records brought (no inference, so its
    # price stays float and its id int)
    wider = {"id": ("int32", 2), "qty": ("int64", 3_000_000_000), "price": ("float", 2.5)}
    records = [
        ("cdc", 0, 1, None, _typed_change(1, wider), T0),
        ("cdc", 0, 2, None, _change(2, {"id": 3, "qty": 6, "price": 0.25}), T0),
    ]
    assert sink.process(_raw(spark, records), 1).dead_lettered == 0
    schema = delta.table_schema(uri)
    assert schema["qty"].dataType == LongType()
    assert (schema["id"].dataType, schema["price"].dataType) == (IntegerType(), FloatType())
    rows = {r.id: (r.qty, r.price) for r in delta.read(spark, uri).collect()}
    assert rows == {1: (5, 1.5), 2: (3_000_000_000, 2.5), 3: (6, 0.25)}
    assert _readable_everywhere(spark, uri) == 3


def test_a_widening_that_would_lose_a_stored_value_blocks_and_names_it(spark, tmp_path):
    sink, uri = _items_sink(tmp_path)
    stored = {"id": 1, "x": 2**53 + 1}
    sink.process(_raw(spark, [("cdc", 0, 0, None, _change(0, stored), T0)]), 0)
    sink.process(_raw(spark, [("cdc", 0, 1, None, _change(1, {"id": 2, "x": 0.5}), T0)]), 1)
    kind, reason = _dead(spark, tmp_path)[1]
    assert kind == "schema_mismatch"
    assert "holds 9007199254740993 (not exact as double)" in reason
    assert delta.get_properties(uri)[PROP_SCHEMA_BLOCK]
    assert delta.table_schema(uri)["x"].dataType.simpleString() == "bigint"


def test_the_join_output_widens_with_its_build_table(spark, tmp_path):
    from test_snapshot_signals import _join, _orders

    sink, uri = _items_sink(tmp_path, "rates", key="currency")
    snap = _change(0, {"currency": "EUR", "rate": 1}, op="r", snapshot="last")
    sink.process(_raw(spark, [("cdc", 0, 0, None, snap, T0)]), 0)
    assert phase_of(delta.get_properties(uri)) == "complete"
    join, s = _join(tmp_path, uri), Stream()
    join.process(_orders(spark, s, [(1, "EUR")]), 0)

    sink.process(
        _raw(spark, [("cdc", 0, 1, None, _change(1, {"currency": "EUR", "rate": 1.5}), T0)]), 1
    )
    join.process(_orders(spark, s, [(2, "EUR")]), 1)
    out = str(tmp_path / "out")
    assert delta.table_schema(out)["rate"].dataType.simpleString() == "double"
    assert {r.id: r.rate for r in delta.read(spark, out).collect()} == {1: 1.0, 2: 1.5}
    assert _readable_everywhere(spark, out) == 2


# ------------------------------------------------------------------------ state that only grows


def test_with_auto_compaction_tiny_batches_leave_a_bounded_number_of_live_files(spark, tmp_path):
    # a join's output table gets a small file per micro-batch; with Delta's auto compaction
    # on the table they are folded together as they pile up, and exactly-once still holds
    uri = str(tmp_path / "out")
    delta.create_table(uri, spark.range(0).schema, properties={AUTO_COMPACT: "true"})
    previous = spark.conf.get("spark.databricks.delta.autoCompact.minNumFiles", None)
    spark.conf.set("spark.databricks.delta.autoCompact.minNumFiles", "6")
    try:
        for b in range(20):
            with delta.batch_scope():
                delta.append(spark.range(b, b + 1), uri, txn=("p", b), metadata={})
    finally:
        if previous is None:
            spark.conf.unset("spark.databricks.delta.autoCompact.minNumFiles")
        else:
            spark.conf.set("spark.databricks.delta.autoCompact.minNumFiles", previous)
    assert delta.get_properties(uri)[AUTO_COMPACT] == "true"
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{uri}`").first()
    assert detail["numFiles"] <= 6
    assert sorted(r.id for r in delta.read(spark, uri).collect()) == list(range(20))
    assert delta.transaction_version(uri, "p") == 19  # exactly once through the compactions


def test_appends_compact_small_files_every_so_many_versions_by_default(spark, tmp_path):
    # a micro-batch appends a file or two each batch; every compact_every versions they are
    # bin-packed (a commit that changes no rows), so readers open a bounded number of files
    uri = str(tmp_path / "out")
    delta.create_table(uri, spark.range(0).schema)
    for b in range(25):
        with delta.batch_scope():
            delta.append(spark.range(b, b + 1), uri, txn=("p", b), compact_every=10)
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{uri}`").first()
    assert detail["numFiles"] <= 10 + 1  # one compacted file and the batches since; else 25
    compactions = [c for c in delta.history(uri, limit=40) if c.operation == "OPTIMIZE"]
    assert len(compactions) == 2
    assert all(c.metadata["lakehouse.reason"] == "compacted small files" for c in compactions)
    assert sorted(r.id for r in delta.read(spark, uri).collect()) == list(range(25))
    assert delta.transaction_version(uri, "p") == 24  # exactly once through the compactions
    version = delta.latest_version(uri)
    assert delta.append(spark.range(24, 25), uri, txn=("p", 24)).skipped
    assert delta.latest_version(uri) == version
    assert delta.compact_files(uri) == version + 1  # by hand: the rest, in one file
    assert delta.compact_files(uri) is None  # nothing left to compact: no commit
    assert _readable_everywhere(spark, uri) == 25
