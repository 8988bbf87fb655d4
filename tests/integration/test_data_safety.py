"""No record and no operator mistake may wipe, corrupt or silently skip data (issue 18).

Each case builds its hostile input in the test and hands it to the real batch handlers (the
ingest's ``BuildSink``, the join's ``TemporalJoin``) or the installed command, on real Spark
and real Delta tables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_snapshot_signals import T0, Stream, _rates, _raw, _sink, _target

from lakehouse import delta
from lakehouse.checkpoint import META_CHECKPOINT, META_CHECKPOINT_ID, checkpoint_id
from lakehouse.delta.table import AUTO_COMPACT
from lakehouse.dimension import BuildSink, BuildTarget
from lakehouse.dimension import layout as L
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
        order = (r[L.EVENT_TIME], r[L.SEQ])
        if r.currency not in latest or order > latest[r.currency][0]:
            latest[r.currency] = (order, r[L.OP])
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
    assert phase_of(props) == "complete" and props[L.PROP_SNAPSHOT_COMPLETE] == "true"
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
    assert "would end 76 of 80" in props[L.PROP_SNAPSHOT_ALERT]
    assert read_build_channel(uri).version == complete
    assert _live_keys(spark, uri) == set(KEYS)

    # the operator says the source really lost them: the same batch commits and ends them
    sink = _sink(tmp_path, _target(tmp_path, resnapshot_max_ended=1.0))
    report = sink.process(_raw(spark, rest), 2)
    assert report.targets[0].marker_set_now and report.targets[0].synthetic_deletes == 76
    assert _live_keys(spark, uri) == set(KEYS[:4])
    assert delta.get_properties(uri)[L.PROP_SNAPSHOT_ALERT] == ""


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


def _lakehouse(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed ``lakehouse`` command, as a user runs it."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "lakehouse"), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "4000"},
        check=False,
    )


@pytest.mark.slow
def test_a_pipeline_id_is_refused_a_checkpoint_it_did_not_commit_from(spark, tmp_path):
    cdc = tmp_path / "cdc"
    cdc.mkdir()
    t = _rates()
    snap = t.snapshot([{"currency": c, "rate": "1.0"} for c in ("EUR", "GBP", "JPY")])
    (cdc / "0001.jsonl").write_text("".join(json.dumps(m.value) + "\n" for m in snap))
    table = str(tmp_path / "rates")
    first = _lakehouse(
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
    fresh = _lakehouse(
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
    other = _lakehouse(
        "ingest", "-c", str(_ingest_config(tmp_path, cdc, pipeline="other", checkpoint="ck-other"))
    )
    assert other.returncode == 0, other.stderr
    swapped = _lakehouse(
        "ingest", "-c", str(_ingest_config(tmp_path, cdc, pipeline="rates", checkpoint="ck-other"))
    )
    assert swapped.returncode == 1
    assert "is another one (query id" in swapped.stderr and "Traceback" not in swapped.stderr

    # its own checkpoint continues it; every commit names the checkpoint it came from
    again = _lakehouse(
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
        build_uri=target.table_uri,
        output_uri=str(tmp_path / "out"),
        pending_uri=str(tmp_path / "pending"),
        dead_letter_uri=str(tmp_path / "join_dlq"),
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
        output_uri=options.output_uri,
        pending_uri=options.pending_uri,
        dead_letter_uri=options.dead_letter_uri,
        pipeline_id="join",
    )
    assert state.probe_max_ts_ms == 1_700_000_002_000


def test_a_build_change_from_the_far_future_is_dead_lettered_not_a_version(spark, tmp_path):
    t, s, target, sink, _ = _loaded(spark, tmp_path)
    uri = target.table_uri
    watermark = read_build_channel(uri).event_watermark_ms
    t.advance(3 * 10**12)  # source.ts_ms in the year 2118: a wrong clock
    report = sink.process(_raw(spark, s.records([t.update({"currency": "C07", "rate": "9"})])), 1)
    assert report.targets[0].rows == 0 and report.dead_lettered == 1
    dead = delta.read(spark, str(tmp_path / "dlq")).collect()
    assert [d._error_kind for d in dead] == ["future_event_time"]
    assert "max_future_ms" in dead[0]._error
    assert read_build_channel(uri).event_watermark_ms == watermark  # it did not move


# ---------------------------------------------------------------- records that change a schema


def _change(i: int, after: dict, *, op: str = "u") -> bytes:
    """A schemaless Debezium change (no Connect schema, as with ``schemas.enable=false``)."""
    return json.dumps(
        {
            "op": op,
            "before": None,
            "after": after,
            "source": {"ts_ms": 1_700_000_000_000 + i, "db": "shop", "table": "items"},
            "ts_ms": 1_700_000_000_000 + i,
        }
    ).encode()


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
        dead_letter_uri=str(tmp_path / "dlq"),
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
