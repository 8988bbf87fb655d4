"""lakehouse.delta on real Delta tables on disk, read and written through Spark."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable
from helpers import assert_table_at_version

from lakehouse import delta
from lakehouse.delta import _engine, write
from lakehouse.errors import SchemaMismatchError, TableNotFoundError

pytestmark = pytest.mark.spark


def _rows(spark, start: int, end: int):
    return spark.sql(
        f"SELECT id, CAST(id AS STRING) AS name, timestamp_millis(id * 1000) AS ts, "
        f"CAST(id / 4 AS DECIMAL(12, 3)) AS amount FROM range({start}, {end})"
    )


def test_replayed_append_leaves_table_unchanged(spark, tmp_path):
    uri = str(tmp_path / "t")
    first = delta.append(_rows(spark, 0, 5), uri, txn=("job", 0), metadata={"lakehouse.batchId": 0})
    # same app id and batch id: Spark replaying batch 0 after a crash
    replay = delta.append(_rows(spark, 0, 5), uri, txn=("job", 0))
    assert replay.skipped and replay.version == first.version
    # an older batch id is a replay too
    delta.append(_rows(spark, 5, 6), uri, txn=("job", 1))
    assert delta.append(_rows(spark, 0, 5), uri, txn=("job", 0)).skipped
    assert delta.transaction_version(uri, "job") == 1
    assert_table_at_version(spark, uri, None, [(i,) for i in range(6)], columns=["id"])


def test_writers_with_different_app_ids_do_not_skip_each_other(spark, tmp_path):
    uri = str(tmp_path / "t")
    delta.append(_rows(spark, 0, 2), uri, txn=("a", 3))
    assert not delta.append(_rows(spark, 2, 4), uri, txn=("b", 0)).skipped
    assert delta.read(spark, uri).count() == 4


def test_time_travel_returns_old_rows_after_later_appends(spark, tmp_path):
    uri = str(tmp_path / "t")
    v1 = delta.append(_rows(spark, 0, 3), uri).version
    v2 = delta.append(_rows(spark, 3, 7), uri).version
    delta.overwrite(_rows(spark, 100, 101), uri)
    assert_table_at_version(spark, uri, v1, [(0,), (1,), (2,)], columns=["id"])
    assert_table_at_version(spark, uri, v2, [(i,) for i in range(7)], columns=["id"])
    assert_table_at_version(spark, uri, None, [(100,)], columns=["id"])


def test_values_round_trip_with_types(spark, tmp_path):
    uri = str(tmp_path / "t")
    delta.append(_rows(spark, 4, 5), uri)
    row = delta.read(spark, uri).collect()[0]
    assert row.name == "4" and str(row.amount) == "1.000"
    assert row.ts.isoformat().startswith("1970-01-01T00:00:04")
    assert delta.read(spark, uri).schema.simpleString() == (
        "struct<id:bigint,name:string,ts:timestamp,amount:decimal(12,3)>"
    )


def test_empty_write_still_records_transaction_and_metadata(spark, tmp_path):
    uri = str(tmp_path / "t")
    delta.append(_rows(spark, 0, 1), uri, txn=("job", 0))
    result = delta.append(
        _rows(spark, 0, 0), uri, txn=("job", 1), metadata={"lakehouse.batchId": 1}
    )
    assert not result.skipped and result.rows == 0
    assert delta.transaction_version(uri, "job") == 1
    assert delta.history(uri, limit=1)[0].metadata == {"lakehouse.batchId": "1"}


def test_property_set_is_read_back_with_reason_in_history(spark, tmp_path):
    uri = str(tmp_path / "t")
    delta.create_table(uri, _rows(spark, 0, 0).schema, properties={"lakehouse.primaryKey": "id"})
    version = delta.set_properties(
        uri, {"lakehouse.snapshot.complete": "true"}, metadata={"lakehouse.reason": "test"}
    )
    props = delta.get_properties(uri)
    assert props["lakehouse.snapshot.complete"] == "true"
    assert props["lakehouse.primaryKey"] == "id"
    assert delta.get_properties(uri, version=0).get("lakehouse.snapshot.complete") is None
    assert delta.commit_info(uri, version).metadata == {"lakehouse.reason": "test"}


def test_commit_metadata_keys_must_be_namespaced(spark, tmp_path):
    with pytest.raises(ValueError, match=r"must start with 'lakehouse\.'"):
        delta.append(_rows(spark, 0, 1), str(tmp_path / "t"), metadata={"batchId": 1})


def test_schema_merge_adds_nullable_column_and_old_rows_read_null(spark, tmp_path):
    uri = str(tmp_path / "t")
    delta.append(spark.sql("SELECT 1L AS id"), uri)
    delta.append(spark.sql("SELECT 2L AS id, 'x' AS extra"), uri, schema_mode="merge")
    assert sorted(delta.read(spark, uri).collect()) == [(1, None), (2, "x")]


def test_new_column_refused_in_strict_mode(spark, tmp_path):
    uri = str(tmp_path / "t")
    delta.append(spark.sql("SELECT 1L AS id"), uri)
    with pytest.raises(SchemaMismatchError, match="lacks column"):
        delta.append(spark.sql("SELECT 2L AS id, 'x' AS extra"), uri)


def test_type_change_is_refused_naming_column_and_types(spark, tmp_path):
    uri = str(tmp_path / "t")
    delta.append(spark.sql("SELECT 1L AS id"), uri)
    with pytest.raises(SchemaMismatchError, match=r"column 'id' has type bigint.*string"):
        delta.append(spark.sql("SELECT 'a' AS id"), uri, schema_mode="merge")
    assert delta.read(spark, uri).collect() == [(1,)]


def test_table_with_deletion_vectors_is_read_by_delta_not_by_its_files(spark, tmp_path):
    # deletion vectors hide rows the files still hold: the file-level read (the row-time
    # join's caches) must not be used, and Delta's own read must not show the deleted row
    uri = str(tmp_path / "t")
    delta.append(_rows(spark, 0, 4).coalesce(1), uri)
    assert delta.snapshot(uri).readable_by_files()
    spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = true)")
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id = 1")
    snap = delta.snapshot(uri)
    assert not snap.readable_by_files()
    for df in (delta.read(spark, uri), delta.read_files(spark, snap, version=snap.version)):
        assert sorted(r.id for r in df.collect()) == [0, 2, 3]


def test_one_snapshot_answers_version_properties_history_and_transactions(
    spark, tmp_path, monkeypatch
):
    uri = str(tmp_path / "t")
    assert not delta.snapshot(uri).exists
    delta.append(_rows(spark, 0, 2), uri, txn=("job", 4), metadata={"lakehouse.batchId": 4})
    delta.set_properties(uri, {"lakehouse.x": "1"}, metadata={"lakehouse.reason": "r"})
    reads = _engine.LOG_READS[uri]
    snap = delta.snapshot(uri)
    assert (snap.version, snap.properties["lakehouse.x"]) == (1, "1")
    assert [c.metadata for c in snap.commits(5)] == [
        {"lakehouse.reason": "r"},
        {"lakehouse.batchId": "4"},
    ]
    assert snap.commit(0).app_transactions == {"job": 4} and snap.commit(0).rows == 2
    assert snap.find(5, batchId="4").version == 0 and snap.find(5, batchId="5") is None
    assert snap.transaction_version("job") == 4 and snap.records("job", 3)
    assert [f.name for f in snap.schema.fields] == ["id", "name", "ts", "amount"]
    assert _engine.LOG_READS[uri] == reads + 1  # all of it from one look at the log

    def rebuilt(_snapshot):
        raise AssertionError("Delta's state was rebuilt")

    # its commits are its whole history: an application none of them records has none
    monkeypatch.setattr(_engine, "transactions", rebuilt)
    assert snap.transaction_version("other") is None and not snap.records("other", 0)


def test_a_commit_is_read_from_storage_once_per_process(spark, tmp_path, monkeypatch):
    """Later snapshots reuse the parsed commits; a table created again in the same place (a
    new table id) is read afresh, never answered from the old table's commits."""
    import collections
    import shutil

    from lakehouse.delta import log

    uri = str(tmp_path / "t")
    delta.append(_rows(spark, 0, 2), uri, txn=("job", 0), metadata={"lakehouse.batchId": 0})
    delta.append(_rows(spark, 2, 3), uri, txn=("job", 1), metadata={"lakehouse.batchId": 1})
    monkeypatch.setattr(log, "_PARSED_COMMITS", collections.OrderedDict())  # a new process
    read: list[int] = []
    commit_lines = _engine.commit_lines
    monkeypatch.setattr(_engine, "commit_lines", lambda *a: read.append(a[2]) or commit_lines(*a))
    want = [{"lakehouse.batchId": "1"}, {"lakehouse.batchId": "0"}]
    assert [c.metadata for c in delta.snapshot(uri).commits(5)] == want and read == [1, 0]
    assert [c.metadata for c in delta.snapshot(uri).commits(5)] == want and read == [1, 0]
    # `lakehouse repair` removes a torn newest commit, and the version is written again
    for pattern in (f"{1:020d}.*", f".{1:020d}.*"):  # with the local file system's .crc
        for f in Path(uri, "_delta_log").glob(pattern):
            f.unlink()
    delta.append(_rows(spark, 2, 3), uri, txn=("job", 1), metadata={"lakehouse.batchId": 9})
    assert delta.snapshot(uri).commit(1).metadata == {"lakehouse.batchId": "9"}
    shutil.rmtree(uri)
    delta.append(_rows(spark, 0, 1), uri, txn=("other", 7), metadata={"lakehouse.batchId": 7})
    again = delta.snapshot(uri)
    assert [c.metadata for c in again.commits(5)] == [{"lakehouse.batchId": "7"}]
    assert again.commit(0).app_transactions == {"other": 7}


def test_missing_table_and_version_are_named(spark, tmp_path):
    with pytest.raises(TableNotFoundError, match="no Delta table at"):
        delta.read(spark, str(tmp_path / "nope"))
    uri = str(tmp_path / "t")
    delta.append(_rows(spark, 0, 1), uri)
    with pytest.raises(TableNotFoundError, match="version 9"):
        delta.read(spark, uri, version=9)


def test_other_delta_reader_reads_what_we_write(spark, tmp_path):
    # interop: delta-rs' own reader (not Spark) sees the same rows and statistics
    uri = str(tmp_path / "t")
    delta.append(_rows(spark, 0, 10), uri)
    dt = DeltaTable(uri)
    assert dt.count() == 10
    actions = dt.get_add_actions(flatten=True)
    names = actions.schema.names
    assert "min.id" in names and "max.id" in names


def test_status_reads_the_log_without_starting_spark(spark, tmp_path):
    # a read-only command on a laptop: delta-rs reads the log, no JVM starts
    import subprocess
    import sys

    uri = str(tmp_path / "t")
    delta.append(_rows(spark, 0, 3), uri, txn=("job", 0), metadata={"lakehouse.batchId": 0})
    delta.set_properties(uri, {"lakehouse.primaryKey": "id"}, metadata={"lakehouse.reason": "r"})
    script = (
        "import sys\n"
        "from lakehouse import delta\n"
        "from lakehouse.cli import main\n"
        f"uri = {uri!r}\n"
        "assert delta.latest_version(uri) == 1 and delta.row_count(uri) == 3\n"
        "assert delta.get_properties(uri)['lakehouse.primaryKey'] == 'id'\n"
        "assert [c.metadata for c in delta.history(uri)] == "
        "[{'lakehouse.reason': 'r'}, {'lakehouse.batchId': '0'}]\n"
        "assert delta.transaction_version(uri, 'job') == 0\n"
        "try:\n"
        "    main(['status', uri])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "from pyspark import SparkContext\n"
        "assert SparkContext._active_spark_context is None, 'Spark was started'\n"
        "print('NO-SPARK')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "NO-SPARK" in done.stdout and "reason=r" in done.stdout


def _commits(uri: str) -> list[dict]:
    """Each commit's actions, without what differs from one run to another: file names and
    times, the table's id, and metrics beside the row count."""
    import json

    out = []
    for path in sorted(Path(uri, "_delta_log").glob("*.json")):
        actions = []
        for line in path.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                info = action["commitInfo"]
                metrics = info.get("operationMetrics", {})
                action = {
                    "commitInfo": {
                        "operation": info["operation"],
                        "operationParameters": info["operationParameters"],
                        "userMetadata": info.get("userMetadata"),
                        "isBlindAppend": info.get("isBlindAppend"),
                        "rows": metrics.get("numOutputRows"),
                        "removed": metrics.get("numRemovedFiles"),
                        "removedBytes": metrics.get("numRemovedBytes"),
                    }
                }
            elif "txn" in action:
                action["txn"].pop("lastUpdated")
            elif "add" in action:
                action = {"add": json.loads(action["add"]["stats"])["numRecords"]}
            elif "remove" in action:
                action = {"remove": action["remove"]["size"]}
            elif "metaData" in action:
                action["metaData"].pop("id")
                action["metaData"].pop("createdTime")
            actions.append(action)
        out.append(sorted(actions, key=lambda a: json.dumps(a, sort_keys=True)))
    return out


def test_a_direct_write_commits_what_delta_s_writer_commits(spark, tmp_path, monkeypatch):
    """An idempotent write to an existing table commits on the batch's snapshot, without
    Delta's own look-up of the transaction (``spark.lakehouse.directWrite``): its commits are
    the writer's, action for action (a new column merged, an overwrite, an empty batch), and
    a replay is skipped alike. A table of full overwrites (a join's pending table) is
    overwritten without Delta listing its files: its commits name them."""
    from pyspark.sql import functions as F

    def run(uri: str) -> None:
        delta.append(_rows(spark, 0, 3), uri, txn=("job", 0))
        delta.append(_rows(spark, 3, 5), uri, txn=("job", 1), metadata={"lakehouse.batchId": 1})
        wider = _rows(spark, 5, 6).withColumn("note", F.lit("x"))
        delta.append(wider, uri, txn=("job", 2), schema_mode="merge")
        assert delta.append(_rows(spark, 0, 9), uri, txn=("job", 2)).skipped
        delta.append(_rows(spark, 0, 0), uri, txn=("job", 3), metadata={"lakehouse.batchId": 3})
        delta.overwrite(_rows(spark, 7, 8), uri, txn=("pending", 4))
        pending = uri + "-pending"
        delta.overwrite(_rows(spark, 0, 2), pending, txn=("p", 0))
        delta.overwrite(
            _rows(spark, 2, 4).repartition(2), pending, txn=("p", 1), metadata={"lakehouse.a": 1}
        )
        delta.set_properties(pending, {"lakehouse.x": "1"})
        delta.overwrite(_rows(spark, 4, 7), pending, txn=("p", 2))
        assert delta.overwrite(_rows(spark, 0, 9), pending, txn=("p", 2)).skipped
        assert sorted(r.id for r in delta.read(spark, pending).collect()) == [4, 5, 6]

    spark.conf.set(write.DIRECT_WRITE_CONF, "false")
    try:
        run(str(tmp_path / "writer"))
    finally:
        spark.conf.unset(write.DIRECT_WRITE_CONF)
    direct = []
    real = _engine.write_on

    def counted(*args, **kwargs):
        direct.append(kwargs.get("replacing") is not None)
        return real(*args, **kwargs)

    monkeypatch.setattr(_engine, "write_on", counted)
    run(str(tmp_path / "direct"))
    # every write but a table's first and the replays; the pending table's files from commits
    assert direct == [False, False, False, False, True, True]
    for name in ("", "-pending"):
        assert _commits(str(tmp_path / f"direct{name}")) == _commits(
            str(tmp_path / f"writer{name}")
        )
    assert len(_commits(str(tmp_path / "direct"))) == 5

    # the overwrite counts the whole table as read: an append committed after its snapshot
    # fails it in Delta's conflict check, as it fails Delta's own overwrite
    pending = str(tmp_path / "direct-pending")
    snap = delta.snapshot(pending)
    staged = _engine.stage_on(
        spark,
        snap._log,
        snap._jsnapshot,
        _rows(spark, 0, 1)._jdf,
        mode="overwrite",
        options={"txnAppId": "p", "txnVersion": "3"},
        replacing=snap.live_adds(),
    )
    delta.append(_rows(spark, 9, 10), pending)
    with pytest.raises(Exception, match="CONCURRENT_APPEND"):
        _engine.commit_on(staged, None)


def test_a_staged_append_commits_what_append_commits(spark, tmp_path):
    """An append staged (its files written first, counted by the write itself, its metadata
    given at the commit) commits what :func:`delta.append` commits, action for action; a
    replay, a missing table and a type to widen are not staged; a discarded one leaves no
    file; a second copy of the pipeline committing the batch first wins."""
    from pyspark.sql import functions as F

    stats = [F.max("id").alias("m"), F.count(F.lit(1)).alias("n")]
    wider = _rows(spark, 5, 6).withColumn("note", F.lit("x"))
    plain, staged = str(tmp_path / "plain"), str(tmp_path / "staged")
    for uri in (plain, staged):
        delta.append(_rows(spark, 0, 3), uri, txn=("job", 0))
    delta.append(_rows(spark, 3, 5), plain, txn=("job", 1), metadata={"lakehouse.batchId": 1})
    delta.append(wider, plain, txn=("job", 2), schema_mode="merge", max_files=1)

    assert delta.stage_append(_rows(spark, 0, 1), str(tmp_path / "none"), txn=("job", 1)) is None
    first = delta.stage_append(_rows(spark, 3, 5), staged, txn=("job", 1), observe=stats)
    assert first is not None and first.metrics() == {"m": 4, "n": 2}
    assert delta.latest_version(staged) == 0  # written, not committed
    result = first.commit({"lakehouse.batchId": 1})
    assert (result.version, result.rows, result.skipped) == (1, 2, False)
    assert delta.stage_append(_rows(spark, 0, 9), staged, txn=("job", 1)) is None  # a replay
    second = delta.stage_append(wider, staged, txn=("job", 2), schema_mode="merge", max_files=1)
    assert second is not None and second.metrics() is None  # nothing observed
    second.commit()
    assert _commits(staged) == _commits(plain)

    # widening a column commits before the data: not staged
    longer = _rows(spark, 6, 7).withColumn("amount", F.col("amount").cast("decimal(20,3)"))
    assert delta.stage_append(longer, staged, txn=("job", 3), schema_mode="widen") is None

    def data_files(uri: str) -> set[str]:
        return {p.name for p in Path(uri).glob("*.parquet")}

    before = data_files(staged)
    dropped = delta.stage_append(_rows(spark, 7, 9), staged, txn=("job", 3))
    assert dropped is not None and data_files(staged) > before
    dropped.discard()
    assert data_files(staged) == before and delta.latest_version(staged) == 2

    # a second copy of the pipeline commits batch 3 after this one staged it: written once
    late = delta.stage_append(_rows(spark, 7, 9), staged, txn=("job", 3))
    assert late is not None
    delta.append(_rows(spark, 7, 9), staged, txn=("job", 3))
    assert late.commit({"lakehouse.batchId": 3}).skipped
    assert delta.latest_version(staged) == 3 and delta.row_count(staged) == 8


def test_a_staged_creation_commits_the_table_its_properties_and_rows_at_once(spark, tmp_path):
    """Rows staged where no table is yet, with the properties of the table to create: their
    commit is version 0, with the properties, the rows and the transaction, beside a writer's
    lease (which makes Delta's ``CREATE TABLE`` refuse the location); nothing is a table
    before it. Not staged on an existing table; a discarded one leaves no file and no table;
    a second copy of the pipeline creating it first wins."""
    from pyspark.sql import functions as F

    from lakehouse.lease import lease_path

    uri = str(tmp_path / "t")
    Path(lease_path(uri)).parent.mkdir(parents=True)
    Path(lease_path(uri)).write_text("{}")
    props = {"lakehouse.tableKind": "build", "lakehouse.x": "1"}
    stats = [F.max("id").alias("m"), F.count(F.lit(1)).alias("n")]

    assert delta.stage_append(_rows(spark, 0, 3), uri, txn=("job", 0)) is None  # no table
    dropped = delta.stage_append(_rows(spark, 0, 3), uri, txn=("job", 0), create=props)
    assert dropped is not None and list(Path(uri).glob("*.parquet"))
    dropped.discard()
    assert not list(Path(uri).glob("*.parquet")) and not delta.table_exists(uri)

    staged = delta.stage_append(
        _rows(spark, 0, 3), uri, txn=("job", 0), observe=stats, create=props
    )
    assert staged is not None and staged.metrics() == {"m": 2, "n": 3}
    assert not delta.table_exists(uri)  # written, not committed
    result = staged.commit({"lakehouse.batchId": 0})
    assert (result.version, result.rows, result.skipped) == (0, 3, False)
    assert delta.get_properties(uri) == props
    assert delta.transaction_version(uri, "job") == 0
    assert sorted(r.id for r in delta.read(spark, uri).collect()) == [0, 1, 2]
    assert all(f.nullable for f in delta.snapshot(uri).schema.fields)
    assert delta.stage_append(_rows(spark, 3, 4), uri, txn=("job", 1), create=props) is None

    # a second copy of the pipeline creates the table with the same batch first: written once
    other = str(tmp_path / "other")
    late = delta.stage_append(_rows(spark, 0, 3), other, txn=("job", 0), create=props)
    assert late is not None
    delta.append(_rows(spark, 0, 3), other, txn=("job", 0), properties=props)
    assert late.commit({"lakehouse.batchId": 0}).skipped
    assert delta.row_count(other) == 3


def test_a_table_of_full_overwrites_tells_its_files_by_its_commits(spark, tmp_path):
    """The files a join's pending table reads come from its last overwrite's commit, and are
    the files Delta lists, across property sets; anything else is left to Delta."""
    from lakehouse.delta.log import local_path

    uri = str(tmp_path / "t")
    delta.create_table(uri, _rows(spark, 0, 0).schema, properties={"lakehouse.x": "1"})
    assert delta.snapshot(uri).files_by_commits() == ()
    delta.overwrite(_rows(spark, 0, 4).repartition(2), uri, txn=("p", 0))
    delta.set_properties(uri, {"lakehouse.y": "2"})
    delta.overwrite(_rows(spark, 4, 7).repartition(3), uri, txn=("p", 1))
    delta.set_properties(uri, {"lakehouse.y": "3"})
    snap = delta.snapshot(uri)
    told = snap.files_by_commits()
    assert told is not None and len(told) == 3
    assert sorted(told) == sorted(local_path(f) for f in delta.files_at(uri, snap.version))
    rows = delta.read_files(spark, snap, version=snap.version, overwritten=True)
    assert sorted(r.id for r in rows.collect()) == [4, 5, 6]
    delta.append(_rows(spark, 7, 8), uri, txn=("p", 2))
    assert delta.snapshot(uri).files_by_commits() is None  # an append: Delta lists
    delta.overwrite(_rows(spark, 8, 9), uri)
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id = 8")
    assert delta.snapshot(uri).files_by_commits() is None  # a delete


def test_a_due_checkpoint_is_written_beside_the_next_batch_not_inside_the_commit(spark, tmp_path):
    from lakehouse.delta import checkpointer

    uri = str(tmp_path / "t")
    logdir = tmp_path / "t" / "_delta_log"
    spark.sql(
        f"CREATE TABLE delta.`{uri}` (id BIGINT) USING delta "
        "TBLPROPERTIES ('delta.checkpointInterval' = '3')"
    )
    for batch in (1, 2):
        delta.append(spark.range(batch, batch + 1), uri, txn=("job", batch))
    tracker = spark.sparkContext.statusTracker()
    jobs_before = set(tracker.getJobIdsForGroup(checkpointer.JOB_GROUP))
    # while this thread holds the queue, the worker cannot take the checkpoint version 3 made due
    with checkpointer._cond:
        assert delta.append(spark.range(3, 4), uri, txn=("job", 3)).version == 3
        assert not (logdir / f"{3:020d}.checkpoint.parquet").exists()
    assert checkpointer.drain(timeout=300)
    assert (logdir / f"{3:020d}.checkpoint.parquet").exists()
    assert '"version":3' in (logdir / "_last_checkpoint").read_text()
    # its Spark jobs ran in the checkpointer's job group, not in the writer's
    assert set(tracker.getJobIdsForGroup(checkpointer.JOB_GROUP)) - jobs_before

    # turned off: Delta writes it inside the commit, as its writer does
    spark.conf.set(checkpointer.DEFER_CONF, "false")
    try:
        for batch in (4, 5, 6):
            with checkpointer._cond:
                delta.append(spark.range(batch, batch + 1), uri, txn=("job", batch))
        assert (logdir / f"{6:020d}.checkpoint.parquet").exists()
    finally:
        spark.conf.unset(checkpointer.DEFER_CONF)
    assert DeltaTable(uri).version() == 6
    assert sorted(r.id for r in spark.read.format("delta").load(uri).collect()) == list(range(1, 7))
